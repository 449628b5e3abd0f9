"""fivefold's PSNR and SSIM (src/kern/image_metrics.h, through
tests/tools/image_metrics_dump) against scikit-image's
peak_signal_noise_ratio and structural_similarity(gaussian_weights=True,
sigma=1.5, use_sample_covariance=False, data_range=R) on fixed, seeded
images: grey and RGB, square and not, the smallest allowed side (11),
data ranges 1 and 255, noise, blur, a shift and a contrast change (SSIM's
three terms). scikit-image runs in float64 on the same float32 values;
PSNR must agree within 1e-9 dB, SSIM within 1e-9.

    image_metrics_parity.py IMAGE_METRICS_DUMP [--self-check]

--self-check moves scikit-image's SSIM of one case by 1e-6 and expects that
case to be reported as a mismatch: the comparison can fail.
Exit 0 all match, 1 a mismatch, 77 scikit-image missing.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from scipy import ndimage
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity
except ImportError as e:
    print(f"SKIP (missing dependency: python3-skimage): {e}")
    sys.exit(77)

TOLERANCE = 1e-9


def smooth_scene(rng, h, w):
    y, x = np.mgrid[0:h, 0:w]
    im = 0.5 + 0.3 * np.sin(0.3 * x + rng.uniform(0, 3)) * np.cos(0.2 * y)
    im[h // 4: h // 2, w // 5: w // 2] = 0.9
    return im


def cases():
    rng = np.random.default_rng(2004)
    out = []
    a = smooth_scene(rng, 32, 32)
    out.append(("grey_noise", a + rng.normal(0, 0.05, a.shape), a, 1.0))
    out.append(("grey_blur", ndimage.uniform_filter(a, 5), a, 1.0))
    b = smooth_scene(rng, 23, 37)
    out.append(("grey_23x37_shift_contrast", 0.7 * np.roll(b, 2, axis=1) + 0.1, b, 1.0))
    c = rng.uniform(0, 1, (11, 11))
    out.append(("grey_11x11_random", rng.uniform(0, 1, (11, 11)), c, 1.0))
    d = np.stack([smooth_scene(rng, 20, 28) for _ in range(3)])
    out.append(("rgb_20x28_noise", d + rng.normal(0, 0.1, d.shape), d, 1.0))
    e = 255 * smooth_scene(rng, 16, 40)
    out.append(("grey_range255", np.round(e + rng.normal(0, 8, e.shape)), e, 255.0))
    return [(n, t.astype(np.float32), r.astype(np.float32), dr) for n, t, r, dr in out]


def reference(test, ref, data_range):
    t, r = test.astype(np.float64), ref.astype(np.float64)
    psnr = peak_signal_noise_ratio(r, t, data_range=data_range)
    kw = dict(gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=data_range)
    ssim = structural_similarity(t, r, channel_axis=0, **kw) if t.ndim == 3 else structural_similarity(t, r, **kw)
    return psnr, ssim


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    tool, self_check = sys.argv[1], "--self-check" in sys.argv[2:]
    ok_all, caught = True, False
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, test, ref, data_range) in enumerate(cases()):
            shape = test.shape if test.ndim == 3 else (1,) + test.shape
            tp, rp = os.path.join(tmp, "t.f32"), os.path.join(tmp, "r.f32")
            test.astype("<f4").tofile(tp)
            ref.astype("<f4").tofile(rp)
            proc = subprocess.run([tool, *map(str, shape), repr(data_range), tp, rp], capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"FAIL {name}: image_metrics_dump exited {proc.returncode}: {proc.stderr.strip()}")
                ok_all = False
                continue
            got = dict(line.split() for line in proc.stdout.splitlines())
            psnr, ssim = reference(test, ref, data_range)
            if self_check and i == 1:
                ssim += 1e-6
            dp, ds = abs(float(got["psnr"]) - psnr), abs(float(got["ssim"]) - ssim)
            ok = dp <= TOLERANCE and ds <= TOLERANCE
            print(f"{'ok  ' if ok else 'FAIL'} {name}: psnr {psnr:.6f} dB (diff {dp:.1e}), ssim {ssim:.6f} (diff {ds:.1e})")
            if self_check and i == 1:
                caught = not ok
            elif not ok:
                ok_all = False
    if self_check:
        print("self-check: the planted SSIM error was " + ("caught" if caught else "NOT caught"))
        sys.exit(0 if caught and ok_all else 1)
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
