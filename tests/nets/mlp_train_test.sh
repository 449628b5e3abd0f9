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

# Resume from step 3 in a fresh directory: bit for bit the same end.
resumed_matches one 3 6 mlp || exit 1

# Data parallel, plain and ZeRO-1, against one rank (same global batch of 16).
train 2 dp2 mlp --grad-accum 2 && same dp2 one 6
grep -q "parallel dp 2" dp2.log || fail "the DP run's banner does not say dp 2"
train 2 zero2 mlp --grad-accum 2 --distributed-optimizer 1 --bucket-mb 0.001 && same zero2 one 6
grep -q "ZeRO-1" zero2.log || fail "the ZeRO-1 run's banner does not say so"
mkdir -p zres/checkpoints && cp -r "$(ckpt one 3)" zres/checkpoints/
train 2 zres mlp --grad-accum 2 --distributed-optimizer 1 --resume && same zres one 6

refused 2 mlp "an mlp trains data-parallel only" --tp 2
finish mlp_train_test
