#!/usr/bin/env bash
# Tropical kernel throughput: fivefold's kernels (bench/bench_tropical.c,
# with the measured add+max peak) against the PyTorch layers written as
# public implementations do (bench/torch_tropical_bench.py: broadcast +
# amax, unfold for the convolution) on the same shapes and thread counts,
# and the ratio fivefold / PyTorch of forward and forward+backward G
# tropical multiply-adds/s. Figures only.
#
# usage: bench/bench_tropical.sh [BUILD_DIR]   env: BENCH_THREADS (default "1 2"),
#        BENCH_TROPICAL_SECONDS (per figure, default 0.5)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
SECONDS_PER=${BENCH_TROPICAL_SECONDS:-0.5}
field() { sed -n "s/.*[ ^]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
for threads in ${BENCH_THREADS:-1 2}; do
  ours=$(OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE "$BUILD/bench/bench_tropical" "$SECONDS_PER" "$threads")
  echo "$ours"
  theirs=$(OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 "$ROOT/bench/torch_tropical_bench.py" \
    "$threads" "$SECONDS_PER")
  echo "$theirs"
  while read -r line; do
    case $line in tropical_matmul*) kind=matmul key=semiring ;; tropical_conv*) kind=conv key=variant ;; *) continue ;; esac
    shape=$(field shape "$line") sel=$(field $key "$line")
    other=$(grep "^pytorch_tropical_$kind shape=$shape .*$key=$sel " <<<"$theirs" || true)
    [ -n "$other" ] || continue
    awk -v k="$kind" -v s="$shape" -v v="$sel" -v t="$threads" -v af="$(field fwd_gops "$line")" \
      -v ab="$(field fwdbwd_gops "$line")" -v bf="$(field fwd_gops "$other")" -v bb="$(field fwdbwd_gops "$other")" \
      'BEGIN { printf "ratio_tropical_%s shape=%s variant=%s threads=%s fwd_fivefold_over_pytorch=%.1fx fwdbwd_fivefold_over_pytorch=%.1fx\n", k, s, v, t, af / bf, ab / bb }'
  done <<<"$ours"
done
