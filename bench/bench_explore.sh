#!/usr/bin/env bash
# Per-layer plan exploration (src/plan/explore_space.h) compared at equal
# budgets of simulations: exact enumeration where the space allows it,
# simulated annealing and the DQN, each with three seeds.
#
# The layout is the one `fivefold plan` books for Mixtral-8x22B (56 MoE
# layers) on 64 x DGX-H100, sequence 4096, global batch 256, vpp 1, with
# full recomputation forced on the search (--recompute-list full), so the
# uniform plan recomputes every layer and the explorers may drop it layer by
# layer and move stage boundaries by up to 2 layers:
#   space A  per layer: 2^56 x 5^3 plans (too large to enumerate)
#   space B  per group of 7 layers: 2^8 x 5^3 = 32000 plans (enumerated)
# Prints a markdown table (figures only, never pass/fail): for each space,
# method and budget, the best step time found per seed and the simulations
# spent when it was found.
#
# usage: bench/bench_explore.sh [BUILD_DIR]
# env:   BENCH_EXPLORE_BUDGETS (default "250 1000 4000"), BENCH_EXPLORE_SEEDS (default "1 2 3")
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
FIVEFOLD=$(cd "$BUILD" && pwd)/fivefold
BUDGETS=${BENCH_EXPLORE_BUDGETS:-250 1000 4000}
SEEDS=${BENCH_EXPLORE_SEEDS:-1 2 3}
LAYOUT=(--model mixtral-8x22b --cluster dgx-h100 --gpus 64 --seq 4096 --global-batch 256 --runtime any
        --max-vpp 1 --recompute-list full --no-bucket-search --no-map-devices --top 1)

# run GROUPS METHOD BUDGET SEED -> "step_s found_at" (or "- -")
run() {
  local out
  out=$("$FIVEFOLD" plan "${LAYOUT[@]}" --explore-groups "$1" --explore "$2" --explore-budget "$3" \
        --explore-seed "$4")
  echo "$out" | awk '/^  uniform plan:/ { u = $3 }
                     /^  best plan:/ { b = $3; for (i = 1; i <= NF; i++) if ($i == "after") f = $(i + 1) }
                     END { printf "%s %s %s\n", (b == "" ? "-" : b), (f == "" ? "-" : f), u }'
}

echo "| space | method | budget | best step (s) per seed | simulations when found | uniform (s) |"
echo "|---|---|---|---|---|---|"
for space in "A layer" "B 7"; do
  set -- $space
  name=$1 groups=$2
  if [ "$name" = B ]; then
    read -r step at uni < <(run "$groups" exact 40000 1)
    echo "| $name | exact (all 32000) | 40000 | $step | $at | $uni |"
  fi
  for budget in $BUDGETS; do
    for method in sa dqn; do
      steps="" ats=""
      for seed in $SEEDS; do
        read -r step at uni < <(run "$groups" "$method" "$budget" "$seed")
        steps="$steps $step" ats="$ats $at"
      done
      echo "| $name | $method | $budget |$steps |$ats | $uni |"
    done
  done
done
