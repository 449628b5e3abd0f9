# shellcheck shell=bash
# The checks every network of nets/ passes through `fivefold train`, shared
# by tests/nets/*_train_test.sh; sourced after tests/parallel/lib.sh.
#
# resume_and_replicas MODEL: run-MODEL.json, already trained into `one`
# (6 steps, checkpoints at 3 and 6, a global batch of 4 micro-batches on
# one rank), resumed from step 3 in a fresh directory ends bit for bit where
# it did (same losses, identical model and optimizer files); 2 data-parallel
# ranks, 2 with ZeRO-1 and 2 with ZeRO-1 resumed from the one-rank step-3
# checkpoint train the same model as one rank.
resume_and_replicas() {
  local model=$1 f
  mkdir -p resumed/checkpoints && cp -r "$(ckpt one 3)" resumed/checkpoints/
  train 0 resumed "$model" --resume || return 1
  for f in model optimizer; do
    cmp -s "$(ckpt one 6)/$f.safetensors" "$(ckpt resumed 6)/$f.safetensors" ||
      fail "the resumed run's $f.safetensors differs from the uninterrupted run's"
  done
  $PY "$COMPARE" losses resumed one 0 || fail "the resumed run's losses differ from the uninterrupted run's"
  train 2 dp2 "$model" --grad-accum 2 && same dp2 one 6
  grep -q "parallel dp 2" dp2.log || fail "the DP run's banner does not say dp 2"
  train 2 zero2 "$model" --grad-accum 2 --distributed-optimizer 1 --bucket-mb 0.001 && same zero2 one 6
  grep -q "ZeRO-1" zero2.log || fail "the ZeRO-1 run's banner does not say so"
  mkdir -p zres/checkpoints && cp -r "$(ckpt one 3)" zres/checkpoints/
  train 2 zres "$model" --grad-accum 2 --distributed-optimizer 1 --resume && same zres one 6
}

# traced_every_action TRACE STEPS: the trace holds a timed span (ph "X") for
# every action of the program it records, in each of the STEPS iterations,
# and no action id outside the program.
traced_every_action() {
  $PY - "$1" "$2" <<'PY' || fail "$1 does not time every action of its program in each of $2 iterations"
import collections, json, sys
t = json.load(open(sys.argv[1]))
steps = int(sys.argv[2])
acts = t["otherData"]["program"]["ranks"][0]["actions"]
ids = {a["id"] for a in acts}
spans = [e for e in t["traceEvents"] if e.get("ph") == "X" and e.get("pid") == 0 and "id" in e.get("args", {})]
count = collections.Counter(e["args"]["id"] for e in spans)
assert set(count) == ids, f"actions timed {sorted(count)}, program {sorted(ids)}"
assert all(c == steps for c in count.values()), f"spans per action {dict(count)}, expected {steps}"
PY
}
