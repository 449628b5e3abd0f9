#!/usr/bin/env bash
# Faults a cluster delivers, through `fivefold train` (README "What fivefold
# promises when things go wrong"):
#   nonfinite   a NaN put into one gradient element (FIVEFOLD_TEST_NONFINITE)
#               at step 3, on one rank and on DP2 (plain and ZeRO-1) under
#               mpirun: the warning names the step and the tensor, the step
#               is skipped (also with two pipeline stages; step 3's weights and moments equal step 2's
#               bit for bit), training goes on (step 4 differs); "stop" exits
#               non-zero naming them and writes no checkpoint of step 3; a
#               NaN weight is never checkpointed; skips in a row beyond
#               training.max_nonfinite_skips stop the run
#   data        a training shard truncated, or overwritten in place, while a
#               DP2 run under mpirun reads it (both ranks hold after step 2,
#               FIVEFOLD_TEST_HOLD_AFTER_STEP, while the test changes it):
#               step 3's read fails naming the file, the job exits non-zero
#   interval    checkpoint.interval_minutes on a clock of FIVEFOLD_TEST_CLOCK_STEP_SECONDS
#               seconds per step (no wall clock): the checkpoints fall where
#               the minutes say, and not at all with 0
# usage: faults_test.sh FIVEFOLD MPIEXEC MODE
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=$3
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/../parallel/lib.sh"
work_dir "faults-$MODE"
make_corpus 120
dense_json model.json 2

# config FILE FIELD=VALUE...: run-dense.json with extra "training" fields
# (FIELD) or "checkpoint" fields (checkpoint.FIELD) set.
config() {
  local file=$1
  shift
  $PY - "$file" "$@" <<'PY'
import json, sys
cfg = json.load(open("run-dense.json"))
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    section, key = k.split(".", 1) if "." in k else ("training", k)
    cfg[section][key] = json.loads(v)
json.dump(cfg, open(sys.argv[1], "w"))
PY
}

# weights_equal A B: the two checkpoints hold the same tensors bit for bit.
weights_equal() {
  local f
  for f in model optimizer; do
    $PY "$COMPARE" tensors "$1/$f.safetensors" "$2/$f.safetensors" 0 0 >/dev/null || return 1
  done
}

TENSOR=layers.1.attn.wq

# nonfinite_skip NP NAME [flags]: a NaN in step 3's gradient of $TENSOR
# (on world rank 0) is skipped.
nonfinite_skip() {
  local np=$1 name=$2
  shift 2
  FIVEFOLD_TEST_NONFINITE="grad:3:$TENSOR" train "$np" "$name" dense --save-interval 1 "$@" || return
  grep -q "step 3: the gradient of $TENSOR is not finite; step skipped" "$name.log" ||
    { tail -5 "$name.log"; fail "$name: no warning naming step 3 and $TENSOR"; }
  weights_equal "$(ckpt "$name" 2)" "$(ckpt "$name" 3)" || fail "$name: the skipped step 3 changed the weights or moments"
  weights_equal "$(ckpt "$name" 3)" "$(ckpt "$name" 4)" && fail "$name: step 4 did not train"
  [ -d "$(ckpt "$name" 5)" ] || fail "$name: the run did not go on to step 5"
  grep -q "^nonfinite: 1 step(s) skipped" "$name.log" || fail "$name: the end of the run does not count the skipped step"
}

case $MODE in
  nonfinite)
    run_json run-dense.json model.json steps=5 interval=0
    nonfinite_skip 0 one
    nonfinite_skip 2 dp2
    nonfinite_skip 2 zero --distributed-optimizer 1
    # two pipeline stages: the NaN on stage 0 (rank 0), both ranks skip
    TENSOR=layers.0.attn.wq nonfinite_skip 2 pp2 --pp 2 --grad-accum 2
    # stop: non-zero, the message, no checkpoint of the step
    config run-stop.json nonfinite='"stop"'
    if FIVEFOLD_TEST_NONFINITE="grad:3:$TENSOR" "$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train \
      --config run-stop.json --out stop --save-interval 1 --no-progress >stop.log 2>&1; then
      fail "stop: a non-finite gradient with training.nonfinite \"stop\" exited 0"
    fi
    grep -q "step 3: the gradient of $TENSOR is not finite; stopping" stop.log ||
      { tail -5 stop.log; fail "stop: no message naming step 3 and $TENSOR"; }
    [ -d "$(ckpt stop 2)" ] || fail "stop: the checkpoint of step 2 is missing"
    [ -d "$(ckpt stop 3)" ] && fail "stop: a checkpoint of the stopped step 3 was written"
    # a NaN weight after step 3's update: that checkpoint is refused
    if FIVEFOLD_TEST_NONFINITE="weight:3:$TENSOR" "$FIVEFOLD" train --config run-dense.json --out nanw \
      --save-interval 1 --no-progress >nanw.log 2>&1; then
      fail "nanw: a run with non-finite weights exited 0"
    fi
    grep -q "not writing the checkpoint of step 3: the weights of $TENSOR are not finite" nanw.log ||
      { tail -5 nanw.log; fail "nanw: no message refusing the checkpoint of step 3"; }
    [ -d "$(ckpt nanw 3)" ] && fail "nanw: a checkpoint with non-finite weights was written"
    # the step-2 checkpoint is the newest and whole: the run resumes from it
    "$FIVEFOLD" train --config run-dense.json --out nanw --resume --no-progress >nanw-resume.log 2>&1 ||
      { tail -5 nanw-resume.log; fail "nanw: resuming after the refused checkpoint failed"; }
    grep -q "resumed  from .*step-00000002" nanw-resume.log || fail "nanw: the resume did not start from step 2"
    # a NaN weight makes every later step non-finite: at most 1 skip in a row
    config run-limit.json max_nonfinite_skips=1 checkpoint.interval=0
    if FIVEFOLD_TEST_NONFINITE="weight:2:$TENSOR" "$FIVEFOLD" train --config run-limit.json --out limit \
      --no-progress >limit.log 2>&1; then
      fail "limit: steps skipped beyond training.max_nonfinite_skips exited 0"
    fi
    grep -q "step 4: the gradient of [a-z0-9_.]* is not finite, 2 steps in a row (more than training.max_nonfinite_skips = 1)" limit.log ||
      { tail -5 limit.log; fail "limit: no message for 2 skips in a row"; }
    ;;
  data)
    run_json run-dense.json model.json steps=6 interval=0
    for how in truncate overwrite; do
      cp -r shards "shards-$how"
      # An hour back: the write's new modification time differs whatever
      # the clock's resolution.
      touch -d '1 hour ago' "shards-$how/train.bin"
      config "run-$how.json" "data.train=\"shards-$how/train.bin\""
      mkdir "hold-$how"
      FIVEFOLD_TEST_HOLD_AFTER_STEP="2:$WORK/hold-$how" "$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train \
        --config "run-$how.json" --out "$how" --no-progress >"$how.log" 2>&1 &
      BG_PID=$!
      await_holds "hold-$how" "$how.log" || continue
      shard=shards-$how/train.bin
      size=$(stat -c %s "$shard")
      case $how in
        truncate) truncate -s $((size / 2)) "$shard"; expect="$((size)) bytes when opened, $((size / 2)) now (truncated)" ;;
        overwrite) printf '\377\377\377\377' | dd of="$shard" bs=1 seek=200 conv=notrunc status=none
          expect="written to after it was opened" ;;
      esac
      touch "hold-$how/go"
      if wait "$BG_PID"; then fail "$how: the run went on after its shard was changed"; fi
      BG_PID=
      grep -q "step 3: data.train: token shard $shard changed while the run reads it: $expect" "$how.log" ||
        { tail -5 "$how.log"; fail "$how: no message naming $shard and what changed at step 3"; }
      [ -d "$(ckpt "$how" 3)" ] && fail "$how: a checkpoint was written after the shard changed"
    done
    ;;
  interval)
    run_json run-dense.json model.json steps=10 interval=0
    # 25 s a step, a checkpoint every minute: after steps 3, 6, 9 and at the end
    config run-min.json checkpoint.interval_minutes=1
    FIVEFOLD_TEST_CLOCK_STEP_SECONDS=25 train 0 minutes min || true
    for s in 3 6 9 10; do [ -d "$(ckpt minutes "$s")" ] || fail "interval: no checkpoint after step $s"; done
    for s in 1 2 4 5 7 8; do [ -d "$(ckpt minutes "$s")" ] && fail "interval: an unexpected checkpoint after step $s"; done
    grep -q "every 1 min" minutes.log || fail "interval: the banner does not state the time interval"
    # 0: at the end only
    config run-off.json checkpoint.interval_minutes=0
    FIVEFOLD_TEST_CLOCK_STEP_SECONDS=25 train 0 off off || true
    [ "$(ls off/checkpoints | wc -l)" -eq 1 ] || fail "interval 0: expected only the final checkpoint, got $(ls off/checkpoints)"
    # the default (30 min) is stated and in train --help
    "$FIVEFOLD" train --help | grep -q "checkpoint.interval_minutes" || fail "train --help lacks checkpoint.interval_minutes"
    ;;
  *)
    echo "faults_test.sh: unknown mode $MODE" >&2
    exit 2
    ;;
esac
finish faults
