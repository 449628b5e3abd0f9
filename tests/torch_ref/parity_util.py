"""Shared by the kernel parity scripts (conv_parity.py, tropical_parity.py):
the perturbation their self-checks plant and the tensor-by-tensor comparison
against PyTorch, so that both hold fivefold to the same rule."""
import torch


def perturb_dw(ref, gen):
    """The reference's dw moved by 1e-3 of its scale: a self-check must see it."""
    ref["dw"] = ref["dw"] + 1e-3 * ref["dw"].abs().max() * torch.sign(torch.randn(ref["dw"].shape, generator=gen))


def compare(name, got, ref, keys, tolerance, digits=2):
    """Max error of each tensor relative to the reference's largest value;
    prints one line and returns whether every tensor is within tolerance."""
    ok, parts = True, []
    for key in keys:
        a, r = got[key].double(), ref[key]
        if tuple(a.shape) != tuple(r.shape):
            print(f"{name}: {key} has shape {tuple(a.shape)}, PyTorch {tuple(r.shape)}")
            ok = False
            continue
        err = ((a - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
        parts.append(f"{key} {err:.{digits}e}")
        if not err <= tolerance:
            ok = False
    print(f"{'ok  ' if ok else 'FAIL'} {name}: " + ", ".join(parts))
    return ok
