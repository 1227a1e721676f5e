"""`unilab eval`: a run's policy played deterministically for a fixed number of episodes.

``unilab.evaluate`` is this package and also the Python API's function (unilab.evaluate.call), as
``unilab.plan`` is: calling the package evaluates a run, whether or not a submodule such as
unilab.evaluate.models has been imported (which makes the attribute the package).
"""

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from unilab.evaluate.call import evaluate

        return evaluate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
