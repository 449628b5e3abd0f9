#!/usr/bin/env bash
# A rank that stops, on DP2 under mpirun (README "What fivefold promises when
# things go wrong"): preemption as schedulers and terminals deliver it, and
# a rank that hangs.
#
# Preemption (modes mpirun, ranks). Every rank holds
# after step 3 (FIVEFOLD_TEST_HOLD_AFTER_STEP) until the signal has reached
# it, so the stop lands in a known step without racing the run. Each case:
# the job exits 0 with the line "stopped by SIG... after step 3 of 6", the
# checkpoint of step 3 is there (and no later one), and `--resume` trains
# steps 4..6 into the same losses, weights and AdamW moments, bit for bit,
# as a run that was never stopped.
#   mpirun  SIGTERM and SIGINT to scripts/fivefold-mpirun (which passes them
#           on as SIGUSR1), SIGUSR1 to a plain mpirun (which forwards it)
#   ranks   SIGTERM to rank 1 alone (rank 0 learns of it in the per-step
#           agreement), SIGUSR1 to mpirun and to every rank (each rank gets it
#           twice, as from a scheduler that signals every process)
#
# A hang (mode hang): with training.collective_timeout_s 2, both ranks hold
# after step 3, rank 1 is stopped with SIGSTOP and rank 0 goes on into the
# all-reduce that ends the step. The job must end with a non-zero status and
# rank 0's message naming rank 1 as the one that did not arrive; the stopped
# process is continued and killed afterwards, whatever happened.
# usage: preempt_test.sh FIVEFOLD MPIEXEC MODE   (MODE: mpirun | ranks | hang)
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=$3
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/../parallel/lib.sh"
WRAPPER=$(cd "$LIB_DIR/../../scripts" && pwd)/fivefold-mpirun
work_dir "preempt-$MODE"
make_corpus 120
dense_json model.json 2
run_json run-dense.json model.json steps=6 interval=0

# exact RUN: RUN's losses, weights and moments are the reference's, bit for bit.
exact() {
  local f
  $PY "$COMPARE" losses "$1" ref 0 0 >/dev/null || fail "$1: the per-step losses differ from the uninterrupted run"
  for f in model optimizer; do
    $PY "$COMPARE" tensors "$(ckpt "$1" 6)/$f.safetensors" "$(ckpt ref 6)/$f.safetensors" 0 0 >/dev/null ||
      fail "$1: $f.safetensors at step 6 differs from the uninterrupted run"
  done
}

# preempt NAME SIGNAL LAUNCHER HOW: trains under LAUNCHER (mpirun or
# wrapper), sends SIGNAL as HOW says (launcher, rank1, everyone) once both
# ranks hold, and checks the stop, the checkpoint and the resume. The ranks
# name the signal they got: the wrapper turns SIGTERM and SIGINT into
# SIGUSR1.
preempt() {
  local name=$1 sig=$2 launcher=$3 how=$4 status seen=$2
  local run=("$MPIEXEC")
  [ "$launcher" = wrapper ] && run=(env "FIVEFOLD_MPIRUN=$MPIEXEC" "$WRAPPER") && seen=SIGUSR1
  mkdir "hold-$name"
  # Job control: the background job gets a process group of its own and does
  # not ignore SIGINT (as a non-interactive shell's background jobs do).
  set -m
  FIVEFOLD_TEST_HOLD_AFTER_STEP="3:$WORK/hold-$name" "${run[@]}" -np 2 --oversubscribe "$FIVEFOLD" train \
    --config run-dense.json --out "$name" --no-progress >"$name.log" 2>&1 &
  BG_PID=$!
  set +m
  await_holds "hold-$name" "$name.log" || return
  case $how in
    launcher) kill "-$sig" "$BG_PID" ;;
    rank1) kill "-$sig" "$(cat "hold-$name/rank-1")" ;;
    everyone) kill "-$sig" "$BG_PID" "$(cat "hold-$name/rank-0")" "$(cat "hold-$name/rank-1")" ;;
  esac
  # A rank not signalled goes on (signals sent to a pid are handled before
  # that process's next system call returns, so the signalled ones stop).
  [ "$how" = rank1 ] && touch "hold-$name/go"
  wait "$BG_PID"
  status=$?
  BG_PID=
  [ "$status" -eq 0 ] || { tail -5 "$name.log"; fail "$name: $sig ($how) ended the job with status $status"; }
  grep -q "^stopped by $seen after step 3 of 6; its checkpoint is saved" "$name.log" ||
    { tail -5 "$name.log"; fail "$name: no line saying the run stopped by $seen after step 3"; }
  [ "$launcher" = wrapper ] && ! grep -q "^fivefold-mpirun: $sig: asking every rank to stop" "$name.log" &&
    fail "$name: the wrapper did not say that it passed $sig on"
  [ -d "$(ckpt "$name" 3)" ] || fail "$name: no checkpoint of step 3"
  [ -d "$(ckpt "$name" 4)" ] && fail "$name: the run went on past step 3"
  "$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train --config run-dense.json --out "$name" --no-progress --resume \
    >"$name-resume.log" 2>&1 || { tail -5 "$name-resume.log"; fail "$name: resuming failed"; return; }
  exact "$name"
}

# hang: see the top.
hang() {
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
  await_holds hold hang.log || return
  VICTIM=$(cat hold/rank-1)
  kill -STOP "$VICTIM"
  touch hold/go
  # "Not never": a generous bound, far above the 2 s timeout and its 2 s of
  # asking the other ranks.
  if ! await_end 120; then
    fail "the job still runs 120 s after rank 1 was stopped (collective timeout 2 s)"
    return
  fi
  [ "$ENDED_STATUS" -ne 0 ] || fail "the job exited 0 although rank 1 was stopped"
  grep -q "rank 0 failed: comm_allreduce_i64 on group world waited [0-9]* s (the collective timeout is 2 s): rank 1 did not arrive (it does not answer: stopped, hung, or still computing)" hang.log ||
    { tail -20 hang.log; fail "no message from rank 0 naming rank 1 as the rank that did not arrive"; }
}

# The stopped rank is continued and killed at the end, whatever happened.
VICTIM=
release_victim() {
  if [ -n "$VICTIM" ] && kill -0 "$VICTIM" 2>/dev/null; then
    kill -CONT "$VICTIM" 2>/dev/null
    kill -9 "$VICTIM" 2>/dev/null
  fi
  cleanup
}
trap release_victim EXIT

case $MODE in
  mpirun | ranks) train 2 ref dense || exit 1 ;;
esac
case $MODE in
  hang) hang ;;
  mpirun)
    preempt term SIGTERM wrapper launcher
    preempt int SIGINT wrapper launcher
    preempt usr1 SIGUSR1 mpirun launcher
    ;;
  ranks)
    preempt one SIGTERM mpirun rank1
    preempt all SIGUSR1 mpirun everyone
    ;;
  *)
    echo "preempt_test.sh: unknown mode $MODE" >&2
    exit 2
    ;;
esac
finish preempt
