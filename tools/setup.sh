#!/usr/bin/env bash
# Create .venv and install unilab into it (docs/install.md).
#
#   bash tools/setup.sh                  the CPU runtime: plan, apply, eval, export
#   bash tools/setup.sh video gpu        with extras: gpu video profile onnx wandb play, all, or test
#   bash tools/setup.sh test             everything the test suite needs (every extra)
#
# The torch build is chosen, not guessed: UNILAB_TORCH=cpu takes PyTorch's CPU wheel (about 200 MB),
# UNILAB_TORCH=cuda PyPI's CUDA wheel (several GB). Unset, it is cuda when the gpu extra (or all,
# or test) is asked for on a host with an NVIDIA driver, and cpu otherwise: the Quick start trains
# on the CPU. Every version installed is the one uv.lock fixes (through tools/constraints.txt, its
# export for pip), torch's included. An importable torch of that version in .venv is kept (install
# another build of it there first to use it).
set -euo pipefail
cd "$(dirname "$0")/.."

step=""
trap 'rc=$?; [ $rc -ne 0 ] && [ -n "$step" ] && echo "setup.sh: failed while $step (exit $rc); see the messages above" >&2' EXIT
fail() { step=""; echo "setup.sh: $1" >&2; exit 1; }

known="gpu video profile onnx wandb play all test"
extras=""
for arg in "$@"; do
  case " $known " in
    *" $arg "*) extras="${extras:+$extras,}$arg" ;;
    *) fail "unknown extra '$arg'; the extras are: $known" ;;
  esac
done

step="finding Python 3.11 or newer"
new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }
python=""
if [ -n "${PYTHON:-}" ]; then
  command -v "$PYTHON" >/dev/null 2>&1 || fail "PYTHON=$PYTHON is not an executable; name a Python 3.11 or newer, or leave PYTHON unset"
  new_enough "$PYTHON" || fail "PYTHON=$PYTHON is older than 3.11 ($("$PYTHON" --version 2>&1)); name a Python 3.11 or newer"
  python="$PYTHON"
else
  for candidate in python3 python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null 2>&1 && new_enough "$candidate"; then
      python="$candidate"
      break
    fi
  done
fi
if [ -z "$python" ]; then
  found="no python3 on PATH"
  command -v python3 >/dev/null 2>&1 && found="$(python3 --version 2>&1)"
  fail "unilab needs Python 3.11 or newer, and none is on PATH ($found).
Install one (Debian/Ubuntu: apt install python3.11 python3.11-venv; macOS: brew install python@3.11), or
name it with PYTHON=/path/to/python3.11 bash tools/setup.sh"
fi

if [ ! -x .venv/bin/python ]; then
  step="checking the venv module"
  "$python" -c 'import venv, ensurepip' 2>/dev/null || fail "$python has no working venv module (ensurepip is missing).
Install it (Debian/Ubuntu: apt install python$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv), then run this again"
  step="creating .venv with $python"
  "$python" -m venv .venv
elif ! new_enough .venv/bin/python; then
  fail ".venv has $(.venv/bin/python --version 2>&1), older than 3.11; remove it (rm -rf .venv) and run this again"
fi

step="reading the locked torch version from uv.lock"
lock=tools/constraints.txt
[ -f uv.lock ] && [ -f "$lock" ] || fail "uv.lock or $lock is missing from this checkout; check it out again (git checkout -- uv.lock $lock)"
torch_pin=$(.venv/bin/python -c '
import tomllib
lock = tomllib.load(open("uv.lock", "rb"))
print("torch==" + next(p["version"] for p in lock["package"] if p["name"] == "torch"))')

choice="${UNILAB_TORCH:-}"
case "$choice" in
  cpu | cuda) why="UNILAB_TORCH=$choice" ;;
  "")
    driver=no
    if command -v nvidia-smi >/dev/null 2>&1 || [ -e /proc/driver/nvidia/version ] || [ -e /dev/dxg ]; then driver=yes; fi
    case ",$extras," in
      *,gpu,* | *,all,* | *,test,*) wants_gpu=yes ;;
      *) wants_gpu=no ;;
    esac
    if [ "$driver" = yes ] && [ "$wants_gpu" = yes ]; then
      choice=cuda why="an NVIDIA driver is present and a GPU extra was asked for"
    else
      choice=cpu why="$([ "$driver" = yes ] && echo "no GPU extra was asked for" || echo "no NVIDIA driver here")"
    fi
    ;;
  *) fail "UNILAB_TORCH=$choice: use cpu or cuda, or leave it unset" ;;
esac

step="upgrading pip in .venv"
.venv/bin/python -m pip install --quiet --upgrade pip

cpu_index="https://download.pytorch.org/whl/cpu"
pin_version="${torch_pin#torch==}"
# The torch in .venv is kept when it is the pinned version and, if UNILAB_TORCH asks for a build, that
# build: pip would otherwise replace a wrong version with PyPI's (CUDA) wheel, or keep a CPU build
# that satisfies the pin when the CUDA one was asked for.
have=$(.venv/bin/python -c 'import torch; print(torch.__version__.split("+")[0], "cuda" if torch.version.cuda else "cpu")' 2>/dev/null || true)
if [ -n "$have" ] && [ "${have% *}" = "$pin_version" ] && { [ -z "${UNILAB_TORCH:-}" ] || [ "${have#* }" = "$choice" ]; }; then
  echo "keeping the torch in .venv ($have build)"
else
  reinstall=""
  if [ -n "$have" ]; then
    echo "replacing the torch in .venv ($have build) with $torch_pin, $choice build"
    reinstall="--force-reinstall"
  fi
  if [ "$choice" = cpu ]; then
    step="installing $torch_pin (CPU build)"
    echo "installing $torch_pin, CPU build ($why; UNILAB_TORCH=cuda for the CUDA build)"
    # PyTorch's CPU index when it answers, else pip's own configuration (a local wheel, say).
    if .venv/bin/python -c "import urllib.request as u; u.urlopen('$cpu_index/torch/', timeout=5)" 2>/dev/null; then
      # Its dependencies come with the rest, at their locked versions, from pip's usual index.
      .venv/bin/python -m pip install --quiet $reinstall --no-deps --index-url "$cpu_index" "$torch_pin"
    else
      echo "$cpu_index does not answer: pip's own configuration picks the wheel (on PyPI, Linux's is a CUDA build)"
      .venv/bin/python -m pip install --quiet $reinstall --no-deps "$torch_pin"
    fi
  else
    step="installing $torch_pin (CUDA build from PyPI, several GB)"
    echo "installing $torch_pin, CUDA build ($why; UNILAB_TORCH=cpu for the CPU build)"
    .venv/bin/python -m pip install --quiet $reinstall --constraint "$lock" "$torch_pin"
  fi
fi

# The test extra's browser test (tests/test_play.py) drives headless Chromium through its driver:
# installed here with the system's package manager when this runs as root on Debian or Ubuntu.
case ",$extras," in
  *,test,*)
    if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        step="installing chromium and chromium-driver with apt-get (the browser test)"
        echo "installing chromium and chromium-driver (apt-get) for the browser test"
        apt_chromium() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null; }
        # Not fatal: without them only the browser test fails, and it says what to install.
        apt_chromium || { apt-get update -q >/dev/null && apt_chromium; } ||
          echo "note: apt-get could not install chromium and chromium-driver; tests/test_play.py's browser test will fail until they are on PATH"
      else
        echo "note: tests/test_play.py needs chromium and chromedriver on PATH (Debian/Ubuntu: sudo apt-get install chromium chromium-driver)"
      fi
    fi
    ;;
esac

step="installing unilab${extras:+[$extras]} and its dependencies at the versions uv.lock fixes"
.venv/bin/python -m pip install --quiet --constraint "$lock" -e ".${extras:+[$extras]}"
step=""
echo "unilab${extras:+[$extras]} installed in .venv (activate with: . .venv/bin/activate)"
