#!/usr/bin/env bash
# Stage replication measured against its simulation on this machine: a
# dense model (4 blocks, hidden 256, vocabulary 512, 4 x 128 tokens per
# micro-batch, 4 micro-batches, fp32, one thread per rank) trained by
# `fivefold train` as PP2 1F1B (widths 1,1) on 2 ranks and with widths 2,1
# and 1,2 on 3 ranks (oversubscribed on 2 cores), each priced by
# `fivefold simulate --stage-widths` on a spec calibrated with as many
# ranks (`calibrate --quick`). Prints the median ms/step of the steps after
# the warm-up beside the prediction, and the load average before each run
# (the machine may be shared: other processes only add time).
# usage: bench/stagerep.sh [BUILD_DIR] [STEPS]   (prints figures, never pass/fail)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-10}
WARMUP=3
FIVEFOLD=$(cd "$BUILD" && pwd)/fivefold
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
PY=/usr/bin/python3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-stagerep-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
cat >model.json <<'JSON'
{"model_type": "fivefold", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 512, "tie_word_embeddings": false}
JSON
MBS=4
SEQ=128
ACCUM=4
for i in $(seq 1 3000); do
  echo "Line $i: the quick brown fox $((i * 7919 % 1009)) jumps over the lazy dog $((i * 104729 % 997)) again."
done >text.txt
"$FIVEFOLD" tokenize --byte-level --input text.txt --out shards --val-fraction 0.01 >/dev/null
cat >run.json <<JSON
{"model": "model.json",
 "training": {"micro_batch_size": $MBS, "seq_len": $SEQ, "grad_accum_steps": $ACCUM, "steps": $STEPS,
              "lr": 0.0003, "warmup_steps": 1, "log_interval": 1, "eval_interval": 0, "threads": 1,
              "peak_gflops": 100},
 "data": {"train": "shards/train.bin"},
 "checkpoint": {"interval": 0}}
JSON
for np in 2 3; do
  mpirun -np $np --oversubscribe "$FIVEFOLD" calibrate --quick --name local-$np --out spec$np.json >cal$np.log 2>&1 ||
    { tail -5 cal$np.log; exit 1; }
done
printf '%-22s %5s %11s %11s %8s  %s\n' configuration ranks predicted measured error "load average before"
for widths in 1,1 2,1 1,2; do
  np=$(( ${widths%,*} + ${widths#*,} ))
  load=$(cut -d' ' -f1 /proc/loadavg)
  flags=(--pp 2 --schedule 1f1b)
  [ "$widths" = 1,1 ] || flags+=(--stage-widths "$widths")
  mpirun -np $np --oversubscribe "$FIVEFOLD" train --config run.json --out "run-$widths" --no-progress "${flags[@]}" \
    >"train-$widths.log" 2>&1 || { tail -5 "train-$widths.log"; continue; }
  sim=(--pp 2 --schedule 1f1b --layers-per-stage 2,2)
  [ "$widths" = 1,1 ] || sim+=(--stage-widths "$widths")
  "$FIVEFOLD" simulate --model model.json --cluster spec$np.json --gpus $np --seq $SEQ --mbs $MBS \
    --global-batch $((MBS * ACCUM)) --dtype fp32 --dp-overlap 0 --param-gather-overlap 0 "${sim[@]}" \
    >"sim-$widths.log" 2>&1 || { tail -3 "sim-$widths.log"; continue; }
  pred=$(sed -n 's/^predicted: step \([0-9.]*\) ms.*/\1/p' "sim-$widths.log" | head -1)
  $PY - "$WARMUP" "$pred" "run-$widths/metrics.jsonl" "widths $widths" "$np" "$load" <<'PY'
import json, statistics, sys
warm, pred, path, name, np, load = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
recs = [json.loads(l) for l in open(path) if '"type":"train"' in l]
meas = statistics.median(r["ms_per_step"] for r in recs[warm:])
print(f"{name:<22} {np:>5} {pred:>8.1f} ms {meas:>8.1f} ms {100 * (pred / meas - 1):>+7.1f}%  {load}")
PY
done
