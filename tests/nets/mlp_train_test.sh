#!/usr/bin/env bash
# The MLP (nets/mlp.h) through `fivefold train`, the trainer that runs the
# transformer: one rank trains and checkpoints; a run resumed from its
# step-3 checkpoint ends bit for bit where it did (same losses, identical
# model and optimizer files); under mpirun, 2 data-parallel ranks and 2
# ranks with ZeRO-1 (--distributed-optimizer 1, also resumed from the
# one-rank checkpoint) train the same model as one rank (tests/parallel:
# compare_runs.py within fp32 reordering tolerance); a layout the MLP cannot
# run is refused.
# Usage: mlp_train_test.sh path/to/fivefold path/to/mpiexec
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=mlp
. "$(dirname "$0")/../parallel/lib.sh"
. "$(dirname "$0")/net_runs.sh"
work_dir mlp

cat >run-mlp.json <<'JSON'
{"model": {"family": "mlp", "inputs": 12, "hidden": [24, 16], "classes": 3},
 "training": {"micro_batch_size": 4, "grad_accum_steps": 4, "steps": 6, "lr": 0.02, "warmup_steps": 2,
              "weight_decay": 0.05, "grad_clip": 1.0, "seed": 11, "log_interval": 1, "eval_interval": 3,
              "eval_batches": 4},
 "checkpoint": {"interval": 3, "keep_last": 0}}
JSON

train 0 one mlp || exit 1
grep -q "model    mlp: 12 inputs" one.log || fail "the banner does not describe the mlp"
# The log line names the network's own metrics and unit (nets/network.h).
grep -Eq "^step 6/6 \| loss [0-9.]+ \(accuracy [0-9.]+\) \|.* samples/s \|" one.log ||
  fail "the log line lacks the mlp's accuracy or its samples/s"
grep -q '"accuracy":.*"samples_per_s":' one/metrics.jsonl || fail "metrics.jsonl lacks accuracy or samples_per_s"
[ -f "$(ckpt one 6)/model.safetensors" ] || fail "no final checkpoint"
grep -q '"family":"mlp"' "$(ckpt one 6)/state.json" || grep -q '"family":[[:space:]]*"mlp"' "$(ckpt one 6)/state.json" ||
  fail "the checkpoint does not record the mlp's config"

# Resume from step 3 (bit for bit), DP2, ZeRO-1 and a resumed ZeRO-1 run against one rank (net_runs.sh).
resume_and_replicas mlp

refused 2 mlp "an mlp trains data-parallel only" --tp 2
finish mlp_train_test
