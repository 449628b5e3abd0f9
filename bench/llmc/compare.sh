#!/usr/bin/env bash
# GPT-2 124M training speed side by side: fivefold (bench_train, the work of
# a training step on random tokens) in fp32 and in bf16, PyTorch on the same
# model (bench/torch_bench.py with the GPT-2 of tests/torch_ref) in fp32 and
# under torch.autocast bf16, and llm.c's CPU trainer train_gpt2.c (fp32)
# when a copy of llm.c's source is present. Same configuration
# (configs/models/gpt2-124m.json), batch 4, sequence 64 (what train_gpt2.c
# has built in), same thread count. Prints, for each side, ms per step,
# tokens/s, achieved model GFLOP/s and its share of the machine's measured
# peak of the precision it computes in (bench_machine's fp32 FMA and bf16
# vdpbf16ps loops, measured once here); fivefold's ratios to the others;
# and what 10x llm.c would take, in tokens/s and as a share of both peaks.
# Figures only: nothing passes or fails.
#
# FLOPs convention, the same for every side (model_flops_per_sequence, what
# bench_train prints as gflop_per_step): 6 FLOPs per matmul weight and token
# (N = the 12 layers' attention and MLP matrices plus the LM head once;
# embeddings, norms, biases not counted) plus attention's scores and mixing,
# 12 L T h per token without causal halving. llm.c's LM head over its
# vocabulary padded to 50,304 computes 47 rows more than counted.
#
# llm.c is never fetched or copied into this repository: point LLMC_DIR (or
# the first argument) at a copy of its source (train_gpt2.c, its llmc/
# headers and its Makefile). The script copies them into a scratch directory
# and builds train_gpt2 there with llm.c's own Makefile (`make train_gpt2`:
# -Ofast -march=native -fopenmp -DOMP with gcc; without make or a Makefile,
# the same flags by hand), prints the compile line, and prepares, in a
# scratch directory it runs llm.c from, every file its main() reads
# (bench/llmc/llmc_files.py): gpt2_124M.bin written from fivefold's own
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
#        LLMC_BF16 (1; 0 skips both bf16 runs), CC (cc, for llm.c),
#        LLMC_CURVE (1; 0 skips the loss curve), LLMC_CURVE_STEPS
#        (LLMC_STEPS + 1)
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
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
# gflops GFLOP_PER_STEP MS_PER_STEP; pct PART WHOLE
gflops() { awk -v f="$1" -v ms="$2" 'BEGIN { if (f > 0 && ms > 0) printf "%.1f", f / (ms / 1000); else print "n/a" }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.1f", 100 * a / b; else print "n/a" }'; }

echo "GPT-2 124M ($MODEL), batch $B x sequence $T, $THREADS thread(s), $STEPS timed step(s)"
load_start=$(cut -d' ' -f1 /proc/loadavg)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) core(s); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

for bin in bench_train bench_machine; do
  if [ ! -x "$BUILD/bench/$bin" ]; then
    echo "llmc: $BUILD/bench/$bin is missing; build first (make)" >&2
    exit 1
  fi
done

# The denominators: the machine's fp32 FMA and bf16 dot-product peaks on
# these threads, measured once by the project's own loops (src/kern/peak.c).
machine=$(env OMP_NUM_THREADS="$THREADS" "$BUILD/bench/bench_machine" "$THREADS" peaks) || exit 1
echo "$machine"
fp32_peak=$(field fma_peak_gflops "$(tail -1 <<<"$machine")")
bf16_peak=$(field bf16_peak_gflops "$(tail -1 <<<"$machine")")

# Rows of the summary: side, precision, ms per step, tokens/s, GFLOP/s.
ROWS=()
add_row() { ROWS+=("$1|$2|$3|$4|$(gflops "$gflop_step" "$3")"); }

# fivefold PRECISION: bench_train's line; sets line_ and tps_<precision>.
fivefold_run() {
  local line
  if ! line=$(env OMP_NUM_THREADS="$THREADS" OMP_WAIT_POLICY=PASSIVE \
    "$BUILD/bench/bench_train" "$MODEL" "$B" "$T" "$STEPS" "$THREADS" "$1" 2>&1); then
    echo "fivefold $1: not run: $line"
    return 1
  fi
  echo "$line"
  printf -v "line_$1" '%s' "$line"
  printf -v "tps_$1" '%s' "$(field tokens_per_s "$line")"
  gflop_step=$(field gflop_per_step "$line")
  add_row fivefold "$1" "$(field ms_per_step "$line")" "$(field tokens_per_s "$line")"
}
# pytorch PRECISION: torch_bench.py's line; sets torch_<precision>.
pytorch_run() {
  local line label=$1
  [ "$1" = bf16 ] && label="bf16 (autocast)"
  if ! line=$(env OMP_WAIT_POLICY=PASSIVE "$TORCH_PY" bench/torch_bench.py "$MODEL" "$B" "$T" "$STEPS" "$THREADS" "$1"); then
    echo "pytorch $label: the run failed (see above)"
    return 1
  fi
  echo "$line"
  printf -v "torch_$1" '%s' "$(field tokens_per_s "$line")"
  add_row pytorch "$label" "$(field ms_per_step "$line")" "$(field tokens_per_s "$line")"
}

gflop_step=""
line_fp32="" tps_fp32="" tps_bf16="" torch_fp32="" torch_bf16=""
fivefold_run fp32 || exit 1
# The FLOPs convention, checked against the configuration: 6 N per token
# plus attention (12 L T h), N the matmul weights with the LM head once.
"$TORCH_PY" - "$MODEL" "$T" "$B" "$gflop_step" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); T, B = int(sys.argv[2]), int(sys.argv[3])
h, L, V = c["n_embd"], c["n_layer"], c["vocab_size"]
f = c.get("n_inner") or 4 * h
N = L * (4 * h * h + 2 * h * f) + h * V
attn = 12 * L * T * h
print(f"flops: 6 N + 12 L T h per token, N = {N:,} matmul weights (LM head once, no embeddings, norms or biases): "
      f"{6 * N / 1e6:.1f} M + {attn / 1e6:.1f} M (attention) = {(6 * N + attn) / 1e6:.1f} MFLOP per token, "
      f"{(6 * N + attn) * B * T / 1e9:.2f} GFLOP per step of {B * T} tokens (bench_train: {sys.argv[4]})")
PY
want_torch=0
if [ "${LLMC_TORCH:-1}" = 1 ] && "$TORCH_PY" -c 'import torch' 2>/dev/null; then
  want_torch=1
  pytorch_run fp32
else
  echo "pytorch: not run (LLMC_TORCH=0 or no torch for $TORCH_PY)"
fi
if [ "${LLMC_BF16:-1}" = 1 ]; then
  fivefold_run bf16
  [ "$want_torch" = 1 ] && pytorch_run bf16
else
  echo "bf16: not run (LLMC_BF16=0)"
fi
ours_tps=$tps_fp32
llmc_tps="" llmc_ms=""

# The table of every side that ran, the ratios against the issue's marks
# (10x llm.c, 1.5x PyTorch in each precision), and what 10x llm.c would
# take of this machine: its tokens/s times the FLOPs of a token, as a
# share of the fp32 and the bf16 peak.
summary() {
  echo
  echo "summary: GFLOP/s = $gflop_step model GFLOP per step / time per step (wall); peaks measured on $THREADS thread(s):" \
    "fp32 FMA $fp32_peak, bf16 $bf16_peak GFLOP/s"
  printf '  %-9s %-16s %9s %9s %8s  %s\n' side precision ms/step tokens/s GFLOP/s "share of the peak of its precision"
  local row side prec ms tps gf peak
  for row in "${ROWS[@]}"; do
    IFS='|' read -r side prec ms tps gf <<<"$row"
    peak=$fp32_peak
    [ "${prec#bf16}" != "$prec" ] && peak=$bf16_peak
    printf '  %-9s %-16s %9s %9s %8s  %s%%\n' "$side" "$prec" "$ms" "$tps" "$gf" "$(pct "$gf" "$peak")"
  done
  echo "ratios (tokens/s): fivefold fp32 / pytorch fp32 = $(ratio "$tps_fp32" "$torch_fp32") (mark 1.5)," \
    "fivefold bf16 / pytorch bf16 autocast = $(ratio "$tps_bf16" "$torch_bf16") (mark 1.5)," \
    "fivefold fp32 / llm.c = $(ratio "$tps_fp32" "$llmc_tps"), fivefold bf16 / llm.c fp32 = $(ratio "$tps_bf16" "$llmc_tps")" \
    "(mark 10 for fivefold's faster precision; llm.c's CPU trainer has fp32 only)"
  if [ -n "$llmc_tps" ]; then
    local need need_gf
    need=$(awk -v ms="$llmc_ms" -v bt=$((B * T)) 'BEGIN { printf "%.0f", 10 * bt / (ms / 1000) }')
    need_gf=$(awk -v ms="$llmc_ms" -v f="$gflop_step" 'BEGIN { printf "%.1f", 10 * f / (ms / 1000) }')
    echo "10x llm.c: $need tokens/s = $need_gf GFLOP/s = $(pct "$need_gf" "$fp32_peak")% of the fp32 FMA peak," \
      "$(pct "$need_gf" "$bf16_peak")% of the bf16 peak, for the whole step (every non-GEMM operation included)"
  else
    echo "10x llm.c: not computed (llm.c did not run)"
  fi
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) core(s)"
  if awk -v l="$load" -v start="$load_start" -v n="$(getconf _NPROCESSORS_ONLN)" 'BEGIN { exit !(l > n || start > n) }'; then
    echo "WARNING: the load average exceeded the core count: other programs shared the cores, and the figures" \
      "above are not comparable (llm.c loses most); rerun on an idle machine"
  fi
}


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
  summary
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
  summary
  exit 0
fi
"$TORCH_PY" bench/llmc/llmc_files.py --cut "$CORPUS/train.bin" $((B * T + 1)) "$WORK/tokens.bin" || exit 1
# fivefold's initial weights (tests/tools/model_dump: init.safetensors, every
# parameter by name; no optimizer step).
if ! "$BUILD/tests/model_dump" --config "$MODEL" --out "$WORK/init" --steps 0 --seed 1234 --batch 1 --seq 2 \
  >"$WORK/init.log" 2>&1; then
  tail -3 "$WORK/init.log"
  echo "llm.c and the loss curve: not run: model_dump failed on $MODEL"
  summary
  exit 0
fi
rm -f "$WORK/init/results.safetensors"

if [ -z "$why" ]; then
  mkdir -p "$WORK/llmc"
  "$TORCH_PY" bench/llmc/llmc_files.py "$WORK/init/init.safetensors" "$MODEL" "$WORK/tokens.bin" $B $T "$WORK/llmc" ||
    why="llmc_files.py could not write llm.c's files"
fi
# llm.c built as its README says, by its own Makefile (`make train_gpt2`;
# on Linux with gcc: -Ofast -Wno-unused-result -Wno-ignored-pragmas
# -Wno-unknown-attributes -march=native, and -fopenmp -DOMP -lgomp where
# the compiler has OpenMP), in a scratch copy of the source so that the
# given directory is left as it is. Without make or a Makefile, those flags
# by hand. The compile line is printed: fairness can be read off it.
llmc_cc_line=""
if [ -z "$why" ]; then
  mkdir -p "$WORK/src"
  cp "$LLMC_DIR/train_gpt2.c" "$WORK/src/"
  [ -d "$LLMC_DIR/llmc" ] && cp -r "$LLMC_DIR/llmc" "$WORK/src/"
  if [ -f "$LLMC_DIR/Makefile" ] && command -v make >/dev/null; then
    cp "$LLMC_DIR/Makefile" "$WORK/src/"
    if make -C "$WORK/src" train_gpt2 CC="${CC:-cc}" >"$WORK/build.log" 2>&1; then
      llmc_cc_line="$(grep -m1 -E '(^| )train_gpt2\.c( |$)' "$WORK/build.log") (llm.c's Makefile)"
      mv "$WORK/src/train_gpt2" "$WORK/train_gpt2"
    else
      tail -5 "$WORK/build.log"
      why="make train_gpt2 failed in a copy of $LLMC_DIR"
    fi
  else
    set -- ${CC:-cc} -Ofast -Wno-unused-result -Wno-ignored-pragmas -Wno-unknown-attributes -march=native \
      -fopenmp -DOMP "$WORK/src/train_gpt2.c" -lm -lgomp -o "$WORK/train_gpt2"
    if "$@" >"$WORK/build.log" 2>&1; then
      llmc_cc_line="$* (the Makefile's flags by hand: no make or no Makefile)"
    else
      tail -5 "$WORK/build.log"
      why="train_gpt2.c did not build"
    fi
  fi
fi
if [ -n "$llmc_cc_line" ]; then
  echo "llm.c built with: $llmc_cc_line"
  if ! grep -q -- '-fopenmp' <<<"$llmc_cc_line"; then
    echo "llm.c: WARNING: built without OpenMP (its Makefile found none for ${CC:-cc}): it runs on one thread"
  fi
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
    echo "llm.c train_gpt2 (CPU, fp32, $(${CC:-cc} --version | head -1)): $llmc_ms ms/step wall${llmc_cpu:+, $llmc_cpu ms/step CPU ($(ratio "$llmc_cpu" "$llmc_ms") of $THREADS thread(s) busy)}, $llmc_tps tokens/s"
    add_row llm.c fp32 "$llmc_ms" "$llmc_tps"
    echo "fivefold / llm.c = $(ratio "$ours_tps" "$llmc_tps") (tokens/s, wall clock)"
    ours_cpu=$(field cpu_ms_per_step "$line_fp32")
    if [ -n "$llmc_cpu" ] && [ -n "$ours_cpu" ]; then
      echo "fivefold / llm.c = $(ratio "$llmc_cpu" "$ours_cpu") (CPU time per step: fivefold $ours_cpu ms, llm.c $llmc_cpu ms)"
    fi
    llmc_log=$WORK/llmc.log
  fi
fi

summary

# The loss curve of the three from the same weights on the same tokens.
if [ "${LLMC_CURVE:-1}" = 1 ]; then
  env OMP_WAIT_POLICY=PASSIVE "$TORCH_PY" bench/llmc/curve.py --fivefold "$BUILD/fivefold" \
    --init "$WORK/init/init.safetensors" --model "$MODEL" --shard "$WORK/tokens.bin" \
    --tokenizer "$CORPUS/tokenizer.json" --work "$WORK/curve" --steps "${LLMC_CURVE_STEPS:-$((STEPS + 1))}" \
    --B $B --T $T --threads "$THREADS" ${llmc_log:+--llmc-log "$llmc_log"} || echo "loss curve: failed (see above)"
else
  echo "loss curve: not run (LLMC_CURVE=0)"
fi
