#!/usr/bin/env bash
# Checkpoint and resume through `fivefold train`, end to end:
#  1. 2N steps straight, versus N+ steps killed with SIGKILL after a
#     checkpoint appeared and then --resume: the per-step losses in
#     metrics.jsonl and the final model.safetensors / optimizer.safetensors
#     are identical (byte for byte).
#  2. A process that dies while writing a checkpoint
#     (FIVEFOLD_TEST_CRASH_IN_CHECKPOINT) leaves the previous checkpoint as
#     the newest; resuming from it still reproduces the straight run.
#  3. A damaged newest checkpoint is skipped with a warning naming the file;
#     a fresh run refuses a directory holding checkpoints; --resume refuses
#     another model and a directory without checkpoints; --help documents
#     the flags.
# Usage: resume_test.sh path/to/fivefold
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/../parallel/lib.sh"
work_dir resume-test

STEPS=40 # 2N
CRASH_EXIT=86

# --- a tiny byte-level corpus and a small MoE
make_corpus 160
moe_json model.json 2 4 48
run_json run.json model.json micro_batch_size=4 seq_len=32 steps=$STEPS warmup_steps=5 eval_interval=10 grad_clip=- \
  interval=0 keep_last=3
sed 's/"hidden_size": 48/"hidden_size": 64/' model.json >model-wide.json
sed 's/model.json/model-wide.json/' run.json >run-wide.json

# One process on run.json; the caller redirects (lib.sh's train logs to a file).
train_one() { "$FIVEFOLD" train --config run.json --no-progress "$@"; }

# The deterministic fields of every train record, one line per step.
losses() {
  grep '"type":"train"' "$1/metrics.jsonl" |
    sed 's/.*\("step":[0-9]*\).*\("loss":[^,]*,"lm":[^,]*,"aux":[^,]*,"z":[^,]*,"lr":[^,]*,"grad_norm":[^,]*\).*\("moe_imbalance":[^}]*\).*/\1 \2 \3/'
}

# same_run DIR: DIR's losses and final checkpoint equal the straight run's.
same_run() {
  local dir=$1
  losses straight >straight.losses
  losses "$dir" >"$dir.losses"
  [ "$(wc -l <straight.losses)" -eq "$STEPS" ] || fail "straight run logged $(wc -l <straight.losses) steps, expected $STEPS"
  diff straight.losses "$dir.losses" >"$dir.diff" || { fail "$dir: per-step losses differ from the straight run:"; head -5 "$dir.diff"; }
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "$(ckpt straight $STEPS)/$f" "$(ckpt "$dir" $STEPS)/$f" || fail "$dir: final $f differs from the straight run's"
  done
}

# --- help
help=$("$FIVEFOLD" train --help)
for flag in --resume --save-interval --keep-last checkpoint.interval checkpoint.keep_last --tokenizer; do
  grep -qF -- "$flag" <<<"$help" || fail "train --help lacks $flag"
done

# --- 1. straight
train_one --out straight >straight.out 2>&1 || { cat straight.out; echo "FAIL: straight run"; exit 1; }
[ -d "$(ckpt straight $STEPS)" ] || fail "the straight run saved no final checkpoint"

# --- 1. killed with SIGKILL after a checkpoint, then resumed. The run saves
# every step and holds after step 4, before saving it (the test hold of
# train/stop_request.h), so the kill lands mid-run after step 3's
# checkpoint whatever the machine's speed.
mkdir -p hold
# Started directly (not through a function) so that $! is fivefold itself.
FIVEFOLD_TEST_HOLD_AFTER_STEP="4:$WORK/hold" "$FIVEFOLD" train --config run.json --no-progress --out killed \
  --save-interval 1 >killed.out 2>&1 &
BG_PID=$!
for _ in $(seq 1 3000); do
  [ -f hold/rank-0 ] && break
  kill -0 "$BG_PID" 2>/dev/null || break
  sleep 0.1
done
[ -f hold/rank-0 ] || { tail -5 killed.out; fail "the run did not reach its hold after step 4"; }
kill -9 "$BG_PID" 2>/dev/null
wait "$BG_PID" 2>/dev/null
code=$?
BG_PID=
[ "$code" -eq 137 ] || fail "the held run did not end by SIGKILL (exit $code)"
[ -d "$(ckpt killed 3)" ] || fail "the killed run saved no step-3 checkpoint"
[ -d "$(ckpt killed 4)" ] && fail "the killed run saved step 4, after which it was held"
newest=$(ls killed/checkpoints | grep '^step-' | sort | tail -n 1)
echo "killed after $newest"
out=$(train_one --out killed --save-interval 1 --resume 2>&1) || { echo "$out" | tail -5; fail "resume after SIGKILL failed"; }
grep -qF "resumed  from killed/checkpoints/" <<<"$out" || fail "resume did not say where it resumed from"
same_run killed
# Each step appears once in the resumed metrics; keep_last held 3 checkpoints.
[ "$(grep -c '"type":"train"' killed/metrics.jsonl)" -eq "$STEPS" ] || fail "killed/metrics.jsonl does not hold each step once"
[ "$(ls killed/checkpoints | grep -c '^step-')" -eq 3 ] || fail "keep_last 3 left $(ls killed/checkpoints | tr '\n' ' ')"

# --- 2. a crash in the middle of writing the third checkpoint (step 15)
code=0
FIVEFOLD_TEST_CRASH_IN_CHECKPOINT=3 train_one --out crashed --save-interval 5 >crashed.out 2>&1 || code=$?
[ "$code" -eq "$CRASH_EXIT" ] || fail "the crash hook did not end the run (exit $code)"
ls -a crashed/checkpoints/ | grep -q '^\.tmp-step-00000015-' || fail "no temporary directory of step 15 was left behind"
[ -d "$(ckpt crashed 15)" ] && fail "a checkpoint killed while being written became step-00000015"
out=$(train_one --out crashed --save-interval 5 --resume 2>&1) || { echo "$out" | tail -5; fail "resume after a crash in a checkpoint failed"; }
grep -qF "resumed  from crashed/checkpoints/step-00000010 at step 10" <<<"$out" || fail "did not resume from step 10 after the crash"
ls -a crashed/checkpoints/ | grep -q '^\.tmp-step' && fail "the crashed writer's temporary directory was not cleaned up"
same_run crashed

# --- 3. a damaged newest checkpoint is skipped with a warning
truncate -s 1000 "$(ckpt crashed $STEPS)/model.safetensors"
out=$(train_one --out crashed --save-interval 5 --resume --steps $((STEPS + 2)) 2>&1) || { echo "$out" | tail -5; fail "resume past a damaged checkpoint failed"; }
grep -qF "warning: checkpoint crashed/checkpoints/step-000000$STEPS is invalid" <<<"$out" || fail "no warning about the damaged checkpoint"
grep -qF "model.safetensors: 1000 bytes" <<<"$out" || fail "the warning does not name the damaged file"
grep -qF "resumed  from crashed/checkpoints/step-00000035" <<<"$out" || fail "did not fall back to step 35"

# --- 3. Ctrl-C (SIGINT) stops after the current step and saves a checkpoint
"$FIVEFOLD" train --config run.json --no-progress --out stopped --steps 100000 >stopped.out 2>&1 &
BG_PID=$!
for _ in $(seq 1 3000); do
  grep -q '"type":"train"' stopped/metrics.jsonl 2>/dev/null && break
  sleep 0.01
done
kill -INT "$BG_PID"
wait "$BG_PID"
code=$?
BG_PID=
[ "$code" -eq 0 ] || fail "a run stopped by SIGINT exited with $code"
stopped_at=$(sed -n 's/^stopped by SIGINT after step \([0-9]*\) of .*/\1/p' stopped.out)
if [ -z "$stopped_at" ]; then
  fail "no 'stopped by SIGINT' line after SIGINT"
else
  [ -f "$(ckpt stopped "$stopped_at")/state.json" ] || fail "no checkpoint at step $stopped_at after SIGINT"
  out=$(train_one --out stopped --steps $((stopped_at + 2)) --resume 2>&1) || fail "resume after SIGINT failed: $out"
  [ -d "$(ckpt stopped $((stopped_at + 2)))" ] || fail "the run resumed after SIGINT did not reach step $((stopped_at + 2))"
fi

# --- 3. mistakes
out=$(train_one --out straight 2>&1) && fail "training into a directory with checkpoints succeeded"
grep -qF -- "--resume" <<<"$out" || fail "no hint to pass --resume: $out"
out=$("$FIVEFOLD" train --config run-wide.json --out straight --resume --steps $((STEPS + 1)) 2>&1) && fail "resume with another model succeeded"
grep -qF "hidden_size is 48 in the checkpoint but 64" <<<"$out" || fail "model mismatch message: $out"
out=$(train_one --out nothing-here --resume 2>&1) && fail "resume without checkpoints succeeded"
grep -qF "no checkpoint in nothing-here" <<<"$out" || fail "missing-checkpoint message: $out"
out=$(train_one --out straight --resume "$(ckpt straight $STEPS)" 2>&1) || fail "resume of a finished run failed: $out"
grep -qF "nothing to train" <<<"$out" || fail "resume at the last step did not say there is nothing to do: $out"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all resume checks passed"
