#!/usr/bin/env python3
"""The deblurring GAN of nets/gan.h in PyTorch (same layers, shapes, losses
and optimiser), to set fivefold's speed beside PyTorch's on the same threads:
prints images/s of the generator's forward+backward alone and of a whole
training step (critic phase then generator phase, as fivefold runs it).

Usage: torch_gan_step.py [--threads 2] [--size 32] [--batch 16] [--micro 8]
       [--filters 16] [--blocks 4] [--downsamples 2] [--critic-filters 16]
       [--critic-layers 3] [--steps 20] [--generator-only] [--no-norm]
       [--channels-last]
--no-norm: the generator without instance norm (its convs keep their bias),
as nets/gan.h builds it with "norm": "none".
--channels-last: the networks and the images in PyTorch's channels_last
memory format (oneDNN then runs on NHWC activations without reorders), the
layout PyTorch's own performance guide recommends for convolutions on CPU;
the default is PyTorch's default, NCHW.
"""
import argparse
import time

import torch
import torch.nn as nn


def generator(ch, f, blocks, downs, norm=True):
    def nrm(c):
        return [nn.InstanceNorm2d(c)] if norm else []
    bias = not norm
    layers = [nn.Conv2d(ch, f, 7, 1, 3, bias=bias)] + nrm(f) + [nn.ReLU()]
    for _ in range(downs):
        layers += [nn.Conv2d(f, 2 * f, 3, 2, 1, bias=bias)] + nrm(2 * f) + [nn.ReLU()]
        f *= 2

    class Block(nn.Module):
        def __init__(self, f):
            super().__init__()
            self.body = nn.Sequential(*([nn.Conv2d(f, f, 3, 1, 1, bias=bias)] + nrm(f) + [nn.ReLU(),
                                      nn.Conv2d(f, f, 3, 1, 1, bias=bias)] + nrm(f)))

        def forward(self, x):
            return x + self.body(x)
    layers += [Block(f) for _ in range(blocks)]
    for _ in range(downs):
        layers += [nn.ConvTranspose2d(f, f // 2, 3, 2, 1, output_padding=1, bias=bias)] + nrm(f // 2) + [nn.ReLU()]
        f //= 2
    layers += [nn.Conv2d(f, ch, 7, 1, 3), nn.Tanh()]
    return nn.Sequential(*layers)


def critic(ch, f, n):
    layers = [nn.Conv2d(ch, f, 4, 2, 2), nn.LeakyReLU(0.2)]
    prev = f
    for i in range(1, n + 1):
        w = f * min(1 << i, 8)
        layers += [nn.Conv2d(prev, w, 4, 2 if i < n else 1, 2, bias=False), nn.InstanceNorm2d(w), nn.LeakyReLU(0.2)]
        prev = w
    layers += [nn.Conv2d(prev, 1, 4, 1, 2)]
    return nn.Sequential(*layers)


def content(out, sharp):
    l1 = (out - sharp).abs().mean()
    dx = ((out[..., 1:] - out[..., :-1]) - (sharp[..., 1:] - sharp[..., :-1])).abs().mean()
    dy = ((out[..., 1:, :] - out[..., :-1, :]) - (sharp[..., 1:, :] - sharp[..., :-1, :])).abs().mean()
    return l1 + (dx + dy) / 2


def main():
    ap = argparse.ArgumentParser()
    for name, default in [("threads", 2), ("size", 32), ("batch", 16), ("micro", 8), ("filters", 16), ("blocks", 4),
                          ("downsamples", 2), ("critic-filters", 16), ("critic-layers", 3), ("steps", 20)]:
        ap.add_argument("--" + name, type=int, default=default)
    ap.add_argument("--generator-only", action="store_true")
    ap.add_argument("--no-norm", action="store_true")
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    G = generator(1, a.filters, a.blocks, a.downsamples, norm=not a.no_norm)
    D = critic(1, a.critic_filters, a.critic_layers)
    opt_g = torch.optim.AdamW(G.parameters(), lr=2e-4, weight_decay=0)
    opt_d = torch.optim.AdamW(D.parameters(), lr=2e-4, weight_decay=0)
    blurred = torch.rand(a.micro, 1, a.size, a.size)
    sharp = torch.rand(a.micro, 1, a.size, a.size)
    if a.channels_last:
        G.to(memory_format=torch.channels_last)
        D.to(memory_format=torch.channels_last)
        blurred = blurred.contiguous(memory_format=torch.channels_last)
        sharp = sharp.contiguous(memory_format=torch.channels_last)
    accum = a.batch // a.micro

    def gen_fwd_bwd():
        out = blurred + G(blurred)
        content(out, sharp).backward()

    def gan_step():
        opt_d.zero_grad()
        for _ in range(accum):
            with torch.no_grad():
                fake = blurred + G(blurred)
            s = D(torch.cat([sharp, fake]))
            d_loss = ((s[:a.micro] - 1) ** 2).mean() / 2 + (s[a.micro:] ** 2).mean() / 2
            d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        for _ in range(accum):
            out = blurred + G(blurred)
            g_adv = ((D(out) - 1) ** 2).mean()
            (g_adv + 100 * content(out, sharp)).backward()
        opt_g.step()

    def rate(fn, images):
        """images/s by the wall clock, and images per CPU-second of the process"""
        for _ in range(2):
            fn()
        t, c = time.perf_counter(), time.process_time()
        for _ in range(a.steps):
            fn()
        return images * a.steps / (time.perf_counter() - t), images * a.steps / (time.process_time() - c)
    print(f"torch {torch.__version__}, {a.threads} threads, {a.size}x{a.size} grey, micro-batch {a.micro}, "
          f"norm {'none' if a.no_norm else 'instance'}, {'channels_last' if a.channels_last else 'NCHW'}")
    print("generator forward+backward: %.1f images/s, %.1f images per CPU-second" % rate(gen_fwd_bwd, a.micro))
    if a.generator_only:
        return
    print(f"whole GAN step (batch {a.batch}, critic phase + generator phase, AdamW): "
          "%.1f images/s, %.1f images per CPU-second" % rate(gan_step, a.batch))


if __name__ == "__main__":
    main()
