#!/usr/bin/env bash
# Activation recomputation against none on a small model: the
# reference dense model (configs/models/ref-dense.json: hidden 512, 8
# blocks, SwiGLU 2048, vocab 4096) at micro-batch B x sequence T on one
# process, the same run (seed, data order) with --recompute none, full
# uniform 1, full uniform 2, full block 4, and selective layernorm, mlp and
# layernorm,mlp. Prints per setting the median
# step time after the first step, the activation memory the model holds
# (its banner: every slot's arena and the shared scratch, allocated once,
# so also its peak), the process's peak resident memory (/usr/bin/time
# maxrss), and the final loss (identical in all: recomputation is
# bit-identical). The load average before and after is printed with the
# figures. Figures only, nothing passes or fails.
# Usage: bench/bench_recompute.sh [BUILD]   (env BENCH_RC_BATCH 8,
#        BENCH_RC_SEQ 256, BENCH_RC_STEPS 4, BENCH_RC_THREADS 2)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
FIVEFOLD=$(cd "$BUILD" && pwd)/fivefold
B=${BENCH_RC_BATCH:-8}
T=${BENCH_RC_SEQ:-256}
STEPS=${BENCH_RC_STEPS:-4}
THREADS=${BENCH_RC_THREADS:-2}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_setup bench_recompute
export OMP_NUM_THREADS=$THREADS
bench_corpus
cat >run.json <<JSON
{"model": "$ROOT/configs/models/ref-dense.json",
 "training": {"micro_batch_size": $B, "seq_len": $T, "grad_accum_steps": 1, "steps": $STEPS,
              "lr": 0.0003, "warmup_steps": 1, "log_interval": 1, "eval_interval": 0, "eval_batches": 1,
              "threads": $THREADS, "peak_gflops": 100},
 "data": {"train": "shards/train.bin"}}
JSON
echo "bench_recompute model=ref-dense micro_batch=$B seq=$T steps=$STEPS threads=$THREADS load_before=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
printf '%-22s %12s %16s %14s %12s\n' setting ms_per_step activations_MiB peak_rss_MiB final_loss
for setting in "none" "full uniform 1" "full uniform 2" "full block 4" "selective layernorm" "selective mlp" \
  "selective layernorm,mlp"; do
  read -r rc method num <<<"$setting"
  name=${setting// /-}
  flags=(--recompute "$rc")
  [ "$rc" = full ] && flags+=(--recompute-method "$method" --recompute-num-layers "$num")
  [ "$rc" = selective ] && flags+=(--recompute-modules "$method")
  /usr/bin/time -f '%M' -o "$name.rss" "$FIVEFOLD" train --config run.json --out "$name" --no-progress \
    --save-interval 0 "${flags[@]}" >"$name.log" 2>&1 || { tail -5 "$name.log"; exit 1; }
  act=$(sed -n 's/.*memory   activations \([0-9.]*\) MiB.*/\1/p' "$name.log" | head -1)
  rss=$(awk '{printf "%.1f", $1 / 1024}' "$name.rss")
  loss=$(grep '"type":"summary"' "$name/metrics.jsonl" | sed -n 's/.*"final_loss":\([^,}]*\).*/\1/p')
  printf '%-22s %12s %16s %14s %12s\n' "$setting" "$(bench_median_step_ms "$name" 1)" "$act" "$rss" "$loss"
done
echo "load_after=\"$(cut -d' ' -f1-3 /proc/loadavg)\" cores=$(nproc)"
