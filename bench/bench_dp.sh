#!/usr/bin/env bash
# Data-parallel throughput of the reference MoE model (configs/models/ref-moe.json)
# on byte-level data: 1 rank x 1 thread versus 2 ranks x 1 thread (mpirun),
# the same micro-batch and accumulation per rank (weak scaling: DP2 trains
# twice the tokens per step). Prints tokens/s of each, the scaling
# efficiency (DP2 tok/s / (2 x one-rank tok/s)) and the fraction of the
# gradient all-reduce hidden behind backward (the trainer's "dp:" line:
# 1 - exposed wait / blocking reduction time, the wait taken on the slowest
# rank). Figures only, no thresholds.
#
# usage: bench/bench_dp.sh [BUILD_DIR] [STEPS]     (defaults: build, 4)
# env:   BENCH_DP_BATCH (micro-batch, default 2), BENCH_DP_SEQ (default 256),
#        BENCH_DP_ACCUM (default 1), BENCH_DP_BUCKET_MB (default: trainer's),
#        BENCH_DP_ZERO=1 adds a DP2 run with the distributed optimizer.
# The DP2 run takes the default (--overlap-grad-reduce auto, whose choice the
# dp: line states); DP2 then runs again with each explicit mode,
# overlapped (1) and blocking (0).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-4}
FIVEFOLD=$(cd "$BUILD" && pwd)/fivefold
B=${BENCH_DP_BATCH:-2}
T=${BENCH_DP_SEQ:-256}
ACCUM=${BENCH_DP_ACCUM:-1}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_setup bench_dp
bench_corpus
ref_moe_run_json run.json "$B" "$T" "$STEPS" "$ACCUM"
extra=()
[ -n "${BENCH_DP_BUCKET_MB:-}" ] && extra+=(--bucket-mb "$BENCH_DP_BUCKET_MB")

echo "bench_dp: ref-moe, micro-batch $B x $T tokens x accumulation $ACCUM per rank, $STEPS steps, 1 thread per rank"
"$FIVEFOLD" train --config run.json --out one --no-progress >one.log 2>&1 || { cat one.log; exit 1; }
mpirun -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --out dp2 --no-progress "${extra[@]}" >dp2.log 2>&1 ||
  { cat dp2.log; exit 1; }
t1=$(steady_tps one)
t2=$(steady_tps dp2)
printf '  1 rank  x 1 thread : %10.1f tok/s\n' "$t1"
printf '  2 ranks x 1 thread : %10.1f tok/s   (DP2, all-reduce, default --overlap-grad-reduce auto)\n' "$t2"
/usr/bin/python3 -c "print(f'  scaling efficiency : {100 * $t2 / (2 * $t1):9.1f} %  (DP2 tok/s / (2 x one rank))')"
grep -E "^  parallel" dp2.log | sed 's/^  parallel/  dp2 buckets       :/'
grep -E "^dp:" dp2.log | sed 's/^dp:/  dp2 reduction     :/'
if [ "${BENCH_DP_ZERO:-0}" = 1 ]; then
  mpirun -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --out zero2 --no-progress --distributed-optimizer \
    "${extra[@]}" >zero2.log 2>&1 || { cat zero2.log; exit 1; }
  printf '  2 ranks ZeRO-1     : %10.1f tok/s\n' "$(steady_tps zero2)"
  grep -E "^dp:" zero2.log | sed 's/^dp:/  zero2 reduction   :/'
fi
# The same DP2 with each explicit mode: non-blocking buckets started during
# backward (1), blocking reductions where the program places them (0).
mpirun -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --out overlap2 --no-progress --overlap-grad-reduce 1 \
  "${extra[@]}" >overlap2.log 2>&1 || { cat overlap2.log; exit 1; }
t4=$(steady_tps overlap2)
printf '  DP2 overlapped     : %10.1f tok/s   (--overlap-grad-reduce 1)\n' "$t4"
/usr/bin/python3 -c "print(f'  scaling, overlapped: {100 * $t4 / (2 * $t1):9.1f} %')"
grep -E "^dp:" overlap2.log | sed 's/^dp:/  overlap2 reduction:/'
mpirun -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --out block2 --no-progress --overlap-grad-reduce 0 \
  "${extra[@]}" >block2.log 2>&1 || { cat block2.log; exit 1; }
t3=$(steady_tps block2)
printf '  DP2 blocking       : %10.1f tok/s   (--overlap-grad-reduce 0)\n' "$t3"
/usr/bin/python3 -c "print(f'  scaling, blocking  : {100 * $t3 / (2 * $t1):9.1f} %')"
grep -E "^dp:" block2.log | sed 's/^dp:/  block2 reduction  :/'
