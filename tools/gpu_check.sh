#!/usr/bin/env bash
# Every CUDA-only test and benchmark, for a machine with one NVIDIA GPU; at most 8 minutes (step timeouts).
#   bash tools/gpu_check.sh 2>&1 | tee gpu_check.log
# Never changes the GPU's compute mode, clocks or other settings. Record what it prints, with
# the date and the GPU, in docs/gpu-validation.md.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
status=0
step() { echo; echo "=== $* ==="; }
run() { "$@" || { echo "FAILED: $*"; status=1; }; }

step "host"
date -u
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,compute_mode --format=csv || status=1
"$PY" -c "import torch, warp; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('warp', warp.__version__)"
"$PY" -m unilab host

step "CUDA tests (pytest -m cuda)"
run timeout 180 "$PY" -m pytest -q -m cuda -rs

step "MuJoCo Warp G1 env steps/s at 1024 and 4096 worlds, physics graph off vs on"
run timeout 75 "$PY" tools/bench_physics.py --sizes 1024 4096 --workers 1 --mjwarp-device cuda:0 --seconds 3
run timeout 75 "$PY" tools/bench_physics.py --sizes 1024 4096 --workers 1 --mjwarp-device cuda:0 --physics-graph --seconds 3

step "Learner updates/s: eager vs whole-cycle CUDA graph (SAC, FlashSAC shipped configs)"
run timeout 60 "$PY" tools/bench_learner_graph.py --updates 300 --repeats 3

step "apply on the GPU with the learner graph (short budget); the manifest's learner_graph evidence"
GDIR=$(mktemp -d)
run timeout 90 "$PY" -m unilab apply specs/g1.toml --set 'training.devices=[0]' --set run.total_env_steps=12000 \
    --set algo.warmup_env_steps=2000 --set run.output_dir="\"$GDIR\""
run "$PY" -c "import json,glob,sys; m=json.load(open(glob.glob(sys.argv[1]+'/*/manifest.json')[0])); \
print(json.dumps(m['backend']['learner_graph'], indent=1)); sys.exit(m['backend']['learner_graph']['state']!='captured')" "$GDIR"

if command -v nvidia-cuda-mps-control >/dev/null; then
  step "MPS: start a service for GPU 0, plan against it, stop it"
  export UNILAB_STATE_DIR=$(mktemp -d)
  run "$PY" -m unilab mps start --gpus 0 --name gpucheck --daemon
  run "$PY" -m unilab mps status
  run "$PY" -m unilab plan specs/g1_dp2_cuda_mps.toml --set 'training.devices=[0]' \
      --set 'training.dp_gradient_wire_dtype="float32"' --set training.mps_service='"gpucheck"'
  run "$PY" -m unilab mps stop --name gpucheck
else
  step "MPS: nvidia-cuda-mps-control not on PATH, skipped"
fi

echo
[ $status -eq 0 ] && echo "gpu_check: all passed" || echo "gpu_check: FAILURES above"
exit $status
