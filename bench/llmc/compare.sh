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
# the first argument) at a copy of its source (train_gpt2.c and its llmc/
# headers). The script builds train_gpt2.c with llm.c's Makefile flags and
# prepares, in a scratch directory it runs llm.c from, every file its main()
# reads (bench/llmc/llmc_files.py): gpt2_124M.bin written from fivefold's own
# initial weights, and token files of the same tokens fivefold trains on.
# Then the loss curve (bench/llmc/curve.py): fivefold, PyTorch and llm.c
# from those weights, on those tokens, with llm.c's optimizer settings.
# Without a copy, the comparison with llm.c is reported as not run, with the
# reason, and the rest still runs.
#
# usage: bench/llmc/compare.sh [LLMC_DIR]
# env:   BUILD (build), LLMC_THREADS (2), LLMC_STEPS (4: timed steps of each
#        program; llm.c's first step, which also runs its validation and
#        warms its buffers, is left out), LLMC_TORCH (1; 0 skips PyTorch),
#        CC (cc, for llm.c), LLMC_CURVE (1; 0 skips the loss curve),
#        LLMC_CURVE_STEPS (LLMC_STEPS + 1)
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

# llm.c's side, only where a copy of its source is given. Everything its
# main() reads is prepared here, in a scratch directory it runs from (its
# paths are relative), from fivefold's own data: nothing is fetched.
why=""
if [ -z "$LLMC_DIR" ]; then
  why="no copy of llm.c given (set LLMC_DIR or pass its directory)"
elif [ ! -f "$LLMC_DIR/train_gpt2.c" ]; then
  why="$LLMC_DIR has no train_gpt2.c"
fi
if [ ! -x "$BUILD/tests/model_dump" ] || [ ! -x "$BUILD/fivefold" ]; then
  echo "llm.c and the loss curve: not run: $BUILD/tests/model_dump or $BUILD/fivefold is missing (build first)"
  exit 0
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-llmc-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# The tokens: the first B x T + 1 of the demo corpus's BPE shard (ids < 4096,
# inside GPT-2's 50,257): one batch, which every program trains on at every
# step (a shard of exactly B windows for fivefold, a file of one batch for
# llm.c, whose loader shuffles batches).
CORPUS=data/cache/kjv-bpe4096
if [ ! -f "$CORPUS/train.bin" ] && ! BUILD=$BUILD bash scripts/prepare-corpus.sh >/dev/null 2>&1; then
  echo "llm.c and the loss curve: not run: no corpus (scripts/prepare-corpus.sh failed)"
  exit 0
fi
"$TORCH_PY" bench/llmc/llmc_files.py --cut "$CORPUS/train.bin" $((B * T + 1)) "$WORK/tokens.bin" || exit 1
# fivefold's initial weights (tests/tools/model_dump: init.safetensors, every
# parameter by name; no optimizer step).
if ! "$BUILD/tests/model_dump" --config "$MODEL" --out "$WORK/init" --steps 0 --seed 1234 --batch 1 --seq 2 \
  >"$WORK/init.log" 2>&1; then
  tail -3 "$WORK/init.log"
  echo "llm.c and the loss curve: not run: model_dump failed on $MODEL"
  exit 0
fi
rm -f "$WORK/init/results.safetensors"

if [ -z "$why" ]; then
  mkdir -p "$WORK/llmc"
  "$TORCH_PY" bench/llmc/llmc_files.py "$WORK/init/init.safetensors" "$MODEL" "$WORK/tokens.bin" $B $T "$WORK/llmc" ||
    why="llmc_files.py could not write llm.c's files"
fi
# llm.c's Makefile, target train_gpt2 on Linux: CFLAGS -Ofast
# -Wno-unused-result -Wno-ignored-pragmas -Wno-unknown-attributes
# -march=native, with OpenMP -fopenmp -DOMP; LDLIBS -lm -lgomp.
if [ -z "$why" ] && ! ${CC:-cc} -Ofast -Wno-unused-result -Wno-ignored-pragmas -Wno-unknown-attributes -march=native \
  -fopenmp -DOMP "$LLMC_DIR/train_gpt2.c" -lm -lgomp -o "$WORK/train_gpt2" >"$WORK/build.log" 2>&1; then
  tail -5 "$WORK/build.log"
  why="train_gpt2.c did not build"
fi

llmc_log=""
if [ -n "$why" ]; then
  echo "llm.c: comparison not run: $why"
else
  # train_gpt2 trains 41 steps with validation and sampling along the way; it
  # is stopped once it has printed the steps timed here (its step 0 is the
  # warm-up, left out). Its CPU time is read from /proc at the step-0 and
  # the last timed step's lines, so its share of the shared cores shows.
  cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null; }
  (cd "$WORK/llmc" && exec env OMP_NUM_THREADS="$THREADS" OMP_WAIT_POLICY=PASSIVE stdbuf -oL "$WORK/train_gpt2") >"$WORK/llmc.log" 2>&1 &
  pid=$!
  c0="" c1=""
  while kill -0 "$pid" 2>/dev/null; do
    n=$(grep -c '^step [0-9]*: train loss' "$WORK/llmc.log")
    [ -z "$c0" ] && [ "$n" -ge 1 ] && c0=$(cpu_ticks "$pid")
    if [ "$n" -gt "$STEPS" ]; then
      c1=$(cpu_ticks "$pid")
      break
    fi
    sleep 0.2
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  grep -E '^(num_parameters|padded_vocab_size|val loss|step [0-9]+:)' "$WORK/llmc.log" | sed 's/^/  llm.c: /'
  llmc_ms=$(sed -n 's/^step \([0-9]*\): train loss .* (took \([0-9.]*\) ms)/\1 \2/p' "$WORK/llmc.log" |
    awk -v n="$STEPS" '$1 >= 1 && $1 <= n { s += $2; k++ } END { if (k) printf "%.1f", s / k }')
  if [ -z "$llmc_ms" ]; then
    tail -5 "$WORK/llmc.log"
    echo "llm.c: comparison not run: train_gpt2 printed no timed steps"
  else
    llmc_tps=$(awk -v ms="$llmc_ms" -v b=$B -v t=$T 'BEGIN { printf "%.0f", b * t / (ms / 1000) }')
    llmc_cpu=""
    if [ -n "$c0" ] && [ -n "$c1" ]; then
      llmc_cpu=$(awk -v a="$c0" -v b="$c1" -v n="$STEPS" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.1f", (b - a) / hz * 1000 / n }')
    fi
    echo "llm.c train_gpt2 (CPU, fp32, $(${CC:-cc} --version | head -1)): $llmc_ms ms/step wall${llmc_cpu:+, $llmc_cpu ms/step CPU}, $llmc_tps tokens/s"
    echo "fivefold / llm.c = $(ratio "$ours_tps" "$llmc_tps") (tokens/s, wall clock)"
    ours_cpu=$(field cpu_ms_per_step "$ours")
    if [ -n "$llmc_cpu" ] && [ -n "$ours_cpu" ]; then
      echo "fivefold / llm.c = $(ratio "$llmc_cpu" "$ours_cpu") (CPU time per step: fivefold $ours_cpu ms, llm.c $llmc_cpu ms)"
    fi
    llmc_log=$WORK/llmc.log
  fi
fi

# The loss curve of the three from the same weights on the same tokens.
if [ "${LLMC_CURVE:-1}" = 1 ]; then
  env OMP_WAIT_POLICY=PASSIVE "$TORCH_PY" bench/llmc/curve.py --fivefold "$BUILD/fivefold" \
    --init "$WORK/init/init.safetensors" --model "$MODEL" --shard "$WORK/tokens.bin" \
    --tokenizer "$CORPUS/tokenizer.json" --work "$WORK/curve" --steps "${LLMC_CURVE_STEPS:-$((STEPS + 1))}" \
    --B $B --T $T --threads "$THREADS" ${llmc_log:+--llmc-log "$llmc_log"} || echo "loss curve: failed (see above)"
else
  echo "loss curve: not run (LLMC_CURVE=0)"
fi
