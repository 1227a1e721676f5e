"""A task's left-right mirror, as data: where each observation and action column of the mirrored
transition comes from, and its sign (`x'[i] = sign[i] * x[index[i]]`).

Torch-free (the planner asks whether a task has one). A task declares the mirror of each of its
observation terms (`TermMirror`, local to the term's columns) and of its actions; `compose` lays
them out over the observation as the run's collector reports its terms. Replay learners use it to
add each sampled transition's mirror image to the batch (`algo.mirror_augmentation`), as holosoma's
FastSAC G1 does: a walk learned on one side is learned on the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TermMirror:
    """One term's (or the actions') mirror over its own columns."""

    index: tuple[int, ...]
    sign: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.index) != len(self.sign) or sorted(self.index) != list(range(len(self.index))):
            raise ValueError(f"a mirror's index must be a permutation with a sign each, got {self.index}, {self.sign}")

    @staticmethod
    def signs(*sign: float) -> TermMirror:
        """Each column stays where it is, with this sign."""
        return TermMirror(tuple(range(len(sign))), tuple(float(s) for s in sign))


@dataclass(frozen=True)
class Mirror:
    """The whole observation's and the action's mirror."""

    obs_index: tuple[int, ...]
    obs_sign: tuple[float, ...]
    act_index: tuple[int, ...]
    act_sign: tuple[float, ...]


def compose(obs_terms: Sequence[tuple[str, int]], terms: Mapping[str, TermMirror], actions: TermMirror) -> Mirror:
    """The observation's mirror from its terms' (in the order and widths ``obs_terms`` gives)."""
    index: list[int] = []
    sign: list[float] = []
    start = 0
    for name, dim in obs_terms:
        m = terms.get(name)
        if m is None:
            raise ValueError(f"the observation term {name!r} has no mirror")
        if len(m.index) != dim:
            raise ValueError(f"the observation term {name!r} has {dim} columns, its mirror {len(m.index)}")
        index += [start + i for i in m.index]
        sign += m.sign
        start += dim
    return Mirror(tuple(index), tuple(sign), actions.index, actions.sign)


def joints_mirror(names: Sequence[str], mirror_joint: Callable[[str], tuple[str, float]]) -> TermMirror:
    """The mirror of per-joint columns in the order ``names`` lists the joints (``mirror_joint``:
    a joint's name -> its partner's name and the sign, e.g. `unilab.robot.g1.mirror_joint`)."""
    pos = {n: i for i, n in enumerate(names)}
    index, sign = [], []
    for n in names:
        partner, s = mirror_joint(n)
        if partner not in pos:
            raise ValueError(f"the joint {n!r} is mirrored by {partner!r}, which is not among the columns")
        index.append(pos[partner])
        sign.append(s)
    return TermMirror(tuple(index), tuple(sign))
