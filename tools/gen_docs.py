"""Regenerate the generated parts of docs/: spec.md (from the spec models) and rules.md (from the
rule catalog). `python tools/gen_docs.py --check` exits 1 on drift; the tests run the check.
`--plugins FILE` writes the spec keys of the tasks and algorithms installed plugins register."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def outputs() -> dict[Path, str]:
    from unilab.plan.rules_doc import render_markdown as rules_md
    from unilab.spec.doc import render_markdown as spec_md

    return {ROOT / "docs" / "spec.md": spec_md(), ROOT / "docs" / "rules.md": rules_md()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--plugins", type=Path, metavar="FILE", help="write the installed plugins' spec keys to FILE")
    args = ap.parse_args()
    if args.plugins is not None:
        from unilab.spec.doc import render_plugins_markdown

        args.plugins.write_text(render_plugins_markdown())
        print(f"wrote {args.plugins}")
        return 0
    stale = [p for p, text in outputs().items() if not p.exists() or p.read_text() != text]
    if args.check:
        if stale:
            print(f"generated docs drifted: {[str(p.relative_to(ROOT)) for p in stale]}; run python tools/gen_docs.py")
            return 1
        print("generated docs match the code")
        return 0
    for p, text in outputs().items():
        p.write_text(text)
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
