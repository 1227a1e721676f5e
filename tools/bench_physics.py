"""Raw physics throughput of the backends: env steps/s (one env step = ``decimation`` substeps).

The G1 starts standing and every world gets the constant standing control. Prints one row per
(backend, workers, num_envs) and, last, ``workers2_vs_1=<ratio>`` of the CPU backend at the
largest size. The CPU is shared on development machines: the 1-minute load average is printed
with the table; re-run when the machine is quiet before quoting a figure.

    python tools/bench_physics.py                      # CPU backend, 64/256/1024 envs, 1 and 2 workers
    python tools/bench_physics.py --mjwarp-device cpu --sizes 16
    python tools/bench_physics.py --schemes            # cost of the ways to end a step consistently
    python tools/bench_physics.py --signalling         # worker round-trip latency of pipes/Events/Connections
    python tools/bench_physics.py --acc-solve          # the backend with and without the accelerometer's solve
    python tools/bench_physics.py --solver-work        # solver work per physics step: standing vs random actions
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.sim_models: the pose helper


def _cpu_seconds(worker_pids: list[int]) -> float:
    """CPU time (user + system) used so far by this process and the given workers."""
    t = os.times()
    total = t.user + t.system
    tick = os.sysconf("SC_CLK_TCK")
    for pid in worker_pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def _bench(backend, qpos, ctrl, seconds: float, min_steps: int) -> tuple[float, float]:
    """(env steps/s wall clock, CPU microseconds per env step over parent and workers).

    The CPU time is insensitive to other load on the machine, so it shows whether the workers do
    more work per env step than the in-process loop even when the wall-clock rate is noisy."""
    import torch

    backend.reset(torch.ones(backend.num_envs, dtype=torch.bool), qpos, torch.zeros(backend.num_envs, backend.dims.nv))
    for _ in range(2):  # warm caches (and Warp kernels)
        backend.step(ctrl)
    pids = backend.worker_pids() if hasattr(backend, "worker_pids") else []
    steps, c0, t0 = 0, _cpu_seconds(pids), time.perf_counter()
    while steps < min_steps or time.perf_counter() - t0 < seconds:
        backend.step(ctrl)
        steps += 1
    if backend.device.type == "cuda":
        torch.cuda.synchronize(backend.device)
    wall, cpu = time.perf_counter() - t0, _cpu_seconds(pids) - c0
    env_steps = backend.num_envs * steps
    return env_steps / wall, cpu / env_steps * 1e6


# ---------------------------------------------------------------------------------------------
# Signalling: empty parent -> workers -> parent round trips with each candidate mechanism.
def _pipe_worker(cmd, done) -> None:
    cfd, dfd = cmd.fileno(), done.fileno()
    while (b := os.read(cfd, 1)) and b != b"q":
        os.write(dfd, b"k")


def _event_worker(go, done, quit_flag) -> None:
    while True:
        go.wait()
        go.clear()
        if quit_flag.value:
            return
        done.set()


def _conn_worker(conn) -> None:
    while conn.recv_bytes() != b"q":
        conn.send_bytes(b"k")


def _signalling_round_trip_us(kind: str, workers: int, n: int = 3000) -> float:
    import multiprocessing as mp
    import select

    ctx = mp.get_context("spawn")
    procs = []
    if kind == "pipe+poll":
        ends = []
        for _ in range(workers):
            cr, cw = ctx.Pipe(duplex=False)
            dr, dw = ctx.Pipe(duplex=False)
            procs.append(ctx.Process(target=_pipe_worker, args=(cr, dw), daemon=True))
            ends.append((cw, dr))
        poll = select.poll()
        for _, dr in ends:
            poll.register(dr.fileno(), select.POLLIN)

        def round_trip() -> None:
            for cw, _ in ends:
                os.write(cw.fileno(), b"s")
            pending = len(ends)
            while pending:
                for fd, _ in poll.poll(5000):
                    os.read(fd, 1)
                    pending -= 1

        def stop() -> None:
            for cw, _ in ends:
                os.write(cw.fileno(), b"q")
    elif kind == "mp.Event pair":
        events = [(ctx.Event(), ctx.Event()) for _ in range(workers)]
        quit_flag = ctx.Value("i", 0)
        procs = [ctx.Process(target=_event_worker, args=(g, d, quit_flag), daemon=True) for g, d in events]

        def round_trip() -> None:
            for go, _ in events:
                go.set()
            for _, done in events:
                done.wait(5)
                done.clear()

        def stop() -> None:
            quit_flag.value = 1
            for go, _ in events:
                go.set()
    else:  # Connection.send_bytes / recv_bytes
        conns = []
        for _ in range(workers):
            a, b = ctx.Pipe()
            procs.append(ctx.Process(target=_conn_worker, args=(b,), daemon=True))
            conns.append(a)

        def round_trip() -> None:
            for c in conns:
                c.send_bytes(b"s")
            for c in conns:
                c.recv_bytes()

        def stop() -> None:
            for c in conns:
                c.send_bytes(b"q")

    for p in procs:
        p.start()
    for _ in range(200):
        round_trip()
    t0 = time.perf_counter()
    for _ in range(n):
        round_trip()
    us = (time.perf_counter() - t0) / n * 1e6
    stop()
    for p in procs:
        p.join(5)
    return us


def _bench_signalling(xml: str, qpos1: list[float], ctrl1: list[float], decimation: int) -> None:
    import torch

    from unilab.sim.factory import make_backend

    print("empty round trip parent -> workers -> parent (spawn context):")
    for workers in (1, 2):
        for kind in ("pipe+poll", "mp.Event pair", "Connection bytes"):
            print(f"  {kind:<18} workers={workers}: {_signalling_round_trip_us(kind, workers):7.1f} us", flush=True)
    print("backend step latency, 2 worlds (physics included):")
    for workers in (1, 2):
        b = make_backend("mujoco", xml, 2, decimation, workers=workers)
        try:
            qpos, ctrl = torch.tensor(qpos1).repeat(2, 1), torch.tensor(ctrl1).repeat(2, 1)
            rate, _ = _bench(b, qpos, ctrl, 1.0, 3)
        finally:
            b.close()
        print(f"  workers={workers}: {2 / rate * 1e6:7.1f} us per step()", flush=True)


def _bench_schemes(xml: str, qpos: list[float], ctrl: list[float], decimation: int, reps: int = 300) -> None:
    """Per-env-step cost of the ways to end a control step with a state-consistent MjData.

    Every scheme starts each repetition from the same copied state (standing, mid-episode), and
    the schemes are interleaved, so load on a shared machine hits them alike; the minimum is reported.
    """
    import mujoco
    import numpy as np

    m = mujoco.MjModel.from_xml_string(xml)
    base = mujoco.MjData(m)
    base.qpos[:], base.ctrl[:] = qpos, ctrl
    mujoco.mj_forward(m, base)
    for _ in range(20):  # a settled, in-contact state
        mujoco.mj_step(m, base)
    mujoco.mj_forward(m, base)

    def mj_step_only(d):  # NOT consistent: kinematics/sensors of the previous substep
        for _ in range(decimation):
            mujoco.mj_step(m, d)

    def mj_step_then_forward(d):
        mj_step_only(d)
        mujoco.mj_forward(m, d)

    def split(d):
        for _ in range(decimation):
            mujoco.mj_step2(m, d)
            mujoco.mj_step1(m, d)

    def split_actuation(d):  # consistent when no sensor needs the acceleration stage
        split(d)
        mujoco.mj_fwdActuation(m, d)

    def split_acc_tail(d):  # what the backends do for models with acceleration-stage sensors
        split_actuation(d)
        mujoco.mj_fwdAcceleration(m, d)
        mujoco.mj_fwdConstraint(m, d)
        mujoco.mj_rnePostConstraint(m, d)
        mujoco.mj_sensorAcc(m, d)

    schemes = {
        "mj_step x dec (inconsistent)": mj_step_only,
        "mj_step x dec + mj_forward": mj_step_then_forward,
        "step2/step1 x dec + fwdActuation": split_actuation,
        "step2/step1 x dec + acc tail": split_acc_tail,
    }
    times: dict[str, list[float]] = {k: [] for k in schemes}
    d = mujoco.MjData(m)
    for _ in range(reps):
        for name, fn in schemes.items():
            mujoco.mj_copyData(d, m, base)
            t0 = time.perf_counter()
            fn(d)
            times[name].append(time.perf_counter() - t0)
    print(f"one G1 world, decimation {decimation}, min over {reps} interleaved repetitions:")
    for name, ts in times.items():
        print(f"  {name:<36}{np.min(ts) * 1e6:8.1f} us/env step")


def _bench_acc_solve(xml: str, qpos1: list[float], ctrl1: list[float], args: argparse.Namespace) -> None:
    """The CPU backend with ``acc_sensors`` on (the accelerometer current: one more constraint solve
    per env step) and off (what the collector runs for tasks that read no such sensor), rows
    interleaved over ``--repeat`` rounds and the best kept. Prints ``acc_solve_cost=<on/off - 1>``
    per row; the last line is the one at the largest size and worker count."""
    import torch

    from unilab.sim.factory import make_backend

    print(f"G1, decimation {args.decimation}, best of {args.repeat}, load average {os.getloadavg()[0]:.2f}")
    best: dict[tuple[int, int, bool], float] = {}
    for _ in range(args.repeat):
        for workers in args.workers:
            for n in args.sizes:
                for acc in (True, False):
                    qpos, ctrl = torch.tensor(qpos1).repeat(n, 1), torch.tensor(ctrl1).repeat(n, 1)
                    with make_backend("mujoco", xml, n, args.decimation, workers=workers, acc_sensors=acc) as b:
                        rate, _ = _bench(b, qpos, ctrl, args.seconds, 3)
                    best[(workers, n, acc)] = max(rate, best.get((workers, n, acc), 0.0))
    cost = 0.0
    for workers in args.workers:
        for n in args.sizes:
            on, off = best[(workers, n, True)], best[(workers, n, False)]
            cost = off / on - 1
            print(
                f"workers={workers} num_envs={n:5d}  with solve {on:7.0f}  without {off:7.0f} env steps/s  "
                f"acc_solve_cost={cost:+.3f}"
            )
    print(f"acc_solve_cost={cost:.3f}")


def _bench_solver_work(xml: str, qpos1: list[float], ctrl1: list[float], args: argparse.Namespace) -> None:
    """Why the same backend is slower under random actions than holding the standing pose (the
    (a)/(c) gap of ``tools/bench_collector.py``): MuJoCo's own counters per physics step, in one
    process, for 16 worlds over 150 control steps from the standing pose. ``standing`` holds the
    pose; ``random`` draws uniform actions in [-1, 1] each control step and maps them to joint
    targets as the G1 tasks do (default pose + action_scale * action); a world whose pelvis falls
    below g1_walk's fall height is reset, as the task does. Each mode runs with the model's joint
    friction loss and without it (its constraint rows are most of the standing robot's). Modes are
    interleaved over ``--repeat`` rounds; time is the best round's, with the part of it MuJoCo's own
    stage timer gives to the constraint solve (``mjTIMER_CONSTRAINT``). Last line:
    ``random_over_standing=<us ratio - 1>`` with the model as shipped."""
    import mujoco
    import numpy as np

    from unilab.robot.model import RobotLayout
    from unilab.sim.mjmodel import load_mj_model
    from unilab.tasks.base import joint_action_scale
    from unilab.tasks.g1_walk.task import FALL_HEIGHT

    worlds, control_steps = 16, 150
    constraint = int(mujoco.mjtTimer.mjTIMER_CONSTRAINT)
    models = {}
    for friction in (True, False):
        m = load_mj_model(xml)
        layout = RobotLayout.from_model(m)
        if not friction:
            m.dof_frictionloss[:] = 0.0
        models[friction] = (m, layout)
    layout0 = models[True][1]
    scale = joint_action_scale(layout0).numpy()
    default_ctrl = np.asarray(ctrl1)
    act = layout0.actuator_ids
    stats: dict[tuple[str, bool], dict[str, float]] = {}
    for _ in range(args.repeat):
        for friction, (m, _layout) in models.items():
            for mode in ("standing", "random"):
                rng = np.random.default_rng(0)
                datas = [mujoco.MjData(m) for _ in range(worlds)]
                for d in datas:
                    d.qpos[:], d.ctrl[:] = qpos1, ctrl1
                    mujoco.mj_forward(m, d)
                iters = rows = contacts = steps = resets = 0
                seconds = solve = 0.0
                for _k in range(control_steps):
                    for d in datas:
                        if mode == "random":
                            d.ctrl[:] = default_ctrl
                            d.ctrl[act] = default_ctrl[act] + scale * rng.uniform(-1.0, 1.0, len(act))
                        for _s in range(args.decimation):
                            d.timer[constraint].duration = 0.0
                            t0 = time.perf_counter()
                            mujoco.mj_step(m, d)
                            seconds += time.perf_counter() - t0
                            solve += d.timer[constraint].duration  # MuJoCo's own stage timer
                            iters += int(d.solver_niter[0])
                            rows += d.nefc
                            contacts += d.ncon
                            steps += 1
                        if d.qpos[layout0.base_qpos_adr + 2] < FALL_HEIGHT:
                            mujoco.mj_resetData(m, d)
                            d.qpos[:], d.ctrl[:] = qpos1, ctrl1
                            mujoco.mj_forward(m, d)
                            resets += 1
                key = (mode, friction)
                us = seconds / steps * 1e6
                if key not in stats or us < stats[key]["us"]:
                    stats[key] = {
                        "us": us,
                        "solve_us": solve / steps * 1e6,
                        "iters": iters / steps,
                        "rows": rows / steps,
                        "contacts": contacts / steps,
                        "resets": resets,
                    }
    print(
        f"G1, {worlds} worlds x {control_steps} control steps, decimation {args.decimation}, best of {args.repeat}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'joint friction':<16}{'actions':<10}{'us/step':>9}{'solve us':>10}{'Newton it.':>12}{'rows':>7}"
        f"{'contacts':>10}{'resets':>8}"
    )
    for (mode, friction), s in sorted(stats.items(), key=lambda kv: (not kv[0][1], kv[0][0] != "standing")):
        print(
            f"{'as shipped' if friction else 'removed':<16}{mode:<10}{s['us']:9.1f}{s['solve_us']:10.1f}"
            f"{s['iters']:12.2f}{s['rows']:7.1f}{s['contacts']:10.2f}{s['resets']:8d}"
        )
    print(f"random_over_standing={stats[('random', True)]['us'] / stats[('standing', True)]['us'] - 1:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024], help="num_envs values")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="CPU backend worker counts")
    parser.add_argument("--decimation", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=1.5, help="timed seconds per row (at least 3 steps)")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved repetitions; the best rate is kept")
    parser.add_argument("--pin", action="store_true", help="pin worker k to the k-th CPU of this process")
    parser.add_argument("--mjwarp-device", default=None, help='also time MuJoCo Warp on this device ("cpu", "cuda:0")')
    parser.add_argument("--physics-graph", action="store_true", help="MuJoCo Warp: capture the step as a CUDA graph")
    parser.add_argument("--schemes", action="store_true", help="only time the end-of-step schemes on one world")
    parser.add_argument("--signalling", action="store_true", help="only time worker signalling round trips")
    parser.add_argument(
        "--acc-solve", action="store_true", help="only time the CPU backend with and without the accelerometer's solve"
    )
    parser.add_argument(
        "--solver-work", action="store_true", help="only count MuJoCo's solver work: standing vs random actions"
    )
    args = parser.parse_args()

    import torch

    from tests.sim_models import pose_state
    from unilab.robot import g1
    from unilab.robot.model import build_model_xml
    from unilab.sim.factory import make_backend

    torch.set_num_threads(1)
    xml = build_model_xml()
    qpos1, ctrl1 = pose_state(xml, g1.DEFAULT_POSE, g1.DEFAULT_BASE_HEIGHT)
    if args.schemes:
        _bench_schemes(xml, qpos1, ctrl1, args.decimation)
        return
    if args.signalling:
        _bench_signalling(xml, qpos1, ctrl1, args.decimation)
        return
    if args.acc_solve:
        _bench_acc_solve(xml, qpos1, ctrl1, args)
        return
    if args.solver_work:
        _bench_solver_work(xml, qpos1, ctrl1, args)
        return
    cpus = sorted(os.sched_getaffinity(0))
    print(
        f"G1, decimation {args.decimation}, {len(cpus)} CPUs, best of {args.repeat}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"{'backend':<16}{'workers':>8}{'num_envs':>10}{'env steps/s':>14}{'physics steps/s':>17}{'cpu us/step':>14}")
    rates: dict[tuple[str, int, int], float] = {}
    cpu_cost: dict[tuple[str, int, int], float] = {}
    runs = [("mujoco", w) for w in args.workers]
    if args.mjwarp_device:
        runs.append((f"mjwarp:{args.mjwarp_device}", 1))
    rows = [(name, workers, n) for name, workers in runs for n in args.sizes if workers <= n]
    # Rows are interleaved across repetitions and the best kept: on a shared machine the best is
    # the closest to a quiet one, and no configuration gets all the quiet (or busy) moments.
    for rep in range(args.repeat):
        for name, workers, n in rows:
            qpos, ctrl = torch.tensor(qpos1).repeat(n, 1), torch.tensor(ctrl1).repeat(n, 1)
            if name == "mujoco":
                cpu_ids = cpus[:workers] if args.pin and workers <= len(cpus) else None
                b = make_backend("mujoco", xml, n, args.decimation, cpu_ids=cpu_ids, workers=workers)
            else:
                device = name.split(":", 1)[1]
                b = make_backend("mjwarp", xml, n, args.decimation, device=device, physics_graph=args.physics_graph)
                qpos, ctrl = qpos.to(b.device), ctrl.to(b.device)
            try:
                rate, cpu_us = _bench(b, qpos, ctrl, args.seconds, 3)
            finally:
                b.close()
            key = (name, workers, n)
            if rate > rates.get(key, 0.0):
                rates[key], cpu_cost[key] = rate, cpu_us
            if rep == args.repeat - 1:
                best = rates[key]
                print(
                    f"{name:<16}{workers:>8}{n:>10}{best:>14.0f}{best * args.decimation:>17.0f}{cpu_cost[key]:>14.1f}",
                    flush=True,
                )
    largest = max(args.sizes)
    one, two = rates.get(("mujoco", 1, largest)), rates.get(("mujoco", 2, largest))
    if one and two:
        print(f"load average {os.getloadavg()[0]:.2f}")
        print(f"workers2_vs_1={two / one:.2f}")


if __name__ == "__main__":
    main()
