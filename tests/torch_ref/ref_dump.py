"""Writes the same two files as tests/tools/model_dump, but computed by the
PyTorch reference itself in float32 (random weights and batch of its own).

It exists to test the comparison: compare.py against an honest float32 dump
must pass (this measures how much float32 rounding alone moves every
quantity, i.e. whether the tolerances are sane), and against a dump with one
deliberately perturbed quantity (--perturb NAME) must fail.

    /usr/bin/python3 ref_dump.py --config MODEL.json --out DIR [--steps N]
                                 [--batch B] [--seq T] [--perturb NAME]
"""
import argparse
import os
import sys

try:
    import torch
except ImportError:
    print("SKIP (missing dependency: python3-torch): PyTorch is not installed (run with /usr/bin/python3)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
import safetensors_io  # noqa: E402
from compare import MAX_NORM, reference_optimizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--perturb", default=None, help="a results tensor to change by 1e-3 of its scale")
    args = ap.parse_args()
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead on a shared machine
    os.makedirs(args.out, exist_ok=True)

    cfg = reference.load_config(args.config)
    model = reference.build_model(cfg, seed=args.seed, dtype=torch.float32)
    gen = torch.Generator().manual_seed(args.seed)
    B, T, V = args.batch, args.seq, cfg.vocab_size
    tokens = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)
    targets[torch.rand(B, T, generator=gen) < 0.125] = -1
    targets[:, 0] = -1
    params = dict(model.named_parameters())
    init = {n: p.detach().clone() for n, p in params.items()}
    init["tokens"] = tokens.to(torch.int32)
    init["targets"] = targets.to(torch.int32)
    safetensors_io.save(os.path.join(args.out, "init.safetensors"), init, {"writer": "ref_dump.py"})

    res = {}
    with torch.no_grad():
        logits, _ = model(tokens)
    res["logits"] = logits.reshape(B * T, V)
    model.zero_grad(set_to_none=True)
    _, losses = model(tokens, targets)
    losses["total"].backward()
    for key in ("lm", "aux", "z"):
        res[f"loss.{key}"] = torch.tensor(float(losses[key]), dtype=torch.float64)
    res["loss.tokens"] = torch.tensor(int((targets >= 0).sum()), dtype=torch.int64)
    for n, p in params.items():
        res[f"grad.{n}"] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    if cfg.num_experts > 0:
        counts = torch.zeros(cfg.num_layers, cfg.num_experts, dtype=torch.int64)
        moe_layers = [i for i in range(cfg.num_layers) if cfg.is_moe_layer[i]]
        for layer, stats in zip(moe_layers, model.last_moe_stats):
            counts[layer] = stats["counts"]
        res["moe.expert_counts"] = counts
        res["moe.dropped_assignments"] = torch.tensor(sum(s["dropped"] for s in model.last_moe_stats))

    opt, sched = reference_optimizer(model, params, args.steps)
    hist = {"loss_lm": [], "loss_aux": [], "loss_z": [], "grad_norm": [], "lr": []}
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=False)
        _, losses = model(tokens, targets)
        losses["total"].backward()
        for p in params.values():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), MAX_NORM)
        hist["lr"].append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        hist["loss_lm"].append(float(losses["lm"]))
        hist["loss_aux"].append(float(losses["aux"]))
        hist["loss_z"].append(float(losses["z"]))
        hist["grad_norm"].append(float(norm))
    for k, v in hist.items():
        res[f"steps.{k}"] = torch.tensor(v, dtype=torch.float64)
    for n, p in params.items():
        res[f"final.{n}"] = p.detach().clone()

    if args.perturb:
        t = res[args.perturb]
        flat = t.view(-1)
        scale = flat.abs().max() if flat.is_floating_point() else 1
        flat[flat.numel() // 2] += 1e-3 * scale if flat.is_floating_point() else 1
    safetensors_io.save(os.path.join(args.out, "results.safetensors"), res, {"writer": "ref_dump.py"})


if __name__ == "__main__":
    main()
