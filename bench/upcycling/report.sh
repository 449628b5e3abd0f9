#!/usr/bin/env bash
# Reads the runs of bench/upcycling/run.sh from OUT (default runs/upcycling):
# the validation losses of every continuation side by side (OUT/curves.tsv),
# the final losses against the dense control, and the plot OUT/upcycling.png
# (gnuplot, bench/upcycling/plot.gp; skipped with a note when gnuplot is
# missing). Usage: bench/upcycling/report.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/upcycling}
RUNS=(dense moe-stk moe-tks moe-fine)

# "step val_loss" per eval record of a metrics.jsonl.
evals() {
  sed -n 's/.*"type":"eval","step":\([0-9]*\),"val_loss":\([^,}]*\).*/\1 \2/p' "$1"
}
tokens_per_step() { # from the run's resolved config: B * T * accumulation
  tr -d ' \t\n' <"$1" | sed 's/.*"micro_batch_size":\([0-9]*\).*"seq_len":\([0-9]*\).*"grad_accum_steps":\([0-9]*\).*/\1 \2 \3/' |
    awk '{print $1 * $2 * $3}'
}

for r in "${RUNS[@]}" pretrain; do
  if [ ! -s "$OUT/$r/metrics.jsonl" ]; then
    echo "report: $OUT/$r/metrics.jsonl is missing (run bench/upcycling/run.sh first)" >&2
    exit 1
  fi
done
tps=$(tokens_per_step "$OUT/dense/config.json")
pre_steps=$(evals "$OUT/pretrain/metrics.jsonl" | tail -n 1 | cut -d' ' -f1)

evals "$OUT/pretrain/metrics.jsonl" >"$OUT/pretrain.tsv"
{
  printf '# step\ttokens\ttotal_step'
  printf '\t%s' "${RUNS[@]}"
  printf '\n'
  args=()
  for r in "${RUNS[@]}"; do
    evals "$OUT/$r/metrics.jsonl" >"$OUT/$r.evals"
    args+=("$OUT/$r.evals")
  done
  # One row per evaluation step that every run has (they share eval_interval).
  awk -v n=${#RUNS[@]} -v tps="$tps" -v pre="$pre_steps" '
    FNR == 1 { f++ }
    { loss[f, $1] = $2; if (f == 1) steps[++ns] = $1 }
    END {
      for (i = 1; i <= ns; i++) {
        s = steps[i]; row = sprintf("%d\t%d\t%d", s, s * tps, s + pre); ok = 1
        for (f = 1; f <= n; f++) { if (!((f, s) in loss)) ok = 0; row = row "\t" loss[f, s] }
        if (ok) print row
      }
    }' "${args[@]}"
} >"$OUT/curves.tsv"
for r in "${RUNS[@]}"; do rm -f "$OUT/$r.evals"; done

echo
echo "== validation loss (nats per byte) after the dense pretraining of $pre_steps steps; same tokens for every run"
awk -F'\t' 'NR == 1 { printf "%8s %10s", "step", "tokens"; for (i = 4; i <= NF; i++) printf " %9s", $i; printf "\n"; next }
  { printf "%8d %10d", $1, $2; for (i = 4; i <= NF; i++) printf " %9.4f", $i; printf "\n" }' "$OUT/curves.tsv"

echo
echo "== final validation loss, and against the dense control (negative: better than continuing dense)"
awk -F'\t' 'NR == 1 { for (i = 4; i <= NF; i++) name[i] = $i; next }
  NR == 2 { for (i = 4; i <= NF; i++) start[i] = $i }
  { for (i = 4; i <= NF; i++) last[i] = $i; n = NF }
  END {
    for (i = 4; i <= n; i++)
      printf "  %-9s start %.4f  final %.4f  (%+.4f vs dense)\n", name[i], start[i], last[i], last[i] - last[4]
  }' "$OUT/curves.tsv"
echo
echo "== time and size of each continuation"
for r in "${RUNS[@]}"; do
  params=$(sed -n 's/^  params   \(.*\) total, \(.*\) active per token/\1 total, \2 active/p' "$OUT/$r/train.log")
  done_line=$(grep '^done:' "$OUT/$r/train.log" | sed 's/^done: //; s/ | final train.*| \([0-9,]* tok\/s\).*/, \1/')
  printf '  %-9s %s; %s\n' "$r" "$params" "$done_line"
done

if command -v gnuplot >/dev/null 2>&1; then
  gnuplot -e "out='$OUT/upcycling.png'; curves='$OUT/curves.tsv'; pretrain='$OUT/pretrain.tsv'; pre=$pre_steps" \
    bench/upcycling/plot.gp
  echo
  echo "plot: $OUT/upcycling.png (data: $OUT/curves.tsv, $OUT/pretrain.tsv)"
else
  echo
  echo "report: gnuplot is missing (scripts/install-deps.sh installs gnuplot-nox): no plot; data in $OUT/curves.tsv"
fi
