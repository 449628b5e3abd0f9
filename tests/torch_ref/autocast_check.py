"""The PyTorch reference (reference.py) is dtype-clean under bf16 autocast:
for each tiny config given, one forward and backward under
torch.autocast("cpu", dtype=torch.bfloat16) runs, its loss is within 2% of
the fp32 loss, and every gradient is fp32, finite and within 10% relative
(max-norm) of fp32's. This is what bench/torch_bench.py's bf16 rows run.

    autocast_check.py CONFIG.json [CONFIG.json ...]

Exit 0 pass, 1 fail, 77 PyTorch missing.
"""
import json
import os
import sys

try:
    import torch
except ImportError:
    print("SKIP: PyTorch is not installed")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def loss_and_grads(cfg, data, bf16):
    model = reference.build_model(cfg, seed=5)
    if bf16:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, losses = model(data[:, :-1], data[:, 1:])
    else:
        _, losses = model(data[:, :-1], data[:, 1:])
    losses["total"].backward()
    return losses["total"].item(), {n: p.grad for n, p in model.named_parameters()}


def main():
    torch.set_num_threads(1)
    ok = True
    for path in sys.argv[1:]:
        cfg = reference.load_config(path)
        data = torch.randint(0, cfg.vocab_size, (2, 17), generator=torch.Generator().manual_seed(9))
        try:
            l16, g16 = loss_and_grads(cfg, data, True)
        except RuntimeError as e:
            print(f"FAIL {path}: bf16 autocast raised: {e}")
            ok = False
            continue
        l32, g32 = loss_and_grads(cfg, data, False)
        worst, bad = 0.0, []
        # A gradient that is zero up to rounding (GPT-2's key bias) is measured
        # against the model's largest gradient instead of its own noise.
        model_scale = max(g.abs().max().item() for g in g32.values() if g is not None)
        for name, g in g16.items():
            if g is None or g.dtype != torch.float32 or not torch.isfinite(g).all():
                bad.append(name)
                continue
            ref = g32[name]
            scale = max(ref.abs().max().item(), 1e-12)
            if scale <= 1e-5 * model_scale:
                scale = model_scale
            worst = max(worst, ((g - ref).abs().max() / scale).item())
        loss_rel = abs(l16 - l32) / abs(l32)
        good = not bad and loss_rel < 0.02 and worst < 0.10
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {path}: loss bf16 {l16:.5f} fp32 {l32:.5f} ({loss_rel:.2%}), "
              f"worst gradient rel diff {worst:.3f}{', not fp32/finite: ' + ', '.join(bad) if bad else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
