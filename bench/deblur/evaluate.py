#!/usr/bin/env python3
"""Scores of bench/deblur/run.sh on the held-out blurred pairs: PSNR and SSIM
of the blurred input, of Wiener and Richardson-Lucy deconvolution with each
pair's true kernel (read from the OUT.kernel.json that `fivefold blur` wrote),
and of every generator's output (`fivefold deblur`); the Haar-cascade face
detection rate on each; a picture grid; the training curves. Prints the
table and writes results.json, results.md and the PNGs.

Usage: evaluate.py WORK_DIR DOCS_DIR METHOD=RUN_DIR [METHOD=RUN_DIR ...]
  WORK_DIR/pairs/NAME.sharp.png, NAME.blurred.png, NAME.blurred.png.kernel.json
  and NAME.METHOD.png for every METHOD; WORK_DIR/val-pairs/ the same for
  validation images (sharp, blurred, kernel), on which the baselines' settings
  are chosen; RUN_DIR/metrics.jsonl for the curves;
  WORK_DIR/chosen.json (optional, run.sh writes it): the checkpoint step each
  METHOD's images came from, chosen by validation PSNR. DETECT=0 leaves the
  face detection out (a set that has no faces).
"""
import glob
import json
import os
import struct
import sys
import zlib

import numpy as np
from skimage import io, restoration, transform
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

# Each baseline's setting is the one with the best mean PSNR on the
# validation pairs (never the test pairs, as for the generators' checkpoints);
# the main table gives its test score there, and every setting's test score
# is reported beside it.
WIENER_BALANCES = [0.001, 0.003, 0.01, 0.03, 0.1]
RL_ITERATIONS = [5, 10, 20, 30, 50, 100]

# Haar cascade: the 32 x 32 crops are tight, so each is upscaled to 100 x 100
# and padded by 50 px of replicated border so that the detector sees a face
# with some context around it.
HAAR_FILE = "/usr/share/opencv4/haarcascades/haarcascade_frontalface_default.xml"
HAAR_UPSCALE = 100
HAAR_PAD = 50
HAAR_SCALE_FACTOR = 1.05
HAAR_MIN_NEIGHBORS = 3
HAAR_MIN_SIZE = 50


def read_grey(path):
    img = io.imread(path)
    if img.ndim == 3:
        img = img[..., :3].mean(axis=2)
    return img.astype(np.float64) / (65535.0 if img.dtype == np.uint16 else 255.0)


def psnr(ref, img):
    return float(peak_signal_noise_ratio(ref, np.clip(img, 0, 1), data_range=1.0))


def ssim(ref, img):
    return float(structural_similarity(ref, np.clip(img, 0, 1), data_range=1.0, gaussian_weights=True,
                                       sigma=1.5, use_sample_covariance=False))


def deconvolve(blurred, kernel, how, setting):
    # Both methods assume periodic (FFT) or zero borders while the blur used
    # replicated ones: pad by the kernel's side with replicated borders and
    # crop back, so the border mismatch stays outside the scored image.
    k = kernel.shape[0]
    padded = np.pad(blurred, k, mode="edge")
    if how == "wiener":
        out = restoration.wiener(padded, kernel, balance=setting, clip=False)
    else:
        out = restoration.richardson_lucy(padded, kernel, num_iter=setting, clip=False)
    return np.clip(out[k:-k, k:-k], 0, 1)


def baselines(blurred, kernel):
    imgs = {f"wiener balance {b}": deconvolve(blurred, kernel, "wiener", b) for b in WIENER_BALANCES}
    imgs.update({f"richardson-lucy {n} iterations": deconvolve(blurred, kernel, "rl", n) for n in RL_ITERATIONS})
    return imgs


def pair_names(directory):
    return sorted(os.path.basename(p)[:-len(".sharp.png")] for p in glob.glob(os.path.join(directory, "*.sharp.png")))


def read_pair(prefix):
    meta = json.load(open(prefix + ".blurred.png.kernel.json"))
    return read_grey(prefix + ".sharp.png"), read_grey(prefix + ".blurred.png"), meta


def choose_settings(val_dir):
    """Mean validation PSNR and SSIM of every baseline setting, and the best
    Wiener and Richardson-Lucy settings by that PSNR."""
    names = pair_names(val_dir)
    if not names:
        sys.exit(f"{val_dir}: no *.sharp.png (run.sh blurs validation images there to choose the baselines' settings)")
    recs = {}
    for name in names:
        sharp, blurred, meta = read_pair(os.path.join(val_dir, name))
        for key, img in baselines(blurred, np.array(meta["kernel"], dtype=np.float64)).items():
            recs.setdefault(key, []).append((psnr(sharp, img), ssim(sharp, img)))
    means = {k: {"psnr": float(np.mean([r[0] for r in v])), "ssim": float(np.mean([r[1] for r in v]))}
             for k, v in recs.items()}
    best_w = max((k for k in means if k.startswith("wiener")), key=lambda k: means[k]["psnr"])
    best_rl = max((k for k in means if k.startswith("richardson")), key=lambda k: means[k]["psnr"])
    return len(names), means, best_w, best_rl


def haar_detector():
    try:
        import cv2
    except ImportError:
        return None
    cascade = cv2.CascadeClassifier(HAAR_FILE)
    if cascade.empty():
        return None

    def detect(img):
        up = transform.resize(img, (HAAR_UPSCALE, HAAR_UPSCALE), order=3, anti_aliasing=False)
        up = np.pad(np.clip(up, 0, 1), HAAR_PAD, mode="edge")
        faces = cascade.detectMultiScale((up * 255).round().astype(np.uint8), scaleFactor=HAAR_SCALE_FACTOR,
                                         minNeighbors=HAAR_MIN_NEIGHBORS,
                                         minSize=(HAAR_MIN_SIZE, HAAR_MIN_SIZE))
        return len(faces) > 0
    return detect


def write_png_grey(path, img):
    """8-bit grey PNG with zlib, so the pictures need nothing beyond numpy."""
    a = (np.clip(img, 0, 1) * 255).round().astype(np.uint8)
    h, w = a.shape
    raw = b"".join(b"\x00" + a[y].tobytes() for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def draw_curves(path, curves, height=240, width=480):
    """val PSNR against steps, one grey level per run plus the blurred input's
    line (dashed), drawn with numpy alone; the legend is in docs/deblur.md."""
    margin = 30
    canvas = np.ones((height, width))
    series = []
    for name, rows in curves.items():
        series.append((name, [(r["step"], r["val_psnr"]) for r in rows]))
    base = [(r["step"], r["val_blurred_psnr"]) for rows in curves.values() for r in rows]
    ys = [y for _, s in series for _, y in s] + [y for _, y in base]
    xs = [x for _, s in series for x, _ in s]
    if not ys:
        return None
    y0, y1 = np.floor(min(ys)) - 0.5, np.ceil(max(ys)) + 0.5
    x0, x1 = 0, max(xs)

    def px(x, y):
        return (margin + (x - x0) / max(x1 - x0, 1) * (width - 2 * margin),
                height - margin - (y - y0) / (y1 - y0) * (height - 2 * margin))

    canvas[margin:height - margin, margin] = 0
    canvas[height - margin, margin:width - margin] = 0
    for yt in np.arange(np.ceil(y0), y1, 1.0):  # a tick per dB
        _, py = px(0, yt)
        canvas[int(py), margin - 4:margin] = 0

    def line(pts, level, dashed=False):
        for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
            (ax, ay), (bx, by) = px(xa, ya), px(xb, yb)
            n = int(max(abs(bx - ax), abs(by - ay))) + 1
            for t in range(n + 1):
                if dashed and (t // 4) % 2:
                    continue
                x, y = ax + (bx - ax) * t / n, ay + (by - ay) * t / n
                canvas[int(y) - 1:int(y) + 1, int(x) - 1:int(x) + 1] = level
    levels = [0.0, 0.55]
    for i, (_, pts) in enumerate(series):
        line(pts, levels[i % len(levels)])
    if series:
        line([(x, base[0][1]) for x in (x0, x1)], 0.3, dashed=True)
    write_png_grey(path, canvas)
    return {"y_min_db": float(y0), "y_max_db": float(y1), "x_max_step": int(x1),
            "lines": [name for name, _ in series] + ["blurred input (dashed)"]}


def read_metrics(run_dir):
    rows = []
    path = os.path.join(run_dir, "metrics.jsonl")
    if os.path.exists(path):
        for text in open(path):
            r = json.loads(text)
            if "val_psnr" in r:
                rows.append({k: r[k] for k in ("step", "val_psnr", "val_ssim", "val_blurred_psnr",
                                               "val_blurred_ssim") if k in r})
    return rows


def main():
    work, docs = sys.argv[1], sys.argv[2]
    methods = [a.split("=", 1) for a in sys.argv[3:]]
    os.makedirs(docs, exist_ok=True)
    names = pair_names(os.path.join(work, "pairs"))
    if not names:
        sys.exit(f"{work}/pairs: no *.sharp.png")
    detect = haar_detector() if os.environ.get("DETECT", "1") != "0" else None
    chosen_path = os.path.join(work, "chosen.json")
    chosen = json.load(open(chosen_path)) if os.path.exists(chosen_path) else {}
    val_pairs, val_means, best_w, best_rl = choose_settings(os.path.join(work, "val-pairs"))

    per_image = {}
    scores = {}  # method -> list of (psnr, ssim, detected)
    sweep = {f"wiener balance {b}": [] for b in WIENER_BALANCES}
    sweep.update({f"richardson-lucy {n} iterations": [] for n in RL_ITERATIONS})
    outputs = {}
    for name in names:
        pair = os.path.join(work, "pairs", name)
        sharp, blurred, meta = read_pair(pair)
        kernel = np.array(meta["kernel"], dtype=np.float64)
        per_image[name] = {"seed": meta["seed"], "length": meta["length"], "anxiety": meta["anxiety"],
                           "exposure": meta["exposure"]}
        imgs = {"sharp": sharp, "blurred": blurred}
        imgs.update(baselines(blurred, kernel))
        for m, _ in methods:
            imgs[m] = read_grey(f"{pair}.{m}.png")
        outputs[name] = imgs
        for key, img in imgs.items():
            rec = (psnr(sharp, img) if key != "sharp" else float("inf"), ssim(sharp, img),
                   bool(detect(img)) if detect else None)
            (sweep[key] if key in sweep else scores.setdefault(key, [])).append(rec)
            per_image[name][key] = {"psnr": rec[0], "ssim": rec[1], "face": rec[2]}

    def mean(recs, i):
        v = [r[i] for r in recs]
        return float(np.mean(v)) if v and v[0] is not None else None
    sweep_means = {k: {"psnr": mean(v, 0), "ssim": mean(v, 1), "detection": mean(v, 2)} for k, v in sweep.items()}
    rows = [("sharp (reference)", "sharp"), ("blurred input", "blurred"),
            (f"Wiener, true kernel ({best_w.split(' ', 1)[1]}, chosen on validation)", best_w),
            (f"Richardson-Lucy, true kernel ({best_rl.split(' ', 1)[1]}, chosen on validation)", best_rl)]
    rows += [(m, m) for m, _ in methods]
    table = []
    for label, key in rows:
        recs = scores.get(key) or sweep[key]
        table.append({"method": label, "key": key, "psnr": None if key == "sharp" else mean(recs, 0),
                      "ssim": mean(recs, 1), "detection": mean(recs, 2)})

    # The grid: sharp | blurred | RL | each generator, one row per face (up to 6), x3 nearest.
    cols = ["sharp", "blurred", best_rl] + [m for m, _ in methods]
    h, w = outputs[names[0]]["sharp"].shape
    gap = 2
    shown = names[:6]
    grid = np.ones((len(shown) * (h + gap) - gap, len(cols) * (w + gap) - gap))
    for r, name in enumerate(shown):
        for c, key in enumerate(cols):
            grid[r * (h + gap):r * (h + gap) + h, c * (w + gap):c * (w + gap) + w] = outputs[name][key]
    write_png_grey(os.path.join(docs, "grid.png"), np.kron(grid, np.ones((3, 3))))

    curves = {m: read_metrics(d) for m, d in methods}
    curve_info = draw_curves(os.path.join(docs, "curves.png"), curves)

    result = {"faces": len(names), "names": names, "table": table, "baseline_sweep": sweep_means,
              "baseline_choice": {"validation_pairs": val_pairs, "wiener": best_w, "richardson_lucy": best_rl,
                                  "validation_sweep": val_means},
              "detector": None if not detect else {
                  "cascade": HAAR_FILE, "upscale": HAAR_UPSCALE, "pad_replicated": HAAR_PAD,
                  "scale_factor": HAAR_SCALE_FACTOR, "min_neighbors": HAAR_MIN_NEIGHBORS,
                  "min_size": HAAR_MIN_SIZE},
              "chosen": chosen, "grid_columns": cols, "grid_rows": shown, "curves": curves, "curve_plot": curve_info,
              "per_image": per_image}
    json.dump(result, open(os.path.join(work, "results.json"), "w"), indent=1)

    def fmt(v, f):
        return "n/a" if v is None else f % v
    lines = ["| method | PSNR (dB) | SSIM | faces detected |", "|---|---|---|---|"]
    for t in table:
        lines.append(f"| {t['method']} | {fmt(t['psnr'], '%.2f')} | {fmt(t['ssim'], '%.4f')} | "
                     f"{fmt(None if t['detection'] is None else t['detection'] * 100, '%.0f%%')} |")
    lines += ["", "| face | seed | length | anxiety | exposure | blurred PSNR | "
              + " | ".join(f"{m} PSNR" for m, _ in methods) + " |", "|---" * (6 + len(methods)) + "|"]
    for name in names:
        p = per_image[name]
        lines.append(f"| {name} | {p['seed']} | {p['length']:g} | {p['anxiety']:.5f} | {p['exposure']:g} | "
                     f"{p['blurred']['psnr']:.2f} | " + " | ".join(f"{p[m]['psnr']:.2f}" for m, _ in methods) + " |")
    exposures = sorted({per_image[n]["exposure"] for n in names})
    lines += ["", "| exposure | pairs | blurred PSNR | " + f"RL PSNR ({best_rl.split(' ', 1)[1]}) | "
              + " | ".join(f"{m} PSNR" for m, _ in methods) + " |", "|---" * (4 + len(methods)) + "|"]
    for e in exposures:
        group = [n for n in names if per_image[n]["exposure"] == e]

        def m_psnr(key):
            return float(np.mean([per_image[n][key]["psnr"] for n in group]))
        lines.append(f"| {e:g} | {len(group)} | {m_psnr('blurred'):.2f} | {m_psnr(best_rl):.2f} | "
                     + " | ".join(f"{m_psnr(m):.2f}" for m, _ in methods) + " |")
    if chosen:
        lines += ["", "checkpoints (chosen by validation PSNR): " + ", ".join(
            f"{m} step {chosen[m]['step']} (val PSNR {chosen[m]['val_psnr']:.2f} dB)" for m, _ in methods if m in chosen)]
    lines += ["", f"baseline settings chosen by mean PSNR on {val_pairs} blurred validation pairs: "
              f"{best_w}, {best_rl}",
              "", "| baseline setting | validation PSNR (dB) | validation SSIM | test PSNR (dB) | test SSIM | "
              "faces detected (test) |", "|---|---|---|---|---|---|"]
    for k, v in sweep_means.items():
        mark = " (chosen)" if k in (best_w, best_rl) else ""
        lines.append(f"| {k}{mark} | {val_means[k]['psnr']:.2f} | {val_means[k]['ssim']:.4f} | {v['psnr']:.2f} | "
                     f"{v['ssim']:.4f} | {fmt(None if v['detection'] is None else v['detection'] * 100, '%.0f%%')} |")
    lines += ["", "| step | " + " | ".join(f"{m} val PSNR / SSIM" for m, _ in methods) + " | blurred val PSNR / SSIM |",
              "|---" * (len(methods) + 2) + "|"]
    steps = sorted({r["step"] for rows_ in curves.values() for r in rows_})
    for s in steps:
        cells, base = [], "n/a"
        for m, _ in methods:
            r = next((r for r in curves[m] if r["step"] == s), None)
            cells.append("n/a" if r is None else f"{r['val_psnr']:.2f} / {r['val_ssim']:.4f}")
            if r is not None:
                base = f"{r['val_blurred_psnr']:.2f} / {r['val_blurred_ssim']:.4f}"
        lines.append(f"| {s} | " + " | ".join(cells) + f" | {base} |")
    if not detect:
        lines.append("\nface detection: left out (" + ("DETECT=0: a set without faces" if os.environ.get("DETECT", "1") == "0" else "OpenCV (python3-opencv, opencv-data) not found") + ")")
    text = "\n".join(lines) + "\n"
    open(os.path.join(work, "results.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
