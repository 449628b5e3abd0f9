#!/usr/bin/env python3
"""Extra training images for the faces of bench/deblur/run.sh (EXTRA_PATCHES,
FACE_REPEATS): adds to the TRAINING split of an image set made by `fivefold
images` (and to its manifest.json, which the loader reads)

* COUNT grey patches of the set's size cut at random from scikit-image's
  sample photographs, each photograph downscaled by 2, 3 and 4 first (the
  faces are crops of larger photos too); patches with a standard deviation
  under 0.03 (flat sky, blank page) are drawn again;
* scikit-image's 100 non-face LFW crops (the second half of lfw_subset.npy),
  resized to the set's size;
* REPEATS - 1 more copies of every training face, so that the faces keep a
  share of the steps.

Validation and test images are not touched: the scores stay on the same
held-out faces. Grey sets only. The draw is fixed by SEED.

Usage: extra_patches.py SET_DIR COUNT REPEATS [SEED]
"""
import json
import os
import shutil
import sys

import numpy as np
from skimage import color, data, io, transform

PHOTOS = ["astronaut", "brick", "camera", "cat", "cell", "coffee", "coins", "colorwheel", "grass", "gravel", "horse",
          "hubble_deep_field", "immunohistochemistry", "moon", "page", "retina", "rocket", "text",
          "microaneurysms"]


def grey(img):
    a = np.asarray(img, dtype=np.float64)
    if a.max() > 1.5:
        a = a / 255.0
    if a.ndim == 3:
        a = color.rgb2gray(a[..., :3])
    return a


def save(path, a):
    io.imsave(path, (np.clip(a, 0, 1) * 255 + 0.5).astype(np.uint8), check_contrast=False)


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    set_dir, count, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    seed = int(sys.argv[4]) if len(sys.argv) == 5 else 7
    manifest_path = os.path.join(set_dir, "manifest.json")
    m = json.load(open(manifest_path))
    size = m["size"]
    if m["channels"] != 1:
        sys.exit(f"{manifest_path}: channels {m['channels']}, expected 1 (grey sets only)")
    rng = np.random.default_rng(seed)
    scaled = []
    for name in PHOTOS:
        a = grey(getattr(data, name)())
        for f in (2, 3, 4):
            s = transform.rescale(a, 1.0 / f, anti_aliasing=True)
            if min(s.shape) > size:
                scaled.append(s)
    added = []
    k = 0
    while k < count:
        a = scaled[rng.integers(len(scaled))]
        y, x = rng.integers(a.shape[0] - size), rng.integers(a.shape[1] - size)
        p = a[y:y + size, x:x + size]
        if p.std() < 0.03:
            continue
        added.append((f"train/photo_{k:05d}.png", p, "photo-patches"))
        k += 1
    for i, a in enumerate(data.lfw_subset()[100:]):
        added.append((f"train/lfw_nonface_{i:03d}.png", transform.resize(a, (size, size)), "lfw-nonfaces"))
    for rel, a, _ in added:
        save(os.path.join(set_dir, rel), a)
    faces = [e for e in m["images"] if e["split"] == "train"]
    for r in range(1, repeats):
        for e in faces:
            rel = e["file"][:-4] + f"_copy{r}.png"
            shutil.copy(os.path.join(set_dir, e["file"]), os.path.join(set_dir, rel))
            added.append((rel, None, e.get("source", "faces") + "-copy"))
    for rel, _, source in added:
        m["images"].append({"file": rel, "split": "train", "source": source})
    m["counts"]["train"] = sum(e["split"] == "train" for e in m["images"])
    with open(manifest_path + ".tmp", "w") as f:
        json.dump(m, f, indent=1)
    os.replace(manifest_path + ".tmp", manifest_path)
    print(f"extra_patches: {count} photo patches, 100 non-face LFW crops, {len(faces)} faces x {repeats}: "
          f"{m['counts']['train']} training images in {set_dir}")


if __name__ == "__main__":
    main()
