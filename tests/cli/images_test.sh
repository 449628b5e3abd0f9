#!/usr/bin/env bash
# `fivefold images` on the real offline sources: the 100 LFW faces of
# scikit-image's lfw_subset.npy (and all 200 with --lfw-all) plus the first
# Fashion-MNIST images, resized and split; the 43 annotated faces of dlib's
# example photos (JPEG, cropped around their boxes); the manifest agrees
# with the files, two runs give identical files, a missing source is
# refused naming it. Exit 77 (SKIP, missing dependency) when lfw_subset.npy,
# the Fashion-MNIST files or dlib's examples are not installed.
# Usage: images_test.sh path/to/fivefold
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
LFW=/usr/lib/python3/dist-packages/skimage/data/lfw_subset.npy
FASHION=/usr/share/datasets/fashion-mnist
DLIB=/usr/share/doc/libdlib19.1/examples/faces
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-images-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

out=$("$FIVEFOLD" images --out none --lfw "$WORK/missing.npy" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "missing.npy" <<<"$out" || fail "missing source: rc $rc: $out"
out=$("$FIVEFOLD" images --out none 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "no source given" <<<"$out" || fail "no source: rc $rc: $out"
if [ ! -r "$LFW" ]; then
  echo "SKIP (missing dependency: python3-skimage): $LFW is not installed"
  exit 77
fi
if [ ! -r "$FASHION/train-images-idx3-ubyte.gz" ]; then
  echo "SKIP (missing dependency: dataset-fashion-mnist): $FASHION is not installed"
  exit 77
fi

"$FIVEFOLD" images --out a --lfw --fashion-mnist --fashion-limit 40 --size 32 --seed 3 > a.log 2>&1 ||
  fail "images exited $?: $(cat a.log)"
"$FIVEFOLD" images --out b --lfw --fashion-mnist --fashion-limit 40 --size 32 --seed 3 > /dev/null 2>&1 ||
  fail "second run failed"
diff -r a b > /dev/null || fail "two runs with the same seed differ"
/usr/bin/python3 - <<'PY' || fail "the manifest does not describe the files"
import json, os, struct, sys
m = json.load(open("a/manifest.json"))
imgs = m["images"]
ok = len(imgs) == 140 and m["counts"] == {"train": 112, "val": 14, "test": 14}
ok = ok and sum(1 for i in imgs if i["source"] == "lfw" and i["label"] == 1) == 100
ok = ok and all(0 <= i["label"] <= 9 for i in imgs if i["source"] == "fashion-mnist")
for i in imgs:
    path = os.path.join("a", i["file"])
    with open(path, "rb") as f:
        head = f.read(24)
    w, h = struct.unpack(">II", head[16:24])
    ok = ok and head[:8] == b"\x89PNG\r\n\x1a\n" and (w, h) == (32, 32) and i["file"].startswith(i["split"] + "/")
files = sum(len(os.listdir(os.path.join("a", s))) for s in ("train", "val", "test"))
sys.exit(0 if ok and files == 140 else 1)
PY
"$FIVEFOLD" images --out all --lfw-all --size 25 --rgb --val 0 --test 0.5 > /dev/null 2>&1 || fail "--lfw-all failed"
[ "$(ls all/train all/test | grep -c png)" -eq 200 ] || fail "--lfw-all did not write 200 images"

if [ ! -r "$DLIB/training.xml" ]; then
  echo "SKIP (missing dependency: libdlib19.1): $DLIB is not installed"
  [ "$failures" -ne 0 ] && exit 1
  exit 77
fi
"$FIVEFOLD" images --out faces --dlib --size 48 --rgb --val 0 --test 0 > dlib.log 2>&1 || fail "--dlib exited $?: $(cat dlib.log)"
grep -q "18 from dlib-training.*25 from dlib-testing" dlib.log || fail "--dlib: expected 18 + 25 faces: $(cat dlib.log)"
[ "$(ls faces/train | grep -c png)" -eq 43 ] || fail "--dlib did not write 43 crops"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "images: LFW faces and Fashion-MNIST written, split and reproducible"
