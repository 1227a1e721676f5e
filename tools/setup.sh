#!/usr/bin/env bash
# Create .venv and install unilab into it. `bash tools/setup.sh test` also installs the test tools.
# torch is installed first and pinned. On a machine without an NVIDIA driver, PyPI's torch wheel is
# a multi-GB CUDA build that cannot be used there, so the CPU wheel is taken from PyTorch's own
# index when that index answers (PyTorch's documented CPU install); otherwise pip's configuration
# decides (a local wheel, say). On a GPU machine, PyPI's CUDA build is taken, or install the CUDA
# torch you need into .venv first: an importable torch is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=""
[ "${1:-}" = "test" ] && extra="[test]"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  torch_index=()
  cpu_index="https://download.pytorch.org/whl/cpu"
  if ! command -v nvidia-smi >/dev/null 2>&1 && [ ! -e /proc/driver/nvidia/version ] \
    && .venv/bin/python -c "import urllib.request as u; u.urlopen('$cpu_index/torch/', timeout=5)" 2>/dev/null; then
    echo "no NVIDIA driver here: installing PyTorch's CPU build from $cpu_index"
    torch_index=(--index-url "$cpu_index")
  fi
  .venv/bin/python -m pip install --quiet ${torch_index[@]+"${torch_index[@]}"} torch==2.13.0
fi
.venv/bin/python -m pip install --quiet -e ".${extra}"
echo "unilab installed in .venv (activate with: . .venv/bin/activate)"
