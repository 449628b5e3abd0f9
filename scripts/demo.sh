#!/usr/bin/env bash
# make demo: prepares the King James Bible corpus (byte-level shards), trains
# the small MoE of configs/demo-moe.json for about two minutes on two cores,
# and ends with a short summary read from the run's metrics.jsonl.
# Extra arguments go to `fivefold train` (e.g. --steps 100, --threads 1).
# Env: BUILD (default build), DEMO_CONFIG, DEMO_OUT (default runs/demo-moe).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CONFIG=${DEMO_CONFIG:-configs/demo-moe.json}
OUT=${DEMO_OUT:-runs/demo-moe}

if [ ! -x "$BUILD/fivefold" ]; then
  echo "demo: $BUILD/fivefold is missing; run 'make' first" >&2
  exit 1
fi
BUILD=$BUILD bash scripts/prepare-corpus.sh
echo

"$BUILD/fivefold" train --config "$CONFIG" --out "$OUT" "$@"

# One field of the summary record: {"type":"summary",...,"NAME":VALUE,...}
METRICS=$OUT/metrics.jsonl
summary=$(grep '"type":"summary"' "$METRICS" | tail -n 1)
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" <<<"$summary"; }
if [ -z "$summary" ]; then
  echo "demo: no summary in $METRICS (did the run stop early?)" >&2
  exit 1
fi
awk -v steps="$(field steps)" -v first_val="$(field first_val_loss)" -v val="$(field final_val_loss)" \
    -v train="$(field final_loss)" -v tps="$(field tokens_per_s)" -v mfu="$(field mfu_pct)" \
    -v peak="$(field peak_gflops)" -v ts="$(field train_seconds)" -v es="$(field eval_seconds)" \
    -v threads="$(field threads)" -v out="$OUT" 'BEGIN {
  printf "\n== demo summary ==\n"
  printf "  trained      %d steps in %.0f s (+ %.0f s of evaluation) on %d thread%s\n", steps, ts, es, threads, threads == 1 ? "" : "s"
  if (val != "null")
    printf "  val loss     %.3f -> %.3f nats per byte (%.2f bits per byte; uniform guessing is 8)\n", first_val, val, val / log(2)
  printf "  train loss   %.3f (mean of the last log interval)\n", train
  printf "  speed        %.0f tokens/s, MFU %.1f%% of %.0f GFLOP/s (model FLOPs over the peak)\n", tps, mfu, peak
  printf "  output       %s/config.json (resolved config), %s/metrics.jsonl (every log line)\n", out, out
}'
