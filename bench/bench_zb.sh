#!/usr/bin/env bash
# Zero-bubble H1 against 1F1B on this machine: PP2 (2 ranks) of a dense
# model, 4 and 8 micro-batches per step, measured with `fivefold train` and
# predicted by `fivefold simulate` on a spec calibrated for as many ranks,
# side by side: under processor sharing (the spec's "cores") and at the
# fixed share of a core per rank (the spec without them; the same figure
# while every rank has a core). Prints figures, never pass/fail
# (docs/planner.md, "Pipeline orders").
#
# usage: bench/bench_zb.sh [BUILD] [STEPS]
# Environment: ZB_PASSES (2): each configuration runs that many times and
# keeps the lower median (other processes only add time); ZB_QUIET_WAIT (30)
# seconds to wait for a quiet machine before each run; ZB_QUICK=1 calibrates
# with --quick; ZB_PP (2) pipeline ranks, e.g. 3 (more ranks than the 2
# cores: oversubscribed), with ZB_LAYERS the blocks per stage given to both
# train and simulate (e.g. 2,1,1; default an even split).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-10}
WARMUP=3
FIVEFOLD=$(cd "$BUILD" && pwd)/fivefold
PASSES=${ZB_PASSES:-2}
PY=/usr/bin/python3
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_setup bench_zb
QUICK=()
[ "${ZB_QUICK:-0}" = 1 ] && QUICK=(--quick)
PP=${ZB_PP:-2}
LAYERS=()
[ -n "${ZB_LAYERS:-}" ] && LAYERS=(--layers-per-stage "$ZB_LAYERS")

cat >model.json <<'JSON'
{"model_type": "fivefold", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 768,
 "max_position_embeddings": 512, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": false}
JSON
MBS=4
SEQ=128
bench_corpus
cat >run.json <<JSON
{"model": "model.json",
 "training": {"micro_batch_size": $MBS, "seq_len": $SEQ, "steps": $STEPS,
              "lr": 0.0003, "warmup_steps": 1, "log_interval": 1, "eval_interval": 0, "eval_batches": 1,
              "threads": 1, "peak_gflops": 100},
 "data": {"train": "shards/train.bin"}}
JSON

echo "bench_zb: calibrating $PP ranks (1 thread each)"
mpirun -np "$PP" --oversubscribe "$FIVEFOLD" calibrate "${QUICK[@]}" --name local-$PP --out spec.json >cal.log 2>&1 ||
  { cat cal.log; exit 1; }
grep -E "^  peak" cal.log | sed 's/^/  /' || true
$PY -c 'import json, sys; d = json.load(open("spec.json")); d.pop("cores", None); json.dump(d, open("spec-fixed.json", "w"))'

CONFIGS=("1f1b|4" "zb-h1|4" "1f1b|8" "zb-h1|8")
QUIET_WAIT=${ZB_QUIET_WAIT:-30}
for pass in $(seq 1 "$PASSES"); do
  n=0
  for cfg in "${CONFIGS[@]}"; do
    IFS='|' read -r sched m <<<"$cfg"
    n=$((n + 1))
    out="run$n.p$pass"
    load=$(bench_wait_quiet "$QUIET_WAIT")
    stat0=$(head -1 /proc/stat)
    wall0=$(date +%s.%N)
    { TIMEFORMAT='%U %S'; time mpirun -np "$PP" --oversubscribe "$FIVEFOLD" train --config run.json --out "$out" \
        --no-progress --pp "$PP" --schedule "$sched" --grad-accum "$m" "${LAYERS[@]}" >"train$n.p$pass.log" 2>&1; } \
      2>"cpu$n.p$pass" ||
      { tail -5 "train$n.p$pass.log"; exit 1; }
    echo "$load/$(bench_others_cores "$stat0" "$(head -1 /proc/stat)" "$wall0" "$(date +%s.%N)" \
      "$(tail -1 "cpu$n.p$pass")")" >"$out/foreign_load"
  done
done

printf '\n%-8s %4s %11s %11s %11s %8s %11s %8s   %s\n' schedule mb predicted "fixed share" measured error fastest \
  error "pass medians (ms), others' load before/during each (cores)"
n=0
for cfg in "${CONFIGS[@]}"; do
  IFS='|' read -r sched m <<<"$cfg"
  n=$((n + 1))
  preds=()
  for spec in spec spec-fixed; do
    "$FIVEFOLD" simulate --model model.json --cluster $spec.json --gpus "$PP" --seq $SEQ --mbs $MBS \
      --global-batch $((MBS * m)) --dtype fp32 --pp "$PP" --schedule "$sched" --dp-overlap 0 --param-gather-overlap 0 \
      "${LAYERS[@]}" >"sim$n-$spec.log" 2>&1 || { cat "sim$n-$spec.log"; exit 1; }
    preds+=("$(sed -n 's/^predicted: step \([0-9.]*\) ms.*/\1/p' "sim$n-$spec.log" | head -1)")
  done
  line=$($PY - "$WARMUP" "${preds[0]}" "${preds[1]}" run$n.p* <<'PY'
import json, os, statistics, sys
warm, pred, fixed, dirs = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
meds, loads, fastest = [], [], []
for d in dirs:
    recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if '"type":"train"' in l]
    steady = [r["ms_per_step"] for r in recs[warm:]] or [r["ms_per_step"] for r in recs]
    meds.append(statistics.median(steady))
    fastest.append(min(steady))
    lf = os.path.join(d, "foreign_load")
    loads.append(open(lf).read().strip() if os.path.exists(lf) else "?")
meas, best = min(meds), min(fastest)
print(f"{pred:8.1f} ms {fixed:8.1f} ms {meas:8.1f} ms {100 * (pred - meas) / meas:+7.1f}% {best:8.1f} ms {100 * (pred - best) / best:+7.1f}%   "
      + " ".join(f"{x:.0f}" for x in meds) + "  (" + " ".join(loads) + ")")
PY
)
  printf '%-8s %4s %s\n' "$sched" "$m" "$line"
done
echo "(PP$PP on $PP ranks, 1 thread each${ZB_LAYERS:+, blocks $ZB_LAYERS}; dense model hidden 256, FFN 768, 4 layers, vocabulary 512;"
echo " micro-batch $MBS x $SEQ tokens; measured = the lowest over $PASSES passes of the median of steps"
echo " $((WARMUP + 1))..$STEPS; fastest = the fastest of those steps in any pass, the least disturbed by others)"
