"""PyTorch parity of WGAN-GP's gradient penalty in the deblurring GAN
(src/nets/gan.c, gan_wgan_gp_critic_loss, run by tests/tools/gan_penalty_dump).

An independent PyTorch critic of the same design (DeblurGAN's PatchGAN
without normalisation: 4x4 convs with padding 2, LeakyReLU 0.2, a last
conv to one channel), D(x) the mean of a sample's patch scores, on fixed,
seeded images, eps and weights. In float64:

    x_hat = eps real + (1 - eps) fake
    g     = torch.autograd.grad(D(x_hat).sum(), x_hat, create_graph=True)
    gp    = gp_weight * mean_s (||g_s||_2 - 1)^2
    loss  = mean D(fake) - mean D(real) + gp

gp.backward() (PyTorch's double backward) gives the penalty's gradient
with respect to every critic parameter, loss.backward() the whole critic
loss's; fivefold's closed form must match both, and the values, within
1e-4 relative (max |a - b| / max |b| per tensor). The cases put the
input-gradient norms below and above 1 (both signs of ||g|| - 1).

    gan_penalty.py GAN_PENALTY_DUMP [--self-check]

--self-check plants a 1e-3 error in the reference penalty gradient of one
weight and passes only when it is reported. Exit 0 all match, 1 a
mismatch, 77 PyTorch missing.
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

# (name, N, C, H, W, critic filters, critic layers, gp_weight, weight scale)
CASES = [
    ("f4_l2_16x16_small_norms", 2, 1, 16, 16, 4, 2, 10.0, 0.4),
    ("f3_l3_rgb_12x10", 3, 3, 12, 10, 3, 3, 5.0, 2.5),
    ("f2_l1_9x11_large_norms", 2, 1, 9, 11, 2, 1, 10.0, 6.0),
]


def critic_layout(channels, filters, layers):
    """[(layer index, in, out, stride)] of the convs, in the C side's layer numbering
    (conv, leaky, conv, leaky, ..., conv)."""
    convs, c_in, index = [(0, channels, filters, 2)], filters, 2
    for n in range(1, layers + 1):
        out = filters * min(2 ** n, 8)
        convs.append((index, c_in, out, 2 if n < layers else 1))
        c_in, index = out, index + 2
    convs.append((index, c_in, 1, 1))
    return convs


def make_params(case, gen):
    _, _, C, _, _, f, layers, _, scale = case
    params = {}
    for index, c_in, c_out, _ in critic_layout(C, f, layers):
        fan_in = c_in * 16
        params[f"critic.layers.{index}.weight"] = torch.randn(c_out, c_in, 4, 4, generator=gen) * scale / fan_in ** 0.5
        params[f"critic.layers.{index}.bias"] = 0.1 * torch.randn(c_out, generator=gen)
    return params


def critic_score(x, p, case):
    """D(x): the mean patch score of each sample."""
    _, _, C, _, _, f, layers, _, _ = case
    convs = critic_layout(C, f, layers)
    h = x
    for k, (index, _, _, stride) in enumerate(convs):
        h = F.conv2d(h, p[f"critic.layers.{index}.weight"], p[f"critic.layers.{index}.bias"], stride=stride, padding=2)
        if k + 1 < len(convs):
            h = F.leaky_relu(h, 0.2)
    return h.mean(dim=(1, 2, 3))


def reference(case, real, fake, eps, params):
    gp_weight = case[7]
    out = {}
    for what in ("gp", "loss"):
        p = {k: v.double().requires_grad_(True) for k, v in params.items()}
        r, fk, e = real.double(), fake.double(), eps.double().view(-1, 1, 1, 1)
        x_hat = (e * r + (1 - e) * fk).requires_grad_(True)
        g = torch.autograd.grad(critic_score(x_hat, p, case).sum(), x_hat, create_graph=True)[0]
        norms = g.flatten(1).norm(dim=1)
        gp = gp_weight * ((norms - 1) ** 2).mean()
        if what == "gp":
            gp.backward()
            out["gp"] = gp.detach().view(1)
            out["norms"] = norms.detach()
        else:
            wass = critic_score(fk, p, case).mean() - critic_score(r, p, case).mean()
            loss = wass + gp
            loss.backward()
            out["wasserstein"] = wass.detach().view(1)
            out["loss"] = loss.detach().view(1)
        for k, v in p.items():
            out[f"{what}_grad.{k}"] = v.grad if v.grad is not None else torch.zeros_like(v)
    return out


def run_case(tool, case, index, tmp, perturb):
    name, N, C, H, W, f, layers, gp_weight, _ = case
    gen = torch.Generator().manual_seed(4100 + index)
    real = torch.rand(N, C, H, W, generator=gen)
    fake = real + 0.3 * torch.randn(N, C, H, W, generator=gen)
    eps = torch.rand(N, generator=gen)
    params = make_params(case, gen)
    got = parity_util.run_dump(tool, name, tmp, {"real": real, "fake": fake, "eps": eps, **params},
                               {"critic": json.dumps({"filters": f, "layers": layers}), "gp_weight": gp_weight})
    if got is None:
        return False
    ref = reference(case, real, fake, eps, params)
    print(f"     {name}: input-gradient norms " + ", ".join(f"{v:.3g}" for v in ref["norms"].tolist()))
    weight = f"gp_grad.critic.layers.{critic_layout(C, f, layers)[1][0]}.weight"
    if perturb:
        ref[weight] = ref[weight] + 1e-3 * ref[weight].abs().max() * torch.sign(torch.randn(ref[weight].shape,
                                                                                            generator=gen))
    keys = ["gp", "wasserstein", "loss"] + [f"{w}_grad.{k}" for w in ("gp", "loss") for k in params]
    return parity_util.compare(name, got, ref, keys, TOLERANCE, digits=2)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tool, self_check = sys.argv[1], "--self-check" in sys.argv[2:]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="fivefold-gan-penalty.") as tmp:
        if self_check:
            caught = not run_case(tool, CASES[0], 0, tmp, perturb=True)
            print("self-check: the perturbed penalty gradient was " + ("caught, as it should be" if caught
                                                                        else "NOT caught"))
            return 0 if caught else 1
        results = [run_case(tool, case, i, tmp, perturb=False) for i, case in enumerate(CASES)]
    return parity_util.report(results, TOLERANCE)


if __name__ == "__main__":
    sys.exit(main())
