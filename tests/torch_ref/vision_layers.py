"""PyTorch parity of the classic layer kinds of nets/ (linear, conv2d,
maxpool, avgpool, relu, leaky_relu, tanh): fixed, seeded inputs, weights
and output gradients go to tests/tools/layer_dump through a safetensors
file; its y, dx and parameter gradients are compared with torch.nn.functional
and autograd of sum(y * dy) in float64, within 1e-4 relative (max |a - b| /
max |b| per tensor). One max-pool case is full of ties (small integers):
fivefold's rule, the first input of the window wins, is PyTorch's.

    vision_layers.py LAYER_DUMP [--self-check]

--self-check perturbs one reference weight gradient by 1e-3 of its scale
and expects that case to be reported as a mismatch.
Exit 0 all match, 1 a mismatch, 77 PyTorch missing.
"""
import json
import os
import subprocess
import sys

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


def pair(v):
    return tuple(v) if isinstance(v, list) else (v, v)


def linear(spec, x, p):
    return F.linear(x.flatten(1), p["weight"], p.get("bias"))


def conv(spec, x, p):
    return F.conv2d(x, p["weight"], p.get("bias"), stride=pair(spec.get("stride", 1)),
                    padding=pair(spec.get("padding", 0)))


def maxpool(spec, x, p):
    k = pair(spec["kernel"])
    return F.max_pool2d(x, k, pair(spec.get("stride", spec["kernel"])))


def avgpool(spec, x, p):
    k = pair(spec["kernel"])
    return F.avg_pool2d(x, k, pair(spec.get("stride", spec["kernel"])))


# (name, spec, (N, C, H, W), reference, parameter shapes, input kind)
CASES = [
    ("linear", {"type": "linear", "out": 7}, (3, 2, 3, 4), linear, {"weight": (7, 24), "bias": (7,)}, "normal"),
    ("linear_nobias", {"type": "linear", "out": 5, "bias": False}, (2, 9, 1, 1), linear, {"weight": (5, 9)},
     "normal"),
    ("conv_5x5", {"type": "conv2d", "out_channels": 6, "kernel": 5}, (2, 1, 12, 12), conv,
     {"weight": (6, 1, 5, 5), "bias": (6,)}, "normal"),
    ("conv_3x2_s2_p1", {"type": "conv2d", "out_channels": 4, "kernel": [3, 2], "stride": 2, "padding": 1,
                        "bias": False}, (2, 3, 9, 8), conv, {"weight": (4, 3, 3, 2)}, "normal"),
    ("maxpool_2", {"type": "maxpool", "kernel": 2}, (2, 3, 6, 6), maxpool, {}, "distinct"),
    ("maxpool_3_s2", {"type": "maxpool", "kernel": 3, "stride": 2}, (2, 2, 7, 9), maxpool, {}, "distinct"),
    ("maxpool_ties", {"type": "maxpool", "kernel": 2}, (2, 2, 6, 6), maxpool, {}, "ties"),
    ("avgpool_2", {"type": "avgpool", "kernel": 2}, (2, 3, 6, 7), avgpool, {}, "normal"),
    ("avgpool_3x2_s1", {"type": "avgpool", "kernel": [3, 2], "stride": 1}, (1, 2, 5, 5), avgpool, {}, "normal"),
    ("relu", {"type": "relu"}, (2, 3, 4, 4), lambda s, x, p: F.relu(x), {}, "distinct"),
    ("leaky_relu", {"type": "leaky_relu", "slope": 0.2}, (2, 3, 4, 4),
     lambda s, x, p: F.leaky_relu(x, 0.2), {}, "distinct"),
    ("tanh", {"type": "tanh"}, (2, 3, 4, 4), lambda s, x, p: torch.tanh(x), {}, "normal"),
]


def inputs(kind, shape, gen):
    if kind == "normal":
        return torch.randn(*shape, generator=gen)
    n = 1
    for d in shape:
        n *= d
    if kind == "ties":
        return torch.randint(0, 3, shape, generator=gen).float()
    # distinct values 0.05 apart, none near zero (no ties, no kinks)
    return ((torch.randperm(n, generator=gen).float() - n / 2 + 0.5) * 0.05).reshape(shape)


def run_case(tool, case, index, tmp, perturb):
    name, spec, shape, ref_fn, pshapes, kind = case
    gen = torch.Generator().manual_seed(2000 + index)
    x = inputs(kind, shape, gen)
    params = {k: torch.randn(*s, generator=gen) * 0.3 for k, s in pshapes.items()}
    with torch.no_grad():
        y_shape = ref_fn(spec, x, params).shape
    dy = torch.randn(*y_shape, generator=gen)
    meta = {"spec": json.dumps(spec), "batch": str(shape[0]), "c": str(shape[1]), "h": str(shape[2]),
            "w": str(shape[3])}
    in_path, out_path = os.path.join(tmp, f"{name}.in.safetensors"), os.path.join(tmp, f"{name}.out.safetensors")
    safetensors_io.save(in_path, {"x": x, "dy": dy, **params}, meta)
    proc = subprocess.run([tool, in_path, out_path], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"{name}: layer_dump exited {proc.returncode}: {proc.stderr.strip()}")
        return False
    got, _ = safetensors_io.load(out_path)
    xd = x.double().requires_grad_(True)
    pd = {k: v.double().requires_grad_(True) for k, v in params.items()}
    y = ref_fn(spec, xd, pd)
    (y * dy.double()).sum().backward()
    ref = {"y": y.detach().reshape(got["y"].shape), "dx": xd.grad}
    for k, v in pd.items():
        ref["d" + k] = v.grad
    if perturb:
        ref["dw"] = ref["dweight"]
        parity_util.perturb_dw(ref, gen)
        ref["dweight"] = ref.pop("dw")
    return parity_util.compare(name, got, ref, ["y", "dx"] + ["d" + k for k in pd], TOLERANCE, digits=2)


if __name__ == "__main__":
    sys.exit(parity_util.main(__doc__, sys.argv, CASES, run_case, 2, "dweight"))
