#!/usr/bin/env bash
# The documented upcycling workflow through the real binary: tokenize a small
# text, train a tiny dense model, `fivefold upcycle` its run directory, then
# `fivefold train --config OUT/run.json --resume` (and the --resume PATH
# form). The resumed run starts at step 0 with the dense model's validation
# loss (topk_then_softmax: exact), trains to --steps and saves; the dense
# control resumes the same way. The command exists: a failing
# `upcycle --help` is a failure, not a reason to skip.
# Usage: workflow_test.sh path/to/fivefold
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-upcycle-workflow-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if ! "$FIVEFOLD" upcycle --help >"$WORK/help.txt" 2>&1; then
  cat "$WORK/help.txt"
  echo "FAIL: '$FIVEFOLD upcycle --help' failed"
  exit 1
fi

grep -A3 -- "--norm-topk-prob" "$WORK/help.txt" | grep -q "export" ||
  fail "upcycle --help does not say that --norm-topk-prob makes an exportable model"

# run LOG COMMAND...: runs it, keeping stdout+stderr in LOG; fails the test on a non-zero exit.
run() {
  local log=$1; shift
  "$@" >"$log" 2>&1 || { fail "exit $? from: $*"; tail -n 15 "$log"; }
}
# The val loss of the eval line at STEP in a training log.
val_at() { sed -n "s/^eval step $2\/[0-9]* | val loss \([0-9.]*\) .*/\1/p" "$1" | tail -n 1; }

for i in $(seq 1 300); do echo "And the evening and the morning were the day $i; and it was good, verse $i."; done >"$WORK/text.txt"
run "$WORK/tok.log" "$FIVEFOLD" tokenize --byte-level --input "$WORK/text.txt" --out "$WORK/shards" --val-fraction 0.1
cat >"$WORK/dense.json" <<'JSON'
{"model": {"model_type": "llama", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64},
 "training": {"micro_batch_size": 4, "seq_len": 32, "steps": 6, "lr": 0.01, "warmup_steps": 2,
              "eval_batches": 2, "log_interval": 100, "threads": 1, "peak_gflops": 100},
 "data": {"train": "shards/train.bin", "val": "shards/val.bin"},
 "checkpoint": {"keep_last": 2},
 "out": "dense-run"}
JSON
run "$WORK/dense.log" "$FIVEFOLD" train --config "$WORK/dense.json" --no-progress
dense_val=$(val_at "$WORK/dense.log" 6)
[ -n "$dense_val" ] || fail "no final val loss in the dense log"

# Upcycle the run directory (its newest checkpoint), then resume from the
# directory it wrote, with the run config it wrote.
run "$WORK/up.log" "$FIVEFOLD" upcycle --checkpoint "$WORK/dense-run" --out "$WORK/moe" --experts 4 --topk 2 \
  --granularity 2 --router-order topk_then_softmax
grep -q "step 6, dense" "$WORK/up.log" || fail "upcycle did not take the newest checkpoint (step 6)"
grep -q "export   fivefold export --format hf takes it" "$WORK/up.log" ||
  fail "upcycle does not say that its topk_then_softmax MoE exports"
run "$WORK/moe.log" "$FIVEFOLD" train --config "$WORK/moe/run.json" --resume --steps 4 --no-progress
grep -q "resumed  from $WORK/moe/checkpoints/step-00000000 at step 0 of 4" "$WORK/moe.log" ||
  fail "the MoE run did not resume from step 0"
grep -q "4 experts, top-2, expert ffn 32" "$WORK/moe.log" || fail "the resumed model is not the upcycled MoE"
moe_val=$(val_at "$WORK/moe.log" 0)
[ "$moe_val" = "$dense_val" ] || fail "upcycled val loss at step 0 is $moe_val, the dense model's $dense_val"
[ -f "$WORK/moe/checkpoints/step-00000004/state.json" ] || fail "no final checkpoint of the MoE run"
grep -q '"type":"eval","step":4,' "$WORK/moe/metrics.jsonl" || fail "metrics.jsonl lacks the final evaluation"

# --resume PATH with a run config whose model matches; output elsewhere.
run "$WORK/moe2.log" "$FIVEFOLD" train --config "$WORK/moe/run.json" --resume "$WORK/moe/checkpoints/step-00000000" \
  --out "$WORK/moe-copy" --steps 2 --no-progress
[ -f "$WORK/moe-copy/checkpoints/step-00000002/state.json" ] || fail "--resume PATH --out DIR saved nothing"
# The dense config does not match the MoE checkpoint: a clear refusal.
"$FIVEFOLD" train --config "$WORK/dense.json" --resume "$WORK/moe" --out "$WORK/mismatch" --no-progress \
  >"$WORK/mismatch.log" 2>&1 && fail "resuming the MoE checkpoint with the dense config succeeded"
grep -q "the model configs differ" "$WORK/mismatch.log" || { fail "the mismatch is not explained"; cat "$WORK/mismatch.log"; }

# The dense control resumes the same way and starts at the same loss.
run "$WORK/ctl-up.log" "$FIVEFOLD" upcycle --checkpoint "$WORK/dense-run" --out "$WORK/control" --dense-control
run "$WORK/ctl.log" "$FIVEFOLD" train --config "$WORK/control/run.json" --resume --steps 2 --no-progress
[ "$(val_at "$WORK/ctl.log" 0)" = "$dense_val" ] || fail "the dense control does not start at the dense val loss"

if [ "$failures" -eq 0 ]; then
  echo "upcycle workflow: all checks passed"
  exit 0
fi
echo "upcycle workflow: $failures failure(s)"
exit 1
