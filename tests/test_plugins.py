"""Tasks and algorithms from installed packages (unilab.plugins), as a user meets them: the
example plugin in examples/unilab-g1-stand, installed, plans without torch and trains, evaluates
and exports through the CLI with unilab's source untouched; a broken, conflicting or shadowing
plugin is named in one paragraph and breaks nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT

EXAMPLE = ROOT / "examples" / "unilab-g1-stand"
HOST = str(FIXTURES / "hosts" / "cpu_laptop.json")


def _env(*site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "UNILAB_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join([*(str(s) for s in site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def unilab(*args: str, site: tuple[Path, ...] = (), timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "unilab", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=_env(*site),
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin installed as a user installs it (pip, from its own pyproject.toml), into
    a directory of its own that the commands below find on their path. Built from a copy, so the
    repository gets no build directory."""
    work = tmp_path_factory.mktemp("example")
    src = shutil.copytree(EXAMPLE, work / "src")
    site = work / "site"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return site


def test_the_documented_install_resolves_unilab_from_this_environment_not_the_index(tmp_path: Path) -> None:
    """`pip install ./examples/unilab-g1-stand` into unilab's environment, its dependencies resolved
    with no package index at all: the example's dependency is this distribution, already installed,
    so pip installs the example alone (a dependency on `unilab` would fetch another project)."""
    src = shutil.copytree(EXAMPLE, tmp_path / "src")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-index",
            "--no-build-isolation",
            "--quiet",
            "--report",
            "-",
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    installs = [item["metadata"]["name"] for item in json.loads(r.stdout)["install"]]
    assert installs == ["unilab-g1-stand"]


def test_a_foreign_unilab_distribution_beside_this_one_is_warned_of(tmp_path: Path) -> None:
    """The public index's `unilab` (another project) installed beside unilab-runtime: `unilab
    plugins` and `unilab --version` say so, with the fix."""
    site = tmp_path / "site"
    info = site / "unilab-1.5.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: unilab\nVersion: 1.5.2\n")
    for args in (("plugins",), ("plugins", "--json"), ("--version",)):
        r = unilab(*args, site=(site,))
        assert r.returncode == 0, r.stderr
        assert "the distribution 'unilab' 1.5.2 is installed beside unilab-runtime" in r.stderr, args
        assert "fix: pip uninstall unilab" in r.stderr
    assert json.loads(unilab("plugins", "--json", site=(site,)).stdout)["warnings"]
    clean = unilab("--version")
    assert clean.returncode == 0 and clean.stderr == "" and "unilab-runtime" in clean.stdout


def test_the_example_plugin_is_listed_with_its_package(example_site: Path) -> None:
    r = unilab("plugins", "--json", site=(example_site,))
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["plugins"]
    assert rows == [
        {
            "kind": "task",
            "name": "g1_stand",
            "package": "unilab-g1-stand 0.1.0",
            "value": "unilab_g1_stand:G1_STAND",
            "status": "ok",
            "detail": "G1 standing balance",
        }
    ]


def test_the_docs_generator_lists_the_plugin_keys(example_site: Path, tmp_path: Path) -> None:
    out = tmp_path / "plugins.md"
    r = subprocess.run(
        [sys.executable, "tools/gen_docs.py", "--plugins", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=_env(example_site),
    )
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert '## `[task] name = "g1_stand"`' in text and "From unilab-g1-stand 0.1.0." in text
    assert "| `target_height` | float in [0.5, 0.85] | `0.76` |" in text


def test_planning_the_plugin_task_imports_no_torch_and_not_its_runtime(example_site: Path) -> None:
    spec = str(EXAMPLE / "g1_stand.toml")
    code = (
        f"import sys; sys.argv=['unilab','plan',{spec!r},'--host-facts',{HOST!r}];"
        "from unilab.cli.main import main; rc=main();"
        "bad=[m for m in ('torch','warp','mujoco','mujoco_warp','numpy','unilab_g1_stand.task') if m in sys.modules];"
        "print('HEAVY', bad, 'unilab_g1_stand' in sys.modules); sys.exit(rc)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=_env(example_site))
    assert r.returncode == 0, r.stderr
    # The plan checked the plugin's keys and resolved its reward weights from its record.
    assert 'name = "g1_stand"' in r.stdout and "target_height = 0.76" in r.stdout and "still = 0.5" in r.stdout
    assert r.stdout.strip().endswith("HEAVY [] True")


def test_a_plugin_task_spec_is_checked_like_a_built_in_one(example_site: Path) -> None:
    spec = str(EXAMPLE / "g1_stand.toml")
    r = unilab("plan", spec, "--host-facts", HOST, "--set", "task.target_height=2.0", site=(example_site,))
    assert r.returncode == 1 and "Traceback" not in r.stderr and r.stderr.startswith("error:"), r.stderr
    assert "task.target_height" in r.stderr and "0.85" in r.stderr
    r = unilab("plan", spec, "--host-facts", HOST, "--set", "task.target_heigth=0.7", site=(example_site,))
    assert r.returncode == 1 and "task.target_heigth" in r.stderr and "target_height" in r.stderr, r.stderr
    # A reward weight the plugin's record does not declare is refused by the plan's task rule.
    r = unilab("plan", spec, "--host-facts", HOST, "--set", "task.reward_weights={upright_=1.0}", site=(example_site,))
    assert r.returncode == 1 and "upright_" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_example_plugin_trains_evaluates_and_exports(example_site: Path, tmp_path: Path) -> None:
    spec = str(EXAMPLE / "g1_stand.toml")
    sets = ["--set", "run.total_env_steps=3000", "--set", "algo.warmup_env_steps=1000"]
    sets += ["--set", "run.checkpoint_every_env_steps=1500", "--set", f'run.output_dir="{tmp_path}"']
    r = unilab("apply", spec, *sets, "--quiet", site=(example_site,))
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "succeeded" and manifest["counters"]["env_steps"] >= 3000
    assert sorted(p.name for p in (run / "checkpoints").glob("*.pt"))[-1] == "ckpt-0000000003008.pt"
    r = unilab("eval", str(run), "--episodes", "2", "--workers", "1", "--json", site=(example_site,))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["episodes"] == 2 and set(report["reward_terms"]) == {
        "upright",
        "height",
        "still",
        "action_rate_l2",
        "alive",
    }
    r = unilab("export", str(run), site=(example_site,))
    assert r.returncode == 0 and (run / "policy.onnx").is_file(), r.stderr
    # Without the plugin the run's plan names a task this unilab does not know: one paragraph.
    r = unilab("eval", str(run), "--episodes", "1")
    assert r.returncode == 1 and r.stderr.startswith("error:") and "Traceback" not in r.stderr, r.stderr
    assert "g1_stand" in r.stderr


# ----------------------------------------------------------------------------- broken plugins
def _fake_package(site: Path, dist: str, entry_points: str, modules: dict[str, str]) -> None:
    """An installed distribution as importlib.metadata finds one: its dist-info and modules."""
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    for name, text in modules.items():
        (site / f"{name}.py").write_text(text)


_NOT_A_MODEL = """
from unilab.tasks.taskdef import TaskDef
TASK = TaskDef(name="not_a_model", title="x", spec=dict, runtime="x:y", reward_weights=dict,
               observations=tuple, terms=list, robot=False, own_model="x:y")
"""


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("broken")
    _fake_package(
        site,
        "plug-import",
        "[unilab.tasks]\nimport_error = plug_import:TASK\n\n[unilab.algos]\nalgo_import_error = plug_import:ALGO\n",
        {"plug_import": "import a_module_nobody_installed\n"},
    )
    _fake_package(site, "plug-model", "[unilab.tasks]\nnot_a_model = plug_model:TASK\n", {"plug_model": _NOT_A_MODEL})
    _fake_package(
        site, "plug-record", "[unilab.tasks]\nnot_a_record = plug_record:TASK\n", {"plug_record": "TASK = 42\n"}
    )
    _fake_package(site, "plug-dup-a", "[unilab.tasks]\ntwice = plug_dup_a:TASK\n", {"plug_dup_a": "TASK = 1\n"})
    _fake_package(site, "plug-dup-b", "[unilab.tasks]\ntwice = plug_dup_b:TASK\n", {"plug_dup_b": "TASK = 2\n"})
    _fake_package(
        site, "plug-shadow", "[unilab.tasks]\ncartpole = plug_shadow:TASK\n", {"plug_shadow": "raise SystemExit\n"}
    )
    return site


@pytest.mark.parametrize(
    ("section", "name", "says"),
    [
        ("task", "import_error", ["plug-import 1.0", "ModuleNotFoundError", "a_module_nobody_installed"]),
        ("algo", "algo_import_error", ["the algorithm 'algo_import_error'", "plug-import 1.0", "ModuleNotFoundError"]),
        ("task", "not_a_model", ["plug-model 1.0", "not a subclass of unilab.sections.TaskSpecBase"]),
        ("task", "not_a_record", ["plug-record 1.0", "TaskSpecBase"]),
        ("task", "twice", ["2 installed packages register the task 'twice'", "plug-dup-a 1.0", "plug-dup-b 1.0"]),
    ],
)
def test_a_broken_plugin_is_named_in_one_paragraph(broken_site: Path, section: str, name: str, says: list[str]) -> None:
    r = unilab(
        "plan", "specs/cartpole.toml", "--host-facts", HOST, "--set", f'{section}.name="{name}"', site=(broken_site,)
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.startswith("error:") and "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert len([line for line in r.stderr.splitlines() if line.strip()]) <= 2, r.stderr  # the error and its fix
    for s in says:
        assert s in r.stderr, r.stderr
    assert "fix:" in r.stderr


def test_broken_plugins_break_nothing_else(broken_site: Path, tmp_path: Path) -> None:
    # The built-in task keeps its name (the shadowing plugin's module, which would exit, is never imported).
    r = unilab("plan", "specs/cartpole.toml", "--host-facts", HOST, site=(broken_site,))
    assert r.returncode == 0, r.stderr
    r = unilab("plugins", "--json", site=(broken_site,))
    assert r.returncode == 0, r.stderr
    status = {(row["kind"], row["name"]): row["status"] for row in json.loads(r.stdout)["plugins"]}
    assert status == {
        ("task", "cartpole"): "shadowed",
        ("task", "import_error"): "broken",
        ("task", "not_a_model"): "broken",
        ("task", "not_a_record"): "broken",
        ("task", "twice"): "broken",
        ("algorithm", "algo_import_error"): "broken",
    }
    # An unknown name lists the plugins' names beside the built-in ones.
    r = unilab("plan", "specs/cartpole.toml", "--host-facts", HOST, "--set", 'task.name="nothing"', site=(broken_site,))
    assert r.returncode == 1 and "Traceback" not in r.stderr and "nothing" in r.stderr, r.stderr


# ----------------------------------------------------------------------------- an algorithm plugin
_SAC_COPY = """
import dataclasses
from typing import Literal
from pydantic import Field
from unilab.algos.sac import SAC
from unilab.algos.sac.spec import SacSpec

class SacCopySpec(SacSpec):
    name: Literal["sac_copy"] = Field(description="The algorithm.")

ALGO = dataclasses.replace(SAC, name="sac_copy", title="SAC (a plugin's copy)", spec=SacCopySpec)
"""


def test_an_algorithm_plugin_plans_and_trains(tmp_path: Path) -> None:
    """An `unilab.algos` entry point: its `[algo]` keys are checked by its model and the rules of
    its record, and `unilab apply` trains with the learner it names."""
    site = tmp_path / "site"
    _fake_package(site, "sac-copy", "[unilab.algos]\nsac_copy = sac_copy:ALGO\n", {"sac_copy": _SAC_COPY})
    r = unilab("plan", "specs/cartpole.toml", "--host-facts", HOST, "--set", 'algo.name="sac_copy"', site=(site,))
    assert r.returncode == 0, r.stderr
    assert '[algo]\nname = "sac_copy"' in r.stdout and "alpha_init = 0.01" in r.stdout
    # SAC's rules hold for the copy (its record's): a scalar critic ignores a support set beside it.
    r = unilab(
        "plan",
        "specs/cartpole.toml",
        "--host-facts",
        HOST,
        "--set",
        'algo.name="sac_copy"',
        "--set",
        "algo.v_min=-5.0",
        site=(site,),
    )
    assert r.returncode == 1 and "[algo.options]" in r.stderr and "Traceback" not in r.stderr, r.stderr
    out = tmp_path / "runs"
    sets = ["--set", 'algo.name="sac_copy"', "--set", "run.total_env_steps=3000", "--set", f'run.output_dir="{out}"']
    r = unilab("apply", "specs/cartpole.toml", *sets, "--quiet", site=(site,))
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = list(out.iterdir())
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "succeeded" and manifest["counters"]["updates"] > 0


_NO_PROTOCOL = """
import dataclasses
from typing import Literal
from pydantic import Field
from unilab.algos.sac import SAC
from unilab.algos.sac.spec import SacSpec

class HalfSpec(SacSpec):
    name: Literal["half_learner"] = Field(description="The algorithm.")

class HalfLearner:
    def __init__(self, obs_dim, act_dim, algo, device, seed, compute_dtype, actor_cols):
        self.obs_dim, self.act_dim = obs_dim, act_dim

ALGO = dataclasses.replace(SAC, name="half_learner", spec=HalfSpec, learner="half_learner:HalfLearner")
"""


def test_a_plugin_learner_without_the_runtime_protocol_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _fake_package(
        site, "half-learner", "[unilab.algos]\nhalf_learner = half_learner:ALGO\n", {"half_learner": _NO_PROTOCOL}
    )
    out = tmp_path / "runs"
    sets = [
        "--set",
        'algo.name="half_learner"',
        "--set",
        "run.total_env_steps=3000",
        "--set",
        f'run.output_dir="{out}"',
    ]
    r = unilab("apply", "specs/cartpole.toml", *sets, "--quiet", site=(site,))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert "half_learner:HalfLearner" in r.stderr and "OffPolicyLearner" in r.stderr and "it lacks act," in r.stderr


def test_a_spec_naming_a_plugin_that_is_not_installed_says_so() -> None:
    r = unilab("plan", str(EXAMPLE / "g1_stand.toml"), "--host-facts", HOST)
    assert r.returncode == 1 and r.stderr.startswith("error:") and "Traceback" not in r.stderr, r.stderr
    assert "(got 'g1_stand')" in r.stderr and 'install the package that registers "g1_stand"' in r.stderr
