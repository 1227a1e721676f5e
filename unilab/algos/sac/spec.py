"""SAC's `[algo]` model (torch-free: the planner reads it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from unilab.sections import MaxEntropyAlgoSpec, Widths


class SacSpec(MaxEntropyAlgoSpec):
    """`[algo]` with `name = "sac"`: soft actor-critic, with FastSAC's large-batch options."""

    name: Literal["sac"] = Field(description="The learner algorithm.")
    actor_hidden_dims: Widths = Field((256, 256), min_length=1, description="Hidden layer widths of the actor.")
    critic_hidden_dims: Widths = Field(
        (256, 256), min_length=1, description="Hidden layer widths of each of the two Q networks."
    )
    activation: Literal["relu", "silu", "elu"] = Field("relu", description="Activation after each hidden layer.")
    critic: Literal["mse", "c51"] = Field("mse", description="Scalar twin-Q (`mse`) or C51 distributional critic.")
    layer_norm: bool = Field(False, description="LayerNorm after each hidden layer (FastSAC).")
    target_entropy: Annotated[float, Field(ge=-1e4, le=1e4)] | Literal["auto"] = Field(
        "auto", description="`auto`: -action_dim."
    )
    n_step: Annotated[int, Field(ge=1, le=64)] = Field(
        1,
        description="n-step return length: the critic's target sums n rewards before it bootstraps, so reward "
        "reaches the critic n times faster (RSL-RL-SAC and FastTD3 use n-step returns on legged robots).",
    )
