"""Shared by the parity scripts (conv_parity.py, tropical_parity.py,
gan_layers.py): the perturbation their self-checks plant, the round trip
through a dump tool and the tensor-by-tensor comparison against PyTorch,
so that all hold fivefold to the same rule."""
import os
import subprocess

import torch

import safetensors_io


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


def run_dump(tool, name, tmp, tensors, metadata):
    """Writes tensors and metadata to <tmp>/<name>.in.safetensors, runs
    `tool IN OUT` and returns OUT's tensors; None (after printing why) when
    the tool failed."""
    in_path, out_path = os.path.join(tmp, f"{name}.in.safetensors"), os.path.join(tmp, f"{name}.out.safetensors")
    safetensors_io.save(in_path, tensors, metadata)
    proc = subprocess.run([tool, in_path, out_path], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"FAIL {name}: {os.path.basename(tool)} exited {proc.returncode}: {proc.stderr.strip()}")
        return None
    return safetensors_io.load(out_path)[0]


def report(results, tolerance):
    """The closing line of a parity script; its exit status."""
    bad = results.count(False)
    print(f"{len(results) - bad}/{len(results)} cases within {tolerance:g} relative of PyTorch")
    return 1 if bad else 0
