"""`run.init_from`: a new run starts from another run's policy. The plan names the checkpoint by
its sha256 and refuses one whose run trained another task or network shape; the run loads the
networks, temperature and observation normalizer and starts its own counters and optimizers.
That a trained policy carries over (a short fine-tune scores at once) is checked after training in
tests/test_learning.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from tests.conftest import SPECS
from tests.conftest import run_unilab as unilab

TINY_SAC = '{name="sac", batch_size=32, hidden_dims=[16], warmup_env_steps=0}'


def _apply(out: Path, *sets: str, cwd: Path | None = None) -> Path:
    args = [a for s in (*sets, f'run.output_dir="{out}"') for a in ("--set", s)]
    r = unilab("apply", str(SPECS / "cartpole.toml"), "--quiet", *args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    return run_dir


def _refused(r: subprocess.CompletedProcess[str], *says: str) -> None:
    assert r.returncode == 1, r.stderr
    assert "[run.init-from]" in r.stderr and "fix: " in r.stderr and "Traceback" not in r.stderr, r.stderr
    for s in says:
        assert s in r.stderr, r.stderr


def _newest(run_dir: Path) -> dict:
    (ckpt, *_) = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"), reverse=True)
    return torch.load(ckpt, weights_only=True)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short cart-pole SAC run to start from."""
    return _apply(
        tmp_path_factory.mktemp("init") / "a", "run.total_env_steps=640", f"algo={TINY_SAC}", "algo.alpha_init=0.05"
    )


def test_the_plan_names_the_checkpoint_by_its_digest(source: Path) -> None:
    r = unilab(
        "plan", str(SPECS / "cartpole.toml"), "--format", "json",
        "--set", f'run.init_from="{source}"', "--set", f"algo={TINY_SAC}", "--set", "algo.alpha_init=0.05",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    init = json.loads(r.stdout)["run"]["init_from"]
    ckpt = source / "checkpoints" / "ckpt-0000000000640.pt"
    want = (ckpt.parent / (ckpt.name + ".sha256")).read_text().split()[0]
    assert init["sha256"] == want and init["env_steps"] == 640 and init["checkpoint"].endswith(ckpt.name)
    assert init["plan_id"] == json.loads((source / "manifest.json").read_text())["plan_id"]


def test_a_checkpoint_that_does_not_fit_is_refused_at_plan_time(source: Path, tmp_path: Path) -> None:
    plan = ["plan", str(SPECS / "cartpole.toml"), "--set", f'run.init_from="{source}"']
    _refused(
        unilab(*plan),
        "algo.actor_hidden_dims is [64, 64] here, [16] in the checkpoint's run",
        "set algo.actor_hidden_dims = [16]",
    )
    _refused(
        unilab(*plan, "--set", f"algo={TINY_SAC}"),
        "algo.alpha_init is 0.1 here, 0.05 in the checkpoint's run",
        "set algo.alpha_init = 0.05",
    )
    _refused(unilab(*plan, "--set", 'algo={name="ppo", hidden_dims=[16]}'), "trained with sac, this spec with ppo")
    g1 = ["plan", str(SPECS / "g1.toml"), "--set", f'run.init_from="{source}"']
    _refused(unilab(*g1), "trained cartpole, this spec's task is g1_walk")
    _refused(unilab("plan", str(SPECS / "cartpole.toml"), "--set", f'run.init_from="{tmp_path}"'), "no plan.toml")
    _refused(
        unilab("plan", str(SPECS / "cartpole.toml"), "--set", f'run.init_from="{source / "plan.toml"}"'),
        "is not a checkpoint in a unilab run directory",
    )
    changed = tmp_path / "changed"
    shutil.copytree(source, changed)
    ckpt = changed / "checkpoints" / "ckpt-0000000000640.pt"
    ckpt.write_bytes(ckpt.read_bytes() + b"\0")
    _refused(
        unilab("plan", str(SPECS / "cartpole.toml"), "--set", f'run.init_from="{changed}"'),
        "does not have the sha256 its run recorded",
    )


def test_a_checkpoint_changed_after_planning_is_refused_before_the_run_starts(source: Path, tmp_path: Path) -> None:
    copy = tmp_path / "a"
    shutil.copytree(source, copy)
    plan = tmp_path / "plan.toml"
    r = unilab(
        "plan", str(SPECS / "cartpole.toml"), "--out", str(plan), "--set", f'run.init_from="{copy}"',
        "--set", f"algo={TINY_SAC}", "--set", "algo.alpha_init=0.05", "--set", f'run.output_dir="{tmp_path / "runs"}"',
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    ckpt = copy / "checkpoints" / "ckpt-0000000000640.pt"
    ckpt.write_bytes(ckpt.read_bytes() + b"\0")
    r = unilab("apply", str(plan))
    assert r.returncode == 1 and "run.init_from" in r.stderr and "changed since the plan was made" in r.stderr
    assert not (tmp_path / "runs").exists()


TINY_FLASH = '{name="flashsac", batch_size=32, hidden_dims=[16], expansion=2, warmup_env_steps=0, alpha_init=0.05}'


@pytest.mark.parametrize(("algo", "steps"), [(TINY_SAC, 64), (TINY_FLASH, 96)], ids=["sac", "flashsac"])
def test_a_run_starts_from_the_networks_and_normalizer_with_fresh_counters(
    tmp_path: Path, algo: str, steps: int
) -> None:
    """A few syncs of 16 envs with a batch of 32: a few small updates. Every network (FlashSAC's
    normalization statistics included) then stays within a tenth of the distance from the source's
    at which a fresh one (another seed: other initial weights) lies; the temperature and the
    observation normalizer carry on; counters restart."""
    sets = (f"algo={algo}", "algo.alpha_init=0.05")
    source = _apply(tmp_path / "a", "run.total_env_steps=640", *sets)
    run = _apply(tmp_path / "b", f"run.total_env_steps={steps}", *sets, f'run.init_from="{source}"', "run.seed=1")
    fresh = _apply(tmp_path / "c", f"run.total_env_steps={steps}", *sets, "run.seed=1")
    a, b, c = (_newest(d)["state"] for d in (source, run, fresh))
    updates = b["learner"]["num_critic_updates"]
    assert 1 <= updates <= 4  # its own count, from zero
    for net in ("actor", "critic", "critic_target"):
        near = max((b["learner"][net][k].float() - v.float()).abs().max() for k, v in a["learner"][net].items())
        far = max((c["learner"][net][k].float() - v.float()).abs().max() for k, v in a["learner"][net].items())
        assert near < 0.1 * far and far > 0.05, (net, near, far)
    assert abs(float(b["learner"]["log_alpha"]) - float(a["learner"]["log_alpha"])) < 0.01 * updates
    assert b["normalizer"]["count"] > a["normalizer"]["count"]  # carried on, not restarted
    assert b["counters"]["env_steps"] == steps
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    (started,) = [e for e in events if e["event"] == "started_from"]
    assert started["env_steps"] == 640


def test_a_ppo_run_starts_from_the_actor_with_its_observation_normalizer(tmp_path: Path) -> None:
    ppo = '{name="ppo", num_steps_per_env=8, hidden_dims=[16]}'
    a_dir = _apply(tmp_path / "a", "run.total_env_steps=256", f"algo={ppo}")
    b_dir = _apply(tmp_path / "b", "run.total_env_steps=128", f"algo={ppo}", f'run.init_from="{a_dir}"')
    a, b = _newest(a_dir)["state"], _newest(b_dir)["state"]
    count = "obs_normalizer.count"
    assert b["ppo"]["actor_state_dict"][count] == a["ppo"]["actor_state_dict"][count] + 128
    assert b["iterations"] == 1  # its own iterations, from zero


def test_a_checkpoint_for_another_observation_layout_is_refused_before_the_run_is_recorded() -> None:
    """What the plan cannot see (a checkpoint of another unilab, another observation layout) is
    refused against the collector's Hello, before the run directory holds a manifest; a state that
    does not load names run.init_from, not an internal error."""
    from types import SimpleNamespace

    from tests.conftest import host
    from unilab.errors import UnilabError
    from unilab.plan.compile import compile_plan
    from unilab.records.checkpoint import check_resume_fits
    from unilab.run.init_state import check_init_fits, loading_init
    from unilab.spec.load import load_spec

    hello = SimpleNamespace(obs_dim=5, act_dim=1, obs_terms=[("cart_pos", 1), ("pole_cos", 1), ("rest", 3)])
    check_init_fits(None, hello)
    check_init_fits({"obs_dim": 5, "act_dim": 1, "obs_terms": [["cart_pos", 1], ["pole_cos", 1], ["rest", 3]]}, hello)
    with pytest.raises(UnilabError, match="takes 6 observations and gives 1 actions"):
        check_init_fits({"obs_dim": 6, "act_dim": 1}, hello)
    with pytest.raises(UnilabError, match="another observation layout: pole_cos"):
        check_init_fits(
            {"obs_dim": 5, "act_dim": 1, "obs_terms": [["pole_cos", 1], ["cart_pos", 1], ["rest", 3]]}, hello
        )
    # A resume meets the same mismatch when an upgraded unilab builds the task's observations
    # differently: refused in one paragraph (torch would fail deep in the learner), with a fix that
    # names --resume, so apply does not append "then resume with" to it.
    check_resume_fits(None, hello)
    check_resume_fits({"obs_dim": 5, "act_dim": 1, "obs_terms": [["cart_pos", 1], ["pole_cos", 1], ["rest", 3]]}, hello)
    with pytest.raises(UnilabError, match="the checkpoint to resume: the checkpoint's policy takes 4 obs") as e:
        check_resume_fits({"obs_dim": 4, "act_dim": 1, "obs_terms": [["cart_pos", 1], ["rest", 3]]}, hello)
    assert "cart_pos[1], rest[3]; this collector's: cart_pos[1], pole_cos[1], rest[3]" in (e.value.detail or "")
    assert "unilab apply --resume" in (e.value.fix or "")
    loaded = load_spec(SPECS / "cartpole.toml")
    plan = compile_plan(loaded.spec, host("cpu_laptop"), loaded.spec_dir)
    with pytest.raises(UnilabError, match=r"run\.init_from: .* does not load into this run.s learner: size mismatch"):
        with loading_init(plan):
            raise RuntimeError("size mismatch for mlp.0.weight")


def _poison(run_dir: Path) -> str:
    """Write a NaN into the first actor weight of the run's newest checkpoint and re-sign the file
    (its sidecar digest), as an edited or foreign checkpoint would be; returns the tensor's name."""

    (ckpt, *_) = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"), reverse=True)
    blob = torch.load(ckpt, weights_only=True)
    actor = blob["state"]["learner"]["actor"]
    name = next(k for k, v in actor.items() if v.is_floating_point())
    actor[name].view(-1)[0] = float("nan")
    _resign(ckpt, blob)
    return f"learner.actor.{name}"


def test_non_finite_weights_are_refused_by_eval_export_and_init_from(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint with a NaN weight is refused, naming the tensor, by every command that would
    use its policy: export would write an ONNX policy that outputs NaN, init_from fine-tune from it."""
    from unilab.cli.main import main

    copy = tmp_path / "a"
    shutil.copytree(source, copy)
    tensor = _poison(copy)
    says = f"tensor {tensor} holds 1 non-finite value"
    for argv in (["eval", str(copy), "--episodes", "2"], ["export", str(copy), "--out", str(tmp_path / "p.onnx")]):
        rc, err = main(argv), capsys.readouterr().err
        assert rc == 1 and says in err and "fix: " in err and "Traceback" not in err, err
    assert not (tmp_path / "p.onnx").exists()
    r = unilab(
        "apply", str(SPECS / "cartpole.toml"), "--quiet", "--set", f'run.init_from="{copy}"',
        "--set", f"algo={TINY_SAC}", "--set", "algo.alpha_init=0.05", "--set", f'run.output_dir="{tmp_path / "runs"}"',
    )  # fmt: skip
    assert r.returncode == 1 and says in r.stderr and "run.init_from" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def _resign(ckpt: Path, blob: dict) -> None:
    import hashlib

    torch.save(blob, ckpt)
    digest = hashlib.sha256(ckpt.read_bytes()).hexdigest()
    (ckpt.parent / (ckpt.name + ".sha256")).write_text(f"{digest}  {ckpt.name}\n")


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda s: s.pop("normalizer"), "the checkpoint's state lacks `normalizer`"),
        (lambda s: s.__setitem__("obs_dim", 2**40), "the checkpoint's `obs_dim` is 1099511627776"),
        (lambda s: s["learner"].pop("actor"), "lacks the actor's weights"),
        (lambda s: s["learner"]["actor"].popitem(), "the checkpoint's policy does not fit the run's plan"),
    ],
    ids=["no-normalizer", "huge-obs-dim", "no-actor", "missing-weight"],
)
def test_a_checkpoint_state_with_missing_keys_or_wild_sizes_is_refused(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], edit, says: str
) -> None:
    """eval and export check a checkpoint's state before reading it: one clear refusal, never an
    internal error (or an allocation of what a wild size claims)."""
    copy = tmp_path / "a"
    shutil.copytree(source, copy)
    (ckpt, *_) = sorted((copy / "checkpoints").glob("ckpt-*.pt"), reverse=True)
    blob = torch.load(ckpt, weights_only=True)
    edit(blob["state"])
    _resign(ckpt, blob)
    from unilab.cli.main import main

    for argv in (["eval", str(copy), "--episodes", "2"], ["export", str(copy), "--out", str(tmp_path / "p.onnx")]):
        rc, err = main(argv), capsys.readouterr().err  # in this process: the refusal comes before any physics
        assert rc == 1 and says in err and "fix: " in err, err
        assert "Traceback" not in err and "internal error" not in err, err
