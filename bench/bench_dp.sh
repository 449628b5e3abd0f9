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
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-4}
FIVEFOLD=$(cd "$BUILD" && pwd)/fivefold
B=${BENCH_DP_BATCH:-2}
T=${BENCH_DP_SEQ:-256}
ACCUM=${BENCH_DP_ACCUM:-1}
[ -x "$FIVEFOLD" ] || { echo "bench_dp: $FIVEFOLD not built" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-bench-dp-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

# Byte-level text: plenty of windows for a few steps at any batch size.
for i in $(seq 1 4000); do
  echo "Line $i: the quick brown fox $((i * 7919 % 1009)) jumps over the lazy dog $((i * 104729 % 997)) again."
done >text.txt
"$FIVEFOLD" tokenize --byte-level --input text.txt --out shards --val-fraction 0.01 >/dev/null
cat >run.json <<JSON
{"model": "$ROOT/configs/models/ref-moe.json",
 "training": {"micro_batch_size": $B, "seq_len": $T, "grad_accum_steps": $ACCUM, "steps": $STEPS,
              "lr": 0.0003, "warmup_steps": 1, "log_interval": 1, "eval_interval": 0, "eval_batches": 1,
              "threads": 1, "peak_gflops": 100},
 "data": {"train": "shards/train.bin"}}
JSON
extra=()
[ -n "${BENCH_DP_BUCKET_MB:-}" ] && extra+=(--bucket-mb "$BENCH_DP_BUCKET_MB")

# tokens/s of the steps after the first (the first touches every page).
steady_tps() {
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"type":"train"' in l]
steady = recs[1:] or recs
sec = sum(r["ms_per_step"] / 1e3 for r in steady)
tok = sum(r["tokens_per_s"] * r["ms_per_step"] / 1e3 for r in steady)
print(f"{tok / sec:.1f}" if sec > 0 else "0")
PY
}

echo "bench_dp: ref-moe, micro-batch $B x $T tokens x accumulation $ACCUM per rank, $STEPS steps, 1 thread per rank"
"$FIVEFOLD" train --config run.json --out one --no-progress >one.log 2>&1 || { cat one.log; exit 1; }
mpirun -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --out dp2 --no-progress "${extra[@]}" >dp2.log 2>&1 ||
  { cat dp2.log; exit 1; }
t1=$(steady_tps one)
t2=$(steady_tps dp2)
printf '  1 rank  x 1 thread : %10.1f tok/s\n' "$t1"
printf '  2 ranks x 1 thread : %10.1f tok/s   (DP2, all-reduce)\n' "$t2"
/usr/bin/python3 -c "print(f'  scaling efficiency : {100 * $t2 / (2 * $t1):9.1f} %  (DP2 tok/s / (2 x one rank))')"
grep -E "^  parallel" dp2.log | sed 's/^  parallel/  dp2 buckets       :/'
grep -E "^dp:" dp2.log | sed 's/^dp:/  dp2 reduction     :/'
if [ "${BENCH_DP_ZERO:-0}" = 1 ]; then
  mpirun -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --out zero2 --no-progress --distributed-optimizer \
    "${extra[@]}" >zero2.log 2>&1 || { cat zero2.log; exit 1; }
  printf '  2 ranks ZeRO-1     : %10.1f tok/s\n' "$(steady_tps zero2)"
  grep -E "^dp:" zero2.log | sed 's/^dp:/  zero2 reduction   :/'
fi
