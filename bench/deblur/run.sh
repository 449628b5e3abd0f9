#!/usr/bin/env bash
# The deblurring experiment of docs/deblur.md, on two image sets: the faces
# (scikit-image's 100 LFW crops and dlib's 43 annotated faces, `fivefold
# images --lfw --dlib`, fixed split) and Fashion-MNIST (`fivefold images
# --fashion-mnist`). For each set it trains the generator with the content
# loss only (adv_weight 0) and the GAN from the set's config in configs/gan/
# for STEPS steps, with flips and shifts (data.flip, data.shift), a
# checkpoint at every evaluation; it picks each run's checkpoint with the best
# validation PSNR (never the test set), blurs every held-out test image with
# `fivefold blur` (its kernel saved beside it), deblurs it with both chosen
# generators (`fivefold deblur`) and scores them against Wiener and
# Richardson-Lucy with the true kernel (bench/deblur/evaluate.py), whose
# balance and iteration count are chosen on validation images blurred the
# same way (other seeds), never on the test images. Then it
# times the generator's forward+backward alone (bench_gan_generator) against
# the same network in PyTorch (bench/deblur/torch_gan_step.py), alternated.
# Prints figures, never pass/fail.
#
# Environment: FIVEFOLD [build/fivefold], BENCH_GEN [build/bench/bench_gan_generator],
# SETS ["faces fashion"; empty: only the speed section], STEPS [1500] (faces), FASHION_STEPS [1500], EVALS [10]
# (evaluations and checkpoints per run), THREADS [2], KERNEL [9] (blur side,
# training and test), NOISE [0.01] (sigma of the Gaussian noise after the blur,
# training and test), SHIFT [2] (largest shift in pixels; 0 turns it off),
# FLIP [true], NORM and LR [the config's: none, 0.001] (the generator's
# normalisation, none or instance; the peak learning rate), FILTERS and BLOCKS
# [the config's: 32, 6] (the generator's width and residual blocks), FASHION_LIMIT [6000] (Fashion-MNIST images, split 80/10/10),
# FASHION_TEST [100] (test images scored), VAL_PAIRS [100] (validation images
# blurred to choose the baselines' settings), WORK [runs/deblur-bench],
# DOCS [docs/deblur] (where the PNGs go), PY [/usr/bin/python3],
# SPEED [1] (the generator timing), ROUNDS [3] (its alternations), RUNS ["content gan"],
# EXTRA_PATCHES [0] and FACE_REPEATS [1] (faces only: that many photo patches and
# the non-face LFW crops added to the training split, every training face
# repeated, bench/deblur/extra_patches.py; validation and test unchanged).
set -euo pipefail
cd "$(dirname "$0")/../.."
FIVEFOLD=${FIVEFOLD:-build/fivefold}
BENCH_GEN=${BENCH_GEN:-build/bench/bench_gan_generator}
SETS=${SETS-faces fashion}
STEPS=${STEPS:-1500}
FASHION_STEPS=${FASHION_STEPS:-1500}
EVALS=${EVALS:-10}
THREADS=${THREADS:-2}
KERNEL=${KERNEL:-9}
NOISE=${NOISE:-0.01}
SHIFT=${SHIFT:-2}
FLIP=${FLIP:-true}
NORM=${NORM:-}
LR=${LR:-}
FILTERS=${FILTERS:-}
BLOCKS=${BLOCKS:-}
FASHION_LIMIT=${FASHION_LIMIT:-6000}
FASHION_TEST=${FASHION_TEST:-100}
WORK=${WORK:-runs/deblur-bench}
DOCS=${DOCS:-docs/deblur}
PY=${PY:-/usr/bin/python3}
RUNS=${RUNS:-content gan}
VAL_PAIRS=${VAL_PAIRS:-100}
EXTRA_PATCHES=${EXTRA_PATCHES:-0}
FACE_REPEATS=${FACE_REPEATS:-1}
# Test pair i is blurred with seed TEST_SEED_BASE + i: disjoint from training,
# whose kernels come from hash(blur_seed, epoch, image) inside the loader.
TEST_SEED_BASE=9000
# Validation pair i (for the baselines' settings) with VAL_SEED_BASE + i,
# disjoint from the test seeds as long as VAL_PAIRS stays under 1000.
VAL_SEED_BASE=8000

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)  # a config's "out" is relative to the config file's directory
DOCS=$(mkdir -p "$DOCS" && cd "$DOCS" && pwd)

# make_config SET NAME ADV_WEIGHT STEPS: the set's config with the bench's settings.
make_config() {
  "$PY" - "$WORK/$1" "$2" "$3" "$4" "$THREADS" "$KERNEL" "$NOISE" "$SHIFT" "$FLIP" "$NORM" "$LR" "$EVALS" "$FILTERS" "$BLOCKS" \
    "configs/gan/deblur-$([ "$1" = faces ] && echo lfw || echo fashion).json" <<'PY'
import json, sys
work, name, adv, steps, threads, kernel, noise, shift, flip, norm, lr, evals, filters, blocks, base = sys.argv[1:]
c = json.load(open(base))
steps, evals = int(steps), int(evals)
c["model"]["adv_weight"] = float(adv)
if norm:
    c["model"]["generator"]["norm"] = norm
if filters:
    c["model"]["generator"]["filters"] = int(filters)
if blocks:
    c["model"]["generator"]["blocks"] = int(blocks)
c["data"].update({"dir": f"{work}/set", "kernel_size": int(kernel), "noise_sigma": float(noise),
                  "shift": int(shift), "flip": flip == "true"})
every = max(1, steps // evals)
t = c["training"]
t.update({"steps": steps, "threads": int(threads), "log_interval": every, "eval_interval": every})
if lr:
    t["lr"] = float(lr)
c["checkpoint"] = {"interval": every, "keep_last": 0}
c["out"] = f"{work}/{name}"
c["description"] = f"bench/deblur: {name}, adv_weight {adv}, {steps} steps"
json.dump(c, open(f"{work}/{name}.json", "w"), indent=1)
g = c["model"]["generator"]
print(f"   {name}: generator {g['filters']} filters x {g['blocks']} blocks, norm {g['norm']}, lr {t['lr']}, flip {c['data']['flip']}, "
      f"shift {c['data']['shift']}, noise {c['data']['noise_sigma']}, batch {t['global_batch_size']}, {steps} steps")
PY
}

# choose SETDIR RUN...: each run's checkpoint with the best validation PSNR
# (metrics.jsonl), written to SETDIR/chosen.json; prints the directories.
choose() {
  "$PY" - "$@" <<'PY'
import glob, json, os, sys
work, runs = sys.argv[1], sys.argv[2:]
chosen = {}
for run in runs:
    d = f"{work}/{run}"
    saved = {int(os.path.basename(p).split("-")[1]): p for p in glob.glob(f"{d}/checkpoints/step-*")}
    evals = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if '"val_psnr"' in l]
    best = max((e for e in evals if e["step"] in saved), key=lambda e: e["val_psnr"])
    chosen[run] = {"step": best["step"], "val_psnr": best["val_psnr"], "val_ssim": best["val_ssim"],
                   "val_blurred_psnr": best["val_blurred_psnr"], "checkpoint": saved[best["step"]],
                   "step0_val_psnr": next((e["val_psnr"] for e in evals if e["step"] == 0), None),
                   "last_step": max(e["step"] for e in evals),
                   "last_val_psnr": max(evals, key=lambda e: e["step"])["val_psnr"]}
    print(f"   {run}: checkpoint of step {best['step']}, val PSNR {best['val_psnr']:.2f} dB "
          f"(blurred {best['val_blurred_psnr']:.2f}, last step {chosen[run]['last_val_psnr']:.2f})")
json.dump(chosen, open(f"{work}/chosen.json", "w"), indent=1)
PY
}

for set in $SETS; do
  S="$WORK/$set"
  rm -rf "$S"
  mkdir -p "$S/pairs" "$S/val-pairs"
  if [ "$set" = faces ]; then
    steps=$STEPS
    echo "== fivefold images --lfw --dlib --size 32 --seed 1 ($(date -u +%FT%TZ))"
    "$FIVEFOLD" images --out "$S/set" --lfw --dlib --size 32 --seed 1 | tail -n 2
    if [ "$EXTRA_PATCHES" != 0 ] || [ "$FACE_REPEATS" != 1 ]; then
      "$PY" bench/deblur/extra_patches.py "$S/set" "$EXTRA_PATCHES" "$FACE_REPEATS"
    fi
  else
    steps=$FASHION_STEPS
    echo "== fivefold images --fashion-mnist --fashion-limit $FASHION_LIMIT --size 28 --seed 1 ($(date -u +%FT%TZ))"
    "$FIVEFOLD" images --out "$S/set" --fashion-mnist --fashion-limit "$FASHION_LIMIT" --size 28 --seed 1 | tail -n 2
  fi
  for run in $RUNS; do
    make_config "$set" "$run" "$([ "$run" = content ] && echo 0 || echo 1)" "$steps"
    echo "== $set: fivefold train $run ($steps steps, $THREADS threads, $(date -u +%FT%TZ))"
    start=$(date +%s)
    "$FIVEFOLD" train --config "$S/$run.json" --no-progress >"$S/$run.log" 2>&1 ||
      { tail -n 20 "$S/$run.log"; exit 1; }
    grep -E "^(model|step $steps/|eval step $steps/)" "$S/$run.log" || true
    secs=$(( $(date +%s) - start ))
    echo "   $run: $secs s of training wall time"
  done
  # shellcheck disable=SC2086
  choose "$S" $RUNS

  echo "== $set: blur and deblur the held-out test images (kernel $KERNEL, noise $NOISE, seeds from $TEST_SEED_BASE)"
  i=0
  for sharp in "$S"/set/test/*.png; do
    [ "$set" = fashion ] && [ "$i" -ge "$FASHION_TEST" ] && break
    name=$(basename "$sharp" .png)
    pair="$S/pairs/$name"
    cp "$sharp" "$pair.sharp.png"
    "$FIVEFOLD" blur --input "$sharp" --out "$pair.blurred.png" --seed $((TEST_SEED_BASE + i)) \
      --kernel-size "$KERNEL" --noise "$NOISE" >/dev/null
    for run in $RUNS; do
      ckpt=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]]['checkpoint'])" \
        "$S/chosen.json" "$run")
      "$FIVEFOLD" deblur --checkpoint "$ckpt" --input "$pair.blurred.png" --out "$pair.$run.png" >/dev/null
    done
    i=$((i + 1))
  done
  echo "== $set: blur $VAL_PAIRS validation images at most, for the baselines' settings (seeds from $VAL_SEED_BASE)"
  i=0
  for sharp in "$S"/set/val/*.png; do
    [ "$i" -ge "$VAL_PAIRS" ] && break
    pair="$S/val-pairs/$(basename "$sharp" .png)"
    cp "$sharp" "$pair.sharp.png"
    "$FIVEFOLD" blur --input "$sharp" --out "$pair.blurred.png" --seed $((VAL_SEED_BASE + i)) \
      --kernel-size "$KERNEL" --noise "$NOISE" >/dev/null
    i=$((i + 1))
  done

  echo "== $set: scores ($(date -u +%FT%TZ))"
  docs_dir=$DOCS
  [ "$set" = faces ] || docs_dir="$DOCS/$set"
  methods=()
  for run in $RUNS; do methods+=("$run=$S/$run"); done
  DETECT=$([ "$set" = faces ] && echo 1 || echo 0) "$PY" bench/deblur/evaluate.py "$S" "$docs_dir" "${methods[@]}"
done

# Speed: the generator alone (forward, content loss, backward), fivefold and
# PyTorch alternated (ROUNDS times, default 3) so that both see the same
# load, for the trained network (NORM) and for the one with instance norm.
# PyTorch runs twice per round: in its default NCHW memory format and in
# channels_last (its performance guide's advice for CPU convolutions).
# Each line gives images/s by the wall clock and images per CPU-second of
# the process.
if [ "${SPEED:-1}" = 1 ]; then
  NORM=${NORM:-$("$PY" -c "import json; print(json.load(open('configs/gan/deblur-lfw.json'))['model']['generator']['norm'])")}
  # the faces config's generator shape (FILTERS and BLOCKS as trained), on both sides
  read -r filters blocks downs < <("$PY" -c "import json; g = json.load(open('configs/gan/deblur-lfw.json'))['model']['generator']; print(g['filters'], g['blocks'], g['downsamples'])")
  filters=${FILTERS:-$filters} blocks=${BLOCKS:-$blocks}
  shape=(--filters "$filters" --blocks "$blocks" --downsamples "$downs")
  for norm in $NORM $([ "$NORM" = instance ] || echo instance); do
    echo "== speed: generator forward+backward, $THREADS threads, 32x32 grey, micro-batch 8, $filters filters," \
      "$blocks blocks, $downs downsamples, norm $norm, load $(cut -d' ' -f1-3 /proc/loadavg) (SPEED=0 skips it)"
    norm_flag=$([ "$norm" = none ] && echo --no-norm || true)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      "$BENCH_GEN" --threads "$THREADS" --size 32 --micro 8 --steps 30 --norm "$norm" "${shape[@]}" | grep images |
        sed "s/^/fivefold $round: /"
      # shellcheck disable=SC2086
      "$PY" bench/deblur/torch_gan_step.py --threads "$THREADS" --size 32 --steps 30 --generator-only $norm_flag \
        "${shape[@]}" | grep images | sed "s/^/torch $round: /"
      # shellcheck disable=SC2086
      "$PY" bench/deblur/torch_gan_step.py --threads "$THREADS" --size 32 --steps 30 --generator-only $norm_flag \
        --channels-last "${shape[@]}" | grep images | sed "s/^/torch channels_last $round: /"
    done
  done
fi
echo "results: $WORK/<set>/results.json, results.md; pictures: $DOCS/grid.png, $DOCS/curves.png, $DOCS/fashion/"
