"""fivefold's training loss curve on a GPT-2 against the PyTorch GPT-2 of
gpt2_reference.py, both from fivefold's own initial weights and on the same
tokens, through the real `fivefold train` (its config, data loader,
schedule, clipping and AdamW) rather than a test harness.

How the two sides are made to see the same thing:
  * weights: tests/tools/model_dump writes fivefold's initial parameters;
    they go to an HF GPT-2 directory (F32) that `fivefold import` turns into
    a run at step 0, and are loaded by name into the PyTorch model;
  * tokens: a token shard of exactly B windows of T + 1 tokens (B * T + 1
    tokens), so every step of `fivefold train` trains on the same B
    sequences whatever order its loader visits them in (a batch's mean loss
    does not depend on the order of its rows); PyTorch trains on them too;
  * optimizer: the run config's training section, and the documented rules
    (README "The run configuration"): linear warm-up (0-based step s uses
    lr (s + 1) / warmup), then cosine (or constant) to min_lr at the last
    step; AdamW with decoupled weight decay on all but norm weights and
    biases; the global gradient norm clipped to grad_clip (0: none).

As a test (main): a tiny GPT-2, 30 steps, per-step loss, learning rate and
gradient norm compared. --self-check MODE runs the PyTorch side with a known
mistake (schedule: the warm-up one step late; bias: bias gradients dropped)
and passes only if the comparison reports it. bench/llmc/compare.sh uses
the helpers here for the GPT-2 124M curve.

usage: gpt2_curve.py --fivefold BIN --model-dump BIN [--self-check schedule|bias]
Exit 77 (skip) without PyTorch.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError:
    print("SKIP (missing dependency: python3-torch): PyTorch is not installed (run with /usr/bin/python3)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference  # noqa: E402
import safetensors_io  # noqa: E402
from import_test import gpt2_tensors  # noqa: E402

SHARD_MAGIC = b"FFTOKEN1"


def write_token_shard(path, tokens, vocab):
    """fivefold's token shard (README "Data"): 64-byte header, uint16 tokens."""
    header = SHARD_MAGIC + struct.pack("<IIQI", 1, 1, len(tokens), vocab)
    with open(path, "wb") as f:
        f.write(header + bytes(64 - len(header)))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def read_token_shard(path, count):
    """The first `count` tokens of a fivefold uint16 token shard."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:8] != SHARD_MAGIC:
            raise ValueError(f"{path}: not a fivefold token shard (magic {head[:8]!r})")
        version, dtype, total, vocab = struct.unpack("<IIQI", head[8:28])
        if dtype != 1 or total < count:
            raise ValueError(f"{path}: expected uint16 tokens (dtype 1) and at least {count}, got dtype {dtype}, {total}")
        return list(struct.unpack(f"<{count}H", f.read(2 * count))), vocab


def initial_weights(model_dump, model_json, work, seed):
    """fivefold's initial parameters (model_dump, no optimizer steps)."""
    out = os.path.join(work, "init")
    subprocess.run([model_dump, "--config", model_json, "--out", out, "--steps", "0", "--seed", str(seed),
                    "--batch", "1", "--seq", "2"], check=True, stdout=subprocess.DEVNULL)
    sd, _ = safetensors_io.load(os.path.join(out, "init.safetensors"))
    return {k: v for k, v in sd.items() if k not in ("tokens", "targets")}


def import_run(fivefold, hf_config, cfg, sd, work, tokenizer):
    """An HF GPT-2 directory (F32) of the weights, imported as a run at step 0."""
    hf_dir, run = os.path.join(work, "hf"), os.path.join(work, "run")
    os.makedirs(hf_dir)
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2)
    tensors = {k: v.contiguous() for k, v in gpt2_tensors(sd, cfg, "transformer.", False).items()}
    safetensors_io.save(os.path.join(hf_dir, "model.safetensors"), tensors, {"format": "pt"})
    subprocess.run([fivefold, "import", "--format", "hf", "--model", hf_dir, "--out", run, "--tokenizer", tokenizer],
                   check=True, stdout=subprocess.DEVNULL)
    return run


def fivefold_curve(fivefold, run, shard, training, tokenizer_file=None, threads=1, log=None):
    """Trains the imported run with `training` (a run config's training
    section); returns [(loss, lr, grad_norm)] per step from metrics.jsonl."""
    path = os.path.join(run, "run.json")
    with open(path) as f:
        run_cfg = json.load(f)
    run_cfg.setdefault("training", {}).update(training)
    run_cfg["training"].update({"log_interval": 1, "eval_interval": 0, "grad_accum_steps": 1})
    run_cfg["training"].pop("global_batch_size", None)
    with open(path, "w") as f:
        json.dump(run_cfg, f, indent=2)
    cmd = [fivefold, "train", "--config", path, "--resume", "--train-data", shard, "--val-data", shard,
           "--eval-windows", "1", "--threads", str(threads), "--peak-gflops", "100", "--no-progress"]
    if tokenizer_file:
        cmd += ["--tokenizer", tokenizer_file]
    # The resume warnings (fields the imported run did not have, the new
    # data) are expected; they are shown only when the run fails.
    done = subprocess.run(cmd, stdout=log or subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise subprocess.CalledProcessError(done.returncode, cmd)
    rows = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") == "train":
                rows.append((rec["step"], rec["loss"], rec["lr"], rec["grad_norm"]))
    rows.sort()
    return [r[1:] for r in rows]


def scheduled_lr(training, step):
    """Learning rate of 0-based step `step` (the documented rule)."""
    lr, total = training["lr"], training["steps"]
    min_lr, warmup = training.get("min_lr", lr / 10), training.get("warmup_steps", 0)
    if step < warmup:
        return lr * (step + 1) / warmup
    if training.get("decay", "cosine") == "constant" or step >= total:
        return min_lr if step >= total else lr
    progress = (step - warmup) / (total - warmup)
    if training.get("decay") == "linear":
        return lr + (min_lr - lr) * progress
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def torch_curve(cfg, sd, tokens, B, T, training, dtype=torch.float64, mistake=None):
    """The same steps in PyTorch: [(loss, lr, grad_norm)] per step."""
    model = gpt2_reference.GPT2Model(cfg).to(dtype)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(sd[name].to(dtype))
    decay = [p for n, p in params.items() if not model.no_weight_decay(n)]
    no_decay = [p for n, p in params.items() if model.no_weight_decay(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": training.get("weight_decay", 0.0)},
                             {"params": no_decay, "weight_decay": 0.0}], lr=training["lr"],
                            betas=(training.get("beta1", 0.9), training.get("beta2", 0.95)),
                            eps=training.get("eps", 1e-8))
    seq = torch.tensor(tokens, dtype=torch.long)
    x, y = seq[:-1].view(B, T), seq[1:].view(B, T)
    clip = training.get("grad_clip", 0.0)
    rows = []
    for step in range(training["steps"]):
        lr = scheduled_lr(training, step - 1 if mistake == "schedule" else step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        _, losses = model(x, y)
        losses["lm"].backward()
        if mistake == "bias":
            for n, p in params.items():
                if model.is_bias(n) and not n.endswith("norm.bias"):
                    p.grad = None
        norm = torch.sqrt(sum((p.grad.to(torch.float64) ** 2).sum() for p in params.values() if p.grad is not None))
        if clip > 0 and norm > clip:
            for p in params.values():
                if p.grad is not None:
                    p.grad.mul_(clip / (float(norm) + 1e-6))
        opt.step()
        rows.append((float(losses["lm"]), lr, float(norm)))
    return rows


def compare_curves(ours, theirs, loss_tol, lr_tol, norm_tol):
    """Per-step relative differences; returns (ok, lines of the table)."""
    lines, ok = [f"{'step':>4} {'fivefold':>10} {'pytorch':>10} {'rel':>8}   {'lr':>9} {'gnorm f/p':>17}"], True
    if len(ours) != len(theirs):
        return False, [f"fivefold logged {len(ours)} steps, PyTorch ran {len(theirs)}"]
    for i, ((lf, rf, nf), (lp, rp, np_)) in enumerate(zip(ours, theirs)):
        rel = abs(lf - lp) / max(abs(lp), 1e-12)
        bad = rel > loss_tol or abs(rf - rp) > lr_tol * max(abs(rp), 1e-12) or abs(nf - np_) > norm_tol * max(np_, 1e-12)
        ok &= not bad
        lines.append(f"{i + 1:>4} {lf:>10.6f} {lp:>10.6f} {rel:>8.1e}   {rf:>9.3e} {nf:>8.4f}/{np_:<8.4f}"
                     + ("  <-- differs" if bad else ""))
    return ok, lines


# The test's model and run: small enough for seconds, every kind of GPT-2
# parameter present; vocabulary 256 so byte-level tokens fit; the schedule has
# a warm-up, a cosine decay and a floor, and the gradient norm starts above
# the clip (1.6) and ends below it, so both sides of the clip run.
TINY = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 256, "n_embd": 32, "n_layer": 2,
        "n_head": 4, "n_positions": 64, "n_inner": 64, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5, "initializer_range": 0.05, "tie_word_embeddings": True}
TINY_TRAINING = {"steps": 30, "micro_batch_size": 4, "seq_len": 16, "lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 5,
                 "decay": "cosine", "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                 "grad_clip": 1.6, "seed": 1234}
TEXT = (b"In the beginning God created the heaven and the earth. And the earth was without form, and void; "
        b"and darkness was upon the face of the deep.")
# Tolerances. fivefold trains in float32, the reference in float64, and the
# log keeps 6 significant digits (1e-6 relative). Measured: losses within
# 1.6e-6 relative over the 30 steps, gradient norms and learning rates equal
# to the printed digits. 1e-4 leaves room for other BLAS kernels and orders
# of summation, and is far below what the mistakes this test is for change:
# the cosine decay one step ahead in src/kern/lr_schedule.c moves the loss by
# 3.8e-2 by step 30; without the MLP projection's bias gradient
# (src/model/model_pass.c) the gradient norm is 13% off at step 1 and the
# loss 1.2e-3 at step 2 (both measured, each fails this test).
LOSS_TOL, LR_TOL, NORM_TOL = 1e-4, 1e-5, 1e-4


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fivefold", required=True)
    ap.add_argument("--model-dump", required=True)
    ap.add_argument("--self-check", choices=["schedule", "bias"], default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    B, T = TINY_TRAINING["micro_batch_size"], TINY_TRAINING["seq_len"]
    tokens = list(TEXT[: B * T + 1])
    assert len(tokens) == B * T + 1
    cfg = gpt2_reference.config_from_dict(TINY)
    with tempfile.TemporaryDirectory(prefix="fivefold-gpt2-curve-") as work:
        model_json = os.path.join(work, "model.json")
        with open(model_json, "w") as f:
            json.dump(TINY, f)
        sd = initial_weights(args.model_dump, model_json, work, TINY_TRAINING["seed"])
        shard = os.path.join(work, "tokens.bin")
        write_token_shard(shard, tokens, 256)
        run = import_run(args.fivefold, TINY, cfg, sd, work, "byte-level")
        ours = fivefold_curve(args.fivefold, run, shard, TINY_TRAINING)
    theirs = torch_curve(cfg, sd, tokens, B, T, TINY_TRAINING, mistake=args.self_check)
    ok, lines = compare_curves(ours, theirs, LOSS_TOL, LR_TOL, NORM_TOL)
    print("\n".join(lines))
    drop = theirs[0][0] - theirs[-1][0]
    if drop < 1.0:
        print(f"FAIL: the reference loss fell by only {drop:.3f} in {len(theirs)} steps: the test trains too little to see a curve")
        return 1
    if args.self_check:
        if ok:
            print(f"FAIL: self-check: the reference with the {args.self_check} mistake was not told apart")
            return 1
        print(f"self-check: the {args.self_check} mistake was caught, as it should be")
        return 0
    if not ok:
        print(f"FAIL: fivefold's loss curve differs from PyTorch's (tolerances: loss {LOSS_TOL}, lr {LR_TOL}, "
              f"grad norm {NORM_TOL}, relative)")
        return 1
    print(f"gpt2 loss curve: {len(ours)} steps agree (loss {ours[0][0]:.4f} -> {ours[-1][0]:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
