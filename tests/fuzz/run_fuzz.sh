#!/usr/bin/env bash
# Runs one libFuzzer harness for a bounded time, as a ctest test: fixed seed,
# the committed seed corpus (read only: new inputs go to a scratch corpus
# that is thrown away, so every run starts from the same place), memory and
# per-input time limits, and TMPDIR inside the work directory so nothing is
# left in /tmp even when a run ends in a crash.
#
# Usage: run_fuzz.sh FUZZER SEED_CORPUS DICT SECONDS MAX_RUNS WORK_DIR
# A failure leaves the offending input in WORK_DIR/artifacts/; rerun it with
#   FIVEFOLD_FUZZ_VERBOSE=1 FUZZER WORK_DIR/artifacts/crash-...
set -u
if [ $# -ne 6 ]; then
  echo "usage: $0 FUZZER SEED_CORPUS DICT SECONDS MAX_RUNS WORK_DIR" >&2
  exit 2
fi
fuzzer=$1 seeds=$2 dict=$3 seconds=$4 runs=$5 work=$6

rm -rf "$work/corpus" "$work/tmp"
mkdir -p "$work/corpus" "$work/tmp" "$work/artifacts" || exit 2
export TMPDIR="$work/tmp"

# -rss_limit_mb also caps single allocations (malloc_limit_mb defaults to
# it); -timeout flags any one input that takes longer than 10 s.
"$fuzzer" -seed=1 -max_total_time="$seconds" -runs="$runs" -rss_limit_mb=1024 -timeout=10 \
  -dict="$dict" -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" "$seeds"
rc=$?

rm -rf "$work/corpus" "$work/tmp"
if [ $rc -ne 0 ]; then
  echo "run_fuzz: $(basename "$fuzzer") failed (exit $rc); the input is in $work/artifacts/." \
    "Rerun it with: FIVEFOLD_FUZZ_VERBOSE=1 $fuzzer <file>" >&2
fi
exit $rc
