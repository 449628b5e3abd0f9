#!/usr/bin/env bash
# The fused elementwise kernels as a runtime switch (kern/fusion.h): a
# SwiGLU model trained with --fuse-swiglu 0 and a GPT-2 with
# --fuse-bias-gelu 0, and both with --fuse-norm-residual 0 (RMSNorm and
# LayerNorm after the residual adds; the SwiGLU model also under full
# recomputation), end bit for bit where the fused runs do (identical
# model and optimizer files, identical losses: the unfused chains run the
# same float operations in the same order), the resolved config records
# the switch, and `fivefold train --plan` applies a plan's "fusion"
# (`fivefold plan --fuse-bias-gelu 0 --out`, `--fuse-norm-residual 0`).
# One rank, no MPI.
# Usage: fusion_test.sh path/to/fivefold
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MODE=fusion
. "$(dirname "$0")/../parallel/lib.sh"
work_dir fusion
make_corpus
dense_json dense.json 2
gpt2_json gpt2.json 2
run_json run-dense.json dense.json steps=3 interval=3
run_json run-gpt2.json gpt2.json steps=3 interval=3

identical() { # RUN REF
  local f
  for f in model optimizer; do
    cmp -s "$(ckpt "$1" 3)/$f.safetensors" "$(ckpt "$2" 3)/$f.safetensors" ||
      fail "$1: $f.safetensors differs from $2's (expected bit-identical)"
  done
  $PY "$COMPARE" losses "$1" "$2" 0 || fail "$1: losses differ from $2's"
}
switch_is() { # RUN FIELD VALUE
  [ "$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["training"][sys.argv[2]])' "$1/config.json" "$2")" = "$3" ] ||
    fail "$1/config.json: training.$2 is not $3"
}

train 0 dense-fused dense && train 0 dense-unfused dense --fuse-swiglu 0 && identical dense-unfused dense-fused
switch_is dense-fused fuse_swiglu 1
switch_is dense-unfused fuse_swiglu 0
train 0 gpt2-fused gpt2 && train 0 gpt2-unfused gpt2 --fuse-bias-gelu 0 && identical gpt2-unfused gpt2-fused
switch_is gpt2-unfused fuse_bias_gelu 0
train 0 dense-unfused-norm dense --fuse-norm-residual 0 && identical dense-unfused-norm dense-fused
switch_is dense-fused fuse_norm_residual 1
switch_is dense-unfused-norm fuse_norm_residual 0
# with recomputation: the rerun blocks compute their own norms
train 0 dense-unfused-norm-rc dense --fuse-norm-residual 0 --recompute full && identical dense-unfused-norm-rc dense-fused
train 0 gpt2-unfused-norm gpt2 --fuse-norm-residual 0 && identical gpt2-unfused-norm gpt2-fused
train 0 gpt2-unfused-all gpt2 --fuse-norm-residual 0 --fuse-bias-gelu 0 && identical gpt2-unfused-all gpt2-fused

"$FIVEFOLD" plan --model gpt2.json --cluster dgx-h100 --gpus 1 --seq 16 --global-batch 2 --dtype fp32 --top 1 \
  --fuse-bias-gelu 0 --out plan.json >plan.log 2>&1 || { cat plan.log; fail "plan --fuse-bias-gelu 0"; }
[ "$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["fusion"]["bias_gelu"])' plan.json)" = False ] ||
  fail "plan.json: fusion.bias_gelu is not false"
train 0 gpt2-planned gpt2 --plan plan.json && switch_is gpt2-planned fuse_bias_gelu 0 && identical gpt2-planned gpt2-fused
"$FIVEFOLD" plan --model dense.json --cluster dgx-h100 --gpus 1 --seq 16 --global-batch 2 --dtype fp32 --top 1 \
  --fuse-norm-residual 0 --out plan-norm.json >plan-norm.log 2>&1 || { cat plan-norm.log; fail "plan --fuse-norm-residual 0"; }
[ "$($PY -c 'import json,sys; f=json.load(open(sys.argv[1]))["fusion"]; print(f["norm_residual"], f["swiglu"])' plan-norm.json)" = "False True" ] ||
  fail "plan-norm.json: fusion.norm_residual is not false (or fusion.swiglu not true)"
train 0 dense-planned dense --plan plan-norm.json && switch_is dense-planned fuse_norm_residual 0 &&
  identical dense-planned dense-fused
if "$FIVEFOLD" train --config run-gpt2.json --out bad --no-progress --fuse-bias-gelu 2 >bad.log 2>&1; then
  fail "--fuse-bias-gelu 2 was accepted"
fi
grep -q "fuse-bias-gelu\|fuse_bias_gelu" bad.log || { cat bad.log; fail "no clear message for --fuse-bias-gelu 2"; }
if "$FIVEFOLD" train --config run-dense.json --out bad2 --no-progress --fuse-norm-residual 2 >bad2.log 2>&1; then
  fail "--fuse-norm-residual 2 was accepted"
fi
grep -q "fuse-norm-residual\|fuse_norm_residual" bad2.log || { cat bad2.log; fail "no clear message for --fuse-norm-residual 2"; }
finish fusion_test
