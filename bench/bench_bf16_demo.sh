#!/usr/bin/env bash
# bf16 against fp32 on the demo model (configs/demo-moe.json) on the Bible
# with its 4096-id BPE tokenizer: the same run (seed, data order, steps) in
# fp32 and in --precision bf16, one process each; prints both validation
# losses at the end, their relative difference (the issue's mark: within
# 2%), tokens/s and MFU of each. Figures only, nothing passes or fails.
# Usage: bench/bench_bf16_demo.sh [BUILD]   (env BENCH_DEMO_STEPS, default
#        the config's 260; BENCH_DEMO_THREADS, default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${BENCH_DEMO_STEPS:-260}
THREADS=${BENCH_DEMO_THREADS:-2}
BUILD="$BUILD" bash scripts/prepare-corpus.sh >/dev/null
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-bf16-demo-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
summary() { grep '"type":"summary"' "$WORK/$1/metrics.jsonl"; }
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" <<<"$2"; }
for p in fp32 bf16; do
  OMP_WAIT_POLICY=PASSIVE "$BUILD/fivefold" train --config configs/demo-moe.json --steps "$STEPS" --threads "$THREADS" \
    --eval-interval 0 --save-interval 0 --precision "$p" --out "$WORK/$p" --no-progress >"$WORK/$p.log" 2>&1 ||
    { tail -5 "$WORK/$p.log"; exit 1; }
done
a=$(summary fp32) b=$(summary bf16)
va=$(field final_val_loss "$a") vb=$(field final_val_loss "$b")
printf 'bf16_demo steps=%s threads=%s fp32_val_loss=%s bf16_val_loss=%s relative_difference=%s fp32_tokens_per_s=%s bf16_tokens_per_s=%s fp32_mfu_pct=%s bf16_mfu_pct=%s\n' \
  "$STEPS" "$THREADS" "$va" "$vb" "$(awk -v a="$va" -v b="$vb" 'BEGIN{d=(b-a)/a; printf "%.2f%%", 100*d}')" \
  "$(field tokens_per_s "$a")" "$(field tokens_per_s "$b")" "$(field mfu_pct "$a")" "$(field mfu_pct "$b")"
