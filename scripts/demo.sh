#!/usr/bin/env bash
# make demo: prepares the King James Bible corpus (a BPE tokenizer trained
# once and cached, scripts/prepare-corpus.sh), trains the small MoE of
# configs/demo-moe.json for about two minutes on two cores with validation
# along the way, saves a checkpoint, prints text the model generates from it
# (`fivefold sample`), and ends with a short summary read from the run's
# metrics.jsonl, with the run's curves drawn to RUN/loss.png (`fivefold
# plot`). Each demo starts a fresh run: a previous demo run in the
# output directory is set aside and removed once the new run has trained
# (restored when training fails); arguments are checked before that.
# It trains on 4 MPI ranks with MoE parallel folding (see below).
# Extra arguments go to `fivefold train` (e.g. --steps 100).
# Env: BUILD (default build), DEMO_RANKS (4, or 1 for one process),
#      DEMO_CONFIG, DEMO_OUT (default runs/demo-moe),
#      DEMO_PROMPT, DEMO_SAMPLE_TOKENS (default 200).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CONFIG=${DEMO_CONFIG:-configs/demo-moe.json}
OUT=${DEMO_OUT:-runs/demo-moe}
PROMPT=${DEMO_PROMPT:-"And God said"}
SAMPLE_TOKENS=${DEMO_SAMPLE_TOKENS:-200}

# Every argument is checked before anything is built or removed: a rejected
# value must leave the previous run as it was.
RANKS=${DEMO_RANKS:-4}
if [ "$RANKS" != 1 ] && [ "$RANKS" != 4 ]; then
  echo "demo: DEMO_RANKS must be 1 or 4 (the folded layout is TP2 x DP2 / EP4), got '$RANKS'" >&2
  exit 1
fi
case $SAMPLE_TOKENS in
  '' | *[!0-9]*)
    echo "demo: DEMO_SAMPLE_TOKENS must be a positive integer, got '$SAMPLE_TOKENS'" >&2
    exit 1
    ;;
esac
if [ ! -f "$CONFIG" ]; then
  echo "demo: DEMO_CONFIG $CONFIG does not exist" >&2
  exit 1
fi
if [ -z "$OUT" ] || [ "$OUT" = / ] || [ "$OUT" = . ]; then
  echo "demo: DEMO_OUT must name a run directory, got '$OUT'" >&2
  exit 1
fi

if [ ! -x "$BUILD/fivefold" ]; then
  echo "demo: $BUILD/fivefold is missing; run 'make' first" >&2
  exit 1
fi
# The config's tokenizer decides which BPE cache prepare-corpus builds.
vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$CONFIG" | head -n 1)
BUILD=$BUILD BPE_VOCAB=${vocab:-4096} bash scripts/prepare-corpus.sh
echo

# The previous demo run is set aside, not removed, until the new one has
# trained: arguments that `fivefold train` rejects (they go to it as they
# are) bring it back untouched.
PREVIOUS=""
if [ -d "$OUT/checkpoints" ] || [ -f "$OUT/metrics.jsonl" ]; then
  PREVIOUS="$OUT.previous.$$"
  mv "$OUT" "$PREVIOUS"
  restore_previous() {
    rm -rf "$OUT"
    mv "$PREVIOUS" "$OUT"
    echo "demo: training failed; the previous demo run in $OUT is restored" >&2
  }
  trap 'rc=$?; if [ $rc != 0 ] && [ -d "$PREVIOUS" ]; then restore_previous; fi; exit $rc' EXIT
fi
# The default demo runs folded: 4 MPI ranks, attention on a TP2 x DP2 grid
# and the MoE layers on EP4 x ETP1 over the same ranks (8 experts, 2 per
# rank), all-to-all dispatcher; micro-batches of 8 per DP rank keep the
# global batch at 16 sequences. One OpenMP thread per rank: the 4 ranks
# share the cores. DEMO_RANKS=1 trains in one process instead.
if [ "$RANKS" = 1 ]; then
  LAYOUT="1 process"
  "$BUILD/fivefold" train --config "$CONFIG" --out "$OUT" "$@"
else
  LAYOUT="4 MPI ranks, parallel folding: attention TP2 x DP2 (sequence parallel), MoE EP4 x ETP1, all-to-all dispatcher"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE \
    mpirun -np 4 --oversubscribe -x OMP_NUM_THREADS -x OMP_WAIT_POLICY \
    "$BUILD/fivefold" train --config "$CONFIG" --out "$OUT" --tp 2 --ep 4 --micro-batch-size 8 \
    --global-batch-size 16 --threads 1 "$@"
fi

if [ -n "$PREVIOUS" ]; then
  echo "demo: removing the previous demo run (set aside as $PREVIOUS)"
  rm -rf "$PREVIOUS"
fi

METRICS=$OUT/metrics.jsonl
summary=$(grep '"type":"summary"' "$METRICS" | tail -n 1)
if [ -z "$summary" ]; then
  echo "demo: no summary in $METRICS (did the run stop early?)" >&2
  exit 1
fi
CKPT=$(ls -d "$OUT"/checkpoints/step-* 2>/dev/null | sort | tail -n 1)
if [ -z "$CKPT" ]; then
  echo "demo: the run saved no checkpoint in $OUT/checkpoints" >&2
  exit 1
fi

echo
echo "== a sample from $CKPT (temperature 0.8, top-p 0.95, seed 1) =="
echo
if ! "$BUILD/fivefold" sample --checkpoint "$CKPT" --prompt "$PROMPT" --max-tokens "$SAMPLE_TOKENS" \
  --temperature 0.8 --top-p 0.95 --seed 1 2>"$OUT/sample.log"; then
  cat "$OUT/sample.log" >&2
  exit 1
fi
sample_stats=$(tail -n 1 "$OUT/sample.log" | sed 's/^sample: //; s/ |.*//')

# The run's curves as a picture (fivefold plot; no plotting program needed).
PLOT=$OUT/loss.png
if ! "$BUILD/fivefold" plot "$OUT" --out "$PLOT" >"$OUT/plot.log" 2>&1; then
  cat "$OUT/plot.log" >&2
  exit 1
fi

# Bytes of text per token over the whole corpus, to state the validation
# loss per byte as well (comparable with byte-level models).
data_dir=$(dirname "$(sed -n 's/.*"train": *"\([^"]*\)".*/\1/p' "$CONFIG" | head -n 1)")
data_dir=$(cd "$(dirname "$CONFIG")" && cd "$data_dir" && pwd)
shard_tokens() { echo $(( ($(wc -c <"$1") - 64) / 2 )); }
tokens=$(( $(shard_tokens "$data_dir/train.bin") + $(shard_tokens "$data_dir/val.bin") ))
text_bytes=$(wc -c <data/cache/kjv.txt)

# One field of the summary record: {"type":"summary",...,"NAME":VALUE,...}
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" <<<"$summary"; }
awk -v steps="$(field steps)" -v first_val="$(field first_val_loss)" -v val="$(field final_val_loss)" \
    -v train="$(field final_loss)" -v tps="$(field tokens_per_s)" -v mfu="$(field mfu_pct)" \
    -v peak="$(field peak_gflops)" -v ts="$(field train_seconds)" -v es="$(field eval_seconds)" \
    -v threads="$(field threads)" -v layout="$LAYOUT" -v out="$OUT" -v ckpt="$CKPT" -v vocab="${vocab:-4096}" \
    -v bpt="$(awk -v b="$text_bytes" -v t="$tokens" 'BEGIN { printf "%.4f", b / t }')" \
    -v sample="$sample_stats" -v plot="$PLOT" 'BEGIN {
  printf "\n== demo summary ==\n"
  printf "  trained      %d steps in %.0f s (+ %.0f s of evaluation), %d thread%s per rank\n", steps, ts, es, threads, threads == 1 ? "" : "s"
  printf "  layout       %s\n", layout
  if (val != "null")
    printf "  val loss     %.3f -> %.3f nats per token (%.2f nats = %.2f bits per byte of text at %.2f bytes per token; uniform guessing over %d tokens is %.2f)\n", first_val, val, val / bpt, val / log(2) / bpt, bpt, vocab, log(vocab)
  printf "  train loss   %.3f (mean of the last log interval)\n", train
  printf "  speed        %.0f tokens/s, MFU %.1f%% of %.0f GFLOP/s (model FLOPs over the peak)\n", tps, mfu, peak
  printf "  checkpoint   %s\n", ckpt
  printf "  output       %s/config.json (resolved config), %s/metrics.jsonl (every log line)\n", out, out
  printf "  sample       %s\n", sample
  printf "  plot         %s (losses, learning rate and throughput against steps: fivefold plot %s)\n", plot, out
  printf "  next         fivefold sample --checkpoint %s --prompt \"...\"; fivefold export --format hf --checkpoint %s --out DIR\n", out, out
}'
