#!/usr/bin/env bash
# Sleeping waits (comm/waits.h) against spinning ones, measured: a dense
# model (4 blocks, hidden 256, vocabulary 512, 4 x 128 tokens per
# micro-batch, 4 micro-batches, fp32, one thread per rank) trained by
# `fivefold train` as PP2 on 2 ranks, stage widths 2,1 on 3 ranks and
# PP2 x DP2 on 4 ranks, each with FIVEFOLD_WAIT_SLEEP=off and on. Prints
# the median ms/step after the warm-up steps (the lowest over passes), the
# change sleeping makes, the ranks' threads against the machine's cores and
# the load average before each run (other processes on the machine only add
# time, and a sleeping rank hands its core to them too).
# usage: bench/waits.sh [BUILD_DIR] [STEPS]   (prints figures, never pass/fail)
# Environment: WAITS_PASSES (1): each run that many times.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-12}
WARMUP=3
PASSES=${WAITS_PASSES:-1}
FIVEFOLD=$(cd "$BUILD" && pwd)/fivefold
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
PY=/usr/bin/python3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-waits-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
cat >model.json <<'JSON'
{"model_type": "fivefold", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 512, "tie_word_embeddings": false}
JSON
for i in $(seq 1 3000); do
  echo "Line $i: the quick brown fox $((i * 7919 % 1009)) jumps over the lazy dog $((i * 104729 % 997)) again."
done >text.txt
"$FIVEFOLD" tokenize --byte-level --input text.txt --out shards --val-fraction 0.01 >/dev/null
cat >run.json <<JSON
{"model": "model.json",
 "training": {"micro_batch_size": 4, "seq_len": 128, "grad_accum_steps": 4, "steps": $STEPS,
              "lr": 0.0003, "warmup_steps": 1, "log_interval": 1, "eval_interval": 0, "threads": 1,
              "peak_gflops": 100},
 "data": {"train": "shards/train.bin"},
 "checkpoint": {"interval": 0}}
JSON
echo "machine: $(getconf _NPROCESSORS_ONLN) cores; $STEPS steps, the first $WARMUP not counted; $PASSES pass(es)"
printf '%-22s %5s %12s %12s %8s  %s\n' layout ranks "spin (ms)" "sleep (ms)" change "load average before each run"
run_layout() { # NAME NP FLAGS...
  local name=$1 np=$2 mode pass
  shift 2
  local loads=()
  for mode in off on; do
    for pass in $(seq 1 "$PASSES"); do
      loads+=("$mode:$(cut -d' ' -f1 /proc/loadavg)")
      FIVEFOLD_WAIT_SLEEP=$mode mpirun -np "$np" --oversubscribe "$FIVEFOLD" train --config run.json \
        --out "run-$name-$mode.p$pass" --no-progress "$@" >"train-$name-$mode.p$pass.log" 2>&1 ||
        { tail -5 "train-$name-$mode.p$pass.log"; return; }
    done
  done
  $PY - "$WARMUP" "$name" "$np" "${loads[*]}" "$PASSES" <<'PY'
import json, os, statistics, sys
warm, name, np, loads, passes = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
def best(mode):
    meds = []
    for p in range(1, passes + 1):
        d = f"run-{name}-{mode}.p{p}"
        recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if '"type":"train"' in l]
        meds.append(statistics.median(r["ms_per_step"] for r in recs[warm:]))
    return min(meds)
spin, sleep = best("off"), best("on")
print(f"{name:<22} {np:>5} {spin:>12.1f} {sleep:>12.1f} {100 * (sleep / spin - 1):>+7.1f}%  {loads}")
PY
}
run_layout "pp2" 2 --pp 2
run_layout "pp2 widths 2,1" 3 --pp 2 --stage-widths 2,1
run_layout "pp2 x dp2" 4 --pp 2
