"""`unilab play`'s browser viewer, built on viser: the session's worlds drawn live, the command
under sliders, pause / step / reset, the live reward terms and how the last episode ended.

One thread steps the physics (this module's loop, in the main thread); viser's callbacks only
record what the user asked for, and the loop applies it between two steps, so the collector is
never touched from two threads.
"""

from __future__ import annotations

import contextlib
import errno
import io
import math
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from unilab.errors import UnilabError
from unilab.play.scene import Kinematics, body_meshes, tinted

if TYPE_CHECKING:
    from unilab.play.session import PlaySession, Snapshot

DRAW_HZ = 30.0  # scene updates per second: a browser shows no more
PANEL_HZ = 4.0  # the panel's text
WORLD_SPACING = 1.5  # m between worlds drawn side by side (they share one floor position in the physics)
COMMAND_STEP = 0.05  # slider step of the velocity command: arrow keys move it by this
ARROW_HEIGHT = 1.1  # m above the floor the command and velocity arrows are drawn
COMMAND_COLOUR = (40, 180, 80)
VELOCITY_COLOUR = (40, 110, 230)
GHOST_ALPHA = 0.35


def check_port(host: str, port: int) -> None:
    """Refuse a port another program serves on, before the viewer starts (viser would move to the next)."""
    if not 1 <= port <= 65535:
        raise UnilabError(f"--port {port} is out of range", fix="pass --port between 1 and 65535")
    if not _bindable(host, port):
        raise UnilabError(
            f"port {port} on {host} is in use",
            fix=f"pass a free port with --port (e.g. --port {port + 1 if port < 65535 else 8080}), "
            f"or stop what serves on {port}",
        )


def free_port(host: str, start: int) -> int:
    """The first port from ``start`` nothing serves on."""
    for port in range(start, min(start + 100, 65536)):
        if _bindable(host, port):
            return port
    raise UnilabError(f"no free port among {start}..{start + 99} on {host}", fix="pass a free port with --port")


def _bindable(host: str, port: int) -> bool:
    """Whether a server may listen on host:port now: False when the port is taken; a host this
    machine cannot serve on is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            if exc.errno == errno.EACCES:
                raise UnilabError(
                    f"port {port} on {host} may not be served by this user ({exc.strerror})",
                    fix="pass a port from 1024 up with --port",
                ) from None
            raise UnilabError(
                f"--host {host}: this machine cannot serve on it ({exc.strerror or exc})",
                fix="pass one of this machine's IPv4 addresses, 127.0.0.1 (this machine only) or 0.0.0.0 (every "
                "interface)",
            ) from None
    return True


@dataclass
class _Requests:
    """What the browser asked for since the last step (written by viser's threads)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    command: tuple[float, float, float] | None = None
    clip_start: int | None = None
    reset: bool = False
    steps: int = 0  # single steps asked for while paused
    paused: bool = False


class Viewer:
    def __init__(self, session: PlaySession, host: str, port: int, run_label: str) -> None:
        import viser

        self.session = session
        self.requests = _Requests()
        with contextlib.redirect_stdout(io.StringIO()):  # viser's own banner: the command prints the address
            self.server = viser.ViserServer(host=host, port=port, label="unilab play", verbose=False)
        if self.server.get_port() != port:  # viser moved to another port: the one asked for is taken
            self.server.stop()
            raise UnilabError(f"port {port} on {host} is in use", fix="pass a free port with --port")
        self.host, self.port = host, port
        self._kin = Kinematics(session.model) if session.clip is not None else None
        self._origin = np.zeros(3)
        self._base = session.base_body
        if session.command_ranges is not None:
            session.set_command((0.0, 0.0, 0.0))  # what the sliders show until they are moved
        self._build_scene()
        self._build_panel(run_label)

    @property
    def url(self) -> str:
        return f"http://{'localhost' if self.host in ('127.0.0.1', '0.0.0.0') else self.host}:{self.port}"

    # ------------------------------------------------------------------ scene
    def _build_scene(self) -> None:
        scene = self.server.scene
        scene.set_up_direction("+z")
        self._floor = scene.add_grid("/floor", width=20.0, height=20.0, cell_size=0.5, section_size=1.0)
        self.server.initial_camera.position = (1.8, -2.2, 1.3)
        self.server.initial_camera.look_at = (0.0, 0.0, 0.6)
        self.follow = True  # the panel's "Follow world 0": the view stays on the robot as it walks
        self._meshes = body_meshes(self.session.model)
        self._bodies: list[list[Any]] = []
        for w in range(self.session.worlds):
            self._bodies.append([scene.add_mesh_trimesh(f"/world{w}/{b.name}", b.mesh.copy()) for b in self._meshes])
        self._ghost: list[Any] = []
        if self.session.clip is not None:
            for b in self._meshes:
                ghost = tinted(b.mesh.copy(), (77, 217, 102, int(255 * GHOST_ALPHA)))  # eval --video's green
                self._ghost.append(scene.add_mesh_trimesh(f"/reference/{b.name}", ghost, cast_shadow=False))
        self._arrows: Any = None
        if self.session.command_ranges is not None:
            n = self.session.worlds
            self._arrows = scene.add_arrows(
                "/arrows",
                points=np.zeros((2 * n, 2, 3), dtype=np.float32),
                colors=np.array([COMMAND_COLOUR] * n + [VELOCITY_COLOUR] * n, dtype=np.uint8),
                shaft_radius=0.015,
                head_radius=0.04,
                head_length=0.08,
            )

    def _offset(self, w: int) -> np.ndarray:
        return np.array([0.0, WORLD_SPACING * (w - (self.session.worlds - 1) / 2.0), 0.0]) - self._origin

    def draw(self, snap: Snapshot) -> None:
        # Following, world 0's base stays over the origin and the floor moves under it (by whole
        # grid sections, so its lines stay where the floor's are).
        self._origin = (
            np.array([snap.xpos[0, self._base, 0], snap.xpos[0, self._base, 1], 0.0]) if self.follow else np.zeros(3)
        )
        with self.server.atomic():
            self._floor.position = -(self._origin - np.floor(self._origin))
            for w, handles in enumerate(self._bodies):
                off = self._offset(w)
                for h, b in zip(handles, self._meshes, strict=True):
                    h.position = snap.xpos[w, b.body] + off
                    h.wxyz = snap.xquat[w, b.body]
            if self._kin is not None and snap.reference_qpos is not None:
                xpos, xquat = self._kin.poses(snap.reference_qpos[0])
                off = self._offset(0)
                for h, b in zip(self._ghost, self._meshes, strict=True):
                    h.position = xpos[b.body] + off
                    h.wxyz = xquat[b.body]
            if self._arrows is not None and snap.command is not None and snap.velocity_w is not None:
                self._arrows.points = self._arrow_points(snap)

    def _arrow_points(self, snap: Snapshot) -> np.ndarray:
        """Per world the command (heading frame, turned into the world's) and the base velocity, from
        a point above the base; the yaw rate is not drawn (the numbers in the panel say it)."""
        assert snap.command is not None and snap.velocity_w is not None  # the caller checked
        n = self.session.worlds
        pts = np.zeros((2 * n, 2, 3), dtype=np.float32)
        for w in range(n):
            base = snap.xpos[w, self._base] + self._offset(w)
            start = np.array([base[0], base[1], ARROW_HEIGHT])
            c, s = math.cos(snap.heading[w]), math.sin(snap.heading[w])
            vx, vy = snap.command[w, 0], snap.command[w, 1]
            pts[w] = (start, start + np.array([c * vx - s * vy, s * vx + c * vy, 0.0]))
            pts[n + w] = (start, start + np.array([snap.velocity_w[w, 0], snap.velocity_w[w, 1], 0.0]))
        return pts

    # ------------------------------------------------------------------ panel
    def _build_panel(self, run_label: str) -> None:
        gui, s, req = self.server.gui, self.session, self.requests
        gui.add_markdown(run_label)
        self.status = gui.add_markdown("starting")
        if s.command_ranges is not None:
            with gui.add_folder("Velocity command"):
                labels = ("forward vx (m/s)", "lateral vy (m/s)", "yaw rate (rad/s)")
                hint = "drag, or click the handle and use the arrow keys"
                self.sliders = [
                    gui.add_slider(label, min=lo, max=hi, step=COMMAND_STEP, initial_value=0.0, hint=hint)
                    for label, (lo, hi) in zip(labels, s.command_ranges, strict=True)
                ]
                stop = gui.add_button("Stand still", hint="zero the command")

            def on_command(_: Any) -> None:
                with req.lock:
                    req.command = tuple(float(sl.value) for sl in self.sliders)  # type: ignore[assignment]

            for sl in self.sliders:
                sl.on_update(on_command)

            @stop.on_click
            def _(_: Any) -> None:
                for sl in self.sliders:
                    sl.value = 0.0  # fires on_command

        if s.clip is not None:
            frames, fps = s.clip
            with gui.add_folder("Reference motion"):
                gui.add_markdown("The ghost is the clip's pose the robot tracks.")
                scrub = gui.add_slider(
                    "clip start (s)",
                    min=0.0,
                    max=round((frames - 2) / fps, 3),
                    step=round(1.0 / fps, 6),
                    initial_value=0.0,
                )
                start = gui.add_button("Start the episode here")

            @start.on_click
            def _(_: Any) -> None:
                with req.lock:
                    req.clip_start = min(frames - 2, round(float(scrub.value) * fps))

        with gui.add_folder("Simulation"):
            pause = gui.add_checkbox("Pause", initial_value=False)
            follow = gui.add_checkbox("Follow world 0", initial_value=True, hint="keep the view on the robot")
            step = gui.add_button("Step", hint="one control step while paused")
            reset = gui.add_button("Reset")

        @pause.on_update
        def _(_: Any) -> None:
            with req.lock:
                req.paused = bool(pause.value)

        @follow.on_update
        def _(_: Any) -> None:
            self.follow = bool(follow.value)

        @step.on_click
        def _(_: Any) -> None:
            with req.lock:
                req.steps += 1

        @reset.on_click
        def _(_: Any) -> None:
            with req.lock:
                req.reset = True

        with gui.add_folder("Episode (world 0)"):
            self.episode_text = gui.add_markdown("")
            self.terms_text = gui.add_markdown("")

    def update_panel(self, snap: Snapshot, realtime: float, paused: bool) -> None:
        s = self.session
        pace = (
            "paused"
            if paused
            else f"{realtime:.2f}x real time" + ("" if realtime > 0.95 else " (as fast as this host steps it)")
        )
        self.status.content = f"**{pace}** · {snap.steps * s.control_dt:.1f} s simulated · {s.worlds} world(s)"
        lines = [f"episode **{snap.episode}**: {snap.episode_length} steps, return **{snap.episode_return:.2f}**"]
        if snap.last_end is not None:
            e = snap.last_end
            lines.append(
                f"last episode ({e.number}) ended by **{e.ending}** after {e.length} steps "
                f"({e.length * s.control_dt:.1f} s), return {e.episode_return:.2f}"
            )
        if snap.command is not None and snap.velocity is not None:
            c = snap.command[0]
            v, which = _base_velocity(snap)
            lines.append(
                f"command vx {c[0]:+.2f} vy {c[1]:+.2f} m/s, yaw {c[2]:+.2f} rad/s  \n"
                f"{which} vx {v[0]:+.2f} vy {v[1]:+.2f} m/s, yaw {v[2]:+.2f} rad/s"
            )
        if snap.clip_frame is not None and s.clip is not None:
            lines.append(f"clip time {snap.clip_frame / s.clip[1]:.2f} s of {(s.clip[0] - 1) / s.clip[1]:.2f} s")
        self.episode_text.content = "\n\n".join(lines)
        rows = [f"| {k} | {snap.term_step[k]:+.4f} | {snap.term_episode[k]:+.2f} |" for k in s.reward_names]
        self.terms_text.content = "| reward term | this step | episode |\n|---|---:|---:|\n" + "\n".join(rows)

    # ------------------------------------------------------------------ loop
    def take_requests(self) -> tuple[bool, int]:
        """Apply what the browser asked for; returns (paused, single steps to take)."""
        req, s = self.requests, self.session
        with req.lock:
            command, clip_start, reset = req.command, req.clip_start, req.reset
            req.command, req.clip_start, req.reset = None, None, False
            steps, req.steps = req.steps, 0
            paused = req.paused
        if command is not None:
            s.set_command(command)
            say(f"command: vx {command[0]:+.2f} m/s, vy {command[1]:+.2f} m/s, yaw {command[2]:+.2f} rad/s")
        if clip_start is not None:
            s.start_clip_at(clip_start)
            say(f"episodes start at clip frame {clip_start}")
        if reset:
            s.reset()
            say("reset")
        return paused, steps

    def close(self) -> None:
        with contextlib.redirect_stdout(io.StringIO()):  # viser says it stopped; the command says so
            self.server.stop()


def say(text: str) -> None:
    """One line on stdout, above the status line a terminal shows."""
    sys.stdout.write(("\r\033[K" if sys.stdout.isatty() else "") + text + "\n")
    sys.stdout.flush()


def _base_velocity(snap: Snapshot) -> tuple[np.ndarray, str]:
    """World 0's base velocity over the last second, or this step's at an episode's start."""
    if snap.velocity_mean is not None:
        return snap.velocity_mean, "base (1 s mean)"
    assert snap.velocity is not None  # the callers checked
    return snap.velocity[0], "base (now)"


def console_status(snap: Snapshot, realtime: float, paused: bool, control_dt: float) -> str:
    text = f"t {snap.steps * control_dt:7.1f} s  " + ("paused" if paused else f"{realtime:4.2f}x real time")
    text += f"  episode {snap.episode} step {snap.episode_length} return {snap.episode_return:.2f}"
    if snap.command is not None and snap.velocity is not None:
        c = snap.command[0]
        v, which = _base_velocity(snap)
        text += f"  command vx {c[0]:+.2f} vy {c[1]:+.2f} wz {c[2]:+.2f}"
        text += f"  {which} vx {v[0]:+.2f} vy {v[1]:+.2f} wz {v[2]:+.2f}"
    return text


def serve(session: PlaySession, viewer: Viewer, stop: Any, status_every_s: float) -> None:
    """Step in real time (or as fast as the host steps, said on screen) until ``stop()``."""
    dt = session.control_dt
    tty = sys.stdout.isatty()
    next_step = time.perf_counter()
    last_draw = last_panel = last_status = 0.0
    window: list[tuple[float, int]] = []  # (wall time, steps) over the last two seconds: the pace
    while not stop():
        paused, single = viewer.take_requests()
        for _ in range(single if paused else 1):
            if (end := session.step()) is not None:
                e = end
                say(f"episode {e.number} ended by {e.ending} after {e.length} steps, return {e.episode_return:.2f}")
        now = time.perf_counter()
        window.append((now, session.steps))
        while window and now - window[0][0] > 2.0:
            window.pop(0)
        span = now - window[0][0]
        realtime = (window[-1][1] - window[0][1]) * dt / span if span > 0.2 else 1.0
        snap = None  # read at the drawing, panel and status rates, not every step
        if now - last_draw >= 1.0 / DRAW_HZ:
            snap = session.snapshot()
            viewer.draw(snap)
            last_draw = now
        if now - last_panel >= 1.0 / PANEL_HZ:
            snap = snap or session.snapshot()
            viewer.update_panel(snap, realtime, paused)
            last_panel = now
        if now - last_status >= (0.5 if tty else status_every_s):
            snap = snap or session.snapshot()
            line = console_status(snap, realtime, paused, dt)
            sys.stdout.write(f"\r\033[K{line}" if tty else line + "\n")
            sys.stdout.flush()
            last_status = now
        next_step += dt
        wait = next_step - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        elif wait < -0.25:  # behind: run as fast as the host allows, without a burst to catch up
            next_step = time.perf_counter()
    if tty:
        sys.stdout.write("\r\033[K")
