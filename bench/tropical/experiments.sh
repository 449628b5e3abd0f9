#!/usr/bin/env bash
# The Fashion-MNIST experiments of docs/tropical.md (bench/tropical/
# experiments.py): the TCNN comparison, robustness to test-time noise and
# MMP-NN against ReLU MLPs, every run with `fivefold train` on 1 thread,
# JOBS at a time. Writes OUT_DIR/results.md (the tables, with every
# setting), the PNG plots (matplotlib, Debian python3-matplotlib) and
# runs.json; the runs stay in WORK_DIR, and finished runs there are reused
# when the script is run again with the same configs. Figures only, never
# pass/fail. Nothing is chosen on the test set.
#
# usage: bench/tropical/experiments.sh [BUILD_DIR]
#   env: EPOCHS (10; the small nets), LENET_EPOCHS (EPOCHS), MMP_EPOCHS (EPOCHS; MMP-NN and MLPs),
#        SEEDS (1,2,3), LENET_SEEDS (SEEDS), EVALS_PER_EPOCH (4), EXPERIMENTS (1,2,3), JOBS (1: runs at once),
#        WORK_DIR (build/tropical-experiments), OUT_DIR (WORK_DIR/results)
# A quick run: EPOCHS=1 LENET_EPOCHS=1 SEEDS=1 bench/tropical/experiments.sh
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
WORK_DIR=${WORK_DIR:-$BUILD/tropical-experiments}
OUT_DIR=${OUT_DIR:-$WORK_DIR/results}
[ -x "$BUILD/fivefold" ] || { echo "experiments.sh: no $BUILD/fivefold (build first)" >&2; exit 1; }
echo "experiments.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
     "ISA $(grep -o -m1 'avx512f' /proc/cpuinfo || grep -o -m1 'avx2' /proc/cpuinfo || uname -m)"
exec /usr/bin/python3 "$ROOT/bench/tropical/experiments.py" "$BUILD/fivefold" "$ROOT/configs/vision" "$WORK_DIR" "$OUT_DIR"
