#!/usr/bin/env bash
# Logs that read well in a file. Under mpirun each rank's standard output is
# a pseudo-terminal even when mpirun's own output goes to a file, so
# `--progress auto` (the default) must look past it: `mpirun -np 2 fivefold
# train ... > log` holds no carriage return and no ESC[K, while
# `--progress always` through a pipe draws the progress line. The banner's
# batch line names dp (micro x seq x accum x dp), and a stated peak_gflops
# below what the run reaches is warned about.
# usage: log_file_test.sh FIVEFOLD MPIEXEC
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir log-file-test

make_corpus
dense_json dense.json 1
# Log lines at steps 1 and 5 only: steps 2-4 would draw the progress line.
run_json run-dense.json dense.json steps=5 log_interval=5 interval=0

has_progress() { grep -q $'\r' "$1" || grep -qF $'\033[K' "$1"; }

"$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train --config run-dense.json --out dp2 >dp2.log 2>&1 ||
  { tail -20 dp2.log; fail "training under mpirun"; }
grep -q "step 5/5" dp2.log || fail "dp2.log lacks the last log line"
has_progress dp2.log && fail "mpirun's redirected log holds the redrawn progress line (carriage returns or ESC[K)"
grep -qF "2 x 16 tokens x 1 accumulation x 2 dp = 64 tokens per step" dp2.log ||
  { grep batch dp2.log; fail "the banner's batch line leaves out dp"; }

"$FIVEFOLD" train --config run-dense.json --out always --progress always 2>&1 | cat >always.log
grep -q "step 5/5" always.log || { tail -20 always.log; fail "training with --progress always"; }
has_progress always.log || fail "--progress always through a pipe drew no progress line"

"$FIVEFOLD" train --config run-dense.json --out never --progress never >never.log 2>&1 || fail "--progress never"
has_progress never.log && fail "--progress never drew a progress line"

# A stated peak far below the machine's: MFU over 100%, said once.
"$FIVEFOLD" train --config run-dense.json --out low-peak --peak-gflops 0.0001 --progress never >low.log 2>&1 ||
  fail "training with a low --peak-gflops"
[ "$(grep -c "warning: MFU .* exceeds 100% of the stated peak" low.log)" = 1 ] ||
  { cat low.log; fail "no (or more than one) warning for MFU above a stated peak"; }
grep -q "warning: MFU" never.log && fail "a warning for MFU at peak_gflops 50"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "log file checks passed"
