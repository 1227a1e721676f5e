"""`unilab eval RUN_DIR`: one episode per world with the run's deterministic policy, a report whose
figures add up, the same figures for the same seed, and a clear refusal for every bad input. That
it measures the policy (a trained one scores, an untrained one does not) is checked after training
in tests/test_learning.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import ROOT, SPECS
from tests.conftest import run_unilab as unilab

TINY_SAC = '{name="sac", batch_size=32, hidden_dims=[16], warmup_env_steps=64}'


def _refused(r: subprocess.CompletedProcess[str], says: str) -> None:
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error: ") and says in r.stderr and "fix: " in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short cart-pole SAC run that keeps two checkpoints."""
    out = tmp_path_factory.mktemp("eval") / "runs"
    r = unilab(
        "apply", str(SPECS / "cartpole.toml"), "--quiet",
        "--set", "run.total_env_steps=640", "--set", "run.checkpoint_every_env_steps=320",
        "--set", f"algo={TINY_SAC}", "--set", f'run.output_dir="{out}"',
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (run_dir,) = out.iterdir()
    return run_dir


def _report(*args: str) -> dict:
    r = unilab("eval", *args, "--json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return json.loads(r.stdout)


def test_every_world_plays_one_episode_and_the_figures_add_up(cartpole_run: Path) -> None:
    rep = _report(str(cartpole_run), "--episodes", "16")
    schema = json.loads((ROOT / "schemas" / "eval.v1.json").read_text())
    jsonschema.validate(rep, schema)
    assert rep["episodes"] == 16 and rep["checkpoint"] == "ckpt-0000000000640.pt"
    assert rep["checkpoint_env_steps"] == 640 and rep["task"] == "cartpole" and rep["algo"] == "sac"
    assert rep["ended_by_time_out"] + rep["ended_by_termination"] + rep["ended_non_finite"] == 16
    length = rep["episode_length"]
    assert 1 <= length["min"] <= length["mean"] <= length["max"] <= rep["max_episode_steps"]
    # The worlds keep stepping until the longest episode ends; none plays more than that.
    assert rep["env_steps"] == 16 * length["max"]
    # The reward is the sum of its terms, so the mean return is the sum of the terms' means.
    assert abs(sum(rep["reward_terms"].values()) - rep["episode_return"]["mean"]) < 1e-6
    assert list(rep["reward_terms"]) == ["upright", "centered", "action_l2"]
    # 640 env steps of training do not balance the pole (tests/test_learning.py: a trained policy
    # scores 8 and more, the whole 10 s episode about 12).
    assert rep["episode_return"]["mean"] < 4.0 and rep["ended_by_termination"] == 16
    assert rep["command_tracking"] is None  # the cart-pole has no velocity command
    assert rep["gait"] is None and 0.0 <= rep["action_saturation"] <= 1.0  # nor feet; but actions


def test_the_same_seed_gives_the_same_figures_and_another_seed_other_resets(cartpole_run: Path) -> None:
    def figures(seed: str) -> dict:
        rep = _report(str(cartpole_run), "--episodes", "8", "--seed", seed, "--workers", "1")
        return {k: v for k, v in rep.items() if k != "wall_s"}

    a, b, c = figures("3"), figures("3"), figures("4")
    assert a == b
    assert a["episode_return"] != c["episode_return"]


def test_an_older_checkpoint_is_chosen_by_name(cartpole_run: Path) -> None:
    rep = _report(str(cartpole_run), "--episodes", "2", "--checkpoint", "ckpt-0000000000320.pt")
    assert rep["checkpoint"] == "ckpt-0000000000320.pt" and rep["checkpoint_env_steps"] == 320
    text = unilab("eval", str(cartpole_run), "--episodes", "2")
    assert text.returncode == 0, text.stderr
    assert "ckpt-0000000000640.pt (640 env steps trained), sac on cartpole" in text.stdout
    assert "2 episodes, one per world (seed 0)" in text.stdout and "upright" in text.stdout


def test_bad_requests_are_refused_in_one_paragraph(cartpole_run: Path, tmp_path: Path) -> None:
    _refused(unilab("eval", str(cartpole_run), "--checkpoint", "ckpt-9.pt"), "is not a checkpoint of")
    _refused(unilab("eval", str(cartpole_run), "--episodes", "0"), "--episodes 0 is out of range")
    _refused(unilab("eval", str(cartpole_run), "--workers", "0"), "--workers 0 is out of range")
    _refused(unilab("eval", str(tmp_path / "nothing")), "does not exist")
    _refused(unilab("eval", str(tmp_path)), "not a unilab run directory")


def test_a_checkpoint_changed_after_the_run_is_refused(cartpole_run: Path, tmp_path: Path) -> None:
    """A file that still loads as a checkpoint of the run's plan, but not with the bytes the run
    recorded, is refused by its digest."""
    import torch

    run = tmp_path / "run"
    shutil.copytree(cartpole_run, run)
    ckpt = run / "checkpoints" / "ckpt-0000000000640.pt"
    blob = torch.load(ckpt, weights_only=True)
    actor = blob["state"]["learner"]["actor"]
    first = next(iter(actor))
    actor[first] = actor[first] + 1.0
    torch.save(blob, ckpt)
    r = unilab("eval", str(run))
    _refused(r, "does not have the sha256 the run recorded")
    assert "ckpt-0000000000640.pt" in r.stderr


def test_a_checkpoint_for_other_observations_is_refused_before_it_is_played(
    cartpole_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unilab whose task builds its observations otherwise than the one that trained the policy
    (here: the cart-pole's observation terms in another order) refuses the checkpoint in one
    paragraph naming both layouts, rather than feeding the policy columns it never learned."""
    from unilab.errors import UnilabError
    from unilab.evaluate.rollout import EvalRequest, evaluate
    from unilab.tasks.cartpole import task as cartpole

    monkeypatch.setattr(cartpole, "OBSERVATIONS", tuple(reversed(cartpole.OBSERVATIONS)))
    with pytest.raises(UnilabError, match="the checkpoint's policy read another observation layout: cart_pos") as e:
        evaluate(EvalRequest(cartpole_run, episodes=2, workers=1, progress=False))
    assert (e.value.detail or "").startswith("this collector's: ") and "unilab export" in (e.value.fix or "")


def test_play_refuses_the_check_task_before_it_builds_anything(cartpole_run: Path) -> None:
    """`unilab play` draws a G1; the cart-pole run is refused in one paragraph that points at eval."""
    r = unilab("play", str(cartpole_run))  # refused before a port is taken
    _refused(r, "unilab play shows the G1 tasks; cartpole is not one")
    assert f"unilab eval {cartpole_run} --video" in r.stderr


def test_a_checkpoint_is_named_among_the_runs_own(cartpole_run: Path, tmp_path: Path) -> None:
    """--checkpoint takes a checkpoint the run wrote: not its digest file, not a file elsewhere."""
    sidecar = "ckpt-0000000000640.pt.sha256"
    assert (cartpole_run / "checkpoints" / sidecar).is_file()
    _refused(unilab("eval", str(cartpole_run), "--checkpoint", sidecar), "is not a checkpoint of")
    stray = tmp_path / "ckpt-0000000000640.pt"
    shutil.copy(cartpole_run / "checkpoints" / "ckpt-0000000000640.pt", stray)
    _refused(unilab("eval", str(cartpole_run), "--checkpoint", str(stray)), "is not a checkpoint of")
    by_path = _report(
        str(cartpole_run),
        "--episodes",
        "2",
        "--checkpoint",
        str(cartpole_run / "checkpoints" / "ckpt-0000000000320.pt"),
    )
    assert by_path["checkpoint"] == "ckpt-0000000000320.pt"


@pytest.mark.parametrize(
    "algo",
    [
        '{name="flashsac", batch_size=32, hidden_dims=[16], expansion=2, warmup_env_steps=64}',
        '{name="ppo", num_steps_per_env=8, hidden_dims=[16]}',
    ],
)
def test_flashsac_and_ppo_runs_are_evaluated_too(tmp_path: Path, algo: str) -> None:
    out = tmp_path / "runs"
    r = unilab(
        "apply", str(SPECS / "cartpole.toml"), "--quiet", "--set", "run.total_env_steps=512",
        "--set", f"algo={algo}", "--set", f'run.output_dir="{out}"',
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (run_dir,) = out.iterdir()
    rep = _report(str(run_dir), "--episodes", "4")
    assert rep["algo"] == algo.split('"')[1] and rep["episodes"] == 4
    assert abs(sum(rep["reward_terms"].values()) - rep["episode_return"]["mean"]) < 1e-6


def test_mujoco_warnings_are_counted_in_the_episode_they_happen_in() -> None:
    """CPU MuJoCo resets a diverged world itself and the episode goes on; the report counts the
    episodes where MuJoCo warned. Here world 0 gets a NaN control at its third step (MuJoCo zeroes
    it and warns), behind the collector's back."""
    import torch

    from unilab.collect.build import build_collector
    from unilab.evaluate.rollout import _play
    from unilab.spec.models import SimSpec, task_spec

    task = task_spec(name="cartpole", num_envs=4, episode_length_s=0.2)
    sim = SimSpec(timestep=0.01, decimation=2, workers=1)
    with build_collector(task, sim, num_envs=4, workers=1) as c:
        real_step, calls = c.backend.step, []

        def step(ctrl: torch.Tensor):  # type: ignore[no-untyped-def]
            calls.append(1)
            if len(calls) == 3:
                ctrl = ctrl.clone()
                ctrl[0] = float("nan")
            return real_step(ctrl)

        c.backend.step = step  # type: ignore[method-assign]
        played = _play(c, lambda obs: torch.zeros(obs.shape[0], 1), progress=False)
    per_episode = played.warnings.sum(axis=1)
    assert per_episode[0] >= 1 and per_episode[1:].tolist() == [0, 0, 0]
    assert played.by_time_out.all()  # 10 steps: the pole has not fallen, nothing flagged


def _video_frames(path: Path) -> tuple[dict, list[bytes]]:
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    return meta, list(reader)


def _frames_of(length: int, stride: int) -> int:
    """Frames filmed of an episode of ``length`` steps: its reset, every stride-th step, its end."""
    return length // stride + 1 + (1 if length % stride else 0)


def test_video_films_the_first_episodes_as_they_were_played(cartpole_run: Path, tmp_path: Path) -> None:
    """--video adds an MP4 of worlds 0..K-1's episodes, one after the other, and changes none of
    the figures."""
    out = tmp_path / "clip.mp4"
    plain = _report(str(cartpole_run), "--episodes", "3")
    rep = _report(str(cartpole_run), "--episodes", "3", "--video", str(out), "--video-episodes", "2")
    jsonschema.validate(rep, json.loads((ROOT / "schemas" / "eval.v1.json").read_text()))
    video = rep.pop("video")
    assert plain.pop("video") is None
    assert {k: v for k, v in rep.items() if k != "wall_s"} == {k: v for k, v in plain.items() if k != "wall_s"}
    assert video["path"] == str(out) and video["episodes"] == 2 and video["fps"] == 25.0
    # Cart-pole: 50 Hz control filmed every second step; the first clip's end is held half a second.
    clips = video["clips"]
    assert [c["world"] for c in clips] == [0, 1] and clips[0]["start_s"] == 0.0
    first = _frames_of(clips[0]["episode_length"], 2)
    assert clips[1]["start_s"] == (first - 1 + 12) / 25.0
    assert video["frames"] == first - 1 + 12 + _frames_of(clips[1]["episode_length"], 2)
    meta, frames = _video_frames(out)
    assert meta["size"] == (640, 480) and meta["fps"] == 25.0 and len(frames) == video["frames"]
    assert len(set(frames)) > 1, "the pole moves: the frames differ"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"], "no temporary file is left"
    text = unilab("eval", str(cartpole_run), "--episodes", "1", "--video", str(out))
    assert text.returncode == 0, text.stderr
    assert f"video    {out}: 1 episode," in text.stdout and "at 25 fps (640x480)" in text.stdout
    assert "world 0:" in text.stdout and "ended by termination" in text.stdout


def test_the_filmed_frames_are_each_episodes_own_from_its_reset_to_its_end() -> None:
    """Per filmed world: the reset state first, then every stride-th step, then the state the
    episode ended in (a fall is filmed), never the next episode's reset."""
    import torch

    from unilab.collect.build import build_collector
    from unilab.evaluate.rollout import _play
    from unilab.evaluate.video import ClipRecorder
    from unilab.spec.models import SimSpec, task_spec

    task = task_spec(name="cartpole", num_envs=4, episode_length_s=0.6)
    sim = SimSpec(timestep=0.01, decimation=2, workers=1)
    with build_collector(task, sim, num_envs=4, workers=1, seed=5) as c:
        resets: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (mask, state before, after)
        real_reset = c.backend.reset

        def reset(mask, qpos, qvel):  # type: ignore[no-untyped-def]
            before = c.backend.state.qpos.clone()
            state = real_reset(mask, qpos, qvel)
            resets.append((mask.clone(), before, state.qpos.clone()))
            return state

        c.backend.reset = reset  # type: ignore[method-assign]
        recorder = ClipRecorder(worlds=3, stride=3)

        def policy(obs: torch.Tensor) -> torch.Tensor:
            """Balance the pole (the cart pushed under its lean), except world 1's: pushed off."""
            a = torch.clamp(10 * obs[:, 2:3] + 2 * obs[:, 4:5], -1, 1)
            a[1] = 1.0
            return a

        played = _play(c, policy, False, recorder)
    lengths = played.length[:3].tolist()
    assert bool(played.by_time_out[0]) and bool(played.by_termination[1]) and lengths[1] % 3, lengths
    for w in range(3):
        frames = recorder.frames[w]
        assert len(frames) == _frames_of(lengths[w], 3), (w, lengths[w], len(frames))
        assert all(f.reference is None for f in frames)
        qpos = [torch.from_numpy(f.qpos).float() for f in frames]
        assert torch.equal(qpos[0], resets[0][2][w]), "the first frame is the reset state"
        ended_at = next(before for mask, before, _ in resets[1:] if bool(mask[w]))
        assert torch.equal(qpos[-1], ended_at[w]), "the last frame is the state the episode ended in"


def test_command_tracking_compares_the_base_with_its_command_and_with_standing_still() -> None:
    """g1_walk's eval reports the mean error between command and base velocity over every step but
    each episode's last (its world is reset by then), beside what standing still would score."""
    import torch

    from unilab.collect.build import build_collector
    from unilab.evaluate.rollout import _play
    from unilab.spec.models import SimSpec, task_spec
    from unilab.tasks.g1_walk.spec import CommandRanges

    commands = CommandRanges(lin_vel_x=(0.6, 0.6), lin_vel_y=(-0.8, -0.8), ang_vel_z=(0.3, 0.3))
    task = task_spec(name="g1_walk", num_envs=3, episode_length_s=0.3, commands=commands)
    errors: list[torch.Tensor] = []
    with build_collector(task, SimSpec(workers=1), num_envs=3, workers=1) as c:

        def policy(obs: torch.Tensor) -> torch.Tensor:
            # The state the coming step starts from is the one the previous step ended on.
            v = c.task.base_lin_vel_b[:, :2]
            errors.append((torch.tensor([0.6, -0.8]) - v).norm(dim=1))
            return torch.zeros(obs.shape[0], 29)

        played = _play(c, policy, False)
    t = played.tracking
    assert t is not None
    # Constant commands: standing still misses by |(0.6, -0.8)| = 1 m/s and 0.3 rad/s at every step.
    assert t.standing_lin_vel_xy_error == pytest.approx(1.0) and t.standing_yaw_rate_error == pytest.approx(0.3)
    assert t.steps == int(played.length.sum()) - 3  # the three episodes' last steps are left out
    # The same error, read from the state each step ended on (the next step's start), first episodes only.
    ends = played.length.tolist()
    mine = [float(errors[k + 1][w]) for w in range(3) for k in range(int(ends[w]) - 1)]
    assert t.lin_vel_xy_error == pytest.approx(sum(mine) / len(mine), rel=1e-5)
    assert t.averaged is None  # 0.3 s episodes: no step has a whole second behind it


def test_command_tracking_also_averages_the_velocity_over_one_second() -> None:
    """Beside the per-step error, eval compares the command with the base velocity averaged over
    the trailing second (a stride's sway averaged out), counted only where the whole window lies in
    the episode; episodes shorter than the window report no average."""
    import torch

    from unilab.collect.build import build_collector
    from unilab.evaluate.rollout import _play
    from unilab.spec.models import SimSpec, task_spec
    from unilab.tasks.g1_walk.spec import CommandRanges

    commands = CommandRanges(lin_vel_x=(0.6, 0.6), lin_vel_y=(-0.8, -0.8), ang_vel_z=(0.3, 0.3))
    task = task_spec(name="g1_walk", num_envs=2, episode_length_s=1.3, commands=commands)
    seen: list[torch.Tensor] = []
    with build_collector(task, SimSpec(workers=1), num_envs=2, workers=1) as c:

        def policy(obs: torch.Tensor) -> torch.Tensor:
            # The state the coming step starts from is the one the previous step ended on.
            seen.append(torch.cat([c.task.base_lin_vel_b[:, :2], c.task.base_yaw_rate.unsqueeze(1)], 1).double())
            return torch.zeros(obs.shape[0], 29)

        played = _play(c, policy, False)
    t = played.tracking
    assert t is not None and t.averaged is not None
    a, window = t.averaged, 50  # 1 s of 0.02 s control steps
    assert a.window_s == pytest.approx(1.0)
    cmd = torch.tensor([0.6, -0.8, 0.3], dtype=torch.float64)
    lin, yaw = [], []
    for w in range(2):
        ends = [seen[k + 1][w] for k in range(int(played.length[w]) - 1)]  # the counted steps' end states
        for k in range(window - 1, len(ends)):
            mean = torch.stack(ends[k - window + 1 : k + 1]).mean(0)
            lin.append(float((cmd[:2] - mean[:2]).norm()))
            yaw.append(float((cmd[2] - mean[2]).abs()))
    assert a.steps == len(lin) > 0
    assert a.lin_vel_xy_error == pytest.approx(sum(lin) / len(lin), rel=1e-6)
    assert a.yaw_rate_error == pytest.approx(sum(yaw) / len(yaw), rel=1e-6)
    assert a.standing_lin_vel_xy_error == pytest.approx(1.0) and a.standing_yaw_rate_error == pytest.approx(0.3)


def test_a_command_is_classed_by_its_larger_linear_component_before_its_yaw_rate() -> None:
    """eval's command classes: a linear component above 0.1 m/s makes a command forward, backward
    or lateral by the larger of |vx| and |vy| (x on a tie), however fast it turns; without one, a
    yaw rate above 0.1 rad/s makes it turning; else (zero, or no component above 0.1) standing."""
    import torch

    from unilab.evaluate.models import CommandClasses
    from unilab.evaluate.rollout import COMMAND_CLASSES, command_class

    cases = {
        (0.5, 0.0, 0.0): "forward",
        (0.5, 0.3, 0.5): "forward",  # walking while turning is walking
        (0.2, -0.2, 0.0): "forward",  # a tie goes to x
        (0.11, 0.0, 0.0): "forward",
        (-0.3, 0.2, -0.4): "backward",
        (-0.2, 0.2, 0.0): "backward",
        (0.3, 0.31, 0.0): "lateral",
        (0.0, -0.15, 0.5): "lateral",
        (0.05, 0.1, 0.3): "turning",  # 0.1 m/s is not above the mark
        (0.0, 0.0, -0.11): "turning",
        (0.0, 0.0, 0.0): "standing",
        (0.1, -0.1, 0.1): "standing",
        (0.08, 0.08, 0.0): "standing",  # |v_xy| is 0.113, but no component is above 0.1
    }
    got = command_class(torch.tensor(list(cases), dtype=torch.float64))
    assert [COMMAND_CLASSES[i] for i in got.tolist()] == list(cases.values())
    assert COMMAND_CLASSES == tuple(CommandClasses.model_fields)  # the report's fields, in its order


def test_the_per_step_errors_are_split_by_the_class_of_each_steps_command() -> None:
    """Each class's mean errors, a standing robot's and their ratios (None where a standing robot's
    error is 0: zero commands), and the table the text report shows them in."""
    import torch

    from unilab.evaluate.models import CommandTracking
    from unilab.evaluate.rollout import _class_table, by_command_class, class_sums

    # Per counted step: the command (vx, vy, yaw rate) and the base velocity the step ended with.
    cmd = [(0.5, 0.0, 0.0), (0.5, 0.0, 0.2), (0.0, 0.0, 0.4), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)]
    vel = [(0.4, 0.0, 0.0), (0.2, 0.0, 0.0), (0.0, 0.0, 0.3), (0.1, 0.0, 0.05), (0.0, 0.0, 0.15)]
    sums, steps = class_sums(torch.tensor(cmd, dtype=torch.float64), torch.tensor(vel, dtype=torch.float64))
    assert steps.tolist() == [2, 0, 0, 1, 2]  # forward, backward, lateral, turning, standing
    by = by_command_class(sums, steps)
    f, turning, still = by.forward, by.turning, by.standing
    assert by.backward is None and by.lateral is None
    assert f is not None and turning is not None and still is not None
    # Forward: misses of 0.1 and 0.3 m/s where standing misses 0.5 (0.4x); of 0 and 0.2 rad/s where standing
    # misses 0 and 0.2 (1x).
    assert (f.steps, f.lin_vel_xy_error, f.standing_lin_vel_xy_error) == (2, pytest.approx(0.2), pytest.approx(0.5))
    assert f.lin_vel_xy_ratio == pytest.approx(0.4) and f.yaw_rate_error == pytest.approx(0.1)
    assert f.standing_yaw_rate_error == pytest.approx(0.1) and f.yaw_rate_ratio == pytest.approx(1.0)
    assert (turning.steps, turning.lin_vel_xy_error, turning.lin_vel_xy_ratio) == (1, 0.0, None)
    assert turning.yaw_rate_error == pytest.approx(0.1) and turning.yaw_rate_ratio == pytest.approx(0.25)
    assert (still.steps, still.standing_lin_vel_xy_error, still.lin_vel_xy_ratio) == (2, 0.0, None)
    assert still.lin_vel_xy_error == pytest.approx(0.05) and still.yaw_rate_error == pytest.approx(0.1)
    assert still.yaw_rate_ratio is None

    total = (sums.sum(dim=0) / 5).tolist()
    t = CommandTracking(
        lin_vel_xy_error=total[0],
        yaw_rate_error=total[1],
        standing_lin_vel_xy_error=total[2],
        standing_yaw_rate_error=total[3],
        steps=5,
        by_command=by,
    )
    table = [" ".join(line.split()) for line in _class_table(t, by)]
    assert table[2] == "command steps |v_xy - cmd| still ratio |w_z - cmd| still ratio"
    assert table[3:] == [
        "forward 2 0.200 0.500 0.40x 0.100 0.100 1.00x",
        "backward 0",
        "lateral 0",
        "turning 1 0.000 0.000 - 0.100 0.400 0.25x",
        "standing 2 0.050 0.000 - 0.100 0.000 -",
        "all 5 0.100 0.200 0.50x 0.100 0.120 0.83x",
    ]


def test_each_step_counts_into_the_class_of_the_command_it_ran_under() -> None:
    """Commands resampled within episodes: a step counts into the class of the command in force
    while it ran (the one its policy saw), its end velocity against that command, not against the
    command the task has drawn for the next step by then; the classes add up to the totals."""
    import torch

    from unilab.collect.build import build_collector
    from unilab.evaluate.rollout import COMMAND_CLASSES, _play, command_class
    from unilab.spec.models import SimSpec, task_spec
    from unilab.tasks.g1_walk.spec import CommandRanges

    # A new command every 5 steps of 30, a third of them zero: every class turns up.
    commands = CommandRanges(lin_vel_y=(-0.5, 0.5), standing_share=0.3, resample_s=0.1)
    task = task_spec(name="g1_walk", num_envs=4, episode_length_s=0.6, commands=commands)
    commanded: list[torch.Tensor] = []
    velocity: list[torch.Tensor] = []
    with build_collector(task, SimSpec(workers=1), num_envs=4, workers=1, seed=1) as c:

        def policy(obs: torch.Tensor) -> torch.Tensor:
            commanded.append(c.task.commanded_velocity(4).double().clone())
            # The state the coming step starts from is the one the previous step ended on.
            velocity.append(torch.cat([c.task.base_lin_vel_b[:, :2], c.task.base_yaw_rate.unsqueeze(1)], 1).double())
            return torch.zeros(obs.shape[0], 29)

        played = _play(c, policy, False)
    t = played.tracking
    assert t is not None and t.by_command is not None
    counted = [(w, k) for w in range(4) for k in range(int(played.length[w]) - 1)]
    cmd = torch.stack([commanded[k][w] for w, k in counted])
    vel = torch.stack([velocity[k + 1][w] for w, k in counted])
    classes = command_class(cmd)
    assert len(set(classes.tolist())) >= 3, classes
    # By the end of a resampling step the next command is drawn: read then, some steps would change class.
    drawn_next = command_class(torch.stack([commanded[k + 1][w] for w, k in counted]))
    assert bool((drawn_next != classes).any())
    for i, name in enumerate(COMMAND_CLASSES):
        got, rows = getattr(t.by_command, name), classes == i
        if not bool(rows.any()):
            assert got is None, name
            continue
        assert got is not None and got.steps == int(rows.sum()), name
        lin = (cmd[rows, :2] - vel[rows, :2]).norm(dim=1).mean()
        yaw = (cmd[rows, 2] - vel[rows, 2]).abs().mean()
        assert got.lin_vel_xy_error == pytest.approx(float(lin), rel=1e-5, abs=1e-9), name
        assert got.yaw_rate_error == pytest.approx(float(yaw), rel=1e-5, abs=1e-9), name
        assert got.standing_lin_vel_xy_error == pytest.approx(float(cmd[rows, :2].norm(dim=1).mean()), rel=1e-6)
    per_class = [c for c in (getattr(t.by_command, n) for n in COMMAND_CLASSES) if c is not None]
    assert sum(c.steps for c in per_class) == t.steps == len(counted)
    assert sum(c.steps * c.lin_vel_xy_error for c in per_class) / t.steps == pytest.approx(t.lin_vel_xy_error)
    assert sum(c.steps * c.yaw_rate_error for c in per_class) / t.steps == pytest.approx(t.yaw_rate_error)


def test_the_gait_counts_swing_steps_and_touchdowns_of_the_first_episodes() -> None:
    """g1_walk's eval reports the share of steps with a foot in swing, the touchdowns per second and
    the stance width, over the same steps as the command tracking; and the saturated action share.
    World 1 starts with its left foot lifted: three steps in swing, then one touchdown."""
    import torch

    from tests.test_collector import _lift_left_foot
    from unilab.collect.build import build_collector
    from unilab.evaluate.rollout import _play
    from unilab.spec.models import SimSpec, task_spec

    # The home pose and commands as they were drawn before 2026-12-03: the same reset draws, so the
    # lifted foot falls in the 3 steps counted below.
    task = task_spec(
        name="g1_walk",
        num_envs=2,
        episode_length_s=0.3,
        default_pose="home",
        commands={"resample_s": 0.0, "standing_share": 0.0},
    )
    with build_collector(task, SimSpec(workers=1), num_envs=2, workers=1) as c:
        lifted: list[bool] = []

        def policy(obs: torch.Tensor) -> torch.Tensor:
            if not lifted:  # after _play's reset: its first step starts from the lifted foot
                _lift_left_foot(c, world=1)
                lifted.append(True)
            return torch.zeros(obs.shape[0], 29)

        played = _play(c, policy, False)
    g = played.gait
    assert g is not None and played.tracking is not None
    assert g.steps == played.tracking.steps == int(played.length.sum()) - 2
    assert g.swing_height == 0.06  # the task's contact height
    assert g.swing_share == pytest.approx(3 / g.steps) and g.feet_air_share == pytest.approx(g.swing_share / 2)
    assert g.touchdowns_per_s * g.steps * 0.02 == pytest.approx(1.0)  # one touchdown in 28 steps of 20 ms
    assert g.stance_width is not None and 0.15 < g.stance_width < 0.4  # the G1's feet, about hip width apart
    assert played.action_saturation == 0.0


def test_a_policy_at_the_bound_saturates_every_action_component() -> None:
    import torch

    from unilab.collect.build import build_collector
    from unilab.evaluate.rollout import _play
    from unilab.spec.models import SimSpec, task_spec

    task = task_spec(name="g1_walk", num_envs=2, episode_length_s=0.1)
    with build_collector(task, SimSpec(workers=1), num_envs=2, workers=1) as c:
        played = _play(c, lambda obs: -torch.ones(obs.shape[0], 29), False)
    assert played.action_saturation == 1.0


@pytest.mark.slow
def test_eval_json_and_text_report_a_walkers_gait(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    tiny = '{name="sac", batch_size=32, actor_hidden_dims=[16], critic_hidden_dims=[16], warmup_env_steps=64}'
    r = unilab(
        "apply", str(SPECS / "g1.toml"), "--quiet",
        "--set", "task.num_envs=4", "--set", "run.total_env_steps=128", "--set", f"algo={tiny}",
        "--set", f'run.output_dir="{out}"',
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (run_dir,) = out.iterdir()
    rep = _report(str(run_dir), "--episodes", "2", "--workers", "1")
    jsonschema.validate(rep, json.loads((ROOT / "schemas" / "eval.v1.json").read_text()))
    g = rep["gait"]
    assert g["swing_height"] == 0.06 and g["steps"] == rep["command_tracking"]["steps"]
    assert 0.0 <= g["swing_share"] <= 1.0 and g["touchdowns_per_s"] >= 0.0 and g["stance_width"] > 0.0
    assert 0.0 <= rep["action_saturation"] <= 1.0
    # The tracking by command class: every counted step in exactly one class, the classes' errors
    # weighted by their steps the overall ones, each ratio the error over a standing robot's.
    t = rep["command_tracking"]
    classes = [c for c in t["by_command"].values() if c is not None]
    assert list(t["by_command"]) == ["forward", "backward", "lateral", "turning", "standing"] and classes
    assert sum(c["steps"] for c in classes) == t["steps"]
    for key in ("lin_vel_xy_error", "yaw_rate_error", "standing_lin_vel_xy_error"):
        assert sum(c["steps"] * c[key] for c in classes) / t["steps"] == pytest.approx(t[key])
    for c in classes:
        if c["standing_lin_vel_xy_error"] > 0:
            assert c["lin_vel_xy_ratio"] == pytest.approx(c["lin_vel_xy_error"] / c["standing_lin_vel_xy_error"])
    text = unilab("eval", str(run_dir), "--episodes", "2", "--workers", "1")
    assert text.returncode == 0, text.stderr
    assert "  gait     a foot in swing on " in text.stdout and "touchdowns/s, stance width" in text.stdout
    assert "of the components saturated (|a| > 0.95)" in text.stdout
    rows = {line.split()[0]: line.split()[1:] for line in text.stdout.splitlines() if line.startswith(" " * 13)}
    assert rows["command"] == ["steps", "|v_xy", "-", "cmd|", "still", "ratio", "|w_z", "-", "cmd|", "still", "ratio"]
    assert rows["all"][:2] == [f"{t['steps']:,}", f"{t['lin_vel_xy_error']:.3f}"]
    for name, c in t["by_command"].items():
        assert rows[name][0] == (f"{c['steps']:,}" if c is not None else "0"), name


def test_a_walking_robots_frames_carry_its_command_and_velocity() -> None:
    """g1_walk's frames hold the episode's velocity command and the base's velocity, for the arrows."""
    import numpy as np
    import torch

    from unilab.collect.build import build_collector
    from unilab.evaluate.rollout import _play
    from unilab.evaluate.video import ClipRecorder
    from unilab.spec.models import SimSpec, task_spec

    task = task_spec(name="g1_walk", num_envs=2, episode_length_s=0.1)
    with build_collector(task, SimSpec(workers=1), num_envs=2, workers=1) as c:
        recorder = ClipRecorder(worlds=2, stride=1)
        seen: list[torch.Tensor] = []  # what the policy was told: the command is an observation term

        def policy(obs: torch.Tensor) -> torch.Tensor:
            seen.append(obs[:, c.task.observation_layout()["velocity_command"]].clone())
            return torch.zeros(obs.shape[0], 29)

        _play(c, policy, False, recorder)
    for w in range(2):
        frames = recorder.frames[w]
        assert len(frames) == 6  # the reset and 5 steps of 20 ms
        told = seen[0][w].numpy()
        assert all(f.command is not None and np.allclose(f.command, told) for f in frames), (w, told)
        assert all(f.velocity is not None and f.velocity.shape == (3,) and f.reference is None for f in frames)


class _FlatRenderer:
    """Stands in for VideoRenderer (no OpenGL): a grey image per frame; ``stop_at`` raises Ctrl-C."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.calls, self.stop_at = 0, stop_at

    def frame(self, frame: object) -> object:
        import numpy as np

        self.calls += 1
        if self.calls == self.stop_at:
            raise KeyboardInterrupt
        return np.full((480, 640, 3), 10 * self.calls % 256, dtype=np.uint8)


def test_a_video_is_written_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames counted back from the file must be the frames sent (ffmpeg's exit status is not
    checked by imageio-ffmpeg); Ctrl-C mid-way leaves nothing; a good video is renamed into place."""
    import imageio_ffmpeg
    import numpy as np

    from unilab.errors import UnilabError
    from unilab.evaluate.video import Frame, write_video

    clips = [[Frame(np.zeros(2), None)] * 3, [Frame(np.zeros(2), None)] * 2]
    out = tmp_path / "v.mp4"
    written = write_video(_FlatRenderer(), clips, 25.0, out, progress=False)  # type: ignore[arg-type]
    assert written.frames == 3 + 11 + 2 and written.starts == [0, 14]
    assert imageio_ffmpeg.count_frames_and_secs(str(out))[0] == 16
    with pytest.raises(KeyboardInterrupt):
        write_video(_FlatRenderer(stop_at=4), clips, 25.0, tmp_path / "w.mp4", progress=False)  # type: ignore[arg-type]
    real_count = imageio_ffmpeg.count_frames_and_secs
    monkeypatch.setattr(imageio_ffmpeg, "count_frames_and_secs", lambda p: (real_count(p)[0] - 1, 0.0))
    with pytest.raises(UnilabError, match="the encoder wrote 15 of 16 frames"):
        write_video(_FlatRenderer(), clips, 25.0, tmp_path / "x.mp4", progress=False)  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.mp4"]


def test_bad_video_requests_are_refused_before_anything_is_played(
    cartpole_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from unilab.cli.main import main

    def refused_here(*args: str, says: str) -> str:
        """The refusal from a call in this process: a request is checked before MuJoCo renders."""
        rc = main(["eval", *args])
        captured = capsys.readouterr()
        _refused(subprocess.CompletedProcess(args, rc, captured.out, captured.err), says)
        return captured.err

    run = str(cartpole_run)
    refused_here(run, "--video", str(tmp_path / "clip.avi"), says="must end in .mp4")
    refused_here(run, "--video", str(tmp_path / "no" / "clip.mp4"), says="does not exist")
    refused_here(run, "--video", str(tmp_path), says="must end in .mp4")
    refused_here(
        run, "--episodes", "2", "--video", str(tmp_path / "c.mp4"), "--video-episodes", "3",
        says="--video-episodes 3 is out of range",
    )  # fmt: skip
    refused_here(run, "--video-episodes", "2", says="--video-episodes needs --video")
    for k in ("0", "65"):
        err = refused_here(
            run, "--episodes", "100", "--video", str(tmp_path / "c.mp4"), "--video-episodes", k,
            says=f"--video-episodes {k} is out of range",
        )  # fmt: skip
        assert "at most 64 are filmed" in err
    # No OpenGL platform that works here: glfw without a display, a value MuJoCo rejects.
    for gl in ("glfw", "no-such-platform"):
        no_display = {"MUJOCO_GL": gl, "DISPLAY": None, "WAYLAND_DISPLAY": None}
        r = unilab("eval", run, "--video", str(tmp_path / "c.mp4"), env=no_display)
        _refused(r, f"(MUJOCO_GL={gl})")
        assert "apt install libegl1" in r.stderr
        # A bad request is named first, whatever the platform.
        _refused(unilab("eval", run, "--video", str(tmp_path / "c.avi"), env=no_display), "must end in .mp4")
    assert list(tmp_path.iterdir()) == []


def test_the_video_camera_follows_the_robot_and_draws_a_tracked_reference() -> None:
    """The G1 fills about as much of the frame 20 m from where it started as it did there; a
    reference pose (g1_motion_tracking's) is drawn as a green ghost beside it, and a velocity command
    (g1_walk's) and the base's velocity as arrows above it."""
    script = """
import numpy as np
from unilab.evaluate.gl import load_mujoco_for_rendering
load_mujoco_for_rendering()
import mujoco
from unilab.evaluate.video import Frame, VideoRenderer, render_model
from unilab.robot.model import RobotLayout, build_model_xml
model = render_model(build_model_xml(None, 0.005))
r = VideoRenderer(model)
qpos = RobotLayout.from_model(model).default_qpos.copy()
beside = qpos.copy(); beside[0] += 0.5
for ref in (None, beside):
    img = r.frame(Frame(qpos, ref)).astype(int)
    print(((img[..., 1] > img[..., 0] + 30) & (img[..., 1] > img[..., 2])).mean())
plain = r.renderer.scene.ngeom if r.frame(Frame(qpos)) is not None else 0
img = r.frame(Frame(qpos, command=np.array([1.0, 0.0, 0.0]), velocity=np.array([0.0, 0.5, 0.0])))
print(r.renderer.scene.ngeom - plain)
g = img.astype(int)
print(((g[..., 1] > g[..., 0] + 30) & (g[..., 1] > g[..., 2])).mean())
r.renderer.enable_segmentation_rendering()
for dx, dy in ((0.0, 0.0), (20.0, -7.0)):
    q = qpos.copy(); q[0] += dx; q[1] += dy
    r.data.qpos[:] = q
    mujoco.mj_forward(model, r.data)
    r.renderer.update_scene(r.data, camera=r.camera)
    seg = r.renderer.render()
    geom = seg[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM)
    robot = geom & (model.geom_bodyid[np.clip(seg[..., 0], 0, model.ngeom - 1)] != 0)
    print(robot.mean())
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    green_alone, green_with_ghost, arrows, green_arrow, here, away = (float(x) for x in r.stdout.split())
    assert green_alone == 0.0 and green_with_ghost > 0.01
    assert arrows == 2 and green_arrow > 0.0005, "g1_walk's command (green) and velocity arrows are drawn"
    assert here > 0.02, "the standing robot takes a visible part of the frame"
    assert 0.8 < away / here < 1.25


def test_a_user_mjcf_asking_for_a_small_offscreen_buffer_still_renders_640x480() -> None:
    from unilab.evaluate.video import HEIGHT, WIDTH, render_model

    xml = (
        '<mujoco><visual><global offwidth="320" offheight="200"/></visual>'
        '<worldbody><geom size=".1"/></worldbody></mujoco>'
    )
    model = render_model(xml)
    assert (model.vis.global_.offwidth, model.vis.global_.offheight) == (WIDTH, HEIGHT)
    assert model.ntex == 1, "the sky"


@pytest.mark.slow
def test_a_runs_own_motion_file_is_found_where_the_run_was_applied_and_a_changed_one_refused(tmp_path: Path) -> None:
    """A relative input path in the plan is the working directory's of `unilab apply`: eval run
    elsewhere finds the file there, and refuses it once it differs from what the run trained on."""
    applied = tmp_path / "work"
    applied.mkdir()
    shutil.copy(ROOT / "unilab" / "assets" / "motions" / "g1_squat.npz", applied / "clip.npz")
    shutil.copy(SPECS / "g1_motion_tracking.toml", applied / "spec.toml")
    r = unilab(
        "apply", "spec.toml", "--quiet", "--set", 'task.motion="clip.npz"', "--set", "task.num_envs=8",
        "--set", "run.total_env_steps=64", "--set", '''algo={name="ppo", num_steps_per_env=8, hidden_dims=[16]}''',
        cwd=applied,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (run_dir,) = (applied / "runs").iterdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ok = unilab("eval", str(run_dir), "--episodes", "4", "--json", "--video", "g1.mp4", cwd=elsewhere)
    assert ok.returncode == 0, ok.stderr
    rep = json.loads(ok.stdout)
    assert rep["task"] == "g1_motion_tracking" and rep["episodes"] == 4
    # The G1 on film: 50 Hz control filmed at 25 fps, as many frames as the report says.
    _, frames = _video_frames(elsewhere / "g1.mp4")
    assert len(frames) == rep["video"]["frames"] >= 1 and rep["video"]["fps"] == 25.0
    assert "motion_joint_pos" in rep["reward_terms"]
    with (applied / "clip.npz").open("ab") as f:
        f.write(b"\0")
    _refused(unilab("eval", str(run_dir), cwd=elsewhere), "task.motion")
    r = unilab("eval", str(run_dir), cwd=elsewhere)
    assert str(applied) in r.stderr, r.stderr


def test_eval_is_refused_off_linux_before_anything_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import platform

    from unilab.errors import UnilabError
    from unilab.evaluate.rollout import EvalRequest, evaluate

    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    req = EvalRequest(run_dir=tmp_path / "missing", episodes=4, seed=0, checkpoint=None, workers=None, progress=False)
    with pytest.raises(UnilabError) as e:
        evaluate(req)
    assert "`unilab eval` runs unilab's runtime, which needs Linux" in e.value.summary
    assert "this host runs Darwin" in e.value.summary and "--host-facts" in e.value.fix
