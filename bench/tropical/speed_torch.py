"""PyTorch baseline of bench/tropical/speed.c: the max-plus dense layer
(broadcast x + w, amax, + bias) and tropical conv2d (F.unfold, broadcast
+ w, amax over the window, sum / amax over channels), as public
implementations write them, at the same shapes, forward and
forward+backward (autograd), on the given thread count. The dense layer
runs in chunks of rows so the broadcast tensor stays within ~256 MB (the
whole 1024^3 broadcast would be 4 GB); forward+backward does each chunk's
forward and backward in turn, accumulating the weight gradient. Prints one
key=value line per figure in tropical_speed's format (G tropical
multiply-adds/s, the fastest run in the time given). Figures only.

usage: /usr/bin/python3 bench/tropical/speed_torch.py THREADS [SECONDS]
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

# Keep in step with bench/tropical/speed.c.
DENSE = [("1024x1024x1024", 1024, 1024, 1024), ("mmp_b256_784to256", 256, 256, 784),
         ("mmp_b256_256to256", 256, 256, 256)]
# label, N, Cin, H, W, Cout, k, stride, pad, inner, outer
CONV = [
    ("tcnn1_b64_1x28x28_c4_k3s2p1", 64, 1, 28, 28, 4, 3, 2, 1, "max", "sum"),
    ("tcnn2_b64_4x14x14_c4_k3s2p1", 64, 4, 14, 14, 4, 3, 2, 1, "max", "sum"),
    ("lenet1_b64_1x28x28_c6_k5p2", 64, 1, 28, 28, 6, 5, 1, 2, "max", "sum"),
    ("lenet2_b64_6x14x14_c16_k5", 64, 6, 14, 14, 16, 5, 1, 0, "max", "sum"),
    ("lenet2_b64_6x14x14_c16_k5", 64, 6, 14, 14, 16, 5, 1, 0, "min", "max"),
]


def best_time(fn, seconds):
    fn()
    best, start, runs = float("inf"), time.perf_counter(), 0
    while runs < 2 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return best


def dense_layer(x, w, b):
    return (x[:, None, :] + w[None, :, :]).amax(dim=-1) + b


def conv_layer(x, w, stride, pad, inner, outer):
    n, cin, h, wd = x.shape
    cout, _, k, _ = w.shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    cols = F.unfold(x, k, padding=pad, stride=stride).view(n, 1, cin, k * k, oh * ow)
    cand = cols + w.view(1, cout, cin, k * k, 1)
    per_channel = cand.amax(dim=3) if inner == "max" else cand.amin(dim=3)
    y = {"sum": lambda t: t.sum(dim=2), "max": lambda t: t.amax(dim=2), "min": lambda t: t.amin(dim=2)}[outer](
        per_channel)
    return y.view(n, cout, oh, ow)


def main():
    threads = int(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
    torch.set_num_threads(threads)
    load = os.getloadavg()[0]
    print(f"pytorch tropical benchmark, torch {torch.__version__}, {threads} threads, {seconds:.2f} s per figure, "
          f"load_average_1min={load:.2f}")
    gen = torch.Generator().manual_seed(1)
    for label, m, n, k in DENSE:
        x = torch.randn(m, k, generator=gen)
        w = torch.randn(n, k, generator=gen).requires_grad_(True)
        b = torch.randn(n, generator=gen).requires_grad_(True)
        dy = torch.randn(m, n, generator=gen)
        chunk = max(1, (256 << 20) // (4 * n * k))

        def fwd():
            with torch.no_grad():
                for r in range(0, m, chunk):
                    dense_layer(x[r:r + chunk], w, b)

        xg = x.clone().requires_grad_(True)

        def fwd_bwd():
            xg.grad = w.grad = b.grad = None
            for r in range(0, m, chunk):
                y = dense_layer(xg[r:r + chunk], w, b)
                y.backward(dy[r:r + chunk])

        ops = m * n * k * 1e-9
        f, fb = ops / best_time(fwd, seconds), ops / best_time(fwd_bwd, seconds)
        print(f"pytorch_tropical_matmul shape={label} m={m} n={n} k={k} semiring=max_plus threads={threads} "
              f"fwd_gops={f:.3f} fwdbwd_gops={fb:.3f}")
    for label, n, cin, h, wd, cout, k, stride, pad, inner, outer in CONV:
        x = torch.randn(n, cin, h, wd, generator=gen).requires_grad_(True)
        w = torch.rand(cout, cin, k, k, generator=gen).requires_grad_(True)
        with torch.no_grad():
            y0 = conv_layer(x, w, stride, pad, inner, outer)
        dy = torch.randn(y0.shape, generator=gen)

        def fwd():
            with torch.no_grad():
                conv_layer(x, w, stride, pad, inner, outer)

        def fwd_bwd():
            x.grad = w.grad = None
            conv_layer(x, w, stride, pad, inner, outer).backward(dy)

        ops = y0.numel() * cin * k * k * 1e-9
        f, fb = ops / best_time(fwd, seconds), ops / best_time(fwd_bwd, seconds)
        print(f"pytorch_tropical_conv shape={label} variant={inner}_{outer} threads={threads} fwd_gops={f:.3f} "
              f"fwdbwd_gops={fb:.3f}")


if __name__ == "__main__":
    main()
