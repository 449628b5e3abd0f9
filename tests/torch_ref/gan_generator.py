"""PyTorch parity of the deblurring GAN's generator as a whole
(src/nets/gan.c): its output and the gradients of one content-only step
(gan_generator_pass: out = blurred + G(blurred), content_weight times the L1
plus edge loss, backward) against the same network in PyTorch autograd in
float64, on seeded weights sent to tests/tools/gan_generator_dump through a
safetensors file. The cases cover the generator's activation layouts
(nets/gan_chain.h): blocked by 16 channels with Winograd 3x3 convolutions
and the direct few-channel kernels for the 7x7 convolutions of the image
(16 filters), channels-last (4 and 8 filters), strided and transposed
convolutions in both, three-channel images, and instance norm (NCHW).
Compared per tensor within 1e-4 of its largest value; and the number of
convolution passes that ran on the direct kernels and on Winograd must be
the case's (a case that silently fell back would prove nothing).

    gan_generator.py GAN_GENERATOR_DUMP [--self-check]

--self-check plants a 1e-3 error in the reference gradient of the first
convolution's weight and passes only when it is reported. Exit 0 all match,
1 a mismatch, 77 PyTorch missing.
"""
import json
import os
import sys
import tempfile

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("SKIP (missing dependency: python3-torch): PyTorch is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity_util  # noqa: E402

TOLERANCE = 1e-4

# (name, channels, filters, blocks, downsamples, norm, N, H, W, passes on the direct kernels, 3x3
# convolutions on Winograd). Each convolution runs 4 passes here (the forward of gan_generate, then the
# step's forward, backward-data and backward-weights) but the first, which has no backward-data: 3.
# The direct ones are the 7x7 convolutions of the image (1 or 3 channels: 3 + 4 passes) and, with 4
# filters, the blocks' 4 -> 4 ones (4 each); under instance norm the first convolution's forward into
# NCHW is oneDNN's (kern/conv2d.h): 1 + 4. Winograd runs the blocks' 3x3 ones where the activations
# are blocked (their backward-weights on one thread only: 3 passes each on more).
CASES = [
    ("blocked_16f_2b", 1, 16, 2, 0, "none", 2, 16, 16, 7, 4),
    ("nhwc_4f_1b_12x10", 1, 4, 1, 0, "none", 2, 12, 10, 15, 0),
    ("nhwc_8f_down2", 1, 8, 1, 2, "none", 2, 16, 16, 7, 0),
    ("blocked_16f_down1", 1, 16, 1, 1, "none", 3, 16, 12, 7, 2),
    ("rgb_blocked_16f", 3, 16, 1, 0, "none", 2, 10, 14, 7, 2),
    ("instance_norm_4f_down1", 1, 4, 1, 1, "instance", 2, 8, 8, 5, 0),
]


def winograd_here():
    """oneDNN has Winograd kernels on AVX-512 only (and not under an AVX2 cap)."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "")).upper()
    with open("/proc/cpuinfo") as f:
        avx512 = " avx512f " in f.read().replace("\n", " ")
    return avx512 and not cap.startswith(("AVX2", "AVX ", "SSE"))


def check_paths(name, got, want_direct, wino_convs):
    """The passes the generator ran on the direct kernels and on Winograd (see CASES)."""
    direct, wino, threads = (int(v) for v in got["paths"].tolist())
    # Winograd's backward-weights runs on one thread only (kern/conv2d.h)
    want_wino = (4 if threads == 1 else 3) * wino_convs if winograd_here() else 0
    ok = direct == want_direct and wino == want_wino
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {direct} passes on the direct kernels ({want_direct} expected), "
          f"{wino} on Winograd ({want_wino} expected)")
    return ok


class Block(nn.Module):
    def __init__(self, f, norm):
        super().__init__()
        layers = [nn.Conv2d(f, f, 3, 1, 1, bias=not norm)] + ([nn.InstanceNorm2d(f)] if norm else [])
        layers += [nn.ReLU(), nn.Conv2d(f, f, 3, 1, 1, bias=not norm)] + ([nn.InstanceNorm2d(f)] if norm else [])
        self.body = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.body(x)


def generator(ch, f, blocks, downs, norm):
    """nets/gan.c's build_generator in PyTorch modules, in the same order."""
    nrm = (lambda c: [nn.InstanceNorm2d(c)]) if norm else (lambda c: [])
    layers = [nn.Conv2d(ch, f, 7, 1, 3, bias=not norm)] + nrm(f) + [nn.ReLU()]
    for _ in range(downs):
        layers += [nn.Conv2d(f, 2 * f, 3, 2, 1, bias=not norm)] + nrm(2 * f) + [nn.ReLU()]
        f *= 2
    layers += [Block(f, norm) for _ in range(blocks)]
    for _ in range(downs):
        layers += [nn.ConvTranspose2d(f, f // 2, 3, 2, 1, output_padding=1, bias=not norm)] + nrm(f // 2) + [nn.ReLU()]
        f //= 2
    layers += [nn.Conv2d(f, ch, 7, 1, 3), nn.Tanh()]
    return nn.Sequential(*layers)


def content(out, sharp):
    """nets/gan.c's content loss with l1_weight = edge_weight = 1."""
    l1 = (out - sharp).abs().mean()
    dx = ((out[..., 1:] - out[..., :-1]) - (sharp[..., 1:] - sharp[..., :-1])).abs().mean()
    dy = ((out[..., 1:, :] - out[..., :-1, :]) - (sharp[..., 1:, :] - sharp[..., :-1, :])).abs().mean()
    return l1 + (dx + dy) / 2


def run_case(tool, case, index, tmp, perturb):
    name, ch, f, blocks, downs, norm, N, H, W, direct_passes, wino_convs = case
    gen = torch.Generator().manual_seed(4000 + index)
    torch.manual_seed(4000 + index)
    G = generator(ch, f, blocks, downs, norm == "instance").double()
    params = list(G.parameters())
    with torch.no_grad():
        for p in params:  # PyTorch's init, but the last conv not zero (fivefold starts it at zero)
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * (0.6 / max(1, p[0].numel()) ** 0.5))
    sharp = torch.rand(N, ch, H, W, generator=gen, dtype=torch.float64)
    blurred = (sharp + 0.1 * torch.randn(N, ch, H, W, generator=gen, dtype=torch.float64)).clamp(0, 1)
    model = {"family": "gan", "channels": ch, "content_weight": 100,
             "generator": {"filters": f, "blocks": blocks, "downsamples": downs, "norm": norm}}
    tensors = {"blurred": blurred, "sharp": sharp}
    tensors.update({f"p{i}": p.detach() for i, p in enumerate(params)})
    got = parity_util.run_dump(tool, name, tmp, tensors, {"model": json.dumps(model)})
    if got is None:
        return False
    out = blurred + G(blurred)
    loss = content(out, sharp)
    (100 * loss).backward()
    ref = {"out": out.detach().clamp(0, 1), "content": loss.detach().reshape(1)}
    ref.update({f"g{i}": p.grad for i, p in enumerate(params)})
    if perturb:
        ref["g0"] = ref["g0"] + 1e-3 * ref["g0"].abs().max() * torch.sign(torch.randn(ref["g0"].shape, generator=gen,
                                                                                       dtype=torch.float64))
    paths_ok = check_paths(name, got, direct_passes, wino_convs)
    return parity_util.compare(name, got, ref, ["out", "content"] + [f"g{i}" for i in range(len(params))],
                               TOLERANCE) and paths_ok


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tool, self_check = sys.argv[1], "--self-check" in sys.argv[2:]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="fivefold-gan-generator.") as tmp:
        if self_check:
            caught = not run_case(tool, CASES[0], 0, tmp, perturb=True)
            print("self-check: the perturbed gradient was " + ("caught, as it should be" if caught else "NOT caught"))
            return 0 if caught else 1
        results = [run_case(tool, case, i, tmp, perturb=False) for i, case in enumerate(CASES)]
    return parity_util.report(results, TOLERANCE)


if __name__ == "__main__":
    sys.exit(main())
