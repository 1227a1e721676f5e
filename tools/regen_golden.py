"""Golden plans: every shipped spec compiled against every recorded host fixture.

    python tools/regen_golden.py          # rewrite tests/golden/plans/
    python tools/regen_golden.py --check  # exit 1 if any golden differs (tests run this check too)

A spec the host cannot honour has a golden refusal (`.refused.txt`) instead of a plan.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "plans"
HOSTS = ROOT / "tests" / "fixtures" / "hosts"


def golden_outputs() -> dict[str, str]:
    import os

    from unilab.errors import PlanRefused
    from unilab.host.facts import HostFacts
    from unilab.plan.compile import compile_plan
    from unilab.plan.render import render
    from unilab.spec.load import load_spec

    cwd = os.getcwd()
    os.chdir(ROOT)  # file inputs are rendered relative to the working directory
    try:
        out: dict[str, str] = {}
        for spec_path in sorted((ROOT / "specs").glob("*.toml")):
            loaded = load_spec(spec_path.relative_to(ROOT))
            for host_path in sorted(HOSTS.glob("*.json")):
                facts = HostFacts.model_validate_json(host_path.read_text())
                stem = f"{spec_path.stem}__{host_path.stem}"
                try:
                    out[f"{stem}.toml"] = render(compile_plan(loaded.spec, facts, loaded.spec_dir))
                except PlanRefused as exc:
                    out[f"{stem}.refused.txt"] = exc.render() + "\n"
        return out
    finally:
        os.chdir(cwd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    outputs = golden_outputs()
    if args.check:
        existing = {p.name for p in GOLDEN.glob("*") if p.is_file()}
        bad = sorted(n for n, t in outputs.items() if not (GOLDEN / n).exists() or (GOLDEN / n).read_text() != t)
        extra = sorted(existing - set(outputs))
        if bad or extra:
            print(
                f"golden plans drifted: changed {bad}, stale {extra}; run python tools/regen_golden.py", file=sys.stderr
            )
            return 1
        print(f"{len(outputs)} golden plans match")
        return 0
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for p in GOLDEN.glob("*"):
        if p.name not in outputs:
            p.unlink()
    for name, text in outputs.items():
        (GOLDEN / name).write_text(text)
    print(f"wrote {len(outputs)} golden plans to {GOLDEN.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
