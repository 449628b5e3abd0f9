"""PyTorch baseline for `make bench`: the same model as fivefold (the
independent reference in tests/torch_ref/reference.py, which uses the usual
PyTorch idioms: batched matmuls, softmax attention, a loop over experts with
index masks), trained on random tokens with torch.optim.AdamW and gradient
clipping, exactly the work bench_train times. Prints one line in the same
key=value format.

usage: /usr/bin/python3 bench/torch_bench.py MODEL.json [batch seq steps threads]
"""
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
    torch.set_num_threads(threads)
    with open(path) as f:
        cfg = reference.config_from_dict(json.load(f))
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
        _, losses = model(inp, tgt)
        losses["total"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    dt = (time.perf_counter() - t0) / steps
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"pytorch model={path} threads={threads} batch={B} seq={T} torch={torch.__version__} "
          f"ms_per_step={dt * 1e3:.1f} tokens_per_s={B * T / dt:.0f} peak_rss_mb={rss_mb:.0f}")


if __name__ == "__main__":
    main()
