"""The G1 tasks as fixed-shape tensor programs on real CPU MuJoCo physics."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

from tests.conftest import posed
from unilab.collect.collector import Collector
from unilab.robot.model import RobotLayout, build_model_xml, model_from_xml
from unilab.sim.mujoco_cpu import MujocoCpuBackend
from unilab.spec.models import task_spec
from unilab.tasks.base import Task
from unilab.tasks.registry import build_task

N = 4
STEP_DT = 0.02


@pytest.fixture(scope="module")
def robot() -> tuple[str, RobotLayout]:
    xml = build_model_xml(None, 0.005)
    return xml, RobotLayout.from_model(model_from_xml(xml))


def _collector(robot: tuple[str, RobotLayout], **fields: object) -> Iterator[Collector]:
    xml, layout = robot
    fields.setdefault("num_envs", N)
    spec = task_spec(**fields)
    backend = MujocoCpuBackend(xml, spec.num_envs, 4)
    try:
        task = build_task(spec, backend, posed(xml, layout, spec), step_dt=STEP_DT, seed=1)
    except BaseException:
        backend.close()
        raise
    collector = Collector(backend, task, finite_check_interval=5)
    try:
        yield collector
    finally:
        collector.close()


@pytest.fixture
def walk(robot: tuple[str, RobotLayout]) -> Iterator[Collector]:
    yield from _collector(robot, name="g1_walk")


@pytest.fixture
def tracking(robot: tuple[str, RobotLayout]) -> Iterator[Collector]:
    yield from _collector(robot, name="g1_motion_tracking", motion="builtin:g1_squat")


@pytest.mark.parametrize("which", ["walk", "tracking"])
def test_random_actions_keep_shapes_and_finite(request: pytest.FixtureRequest, which: str) -> None:
    c: Collector = request.getfixturevalue(which)
    obs = c.reset_all()
    buffers = (c.obs, c.reward, c.terminated, c.truncated, c.task.obs, c.task.reward)
    ptrs = [b.data_ptr() for b in buffers]
    gen = torch.Generator().manual_seed(0)
    ended = 0
    for _ in range(40):
        actions = torch.rand(N, c.action_dim, generator=gen) * 2 - 1
        obs, reward, terminated, truncated = c.step(actions)
        assert obs.shape == (N, c.obs_dim) and reward.shape == (N,)
        assert terminated.dtype == torch.bool and truncated.shape == (N,)
        assert torch.isfinite(obs).all() and torch.isfinite(reward).all()
        assert not (terminated & truncated).any()
        ended += int((terminated | truncated).sum())
    # Fixed-shape program: the same storage is reused every step.
    assert [b.data_ptr() for b in buffers] == ptrs
    assert c.finite_verdict is not None and c.finite_verdict.ok
    stats = c.episode_stats()
    assert stats["episodes"] == ended
    expected_dim = 99 if which == "walk" else 160
    assert c.obs_dim == expected_dim


def _set_state(c: Collector, qpos: torch.Tensor, qvel: torch.Tensor) -> Task:
    task = c.task
    mask = torch.ones(N, dtype=torch.bool)
    state = c.backend.reset(mask, qpos, qvel)
    task.read_state(state)
    return task


def test_walk_standing_beats_falling(walk: Collector) -> None:
    """Zero command: standing still in the default pose earns more than lying on the floor."""
    walk.reset_all()
    task = walk.task
    task.velocity_command.zero_()
    qpos = task.default_qpos.repeat(N, 1)
    qvel = torch.zeros(N, walk.backend.dims.nv)
    # Worlds 2 and 3: fallen on the side, pelvis near the floor, still sliding.
    half = math.pi / 4
    qpos[2:, 2] = 0.15
    qpos[2:, 3:7] = torch.tensor([math.cos(half), math.sin(half), 0.0, 0.0])
    qvel[2:, 0] = 0.8
    qvel[2:, 5] = 1.0
    _set_state(walk, qpos, qvel)
    terminated, _ = task.compute_terminations()
    reward = task.compute_rewards()
    assert terminated.tolist() == [False, False, True, True]
    assert (reward[:2].min() > reward[2:].max()).item()
    terms = dict(zip(task.reward_names, task.reward_terms.T, strict=True))
    for name in ("track_lin_vel_xy_exp", "track_ang_vel_z_exp", "upright", "alive"):
        assert (terms[name][:2].min() > terms[name][2:].max()).item(), name
    weight = task.rewards[task.reward_names.index("track_lin_vel_xy_exp")].weight
    assert terms["track_lin_vel_xy_exp"][0] == pytest.approx(STEP_DT * weight, rel=1e-4)  # perfect tracking


@pytest.fixture(params=["plain", "gait-clock", "legs-home"])
def walk_variants(request: pytest.FixtureRequest, robot: tuple[str, RobotLayout]) -> Iterator[Collector]:
    """g1_walk as it defaults, with a gait clock and commands that change within the episode, and
    driving its legs alone from the home pose with narrower tracking kernels."""
    from unilab.tasks.g1_walk.spec import CommandRanges, TrackingStd

    if request.param == "plain":
        yield from _collector(robot, name="g1_walk")
    elif request.param == "gait-clock":
        commands = CommandRanges(resample_s=0.3, standing_share=0.2)
        yield from _collector(robot, name="g1_walk", gait_period_s=0.8, commands=commands)
    else:
        std = TrackingStd(lin_vel_xy=0.4, ang_vel_z=0.25)
        yield from _collector(robot, name="g1_walk", actions="legs", default_pose="home", tracking_std=std)


def test_walk_rewards_and_base_frame_match_their_definitions(walk_variants: Collector) -> None:
    """g1_walk computes its rewards, base-frame vectors and reset targets through persistent
    buffers and views; they must equal the plain definitions (docs/tasks.md) up to float rounding
    in every regime: standing, walking, touchdowns, falls and resets."""
    from unilab.robot import g1
    from unilab.tasks import quat

    walk = walk_variants
    walk.reset_all()
    task = walk.task
    gen = torch.Generator().manual_seed(3)
    scale = torch.tensor([t.weight * STEP_DT for t in task.rewards])
    hips = [i for i, j in enumerate(task.layout.joint_names) if "hip_roll" in j or "hip_yaw" in j]

    def check(where: str) -> None:
        terminated, _ = task.compute_terminations()
        reward = task.compute_rewards().clone()
        frame = quat.quat_apply_inverse(task.base_quat.unsqueeze(1), task._world_vecs)
        torch.testing.assert_close(task._base_frame, frame, rtol=1e-5, atol=1e-6, msg=where)
        qpos, qvel = task.state.qpos, task.state.qvel
        cmd, v_b, g = task.velocity_command, frame[:, 0], frame[:, 1]
        touchdown = task._air_time_at_touchdown
        std = task.spec.tracking_std
        terms = {
            "track_lin_vel_xy_exp": torch.exp(-((cmd[:, :2] - v_b[:, :2]) ** 2).sum(1) / std.lin_vel_xy**2),
            "track_ang_vel_z_exp": torch.exp(-((cmd[:, 2] - qvel[:, 5]) ** 2) / std.ang_vel_z**2),
            "upright": torch.exp(-(g[:, :2] ** 2).sum(1) / 0.25**2),
            "base_height": (qpos[:, 2] - g1.POSE_BASE_HEIGHT[task.spec.default_pose]) ** 2,
            "joint_torques_l2": (task.state.actuator_force**2).sum(1),
            "action_rate_l2": ((task.actions - task.last_actions) ** 2).sum(1),
            "feet_air_time": ((touchdown - 0.2).clamp(0.0, 0.3) * (touchdown > 0)).sum(1)
            * (cmd[:, :2].norm(dim=1) > 0.1),
            "hip_deviation": (task.joint_pos - task.default_joint_pos)[:, hips].abs().sum(1),
            "alive": (~terminated).float(),
        }
        if "feet_phase" in task.reward_names:  # the gait clock's buffers exist only with it
            feet_x = torch.stack([task.gait_phase, (task.gait_phase + 0.5) % 1.0], dim=1)
            feet_target = 0.037 + 0.09 * torch.sin(2 * math.pi * feet_x).clamp(min=0)
            feet_z = task.state.xpos[:, task.layout.feet_body_ids.tolist(), 2]
            err = ((feet_z - feet_target) ** 2).sum(1)
            terms["feet_phase"] = torch.exp(-err / 0.008) * (cmd.norm(dim=1) > 0.1)
        definitions = torch.stack([terms[name] for name in task.reward_names], dim=1)
        torch.testing.assert_close(task.reward_terms, definitions * scale, rtol=1e-5, atol=1e-7, msg=where)
        torch.testing.assert_close(reward, (definitions * scale).sum(1), rtol=1e-5, atol=1e-7, msg=where)

    for k in range(60):
        walk.step(torch.rand(N, walk.action_dim, generator=gen) * 2 - 1)
        check(f"step {k}")  # on the state the step ends on (after any reset it made)
        if k == 30:
            task.velocity_command.zero_()  # the air-time reward's "moving" gate, off
    # Touchdowns under a walking command, made certain (random episodes are too short to step
    # much): every foot on the floor now is taken to have been in the air for 0.5 s before it.
    task.velocity_command[:, 0] = 1.0
    task.feet_contact.fill_(False)
    task.feet_air_time.fill_(0.5)
    task.advance()
    assert task._first_contact.any()
    check("touchdowns")
    air_time = task.reward_terms[:, task.reward_names.index("feet_air_time")]
    assert (air_time > 0).any()  # a swing longer than 0.2 s, paid
    # A reset clears the feet state the air-time reward reads, even right after a touchdown.
    task._first_contact.fill_(True)
    task._air_time_at_touchdown.fill_(0.5)
    mask = torch.ones(N, dtype=torch.bool)
    qpos, _ = task.reset_targets(mask)
    task.velocity_command.fill_(1.0)
    check("after reset_targets")
    q = qpos[:, task._base_quat]
    assert torch.all(q[:, 1:3] == 0) and torch.allclose(q.norm(dim=1), torch.ones(N))
    joints = qpos[:, task._qpos_idx]
    assert torch.all((joints >= task.joint_lower) & (joints <= task.joint_upper))
    assert (joints - task.default_joint_pos).abs().max() <= 0.1 + 1e-6


def test_walk_gait_clock_cycles_per_stride_and_restarts_at_reset(robot: tuple[str, RobotLayout]) -> None:
    """With `task.gait_period_s`, the clock the policy observes advances one stride (0.8 s) per
    cycle, wraps into [0, 1), and a reset restarts it for the reset worlds only."""
    for walk in _collector(robot, name="g1_walk", gait_period_s=0.8):
        walk.reset_all()
        task = walk.task
        assert torch.all(task.gait_phase == 0)
        steps = round(0.8 / STEP_DT)
        for _ in range(steps + 10):
            walk.step(torch.zeros(N, walk.action_dim))
        live = task.episode_step == steps + 10
        expected = (10 * STEP_DT / 0.8) % 1.0
        torch.testing.assert_close(task.gait_phase[live], torch.full((int(live.sum()),), expected), atol=1e-4, rtol=0)
        obs = task.compute_observations()[:, task.observation_layout()["gait_phase"]]
        angle = 2 * math.pi * task.gait_phase
        torch.testing.assert_close(obs, torch.stack([angle.sin(), angle.cos()], dim=1))
        mask = torch.tensor([True, False, False, False])
        before = task.gait_phase.clone()
        task.reset_targets(mask)
        assert task.gait_phase[0] == 0 and torch.equal(task.gait_phase[1:], before[1:])


@pytest.mark.parametrize("gate", ["command", "progress"])
def test_walk_gait_terms_pay_stepping_in_place_only_without_the_progress_gate(
    robot: tuple[str, RobotLayout], gate: str
) -> None:
    """`task.gait_reward_gate = "progress"`: the gait terms pay a foot that follows the clock only
    while the base moves toward its command (a quarter of it at least); stepping in place earns
    what the default gate pays it only under `command`."""
    for walk in _collector(robot, name="g1_walk", gait_period_s=0.8, gait_reward_gate=gate):
        walk.reset_all()
        task = walk.task
        task.hold_velocity_command([0.8, 0.0, 0.0])
        q, v = task.state.qpos.clone(), task.state.qvel.clone()
        q[:, task._base_quat] = torch.tensor([1.0, 0.0, 0.0, 0.0])  # facing +x: world and body frame agree
        b = task._base_lin.start
        # World 0 stands; world 1 moves forward at half its command; world 2 backward; world 3 sideways.
        v[:, b : b + 3] = torch.tensor([[0.0, 0.0, 0.0], [0.4, 0.0, 0.0], [-0.4, 0.0, 0.0], [0.0, 0.5, 0.0]])
        task = _set_state(walk, q, v)
        task.gait_phase.fill_(0.75)  # both feet' targets near the floor: a standing foot follows the clock
        paid = task.rew_feet_phase() > 0
        expected = [True, True, True, True] if gate == "command" else [False, True, False, False]
        assert paid.tolist() == expected


@pytest.mark.parametrize("standing_share", [0.0, 1.0])
def test_walk_commands_change_within_the_episode(robot: tuple[str, RobotLayout], standing_share: float) -> None:
    """Every `commands.resample_s` of an episode a new command is drawn, a `standing_share` of
    them zero; between draws the command holds."""
    from unilab.tasks.g1_walk.spec import CommandRanges

    commands = CommandRanges(resample_s=0.1, standing_share=standing_share)  # 5 env steps
    for walk in _collector(robot, name="g1_walk", num_envs=16, commands=commands):
        task = walk.task
        walk.reset_all()
        seen = [task.velocity_command.clone()]
        for k in range(1, 11):
            walk.step(torch.zeros(16, walk.action_dim))
            seen.append(task.velocity_command.clone())
            if standing_share == 1.0:
                assert torch.all(task.velocity_command == 0), f"step {k}"
        if standing_share == 0.0:
            full = task.episode_step == 10  # worlds that did not fall and reset in the 10 steps
            assert full.any()
            for k in range(1, 11):
                same = torch.all(seen[k][full] == seen[k - 1][full], dim=1)
                assert bool(same.all()) == (k % 5 != 0), f"step {k}"
            assert torch.all(task.velocity_command[full].norm(dim=1) > 0)


def test_walk_episode_starts_standing_not_touching_down(walk: Collector) -> None:
    """An episode starts with both feet on the floor: its first steps hold no touchdown, so the
    air-time term does not charge every new episode for a 0.02 s swing it never made."""
    walk.reset_all()
    task = walk.task
    task.velocity_command.fill_(1.0)  # the air-time term's "moving" gate, on
    air_time = task.reward_names.index("feet_air_time")
    for k in range(3):
        walk.step(torch.zeros(N, walk.action_dim))
        assert not task._first_contact.any(), f"step {k}"
        assert torch.all(task.reward_terms[:, air_time] == 0), f"step {k}"
    assert task.feet_contact.all()


def test_tracking_reference_pose_beats_deviation(tracking: Collector) -> None:
    tracking.reset_all()
    task = tracking.task
    # Reference state initialization puts the robot on the clip (up to the small joint noise).
    assert (task.ref_anchor_pos - task.anchor_pos).norm(dim=1).max() < 1e-3
    assert (task.ref_key_pos_aligned - task.key_pos).norm(dim=2).max() < 0.08
    task.motion_frame.fill_(10)
    task._gather_reference()
    qpos = task.default_qpos.repeat(N, 1)
    qvel = torch.zeros(N, tracking.backend.dims.nv)
    f, base = 10, task._base - 1
    qpos[:, 0:3] = task.m_body_pos[f, base]
    qpos[:, 3:7] = task.m_body_quat[f, base]
    qpos[:, 7:] = task.m_joint_pos[f]
    qpos[2:, 2] -= 0.4  # worlds 2, 3: sunk 40 cm below the reference
    qpos[2:, 7:] += 0.3
    _set_state(tracking, qpos, qvel)
    terminated, _ = task.compute_terminations()
    reward = task.compute_rewards()
    assert terminated.tolist() == [False, False, True, True]
    assert (reward[:2].min() > reward[2:].max()).item()


@pytest.mark.parametrize("which", ["walk", "tracking"])
def test_masked_reset_leaves_other_worlds_untouched(request: pytest.FixtureRequest, which: str) -> None:
    c: Collector = request.getfixturevalue(which)
    c.reset_all()
    for _ in range(5):
        c.step(torch.full((N, c.action_dim), 0.1))
    task = c.task
    names = ["actions", "last_actions", "episode_step", "joint_pos", "base_pos", "base_quat"]
    names += ["velocity_command", "feet_air_time"] if which == "walk" else ["motion_frame", "ref_joint_pos"]
    before = {k: getattr(task, k).clone() for k in names}
    qpos_before = c.backend.state.qpos.clone()
    mask = torch.tensor([False, True, False, True])
    qpos, qvel = task.reset_targets(mask)
    state = c.backend.reset(mask, qpos, qvel)
    task.after_reset(mask, state)
    keep = ~mask
    for k in names:
        assert torch.equal(getattr(task, k)[keep], before[k][keep]), k
    assert torch.equal(state.qpos[keep], qpos_before[keep])
    assert torch.equal(state.qpos[mask], qpos[mask])
    assert (task.episode_step[mask] == 0).all() and (task.actions[mask] == 0).all()
    assert (task.episode_step[keep] == 5).all()


def test_push_changes_only_scheduled_worlds(robot: tuple[str, RobotLayout]) -> None:
    for c in _collector(robot, name="g1_walk", push_interval_s=STEP_DT * 2):  # period: 2 steps
        c.reset_all()
        task = c.task
        (_event, offsets, fires_at) = task._interval_sched[0]
        assert fires_at == [True, True]  # 4 worlds spread over both phases of the period
        pushed = (offsets + 1) % 2 == 0  # due at the next step
        qvel_before = c.backend.state.qvel.clone()
        task._step_count += 1
        task.step_events()
        dv = (c.backend.state.qvel - qvel_before)[:, 0:2].abs().sum(dim=1)
        assert (dv[pushed] > 0).all() and (dv[~pushed] == 0).all()
        assert torch.equal(task.base_lin_vel_w, c.backend.state.qvel[:, 0:3])


def test_clip_rate_unlike_control_rate_uses_nearest_frame(robot: tuple[str, RobotLayout], tmp_path) -> None:
    import numpy as np

    from tools.make_motion import make_motion

    path = tmp_path / "squat30.npz"
    np.savez(path, **make_motion(duration=2.0, fps=30.0, period=2.0, depth=0.5))
    for c in _collector(robot, name="g1_motion_tracking", motion=str(path)):
        c.reset_all()
        task = c.task
        assert task._frames_per_step is None  # 30 fps clip, 50 Hz control
        t0 = task._phase_time.clone()
        assert torch.equal(task.motion_frame, torch.round(t0 * 30.0).long())
        task.motion_frame.zero_()
        task._phase_time.zero_()
        for k in range(1, 8):
            task.advance_phase()
            assert (task.motion_frame == round(k * STEP_DT * 30.0)).all()
        assert torch.equal(task.ref_joint_pos, task.m_joint_pos[task.motion_frame])


def test_actions_are_offsets_from_the_standing_pose_scaled_by_effort_over_kp(walk: Collector) -> None:
    """docs/tasks.md: ctrl = default pose + 0.25 * effort_limit / kp * action, per joint (mjlab's rule)."""
    from unilab.robot import g1

    task = walk.task
    n = task.num_envs
    actions = torch.linspace(-1.0, 1.0, g1.NUM_JOINTS).expand(n, -1)
    ctrl = task.apply_actions(actions)
    default = torch.tensor(g1.default_pose_vector(task.spec.default_pose))
    scale = torch.tensor([0.25 * g1.EFFORT_LIMIT[j] / g1.KP[j] for j in g1.JOINT_NAMES])
    assert torch.allclose(ctrl, (default + scale * actions).to(ctrl.dtype), atol=1e-6)


@pytest.mark.parametrize(
    ("actions", "joints"), [("legs", "LEG_JOINTS"), ("legs_waist_yaw", "LEG_AND_WAIST_YAW_JOINTS")]
)
def test_leg_actions_drive_their_joints_and_hold_the_rest(
    robot: tuple[str, RobotLayout], actions: str, joints: str
) -> None:
    """`task.actions = "legs"` (12) or `"legs_waist_yaw"` (13): one action per joint of the set, each
    that joint's offset (same rule), and every other joint's target its default position, step
    after step."""
    from unilab.robot import g1

    driven = getattr(g1, joints)
    n = len(driven)
    made = _collector(robot, name="g1_walk", actions=actions)
    c = next(made)
    try:
        task = c.task
        assert c.action_dim == task.num_actions == n and task.num_joints == 29
        assert task.observation_layout()["last_action"].stop - task.observation_layout()["last_action"].start == n
        default = torch.tensor(g1.default_pose_vector(task.spec.default_pose))
        idx = [g1.JOINT_NAMES.index(j) for j in driven]
        scale = torch.tensor([0.25 * g1.EFFORT_LIMIT[j] / g1.KP[j] for j in driven])
        for a in (torch.linspace(-1.0, 1.0, n), torch.ones(n)):
            ctrl = task.apply_actions(a.expand(task.num_envs, -1)).clone()
            want = default.clone()
            want[idx] += scale * a
            assert torch.allclose(ctrl, want.expand_as(ctrl).to(ctrl.dtype), atol=1e-6)
        c.reset_all()
        c.step(torch.ones(task.num_envs, n))  # steps with n-dim actions
    finally:
        made.close()


def test_task_action_scale_widens_the_targets_window(robot: tuple[str, RobotLayout]) -> None:
    """`task.action_scale` replaces mjlab's 0.25: the same action in [-1, 1] reaches proportionally
    farther from the standing pose (a squat's knee is beyond the default window)."""
    from unilab.robot import g1

    made = _collector(robot, name="g1_walk", action_scale=0.75)
    c = next(made)
    try:
        actions = torch.linspace(-1.0, 1.0, g1.NUM_JOINTS).expand(c.task.num_envs, -1)
        ctrl = c.task.apply_actions(actions)
        default = torch.tensor(g1.default_pose_vector(c.task.spec.default_pose))
        scale = torch.tensor([0.75 * g1.EFFORT_LIMIT[j] / g1.KP[j] for j in g1.JOINT_NAMES])
        assert torch.allclose(ctrl, (default + scale * actions).to(ctrl.dtype), atol=1e-6)
    finally:
        made.close()  # the collector's own cleanup


def test_task_reward_weights_scale_their_terms_and_leave_the_others(robot: tuple[str, RobotLayout]) -> None:
    """`task.reward_weights` changes the named terms' weights only: from the same state and actions,
    `alive` doubles, `base_height` leaves the reward, every other term is unchanged, and the reward
    is still the sum of its terms."""
    from unilab.robot import g1

    def rollout(**fields: object) -> tuple[list[str], torch.Tensor, torch.Tensor]:
        made = _collector(robot, name="g1_walk", **fields)
        c = next(made)
        try:
            c.reset_all()
            actions = torch.linspace(-0.5, 0.5, g1.NUM_JOINTS).expand(c.task.num_envs, -1)
            terms, rewards = [], []
            for _ in range(5):
                c.step(actions)
                terms.append(c.task.reward_terms.clone())
                rewards.append(c.reward.clone())
            return list(c.task.reward_names), torch.stack(terms), torch.stack(rewards)
        finally:
            made.close()

    names, base, _ = rollout()
    same_names, tuned, reward = rollout(reward_weights={"alive": 0.5, "base_height": 0.0})
    assert same_names == names
    alive, height = names.index("alive"), names.index("base_height")
    assert torch.allclose(tuned[..., alive], 2.0 * base[..., alive])  # default 0.25
    assert torch.all(tuned[..., height] == 0) and torch.any(base[..., height] != 0)
    others = [i for i in range(len(names)) if i not in (alive, height)]
    assert torch.equal(tuned[..., others], base[..., others])
    assert torch.allclose(reward, tuned.sum(dim=-1), atol=1e-6)


@pytest.mark.parametrize(("name", "joint_vel_noise"), [("g1_walk", 1.5), ("g1_motion_tracking", 0.5)])
def test_observation_noise_on_joint_velocities_is_the_tasks_own(
    robot: tuple[str, RobotLayout], name: str, joint_vel_noise: float
) -> None:
    """docs/tasks.md: mjlab's velocity task perturbs joint velocities by up to 1.5 rad/s, its
    tracking task by 0.5."""
    clip = {"motion": "builtin:g1_squat"} if name == "g1_motion_tracking" else {}
    made = _collector(robot, name=name, observation_noise=True, **clip)
    c = next(made)
    try:
        task = c.task
        start = 0
        for term in task.observations:
            if term.name == "joint_vel_rel":
                break
            start += term.dim
        amp = task.noise.amplitude[start : start + task.num_actions]
        assert torch.allclose(amp, torch.full_like(amp, joint_vel_noise))
    finally:
        made.close()
