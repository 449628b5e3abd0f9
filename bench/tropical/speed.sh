#!/usr/bin/env bash
# Tropical kernel throughput for the experiments' speed table: fivefold's
# kernels (tropical_speed, bench/tropical/speed.c, with the measured
# add+max peak) against the same layers in PyTorch written as public
# implementations do (bench/tropical/speed_torch.py: broadcast + amax,
# unfold for the convolution) on the same shapes and thread counts, and
# the ratio fivefold / PyTorch of forward and forward+backward G tropical
# multiply-adds/s. The machine may be shared: every figure is the best of
# REPEATS runs of both programs (each run already keeps its fastest
# repetition), and the load average before and after is printed so a
# reader can judge. Figures only, never pass/fail.
#
# usage: bench/tropical/speed.sh [BUILD_DIR]   env: BENCH_THREADS (default "1 2"),
#        BENCH_TROPICAL_SECONDS (per figure, default 0.5), BENCH_TROPICAL_REPEATS (default 3)
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
SECONDS_PER=${BENCH_TROPICAL_SECONDS:-0.5}
REPEATS=${BENCH_TROPICAL_REPEATS:-3}
field() { sed -n "s/.*[ ^]$1=\([^ ]*\).*/\1/p" <<<"$2"; }
# One line per figure with the maximum of every *_gops / *_pct_peak field
# over the repeats (a figure is named by its other fields, load aside).
best_of() {
  awk '/^(tropical_(matmul|conv|peak)|pytorch_tropical_(matmul|conv)) / {
    key = $1; for (i = 2; i <= NF; i++) if ($i !~ /(_gops|_pct_peak|load_average[a-z_0-9]*)=/) key = key " " $i
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    for (i = 2; i <= NF; i++) if ($i ~ /(_gops|_pct_peak)=/) {
      split($i, kv, "="); v = kv[2] + 0
      if (!((key, kv[1]) in best) || v > best[key, kv[1]]) best[key, kv[1]] = v
      if (!((key, kv[1]) in named)) { named[key, kv[1]] = 1; names[key] = names[key] " " kv[1] }
    }
  }
  END { for (j = 1; j <= n; j++) { k = order[j]; line = k; m = split(names[k], f, " ")
          for (i = 1; i <= m; i++) line = line " " f[i] "=" best[k, f[i]]
          print line } }'
}
echo "tropical speed: best of $REPEATS runs per figure, ${SECONDS_PER}s each; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for threads in ${BENCH_THREADS:-1 2}; do
  ours="" theirs=""
  for _ in $(seq "$REPEATS"); do
    ours+=$(OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE "$BUILD/bench/tropical_speed" "$SECONDS_PER" "$threads")$'\n'
    theirs+=$(OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 "$ROOT/bench/tropical/speed_torch.py" \
      "$threads" "$SECONDS_PER")$'\n'
  done
  grep -m1 '^tropical_speed: isa=' <<<"$ours" || true
  ours=$(best_of <<<"$ours") theirs=$(best_of <<<"$theirs")
  echo "$ours"
  echo "$theirs"
  while read -r line; do
    case $line in tropical_matmul*) kind=matmul key=semiring ;; tropical_conv*) kind=conv key=variant ;; *) continue ;; esac
    shape=$(field shape "$line") sel=$(field $key "$line")
    other=$(grep "^pytorch_tropical_$kind shape=$shape .*$key=$sel " <<<"$theirs" || true)
    [ -n "$other" ] || continue
    awk -v k="$kind" -v s="$shape" -v v="$sel" -v t="$threads" -v isa="$(field isa "$line")" \
      -v af="$(field fwd_gops "$line")" -v ab="$(field fwdbwd_gops "$line")" -v bf="$(field fwd_gops "$other")" \
      -v bb="$(field fwdbwd_gops "$other")" -v pf="$(field fwd_pct_peak "$line")" \
      'BEGIN { printf "ratio_tropical_%s shape=%s variant=%s threads=%s isa=%s fivefold_fwd_gops=%s (%s%% of peak) pytorch_fwd_gops=%s fwd_fivefold_over_pytorch=%.1fx fivefold_fwdbwd_gops=%s pytorch_fwdbwd_gops=%s fwdbwd_fivefold_over_pytorch=%.1fx\n", k, s, v, t, isa, af, pf, bf, af / bf, ab, bb, ab / bb }'
  done <<<"$ours"
done
echo "tropical speed: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
