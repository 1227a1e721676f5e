#!/usr/bin/env bash
# Create .venv and install unilab into it. `bash tools/setup.sh test` also installs the test tools.
# torch is installed first and pinned. On a machine without an NVIDIA driver, PyPI's torch wheel is
# a multi-GB CUDA build that cannot be used there, so the CPU wheel is taken from PyTorch's own
# index when that index answers (PyTorch's documented CPU install); otherwise pip's configuration
# decides (a local wheel, say). UNILAB_TORCH=cpu or UNILAB_TORCH=pypi decides instead (a container
# image built without a GPU in sight but meant for GPU hosts wants pypi). An importable torch in
# .venv is kept: install the CUDA torch you need there first.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=""
[ "${1:-}" = "test" ] && extra="[test]"
torch_pin="torch==2.13.0"
cpu_index="https://download.pytorch.org/whl/cpu"
case "${UNILAB_TORCH:-auto}" in
  auto | cpu | pypi) ;;
  *) echo "error: UNILAB_TORCH=${UNILAB_TORCH}; use cpu, pypi, or leave it unset" >&2; exit 1 ;;
esac
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  choice="${UNILAB_TORCH:-auto}"
  case "$choice" in
    cpu | pypi) ;;
    auto)
      choice=pypi
      if command -v nvidia-smi >/dev/null 2>&1 || [ -e /proc/driver/nvidia/version ] || [ -e /dev/dxg ]; then
        :  # an NVIDIA driver (or WSL2's GPU device): PyPI's CUDA build
      elif .venv/bin/python -c "import urllib.request as u; u.urlopen('$cpu_index/torch/', timeout=5)" 2>/dev/null; then
        choice=cpu
      else
        echo "no NVIDIA driver here, and $cpu_index does not answer: pip's own configuration picks the torch wheel"
      fi
      ;;
  esac
  if [ "$choice" = cpu ]; then
    echo "installing PyTorch's CPU build from $cpu_index"
    .venv/bin/python -m pip install --quiet --index-url "$cpu_index" "$torch_pin" \
      || { echo "the CPU build did not install; trying pip's default index"; .venv/bin/python -m pip install --quiet "$torch_pin"; }
  else
    .venv/bin/python -m pip install --quiet "$torch_pin"
  fi
fi
.venv/bin/python -m pip install --quiet -e ".${extra}"
echo "unilab installed in .venv (activate with: . .venv/bin/activate)"
