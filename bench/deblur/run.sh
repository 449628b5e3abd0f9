#!/usr/bin/env bash
# The deblurring experiment of docs/deblur.md: builds the LFW face set
# (`fivefold images --lfw`, fixed split), trains the generator with the
# content loss only (adv_weight 0) and the GAN from configs/gan/deblur-lfw.json
# for STEPS steps, blurs every held-out test face with `fivefold blur` (its
# kernel saved beside it), deblurs them with both generators (`fivefold
# deblur`) and scores them against Wiener and Richardson-Lucy with the true
# kernel (bench/deblur/evaluate.py). Prints figures, never pass/fail.
#
# Environment: FIVEFOLD [build/fivefold], STEPS [500], THREADS [2],
# SIZE [32], KERNEL [9] (blur side, training and test), NOISE [0.01] (sigma of
# the Gaussian noise added after the blur, training and test: without any, the
# true-kernel deconvolutions invert an almost exact blur), WORK [runs/deblur-bench],
# DOCS [docs/deblur] (where the PNGs go), PY [/usr/bin/python3], SPEED [1] (then
# fivefold's GAN step is timed against bench/deblur/torch_gan_step.py's).
set -euo pipefail
cd "$(dirname "$0")/../.."
FIVEFOLD=${FIVEFOLD:-build/fivefold}
STEPS=${STEPS:-500}
THREADS=${THREADS:-2}
SIZE=${SIZE:-32}
KERNEL=${KERNEL:-9}
NOISE=${NOISE:-0.01}
WORK=${WORK:-runs/deblur-bench}
DOCS=${DOCS:-docs/deblur}
PY=${PY:-/usr/bin/python3}
# Test pair i is blurred with seed TEST_SEED_BASE + i: disjoint from training,
# whose kernels come from hash(blur_seed, epoch, image) inside the loader.
TEST_SEED_BASE=9000

rm -rf "$WORK"
mkdir -p "$WORK/pairs"
WORK=$(cd "$WORK" && pwd)  # a config's "out" is relative to the config file's directory
echo "== fivefold images --lfw --size $SIZE --seed 1 ($(date -u +%FT%TZ))"
"$FIVEFOLD" images --out "$WORK/faces" --lfw --size "$SIZE" --seed 1 | tail -n 2

# Two configs from configs/gan/deblur-lfw.json: the same networks, data and
# optimiser; only adv_weight (0: content loss only; the critic phase still
# runs, its output unused by the generator) and the run length differ.
make_config() { # NAME ADV_WEIGHT
  "$PY" - "$WORK" "$1" "$2" "$STEPS" "$THREADS" "$KERNEL" "$NOISE" <<'PY'
import json, sys
work, name, adv, steps, threads, kernel, noise = sys.argv[1:]
c = json.load(open("configs/gan/deblur-lfw.json"))
c["model"]["adv_weight"] = float(adv)
c["data"].update({"dir": f"{work}/faces", "kernel_size": int(kernel), "noise_sigma": float(noise)})
t = c["training"]
t.update({"steps": int(steps), "threads": int(threads), "log_interval": max(1, int(steps) // 10),
          "eval_interval": max(1, int(steps) // 10)})
c["checkpoint"] = {"interval": int(steps), "keep_last": 1}
c["out"] = f"{work}/{name}"
c["description"] = f"bench/deblur: {name}, adv_weight {adv}, {steps} steps"
json.dump(c, open(f"{work}/{name}.json", "w"), indent=1)
PY
}
make_config content 0
make_config gan 1
for run in content gan; do
  echo "== fivefold train $run ($STEPS steps, $THREADS threads, $(date -u +%FT%TZ))"
  start=$(date +%s)
  "$FIVEFOLD" train --config "$WORK/$run.json" --no-progress >"$WORK/$run.log" 2>&1 ||
    { tail -n 20 "$WORK/$run.log"; exit 1; }
  grep -E "^(model|step $STEPS/|eval step $STEPS/)" "$WORK/$run.log" || true
  secs=$(( $(date +%s) - start ))
  echo "   $run: $secs s of training wall time, $(( 16 * STEPS / (secs > 0 ? secs : 1) )) images/s (16 pairs a step)"
done

echo "== blur and deblur the held-out test faces (kernel $KERNEL, noise $NOISE, seeds from $TEST_SEED_BASE)"
i=0
for sharp in "$WORK"/faces/test/*.png; do
  name=$(basename "$sharp" .png)
  pair="$WORK/pairs/$name"
  cp "$sharp" "$pair.sharp.png"
  "$FIVEFOLD" blur --input "$sharp" --out "$pair.blurred.png" --seed $((TEST_SEED_BASE + i)) \
    --kernel-size "$KERNEL" --noise "$NOISE" >/dev/null
  for run in content gan; do
    "$FIVEFOLD" deblur --checkpoint "$WORK/$run" --input "$pair.blurred.png" --out "$pair.$run.png" >/dev/null
  done
  i=$((i + 1))
done

echo "== scores ($(date -u +%FT%TZ))"
"$PY" bench/deblur/evaluate.py "$WORK" "$DOCS" content="$WORK/content" gan="$WORK/gan"
# Speed: the gan config for 60 steps (no evaluation) and the same step in
# PyTorch, alternated twice so that both see the same load; fivefold's figure
# is the img/s of its log lines (each the mean over the 20 steps before it).
if [ "${SPEED:-1}" = 1 ]; then
  echo "== speed: fivefold's GAN step against PyTorch's, $THREADS threads, load $(cut -d' ' -f1-3 /proc/loadavg) (SPEED=0 skips it)"
  "$PY" - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
c = json.load(open(f"{work}/gan.json"))
c["training"].update({"steps": 60, "log_interval": 20, "eval_interval": 1000})
c["checkpoint"] = {"interval": 1000, "keep_last": 1}
c["out"] = f"{work}/speed"
json.dump(c, open(f"{work}/speed.json", "w"), indent=1)
PY
  for round in 1 2; do
    rm -rf "$WORK/speed"
    "$FIVEFOLD" train --config "$WORK/speed.json" --no-progress 2>&1 | grep -E "^step (20|40|60)/" | sed 's/^/fivefold: /'
    "$PY" bench/deblur/torch_gan_step.py --threads "$THREADS" --size "$SIZE" --steps 30 | sed 's/^/torch: /'
  done
fi
echo "results: $WORK/results.json, $WORK/results.md; pictures: $DOCS/grid.png, $DOCS/curves.png"
