#!/usr/bin/env bash
# The deblurring GAN (nets/gan.h) on a tiny face set through `fivefold
# train`: the image set is made by `fivefold images --lfw` (scikit-image's
# LFW crops, resized to 16 x 16); one rank trains 6 steps of both phases,
# logs d_loss, g_adv, content and psnr, writes val_psnr / val_ssim and the
# blurred input's to metrics.jsonl, checkpoints both networks and both
# optimizer states; a run resumed from its step-3 checkpoint ends bit for
# bit where it did; 2 data-parallel ranks, 2 with ZeRO-1 (per parameter
# group) and a resumed ZeRO-1 run train the same networks as one rank
# (net_runs.sh); --trace records the run; a bad field and a missing image
# directory are refused with the file and field named; `fivefold deblur`
# of an 18 x 18 PGM writes an 18 x 18 PGM. WGAN-GP with 2 critic steps:
# its log line, resume bit for bit and DP2 against one rank (4 steps).
# Usage: gan_train_test.sh path/to/fivefold path/to/mpiexec
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=gan
. "$(dirname "$0")/../parallel/lib.sh"
. "$(dirname "$0")/net_runs.sh"
work_dir gan

"$FIVEFOLD" images --out faces --lfw --size 16 >images.log 2>&1 || { cat images.log; fail "fivefold images --lfw"; }

gan_json() { # FILE DATA_DIR GENERATOR_FIELDS
  cat >"$1" <<JSON
{"model": {"family": "gan", "channels": 1, "generator": {$3}, "critic": {"filters": 4, "layers": 2},
           "content_weight": 100},
 "data": {"dir": "$2", "kernel_size": 5, "max_train_images": 40, "max_val_images": 6, "flip": true, "shift": 1},
 "training": {"micro_batch_size": 2, "grad_accum_steps": 4, "steps": 6, "lr": 0.001, "warmup_steps": 2,
              "weight_decay": 0.01, "grad_clip": 1.0, "seed": 5, "log_interval": 1, "eval_interval": 3,
              "threads": 1, "peak_gflops": 50},
 "checkpoint": {"interval": 3, "keep_last": 0}}
JSON
}
gan_json run-gan.json "$WORK/faces" '"filters": 4, "blocks": 1, "downsamples": 2'

train 0 one gan --trace one.trace.json || exit 1
grep -q "model    gan (lsgan): generator conv2d 4x16x16" one.log || fail "the banner does not describe the gan"
grep -q "two groups stepped in turn" one.log || fail "the banner does not name the two parameter groups"
grep -q "^step 6/6 | loss [0-9.]* (d_loss [0-9.]* g_adv [0-9.]* content [0-9.]* psnr [0-9.]*)" one.log ||
  fail "the log line lacks the gan's losses"
for f in val_psnr val_ssim val_blurred_psnr val_blurred_ssim d_loss g_adv; do
  grep -q "\"$f\"" one/metrics.jsonl || fail "metrics.jsonl has no $f"
done
grep -q "^eval step 6/6 | val_psnr" one.log || fail "no eval line with val_psnr"
traced_every_action one.trace.json 6
grep -q '"family":[[:space:]]*"gan"' "$(ckpt one 6)/state.json" || fail "the checkpoint does not record the gan"
$PY - "$(ckpt one 6)/model.safetensors" "$(ckpt one 6)/optimizer.safetensors" <<'PY' || fail "the checkpoint lacks a network"
import json, struct, sys
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    names = " ".join(header)
    if "critic.layers.0.weight" not in names or "generator.layers.0.weight" not in names:
        sys.exit(f"{path}: no critic or no generator tensors")
PY

# fivefold deblur on an image of another size (18 x 18, not a multiple of the stride 4), PGM in and
# out: it writes an image of the same size; six steps promise no gain, only that the output's PSNR
# stays within 3 dB of the blurred input's (the generator starts as the identity).
"$FIVEFOLD" images --out faces20 --lfw --size 20 >>images.log 2>&1 || fail "fivefold images --size 20"
"$FIVEFOLD" images --out faces18 --lfw --size 18 >>images.log 2>&1 || fail "fivefold images --size 18"
sharp18=$(ls faces18/test/*.png | head -1)
"$FIVEFOLD" blur --input "$sharp18" --out blurred18.pgm --kernel-size 5 --seed 3 >blur.log 2>&1 || fail "fivefold blur"
if "$FIVEFOLD" deblur --checkpoint one --input blurred18.pgm --out deblurred18.pgm --reference "$sharp18" \
  >deblur.log 2>&1; then
  [ "$(head -c 9 deblurred18.pgm | tr '\n' ' ')" = "P5 18 18 " ] || fail "deblur did not write an 18 x 18 PGM"
  grep -q "(18 x 18, 1 channel) -> deblurred18.pgm .*(padded to 20 x 20)" deblur.log ||
    fail "deblur did not pad to the stride"
  $PY - deblur.log <<'PY' || fail "deblur lowered the PSNR by more than 3 dB"
import re, sys
m = re.search(r"input PSNR ([0-9.]+) dB .* output PSNR ([0-9.]+) dB", open(sys.argv[1]).read())
print("deblur PSNR: input", m.group(1), "output", m.group(2))
sys.exit(0 if m and float(m.group(2)) > float(m.group(1)) - 3 else 1)
PY
else
  cat deblur.log; fail "fivefold deblur"
fi
"$FIVEFOLD" deblur --checkpoint one --input no-such.png --out x.png >deblur-bad.log 2>&1 &&
  fail "deblur of a missing image was accepted"
grep -q "no-such.png" deblur-bad.log || fail "deblur's error does not name the missing image"

# Resume from step 3 (bit for bit), DP2, ZeRO-1 and a resumed ZeRO-1 run against one rank (net_runs.sh).
resume_and_replicas gan

# WGAN-GP with 2 critic phases per step (each on its own batch), Adam's beta1 0 / beta2 0.9: the log
# line keeps both losses and the penalty; a run resumed from step 2 ends bit for bit where it did, and
# 2 data-parallel ranks train what one rank does (4 short steps).
cat >run-wgan.json <<JSON
{"model": {"family": "gan", "channels": 1, "generator": {"filters": 4, "blocks": 1, "downsamples": 2},
           "critic": {"filters": 4, "layers": 2}, "loss": "wgan-gp", "gp_weight": 10, "critic_steps": 2,
           "content_weight": 100},
 "data": {"dir": "$WORK/faces", "kernel_size": 5, "max_train_images": 40, "max_val_images": 6},
 "training": {"micro_batch_size": 2, "grad_accum_steps": 2, "steps": 4, "lr": 0.001, "warmup_steps": 1,
              "beta1": 0, "beta2": 0.9, "weight_decay": 0, "grad_clip": 1.0, "seed": 5, "log_interval": 1,
              "eval_interval": 4, "threads": 1},
 "checkpoint": {"interval": 2, "keep_last": 0}}
JSON
train 0 wg wgan --trace wg.trace.json || exit 1
grep -q "model    gan (wgan-gp, gradient penalty 10)" wg.log || fail "the banner does not say wgan-gp"
grep -q "2 critic phases on fresh batches, then generator phase" wg.log || fail "the banner does not name the critic steps"
grep -q "^step 4/4 | loss [-0-9.]* (d_loss [-0-9.]* g_adv [-0-9.]* content [0-9.]* psnr [0-9.]* gp [0-9.]*)" wg.log ||
  fail "the wgan-gp log line lacks its losses"
grep -q '"gp"' wg/metrics.jsonl || fail "metrics.jsonl has no gp"
$PY - wg.trace.json <<'PY' || fail "the traced program does not run two critic phases, then the generator phase"
import json, sys
prog = json.load(open(sys.argv[1]))["otherData"]["program"]
assert prog["config"].get("phase_repeats") == [2, 1], prog["config"]
acts = prog["ranks"][0]["actions"]
optims = [(a.get("group"), a.get("phase", a.get("group"))) for a in acts if a["kind"] == "OPTIM"]
assert optims == [(0, 0), (0, 1), (1, 2)], f"OPTIM (group, phase) {optims}"
PY
traced_every_action wg.trace.json 4
mkdir -p wgres/checkpoints && cp -r "$(ckpt wg 2)" wgres/checkpoints/
train 0 wgres wgan --resume || exit 1
for f in model optimizer; do
  cmp -s "$(ckpt wg 4)/$f.safetensors" "$(ckpt wgres 4)/$f.safetensors" ||
    fail "the resumed wgan-gp run's $f.safetensors differs from the uninterrupted run's"
done
$PY "$COMPARE" losses wgres wg 0 || fail "the resumed wgan-gp run's losses differ from the uninterrupted run's"
train 2 wgdp2 wgan --grad-accum 1 && same wgdp2 wg 4

# Refusals that name the file and the field, on one process.
refused0() { # MODEL EXPECTED-TEXT
  if "$FIVEFOLD" train --config "run-$1.json" --out bad --no-progress >bad.log 2>&1; then
    fail "run-$1.json was accepted"
  fi
  grep -q "$2" bad.log || { cat bad.log; fail "no clear message for run-$1.json (expected '$2')"; }
}
gan_json run-badfield.json "$WORK/faces" '"filters": 0'
refused0 badfield "run-badfield.json: model.generator.filters: expected an integer in 1..512"
gan_json run-nodata.json "$WORK/no-such-dir" '"filters": 4'
refused0 nodata "run-nodata.json: data.dir: .*no-such-dir/manifest.json"
gan_json run-badsize.json "$WORK/faces20" '"filters": 4, "downsamples": 3'
refused0 badsize "run-badsize.json: model: the images of .*faces20: gan: images of 20 x 20, expected sides that are multiples of 8"
finish gan_train_test
