#!/usr/bin/env bash
# Convolution throughput: fivefold's kernels (bench/bench_conv.c, oneDNN)
# against PyTorch's conv2d / conv_transpose2d (bench/torch_conv_bench.py)
# on the same DeblurGAN- and LeNet-like shapes and thread counts, fp32 and
# bf16, and the ratio fivefold / PyTorch of forward and backward GFLOP/s.
# Figures only.
#
# usage: bench/bench_conv.sh [BUILD_DIR]     env: BENCH_THREADS (default "1 2"),
#        BENCH_CONV_SECONDS (per figure, default 0.4)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
SECONDS_PER=${BENCH_CONV_SECONDS:-0.4}
field() { sed -n "s/.*[ ^]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
for threads in ${BENCH_THREADS:-1 2}; do
  ours=$(OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE "$BUILD/bench/bench_conv" "$SECONDS_PER")
  echo "$ours"
  no_bf16=--no-bf16
  grep -q "precision=bf16" <<<"$ours" && no_bf16=""
  theirs=$(OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 "$ROOT/bench/torch_conv_bench.py" \
    "$threads" "$SECONDS_PER" $no_bf16)
  echo "$theirs"
  while read -r line; do
    case $line in fivefold_conv*) ;; *) continue ;; esac
    shape=$(field shape "$line") prec=$(field precision "$line")
    other=$(grep "shape=$shape precision=$prec " <<<"$theirs" || true)
    [ -n "$other" ] || continue
    awk -v s="$shape" -v p="$prec" -v t="$threads" -v af="$(field fwd_gflops "$line")" \
      -v ab="$(field bwd_gflops "$line")" -v bf="$(field fwd_gflops "$other")" -v bb="$(field bwd_gflops "$other")" \
      'BEGIN { printf "ratio_conv shape=%s precision=%s threads=%s fwd_fivefold_over_pytorch=%.2fx bwd_fivefold_over_pytorch=%.2fx\n", s, p, t, af / bf, ab / bb }'
  done <<<"$ours"
done
