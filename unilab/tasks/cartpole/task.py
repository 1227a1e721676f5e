"""`cartpole`: keep a pole upright on a cart, a small check task.

Not a G1 task: it exists so that "learning through the runtime works" can be shown in about a
minute on a laptop (CI trains SAC on it, tests/test_learning.py), through exactly the same
collector, channel, learner and run directory as the G1 tasks. Real MuJoCo physics: a slider
joint with a force actuator, a hinged pole.

Observation (5): cart position, cos and sin of the pole angle (0 = upright), cart velocity, pole
angular velocity. Action (1): force on the cart in [-1, 1] (times the actuator gear). Reward per
second: upright (cos of the angle, mapped to [0, 1]) plus a small centring term, minus a small
action penalty. Terminated when the pole tilts past 0.8 rad or the cart leaves the rail; truncated
at the episode time limit. Reset: small random angle, position and velocities.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from unilab.tasks.cartpole import CARTPOLE, CARTPOLE_OBSERVATIONS, CARTPOLE_TERMINATIONS
from unilab.tasks.declarations import TermDecl
from unilab.tasks.terms import ObservationTerm, RewardTerm, TensorFn, TerminationTerm
from unilab.tasks.timing import max_episode_steps

if TYPE_CHECKING:
    from collections.abc import Sequence

    from unilab.sim.contract import PhysicsBackend, PhysicsState
    from unilab.tasks.cartpole.spec import CartpoleSpec

FALL_ANGLE = 0.8  # rad
RAIL_LIMIT = 1.8  # m
RESET_NOISE = 0.1


def cartpole_xml(timestep: float) -> str:
    return f"""<mujoco model="unilab-cartpole">
  <option timestep="{timestep}" integrator="implicitfast"/>
  <worldbody>
    <geom name="rail" type="capsule" fromto="-2 0 1 2 0 1" size="0.02" contype="0" conaffinity="0"/>
    <body name="cart" pos="0 0 1">
      <joint name="slider" type="slide" axis="1 0 0" damping="0.5"/>
      <geom name="cart" type="box" size="0.2 0.1 0.05" mass="1" contype="0" conaffinity="0"/>
      <body name="pole">
        <joint name="hinge" type="hinge" axis="0 1 0" damping="0.02"/>
        <geom name="pole" type="capsule" fromto="0 0 0 0 0 0.6" size="0.03" mass="0.2" contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="slider" gear="15" ctrlrange="-1 1" ctrllimited="true"/>
  </actuator>
</mujoco>
"""


# Names and order come from the planner-safe inventory (unilab.tasks.declarations).
OBSERVATIONS = tuple((n, 1) for n in CARTPOLE_OBSERVATIONS)
TERMINATIONS = tuple(zip(CARTPOLE_TERMINATIONS, (False, False, True), strict=True))


def build(
    spec: CartpoleSpec,
    backend: PhysicsBackend,
    layout: Any,
    *,
    step_dt: float,
    seed: int,
    spec_dir: Path,
) -> CartpoleTask:
    """The cart-pole over ``backend`` (its own model: ``layout`` is None)."""
    return CartpoleTask(spec, backend, step_dt=step_dt, seed=seed)


class CartpoleTask:
    """The collector-facing task interface of `unilab.tasks.base.Task`, for the cart-pole."""

    name = "cartpole"
    definition = CARTPOLE

    def __init__(self, spec: CartpoleSpec, backend: PhysicsBackend, *, step_dt: float, seed: int = 0) -> None:
        self.spec, self.backend = spec, backend
        self.device = dev = backend.device
        self.num_envs = n = backend.num_envs
        self.step_dt = float(step_dt)
        # The plan records the same value (unilab.plan.compile uses the same function).
        self.max_episode_steps = max_episode_steps(spec.episode_length_s, self.step_dt)
        self.generator = torch.Generator(device=dev).manual_seed(int(seed))
        self.num_actions = 1
        self.observations = [
            ObservationTerm(name, dim, getattr(CartpoleTask, f"obs_{name}")) for name, dim in OBSERVATIONS
        ]
        self.rewards = [
            RewardTerm(name, w, getattr(CartpoleTask, f"rew_{name}")) for name, w in CARTPOLE.weights(spec).items()
        ]
        self.terminations = [
            TerminationTerm(name, getattr(CartpoleTask, f"term_{name}"), time_out=t) for name, t in TERMINATIONS
        ]
        self.obs_dim = sum(t.dim for t in self.observations)
        self.obs = torch.zeros(n, self.obs_dim, device=dev)
        self.actions = torch.zeros(n, 1, device=dev)
        self.ctrl = torch.zeros(n, backend.dims.nu, device=dev)
        self.reward_terms = torch.zeros(n, len(self.rewards), device=dev)
        self._scale = torch.tensor([t.weight * self.step_dt for t in self.rewards], device=dev)
        self.reward = torch.zeros(n, device=dev)
        self.terminated = torch.zeros(n, dtype=torch.bool, device=dev)
        self.truncated = torch.zeros(n, dtype=torch.bool, device=dev)
        self.episode_step = torch.zeros(n, dtype=torch.int64, device=dev)
        self.reset_qpos = torch.zeros(n, backend.dims.nq, device=dev)
        self.reset_qvel = torch.zeros(n, backend.dims.nv, device=dev)
        self.state: PhysicsState = backend.state

    # inventory ----------------------------------------------------------------------------------
    @property
    def reward_names(self) -> list[str]:
        return [t.name for t in self.rewards]

    def term_decls(self) -> list[TermDecl]:
        return [
            *(t.decl for t in self.observations),
            *(t.decl for t in self.rewards),
            *(t.decl for t in self.terminations),
            TermDecl("reset_near_upright", "event"),
        ]

    # lifecycle ----------------------------------------------------------------------------------
    def apply_actions(self, actions: torch.Tensor) -> torch.Tensor:
        self.actions.copy_(actions.clamp(-1.0, 1.0))
        self.ctrl[:, 0] = self.actions[:, 0]
        return self.ctrl

    def read_state(self, state: PhysicsState) -> None:
        self.state = state

    def advance(self) -> None:
        self.episode_step.add_(1)

    def compute_rewards(self) -> torch.Tensor:
        torch.stack([t.fn(self) for t in self.rewards], dim=1, out=self.reward_terms)
        self.reward_terms.mul_(self._scale)
        torch.sum(self.reward_terms, dim=1, out=self.reward)
        return self.reward

    def set_reward_weights(self, weights: Sequence[float]) -> None:
        for t, w in zip(self.rewards, weights, strict=True):
            t.weight = float(w)
        self._scale.copy_(torch.tensor([t.weight * self.step_dt for t in self.rewards]))

    def compute_terminations(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.terminated.zero_()
        self.truncated.zero_()
        for t in self.terminations:
            (self.truncated if t.time_out else self.terminated).logical_or_(t.fn(self))
        self.truncated.logical_and_(~self.terminated)
        return self.terminated, self.truncated

    def step_events(self) -> None:
        """No commands or interval events."""

    def compute_observations(self) -> torch.Tensor:
        torch.cat([t.fn(self) for t in self.observations], dim=1, out=self.obs)
        return self.obs

    def reference_qpos(self, worlds: int) -> torch.Tensor | None:
        """The cart-pole tracks no pose (see Task.reference_qpos)."""
        return None

    def commanded_velocity(self, worlds: int) -> torch.Tensor | None:
        """Nor is it commanded a velocity (see Task.commanded_velocity)."""
        return None

    def diagnostic_terms(self) -> dict[str, TensorFn]:
        """No learning-health figures beyond the collector's own (see Task.diagnostic_terms)."""
        return {}

    def reset_targets(self, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.num_envs
        noise = (torch.rand(n, 4, device=self.device, generator=self.generator) * 2 - 1) * RESET_NOISE
        self.reset_qpos.copy_(noise[:, :2])
        self.reset_qvel.copy_(noise[:, 2:])
        self.actions.masked_fill_(mask.unsqueeze(1), 0.0)
        self.episode_step.masked_fill_(mask, 0)
        return self.reset_qpos, self.reset_qvel

    def after_reset(self, mask: torch.Tensor, state: PhysicsState) -> None:
        self.read_state(state)

    # terms --------------------------------------------------------------------------------------
    def obs_cart_pos(self) -> torch.Tensor:
        return self.state.qpos[:, 0:1]

    def obs_pole_cos(self) -> torch.Tensor:
        return torch.cos(self.state.qpos[:, 1:2])

    def obs_pole_sin(self) -> torch.Tensor:
        return torch.sin(self.state.qpos[:, 1:2])

    def obs_cart_vel(self) -> torch.Tensor:
        return self.state.qvel[:, 0:1]

    def obs_pole_ang_vel(self) -> torch.Tensor:
        return self.state.qvel[:, 1:2]

    def rew_upright(self) -> torch.Tensor:
        return 0.5 * (torch.cos(self.state.qpos[:, 1]) + 1.0)

    def rew_centered(self) -> torch.Tensor:
        return torch.exp(-self.state.qpos[:, 0].square())

    def rew_action_l2(self) -> torch.Tensor:
        return self.actions[:, 0].square()

    def term_pole_fell(self) -> torch.Tensor:
        return self.state.qpos[:, 1].abs() > FALL_ANGLE

    def term_off_rail(self) -> torch.Tensor:
        return self.state.qpos[:, 0].abs() > RAIL_LIMIT

    def term_time_out(self) -> torch.Tensor:
        return self.episode_step >= self.max_episode_steps
