#!/usr/bin/env bash
# Gradient bucket size: measured step time against the simulator's
# prediction, per bucket size, for DP2 and DP4 (oversubscribed on a 2-core
# machine) of the reference MoE model (configs/models/ref-moe.json: 8
# layers, hidden 512, 8 experts top-2, 113M parameters, a 450 MB fp32
# gradient per rank), and the size the simulator-driven search picks.
#
# 1. Calibrates a spec per rank count (`fivefold calibrate --quick`, one
#    thread per rank; it carries the CPU runtime's facts: no asynchronous
#    progress, fp32).
# 2. For each layout and bucket size runs `fivefold train --bucket-mb MB`
#    (the runtime's default reduction mode, which the banner states) and
#    takes the median ms_per_step after the warm-up steps; before each run
#    it waits (at most BENCH_BUCKETS_QUIET_WAIT s) for other processes to
#    use under a third of a core and records what they used meanwhile.
# 3. Prices the same run with `fivefold simulate --bucket-params` on the
#    spec, and runs `simulate --search-buckets` for the size it picks.
# Prints a table (figures only, never pass/fail).
#
# usage: bench/bench_buckets.sh [BUILD_DIR] [STEPS]    (defaults: build, 6; the first 2 are warm-up)
# env:   BENCH_BUCKETS_MB (sizes, default "4 16 64 128 512"; 512 is one bucket),
#        BENCH_BUCKETS_BATCH (micro-batch, default 2), BENCH_BUCKETS_SEQ (default 256),
#        BENCH_BUCKETS_QUIET_WAIT (default 30)
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
[ "$STEPS" -gt "$WARMUP" ] 2>/dev/null || { echo "bench_buckets: STEPS must exceed $WARMUP, got '$STEPS'" >&2; exit 2; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_setup bench_buckets
bench_corpus
ref_moe_run_json run.json "$B" "$T" "$STEPS" 1
PY=/usr/bin/python3
MODEL=$ROOT/configs/models/ref-moe.json

# Busy cores of the whole machine over one second (/proc/stat).
busy_cores() {
  $PY - <<'PYEOF'
import os, time
def snap():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f), f[3] + f[4]
t0, i0 = snap(); time.sleep(1.0); t1, i1 = snap()
print(f"{(1 - (i1 - i0) / max(1, t1 - t0)) * os.cpu_count():.2f}")
PYEOF
}
wait_quiet() {
  local waited=0 load
  load=$(busy_cores)
  while $PY -c "import sys; sys.exit(0 if float('$load') > 0.33 else 1)" && [ "$waited" -lt "$QUIET_WAIT" ]; do
    sleep 2
    waited=$((waited + 3))
    load=$(busy_cores)
  done
  echo "$load"
}
median_step_ms() {
  $PY - "$1/metrics.jsonl" "$WARMUP" <<'PYEOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"type":"train"' in l]
steady = [r["ms_per_step"] for r in recs[int(sys.argv[2]):]] or [r["ms_per_step"] for r in recs]
print(f"{statistics.median(steady):.1f}")
PYEOF
}
predicted_ms() {
  sed -n 's/.*predicted: step \([0-9.]*\) ms.*/\1/p' "$1" | head -1
}

echo "bench_buckets: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); reference MoE, micro-batch $B x $T tokens, $STEPS steps ($WARMUP warm-up), 1 thread per rank"
rows=()
for np in 2 4; do
  mpirun -np "$np" --oversubscribe "$FIVEFOLD" calibrate --quick --name "local-$np" --out "spec$np.json" \
    >"cal$np.log" 2>&1 || { cat "cal$np.log"; exit 1; }
  grep -E "^  (peak|runtime)" "cal$np.log" | sed "s/^/  [$np ranks] /"
  sim=(--model "$MODEL" --cluster "spec$np.json" --gpus "$np" --seq "$T" --global-batch $((B * np)) --mbs "$B")
  "$FIVEFOLD" simulate "${sim[@]}" --quiet --search-buckets >"search$np.log" 2>&1 || { cat "search$np.log"; exit 1; }
  picked=$(sed -n 's/.*chosen \([0-9.e+]*\) MB.*/\1/p' "search$np.log" | head -1)
  for mb in $SIZES; do
    load=$(wait_quiet)
    out="dp$np-$mb"
    stat0=$(head -1 /proc/stat)
    wall0=$(date +%s.%N)
    { TIMEFORMAT='%U %S'; time mpirun -np "$np" --oversubscribe "$FIVEFOLD" train --config run.json --out "$out" \
        --no-progress --dp "$np" --bucket-mb "$mb" >"$out.log" 2>&1; } 2>"$out.cpu" ||
      { tail -5 "$out.log"; rows+=("DP$np|$mb|-|-|-|train failed|"); continue; }
    others=$($PY - "$stat0" "$(head -1 /proc/stat)" "$wall0" "$(date +%s.%N)" "$(tail -1 "$out.cpu")" <<'PYEOF'
import os, sys
s0, s1 = ([int(x) for x in a.split()[1:]] for a in sys.argv[1:3])
busy = (sum(s1) - s1[3] - s1[4] - sum(s0) + s0[3] + s0[4]) / os.sysconf("SC_CLK_TCK")
wall = float(sys.argv[4]) - float(sys.argv[3])
print(f"{max(0.0, busy - sum(float(x) for x in sys.argv[5].split())) / wall:.2f}")
PYEOF
)
    measured=$(median_step_ms "$out")
    buckets=$(sed -n 's/.* \([0-9]*\) gradient bucket(s) of <= .*/\1/p' "$out.log" | head -1)
    mode=$(grep -o 'blocking where the program reduces\|overlapped with backward' "$out.log" | head -1)
    params=$($PY -c "print(max(1, round(float('$mb') * 250000)))")
    "$FIVEFOLD" simulate "${sim[@]}" --quiet --bucket-params "$params" >"$out.sim" 2>&1 ||
      { cat "$out.sim"; exit 1; }
    predicted=$(predicted_ms "$out.sim")
    error=$($PY -c "m, p = float('$measured'), float('$predicted'); print(f'{100 * (p - m) / m:+.1f}%')")
    rows+=("DP$np|$mb|${buckets:-?}|$measured|$predicted|$error|$load/$others|$mode")
  done
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
echo "spec with the same bucket size; others: cores other processes used before / during the run (of $(nproc))"
