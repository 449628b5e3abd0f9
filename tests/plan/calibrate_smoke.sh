#!/usr/bin/env bash
# Smoke test of `fivefold calibrate --quick`: it writes a spec that the
# planner loads and simulates with, with the collectives section when run
# on 2 ranks under mpirun and without it on one rank.
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
  "$MPIEXEC" -np "$NP" --oversubscribe "$FIVEFOLD" calibrate --quick --out "$WORK/spec.json" >"$WORK/log" 2>&1 ||
    { cat "$WORK/log"; exit 1; }
  GPUS=$NP
fi
cat "$WORK/log"
grep -q '"gemm_efficiency"' "$WORK/spec.json" || { echo "no compute.gemm_efficiency in the spec"; exit 1; }
if [ "$NP" = 0 ]; then
  ! grep -q '"collectives"' "$WORK/spec.json" || { echo "one rank must not write collectives"; exit 1; }
  grep -q "links           not measured" "$WORK/log" || { echo "one rank must say the links were not measured"; exit 1; }
else
  for k in all_reduce reduce_scatter all_gather all_to_all p2p; do
    grep -q "\"$k\"" "$WORK/spec.json" || grep -q "$k .*not fitted" "$WORK/log" ||
      { echo "collective $k neither fitted nor reported"; exit 1; }
  done
fi
"$FIVEFOLD" simulate --model "$ROOT/configs/models/ref-moe.json" --cluster "$WORK/spec.json" --gpus "$GPUS" \
  --seq 256 --global-batch 8 --dtype fp32 --quiet >"$WORK/sim" 2>&1 || { cat "$WORK/sim"; exit 1; }
grep -q "predicted: step" "$WORK/sim" || { cat "$WORK/sim"; exit 1; }
cat "$WORK/sim"
echo "calibrate smoke test passed ($NP ranks)"
