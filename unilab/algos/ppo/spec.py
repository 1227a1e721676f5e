"""PPO's `[algo]` model (torch-free: the planner reads it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from unilab.sections import MAX_COUNT, AlgoSpecBase, Coef, Rate, Widths


class PpoSpec(AlgoSpecBase):
    """`[algo]` with `name = "ppo"`: PPO through rsl-rl-lib's on-policy runner."""

    name: Literal["ppo"] = Field(description="The learner algorithm.")
    hidden_dims: Widths = Field(
        (256, 128, 64), min_length=1, description="Hidden layer widths of the actor and of the critic."
    )
    num_steps_per_env: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        24, description="Rollout length per env per iteration."
    )
    num_learning_epochs: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(5, description="Epochs over each rollout.")
    num_mini_batches: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(4, description="Minibatches per epoch.")
    learning_rate: Rate = Field(1e-3, description="Adam learning rate.")
    clip_param: Annotated[float, Field(gt=0, le=1)] = Field(0.2, description="PPO ratio clip.")
    entropy_coef: Coef = Field(0.01, description="Entropy bonus coefficient.")
    value_loss_coef: Coef = Field(1.0, description="Value loss coefficient.")
    lam: Annotated[float, Field(ge=0, le=1)] = Field(0.95, description="GAE lambda.")
    schedule: Literal["adaptive", "fixed"] = Field("adaptive", description="Learning-rate schedule (rsl-rl).")
    desired_kl: Annotated[float, Field(gt=0, le=1)] = Field(0.01, description="KL target of the adaptive schedule.")
    init_noise_std: Annotated[float, Field(gt=0, le=10)] = Field(1.0, description="Initial action noise std.")
    max_grad_norm: Annotated[float, Field(gt=0, le=1e6)] = Field(1.0, description="Gradient norm clip.")
