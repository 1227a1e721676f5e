"""The Python API as docs/python.md shows it: its example runs as written, and the API refuses
what the CLI refuses, with the CLI's errors."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import unilab
from tests.conftest import ROOT

DOC = ROOT / "docs" / "python.md"


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "docs/python.md has one runnable example"
    return blocks[0]


@pytest.mark.slow
def test_the_documented_example_runs(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    (tmp_path / "example.py").write_text(_example())
    r = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = next((tmp_path / "runs").iterdir())
    assert f"{run_dir.relative_to(tmp_path)} succeeded 4000" in r.stdout, r.stdout
    assert "mean return" in r.stdout and "eval return" in r.stdout
    assert "run succeeded:" not in r.stdout  # quiet=True: the run's own summary is not printed
    assert f"exported {run_dir.relative_to(tmp_path)}/policy.onnx" in r.stdout
    assert (run_dir / "policy.onnx").is_file()


def test_plan_takes_a_path_or_a_mapping_and_refuses_as_the_cli_does(tmp_path: Path) -> None:
    from tests.conftest import host

    facts = host("cpu_laptop")
    from_file = unilab.plan(ROOT / "specs" / "cartpole.toml", host_facts=facts)
    import tomllib

    data = tomllib.loads((ROOT / "specs" / "cartpole.toml").read_text())
    assert unilab.plan(data, host_facts=facts).plan_id == from_file.plan_id
    assert isinstance(from_file, unilab.Plan)
    with pytest.raises(unilab.PlanRefused) as refused:
        unilab.plan(data, overrides=["run.total_env_steps=1000"], host_facts=facts)
    assert [d.rule_id for d in refused.value.diagnostics] == ["algo.warmup"]
    assert "fix: lower algo.warmup_env_steps" in refused.value.render()
    with pytest.raises(unilab.UnilabError, match="does not exist"):
        unilab.plan(tmp_path / "missing.toml", host_facts=facts)


def test_apply_refuses_a_plan_for_other_facts_and_an_edited_plan() -> None:
    from tests.conftest import host

    other = unilab.plan(ROOT / "specs" / "cartpole.toml", host_facts=host("one_h200"))
    with pytest.raises(unilab.UnilabError, match=r"compiled for other host facts"):
        unilab.apply(other)
    here = unilab.plan(ROOT / "specs" / "cartpole.toml")
    edited = here.model_copy(update={"run": here.run.model_copy(update={"total_env_steps": 10**12})})
    with pytest.raises(unilab.UnilabError, match=r"not what its own spec compiles to|does not pass the plan rules"):
        unilab.apply(edited)
    with pytest.raises(unilab.UnilabError, match=r"overrides and resume do not apply"):
        unilab.apply(here, overrides=["task.num_envs=8"])


def test_load_manifest_names_a_directory_without_one(tmp_path: Path) -> None:
    with pytest.raises(unilab.UnilabError, match=r"without manifest\.json"):
        unilab.load_manifest(tmp_path)


def test_refusals_name_python_overrides_not_cli_flags(tmp_path: Path) -> None:
    """The fixes of a refusal raised in Python speak of ``overrides`` and ``unilab.apply(...)``."""
    from tests.conftest import host

    facts = host("cpu_laptop")
    with pytest.raises(unilab.PlanRefused) as refused:
        unilab.plan(ROOT / "specs" / "cartpole.toml", overrides=["run.total_env_steps=1000"], host_facts=facts)
    text = refused.value.render()
    assert "--set" not in text and "the override 'algo.warmup_env_steps=" in text
    with pytest.raises(unilab.UnilabError) as spec_error:
        unilab.plan(ROOT / "specs" / "g1.toml", overrides=["algo.name=ppo"], host_facts=facts)
    text = spec_error.value.render()
    assert "--set" not in text
    assert "pass the override 'algo={name=\"ppo\"}' instead of the override 'algo.name=...'" in text
    with pytest.raises(unilab.UnilabError) as smoke:
        unilab.plan(ROOT / "specs" / "g1.toml", overrides=["run.total_env_steps=9"], smoke=True, host_facts=facts)
    assert "smoke=True" in smoke.value.render() and "--smoke" not in smoke.value.render()


def test_python_voice_turns_a_command_line_into_the_call() -> None:
    from unilab.python_voice import phrase

    assert phrase("resume with: unilab apply --resume runs/a") == "resume with: unilab.apply(resume='runs/a')"
    assert phrase("start a new run: unilab apply SPEC --set a.b=1 --set c.d=2") == (
        "start a new run: unilab.apply(SPEC, overrides=['a.b=1', 'c.d=2'])"
    )
    assert phrase("e.g. --set algo.v_min=-5.0 --set algo.v_max=5.0") == (
        "e.g. the overrides 'algo.v_min=-5.0', 'algo.v_max=5.0'"
    )
    assert phrase("or drop that --set") == "or drop that override"


def test_quiet_apply_prints_nothing_and_smoke_is_a_short_run(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    script = (
        "import unilab\n"
        "if __name__ == '__main__':\n"
        "    run = unilab.apply('specs/cartpole.toml', quiet=True, smoke=True)\n"
        "    import sys; sys.stderr.write(f'{run.run_dir.name} {run.manifest.counters.env_steps}\\n')\n"
    )
    (tmp_path / "q.py").write_text(script)
    r = subprocess.run([sys.executable, "q.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == ""
    name, steps = r.stderr.split()[-2:]
    assert name.startswith("cartpole-smoke-") and 0 < int(steps) <= 5_000


_REQUIRED = {"spec": "specs/g1.toml", "run_dir": "runs/x", "path": "runs/x"}
_PUBLIC = ("plan", "apply", "evaluate", "export", "load_manifest")


def _sweep() -> list[tuple[str, str, object]]:
    import inspect

    import unilab.api

    cases = []
    for fn_name in _PUBLIC:
        for name in inspect.signature(getattr(unilab.api, fn_name)).parameters:
            for bad in (object(), 1.5, b"bytes"):
                cases.append((fn_name, name, bad))
    cases += [("plan", "overrides", v) for v in (None, "task.num_envs=8", [1], [b"a=1"])]
    return cases


@pytest.mark.parametrize(("fn_name", "name", "bad"), _sweep())
def test_every_argument_of_a_wrong_type_is_a_unilab_error_naming_it(fn_name: str, name: str, bad: object) -> None:
    """No TypeError or AttributeError from inside the package: the API names the argument and what it takes."""
    import inspect

    import unilab.api

    params = inspect.signature(getattr(unilab.api, fn_name)).parameters
    kwargs = {k: v for k, v in _REQUIRED.items() if k in params}
    kwargs[name] = bad
    with pytest.raises(unilab.UnilabError) as err:
        getattr(unilab, fn_name)(**kwargs)
    text = err.value.render()
    assert text.startswith(f"error: unilab.{fn_name}: {name}=") and " takes " in text, text
    assert "help(unilab." in text


def test_a_call_missing_or_misspelling_an_argument_is_a_unilab_error() -> None:
    with pytest.raises(unilab.UnilabError, match=r"unilab.plan: missing required argument: spec"):
        unilab.plan()
    with pytest.raises(unilab.UnilabError, match=r"unilab.evaluate: unexpected keyword argument: episode"):
        unilab.evaluate("runs/x", episode=3)


def test_evaluate_is_callable_beside_its_package() -> None:
    import unilab.evaluate.models  # makes `unilab.evaluate` the package; the call still works

    with pytest.raises(unilab.UnilabError, match="does not exist"):
        unilab.evaluate("no/such/run")


INTERRUPTED_IMPORT = """
import importlib.util, os, signal, sys, threading, time
import unilab

# Ctrl-C arrives while `import torch` runs its __init__, just after torch's C extension is loaded,
# as a user's interrupt of a notebook cell can land at any moment of unilab.apply's start-up.
TORCH_INIT = importlib.util.find_spec("torch").origin
AFTER_C = 1 + max(i for i, ln in enumerate(open(TORCH_INIT), 1) if ln.strip().startswith("from torch._C import *"))
fired = []


def tracer(frame, event, arg):
    if frame.f_code.co_filename != TORCH_INIT:
        return None

    def line(frame, event, arg):
        if event == "line" and frame.f_lineno >= AFTER_C and not fired:
            fired.append(frame.f_lineno)
            os.kill(os.getpid(), signal.SIGINT)  # to the process, as a terminal or a kernel sends it
        return line

    return line


if __name__ == "__main__":
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()  # a notebook kernel has others
    sys.settrace(tracer)
    try:
        unilab.apply("specs/cartpole.toml", smoke=True, quiet=True)
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted", bool(fired))
    sys.settrace(None)
    run = unilab.apply("specs/cartpole.toml", smoke=True, quiet=True)
    print("again", run.manifest.status)
"""


def test_a_ctrl_c_during_start_up_leaves_the_interpreter_able_to_apply_again(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    (tmp_path / "k.py").write_text(INTERRUPTED_IMPORT)
    r = subprocess.run([sys.executable, "k.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    # The interrupt is still a KeyboardInterrupt, raised once torch is whole; the next apply runs.
    assert r.stdout.splitlines() == ["interrupted True", "again succeeded"], r.stdout + r.stderr[-2000:]


def test_a_script_without_the_main_guard_is_told_to_add_it(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    (tmp_path / "noguard.py").write_text(
        "import unilab\n\ntry:\n"
        "    unilab.apply('specs/cartpole.toml', smoke=True, quiet=True)\n"
        "except unilab.UnilabError as e:\n"
        "    print(e.render())\n"
    )
    r = subprocess.run([sys.executable, "noguard.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert 'outside an `if __name__ == "__main__":` guard' in r.stdout, r.stdout + r.stderr[-2000:]
    assert 'fix: call unilab.apply (and evaluate) under `if __name__ == "__main__":`' in r.stdout
    assert "freeze_support" not in r.stdout + r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
