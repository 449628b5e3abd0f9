#!/usr/bin/env bash
# The fuzz gate's verdict must not depend on the machine: run_fuzz.sh, as
# the fuzz.<reader> tests call it, run twice must try exactly the same
# inputs, so the two runs' final statistics (inputs executed, new inputs
# found, coverage and features at the end) must be equal. A time-bounded
# run (the old gate, `make fuzz`) gets as far as the machine's speed
# allows and fails this.
# usage: reproducible_test.sh FUZZER SEED_CORPUS DICT WORK_DIR MODE COUNT
set -u
[ $# -eq 6 ] || { echo "usage: $0 FUZZER SEED_CORPUS DICT WORK_DIR MODE COUNT" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
if ! setarch "$(uname -m)" -R true 2>/dev/null; then
  echo "SKIP (not available here): address randomisation cannot be switched off (setarch -R), so libFuzzer's"
  echo "traced comparisons, and the inputs it tries, differ from run to run on this machine"
  exit 77
fi
stats() { # the final statistics of one run
  grep -E '^stat::(number_of_executed_units|new_units_added)|DONE ' "$1" | sed -E 's/ (exec\/s|rss): [0-9]+[a-zA-Z]*//g'
}
for i in 1 2; do
  bash "$here/run_fuzz.sh" "$1" "$2" "$3" "$4/run$i" "$5" "$6" >"$4.run$i.log" 2>&1 ||
    { tail -20 "$4.run$i.log"; echo "FAIL: run $i of the fuzzer failed"; exit 1; }
  stats "$4.run$i.log" >"$4.stats$i"
done
cat "$4.stats1"
[ -s "$4.stats1" ] || { echo "FAIL: no final statistics in the fuzzer's output"; exit 1; }
if ! diff "$4.stats1" "$4.stats2"; then
  echo "FAIL: two runs of the same gate tried different inputs: its verdict would depend on the machine"
  exit 1
fi
echo "reproducible: both runs executed the same inputs and ended with the same coverage"
