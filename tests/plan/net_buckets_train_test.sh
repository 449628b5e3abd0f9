#!/usr/bin/env bash
# A vision network's bucket search through to training: `fivefold simulate
# --net --search-buckets --out` on LeNet-5 writes a plan whose chosen
# bucket size beats or equals the default on the simulator (on the nets
# runtime's terms one bucket; with reductions behind backward an interior
# count), `fivefold train --plan` on 2 ranks cuts the chosen buckets (the
# banner's count is the plan's) and trains the same model as one rank
# (tests/parallel/compare_runs.py within fp32 reordering tolerance), and a
# plan made for another network is refused naming its fingerprint. The
# data set must be installed (scripts/install-deps.sh).
# Usage: net_buckets_train_test.sh path/to/fivefold path/to/mpiexec
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
. "$(dirname "$0")/../parallel/lib.sh"
MODE=lenet5
work_dir net-buckets
DATA=/usr/share/datasets/fashion-mnist
[ -d "$DATA" ] || { echo "FAIL: $DATA is missing (scripts/install-deps.sh installs it)"; exit 1; }

# lr 0.001: AdamW normalises each element's gradient, so where one is near
# zero the ranks' fp32 summation order moves it by a share of lr; at 0.01
# that exceeded compare_runs' absolute tolerance on a few dense weights.
lenet_json() { # FILE LAST_DENSE_WIDTH
  cat >"$1" <<JSON
{"model": {"family": "vision", "input": [1, 28, 28], "classes": 10, "layers": [
   {"type": "conv2d", "out_channels": 6, "kernel": 5, "padding": 2}, {"type": "relu"}, {"type": "maxpool", "kernel": 2},
   {"type": "conv2d", "out_channels": 16, "kernel": 5}, {"type": "relu"}, {"type": "maxpool", "kernel": 2},
   {"type": "linear", "out": 120}, {"type": "relu"}, {"type": "linear", "out": $2}, {"type": "relu"},
   {"type": "linear", "out": 10}]},
 "data": {"dir": "$DATA", "max_train_images": 256, "max_val_images": 40, "max_test_images": 30},
 "training": {"micro_batch_size": 4, "grad_accum_steps": 4, "steps": 4, "lr": 0.001, "warmup_steps": 1,
              "grad_clip": 1.0, "seed": 5, "log_interval": 1, "eval_interval": 4, "threads": 1, "peak_gflops": 50},
 "checkpoint": {"interval": 4, "keep_last": 0}}
JSON
}
lenet_json run-lenet.json 84
lenet_json run-other.json 80

field() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }
plan() { # OVERLAP OUT
  "$FIVEFOLD" simulate --net run-lenet.json --cluster dgx-h100 --gpus 2 --mbs 4 --global-batch 16 --search-buckets \
    --dp-overlap "$1" --quiet --out "$2" >"$2.log" 2>&1 || { cat "$2.log"; fail "simulate --search-buckets (overlap $1)"; }
}
plan 0 runtime.plan.json
plan 1 overlap.plan.json
[ "$(field runtime.plan.json "d['buckets']['buckets']")" = 1 ] ||
  fail "on the runtime's terms (reduction after backward) the search should fuse the gradient into one bucket"
[ "$(field runtime.plan.json "d['buckets']['default_buckets']")" = 5 ] ||
  fail "the default should be the runtime's quarter of the gradient (5 buckets of 61,706 elements)"
B=$(field overlap.plan.json "d['buckets']['buckets']")
[ "$B" -gt 1 ] && [ "$B" -lt 64 ] || fail "with overlap 1 the search should pick an interior bucket count, got $B"
for p in runtime overlap; do
  [ "$(field $p.plan.json "d['prediction']['step_time_s'] <= d['buckets']['default_step_time_s']")" = True ] ||
    fail "$p: the chosen buckets are priced slower than the default"
done

train 0 one lenet || exit 1
train 2 planned lenet --plan overlap.plan.json && same planned one 4
grep -q "parallel dp 2 (mpi ranks), $B gradient bucket(s)" planned.log ||
  { grep "parallel dp" planned.log; fail "the planned run does not cut the plan's $B buckets"; }
train 2 fused lenet --plan runtime.plan.json && same fused one 4
grep -q "parallel dp 2 (mpi ranks), 1 gradient bucket(s)" fused.log || fail "the one-bucket plan did not run one bucket"

refused 2 other "the plan was made for network run-lenet.json" --plan overlap.plan.json
finish net_buckets_train_test
