#!/usr/bin/env bash
# Smoke test of `fivefold calibrate --quick`: it writes a spec that the
# planner loads and simulates with, with the collectives section when run
# on 2 ranks under mpirun and without it on one rank; on a CPU with
# avx512_bf16 also the bf16 GEMM curve, and simulate --dtype bf16 then
# predicts a faster step than --dtype fp32 (the bf16 peak is measured);
# the rates of the CNN kernels (convolution curves at two batches, the
# pooling and activation layers), with which `simulate --net` prices
# configs/vision/lenet5.json (more ranks add the gradient reduction, a
# tropical network is refused naming the layer). With ONE_CORE=1 the NP
# ranks share one core (taskset, no binding): calibrate measures in turns
# and times the CNN kernels again with every rank at once, and says what
# time-slicing cost them.
# usage: calibrate_smoke.sh FIVEFOLD NP [MPIEXEC]     (NP 0: no mpirun)
set -eu
FIVEFOLD=$1
NP=$2
MPIEXEC=${3:-mpirun}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-calib-smoke-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
if [ "$NP" = 0 ]; then
  "$FIVEFOLD" calibrate --quick --devices 2 --out "$WORK/spec.json" >"$WORK/log" 2>&1 || { cat "$WORK/log"; exit 1; }
  GPUS=2
else
  LAUNCH=("$MPIEXEC" -np "$NP" --oversubscribe)
  if [ "${ONE_CORE:-0}" = 1 ]; then
    CPU=$(/usr/bin/python3 -c 'import os; print(min(os.sched_getaffinity(0)))')
    LAUNCH=(taskset -c "$CPU" "${LAUNCH[@]}" --bind-to none)
  fi
  "${LAUNCH[@]}" "$FIVEFOLD" calibrate --quick --out "$WORK/spec.json" >"$WORK/log" 2>&1 || { cat "$WORK/log"; exit 1; }
  GPUS=$NP
fi
cat "$WORK/log"
if [ "${ONE_CORE:-0}" = 1 ]; then
  grep -q "oversubscribed: each rank gets its share" "$WORK/log" || { echo "$NP ranks on one core not oversubscribed"; exit 1; }
  grep -Eq "time-slicing +CNN kernels timed with all $NP ranks at once: [0-9]+[.][0-9]+ x their rates at the share" \
    "$WORK/log" || { echo "calibrate does not time the CNN kernels with the ranks at once"; exit 1; }
fi
grep -q '"gemm_efficiency"' "$WORK/spec.json" || { echo "no compute.gemm_efficiency in the spec"; exit 1; }
# The spec carries the CPU runtime's facts, so the planner prices what runs here by default.
for fact in '"runtime"' '"device":[[:space:]]*"cpu"' '"dtype":[[:space:]]*"fp32"' '"moe_tp_replicated":[[:space:]]*true' \
  '"async_progress":[[:space:]]*false' '"device_sync":[[:space:]]*false'; do
  grep -Eq "$fact" "$WORK/spec.json" || { echo "no $fact in the spec's runtime section"; exit 1; }
done
if [ "$NP" = 0 ]; then
  ! grep -q '"collectives"' "$WORK/spec.json" || { echo "one rank must not write collectives"; exit 1; }
  grep -q "links           not measured" "$WORK/log" || { echo "one rank must say the links were not measured"; exit 1; }
else
  # The runtime's own cost per gradient bucket, timed through its reduction.
  grep -Eq "buckets +256 KB gradient: [0-9.]+ us in 1 bucket, [0-9.]+ us in 64; [0-9.]+ us per extra bucket" "$WORK/log" ||
    { echo "calibrate does not time the gradient buckets"; exit 1; }
  grep -Eq "grad reduce +64 MB gradient, runtime / fit by bucket: 1 MB [0-9.]+ 4 MB [0-9.]+ 16 MB [0-9.]+ 64 MB [0-9.]+" \
    "$WORK/log" || { echo "calibrate does not time the gradient reduction by bucket size"; exit 1; }
  grep -q '"grad_reduce_factor"' "$WORK/spec.json" || { echo "no runtime.grad_reduce_factor in the spec"; exit 1; }
  for k in all_reduce reduce_scatter all_gather all_to_all p2p; do
    grep -q "\"$k\"" "$WORK/spec.json" || grep -q "$k .*not fitted" "$WORK/log" ||
      { echo "collective $k neither fitted nor reported"; exit 1; }
  done
fi
"$FIVEFOLD" simulate --model "$ROOT/configs/models/ref-moe.json" --cluster "$WORK/spec.json" --gpus "$GPUS" \
  --seq 256 --global-batch 8 --dtype fp32 --quiet >"$WORK/sim" 2>&1 || { cat "$WORK/sim"; exit 1; }
grep -q "predicted: step" "$WORK/sim" || { cat "$WORK/sim"; exit 1; }
# Without --dtype the spec's runtime precision (fp32) is simulated.
"$FIVEFOLD" simulate --model "$ROOT/configs/models/ref-moe.json" --cluster "$WORK/spec.json" --gpus "$GPUS" \
  --seq 256 --global-batch 8 >"$WORK/sim_default" 2>&1 || { cat "$WORK/sim_default"; exit 1; }
grep -q "global batch 8, fp32" "$WORK/sim_default" || { echo "simulate does not default to the spec's fp32"; exit 1; }
grep -q "runtime (from " "$WORK/sim_default" || { echo "simulate does not say which runtime facts it used"; exit 1; }
# The experts' fp32 products are measured as they run and priced on that
# curve: at half its efficiency the step takes longer.
grep -Eq "expert GEMM eff\. [0-9.e+]+: [0-9.]+.*as the experts run" "$WORK/log" ||
  { echo "calibrate does not report the experts' fp32 curve"; exit 1; }
grep -q '"gemm_efficiency_rows_vary"' "$WORK/spec.json" || { echo "no compute.gemm_efficiency_rows_vary in the spec"; exit 1; }
step() { sed -n 's/.*predicted: step \([0-9.]*\).*/\1/p' "$1" | head -1; }
# halved_curve_slower CURVE DTYPE: the reference MoE priced on the spec and
# on the spec with compute.CURVE at half its efficiency must take at least
# 5% longer. Both specs get a memory system fast enough (and no kernel
# floor) that every product is priced by its curve: under a sanitizer build
# the measured triad is slow enough that the experts' products would be
# priced as memory-bound, where no efficiency curve can move them.
halved_curve_slower() {
  /usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
s["memory"]["bandwidth_GBps"] = 1e6
s["compute"]["kernel_floor_us"] = 0.0
json.dump(s, open(sys.argv[2], "w"))
s["compute"][sys.argv[4]] = [[x, y / 2] for x, y in s["compute"][sys.argv[4]]]
json.dump(s, open(sys.argv[3], "w"))' "$WORK/spec.json" "$WORK/spec_$1_fast.json" "$WORK/spec_$1_half.json" "$1"
  for v in fast half; do
    "$FIVEFOLD" simulate --model "$ROOT/configs/models/ref-moe.json" --cluster "$WORK/spec_$1_$v.json" --gpus "$GPUS" \
      --seq 256 --global-batch 8 --dtype "$2" --quiet >"$WORK/sim_$1_$v" 2>&1 || { cat "$WORK/sim_$1_$v"; exit 1; }
  done
  awk -v a="$(step "$WORK/sim_$1_half")" -v b="$(step "$WORK/sim_$1_fast")" 'BEGIN { exit !(b > 0 && a > b * 1.05) }' ||
    { echo "halving $1: step $(step "$WORK/sim_$1_half") against $(step "$WORK/sim_$1_fast")"; exit 1; }
}
halved_curve_slower gemm_efficiency_rows_vary fp32
cat "$WORK/sim"
if grep -qw avx512_bf16 /proc/cpuinfo && [ -z "${ONEDNN_MAX_CPU_ISA:-}${DNNL_MAX_CPU_ISA:-}" ]; then
  grep -q '"gemm_efficiency_bf16"' "$WORK/spec.json" || { echo "no compute.gemm_efficiency_bf16 in the spec"; exit 1; }
  grep -Eq "bf16 peak .*(vdpbf16ps|tdpbf16ps \(AMX\)) loop" "$WORK/log" || { echo "calibrate does not report the bf16 peak"; exit 1; }
  "$FIVEFOLD" simulate --model "$ROOT/configs/models/ref-moe.json" --cluster "$WORK/spec.json" --gpus "$GPUS" \
    --seq 256 --global-batch 8 --dtype bf16 --quiet >"$WORK/sim16" 2>&1 || { cat "$WORK/sim16"; exit 1; }
  awk -v a="$(step "$WORK/sim16")" -v b="$(step "$WORK/sim")" 'BEGIN { exit !(a > 0 && a < b) }' ||
    { echo "bf16 step $(step "$WORK/sim16") not below fp32 step $(step "$WORK/sim")"; exit 1; }
  # Expert products are priced on their own curve (run-time shapes, as
  # the experts run): at half its efficiency the step takes longer.
  grep -q '"gemm_efficiency_bf16_rows_vary"' "$WORK/spec.json" ||
    { echo "no compute.gemm_efficiency_bf16_rows_vary in the spec"; exit 1; }
  halved_curve_slower gemm_efficiency_bf16_rows_vary bf16
fi
grep -q '"conv_efficiency"' "$WORK/spec.json" || { echo "no compute.conv_efficiency in the spec"; exit 1; }
grep -Eq '"maxpool":[[:space:]]*\[' "$WORK/spec.json" || { echo "no compute.layer_seconds.maxpool in the spec"; exit 1; }
net_step() { # GPUS: LeNet-5's predicted step at 32 images per rank
  "$FIVEFOLD" simulate --net "$ROOT/configs/vision/lenet5.json" --cluster "$WORK/spec.json" --gpus "$1" --mbs 32 \
    --global-batch $((32 * $1)) >"$WORK/net$1" 2>&1 || { cat "$WORK/net$1"; exit 1; }
  grep -q "0 conv2d 6x28x28" "$WORK/net$1" || { cat "$WORK/net$1"; echo "simulate --net lists no conv2d layer"; exit 1; }
  sed -n 's/^predicted: step \([0-9.]*\) ms.*/\1/p' "$WORK/net$1"
}
one=$(net_step 1)
cat "$WORK/net1"
if [ "$GPUS" -gt 1 ]; then
  many=$(net_step "$GPUS")
  grep -Eq "gradient reduction [0-9.]+ ms exposed \([1-9][0-9]* bucket" "$WORK/net$GPUS" || { cat "$WORK/net$GPUS"; exit 1; }
  awk -v a="$many" -v b="$one" 'BEGIN { exit !(a > b) }' || { echo "dp $GPUS step $many not above one rank's $one"; exit 1; }
fi
if "$FIVEFOLD" simulate --net "$ROOT/configs/vision/tlenet5.json" --cluster "$WORK/spec.json" --gpus 1 --mbs 8 \
  --global-batch 8 >"$WORK/tnet" 2>&1; then echo "simulate --net priced a tropical network"; exit 1; fi
grep -q "model.layers\[0\].type: the simulator prices conv2d" "$WORK/tnet" || { cat "$WORK/tnet"; exit 1; }
echo "calibrate smoke test passed ($NP ranks)"
