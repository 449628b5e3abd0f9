"""The GPT-2 124M loss curve of bench/llmc/compare.sh: fivefold (`fivefold
train` from an imported step-0 run of fivefold's initial weights), the
PyTorch GPT-2 of tests/torch_ref (float32) and, when its log is given, llm.c's
train_gpt2 (started from gpt2_124M.bin written from the same weights by
llmc_files.py), all on the same B * T + 1 tokens (one batch, every step) with
train_gpt2.c's optimizer: AdamW lr 1e-4 constant, betas (0.9, 0.999), eps
1e-8, no weight decay, no clipping. Prints the per-step losses side by side
and the largest relative differences. Figures only.

usage: curve.py --fivefold BIN --init INIT.safetensors --model MODEL.json
                --shard TOKENS.bin --tokenizer FILE --work DIR --steps N
                [--threads N] [--llmc-log LOG]
"""
import argparse
import json
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "torch_ref"))
import gpt2_curve  # noqa: E402  (exits 77 without PyTorch)
import gpt2_reference  # noqa: E402
import safetensors_io  # noqa: E402
import torch  # noqa: E402

# What train_gpt2.c's main() hard-codes (gpt2_update(&model, 1e-4f, 0.9f,
# 0.999f, 1e-8f, 0.0f, step+1), no clipping).
LLMC_TRAINING = {"lr": 1e-4, "min_lr": 1e-4, "warmup_steps": 0, "decay": "constant", "weight_decay": 0.0,
                 "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "grad_clip": 0.0, "seed": 1234}


def llmc_losses(path):
    """train loss of each step train_gpt2 printed (before that step's update)."""
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"step (\d+): train loss ([0-9.]+)", line)
            if m:
                out[int(m.group(1))] = float(m.group(2))
    return [out[k] for k in sorted(out)]


def main():
    ap = argparse.ArgumentParser()
    for a in ("--fivefold", "--init", "--model", "--shard", "--tokenizer", "--work"):
        ap.add_argument(a, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llmc-log", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with open(args.model) as f:
        hf = json.load(f)
    cfg = gpt2_reference.config_from_dict(hf)
    sd, _ = safetensors_io.load(args.init)
    sd = {k: v for k, v in sd.items() if k not in ("tokens", "targets")}
    tokens, vocab = gpt2_curve.read_token_shard(args.shard, args.B * args.T + 1)
    training = dict(LLMC_TRAINING, steps=args.steps, micro_batch_size=args.B, seq_len=args.T)
    run = gpt2_curve.import_run(args.fivefold, hf, cfg, sd, args.work, args.tokenizer)
    ours = gpt2_curve.fivefold_curve(args.fivefold, run, args.shard, training, args.tokenizer, args.threads)
    theirs = gpt2_curve.torch_curve(cfg, sd, tokens, args.B, args.T, training, dtype=torch.float32)
    llmc = llmc_losses(args.llmc_log) if args.llmc_log and os.path.exists(args.llmc_log) else []
    print(f"loss curve, GPT-2 124M from fivefold's initial weights, the same {args.B} x {args.T} tokens every step, "
          "llm.c's optimizer (AdamW lr 1e-4, betas 0.9/0.999, no decay, no clipping):")
    print(f"{'step':>4} {'fivefold':>10} {'pytorch':>10} {'llm.c':>10}   {'|f-p|/p':>8} {'|f-l|/l':>8}")
    worst_p = worst_l = 0.0
    for i in range(len(ours)):
        f, p = ours[i][0], theirs[i][0] if i < len(theirs) else float("nan")
        l = llmc[i] if i < len(llmc) else None
        rp = abs(f - p) / abs(p)
        worst_p = max(worst_p, rp)
        rl = ""
        if l is not None:
            worst_l = max(worst_l, abs(f - l) / abs(l))
            rl = f"{abs(f - l) / abs(l):8.1e}"
        print(f"{i + 1:>4} {f:>10.6f} {p:>10.6f} {l if l is not None else float('nan'):>10.6f}   {rp:8.1e} {rl:>8}")
    line = f"curve: {len(ours)} steps, fivefold against pytorch: largest relative loss difference {worst_p:.1e}"
    if llmc:
        n = min(len(llmc), len(ours))
        line += f"; against llm.c ({n} steps): {worst_l:.1e}"
    else:
        line += "; llm.c: not run"
    print(line)


if __name__ == "__main__":
    sys.exit(main())
