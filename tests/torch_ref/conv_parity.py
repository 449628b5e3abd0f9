"""PyTorch parity of fivefold's conv2d and conv_transpose2d
(src/kern/conv2d.h): fixed, seeded inputs and weights go to
tests/tools/conv2d_dump through a safetensors file; its y, dx, dw and db
are compared with torch.nn.functional.conv2d / conv_transpose2d and
autograd of the loss sum(y * dy), computed in float64, within 1e-4 relative
(max |a - b| / max |b| per tensor).

    conv_parity.py CONV2D_DUMP [--self-check]

--self-check perturbs the reference dw by 1e-3 of its scale in one case and
expects that case to be reported as a mismatch: the comparison can fail.
Exit 0 all match, 1 a mismatch, 77 PyTorch missing.
"""
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: PyTorch is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_util  # noqa: E402
import safetensors_io  # noqa: E402

TOLERANCE = 1e-4

# (name, transposed, N, Cin, H, W, Cout, kh, kw, stride, pad, dilation, groups, output_padding)
CASES = [
    ("conv_3x3_s1_p1", 0, 2, 3, 9, 8, 5, 3, 3, (1, 1), (1, 1), (1, 1), 1, (0, 0)),
    ("conv_3x3_s2_p1_g2", 0, 3, 4, 11, 10, 6, 3, 3, (2, 2), (1, 1), (1, 1), 2, (0, 0)),
    ("conv_7x7_s1_p3", 0, 1, 3, 16, 13, 8, 7, 7, (1, 1), (3, 3), (1, 1), 1, (0, 0)),
    ("conv_5x3_s2x1_p2x1_d2x1", 0, 2, 4, 12, 9, 4, 5, 3, (2, 1), (2, 1), (2, 1), 1, (0, 0)),
    ("conv_1x1_s2_g4", 0, 2, 8, 7, 6, 12, 1, 1, (2, 2), (0, 0), (1, 1), 4, (0, 0)),
    ("conv_depthwise_3x3_d2", 0, 1, 6, 10, 10, 6, 3, 3, (1, 1), (2, 2), (2, 2), 6, (0, 0)),
    ("convT_3x3_s2_p1_op1", 1, 2, 8, 5, 6, 4, 3, 3, (2, 2), (1, 1), (1, 1), 1, (1, 1)),
    ("convT_4x4_s2_p1", 1, 1, 6, 4, 4, 3, 4, 4, (2, 2), (1, 1), (1, 1), 1, (0, 0)),
    ("convT_3x3_s1_p1_g2", 1, 3, 4, 6, 5, 6, 3, 3, (1, 1), (1, 1), (1, 1), 2, (0, 0)),
    ("convT_3x2_s2x1_d2_op1x0", 1, 2, 4, 4, 5, 4, 3, 2, (2, 1), (1, 0), (2, 2), 2, (1, 0)),
    ("convT_7x7_s1_p3", 1, 1, 5, 8, 7, 3, 7, 7, (1, 1), (3, 3), (1, 1), 1, (0, 0)),
]


def reference(case, x, w, b, dy):
    _, tr, *_rest = case
    stride, pad, dil, groups, opad = case[9], case[10], case[11], case[12], case[13]
    x = x.double().requires_grad_(True)
    w = w.double().requires_grad_(True)
    b = b.double().requires_grad_(True)
    if tr:
        y = F.conv_transpose2d(x, w, b, stride=stride, padding=pad, output_padding=opad, groups=groups,
                               dilation=dil)
    else:
        y = F.conv2d(x, w, b, stride=stride, padding=pad, dilation=dil, groups=groups)
    (y * dy.double()).sum().backward()
    return {"y": y.detach(), "dx": x.grad, "dw": w.grad, "db": b.grad}


def run_case(tool, case, index, tmp, perturb):
    name, tr, N, Cin, H, W, Cout, kh, kw, stride, pad, dil, groups, opad = case
    gen = torch.Generator().manual_seed(1000 + index)
    x = torch.randn(N, Cin, H, W, generator=gen)
    wshape = (Cin, Cout // groups, kh, kw) if tr else (Cout, Cin // groups, kh, kw)
    w = torch.randn(*wshape, generator=gen) * 0.3
    b = torch.randn(Cout, generator=gen)
    with torch.no_grad():
        y_shape = (F.conv_transpose2d(x, w, None, stride, pad, opad, groups, dil) if tr
                   else F.conv2d(x, w, None, stride, pad, dil, groups)).shape
    dy = torch.randn(*y_shape, generator=gen)
    meta = {"batch": N, "in_channels": Cin, "in_h": H, "in_w": W, "out_channels": Cout, "kernel_h": kh,
            "kernel_w": kw, "stride_h": stride[0], "stride_w": stride[1], "pad_h": pad[0], "pad_w": pad[1],
            "dilation_h": dil[0], "dilation_w": dil[1], "groups": groups, "transposed": tr,
            "output_pad_h": opad[0], "output_pad_w": opad[1], "precision": "fp32"}
    in_path, out_path = os.path.join(tmp, f"{name}.in.safetensors"), os.path.join(tmp, f"{name}.out.safetensors")
    safetensors_io.save(in_path, {"x": x, "w": w, "b": b, "dy": dy}, {k: str(v) for k, v in meta.items()})
    proc = subprocess.run([tool, in_path, out_path], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"{name}: conv2d_dump exited {proc.returncode}: {proc.stderr.strip()}")
        return False
    got, _ = safetensors_io.load(out_path)
    ref = reference(case, x, w, b, dy)
    if perturb:
        parity_util.perturb_dw(ref, gen)
    return parity_util.compare(name, got, ref, ("y", "dx", "dw", "db"), TOLERANCE, digits=2)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tool, self_check = sys.argv[1], "--self-check" in sys.argv[2:]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="fivefold-conv-parity.") as tmp:
        if self_check:
            caught = not run_case(tool, CASES[1], 1, tmp, perturb=True)
            print("self-check: the perturbed dw was " + ("caught, as it should be" if caught else "NOT caught"))
            return 0 if caught else 1
        results = [run_case(tool, case, i, tmp, perturb=False) for i, case in enumerate(CASES)]
    bad = results.count(False)
    print(f"{len(results) - bad}/{len(results)} cases within {TOLERANCE:g} relative of PyTorch")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
