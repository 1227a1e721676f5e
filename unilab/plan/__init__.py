"""The planner: spec + host facts -> an immutable, canonically rendered execution plan.

``unilab.plan`` is this package and also the Python API's function (unilab.plan.from_spec): calling the
package compiles a spec, so ``unilab.plan("specs/g1.toml")`` works whether or not a submodule
such as unilab.plan.models has been imported (which makes the attribute the package).
"""

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from unilab.plan.from_spec import plan

        return plan(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
