"""PyTorch baseline for `make bench`: the same model as fivefold (the
independent reference in tests/torch_ref/reference.py, which uses the usual
PyTorch idioms: batched matmuls, softmax attention, a loop over experts with
index masks), trained on random tokens with torch.optim.AdamW and gradient
clipping, exactly the work bench_train times. Prints one line per
precision in the same key=value format: fp32, and bf16 under
torch.autocast("cpu", dtype=torch.bfloat16) (bf16 matmuls, fp32 master
weights, gradients and AdamW state: the mixed precision a PyTorch user
would pick), each from a freshly built model with the same seed.

usage: /usr/bin/python3 bench/torch_bench.py MODEL.json [batch seq steps threads precisions]
       precisions: comma-separated fp32,bf16 (default both)
"""
import contextlib
import subprocess
import json
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch_ref"))
import reference  # noqa: E402


def main():
    path = sys.argv[1]
    B = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    T = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else os.cpu_count()
    precisions = sys.argv[6].split(",") if len(sys.argv) > 6 else ["fp32", "bf16"]
    torch.set_num_threads(threads)
    with open(path) as f:
        cfg = reference.config_from_dict(json.load(f))
    for precision in precisions:
        if precision not in ("fp32", "bf16"):
            sys.exit(f"torch_bench.py: precision '{precision}', expected fp32 or bf16")
    if len(precisions) > 1:
        # One process per precision, so that each line's peak RSS is its own.
        for precision in precisions:
            subprocess.run([sys.executable, os.path.abspath(__file__), path, str(B), str(T), str(steps), str(threads),
                            precision], check=True)
        return
    run(path, cfg, B, T, steps, threads, precisions[0])


def run(path, cfg, B, T, steps, threads, precision):
    model = reference.build_model(cfg, seed=1234)
    decay = [p for n, p in model.named_parameters() if not model.no_weight_decay(n)]
    no_decay = [p for n, p in model.named_parameters() if model.no_weight_decay(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(42)
    data = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=gen)
    inp, tgt = data[:, :-1], data[:, 1:]
    warmup = 2
    t0 = 0.0
    for s in range(warmup + steps):
        if s == warmup:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast(precision):
            _, losses = model(inp, tgt)
        losses["total"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    dt = (time.perf_counter() - t0) / steps
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    label = "fp32" if precision == "fp32" else "bf16-autocast"
    print(f"pytorch model={path} precision={label} threads={threads} batch={B} seq={T} torch={torch.__version__} "
          f"ms_per_step={dt * 1e3:.1f} tokens_per_s={B * T / dt:.0f} peak_rss_mb={rss_mb:.0f}", flush=True)


def autocast(precision):
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


if __name__ == "__main__":
    main()
