"""PyTorch parity of fivefold's fused elementwise chains (src/kern/fusion.h),
fused and unfused: GPT-2's bias + GeLU (kern/gelu.h bias_gelu_forward /
bias_gelu_backward) against torch.nn.functional.gelu(h + b,
approximate="tanh"), and SwiGLU (kern/swiglu.h) against silu(gate) * up,
with autograd of the losses sum(a * da) and sum(s * dy), computed in
float64; every tensor within 1e-5 relative (max |a - b| / max |b|). The
fused and unfused outputs must also be bit-identical.

    fused_act_parity.py FUSED_ACT_DUMP [--self-check]

--self-check perturbs the reference db by 1e-3 of its scale in one case and
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
KEYS = ("biased", "a", "dh", "db", "s", "dgate_up")
# (name, rows, cols): one column block, several with a remainder, past the parallel threshold
CASES = [("small", 3, 17), ("blocks", 7, 131), ("parallel", 80, 520)]


def reference(h, b, da, gu, dy):
    h, b = h.double().requires_grad_(True), b.double().requires_grad_(True)
    biased = h + b
    a = F.gelu(biased, approximate="tanh")
    (a * da.double()).sum().backward()
    gu = gu.double().requires_grad_(True)
    cols = gu.shape[1] // 2
    s = F.silu(gu[:, :cols]) * gu[:, cols:]
    (s * dy.double()).sum().backward()
    return {"biased": biased.detach(), "a": a.detach(), "dh": h.grad, "db": b.grad, "s": s.detach(),
            "dgate_up": gu.grad}


def run_case(tool, case, index, tmp, perturb):
    name, rows, cols = case
    gen = torch.Generator().manual_seed(2000 + index)
    t = {"h": 2 * torch.randn(rows, cols, generator=gen), "b": torch.randn(cols, generator=gen),
         "da": torch.randn(rows, cols, generator=gen), "gate_up": 3 * torch.randn(rows, 2 * cols, generator=gen),
         "dy": torch.randn(rows, cols, generator=gen)}
    ref = reference(t["h"], t["b"], t["da"], t["gate_up"], t["dy"])
    if perturb:
        ref["db"] = ref["db"] + 1e-3 * ref["db"].abs().max() * torch.sign(torch.randn(cols, generator=gen))
    ok, got = True, {}
    for fused in (1, 0):
        out = parity_util.run_dump(tool, f"{name}-fused{fused}", tmp, t, {"rows": rows, "cols": cols, "fused": fused})
        if out is None:
            return False
        got[fused] = out
        ok &= parity_util.compare(f"{name} ({'fused' if fused else 'unfused'})", out, ref, KEYS, TOLERANCE)
    for key in KEYS:
        if not torch.equal(got[1][key], got[0][key]):
            print(f"FAIL {name}: {key} differs between the fused and unfused kernels")
            ok = False
    return ok


if __name__ == "__main__":
    sys.exit(parity_util.main(__doc__, sys.argv, CASES, run_case, 1, "db"))
