#!/usr/bin/env bash
# Predicted versus measured step time on this machine.
#
# 1. Calibrates one spec per rank count the runs use (1, 2 and 4 ranks), each
#    under the runs' layout: one OpenMP thread per rank. On a 2-core machine
#    4 ranks are oversubscribed; calibrate sees that (ranks x threads >
#    cores), measures the compute rates with the ranks taking turns (a
#    dedicated core each) and writes each rank's share (peak and memory
#    bandwidth x 0.5); its collectives are measured under the same
#    oversubscription. Each spec also holds the bf16 GEMM curve and the
#    rates of the CNN kernels (convolution passes, pooling, activations).
# 2. Runs every configuration with the real runtime (`fivefold train`, under
#    mpirun for several ranks) in PASSES passes, each run started when other
#    processes use under a third of a core (waiting at most QUIET_WAIT s);
#    a pass's measurement is the median ms_per_step after the warm-up steps,
#    the configuration's the lowest over the passes (interference only adds
#    time). Each run records the CPU other processes took while it ran.
#    Two networks: a small MoE transformer (fp32 and bf16, every layout the
#    runtime has, the folded MoE layouts oversubscribed on 4 ranks) and
#    configs/vision/lenet5.json (LeNet-5 on Fashion-MNIST, one rank, data
#    parallel with and without ZeRO-1, oversubscribed DP4, bf16).
# 3. Runs the simulator for each configuration with exactly the run's
#    model, micro-batch, micro-batches, ranks, layout and dtype: for the
#    MoE `fivefold simulate --model` with sequence, TP/PP/VPP/CP/EP/ETP,
#    schedule, dispatcher, gradient buckets, the flags that describe the CPU
#    runtime (docs/planner.md: no asynchronous MPI progress, MoE replicated
#    over TP without an MoE grid; the spec's runtime facts add that bf16
#    covers only the GEMM inputs), the router imbalance the one-rank runs
#    logged and the tokens per expert of each layer their summaries record
#    (`--expert-load`); for the CNN `fivefold simulate --net` (plan/net_sim.h).
# 4. Prints configuration, predicted, measured, error, the pass medians and
#    the others' load, the mean absolute error and the largest error; then
#    the one-rank configurations priced again on a one-rank calibration
#    made after the runs (the calibration's own spread).
#
# usage: bench/plan_accuracy.sh [BUILD_DIR] [STEPS]   (defaults: build, 10; the first 3 are warm-up;
#        the CNN runs take 10 x STEPS steps: a LeNet-5 step is a few ms)
# env:   PLAN_ACC_QUICK=1 calibrates with --quick; PLAN_ACC_KEEP=DIR keeps the work directory there;
#        PLAN_ACC_PASSES=N passes (default 2); PLAN_ACC_QUIET_WAIT=S longest wait for a quiet machine (30);
#        PLAN_ACC_REUSE=1 with PLAN_ACC_KEEP reuses the specs and runs found there (re-prices only;
#        runs are numbered in the order of the selection, so reuse them with the same selection);
#        PLAN_ACC_ONLY=REGEX runs only the configurations whose name matches (grep -E; the first
#        configuration, whose router imbalance the others are priced with, always runs);
#        PLAN_ACC_SMOKE=1 a quick check of the whole pipeline on a loaded machine: --quick
#        calibration, one pass, no quiet wait, 4 steps (2 warm-up) and one configuration per
#        family (about 2 minutes; its errors mean nothing).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
SMOKE=${PLAN_ACC_SMOKE:-0}
WARMUP=3
if [ "$SMOKE" = 1 ]; then
  WARMUP=2
  : "${PLAN_ACC_PASSES:=1}" "${PLAN_ACC_QUIET_WAIT:=1}" "${PLAN_ACC_QUICK:=1}"
fi
STEPS=${2:-$([ "$SMOKE" = 1 ] && echo 4 || echo 10)}
FIVEFOLD=$(cd "$BUILD" && pwd)/fivefold
[ -x "$FIVEFOLD" ] || { echo "plan_accuracy: $FIVEFOLD not built" >&2; exit 2; }
# Checked before anything in a kept work directory is removed.
for spec in "STEPS=$STEPS" "PLAN_ACC_PASSES=${PLAN_ACC_PASSES:-2}" "PLAN_ACC_QUIET_WAIT=${PLAN_ACC_QUIET_WAIT:-30}"; do
  case ${spec#*=} in
    '' | *[!0-9]* | 0) echo "plan_accuracy: ${spec%%=*} must be a positive integer, got '${spec#*=}'" >&2; exit 2 ;;
  esac
done
[ "$STEPS" -gt "$WARMUP" ] || { echo "plan_accuracy: STEPS must exceed the $WARMUP warm-up steps, got $STEPS" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
PY=/usr/bin/python3
if [ -n "${PLAN_ACC_KEEP:-}" ]; then WORK=$PLAN_ACC_KEEP; mkdir -p "$WORK"; else
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-plan-acc-XXXXXX"); trap 'rm -rf "$WORK"' EXIT; fi
cd "$WORK"
QUICK=()
[ "${PLAN_ACC_QUICK:-0}" = 1 ] && QUICK=(--quick)

# A small MoE whose layers divide by 2 and 4 (TP over heads, PP/VPP over layers).
cat >model.json <<'JSON'
{"model_type": "fivefold", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 512,
 "max_position_embeddings": 512, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
 "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 512, "norm_topk_prob": true}
JSON
MBS=4
SEQ=128
BUCKET_MB=1 # the simulator gets the same buckets: 1 MB of fp32 gradients = 250000 parameters
for i in $(seq 1 3000); do
  echo "Line $i: the quick brown fox $((i * 7919 % 1009)) jumps over the lazy dog $((i * 104729 % 997)) again."
done >text.txt
"$FIVEFOLD" tokenize --byte-level --input text.txt --out shards --val-fraction 0.01 >/dev/null
cat >run.json <<JSON
{"model": "model.json",
 "training": {"micro_batch_size": $MBS, "seq_len": $SEQ, "grad_accum_steps": 1, "steps": $STEPS,
              "lr": 0.0003, "warmup_steps": 1, "log_interval": 1, "eval_interval": 0, "eval_batches": 1,
              "threads": 1, "peak_gflops": 100},
 "data": {"train": "shards/train.bin"}}
JSON
# The CNN: configs/vision/lenet5.json as shipped, on a part of Fashion-MNIST,
# without evaluation or checkpoints inside the measured steps.
CNN_MBS=128
CNN_STEPS=$((10 * STEPS))
CNN_WARMUP=$((10 * WARMUP))
FASHION=${FIVEFOLD_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
$PY - "$ROOT/configs/vision/lenet5.json" "$FASHION" $CNN_MBS $CNN_STEPS <<'PY' >cnn.json
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["data"] = {"dir": sys.argv[2], "max_train_images": 8192, "max_val_images": 16, "max_test_images": 16}
cfg["training"].update({"micro_batch_size": int(sys.argv[3]), "steps": int(sys.argv[4]), "warmup_steps": 1,
                        "log_interval": 1, "eval_interval": 0, "threads": 1, "peak_gflops": 100})
cfg["checkpoint"] = {"interval": 0, "keep_last": 0}
print(json.dumps(cfg))
PY

echo "plan_accuracy: calibrating (1 thread per rank)"
if [ "${PLAN_ACC_REUSE:-0}" = 1 ] && [ -s spec1.json ] && [ -s spec2.json ] && [ -s spec4.json ]; then
  echo "  (reusing the specs of $WORK)"
else
"$FIVEFOLD" calibrate "${QUICK[@]}" --devices 1 --name local-1 --out spec1.json >cal1.log 2>&1 || { cat cal1.log; exit 1; }
mpirun -np 2 --oversubscribe "$FIVEFOLD" calibrate "${QUICK[@]}" --name local-2 --out spec2.json >cal2.log 2>&1 ||
  { cat cal2.log; exit 1; }
mpirun -np 4 --oversubscribe "$FIVEFOLD" calibrate "${QUICK[@]}" --name local-4 --out spec4.json >cal4.log 2>&1 ||
  { cat cal4.log; exit 1; }
fi
grep -E "^  peak" cal1.log cal2.log cal4.log | sed 's/^/  /'

# name | ranks | accum | train flags | simulate flags | network | dtype.
# The simulate flags describe what the runtime computes: --moe-tp-replicated
# for TP without an MoE grid (MoE on the gathered sequence, every expert on
# every TP rank), the dispatcher of the folded MoE, the schedule and vpp.
# A bf16 run trains with --precision bf16 and is priced with --dtype bf16.
# The CNN trains data-parallel only (every rank a replica).
CONFIGS=(
  "1 rank, accum 1|1|1|||moe|fp32"
  "1 rank, accum 4|1|4|||moe|fp32"
  "DP2|2|2|--dp 2||moe|fp32"
  "DP2 + dist. optimizer|2|2|--dp 2 --distributed-optimizer 1|--distributed-optimizer|moe|fp32"
  "DP4 (oversubscribed)|4|1|--dp 4||moe|fp32"
  "TP2|2|2|--tp 2|--tp 2 --moe-tp-replicated|moe|fp32"
  "PP2 1F1B|2|4|--pp 2 --schedule 1f1b|--pp 2 --schedule 1f1b|moe|fp32"
  "PP2 GPipe|2|4|--pp 2 --schedule gpipe|--pp 2 --schedule gpipe|moe|fp32"
  "PP2 VPP2 interleaved|2|4|--pp 2 --vpp 2 --schedule interleaved|--pp 2 --vpp 2 --schedule interleaved|moe|fp32"
  "EP2 (alltoall)|2|2|--dp 2 --ep 2|--ep 2 --dispatcher alltoall|moe|fp32"
  "EP2 (allgather)|2|2|--dp 2 --ep 2 --dispatcher allgather|--ep 2 --dispatcher allgather|moe|fp32"
  "CP2|2|2|--cp 2|--cp 2|moe|fp32"
  "TP2 DP2 (oversubscribed)|4|1|--tp 2 --dp 2|--tp 2 --moe-tp-replicated|moe|fp32"
  "TP2 PP2 (oversubscribed)|4|4|--tp 2 --pp 2 --schedule 1f1b|--tp 2 --pp 2 --schedule 1f1b --moe-tp-replicated|moe|fp32"
  "TP2 DP2 + EP2 folded (oversub.)|4|1|--tp 2 --dp 2 --ep 2 --etp 1|--tp 2 --ep 2 --etp 1|moe|fp32"
  "TP2 DP2 + EP2 ETP2 (oversub.)|4|1|--tp 2 --dp 2 --ep 2 --etp 2|--tp 2 --ep 2 --etp 2|moe|fp32"
  "TP2 DP2 + EP4 ETP1 folded (oversub.)|4|1|--tp 2 --dp 2 --ep 4 --etp 1|--tp 2 --ep 4 --etp 1|moe|fp32"
  "DP4 + EP4 (oversubscribed)|4|1|--dp 4 --ep 4|--ep 4 --dispatcher alltoall|moe|fp32"
  "TP2 PP2 + EP2 folded (oversub.)|4|4|--tp 2 --pp 2 --ep 2 --etp 1 --schedule 1f1b|--tp 2 --pp 2 --ep 2 --etp 1 --schedule 1f1b|moe|fp32"
  "1 rank bf16|1|1|--precision bf16||moe|bf16"
  "DP2 bf16|2|2|--dp 2 --precision bf16||moe|bf16"
  "TP2 bf16|2|2|--tp 2 --precision bf16|--tp 2 --moe-tp-replicated|moe|bf16"
  "PP2 1F1B bf16|2|4|--pp 2 --schedule 1f1b --precision bf16|--pp 2 --schedule 1f1b|moe|bf16"
  "LeNet-5, 1 rank|1|1|||cnn|fp32"
  "LeNet-5, 1 rank, accum 4|1|4|||cnn|fp32"
  "LeNet-5 DP2|2|1|--dp 2||cnn|fp32"
  "LeNet-5 DP2 + dist. optimizer|2|1|--dp 2 --distributed-optimizer 1|--distributed-optimizer|cnn|fp32"
  "LeNet-5 DP4 (oversubscribed)|4|1|--dp 4||cnn|fp32"
  "LeNet-5, 1 rank bf16|1|1|--precision bf16||cnn|bf16"
)
# One configuration per family for PLAN_ACC_SMOKE.
SMOKE_ONLY='^(1 rank, accum 1|DP2|1 rank bf16|TP2 DP2 \+ EP4 ETP1 folded \(oversub\.\)|LeNet-5, 1 rank|LeNet-5 DP2)$'
ONLY=${PLAN_ACC_ONLY:-}
[ "$SMOKE" = 1 ] && [ -z "$ONLY" ] && ONLY=$SMOKE_ONLY
if [ -n "$ONLY" ]; then
  kept=("${CONFIGS[0]}")
  for cfg in "${CONFIGS[@]:1}"; do
    if grep -qE -- "$ONLY" <<<"${cfg%%|*}"; then kept+=("$cfg"); fi
  done
  CONFIGS=("${kept[@]}")
fi

# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
median_step_ms() { bench_median_step_ms "$1" "$WARMUP"; }
# Waits (at most QUIET_WAIT seconds) until other processes use under a
# third of a core, so a run starts on a quiet machine; echoes the load seen.
QUIET_WAIT=${PLAN_ACC_QUIET_WAIT:-30}
wait_quiet() { bench_wait_quiet "$QUIET_WAIT"; }

# PASSES passes over the runs. Other processes only ever add time, so a
# configuration's measurement is the lowest of its passes' medians: the same
# rule calibration applies to its repetitions, so both sides describe the
# machine without interference. Each run also records the CPU other
# processes took while it ran (busy time of the machine minus the run's own
# CPU time), printed next to the pass medians.
PASSES=${PLAN_ACC_PASSES:-2}
notes=()
for pass in $(seq 1 "$PASSES"); do
  echo "plan_accuracy: pass $pass of $PASSES"
  n=0
  for cfg in "${CONFIGS[@]}"; do
    IFS='|' read -r name np accum tflags sflags net dtype <<<"$cfg"
    n=$((n + 1))
    out="run$n.p$pass"
    conf=run.json
    extra=(--bucket-mb $BUCKET_MB)
    [ "$net" = cnn ] && conf=cnn.json
    if [ "${PLAN_ACC_REUSE:-0}" = 1 ] && [ -s "$out/metrics.jsonl" ]; then continue; fi
    load=$(wait_quiet)
    launch=()
    [ "$np" -gt 1 ] && launch=(mpirun -np "$np" --oversubscribe)
    rm -rf "$out"
    stat0=$(head -1 /proc/stat)
    wall0=$(date +%s.%N)
    rc=0
    # shellcheck disable=SC2086
    { TIMEFORMAT='%U %S'; time "${launch[@]}" "$FIVEFOLD" train --config $conf --out "$out" --no-progress \
        --grad-accum "$accum" "${extra[@]}" $tflags >"train$n.p$pass.log" 2>&1; } 2>"cpu$n.p$pass" || rc=$?
    if [ "$rc" != 0 ]; then
      # A run that failed part-way measured nothing: its steps are not kept.
      notes+=("$name, pass $pass: train failed: $(grep -m1 -E "failed|error" "train$n.p$pass.log" | cut -c1-150)")
      rm -rf "$out"
      continue
    fi
    echo "$load/$(bench_others_cores "$stat0" "$(head -1 /proc/stat)" "$wall0" "$(date +%s.%N)" \
      "$(tail -1 "cpu$n.p$pass")")" >"$out/foreign_load"
  done
done

# Predictions. The workload's router imbalance (busiest expert / mean,
# which the runtime logs as the one-rank value under every layout) comes
# from the one-rank runs: a fresh router without an auxiliary loss routes
# unevenly, and under EP the busiest rank sets the pace. The CPU runtime's
# MPI has no asynchronous progress (non-blocking reductions advance inside
# MPI calls, and the runtime reports 0% hidden), so gradient reductions and
# the ZeRO parameter gather are priced unhidden.
IMBALANCE=$($PY - "$WARMUP" run1.p*/metrics.jsonl <<'PY'
import json, statistics, sys
warm = int(sys.argv[1])
v = []
for f in sys.argv[2:]:
    recs = [json.loads(l) for l in open(f) if '"type":"train"' in l]
    v += [r["moe_imbalance"] for r in recs[warm:] if r.get("moe_imbalance", 0) >= 1]
print(f"{statistics.median(v):.3f}" if v else "1.1")
PY
)
echo "plan_accuracy: router imbalance of the one-rank runs (busiest expert / mean): $IMBALANCE"
# ...and the tokens each expert of each layer got in them (the summary's
# "expert_tokens", summed over the passes): the EP layouts are priced with
# each layer's own spread over the EP ranks, not one imbalance for all.
EXPERT_LOAD=$($PY - run1.p*/metrics.jsonl <<'PY'
import json, sys
total = None
for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        rows = r.get("expert_tokens") if r.get("type") == "summary" else None
        if rows:
            flat = [v for row in rows for v in row]
            total = flat if total is None else [a + b for a, b in zip(total, flat)]
print(",".join(str(v) for v in total) if total else "")
PY
)
LOAD_FLAGS=()
if [ -n "$EXPERT_LOAD" ]; then
  LOAD_FLAGS=(--expert-load "$EXPERT_LOAD")
  echo "plan_accuracy: tokens per expert of each MoE layer in the one-rank runs: $EXPERT_LOAD"
fi
# sim_for CFG SPEC: the simulate command line of a configuration on SPEC, in sim[].
sim_for() {
  local name np accum tflags sflags net dtype dp=1
  IFS='|' read -r name np accum tflags sflags net dtype <<<"$1"
  case " $tflags " in *" --dp 2 "*) dp=2 ;; *" --dp 4 "*) dp=4 ;; esac # every other layout has dp 1
  if [ "$net" = cnn ]; then
    sim=("$FIVEFOLD" simulate --net cnn.json --cluster "$2" --gpus "$np" --mbs $CNN_MBS
      --global-batch $((CNN_MBS * accum * dp)) --dtype "$dtype" --bucket-params $((BUCKET_MB * 250000)))
  else
    sim=("$FIVEFOLD" simulate --model model.json --cluster "$2" --gpus "$np" --seq $SEQ --mbs $MBS
      --global-batch $((MBS * accum * dp)) --dtype "$dtype" --bucket-params $((BUCKET_MB * 250000))
      --dropless-sync-us 0 --moe-imbalance "$IMBALANCE" "${LOAD_FLAGS[@]}" --dp-overlap 0 --param-gather-overlap 0)
  fi
  # shellcheck disable=SC2206
  sim+=($sflags)
}
predicted_ms() { sed -n 's/^predicted: step \([0-9.]*\) ms.*/\1/p' "$1" | head -1; }
declare -A pred
n=0
for cfg in "${CONFIGS[@]}"; do
  IFS='|' read -r name np _ <<<"$cfg"
  n=$((n + 1))
  sim_for "$cfg" "spec$np.json"
  if "${sim[@]}" >"sim$n.log" 2>&1; then
    pred[$n]=$(predicted_ms "sim$n.log")
  else
    notes+=("$name: simulate refused: $(tail -1 "sim$n.log")")
  fi
done

# Calibration repeated: a one-rank calibration made after the runs prices
# the one-rank configurations again. Where the two prices differ, the
# table's errors carry the calibration's own spread (or a machine that
# changed speed under the fastest repetitions calibration keeps).
drift=()
if [ "${PLAN_ACC_REUSE:-0}" != 1 ] || [ ! -s spec1.after.json ]; then
  "$FIVEFOLD" calibrate "${QUICK[@]}" --devices 1 --name local-1-after --out spec1.after.json >cal1.after.log 2>&1 ||
    { cat cal1.after.log; exit 1; }
fi
n=0
for cfg in "${CONFIGS[@]}"; do
  IFS='|' read -r name np _ <<<"$cfg"
  n=$((n + 1))
  [ "$np" = 1 ] && [ -n "${pred[$n]:-}" ] || continue
  sim_for "$cfg" spec1.after.json
  "${sim[@]}" >"sim$n.after.log" 2>&1 || continue
  after=$(predicted_ms "sim$n.after.log")
  drift+=("$(printf '%-32s %8.1f ms before the runs, %8.1f ms after (%+.1f%%)' "$name" "${pred[$n]}" "$after" \
    "$($PY -c "print(100 * (float('$after') - float('${pred[$n]}')) / float('${pred[$n]}'))")")")
done

printf '\n%-40s %5s %4s %11s %11s %8s   %s\n' "configuration" "ranks" "mb" "predicted" "measured" "error" \
  "pass medians (ms), others' load before/during each (cores)"
rows=()
n=0
for cfg in "${CONFIGS[@]}"; do
  IFS='|' read -r name np accum tflags sflags net dtype <<<"$cfg"
  n=$((n + 1))
  warm=$WARMUP
  [ "$net" = cnn ] && warm=$CNN_WARMUP
  line=$($PY - "$warm" "${pred[$n]:-}" run$n.p* <<'PY'
import json, os, statistics, sys
warm, pred, dirs = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
meds, loads = [], []
for d in dirs:
    f = os.path.join(d, "metrics.jsonl")
    if not os.path.exists(f):
        continue
    recs = [json.loads(l) for l in open(f) if '"type":"train"' in l]
    steady = [r["ms_per_step"] for r in recs[warm:]] or [r["ms_per_step"] for r in recs]
    meds.append(statistics.median(steady))
    lf = os.path.join(d, "foreign_load")
    loads.append(open(lf).read().strip() if os.path.exists(lf) else "?")
spread = " ".join(f"{m:.0f}" for m in meds) + "  (" + " ".join(loads) + ")"
if not meds or not pred:
    print(f"{'-' if not pred else float(pred):>8} ms {'-':>11} {'skipped':>8}   {spread if meds else ''}")
else:
    meas, p = min(meds), float(pred)
    print(f"{p:8.1f} ms {meas:8.1f} ms {100 * (p - meas) / meas:+7.1f}%   {spread}")
PY
)
  printf '%-40s %5s %4s %s\n' "$name" "$np" "$accum" "$line"
  err=$(echo "$line" | awk '{print $5}')
  case "$err" in *%) rows+=("${err%\%}") ;; esac
done
if [ "${#rows[@]}" -gt 0 ]; then
  $PY -c "import sys; e=[abs(float(x)) for x in sys.argv[1:]]; print(f'\nmean absolute error over {len(e)} configurations: {sum(e)/len(e):.1f}%, largest {max(e):.1f}% (target: at most 5% and none over 10%)')" "${rows[@]}"
fi
for note in "${notes[@]+"${notes[@]}"}"; do echo "  skipped: $note"; done
if [ "${#drift[@]}" -gt 0 ]; then
  echo "calibration repeated: the one-rank configurations priced on a calibration made before the runs and on one made after:"
  for d in "${drift[@]}"; do echo "  $d"; done
fi
echo "(4-rank runs share 2 cores: their specs carry core share 0.5; MoE micro-batch $MBS x $SEQ tokens, LeNet-5"
echo " $CNN_MBS images; measured = the lowest over $PASSES passes of the median of steps $((WARMUP + 1))..$STEPS,"
echo " $((CNN_WARMUP + 1))..$CNN_STEPS for LeNet-5)"
