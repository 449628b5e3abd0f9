#!/usr/bin/env bash
# A vision network (nets/vision.h) on a small part of Fashion-MNIST through
# `fivefold train`: one rank trains, checkpoints, reports accuracy,
# multiplications per image, images/s and the test part; a run resumed from
# its step-3 checkpoint ends bit for bit where it did (same losses,
# identical model and optimizer files); under mpirun 2 and 4 data-parallel
# ranks and 2 ranks with ZeRO-1 (also resumed) train the same model as one
# rank (tests/parallel: compare_runs.py within fp32 reordering tolerance);
# --trace records the run; a missing or malformed data set and a bad layer
# are refused with the file or field named. The data set must be
# installed (scripts/install-deps.sh): its absence is a failure.
# Usage: vision_train_test.sh path/to/fivefold path/to/mpiexec
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=vision
. "$(dirname "$0")/../parallel/lib.sh"
. "$(dirname "$0")/net_runs.sh"
work_dir vision

vision_json() { # FILE DATA_DIR LAYER1_TYPE
  cat >"$1" <<JSON
{"model": {"family": "vision", "input": [1, 28, 28], "classes": 10, "layers": [
   {"type": "conv2d", "out_channels": 3, "kernel": 3, "stride": 2}, {"type": "$3"},
   {"type": "maxpool", "kernel": 2}, {"type": "linear", "out": 10}]},
 "data": {"dir": "$2", "max_train_images": 256, "max_val_images": 40, "max_test_images": 30},
 "training": {"micro_batch_size": 4, "grad_accum_steps": 4, "steps": 6, "lr": 0.01, "warmup_steps": 2,
              "weight_decay": 0.05, "grad_clip": 1.0, "seed": 5, "log_interval": 1, "eval_interval": 3,
              "threads": 1, "peak_gflops": 50},
 "checkpoint": {"interval": 3, "keep_last": 0}}
JSON
}
vision_json run-vision.json /usr/share/datasets/fashion-mnist relu

train 0 one vision --trace one.trace.json || exit 1
grep -q "model    vision: input 1x28x28 -> conv2d 3x13x13 -> relu" one.log ||
  fail "the banner does not describe the net"
# 3 x 13 x 13 outputs of 9 taps (4,563), then 3 x 6 x 6 = 108 -> 10 (1,080)
grep -q "5,643 multiplications" one.log || fail "the banner does not state 5,643 multiplications per image"
grep -q "img/s" one.log || fail "the log line does not count images/s"
grep -q '"val_accuracy"' one/metrics.jsonl || fail "metrics.jsonl has no val_accuracy"
grep -q '"type":"test".*"images":30' one/metrics.jsonl || fail "no test-part evaluation of 30 images"
grep -q "^test step 6/6 | test loss" one.log || fail "no test line"
traced_every_action one.trace.json 6
grep -q '"family":[[:space:]]*"vision"' "$(ckpt one 6)/state.json" || fail "the checkpoint does not record the net"

# Resume from step 3 (bit for bit), DP2, ZeRO-1 and a resumed ZeRO-1 run against one rank (net_runs.sh).
resume_and_replicas vision
train 4 dp4 vision --grad-accum 1 && same dp4 one 6

# Refusals that name what is wrong (the data and layer ones on one process, without mpirun).
refused 2 vision "a vision network trains data-parallel only" --tp 2
refused0() { # MODEL EXPECTED-TEXT
  if "$FIVEFOLD" train --config "run-$1.json" --out bad --no-progress >bad.log 2>&1; then
    fail "run-$1.json was accepted"
  fi
  grep -q "$2" bad.log || { cat bad.log; fail "no clear message for run-$1.json (expected '$2')"; }
}
mkdir -p bad-idx && echo "not an idx file" | gzip >bad-idx/train-images-idx3-ubyte.gz
vision_json run-badidx.json "$WORK/bad-idx" relu
refused0 badidx "bad-idx/train-images-idx3-ubyte.gz: magic number"
vision_json run-nodata.json "$WORK/no-such-dir" relu
refused0 nodata "no-such-dir/train-images-idx3-ubyte.gz: cannot open"
vision_json run-badlayer.json /usr/share/datasets/fashion-mnist reluu
refused0 badlayer "run-badlayer.json: model.layers\[1\].type: unknown layer type \"reluu\""
finish vision_train_test
