#!/usr/bin/env bash
# Gradient bucket size: measured step time against the simulator's
# prediction, per bucket size, for DP2 and DP4 (oversubscribed on a 2-core
# machine) of the reference MoE model (configs/models/ref-moe.json: 8
# layers, hidden 512, 8 experts top-2, 113M parameters, a 450 MB fp32
# gradient per rank), and the size the simulator-driven search picks.
#
# 1. Calibrates a spec per rank count (`fivefold calibrate`, one thread
#    per rank; BENCH_BUCKETS_QUICK=1: `calibrate --quick`; it carries the
#    CPU runtime's facts: no asynchronous progress, fp32).
# 2. For each layout and bucket size runs `fivefold train --bucket-mb MB`
#    (the runtime's default reduction mode, which the banner states) and
#    takes the median ms_per_step after the warm-up steps, the lowest over
#    PASSES interleaved passes; before each run
#    it waits (at most BENCH_BUCKETS_QUIET_WAIT s) for other processes to
#    use under a third of a core and records what they used meanwhile.
# 3. Prices the same run with `fivefold simulate --bucket-params` on the
#    spec, and runs `simulate --search-buckets` for the size it picks,
#    which it then measures and prices like the others.
# Prints a table (figures only, never pass/fail).
#
# usage: bench/bench_buckets.sh [BUILD_DIR] [STEPS]    (defaults: build, 6; the first 2 are warm-up)
# env:   BENCH_BUCKETS_MB (sizes, default "4 16 64 128 512"; 512 is one bucket),
#        BENCH_BUCKETS_PASSES (passes over the sizes, default 1; a size's figure is its lowest pass median),
#        BENCH_BUCKETS_NP (layouts, default "2 4"),
#        BENCH_BUCKETS_BATCH (micro-batch, default 2), BENCH_BUCKETS_SEQ (default 256),
#        BENCH_BUCKETS_QUIET_WAIT (default 30), BENCH_BUCKETS_QUICK (0; 1: quick calibration)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-6}
WARMUP=2
FIVEFOLD=$(cd "$BUILD" && pwd)/fivefold
SIZES=${BENCH_BUCKETS_MB:-4 16 64 128 512}
B=${BENCH_BUCKETS_BATCH:-2}
T=${BENCH_BUCKETS_SEQ:-256}
QUIET_WAIT=${BENCH_BUCKETS_QUIET_WAIT:-30}
PASSES=${BENCH_BUCKETS_PASSES:-1}
NPS=${BENCH_BUCKETS_NP:-2 4}
QUICK=()
[ "${BENCH_BUCKETS_QUICK:-0}" = 1 ] && QUICK=(--quick)
case $PASSES in '' | *[!0-9]* | 0) echo "bench_buckets: BENCH_BUCKETS_PASSES must be a positive integer, got '$PASSES'" >&2; exit 2 ;; esac
[ "$STEPS" -gt "$WARMUP" ] 2>/dev/null || { echo "bench_buckets: STEPS must exceed $WARMUP, got '$STEPS'" >&2; exit 2; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_setup bench_buckets
bench_corpus
ref_moe_run_json run.json "$B" "$T" "$STEPS" 1
PY=/usr/bin/python3
MODEL=$ROOT/configs/models/ref-moe.json

predicted_ms() {
  sed -n 's/.*predicted: step \([0-9.]*\) ms.*/\1/p' "$1" | head -1
}

echo "bench_buckets: $(getconf _NPROCESSORS_ONLN) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); reference MoE, micro-batch $B x $T tokens, $STEPS steps ($WARMUP warm-up), 1 thread per rank"
rows=()
for np in $NPS; do
  mpirun -np "$np" --oversubscribe "$FIVEFOLD" calibrate "${QUICK[@]}" --name "local-$np" --out "spec$np.json" \
    >"cal$np.log" 2>&1 || { cat "cal$np.log"; exit 1; }
  grep -E "^  (peak|runtime)" "cal$np.log" | sed "s/^/  [$np ranks] /"
  sim=(--model "$MODEL" --cluster "spec$np.json" --gpus "$np" --seq "$T" --global-batch $((B * np)) --mbs "$B")
  "$FIVEFOLD" simulate "${sim[@]}" --quiet --search-buckets >"search$np.log" 2>&1 || { cat "search$np.log"; exit 1; }
  picked=$(sed -n 's/.*chosen \([0-9.e+]*\) MB.*/\1/p' "search$np.log" | head -1)
  # The search's pick is measured too, after the fixed sizes.
  measure=$SIZES
  case " $SIZES " in *" $picked "*) ;; *) [ -n "$picked" ] && measure="$SIZES $picked" ;; esac
  # PASSES passes over the sizes, interleaved so that slow drift of the
  # machine falls on every size alike; a size's measurement is the lowest of
  # its pass medians (other processes only add time), as in plan_accuracy.sh.
  declare -A best=() medians=() loads=()
  for pass in $(seq 1 "$PASSES"); do
    for mb in $measure; do
      load=$(bench_wait_quiet "$QUIET_WAIT")
      out="dp$np-$mb.p$pass"
      stat0=$(head -1 /proc/stat)
      wall0=$(date +%s.%N)
      { TIMEFORMAT='%U %S'; time mpirun -np "$np" --oversubscribe "$FIVEFOLD" train --config run.json --out "$out" \
          --no-progress --dp "$np" --bucket-mb "$mb" >"$out.log" 2>&1; } 2>"$out.cpu" ||
        { tail -5 "$out.log"; continue; }
      others=$(bench_others_cores "$stat0" "$(head -1 /proc/stat)" "$wall0" "$(date +%s.%N)" "$(tail -1 "$out.cpu")")
      m=$(bench_median_step_ms "$out" "$WARMUP")
      medians[$mb]="${medians[$mb]:-}${medians[$mb]:+ }$m"
      loads[$mb]="${loads[$mb]:-}${loads[$mb]:+ }$load/$others"
      if [ -z "${best[$mb]:-}" ] || $PY -c "import sys; sys.exit(0 if float('$m') < float('${best[$mb]}') else 1)"; then
        best[$mb]=$m
        cp "$out.log" "dp$np-$mb.log"
      fi
      echo "  DP$np, $mb MB, pass $pass of $PASSES: measured $m ms, others $load/$others cores"
    done
  done
  for mb in $measure; do
    label=$mb
    [ "$mb" = "$picked" ] && label="$mb (pick)"
    out="dp$np-$mb"
    if [ -z "${best[$mb]:-}" ]; then rows+=("DP$np|$label|-|-|-|train failed||"); continue; fi
    measured=${best[$mb]}
    buckets=$(sed -n 's/.* \([0-9]*\) gradient bucket(s) of <= .*/\1/p' "$out.log" | head -1)
    mode=$(grep -o 'blocking where the program reduces\|overlapped with backward' "$out.log" | head -1)
    params=$($PY -c "print(max(1, round(float('$mb') * 250000)))")
    "$FIVEFOLD" simulate "${sim[@]}" --quiet --bucket-params "$params" >"$out.sim" 2>&1 ||
      { tail -1 "$out.sim"; rows+=("DP$np|$label|${buckets:-?}|$measured|-|simulate failed||"); continue; }
    predicted=$(predicted_ms "$out.sim")
    error=$($PY -c "m, p = float('$measured'), float('$predicted'); print(f'{100 * (p - m) / m:+.1f}%')")
    rows+=("DP$np|$label|${buckets:-?}|$measured|$predicted|$error|${loads[$mb]}|$mode; pass medians ${medians[$mb]}")
    echo "  DP$np, $label MB: ${buckets:-?} buckets, measured $measured ms (passes: ${medians[$mb]}), predicted $predicted ms ($error)"
  done
  unset best medians loads
  rows+=("DP$np|search: ${picked:-?} MB|$(sed -n 's/.*buckets per stage: \(.*\)/\1/p' "search$np.log")| | | | |")
  grep -E "gradient buckets" "search$np.log" | sed "s/^/  [$np ranks] /"
done

printf '\n%-5s %-16s %8s %12s %13s %8s %12s  %s\n' layout "bucket MB" buckets "measured ms" "predicted ms" error \
  "others" "reduction"
for r in "${rows[@]}"; do
  IFS='|' read -r lay mb n meas pred err load mode <<<"$r"
  printf '%-5s %-16s %8s %12s %13s %8s %12s  %s\n' "$lay" "$mb" "$n" "$meas" "$pred" "$err" "$load" "$mode"
done
echo "measured: median ms_per_step of steps $((WARMUP + 1))..$STEPS; predicted: fivefold simulate on the calibrated"
echo "spec with the same bucket size; others: cores other processes used before / during the run (of $(getconf _NPROCESSORS_ONLN))"
