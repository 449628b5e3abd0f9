#!/usr/bin/env bash
# Runs tests/comm/mpi_failure in one failure mode and checks that the job
# ended (a hang shows up as the timeout), with the expected exit status and
# the messages that name the failing rank.
#
# usage: run_failure.sh MPIEXEC NP EXE MODE EXPECT PATTERN...
#   NP      ranks for mpirun; 0 runs EXE directly (singleton start-up)
#   EXPECT  "ok" (exit 0, no failure message) or "fails" (non-zero exit)
#   PATTERN extended regular expressions that must all occur in the output
set -u
if [ $# -lt 5 ]; then
  echo "usage: $0 MPIEXEC NP EXE MODE ok|fails [PATTERN...]" >&2
  exit 2
fi
mpiexec=$1 np=$2 exe=$3 mode=$4 expect=$5
shift 5
limit=60 # seconds before the run counts as hung; a real failure ends in a few
out=$(mktemp)
trap 'rm -f "$out"' EXIT

start_ms=$(($(date +%s%N) / 1000000))
if [ "$np" = 0 ]; then
  timeout -k 10 "$limit" "$exe" "$mode" >"$out" 2>&1
else
  timeout -k 10 "$limit" "$mpiexec" -np "$np" --oversubscribe "$exe" "$mode" >"$out" 2>&1
fi
rc=$?
elapsed_ms=$(($(date +%s%N) / 1000000 - start_ms))
cat "$out"
printf 'run_failure: mode %s on %s ranks: exit status %d after %d.%03d s\n' "$mode" "$np" "$rc" \
  $((elapsed_ms / 1000)) $((elapsed_ms % 1000))

fail() {
  echo "run_failure: FAIL: $*" >&2
  exit 1
}
if [ "$rc" -eq 124 ] || [ "$elapsed_ms" -ge $((limit * 1000)) ]; then
  fail "mode $mode: the job was still running after $limit s; a failing rank did not take it down"
fi
case "$expect" in
  ok)
    [ "$rc" -eq 0 ] || fail "mode $mode: expected exit status 0, got $rc"
    if grep -q "failed:" "$out"; then fail "mode $mode: unexpected failure message"; fi
    ;;
  fails)
    [ "$rc" -ne 0 ] || fail "mode $mode: expected a non-zero exit status, got 0"
    if grep -q "all checks passed" "$out"; then
      fail "mode $mode: the other ranks finished normally; the failure did not end the job"
    fi
    ;;
  *) fail "EXPECT must be ok or fails, not $expect" ;;
esac
for pattern in "$@"; do
  grep -Eq -- "$pattern" "$out" || fail "mode $mode: the output lacks /$pattern/"
done
echo "run_failure: mode $mode: PASS"
