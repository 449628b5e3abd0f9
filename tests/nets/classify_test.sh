#!/usr/bin/env bash
# `fivefold classify` on a vision run's checkpoint: a linear classifier
# (one linear layer on the 784 pixels) trained a few steps with a data
# section that normalises by mean 0.5, std 0.25 (not the defaults), then
# two images of the Fashion-MNIST test file written as PGM (one at 28x28,
# one enlarged to 56x56) and one PNG from `fivefold images` are
# classified. Checked: the output format (a line per image, then K ranked
# lines of a Fashion-MNIST class name and a probability), that all ten
# probabilities sum to 1, that they equal softmax(W x + b) computed here in
# PyTorch from the checkpoint's model.safetensors with the run's
# normalisation (so the weights, the normalisation and the class order are
# the ones of the run), that the enlarged image is said to be resized, and
# that a corrupt image, a missing one and a missing checkpoint are refused
# naming the file.
# Usage: classify_test.sh path/to/fivefold
set -u
MODE=linear
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/../parallel/lib.sh"
TORCH_REF=$(cd "$(dirname "$0")/../torch_ref" && pwd)
work_dir classify

cat >run.json <<'JSON'
{"model": {"family": "vision", "input": [1, 28, 28], "classes": 10, "layers": [{"type": "linear", "out": 10}]},
 "data": {"max_train_images": 512, "max_val_images": 40, "max_test_images": 30, "mean": 0.5, "std": 0.25},
 "training": {"micro_batch_size": 16, "steps": 8, "lr": 0.01, "warmup_steps": 1, "seed": 3, "log_interval": 4,
              "eval_interval": 8, "threads": 1},
 "checkpoint": {"interval": 8, "keep_last": 0}}
JSON
"$FIVEFOLD" train --config run.json --out run --no-progress >train.log 2>&1 || { cat train.log; fail "training"; finish classify_test; }

# Test images 0 and 1 of t10k as PGM (P5), the second enlarged 2x by repeating pixels.
$PY - <<'PYEOF' || fail "writing the test images"
import gzip
raw = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:16 + 2 * 784]
open("t0.pgm", "wb").write(b"P5\n28 28\n255\n" + raw[:784])
big = bytearray()
for r in range(56):
    row = raw[784 + (r // 2) * 28: 784 + (r // 2 + 1) * 28]
    big += bytes(v for v in row for _ in (0, 1))
open("t1big.pgm", "wb").write(b"P5\n56 56\n255\n" + bytes(big))
PYEOF
"$FIVEFOLD" images --out set --fashion-mnist --fashion-limit 1 --size 28 >images.log 2>&1 || fail "fivefold images"

"$FIVEFOLD" classify --checkpoint run --input t0.pgm t1big.pgm set/train/fashion-mnist_00000.png --top 10 \
  >out.txt 2>err.txt || { cat err.txt; fail "classify exited $?"; }
grep -qx "t0.pgm: 28x28 grey" out.txt || fail "no plain header line for t0.pgm"
grep -qx "t1big.pgm: 28x28 grey; resized from 56x56 to 28x28" out.txt || fail "the 56x56 image is not said to be resized"
[ "$(grep -c '^ *[0-9]*\. ' out.txt)" -eq 30 ] || fail "expected 3 x 10 ranked lines"
TORCH_REF=$TORCH_REF $PY - <<'PYEOF' || fail "the printed probabilities are not the model's"
import gzip, math, os, re, subprocess, sys
sys.path.insert(0, os.environ["TORCH_REF"])
import torch
import safetensors_io
names = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
ckpt = sorted(os.listdir("run/checkpoints"))[-1]
t, _ = safetensors_io.load(f"run/checkpoints/{ckpt}/model.safetensors")
w, b = t["layers.0.weight"].double(), t["layers.0.bias"].double()
raw = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:16 + 784]
x = (torch.tensor(list(raw), dtype=torch.float64) / 255 - 0.5) / 0.25
want = torch.softmax(w @ x + b, 0)
blocks = open("out.txt").read().split("t1big.pgm")[0]  # t0.pgm's block
got, ranks = {}, []
for line in blocks.splitlines()[1:]:
    m = re.fullmatch(r" *(\d+)\. (.+?) +([0-9.]+)", line)
    if not m:
        sys.exit(f"malformed line {line!r}")
    ranks.append(int(m.group(1)))
    got[m.group(2)] = float(m.group(3))
if ranks != list(range(1, 11)) or sorted(got) != sorted(names):
    sys.exit(f"ranks {ranks} / names {sorted(got)}: expected 1..10 and every Fashion-MNIST class once")
if abs(sum(got.values()) - 1) > 1e-4:
    sys.exit(f"the probabilities sum to {sum(got.values())}")
order = list(got.values())
if order != sorted(order, reverse=True):
    sys.exit("not in descending order")
for c, name in enumerate(names):
    if abs(got[name] - want[c].item()) > 2e-6:
        sys.exit(f"{name}: printed {got[name]}, softmax(Wx+b) = {want[c].item():.7f}")
PYEOF

refused_file() { # NEEDLE ARGS...: exit 1 and NEEDLE in the message
  local needle=$1; shift
  "$FIVEFOLD" classify "$@" >bad.txt 2>&1 && fail "classify $* was accepted"
  grep -qF -- "$needle" bad.txt || { cat bad.txt; fail "classify $*: no message naming '$needle'"; }
}
echo "not an image" >broken.png
refused_file "broken.png: bad magic" --checkpoint run --input t0.pgm broken.png
refused_file "no-such.pgm" --checkpoint run --input no-such.pgm
refused_file "no checkpoint in no-such-run" --checkpoint no-such-run --input t0.pgm
finish classify_test
