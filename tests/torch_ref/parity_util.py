"""Shared by the parity scripts (conv_parity.py, tropical_parity.py,
gan_layers.py, tropical_layers.py): the perturbation their self-checks
plant, the round trip through a dump tool, the tensor-by-tensor comparison
against PyTorch, so that all hold fivefold to the same rule, and the
tie-free data of the tropical ones."""
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


def main(doc, argv, cases, run_case, self_check_index, what):
    """The command line of a parity script: `SCRIPT TOOL [--self-check]`.
    Runs run_case(tool, case, index, tmp, perturb) over every case, or with
    --self-check only case self_check_index with its reference perturbed,
    which must then be caught. Returns the exit status."""
    import tempfile

    if len(argv) < 2:
        print(doc)
        return 2
    tool, self_check = argv[1], "--self-check" in argv[2:]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="fivefold-parity.") as tmp:
        if self_check:
            caught = not run_case(tool, cases[self_check_index], self_check_index, tmp, perturb=True)
            print(f"self-check: the perturbed {what} was " + ("caught, as it should be" if caught else "NOT caught"))
            return 0 if caught else 1
        results = [run_case(tool, case, i, tmp, perturb=False) for i, case in enumerate(cases)]
    bad = results.count(False)
    print(f"{len(results) - bad}/{len(results)} cases within tolerance of PyTorch")
    return 1 if bad else 0


def ints(gen, *shape):
    """Integers in [0, 16) as float64."""
    return torch.randint(0, 16, shape, generator=gen).double()


def tagged(gen, rows, cols, scale=1024.0):
    """rows x cols integers plus col / scale: each candidate index its own
    tag, so two candidates of one reduction never tie (cols < scale)."""
    return ints(gen, rows, cols) + torch.arange(cols, dtype=torch.float64) / scale


def run_dump(tool, name, tmp, tensors, meta):
    """Writes tensors (as float32) and metadata (as strings) to
    <tmp>/<name>.in.safetensors, runs `tool IN OUT` and returns OUT's
    tensors; None (after printing why) when the tool failed."""
    in_path, out_path = os.path.join(tmp, f"{name}.in.safetensors"), os.path.join(tmp, f"{name}.out.safetensors")
    safetensors_io.save(in_path, {k: t.float() for k, t in tensors.items()}, {k: str(v) for k, v in meta.items()})
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
