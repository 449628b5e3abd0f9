#!/usr/bin/env bash
# The upcycling experiment (arXiv 2410.07524), reproduced small on two cores:
#  1. trains the small dense model of configs/upcycling/dense.json from scratch
#     on the byte-level King James Bible (PRETRAIN_STEPS steps);
#  2. from its final checkpoint, continues for the same number of tokens
#     (CONTINUE_STEPS steps, same data order, the same fresh schedule: warm-up
#     to CONTINUE_LR, cosine down to the pretraining's min_lr) as
#       dense      the dense model itself (upcycle --dense-control: same fresh
#                  start -- step 0, zero AdamW moments -- as the MoE runs)
#       moe-stk    8 experts, top-2, softmax_then_topk          (E8 G1 T2)
#       moe-tks    8 experts, top-2, topk_then_softmax          (E8 G1 T2)
#       moe-fine   16 experts of half the FFN, top-4, granularity 2,
#                  softmax_then_topk: the same total and active parameters
#                  as moe-stk, cut finer                        (E8 G2 T4)
#  3. prints the validation-loss curves side by side and the final losses
#     (report.sh), and plots them with gnuplot (plot.gp) to OUT/upcycling.png.
# Takes about 10-15 minutes on two otherwise idle cores. A finished
# pretraining is reused when run again (delete OUT/pretrain to redo it).
#
# Usage: bench/upcycling/run.sh
# Env: BUILD (default build), FIVEFOLD (default $BUILD/fivefold),
#      OUT (default runs/upcycling), THREADS (default 2),
#      PRETRAIN_STEPS (default 600), CONTINUE_STEPS (default 300),
#      CONTINUE_LR (default 0.001, a third of the pretraining peak: re-warming
#      to the full peak costs most of a short continuation in recovery),
#      EVAL_INTERVAL (default 25, for the continuations),
#      ROUTER_INIT_STD (default: upcycle's default).
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=bench/upcycling
BUILD=${BUILD:-build}
FIVEFOLD=${FIVEFOLD:-$BUILD/fivefold}
OUT=${OUT:-runs/upcycling}
THREADS=${THREADS:-2}
PRETRAIN_STEPS=${PRETRAIN_STEPS:-600}
CONTINUE_STEPS=${CONTINUE_STEPS:-300}
CONTINUE_LR=${CONTINUE_LR:-0.001}
EVAL_INTERVAL=${EVAL_INTERVAL:-25}
CONFIG=configs/upcycling/dense.json
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

# Every value is checked before anything under OUT is removed.
for var in THREADS PRETRAIN_STEPS CONTINUE_STEPS EVAL_INTERVAL; do
  case ${!var} in
    '' | *[!0-9]* | 0)
      echo "upcycling: $var must be a positive integer, got '${!var}'" >&2
      exit 1
      ;;
  esac
done
case $CONTINUE_LR in
  '' | *[!0-9.eE+-]*)
    echo "upcycling: CONTINUE_LR must be a number, got '$CONTINUE_LR'" >&2
    exit 1
    ;;
esac
if [ -z "$OUT" ] || [ "$OUT" = / ] || [ "$OUT" = . ]; then
  echo "upcycling: OUT must name a directory for the runs, got '$OUT'" >&2
  exit 1
fi
if [ ! -x "$FIVEFOLD" ]; then
  echo "upcycling: $FIVEFOLD is missing; run 'make' first (or set FIVEFOLD)" >&2
  exit 1
fi
if ! "$FIVEFOLD" upcycle --help >/dev/null 2>&1; then
  echo "upcycling: $FIVEFOLD has no 'upcycle' command" >&2
  exit 1
fi
BUILD=$BUILD bash scripts/prepare-corpus.sh
for f in data/cache/kjv-bytes/train.bin data/cache/kjv-bytes/val.bin; do
  if [ ! -s "$f" ]; then
    echo "upcycling: $f is missing (configs/upcycling/dense.json trains on the byte-level shards)" >&2
    exit 1
  fi
done
mkdir -p "$OUT"
started=$(date +%s)
train_flags=(--threads "$THREADS" --no-progress)

# 1. The dense model.
final=$(printf '%s/pretrain/checkpoints/step-%08d' "$OUT" "$PRETRAIN_STEPS")
if [ -f "$final/state.json" ]; then
  echo "== pretraining: reusing $final"
else
  rm -rf "$OUT/pretrain"
  echo "== pretraining the dense model: $PRETRAIN_STEPS steps (log: $OUT/pretrain.log)"
  t0=$(date +%s)
  "$FIVEFOLD" train --config "$CONFIG" --out "$OUT/pretrain" --steps "$PRETRAIN_STEPS" "${train_flags[@]}" \
    >"$OUT/pretrain.log" 2>&1 || { tail -n 20 "$OUT/pretrain.log" >&2; exit 1; }
  echo "   done in $(( $(date +%s) - t0 )) s: $(grep '^done:' "$OUT/pretrain.log" | sed 's/.*| val loss/val loss/; s/ |.*//')"
fi

# 2. The continuations: one upcycle (or dense control) each, then
#    `fivefold train --resume` from the directory it wrote.
router=()
if [ -n "${ROUTER_INIT_STD:-}" ]; then router=(--router-init-std "$ROUTER_INIT_STD"); fi
declare -A VARIANT=(
  [dense]="--dense-control"
  [moe-stk]="--experts 8 --topk 2 --router-order softmax_then_topk"
  [moe-tks]="--experts 8 --topk 2 --router-order topk_then_softmax"
  [moe-fine]="--experts 16 --topk 4 --granularity 2 --router-order softmax_then_topk"
)
for name in dense moe-stk moe-tks moe-fine; do
  dir=$OUT/$name
  rm -rf "$dir"
  read -r -a opts <<<"${VARIANT[$name]}"
  if [ "$name" != dense ]; then opts+=("${router[@]}"); fi
  echo "== $name: upcycle ${opts[*]}; $CONTINUE_STEPS steps (log: $dir/train.log)"
  "$FIVEFOLD" upcycle --checkpoint "$final" --out "$dir" "${opts[@]}" >"$OUT/$name.upcycle.log" 2>&1 ||
    { cat "$OUT/$name.upcycle.log" >&2; exit 1; }
  t0=$(date +%s)
  "$FIVEFOLD" train --config "$dir/run.json" --resume --steps "$CONTINUE_STEPS" --lr "$CONTINUE_LR" \
    --eval-interval "$EVAL_INTERVAL" "${train_flags[@]}" >"$dir/train.log" 2>&1 || { tail -n 20 "$dir/train.log" >&2; exit 1; }
  echo "   done in $(( $(date +%s) - t0 )) s: $(grep '^done:' "$dir/train.log" | sed 's/.*| val loss/val loss/; s/ |.*//')"
done

# 3. Curves, table and plot.
bash "$HERE/report.sh" "$OUT"
echo "upcycling: whole experiment took $(( $(date +%s) - started )) s"
