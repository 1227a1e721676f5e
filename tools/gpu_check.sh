#!/usr/bin/env bash
# Every CUDA-only test and benchmark, for a machine with one NVIDIA GPU; at most 8 minutes (BUDGET_S).
#   bash tools/gpu_check.sh 2>&1 | tee gpu_check.log
# Never changes the GPU's compute mode, clocks or other settings. Record what it prints, with
# the date and the GPU, in docs/gpu-validation.md.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
status=0
# The whole script stays under 8 minutes: every step's timeout is cut to what is left of the budget,
# and a step that would get less than 10 s is skipped (and counts as a failure).
BUDGET_S=${BUDGET_S:-470}
START=$SECONDS
step() { echo; echo "=== $* ($((SECONDS - START)) s in) ==="; }
run() {
  local left=$((BUDGET_S - (SECONDS - START)))
  if [ "$left" -lt 10 ]; then echo "SKIPPED (time budget spent): $*"; status=1; return 1; fi
  if [ "$1" = timeout ] && [ "$2" -gt "$left" ]; then set -- timeout "$left" "${@:3}"; fi
  "$@" || { echo "FAILED: $*"; status=1; return 1; }
}

step "host"
date -u
run nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,compute_mode --format=csv
run "$PY" -c "import torch, warp; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('warp', warp.__version__)"
run "$PY" -m unilab host

step "MuJoCo Warp kernels for CUDA (compiled once into Warp's cache, so no timed step below pays for it)"
run timeout 150 "$PY" tools/bench_physics.py --sizes 64 --workers 1 --mjwarp-device cuda:0 --seconds 0.5

step "CUDA tests (pytest -m cuda)"
run timeout 100 "$PY" -m pytest -q -m cuda -rs

step "MuJoCo Warp G1 env steps/s at 1024 and 4096 worlds, physics graph off vs on"
run timeout 40 "$PY" tools/bench_physics.py --sizes 1024 4096 --workers 1 --mjwarp-device cuda:0 --seconds 2
run timeout 40 "$PY" tools/bench_physics.py --sizes 1024 4096 --workers 1 --mjwarp-device cuda:0 --physics-graph --seconds 2

step "Learner updates/s: eager vs whole-cycle CUDA graph (SAC, FlashSAC shipped configs)"
run timeout 45 "$PY" tools/bench_learner_graph.py --updates 300 --repeats 3

# What a manifest says about a run: status, graphs, ranks' devices and MPS evidence.
evidence() {
  "$PY" - "$1" "$2" <<'PY'
import glob, json, sys
run_dir = sorted(glob.glob(sys.argv[1] + "/*/manifest.json"))[-1]
m = json.load(open(run_dir))
b = m["backend"]
print("status", m["status"], "| learner_graph", b["learner_graph"].get("state"), "| physics_graph",
      b["physics_graph"].get("enabled"), b["physics_graph"].get("replays"))
for r in m["ranks"]:
    print("rank", r["rank"], r["device"], r.get("gpu_uuid"), "mps_validated", r.get("mps_validated"),
          "servers", r.get("mps_server_pids"))
want = sys.argv[2]
ok = m["status"] == "succeeded" and b["learner_graph"].get("state") == "captured"
if want == "physics":
    ok = ok and bool(b["physics_graph"].get("enabled"))
if want == "mps":
    ok = ok and all(r.get("mps_validated") for r in m["ranks"])
sys.exit(0 if ok else 1)
PY
}

step "apply: SAC learner on the GPU, CPU MuJoCo physics, learner graph; then export its checkpoint"
GDIR=$(mktemp -d)
run timeout 60 "$PY" -m unilab apply specs/g1.toml --set 'training.devices=[0]' --set run.total_env_steps=12000 \
    --set algo.warmup_env_steps=2000 --set run.output_dir="\"$GDIR\""
run evidence "$GDIR" learner
run timeout 20 "$PY" -m unilab export "$(dirname "$(ls "$GDIR"/*/manifest.json | tail -1)")" --out "$GDIR/actor.onnx"

step "apply: FlashSAC with MuJoCo Warp on the GPU, physics and learner graphs"
WDIR=$(mktemp -d)
run timeout 75 "$PY" -m unilab apply specs/g1.toml --set 'training.devices=[0]' --set 'sim.backend="mjwarp"' \
    --set 'algo={name="flashsac", warmup_env_steps=8192, batch_size=1024}' --set task.num_envs=1024 \
    --set run.total_env_steps=40960 --set run.output_dir="\"$WDIR\""
run evidence "$WDIR" physics

if command -v nvidia-cuda-mps-control >/dev/null; then
  step "MPS: start a service for GPU 0, apply through it (learner and collector its clients), stop it"
  export UNILAB_STATE_DIR=$(mktemp -d)
  MDIR=$(mktemp -d)
  started=0
  run "$PY" -m unilab mps start --gpus 0 --name gpucheck --daemon && started=1
  run "$PY" -m unilab mps status
  run timeout 60 "$PY" -m unilab apply specs/g1_dp2_cuda_mps.toml --set 'training.devices=[0]' \
      --set 'training.dp_gradient_wire_dtype="float32"' --set training.mps_service='"gpucheck"' \
      --set task.num_envs=1024 --set run.total_env_steps=40960 --set algo.warmup_env_steps=8192 \
      --set algo.batch_size=1024 --set run.output_dir="\"$MDIR\""
  run evidence "$MDIR" mps
  if [ $started -eq 1 ]; then  # whatever is left of the budget: never leave the daemon running
    "$PY" -m unilab mps stop --name gpucheck || { echo "FAILED: mps stop"; status=1; }
  fi
else
  step "MPS: nvidia-cuda-mps-control not on PATH, skipped"
fi

echo
[ $status -eq 0 ] && echo "gpu_check: all passed" || echo "gpu_check: FAILURES above"
exit $status
