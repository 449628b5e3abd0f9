#!/usr/bin/env bash
# Tropical networks through `fivefold train` on a small part of
# Fashion-MNIST. The TCNN of configs/vision/tcnn-max-sum.json (its model
# section as shipped, short test training settings): resumed from its
# step-3 checkpoint it ends bit for bit where it did; 2 and 4 data-parallel
# ranks, 2 ranks with ZeRO-1 and 2 with ZeRO-1 resumed train the same model
# as one rank (net_runs.sh). And re-centring reaches the runtime: after a
# few steps of configs/vision/mmp-norm.json every weight row of its
# max-plus and min-plus layers has mean 0 (the after_update hook ran after
# every update), while those of mmp.json, without re-centring, do not.
# Usage: tropical_train_test.sh path/to/fivefold path/to/mpiexec path/to/configs/vision
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
CONFIGS=$(cd "$3" && pwd)
MODE=tropical
. "$(dirname "$0")/../parallel/lib.sh"
. "$(dirname "$0")/net_runs.sh"
TORCH_REF=$(cd "$(dirname "$0")/../torch_ref" && pwd)
work_dir tropical

# short_run CONFIG NAME: run-NAME.json with CONFIG's model and 6 short steps
# (global batch 16 as 4 micro-batches of 4, checkpoints at 3 and 6).
short_run() {
  $PY - "$CONFIGS/$1.json" "run-$2.json" <<'PYEOF' || fail "writing run-$2.json"
import json, sys
model = json.load(open(sys.argv[1]))["model"]
json.dump({"model": model,
           "data": {"max_train_images": 256, "max_val_images": 40, "max_test_images": 30},
           "training": {"micro_batch_size": 4, "grad_accum_steps": 4, "steps": 6, "lr": 0.02, "warmup_steps": 2,
                        "grad_clip": 1.0, "seed": 7, "log_interval": 1, "eval_interval": 3, "threads": 1},
           "checkpoint": {"interval": 3, "keep_last": 0}}, open(sys.argv[2], "w"))
PYEOF
}

short_run tcnn-max-sum tcnn
train 0 one tcnn || finish tropical_train_test
grep -q "tropical_conv2d 4x14x14 -> tropical_conv2d 4x7x7 -> linear" one.log || fail "the banner does not show the TCNN"
grep -q " 1,960 multiplications" one.log || fail "the banner does not state the linear layer's 1,960 multiplications"
resume_and_replicas tcnn
train 4 dp4 tcnn --grad-accum 1 && same dp4 one 6

short_run mmp-norm mmpnorm
short_run mmp mmp
mkdir -p norm plain
train 0 norm mmpnorm && train 0 plain mmp
TORCH_REF=$TORCH_REF $PY - "$(ckpt norm 6)/model.safetensors" "$(ckpt plain 6)/model.safetensors" <<'PYEOF' ||
import os, sys
sys.path.insert(0, os.environ["TORCH_REF"])
import safetensors_io
norm, _ = safetensors_io.load(sys.argv[1])
plain, _ = safetensors_io.load(sys.argv[2])
# mmp-norm: linear, standardize, maxplus (2), standardize, minplus (4); mmp: linear, maxplus (1), minplus (2)
for name in ("layers.2.weight", "layers.4.weight"):
    worst = norm[name].double().mean(dim=1).abs().max().item()
    if worst > 1e-5:
        sys.exit(f"mmp-norm {name}: a row has mean {worst:.3g}, expected 0 after re-centring")
for name in ("layers.1.weight", "layers.2.weight"):
    worst = plain[name].double().mean(dim=1).abs().max().item()
    if worst < 1e-3:
        sys.exit(f"mmp {name}: every row mean is below {worst:.3g}: the check cannot tell re-centring apart")
PYEOF
  fail "re-centring did not reach the checkpointed weights"
finish tropical_train_test
