#!/usr/bin/env bash
# Re-resolve uv.lock after a dependency change in pyproject.toml, and export it for pip as
# tools/constraints.txt (what tools/setup.sh and CI install). Needs uv (the `test` extra has it)
# and the package index. tests/test_packaging.py fails while either file is out of date.
#
#   bash tools/lock.sh                      keep every locked version pyproject.toml still allows
#   bash tools/lock.sh --upgrade            move every package to its newest allowed version
#   bash tools/lock.sh -P mujoco==4.0.1     move one package
set -euo pipefail
cd "$(dirname "$0")/.."
uv=$(command -v uv || echo .venv/bin/uv)
"$uv" lock --python 3.11 "$@"
"$uv" export --frozen --no-hashes --no-emit-project --all-extras --format requirements-txt \
  --output-file tools/constraints.txt --quiet
echo "uv.lock and tools/constraints.txt written"
