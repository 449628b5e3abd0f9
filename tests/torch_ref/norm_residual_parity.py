"""PyTorch parity of fivefold's residual add + norm (src/kern/rmsnorm.h,
src/kern/layernorm.h; the norm_residual switch of src/kern/fusion.h), fused
and unfused: x = res + y (+ the projection's bias), out = RMSNorm(x) (as
torch.nn.functional.rms_norm would, written out) or
torch.nn.functional.layer_norm(x) with GPT-2's weight and bias, and the
gradients of sum(out * dout) + sum(x * ds) by autograd in float64 (in res,
the projection bias and the norm's weight and bias); every tensor within
1e-5 relative (max |a - b| / max |b|). The fused and unfused outputs must
also be bit-identical.

    norm_residual_parity.py NORM_RESIDUAL_DUMP [--self-check]

--self-check perturbs the reference dw by 1e-3 of its scale in one case and
expects the mismatch to be reported. Exit 0 all match, 1 a mismatch, 77
PyTorch missing.
"""
import os
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: PyTorch is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_util  # noqa: E402

TOLERANCE = 1e-5
EPS = 1e-5
# (name, layernorm, with_bias, rows, cols): below one 32-column block, several
# with a remainder, past the parallel threshold
CASES = [("rms-small", 0, 0, 3, 17), ("rms-bias", 0, 1, 7, 131), ("rms-parallel", 0, 0, 300, 200),
         ("ln-small", 1, 0, 3, 17), ("ln-bias", 1, 1, 7, 131), ("ln-parallel", 1, 1, 300, 200)]


def keys(layernorm):
    return ("x", "out", "dres", "dbias", "dw") + (("db",) if layernorm else ())


def reference(t, layernorm, with_bias):
    d = {k: v.double() for k, v in t.items()}
    res, bias = d["res"].requires_grad_(True), d["bias"].requires_grad_(True)
    w, b = d["w"].requires_grad_(True), d["b"].requires_grad_(True)
    x = res + d["y"]
    if with_bias:
        x = x + bias
    x.retain_grad()
    if layernorm:
        out = F.layer_norm(x, (x.shape[1],), w, b, EPS)
    else:
        out = x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + EPS) * w
    ((out * d["dout"]).sum() + (x * d["ds"]).sum()).backward()
    ref = {"x": x.detach(), "out": out.detach(), "dres": res.grad, "dw": w.grad, "db": b.grad,
           "dbias": bias.grad if with_bias else x.grad.sum(dim=0)}
    return ref


def run_case(tool, case, index, tmp, perturb):
    name, layernorm, with_bias, rows, cols = case
    gen = torch.Generator().manual_seed(3000 + index)
    t = {"res": 2 * torch.randn(rows, cols, generator=gen), "y": torch.randn(rows, cols, generator=gen),
         "dout": torch.randn(rows, cols, generator=gen), "ds": torch.randn(rows, cols, generator=gen),
         "bias": 0.5 * torch.randn(cols, generator=gen), "w": 1 + 0.1 * torch.randn(cols, generator=gen),
         "b": 0.5 * torch.randn(cols, generator=gen)}
    ref = reference(t, layernorm, with_bias)
    if perturb:
        parity_util.perturb_dw(ref, gen)
    ok, got = True, {}
    meta = {"rows": rows, "cols": cols, "layernorm": layernorm, "with_bias": with_bias}
    for fused in (1, 0):
        out = parity_util.run_dump(tool, f"{name}-fused{fused}", tmp, t, dict(meta, fused=fused))
        if out is None:
            return False
        got[fused] = out
        ok &= parity_util.compare(f"{name} ({'fused' if fused else 'unfused'})", out, ref, keys(layernorm), TOLERANCE)
    for key in keys(layernorm):
        if not torch.equal(got[1][key], got[0][key]):
            print(f"FAIL {name}: {key} differs between the fused and unfused kernels")
            ok = False
    return ok


if __name__ == "__main__":
    sys.exit(parity_util.main(__doc__, sys.argv, CASES, run_case, 4, "dw"))
