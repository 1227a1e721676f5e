#!/usr/bin/env bash
# Create .venv and install unilab into it. `bash tools/setup.sh test` also installs the test tools.
# torch is installed first and pinned, so pip takes the local CPU wheel where one exists instead
# of pulling a multi-GB CUDA build; on a GPU machine install the CUDA torch you need first.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=""
[ "${1:-}" = "test" ] && extra="[test]"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -e ".${extra}"
echo "unilab installed in .venv (activate with: . .venv/bin/activate)"
