#!/usr/bin/env bash
# A rank that hangs inside a collective (README "What fivefold promises when
# things go wrong"): on DP2 under mpirun, with training.collective_timeout_s
# 2, both ranks hold after step 3 (FIVEFOLD_TEST_HOLD_AFTER_STEP), rank 1 is
# stopped with SIGSTOP and rank 0 goes on into the all-reduce that ends the
# step. The job must end with a non-zero status and rank 0's message naming
# rank 1 as the one that did not arrive; the stopped process is continued and
# killed afterwards, whatever happened.
# usage: hang_test.sh FIVEFOLD MPIEXEC
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=sigstop
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/../parallel/lib.sh"
work_dir hang
VICTIM=
release_victim() {
  if [ -n "$VICTIM" ] && kill -0 "$VICTIM" 2>/dev/null; then
    kill -CONT "$VICTIM" 2>/dev/null
    kill -9 "$VICTIM" 2>/dev/null
  fi
  cleanup
}
trap release_victim EXIT
make_corpus 120
dense_json model.json 2
run_json run-dense.json model.json steps=6 interval=0
$PY - <<'PY'
import json
cfg = json.load(open("run-dense.json"))
cfg["training"]["collective_timeout_s"] = 2
json.dump(cfg, open("run-hang.json", "w"))
PY

mkdir hold
FIVEFOLD_TEST_HOLD_AFTER_STEP="3:$WORK/hold" "$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train \
  --config run-hang.json --out hang --no-progress >hang.log 2>&1 &
BG_PID=$!
await_holds hold hang.log || exit 1
VICTIM=$(cat hold/rank-1)
kill -STOP "$VICTIM"
touch hold/go
# "Not never": a generous bound on how long the job may go on, far above the
# 2 s timeout and its 2 s of asking the other ranks.
for _ in $(seq 1 1200); do
  kill -0 "$BG_PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$BG_PID" 2>/dev/null; then
  fail "the job still runs 120 s after rank 1 was stopped (collective timeout 2 s)"
  kill -CONT "$VICTIM"
  kill -9 "$VICTIM"
  kill "$BG_PID"
fi
wait "$BG_PID"
status=$?
BG_PID=
[ "$status" -ne 0 ] || fail "the job exited 0 although rank 1 was stopped"
grep -q "rank 0 failed: comm_allreduce_i64 on group world waited [0-9]* s (the collective timeout is 2 s): rank 1 did not arrive (it does not answer: stopped, hung, or still computing)" hang.log ||
  { tail -20 hang.log; fail "no message from rank 0 naming rank 1 as the rank that did not arrive"; }
finish hang
