"""TD3's `[algo]` model (torch-free: the planner reads it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from unilab.sections import MAX_COUNT, ReplayAlgoSpec, Widths


class Td3Spec(ReplayAlgoSpec):
    """`[algo]` with `name = "td3"`: TD3 (Fujimoto et al. 2018) with FastTD3's options (arXiv:2505.22642):
    a C51 distributional critic, clipped double Q, target policy smoothing, a delayed actor and
    per-env exploration noise scales."""

    name: Literal["td3"] = Field(description="The learner algorithm.")
    actor_hidden_dims: Widths = Field((256, 256), min_length=1, description="Hidden layer widths of the actor.")
    critic_hidden_dims: Widths = Field(
        (256, 256), min_length=1, description="Hidden layer widths of each of the two Q networks."
    )
    activation: Literal["relu", "silu", "elu"] = Field("relu", description="Activation after each hidden layer.")
    critic: Literal["mse", "c51"] = Field("c51", description="Scalar twin-Q (`mse`) or C51 distributional critic.")
    layer_norm: bool = Field(False, description="LayerNorm after each hidden layer.")
    actor_update_every: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        2, description="Delayed actor: one actor update every N critic updates (TD3's policy delay)."
    )
    tau: Annotated[float, Field(gt=0, le=1)] = Field(
        0.1, description="Polyak averaging rate of the target actor and critics (FastTD3's)."
    )
    clipped_double_q: bool = Field(
        True, description="Target from the lower of the two target critics (TD3); false: their mean."
    )
    n_step: Annotated[int, Field(ge=1, le=64)] = Field(1, description="n-step return length.")
    exploration_std_min: Annotated[float, Field(gt=0, le=1)] = Field(
        0.001, description="Lowest per-env exploration noise std (FastTD3 draws one per env and episode)."
    )
    exploration_std_max: Annotated[float, Field(gt=0, le=1)] = Field(
        0.4, description="Highest per-env exploration noise std."
    )
    target_noise_std: Annotated[float, Field(ge=0, le=1)] = Field(
        0.2, description="Target policy smoothing: noise std added to the target action."
    )
    target_noise_clip: Annotated[float, Field(ge=0, le=1)] = Field(
        0.5, description="Target policy smoothing: the noise is clipped to +- this."
    )

    @field_validator("exploration_std_max")
    @classmethod
    def _noise_range(cls, v: float, info: ValidationInfo) -> float:
        low = info.data.get("exploration_std_min")
        if low is not None and v < low:
            raise ValueError(f"must be at least exploration_std_min ({low})")
        return v
