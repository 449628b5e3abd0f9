#!/usr/bin/env bash
# Stage replication measured against its simulation on this machine: a
# dense model (4 blocks, hidden 256, vocabulary 512, 4 x 128 tokens per
# micro-batch, 4 micro-batches, fp32, one thread per rank) trained by
# `fivefold train` as PP2 1F1B (widths 1,1) on 2 ranks and with widths 2,1
# and 1,2 on 3 ranks (oversubscribed on 2 cores), each priced by
# `fivefold simulate --stage-widths` on a spec calibrated with as many
# ranks (`calibrate`; STAGEREP_QUICK=1: `calibrate --quick`). Prints the
# median ms/step of the steps after the warm-up beside two predictions:
# under processor sharing (the spec's "cores": a rank that waits leaves its
# core to those computing) and at the fixed share of a core per rank (the
# same spec without "cores"), and the
# load average before each run (the machine may be shared: other processes
# only add time).
# usage: bench/stagerep.sh [BUILD_DIR] [STEPS]   (prints figures, never pass/fail)
# Environment: STAGEREP_PASSES (1): each layout runs that many times and
# keeps the lowest median.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-10}
WARMUP=3
PASSES=${STAGEREP_PASSES:-1}
QUICK=()
[ "${STAGEREP_QUICK:-0}" = 1 ] && QUICK=(--quick)
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
  mpirun -np $np --oversubscribe "$FIVEFOLD" calibrate "${QUICK[@]}" --name local-$np --out spec$np.json >cal$np.log 2>&1 ||
    { tail -5 cal$np.log; exit 1; }
  # The fixed share: the same spec without its "cores" object.
  $PY -c 'import json, sys; d = json.load(open(sys.argv[1])); d.pop("cores", None); json.dump(d, open(sys.argv[2], "w"))' \
    spec$np.json spec$np-fixed.json
done
for np in 2 3; do
  $PY -c 'import json, sys; c = json.load(open(sys.argv[1])).get("cores", {})
print("%s ranks: core share %.3f of %s cores" % (sys.argv[2], c.get("share", 1), c.get("per_node", "?")))' spec$np.json $np
done
printf '%-14s %5s %11s %11s %11s %8s %9s  %s\n' configuration ranks sharing "fixed share" measured error \
  "err fixed" "pass medians (ms) (load average before each)"
for widths in 1,1 2,1 1,2; do
  np=$(( ${widths%,*} + ${widths#*,} ))
  flags=(--pp 2 --schedule 1f1b)
  [ "$widths" = 1,1 ] || flags+=(--stage-widths "$widths")
  loads=()
  for pass in $(seq 1 "$PASSES"); do
    loads+=("$(cut -d' ' -f1 /proc/loadavg)")
    mpirun -np $np --oversubscribe "$FIVEFOLD" train --config run.json --out "run-$widths.p$pass" --no-progress \
      "${flags[@]}" >"train-$widths.p$pass.log" 2>&1 || { tail -5 "train-$widths.p$pass.log"; continue 2; }
  done
  sim=(--pp 2 --schedule 1f1b --layers-per-stage 2,2)
  [ "$widths" = 1,1 ] || sim+=(--stage-widths "$widths")
  preds=()
  for spec in spec$np spec$np-fixed; do
    "$FIVEFOLD" simulate --model model.json --cluster $spec.json --gpus $np --seq $SEQ --mbs $MBS \
      --global-batch $((MBS * ACCUM)) --dtype fp32 --dp-overlap 0 --param-gather-overlap 0 "${sim[@]}" \
      >"sim-$widths-$spec.log" 2>&1 || { tail -3 "sim-$widths-$spec.log"; continue 2; }
    preds+=("$(sed -n 's/^predicted: step \([0-9.]*\) ms.*/\1/p' "sim-$widths-$spec.log" | head -1)")
  done
  $PY - "$WARMUP" "${preds[0]}" "${preds[1]}" "widths $widths" "$np" "${loads[*]}" run-$widths.p* <<'PY'
import json, os, statistics, sys
warm, pred, fixed, name, np, loads = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
meds = []
for d in sys.argv[7:]:
    recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if '"type":"train"' in l]
    meds.append(statistics.median(r["ms_per_step"] for r in recs[warm:]))
meas = min(meds)
print(f"{name:<14} {np:>5} {pred:>8.1f} ms {fixed:>8.1f} ms {meas:>8.1f} ms {100 * (pred / meas - 1):>+7.1f}% "
      f"{100 * (fixed / meas - 1):>+8.1f}%  " + " ".join(f"{m:.1f}" for m in meds) + f"  ({loads})")
PY
done
