"""PyTorch baseline of bench/bench_conv.c: the same layer shapes through
torch.nn.functional.conv2d / conv_transpose2d, forward and backward (input,
weight and bias gradients), fp32 and bf16 (torch.autocast("cpu",
dtype=torch.bfloat16)), on the given thread count. Prints one key=value line
per shape and precision in bench_conv's format; the fastest of the runs made
in the time given. Figures only.

usage: /usr/bin/python3 bench/torch_conv_bench.py THREADS [SECONDS] [--no-bf16]
"""
import sys
import time

import torch
import torch.nn.functional as F

# Keep in step with kShapes in bench/bench_conv.c:
# name, transposed, N, Cin, H, W, Cout, k, stride, pad, output_pad, groups, x channels-last
SHAPES = [
    ("deblur_stem_7x7", 0, 1, 3, 128, 128, 64, 7, 1, 3, 0, 1, 0),
    ("deblur_down_3x3_s2", 0, 1, 64, 128, 128, 128, 3, 2, 1, 0, 1, 0),
    ("deblur_res_3x3", 0, 1, 256, 32, 32, 256, 3, 1, 1, 0, 1, 0),
    ("deblur_up_convT_3x3_s2", 1, 1, 256, 32, 32, 128, 3, 2, 1, 1, 1, 0),
    ("lenet_c1_5x5", 0, 64, 1, 32, 32, 6, 5, 1, 0, 0, 1, 0),
    ("lenet_c3_5x5", 0, 64, 6, 14, 14, 16, 5, 1, 0, 0, 1, 0),
    ("gen_in_7x7", 0, 8, 1, 32, 32, 32, 7, 1, 3, 0, 1, 0),
    ("gen_res_3x3", 0, 8, 32, 32, 32, 32, 3, 1, 1, 0, 1, 1),
    ("gen_out_7x7", 0, 8, 32, 32, 32, 1, 7, 1, 3, 0, 1, 1),
]


def forward_flops(tr, n, cin, cout, k, groups, x_hw, y_hw):
    small_hw, big_c = (x_hw, cout) if tr else (y_hw, cin)
    small_c = cin if tr else cout
    return 2.0 * n * small_c * small_hw * (big_c // groups) * k * k


def main():
    threads = int(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else 0.4
    precisions = ["fp32"] if "--no-bf16" in sys.argv else ["fp32", "bf16"]
    torch.set_num_threads(threads)
    print(f"pytorch conv benchmark, torch {torch.__version__}, {threads} threads, {seconds:.2f} s per figure")
    for name, tr, n, cin, h, w, cout, k, stride, pad, opad, groups, nhwc in SHAPES:
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(n, cin, h, w, generator=gen)
        if nhwc:
            x = x.contiguous(memory_format=torch.channels_last)
        x.requires_grad_(True)
        wshape = (cin, cout // groups, k, k) if tr else (cout, cin // groups, k, k)
        wt = torch.randn(*wshape, generator=gen).requires_grad_(True)
        b = torch.randn(cout, generator=gen).requires_grad_(True)

        def fwd():
            if tr:
                return F.conv_transpose2d(x, wt, b, stride=stride, padding=pad, output_padding=opad, groups=groups)
            return F.conv2d(x, wt, b, stride=stride, padding=pad, groups=groups)

        with torch.no_grad():
            y0 = fwd()
        dy = torch.randn(y0.shape, generator=gen)
        flops = forward_flops(tr, n, cin, cout, k, groups, h * w, y0.shape[2] * y0.shape[3])
        for prec in precisions:
            def step():
                x.grad = wt.grad = b.grad = None
                t0 = time.perf_counter()
                if prec == "bf16":
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        y = fwd()
                else:
                    y = fwd()
                t1 = time.perf_counter()
                y.backward(dy.to(y.dtype))
                t2 = time.perf_counter()
                return t1 - t0, t2 - t1

            step()
            best_f, best_b, start, it = 1e30, 1e30, time.perf_counter(), 0
            while it < 3 or time.perf_counter() - start < seconds:
                f, bk = step()
                best_f, best_b, it = min(best_f, f), min(best_b, bk), it + 1
            print(f"pytorch_conv shape={name} precision={prec} threads={threads} fwd_ms={best_f * 1e3:.3f} "
                  f"bwd_ms={best_b * 1e3:.3f} fwd_gflops={flops / best_f * 1e-9:.1f} "
                  f"bwd_gflops={2 * flops / best_b * 1e-9:.1f}", flush=True)


if __name__ == "__main__":
    main()
