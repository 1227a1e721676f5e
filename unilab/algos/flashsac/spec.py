"""FlashSAC's `[algo]` model (torch-free: the planner reads it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from unilab.sections import MAX_COUNT, MaxEntropyAlgoSpec, Support, Widths


class FlashSacSpec(MaxEntropyAlgoSpec):
    """`[algo]` with `name = "flashsac"`: FlashSAC (arXiv:2604.04539)."""

    name: Literal["flashsac"] = Field(description="The learner algorithm.")
    batch_size: Annotated[int, Field(ge=1, le=1_048_576)] = Field(2048, description="Replay minibatch size.")
    updates_per_step: Annotated[float, Field(gt=0, le=1024)] = Field(
        0.5, description="Low update-to-data ratio: gradient updates per env step of one env batch."
    )
    actor_update_every: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        2, description="Actor updates every N critic updates."
    )
    num_blocks: Annotated[int, Field(ge=1, le=64)] = Field(2, description="Inverted-residual blocks per network.")
    expansion: Annotated[int, Field(ge=1, le=16)] = Field(4, description="Inverted-residual expansion factor.")
    n_step: Annotated[int, Field(ge=1, le=64)] = Field(3, description="n-step return length.")
    target_action_std: Annotated[float, Field(gt=0, le=1)] = Field(
        0.15, description="Entropy target derived from this fixed action std."
    )
    reward_scaling: bool = Field(True, description="Adaptive reward scaling.")
    alpha_init: Annotated[float, Field(gt=0, le=100)] = Field(
        0.01, description="Initial entropy temperature (the paper's)."
    )
    tau: Annotated[float, Field(gt=0, le=1)] = Field(
        0.01, description="Polyak averaging rate of the target critic (the paper's)."
    )
    v_min: Support = Field(-5.0, description="Lowest support value of the distributional critic (the paper's).")
    v_max: Support = Field(5.0, description="Highest support value of the distributional critic (the paper's).")
    actor_hidden_dims: Widths = Field(
        (256,), min_length=1, max_length=1, description="The actor's residual stream width (one entry)."
    )
    critic_hidden_dims: Widths = Field(
        (256,), min_length=1, max_length=1, description="Each Q network's residual stream width (one entry)."
    )
    hidden_dims: Widths | None = Field(
        None,
        min_length=1,
        max_length=1,
        exclude=True,
        description="Shorthand: actor_hidden_dims and critic_hidden_dims where those are not given (one entry).",
    )
