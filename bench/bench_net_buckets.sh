#!/usr/bin/env bash
# Gradient bucket size of a vision network: LeNet-5 (configs/vision/lenet5.json,
# 61,706 parameters) trained on 2 data-parallel ranks, measured step time
# against `fivefold simulate --net`'s prediction per bucket size, and the
# size `simulate --net --search-buckets` picks.
#
# 1. Calibrates a 2-rank spec (`fivefold calibrate --quick`, one thread per
#    rank: the CPU runtime's facts and the nets kernels' rates).
# 2. For one bucket (the whole gradient), the default (a quarter), and 8,
#    32 and 64 buckets runs `fivefold train --bucket-mb` and takes the
#    median ms_per_step after the warm-up steps; before each run it waits
#    (at most BENCH_NET_BUCKETS_QUIET_WAIT s) for other processes to use
#    under a third of a core and records what they used meanwhile.
# 3. Prices each with `simulate --net --bucket-params` on the spec.
# Prints a table (figures only, never pass/fail).
#
# usage: bench/bench_net_buckets.sh [BUILD_DIR] [STEPS]    (defaults: build, 12; the first 2 are warm-up)
# env:   BENCH_NET_BUCKETS_MBS (images per micro-batch, default 64), BENCH_NET_BUCKETS_QUIET_WAIT (default 20)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-12}
WARMUP=2
FIVEFOLD=$(cd "$BUILD" && pwd)/fivefold
MBS=${BENCH_NET_BUCKETS_MBS:-64}
QUIET_WAIT=${BENCH_NET_BUCKETS_QUIET_WAIT:-20}
DATA=/usr/share/datasets/fashion-mnist
[ "$STEPS" -gt "$WARMUP" ] 2>/dev/null || { echo "bench_net_buckets: STEPS must exceed $WARMUP" >&2; exit 2; }
[ -d "$DATA" ] || { echo "bench_net_buckets: $DATA is missing (scripts/install-deps.sh)" >&2; exit 2; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_setup bench_net_buckets
PY=/usr/bin/python3
$PY - "$ROOT/configs/vision/lenet5.json" "$DATA" "$MBS" "$STEPS" >run.json <<'PYJ'
import json, sys
cfg = json.load(open(sys.argv[1]))
mbs, steps = int(sys.argv[3]), int(sys.argv[4])
cfg["data"] = {"dir": sys.argv[2], "max_train_images": 2 * mbs * steps, "max_val_images": 16, "max_test_images": 16}
cfg["training"].update({"micro_batch_size": mbs, "grad_accum_steps": 1, "steps": steps, "log_interval": 1,
                        "eval_interval": 0, "threads": 1, "warmup_steps": 1})
cfg["checkpoint"] = {"interval": 0, "keep_last": 0}
json.dump(cfg, sys.stdout)
PYJ
P=61706
echo "bench_net_buckets: $(getconf _NPROCESSORS_ONLN) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); LeNet-5, 2 ranks x $MBS images, $STEPS steps ($WARMUP warm-up), 1 thread per rank"
mpirun -np 2 --oversubscribe "$FIVEFOLD" calibrate --quick --name local-2 --out spec.json >cal.log 2>&1 ||
  { cat cal.log; exit 1; }
sim=(--net run.json --cluster spec.json --gpus 2 --mbs "$MBS" --global-batch $((2 * MBS)))
"$FIVEFOLD" simulate "${sim[@]}" --quiet --search-buckets >search.log 2>&1 || { cat search.log; exit 1; }
grep "gradient buckets" search.log | sed 's/^/  /'
rows=()
for k in 1 default 8 32 64; do
  if [ "$k" = default ]; then flags=(); params=; else
    params=$($PY -c "import math; e = math.ceil($P / $k); print(e + e % 2)")
    flags=(--bucket-mb "$($PY -c "print(($params * 4 + 2) / 1e6)")")
  fi
  load=$(bench_wait_quiet "$QUIET_WAIT")
  out="k$k"
  stat0=$(head -1 /proc/stat)
  wall0=$(date +%s.%N)
  { TIMEFORMAT='%U %S'; time mpirun -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --out "$out" \
      --no-progress "${flags[@]}" >"$out.log" 2>&1; } 2>"$out.cpu" || { tail -5 "$out.log"; continue; }
  others=$(bench_others_cores "$stat0" "$(head -1 /proc/stat)" "$wall0" "$(date +%s.%N)" "$(tail -1 "$out.cpu")")
  measured=$(bench_median_step_ms "$out" "$WARMUP")
  buckets=$(sed -n 's/.* \([0-9]*\) gradient bucket(s) of <= .*/\1/p' "$out.log" | head -1)
  simflags=()
  [ -n "$params" ] && simflags=(--bucket-params "$params")
  "$FIVEFOLD" simulate "${sim[@]}" --quiet "${simflags[@]}" >"$out.sim" 2>&1 || { tail -1 "$out.sim"; continue; }
  predicted=$(sed -n 's/.*predicted: step \([0-9.]*\) ms.*/\1/p' "$out.sim" | head -1)
  error=$($PY -c "m, p = float('$measured'), float('$predicted'); print(f'{100 * (p - m) / m:+.1f}%')")
  rows+=("${params:-quarter}|${buckets:-?}|$measured|$predicted|$error|$load/$others")
  echo "  ${params:-quarter} elements: ${buckets:-?} buckets, measured $measured ms, predicted $predicted ms ($error), others $load/$others cores"
done
printf '\n%-18s %8s %12s %13s %8s %16s\n' "bucket elements" buckets "measured ms" "predicted ms" error "others (before/during)"
for r in "${rows[@]}"; do IFS='|' read -r a b c d e f <<<"$r"; printf '%-18s %8s %12s %13s %8s %16s\n' "$a" "$b" "$c" "$d" "$e" "$f"; done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
