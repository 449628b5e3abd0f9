"""PyTorch parity of the GAN generator's layers (src/nets/layer_gan.h):
conv_transpose2d against torch.nn.functional.conv_transpose2d and
instance_norm against torch.nn.functional.instance_norm (per-sample
statistics, biased variance), on fixed, seeded inputs and weights sent to
tests/tools/gan_layers_dump through a safetensors file. Its y, dx and the
parameter gradients dw, db of the loss sum(y * dy) are compared with
PyTorch's autograd in float64 within 1e-4 relative (max |a - b| / max |b|
per tensor).

    gan_layers.py GAN_LAYERS_DUMP [--self-check]

--self-check plants a 1e-3 error in the reference dw of one transposed
convolution and one affine instance norm, and passes only when both are
reported. Exit 0 all match, 1 a mismatch, 77 PyTorch missing.
"""
import json
import os
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP (missing dependency: python3-torch): PyTorch is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_util  # noqa: E402

TOLERANCE = 1e-4

# (name, kind, spec, N, C, H, W)
CASES = [
    ("convT_3x3_s2_p1_op1", "conv_transpose2d",
     {"out_channels": 4, "kernel": 3, "stride": 2, "padding": 1, "output_padding": 1}, 2, 6, 5, 4),
    ("convT_4x4_s2_p1_nobias", "conv_transpose2d",
     {"out_channels": 3, "kernel": 4, "stride": 2, "padding": 1, "bias": False}, 1, 5, 6, 6),
    ("convT_7x5_s1_p3x2", "conv_transpose2d", {"out_channels": 2, "kernel": [7, 5], "padding": [3, 2]}, 2, 3, 8, 7),
    ("convT_3x2_s3x2_op2x1", "conv_transpose2d",
     {"out_channels": 5, "kernel": [3, 2], "stride": [3, 2], "output_padding": [2, 1]}, 3, 2, 4, 5),
    ("inorm_affine", "instance_norm", {"affine": True}, 3, 4, 7, 6),
    ("inorm_plain", "instance_norm", {}, 2, 3, 9, 11),
    ("inorm_affine_eps0.1_1x5", "instance_norm", {"affine": True, "eps": 0.1}, 4, 2, 1, 5),
]


def out_shape(kind, spec, x):
    if kind == "instance_norm":
        return x.shape
    k = spec["kernel"] if isinstance(spec["kernel"], list) else [spec["kernel"]] * 2
    pair = lambda key, d: (spec.get(key, d) if isinstance(spec.get(key, d), list) else [spec.get(key, d)] * 2)
    s, p, q = pair("stride", 1), pair("padding", 0), pair("output_padding", 0)
    return (x.shape[0], spec["out_channels"]) + tuple((x.shape[2 + i] - 1) * s[i] - 2 * p[i] + k[i] + q[i]
                                                       for i in range(2))


def reference(kind, spec, x, params, dy):
    x = x.double().requires_grad_(True)
    p = {k: v.double().requires_grad_(True) for k, v in params.items()}
    if kind == "conv_transpose2d":
        pair = lambda key, d: (tuple(spec.get(key, d)) if isinstance(spec.get(key, d), list) else spec.get(key, d))
        y = F.conv_transpose2d(x, p["w"], p.get("b"), stride=pair("stride", 1), padding=pair("padding", 0),
                               output_padding=pair("output_padding", 0))
    else:
        y = F.instance_norm(x, weight=p.get("w"), bias=p.get("b"), use_input_stats=True, eps=spec.get("eps", 1e-5))
    (y * dy.double()).sum().backward()
    ref = {"y": y.detach(), "dx": x.grad}
    ref.update({"d" + k: v.grad for k, v in p.items()})
    return ref


def run_case(tool, case, index, tmp, perturb):
    name, kind, spec, N, C, H, W = case
    gen = torch.Generator().manual_seed(3000 + index)
    x = torch.randn(N, C, H, W, generator=gen) * 1.5 + 0.3
    params = {}
    if kind == "conv_transpose2d":
        k = spec["kernel"] if isinstance(spec["kernel"], list) else [spec["kernel"]] * 2
        params["w"] = torch.randn(C, spec["out_channels"], *k, generator=gen) * 0.3
        if spec.get("bias", True):
            params["b"] = torch.randn(spec["out_channels"], generator=gen)
    elif spec.get("affine", False):
        params["w"] = 1.0 + 0.5 * torch.randn(C, generator=gen)
        params["b"] = torch.randn(C, generator=gen)
    dy = torch.randn(*out_shape(kind, spec, x), generator=gen)
    got = parity_util.run_dump(tool, name, tmp, {"x": x, "dy": dy, **params},
                               {"kind": kind, "spec": json.dumps(spec)})
    if got is None:
        return False
    ref = reference(kind, spec, x, params, dy)
    if perturb:
        parity_util.perturb_dw(ref, gen)
    keys = ("y", "dx") + tuple("d" + k for k in params)
    return parity_util.compare(name, got, ref, keys, TOLERANCE, digits=2)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tool, self_check = sys.argv[1], "--self-check" in sys.argv[2:]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="fivefold-gan-layers.") as tmp:
        if self_check:
            caught = [not run_case(tool, CASES[i], i, tmp, perturb=True) for i in (0, 4)]
            print("self-check: the perturbed dw was " + ("caught, as it should be" if all(caught) else "NOT caught"))
            return 0 if all(caught) else 1
        results = [run_case(tool, case, i, tmp, perturb=False) for i, case in enumerate(CASES)]
    return parity_util.report(results, TOLERANCE)


if __name__ == "__main__":
    sys.exit(main())
