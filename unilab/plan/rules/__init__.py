"""The plan's rule catalog. Importing this package registers every rule, in catalog order."""

from unilab.plan.rules import devices, execution, host, learner, run, sharing, sync, task  # noqa: F401  (registration)
from unilab.plan.rules.registry import RULES, Rule

__all__ = ["RULES", "Rule"]
