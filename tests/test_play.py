"""`unilab play`: a run's policy live in the browser viewer.

The browser test drives the real thing: `unilab play` on a short g1_walk run, the page opened in
headless Chromium, a screenshot, the forward-velocity slider moved with the keyboard, and the
server's own status lines read back. The session tests check what the viewer relies on (a held
command is what the policy observes; a tracking task starts where the clip scrubber says) and the
refusals check one paragraph and a non-zero exit for each bad input."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from tests.conftest import ROOT, load_tool, run_unilab

pytestmark = pytest.mark.slow


def _tool() -> ModuleType:
    return load_tool("play_screenshot")


@pytest.fixture(scope="module")
def walk_run(g1_smoke_run: Path) -> Path:
    return g1_smoke_run


def test_the_viewer_serves_the_page_and_takes_the_forward_slider_from_the_keyboard(
    walk_run: Path, tmp_path: Path
) -> None:
    tool = _tool()
    server = tool.PlayServer.start(walk_run, tool.free_port())
    page = tool.open_browser(960, 600)
    try:
        page.get(server.url)
        assert len(tool.sliders(page, 3)) == 3  # vx, vy, yaw rate
        before = server.status(4.0)
        assert before and all(m["cvx"] == "+0.00" for m in before), server.lines[-5:]  # held at the sliders' 0
        shot = tmp_path / "play.png"
        tool.save_screenshot(page, shot)
        tool.move_forward_slider(page, 10)  # 10 presses of 0.05 m/s
        server.wait_for(r"command: vx \+0\.50 m/s, vy \+0\.00 m/s, yaw \+0\.00 rad/s", 30)
        after = server.status(4.0)
    finally:
        page.quit()
        rc = server.stop()
    # The command the status lines print is read from the task, which the policy observes; the
    # base velocity is the simulation's, live (a smoke-length policy does not walk: it only moves).
    assert after and all(m["cvx"] == "+0.50" for m in after), server.lines[-5:]
    assert len({m["vx"] + m["vy"] + m["wz"] for m in before + after}) > 1, "the base velocity never changed"
    assert rc == 0 and server.lines[-1] == "stopped", server.lines[-5:]
    _check_screenshot(shot)


def _check_screenshot(path: Path) -> None:
    """A PNG of the whole page with the robot drawn: the 3D view is not one flat colour."""
    from PIL import Image

    img = np.asarray(Image.open(path).convert("RGB"))
    assert img.shape[0] >= 400 and img.shape[1] >= 900
    view = img[:, : img.shape[1] * 2 // 3]  # the scene, left of the panel
    assert len(np.unique(view.reshape(-1, 3), axis=0)) > 50


def test_a_held_command_is_what_the_policy_observes_clamped_to_the_trained_range(walk_run: Path) -> None:
    from unilab.play.session import PlayRequest, open_session

    session = open_session(PlayRequest(run_dir=walk_run, worlds=2))
    try:
        names = [name for name, _ in session.c.obs_terms]
        dims = [dim for _, dim in session.c.obs_terms]
        start = sum(dims[: names.index("velocity_command")])
        _, hi_x = session.command_ranges[0]  # type: ignore[index]
        session.set_command((hi_x + 5.0, 0.1, -0.2))
        for _ in range(3):
            session.step()
        observed = session.obs[:, start : start + 3]
        assert torch.allclose(observed, torch.tensor([[hi_x, 0.1, -0.2]] * 2), atol=1e-6)
        snap = session.snapshot()
        assert snap.command is not None and np.allclose(snap.command, [[hi_x, 0.1, -0.2]] * 2)
        assert snap.velocity is not None and snap.xpos.shape[0] == 2 and snap.reference_qpos is None
        assert set(snap.term_step) == set(session.reward_names) and snap.episode_length == 3
        episode = snap.episode
        session.reset()
        assert session.snapshot().episode == episode + 1 and session.snapshot().episode_length == 0
    finally:
        session.close()


def test_a_tracking_task_starts_where_the_clip_scrubber_says_and_shows_its_reference() -> None:
    import mujoco

    from unilab.collect.build import build_collector, compose_robot
    from unilab.play.scene import Kinematics, body_meshes
    from unilab.play.session import PlaySession
    from unilab.spec.models import SimSpec, task_spec

    task = task_spec(name="g1_motion_tracking", num_envs=1, motion="builtin:g1_squat")
    sim = SimSpec(workers=1)
    model = mujoco.MjModel.from_xml_string(compose_robot(task, sim, Path(".")).xml)
    c = build_collector(task, sim, seed=1)
    session = PlaySession(c, lambda obs: torch.zeros(obs.shape[0], c.action_dim), model)
    try:
        frames, _ = session.clip  # type: ignore[misc]
        session.start_clip_at(frames // 2)
        assert session.snapshot().clip_frame == frames // 2
        session.step()
        snap = session.snapshot()
        assert snap.clip_frame is not None and snap.clip_frame > frames // 2 and snap.command is None
        assert snap.reference_qpos is not None
        xpos, _ = Kinematics(model).poses(snap.reference_qpos[0])
        assert np.isfinite(xpos).all() and xpos[session.base_body, 2] > 0.3  # the clip's pelvis, standing
        assert len(body_meshes(model)) >= 10
    finally:
        session.close()


def _refused(r, *needles: str) -> None:
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, r.stderr


def test_a_port_in_use_is_refused_not_moved(walk_run: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run_unilab("play", str(walk_run), "--port", str(port))
    _refused(r, f"port {port} on 127.0.0.1 is in use", "--port")


def test_a_run_without_checkpoints_is_refused(walk_run: Path, tmp_path: Path) -> None:
    bare = tmp_path / walk_run.name
    shutil.copytree(walk_run, bare, ignore=shutil.ignore_patterns("ckpt-*"))
    r = run_unilab("play", str(bare))
    _refused(r, "holds no checkpoint")


def test_bad_worlds_a_bad_host_and_a_missing_viewer_are_refused(walk_run: Path, tmp_path: Path) -> None:
    _refused(run_unilab("play", str(walk_run), "--worlds", "0"), "--worlds 0 is out of range")
    _refused(run_unilab("play", str(walk_run), "--host", "no-such-host.invalid"), "cannot serve on it")
    shim = tmp_path / "shim" / "viser"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('viser is not installed here')\n")
    r = run_unilab("play", str(walk_run), env={"PYTHONPATH": f"{shim.parent}{os.pathsep}{ROOT}"})
    _refused(r, "viser", "bash tools/setup.sh play")
