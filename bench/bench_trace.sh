#!/usr/bin/env bash
# The tracer's overhead on a real run: the reference MoE model
# (configs/ref-moe.json) trained for a few steps with and without --trace,
# one rank and PP2 (1F1B) on 2 ranks, repetitions interleaved in ABBA
# order (plain, traced, traced, plain, ...) so that machine noise falls on
# both alike. Reports per layout the median training seconds per step of
# each and their ratio (target: traced / plain - 1 below 2%). Figures only: nothing here passes
# or fails on time.
#
# usage: bench/bench_trace.sh [BUILD]   (env: TRACE_BENCH_STEPS, default 4;
#        TRACE_BENCH_REPS, default 3; MPIEXEC, default mpiexec)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
FIVEFOLD=$BUILD/fivefold
STEPS=${TRACE_BENCH_STEPS:-4}
REPS=${TRACE_BENCH_REPS:-3}
MPIEXEC=${MPIEXEC:-mpiexec}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-bench-trace-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
# Byte-level text is all the model needs to run its real shapes (vocab 4096 >= 256).
for i in $(seq 1 3000); do echo "Line $i: and the evening and the morning were day $i of $((i * 7 % 31))."; done >text.txt
"$FIVEFOLD" tokenize --byte-level --input text.txt --out shards --val-fraction 0.05 >/dev/null

# seconds per step of one run: the summary's training time over its steps
per_step() { /usr/bin/python3 -c '
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if "\"summary\"" in l][-1]
print(s["train_seconds"] / s["steps"])' "$1/metrics.jsonl"; }

run() { # NP OUT [flags]
  local np=$1 out=$2
  shift 2
  local cmd=("$FIVEFOLD" train --config "$ROOT/configs/ref-moe.json" --train-data shards/train.bin
    --val-data shards/val.bin --steps "$STEPS" --eval-interval 0 --log-interval 1 --peak-gflops 50
    --keep-last 1 --out "$out" --no-progress "$@")
  if [ "$np" = 1 ]; then "${cmd[@]}" >"$out.log" 2>&1; else "$MPIEXEC" -np "$np" --oversubscribe "${cmd[@]}" >"$out.log" 2>&1; fi ||
    { tail -5 "$out.log" >&2; return 1; }
  per_step "$out"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

layout() { # LABEL NP [flags]
  local label=$1 np=$2
  shift 2
  : >plain.txt
  : >traced.txt
  for r in $(seq 1 "$REPS"); do
    # ABBA order: a run that always comes second (warmer page cache, a
    # neighbour's load shifting) must not bias one side.
    if [ $((r % 2)) = 1 ]; then
      run "$np" "p$label$r" "$@" >>plain.txt
      run "$np" "t$label$r" "$@" --trace "t$label$r.json" >>traced.txt
    else
      run "$np" "t$label$r" "$@" --trace "t$label$r.json" >>traced.txt
      run "$np" "p$label$r" "$@" >>plain.txt
    fi
    rm -rf "p$label$r" "t$label$r"
  done
  local a b
  a=$(median <plain.txt)
  b=$(median <traced.txt)
  printf 'trace_overhead layout=%s steps=%d reps=%d plain_s_per_step=%.4f traced_s_per_step=%.4f ratio=%.4f overhead_pct=%.2f\n' \
    "$label" "$STEPS" "$REPS" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN{print b/a}')" \
    "$(awk -v a="$a" -v b="$b" 'BEGIN{print 100*(b/a-1)}')"
}

export OMP_WAIT_POLICY=PASSIVE OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} layout one-rank 1 --threads "${OMP_NUM_THREADS:-2}"
OMP_NUM_THREADS=1 layout pp2 2 --pp 2 --grad-accum 4 --threads 1
