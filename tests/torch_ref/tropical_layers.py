"""PyTorch parity of fivefold's tropical LAYERS (src/nets/layer_tropical.h):
tropical_conv2d in its six variants, maxplus and minplus (with and without
bias) and standardize, written independently here the way public
implementations do it (broadcast x + w then amax / amin, F.unfold for the
convolution windows), against tests/tools/tropical_layers_dump on the same
tensors: y, dx and the parameter gradients for the loss sum(y * dy), within
1e-5 relative (max |a - b| / max |b|). The layer data are tie-free by
construction (integers plus a distinct multiple of 2^-10 per candidate in
w), since PyTorch's amax splits a tie's gradient and fivefold gives it to
the first index.

Then one small network, conv -> conv -> standardize -> maxplus (with
re-centring) -> linear head -> softmax cross-entropy: its logits and every
gradient at the first step, its losses and its parameters after 10 AdamW
steps (torch.optim.AdamW), within 1e-4 relative.

    tropical_layers.py TROPICAL_LAYERS_DUMP [--self-check]

--self-check perturbs one reference dw and expects the mismatch to be
caught. Exit 0 all match, 1 a mismatch, 77 no PyTorch.
"""
import json
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

LAYER_TOLERANCE = 1e-5
NETWORK_TOLERANCE = 1e-4
STEPS = 10

# (batch, (c, h, w), out_channels, kernel, stride, padding)
CONV_SHAPES = [(2, (3, 9, 8), 5, (3, 3), (2, 2), (1, 1)), (3, (2, 7, 6), 4, (2, 3), (1, 2), (1, 0))]


ints, tagged = parity_util.ints, parity_util.tagged


# ---- the independent implementation ----

def tropical_conv(x, w, inner, outer, stride, pad):
    n, cin, h, wd = x.shape
    cout, _, kh, kw = w.shape
    oh, ow = (h + 2 * pad[0] - kh) // stride[0] + 1, (wd + 2 * pad[1] - kw) // stride[1] + 1
    cols = F.unfold(x, (kh, kw), padding=pad, stride=stride)  # zero padding, [N, Cin*kh*kw, L]
    cand = cols.view(n, 1, cin, kh * kw, oh * ow) + w.view(1, cout, cin, kh * kw, 1)
    per_channel = cand.amax(dim=3) if inner == "max" else cand.amin(dim=3)
    y = {"sum": lambda t: t.sum(dim=2), "max": lambda t: t.amax(dim=2), "min": lambda t: t.amin(dim=2)}[outer](
        per_channel)
    return y.view(n, cout, oh, ow)


def tropical_dense(x, w, b, kind):
    cand = x.flatten(1)[:, None, :] + w[None, :, :]
    y = cand.amax(dim=-1) if kind == "maxplus" else cand.amin(dim=-1)
    return y + b if b is not None else y


def standardize(x, eps):
    flat = x.flatten(1)
    mean = flat.mean(dim=1, keepdim=True)
    var = ((flat - mean) ** 2).mean(dim=1, keepdim=True)
    return ((flat - mean) / torch.sqrt(var + eps)).view(x.shape)


def apply_layer(spec, x, params):
    kind = spec["type"]
    if kind == "tropical_conv2d":
        pair = lambda v: tuple(v) if isinstance(v, list) else (v, v)  # noqa: E731
        return tropical_conv(x, params["weight"], spec["inner"], spec["outer"], pair(spec.get("stride", 1)),
                             pair(spec.get("padding", 0)))
    if kind in ("maxplus", "minplus"):
        return tropical_dense(x, params["weight"], params.get("bias"), kind).view(x.shape[0], -1, 1, 1)
    return standardize(x, spec.get("eps", 1e-5))


def param_shapes(spec, in_shape):
    """(suffix, shape) of the layer's parameters and its output shape."""
    c, h, w = in_shape
    kind = spec["type"]
    if kind == "tropical_conv2d":
        pair = lambda v: tuple(v) if isinstance(v, list) else (v, v)  # noqa: E731
        (kh, kw), (sh, sw), (ph, pw) = pair(spec["kernel"]), pair(spec.get("stride", 1)), pair(spec.get("padding", 0))
        out = (spec["out_channels"], (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1)
        return [("weight", (spec["out_channels"], c, kh, kw))], out
    if kind in ("maxplus", "minplus"):
        shapes = [("weight", (spec["out"], c * h * w))]
        if spec.get("bias", True):
            shapes.append(("bias", (spec["out"],)))
        return shapes, (spec["out"], 1, 1)
    return [], in_shape


# ---- single layers ----

def layer_cases():
    for inner in ("max", "min"):
        for outer in ("sum", "max", "min"):
            for i, (n, shape, cout, k, s, p) in enumerate(CONV_SHAPES):
                spec = {"type": "tropical_conv2d", "inner": inner, "outer": outer, "out_channels": cout,
                        "kernel": list(k), "stride": list(s), "padding": list(p)}
                yield f"tropical_conv2d_{inner}_{outer}_{i}", spec, n, shape
    for kind in ("maxplus", "minplus"):
        for bias in (True, False):
            yield f"{kind}_{'bias' if bias else 'nobias'}", {"type": kind, "out": 11, "bias": bias}, 4, (3, 2, 5)
    yield "standardize", {"type": "standardize", "eps": 1e-5}, 3, (2, 3, 4)


def run_layer_case(tool, name, spec, n, shape, index, tmp, perturb):
    gen = torch.Generator().manual_seed(3000 + index)
    shapes, out_shape = param_shapes(spec, shape)
    if spec["type"] == "standardize":
        x = torch.randn(n, *shape, generator=gen).double() * 3 + 1
    else:
        x = ints(gen, n, *shape)
    params = {}
    for suffix, pshape in shapes:
        if suffix == "weight":
            params[suffix] = tagged(gen, pshape[0], int(torch.tensor(pshape[1:]).prod())).view(pshape)
        else:
            params[suffix] = ints(gen, *pshape)
    dy = torch.randn(n, *out_shape, generator=gen).double()
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    xg = x.clone().requires_grad_(True)
    y = apply_layer(spec, xg, leaves)
    (y * dy).sum().backward()
    ref = {"y": y.detach(), "dx": xg.grad}
    for suffix in leaves:
        ref["dw" if suffix == "weight" else "db"] = leaves[suffix].grad
    meta = {"kind": "layer", "spec": json.dumps(spec), "batch": n, "in_c": shape[0], "in_h": shape[1],
            "in_w": shape[2]}
    got = parity_util.run_dump(tool, name, tmp, {"x": x, "dy": dy, **params}, meta)
    if got is None:
        return False
    got = {("dw" if k == "d.weight" else "db" if k == "d.bias" else k): v for k, v in got.items()}
    if perturb:
        parity_util.perturb_dw(ref, gen)
    return parity_util.compare(name, got, ref, list(ref), LAYER_TOLERANCE, digits=1)


# ---- the small network ----

NETWORK = [
    {"type": "tropical_conv2d", "inner": "min", "outer": "max", "out_channels": 4, "kernel": 3, "stride": 2,
     "padding": 1},
    {"type": "tropical_conv2d", "inner": "max", "outer": "sum", "out_channels": 4, "kernel": 3, "stride": 2,
     "padding": 1},
    {"type": "standardize"},
    {"type": "maxplus", "out": 12, "bias": True, "recenter": True},
]
NET_INPUT, NET_BATCH, NET_CLASSES, NET_LR, NET_WD = (1, 10, 10), 6, 10, 0.02, 0.01


def run_network(tool, tmp):
    gen = torch.Generator().manual_seed(4242)
    x = ints(gen, NET_BATCH, *NET_INPUT)
    targets = torch.randint(0, NET_CLASSES, (NET_BATCH,), generator=gen)
    params, shape = {}, NET_INPUT
    # Tags at 2^-10 in the first layer and 2^-6 in the second keep the
    # second layer's candidates (sums of both) tie-free at the start.
    for i, spec in enumerate(NETWORK):
        shapes, shape = param_shapes(spec, shape)
        for suffix, pshape in shapes:
            if suffix == "weight" and spec["type"] == "tropical_conv2d":
                cols = int(torch.tensor(pshape[1:]).prod())
                params[f"layers.{i}.weight"] = tagged(gen, pshape[0], cols, 1024.0 if i == 0 else 64.0).view(pshape)
            elif suffix == "weight":
                params[f"layers.{i}.weight"] = torch.rand(pshape, generator=gen).double() * 2 - 1
            else:
                params[f"layers.{i}.bias"] = torch.randn(pshape, generator=gen).double() * 0.1
    features = shape[0] * shape[1] * shape[2]
    params["head.weight"] = torch.randn(NET_CLASSES, features, generator=gen).double() / features ** 0.5
    leaves = {k: torch.nn.Parameter(v.clone()) for k, v in params.items()}
    decay = [p for k, p in leaves.items() if not k.endswith(".bias")]
    no_decay = [p for k, p in leaves.items() if k.endswith(".bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": NET_WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=NET_LR, betas=(0.9, 0.999), eps=1e-8)
    ref, losses = {}, []
    for step in range(STEPS):
        opt.zero_grad()
        h = x
        for i, spec in enumerate(NETWORK):
            h = apply_layer(spec, h, {k.split(".")[2]: v for k, v in leaves.items() if k.startswith(f"layers.{i}.")})
        logits = h.flatten(1) @ leaves["head.weight"].t()
        loss = F.cross_entropy(logits, targets)
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            ref["logits"] = logits.detach().clone()
            for k, v in leaves.items():
                ref[f"grad.{k}"] = v.grad.detach().clone()
        opt.step()
        with torch.no_grad():  # maxplus "recenter": each weight row's mean into the bias
            for i, spec in enumerate(NETWORK):
                if spec.get("recenter"):
                    w, b = leaves[f"layers.{i}.weight"], leaves[f"layers.{i}.bias"]
                    mean = w.mean(dim=1)
                    w -= mean[:, None]
                    b += mean
    ref["losses"] = torch.tensor(losses, dtype=torch.float64)
    for k, v in leaves.items():
        ref[f"final.{k}"] = v.detach()
    meta = {"kind": "network", "layers": json.dumps(NETWORK), "batch": NET_BATCH, "in_c": NET_INPUT[0],
            "in_h": NET_INPUT[1], "in_w": NET_INPUT[2], "classes": NET_CLASSES, "steps": STEPS, "lr": NET_LR,
            "weight_decay": NET_WD}
    got = parity_util.run_dump(tool, "network", tmp, {"x": x, "targets": targets.double(), **params}, meta)
    if got is None:
        return False
    return parity_util.compare(f"network conv-conv-standardize-maxplus-linear, {STEPS} AdamW steps", got, ref,
                               list(ref), NETWORK_TOLERANCE)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tool, self_check = sys.argv[1], "--self-check" in sys.argv[2:]
    torch.set_num_threads(1)
    cases = list(layer_cases())
    with tempfile.TemporaryDirectory(prefix="fivefold-tropical-layers.") as tmp:
        if self_check:
            name, spec, n, shape = cases[0]
            caught = not run_layer_case(tool, name, spec, n, shape, 0, tmp, perturb=True)
            print("self-check: the perturbed dw was " + ("caught, as it should be" if caught else "NOT caught"))
            return 0 if caught else 1
        results = [run_layer_case(tool, *case, i, tmp, perturb=False) for i, case in enumerate(cases)]
        results.append(run_network(tool, tmp))
    bad = results.count(False)
    print(f"{len(results) - bad}/{len(results)} cases match PyTorch")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
