#!/usr/bin/env bash
# `fivefold blur` end to end: a PGM and a PNG input give the blurred image
# and the kernel (OUT.kernel.png, OUT.kernel.json with the parameters and a
# K x K kernel that sums to 1); the same seed gives byte-identical files, a
# different seed different ones, and --noise leaves the kernel unchanged;
# a missing input or a bad kernel size is refused naming what was wrong.
# Usage: blur_test.sh path/to/fivefold
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-blur-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A 32 x 24 grey ramp with a bright square, as binary PGM.
python3 - <<'PY'
w, h = 32, 24
px = bytes(255 if 8 <= x < 16 and 6 <= y < 14 else (x * 7 + y * 3) % 256 for y in range(h) for x in range(w))
open("sharp.pgm", "wb").write(b"P5\n%d %d\n255\n" % (w, h) + px)
PY

"$FIVEFOLD" blur --input sharp.pgm --out a.png --seed 4 --kernel-size 11 > a.log 2>&1 || fail "blur exited $?: $(cat a.log)"
for f in a.png a.png.kernel.png a.png.kernel.json; do [ -s "$f" ] || fail "$f was not written"; done
grep -q "PSNR against the input" a.log || fail "no PSNR in: $(cat a.log)"
python3 - <<'PY' || fail "a.png.kernel.json is not an 11 x 11 kernel summing to 1 with its parameters"
import json, sys
k = json.load(open("a.png.kernel.json"))
rows = k["kernel"]
ok = (k["seed"] == 4 and k["kernel_size"] == 11 and len(rows) == 11 and all(len(r) == 11 for r in rows)
      and abs(sum(map(sum, rows)) - 1) < 1e-5 and min(map(min, rows)) >= 0
      and all(f in k for f in ("length", "anxiety", "exposure", "samples", "border")))
sys.exit(0 if ok else 1)
PY
"$FIVEFOLD" blur --input sharp.pgm --out b.png --seed 4 --kernel-size 11 > /dev/null 2>&1 || fail "second run failed"
cmp -s a.png b.png && cmp -s a.png.kernel.json b.png.kernel.json || fail "the same seed gave different files"
"$FIVEFOLD" blur --input sharp.pgm --out c.png --seed 5 --kernel-size 11 > /dev/null 2>&1 || fail "seed 5 failed"
cmp -s a.png.kernel.json c.png.kernel.json && fail "seeds 4 and 5 gave the same kernel"
"$FIVEFOLD" blur --input sharp.pgm --out n.pgm --seed 4 --kernel-size 11 --noise 0.05 > /dev/null 2>&1 || fail "noisy run failed"
head -c 2 n.pgm | grep -q P5 || fail "n.pgm is not a PGM"
python3 -c "
import json; a = json.load(open('a.png.kernel.json'))['kernel']; b = json.load(open('n.pgm.kernel.json'))['kernel']
raise SystemExit(0 if a == b else 1)" || fail "--noise changed the kernel"
"$FIVEFOLD" blur --input a.png --out rgb.png --seed 1 > /dev/null 2>&1 || fail "a PNG input failed"

out=$("$FIVEFOLD" blur --input missing.png --out x.png 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "cannot open image missing.png" <<<"$out" || fail "missing input: rc $rc: $out"
out=$("$FIVEFOLD" blur --input sharp.pgm --out x.png --kernel-size 10 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "kernel_size 10, expected an odd number" <<<"$out" || fail "even kernel: rc $rc: $out"
printf 'P5\n4 4\n255\nab' > short.pgm
out=$("$FIVEFOLD" blur --input short.pgm --out x.png 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "short.pgm: truncated" <<<"$out" || fail "truncated input: rc $rc: $out"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "blur: outputs written, reproducible from the seed, errors name the file"
