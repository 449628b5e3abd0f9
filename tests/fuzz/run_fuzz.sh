#!/usr/bin/env bash
# Runs one libFuzzer harness over its committed seed corpus (read only: new
# inputs go to a scratch corpus that is thrown away, so every run starts
# from the same place), with memory and per-input limits, and TMPDIR inside
# the work directory so nothing is left in /tmp even when a run ends in a
# crash. Two ways to bound it:
#
#   runs N      the ctest gate: every seed replayed, then exactly N inputs
#               mutated from seed 1. The same inputs on every run, fast or
#               slow, loaded or idle: the verdict does not depend on speed
#               (fuzz.reproducible checks it).
#   seconds S   `make fuzz`: as many inputs as S seconds allow (a search for
#               new bugs, never part of `make test`).
#
# Usage: run_fuzz.sh FUZZER SEED_CORPUS DICT WORK_DIR runs|seconds COUNT
# A failure leaves the offending input in WORK_DIR/artifacts/; rerun it with
#   FIVEFOLD_FUZZ_VERBOSE=1 FUZZER WORK_DIR/artifacts/crash-...
# and, once fixed, keep it as SEED_CORPUS/regression-<what>.
set -u
if [ $# -ne 6 ] || { [ "$5" != runs ] && [ "$5" != seconds ]; }; then
  echo "usage: $0 FUZZER SEED_CORPUS DICT WORK_DIR runs|seconds COUNT" >&2
  exit 2
fi
fuzzer=$1 seeds=$2 dict=$3 work=$4 mode=$5 count=$6
case $count in '' | *[!0-9]*) echo "run_fuzz: COUNT must be a whole number, not '$count'" >&2; exit 2 ;; esac

rm -rf "$work/corpus" "$work/tmp"
mkdir -p "$work/corpus" "$work/tmp" "$work/artifacts" || exit 2
fuzzer=$(realpath "$fuzzer") seeds=$(realpath "$seeds") dict=$(realpath "$dict") work=$(realpath "$work")

# The same inputs on every run need the same comparisons: libFuzzer feeds
# the operands of traced comparisons back into its mutations, so a random
# scratch path or a randomised address would change what it tries next.
# The harness works in a scratch directory with a fixed relative name
# inside a private, empty working directory (fuzz_util.h), and in the gate
# address-space randomisation is switched off for the fuzzer (setarch -R)
# when the machine allows it; when it does not, that is said.
cd "$work/tmp" || exit 2
export TMPDIR=. FIVEFOLD_FUZZ_FIXED_SCRATCH=fivefold-fuzz
launch=()
if [ "$mode" = runs ]; then
  bound=(-runs="$count")
  if setarch "$(uname -m)" -R true 2>/dev/null; then
    launch=(setarch "$(uname -m)" -R)
  else
    echo "run_fuzz: note: cannot switch off address randomisation here (setarch -R);" \
      "the inputs tried may differ from run to run"
  fi
else
  bound=(-max_total_time="$count")
fi
# -rss_limit_mb also caps single allocations (malloc_limit_mb defaults to
# it); -timeout flags any one input that takes longer than 10 s.
"${launch[@]}" "$fuzzer" -seed=1 "${bound[@]}" -rss_limit_mb=1024 -timeout=10 \
  -dict="$dict" -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" "$seeds"
rc=$?
cd "$work" || exit 2

rm -rf "$work/corpus" "$work/tmp"
if [ $rc -ne 0 ]; then
  echo "run_fuzz: $(basename "$fuzzer") failed (exit $rc); the input is in $work/artifacts/." \
    "Rerun it with: FIVEFOLD_FUZZ_VERBOSE=1 $fuzzer <file>" >&2
fi
exit $rc
