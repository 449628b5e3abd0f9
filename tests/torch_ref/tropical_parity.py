"""PyTorch parity of fivefold's tropical kernels (src/kern/tropical.h):
max-plus and min-plus dense layers (with bias) and the six tropical conv2d
variants, written independently here the way public implementations do it
(broadcast x + w, then amax / amin; F.unfold for the convolution windows),
against tests/tools/tropical_dump on the same tensors: y, dx, dw (and db)
for the loss sum(y * dy), within 1e-5 relative (max |a - b| / max |b|).

The data are tie-free by construction: integers in [0, 16) plus a distinct
multiple of 2^-10 per candidate index in w, so any two candidates differ by
at least 2^-10 and every sum is exact in float32 and float64 (PyTorch's amax
splits the gradient evenly between ties; fivefold gives it to the first).

    tropical_parity.py TROPICAL_DUMP [--self-check]

--self-check perturbs the reference dw of one case and expects a mismatch:
the comparison can fail. Exit 0 all match, 1 a mismatch, 77 no PyTorch.
"""
import os
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

TOLERANCE = 1e-5

# (m, n, k)
DENSE = [(7, 19, 33), (1, 3, 1), (20, 17, 300), (33, 40, 64)]
# (N, Cin, H, W, Cout, kh, kw, stride, pad)
CONV = [
    (2, 3, 9, 8, 5, (3, 3), (1, 1), (1, 1)),
    (3, 4, 14, 14, 4, (3, 3), (2, 2), (1, 1)),
    (1, 6, 14, 14, 16, (5, 5), (1, 1), (0, 0)),
    (2, 1, 11, 10, 18, (3, 2), (2, 1), (1, 1)),
]
INNER = ("max", "min")
OUTER = ("sum", "max", "min")


ints, tagged = parity_util.ints, parity_util.tagged


def dense_reference(semiring, x, w, b, dy):
    x, w, b = (t.clone().requires_grad_(True) for t in (x, w, b))
    cand = x[:, None, :] + w[None, :, :]
    y = (cand.amax(dim=-1) if semiring == "max_plus" else cand.amin(dim=-1)) + b
    (y * dy).sum().backward()
    return {"y": y.detach(), "dx": x.grad, "dw": w.grad, "db": b.grad}


def conv_reference(inner, outer, x, w, stride, pad, dy):
    x, w = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    n, cin, h, wd = x.shape
    cout, _, kh, kw = w.shape
    oh, ow = (h + 2 * pad[0] - kh) // stride[0] + 1, (wd + 2 * pad[1] - kw) // stride[1] + 1
    cols = F.unfold(x, (kh, kw), padding=pad, stride=stride)  # zero padding, [N, Cin*kh*kw, L]
    cand = cols.view(n, 1, cin, kh * kw, oh * ow) + w.view(1, cout, cin, kh * kw, 1)
    per_channel = cand.amax(dim=3) if inner == "max" else cand.amin(dim=3)
    if outer == "sum":
        y = per_channel.sum(dim=2)
    elif outer == "max":
        y = per_channel.amax(dim=2)
    else:
        y = per_channel.amin(dim=2)
    y = y.view(n, cout, oh, ow)
    (y * dy).sum().backward()
    return {"y": y.detach(), "dx": x.grad, "dw": w.grad}


def cases():
    for i, (m, n, k) in enumerate(DENSE):
        for semiring in ("max_plus", "min_plus"):
            yield f"dense_{semiring}_{m}x{n}x{k}", ("dense", semiring, m, n, k)
    for i, c in enumerate(CONV):
        for inner in INNER:
            for outer in OUTER:
                yield (f"conv_{inner}_{outer}_N{c[0]}C{c[1]}-{c[4]}_{c[2]}x{c[3]}_k{c[5][0]}x{c[5][1]}"
                       f"s{c[6][0]}x{c[6][1]}p{c[7][0]}x{c[7][1]}"), ("conv", inner, outer) + c


def run_case(tool, name, case, index, tmp, perturb):
    gen = torch.Generator().manual_seed(2000 + index)
    if case[0] == "dense":
        _, semiring, m, n, k = case
        x, w, b = ints(gen, m, k), tagged(gen, n, k), ints(gen, n)
        dy = torch.randn(m, n, generator=gen).double()
        meta = {"kind": "dense", "semiring": semiring, "m": m, "n": n, "k": k}
        tensors = {"x": x, "w": w, "b": b, "dy": dy}
        ref = dense_reference(semiring, x, w, b, dy)
    else:
        _, inner, outer, n, cin, h, wd, cout, (kh, kw), stride, pad = case
        x = ints(gen, n, cin, h, wd)
        w = tagged(gen, cout, cin * kh * kw).view(cout, cin, kh, kw)
        oh, ow = (h + 2 * pad[0] - kh) // stride[0] + 1, (wd + 2 * pad[1] - kw) // stride[1] + 1
        dy = torch.randn(n, cout, oh, ow, generator=gen).double()
        meta = {"kind": "conv", "inner": inner, "outer": outer, "batch": n, "in_channels": cin, "in_h": h,
                "in_w": wd, "out_channels": cout, "kernel_h": kh, "kernel_w": kw, "stride_h": stride[0],
                "stride_w": stride[1], "pad_h": pad[0], "pad_w": pad[1]}
        tensors = {"x": x, "w": w, "dy": dy}
        ref = conv_reference(inner, outer, x, w, stride, pad, dy)
    got = parity_util.run_dump(tool, name, tmp, tensors, meta)
    if got is None:
        return False
    if perturb:
        parity_util.perturb_dw(ref, gen)
    return parity_util.compare(name, got, ref, list(ref), TOLERANCE, digits=1)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tool, self_check = sys.argv[1], "--self-check" in sys.argv[2:]
    torch.set_num_threads(1)
    all_cases = list(cases())
    with tempfile.TemporaryDirectory(prefix="fivefold-tropical-parity.") as tmp:
        if self_check:
            name, case = all_cases[-1]
            caught = not run_case(tool, name, case, len(all_cases) - 1, tmp, perturb=True)
            print("self-check: the perturbed dw was " + ("caught, as it should be" if caught else "NOT caught"))
            return 0 if caught else 1
        results = [run_case(tool, name, case, i, tmp, perturb=False) for i, (name, case) in enumerate(all_cases)]
    bad = results.count(False)
    print(f"{len(results) - bad}/{len(results)} cases within {TOLERANCE:g} relative of PyTorch")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
