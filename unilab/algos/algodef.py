"""`AlgoDef`: what the planner and the runtime may ask of an algorithm, as data.

Torch-free (the planner imports it): the learner class is named by its import path and imported
only where a run builds it. Rules, the plan's resolution, init_from, export, eval, profile and the
manifest ask these questions instead of comparing `algo.name`s; adding an algorithm is one package
under `unilab/algos/` and one line in `unilab.algos.registry` (docs/extending.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from unilab.sections import AlgoSpecBase, ReplayAlgoSpec

Loop = Literal["offpolicy", "onpolicy"]
# A broken key rule: (condition, fix, the key path where it is not the rule's own).
Violation = tuple[str, str, str | None]


@dataclass(frozen=True)
class KeyRule:
    """A plan rule on an algorithm's own keys, kept in its package: ``check(spec)`` (the whole
    validated spec, whose `[algo]` is this algorithm's) returns what it finds broken.
    unilab.plan.rules.algo registers it under ``id`` in the plan's catalog (docs/rules.md)."""

    id: str
    key_path: str
    requires: str
    check: Callable[[Any], list[Violation]]


@dataclass(frozen=True)
class IgnoredKeys:
    """Keys an algorithm takes but ignores in some configurations (rule `algo.options` refuses them
    when the user wrote them): ``ignored(algo)`` says when, ``why`` and ``use`` make the message."""

    keys: tuple[str, ...]
    ignored: Callable[[Any], bool]
    why: str
    use: str


@dataclass(frozen=True)
class AlgoDef:
    name: str  # the spec's `algo.name`
    title: str  # how messages name it ("SAC")
    spec: type[AlgoSpecBase]  # its `[algo]` model (its package's spec.py)
    # "offpolicy": the learner of this package steps against a replay buffer beside a collector that
    # runs ahead of it (unilab.run.offpolicy); "onpolicy": a runner collects whole rollouts, then
    # updates while the collector waits (unilab.run.onpolicy).
    loop: Loop
    learner: str  # "module:Class", imported lazily by `learner_class`
    # The algo keys that shape the saved networks (and the observation normalizer): a run starts from
    # another's checkpoint only where they are equal.
    network_keys: Callable[[Any], tuple[str, ...]]
    # The starting value a loaded checkpoint replaces with what it learned (run.init_from), and what
    # it is; None where the checkpoint carries nothing a key starts.
    carried_key: str | None = None
    carried_what: str = ""
    # Where a third-party runner does the learning (None: unilab's own learner): it decides precision,
    # capture and the gradient all-reduce, so those requests are refused by naming it.
    external_runner: str | None = None
    n_step: Callable[[Any], int] = lambda algo: 1  # the replay's n-step return length
    # Syncs per collection unit: an on-policy rollout is `num_steps_per_env` syncs, updated as a whole.
    syncs_per_unit: Callable[[Any], int] = lambda algo: 1
    # Checkpoint layout: the state's key that holds the learner, and the actor's weights inside it.
    state_key: str = "learner"
    actor_key: str = "actor"
    # "module:function" (plan, state) -> (deployable policy, obs_dim): export and eval share it.
    policy: str = "unilab.algos.common:replay_policy"
    # Its distributional critic's support must contain 0 (its rewards are scaled into it).
    zero_centred_support: bool = False
    # Its critic may read observation terms its actor does not (`task.privileged_observations`, an
    # asymmetric actor-critic); None: where unilab's own replay learner learns (`actor_cols`).
    asymmetric: bool | None = None
    rules: tuple[KeyRule, ...] = ()  # plan rules on its own keys
    ignored_keys: tuple[IgnoredKeys, ...] = ()  # keys it ignores in some configurations
    # What docs/spec.md says above its keys (None: its spec model's docstring after the `[algo] ...:` lead).
    doc_note: str | None = None

    @property
    def overlaps_collector(self) -> bool:
        """Its updates run while the collector steps the physics (so CUDA process sharing pays)."""
        return self.loop == "offpolicy"

    @property
    def uses_replay(self) -> bool:
        """Its `[algo]` has the replay keys (batch, buffer, warm-up, updates per step)."""

        return issubclass(self.spec, ReplayAlgoSpec)

    @property
    def capturable_update(self) -> bool:
        """Its update cycle has fixed shapes and no host syncs: a CUDA graph can capture it."""
        return self.external_runner is None

    @property
    def gradient_wire(self) -> bool:
        """unilab all-reduces its gradients (unilab.dist), so a bfloat16 wire can carry them."""
        return self.external_runner is None

    @property
    def follows_precision(self) -> bool:
        """Its update runs in the plan's learner precision (bfloat16 where the host has the units)."""
        return self.external_runner is None

    @property
    def takes_privileged_observations(self) -> bool:
        """Its actor can do without the observation terms only its critic reads
        (`task.privileged_observations`): unilab's replay learners, and whatever sets `asymmetric`."""
        if self.asymmetric is not None:
            return self.asymmetric
        return self.external_runner is None and self.uses_replay

    def learner_class(self) -> Any:
        return _load(self.learner)

    def policy_loader(self) -> Callable[..., Any]:
        return _load(self.policy)  # type: ignore[no-any-return]


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)
