#!/usr/bin/env bash
# GPT-2 124M training speed side by side: fivefold (bench_train, the work of
# a training step on random tokens), PyTorch fp32 on the same model
# (bench/torch_bench.py with the GPT-2 of tests/torch_ref), and llm.c's CPU
# trainer train_gpt2.c when a copy of llm.c's source is present. Same
# configuration (configs/models/gpt2-124m.json), batch 4, sequence 64 (what
# train_gpt2.c has built in), same thread count; prints tokens/s of each
# and fivefold's ratio to the others. Figures only: nothing passes or fails.
#
# llm.c is never fetched or copied into this repository: point LLMC_DIR (or
# the first argument) at a checkout that has train_gpt2.c and the files its
# main() reads, prepared with llm.c's own scripts (gpt2_124M.bin, the
# GPT-2 tokenizer file and the tokenized Tiny Shakespeare under dev/data/).
# Without one, the comparison with llm.c is reported as not run, with the
# reason, and the rest still runs.
#
# usage: bench/llmc/compare.sh [LLMC_DIR]
# env:   BUILD (build), LLMC_THREADS (2), LLMC_STEPS (4: timed steps of each
#        program; llm.c's first step, which also runs its validation and
#        warms its buffers, is left out), LLMC_TORCH (1; 0 skips PyTorch),
#        CC (cc, for llm.c)
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
LLMC_DIR=${1:-${LLMC_DIR:-}}
THREADS=${LLMC_THREADS:-2}
STEPS=${LLMC_STEPS:-4}
B=4
T=64
MODEL=configs/models/gpt2-124m.json
TORCH_PY=/usr/bin/python3

field() { sed -n "s/.*[ ^]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

echo "GPT-2 124M ($MODEL), batch $B x sequence $T, $THREADS thread(s), $STEPS timed step(s)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) core(s)"

if [ ! -x "$BUILD/bench/bench_train" ]; then
  echo "llmc: $BUILD/bench/bench_train is missing; build first (make)" >&2
  exit 1
fi
ours=$(env OMP_NUM_THREADS="$THREADS" OMP_WAIT_POLICY=PASSIVE \
  "$BUILD/bench/bench_train" "$MODEL" "$B" "$T" "$STEPS" "$THREADS" fp32) || exit 1
echo "$ours"
ours_tps=$(field tokens_per_s "$ours")
echo "fivefold fp32: $ours_tps tokens/s"

if [ "${LLMC_TORCH:-1}" = 1 ] && "$TORCH_PY" -c 'import torch' 2>/dev/null; then
  theirs=$(env OMP_WAIT_POLICY=PASSIVE "$TORCH_PY" bench/torch_bench.py "$MODEL" "$B" "$T" "$STEPS" "$THREADS" fp32) ||
    theirs=""
  if [ -n "$theirs" ]; then
    echo "$theirs"
    torch_tps=$(field tokens_per_s "$theirs")
    echo "pytorch fp32: $torch_tps tokens/s; fivefold / pytorch = $(ratio "$ours_tps" "$torch_tps")"
  else
    echo "pytorch fp32: the run failed (see above)"
  fi
else
  echo "pytorch fp32: not run (LLMC_TORCH=0 or no torch for $TORCH_PY)"
fi

# llm.c's side, only where a prepared copy is present.
why=""
if [ -z "$LLMC_DIR" ]; then
  why="no copy of llm.c given (set LLMC_DIR or pass its directory)"
elif [ ! -f "$LLMC_DIR/train_gpt2.c" ]; then
  why="$LLMC_DIR has no train_gpt2.c"
elif [ ! -f "$LLMC_DIR/gpt2_124M.bin" ]; then
  why="$LLMC_DIR has no gpt2_124M.bin (llm.c's train_gpt2.py writes it)"
elif ! compgen -G "$LLMC_DIR/dev/data/tinyshakespeare/*train*.bin" >/dev/null &&
  ! compgen -G "$LLMC_DIR/data/*train*.bin" >/dev/null; then
  why="$LLMC_DIR has no tokenized Tiny Shakespeare (llm.c's dev/data/tinyshakespeare.py writes it)"
fi
if [ -n "$why" ]; then
  echo "llm.c: comparison not run: $why"
  exit 0
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-llmc-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# llm.c's own build line for its CPU trainer (its Makefile's flags).
if ! ${CC:-cc} -O3 -Ofast -march=native -fopenmp -Wno-unused-result -o "$WORK/train_gpt2" "$LLMC_DIR/train_gpt2.c" \
  -lm >"$WORK/build.log" 2>&1; then
  tail -5 "$WORK/build.log"
  echo "llm.c: comparison not run: train_gpt2.c did not build"
  exit 0
fi
# train_gpt2 trains 40 steps with sampling along the way; it is stopped
# once it has printed the steps timed here (its step 0 is the warm-up).
(cd "$LLMC_DIR" && exec env OMP_NUM_THREADS="$THREADS" "$WORK/train_gpt2") >"$WORK/llmc.log" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null && [ "$(grep -c '^step [0-9]*: train loss' "$WORK/llmc.log")" -le "$STEPS" ]; do
  sleep 1
done
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
llmc_ms=$(sed -n 's/^step \([0-9]*\): train loss .* (took \([0-9.]*\) ms)/\1 \2/p' "$WORK/llmc.log" |
  awk -v n="$STEPS" '$1 >= 1 && $1 <= n { s += $2; k++ } END { if (k) printf "%.1f", s / k }')
if [ -z "$llmc_ms" ]; then
  tail -5 "$WORK/llmc.log"
  echo "llm.c: comparison not run: train_gpt2 printed no timed steps"
  exit 0
fi
llmc_tps=$(awk -v ms="$llmc_ms" -v b=$B -v t=$T 'BEGIN { printf "%.0f", b * t / (ms / 1000) }')
echo "llm.c train_gpt2 (CPU, fp32): $llmc_ms ms/step, $llmc_tps tokens/s; fivefold / llm.c = $(ratio "$ours_tps" "$llmc_tps")"
