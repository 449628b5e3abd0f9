"""Compares fivefold's model against the PyTorch reference (reference.py).

    /usr/bin/python3 compare.py --config MODEL.json --dir DIR [--expect-drops]

DIR holds what tests/tools/model_dump wrote: init.safetensors (weights and
the batch) and results.safetensors (logits, losses, gradients, the losses,
gradient norms and final weights of N AdamW steps). The reference loads the
same weights, runs in float64 (so the differences measured are fivefold's
float32 rounding, not the reference's), repeats every computation with
autograd and torch.optim.AdamW, and prints one row per quantity.

Error measure: for a tensor, max|c - r| / max|r| (r = reference), i.e. the
worst element error relative to the tensor's scale; for a scalar,
|c - r| / max(|r|, 1e-6). Tolerances (override with flags):
  --tol 1e-4        logits, losses, every gradient, per-step losses and
                    gradient norms
  --param-tol 1e-4  final parameters after the AdamW steps, except elements
                    whose reference gradient was, at some step, below 1e-5 of
                    its tensor's max |g|: Adam normalises each element, so a
                    gradient that is zero up to float32 rounding gives a step
                    of arbitrary sign; those (few, counted in the table) are
                    only held to |err| <= 2 * lr * steps, the most Adam can
                    move them. A tensor whose whole reference gradient is
                    below 1e-5 of the model's largest (GPT-2's key bias: the
                    softmax ignores a shift shared by all keys, so its true
                    gradient is zero) is measured against that largest
                    gradient, and all its elements count as near-zero.
Integer quantities (tokens counted, per-expert routing counts, dropped
assignments) must match exactly. Exit status 1 on any mismatch.

--expect-mismatch NAME turns the verdict round for the self-check
(run_compare.sh --self-check): exit 0 only when NAME, and nothing but NAME,
is reported as a mismatch (a quantity row is named like the results tensor
it reads, e.g. grad.layers.1.moe.router).
"""
import argparse
import math
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

# The optimizer tests/tools/model_dump runs through fivefold's trainer
# optimizer (train/optimizer.h), defined here from the documented rules
# (README "The run configuration"), not from fivefold's code: peak LR with a
# linear warm-up of WARMUP steps (0-based step s uses LR (s+1) / WARMUP),
# then cosine decay to MIN_LR at the last step; decoupled weight decay on
# everything but the norm weights; the global gradient norm clipped to
# MAX_NORM.
LR, MIN_LR, WARMUP, BETAS, EPS, WEIGHT_DECAY, MAX_NORM = 1e-3, 1e-4, 3, (0.9, 0.95), 1e-8, 0.1, 1.6


def scheduled_lr(step, total):
    """Learning rate of 0-based step `step` of `total`."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    if step >= total:
        return MIN_LR
    progress = (step - WARMUP) / (total - WARMUP)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1.0 + math.cos(math.pi * progress))


def reference_optimizer(model, params, total_steps):
    """torch.optim.AdamW with the decay mask of reference.py and the schedule
    as a LambdaLR: call clip_grad_norm_(..., MAX_NORM), opt.step(), sched.step()."""
    decay = [p for n, p in params.items() if not model.no_weight_decay(n)]
    no_decay = [p for n, p in params.items() if model.no_weight_decay(n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LR, betas=BETAS, eps=EPS,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: scheduled_lr(s, total_steps) / LR)
    return opt, sched
FREE_GRAD_REL = 1e-5  # |g| below this fraction of the tensor's max |g| is rounding noise


class Report:
    def __init__(self):
        self.rows = []  # (name, shape, max_abs_err, scale, rel_err, tol, ok, note)

    def tensor(self, name, c, r, tol, loose=None, loose_abs=0.0, scale_floor=0.0, note=""):
        """loose: optional bool mask of elements held only to |c - r| <= loose_abs;
        scale_floor: the least scale the error is divided by."""
        c = c.detach().to(torch.float64).reshape(-1)
        r = r.detach().to(torch.float64).reshape(-1)
        if c.shape != r.shape:
            self.rows.append((name, "", math.inf, math.nan, math.inf, tol, False, f"{c.numel()} vs {r.numel()} elements"))
            return
        diff = (c - r).abs()
        ok = bool(torch.isfinite(c).all())
        if loose is not None and bool(loose.any()):
            loose = loose.reshape(-1)
            worst_loose = diff[loose].max().item()
            ok = ok and worst_loose <= loose_abs
            note = (note + "; " if note else "") + f"{int(loose.sum())} elements with near-zero gradients: max|err| {worst_loose:.1e} <= {loose_abs:.0e}"
            diff = diff.masked_fill(loose, 0.0)
        err = diff.max().item() if c.numel() else 0.0
        scale = max(r.abs().max().item() if r.numel() else 0.0, scale_floor)
        rel = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
        ok = ok and rel <= tol
        self.rows.append((name, str(list(r.shape)), err, scale, rel, tol, ok, note))

    def scalar(self, name, c, r, tol):
        c, r = float(c), float(r)
        err = abs(c - r)
        rel = err / max(abs(r), 1e-6)
        ok = math.isfinite(c) and rel <= tol
        self.rows.append((name, "", err, abs(r), rel, tol, ok, f"fivefold {c:.9g}  reference {r:.9g}"))

    def exact(self, name, c, r):
        ok = c == r
        self.rows.append((name, "", None, None, 0 if ok else math.inf, 0, ok, f"fivefold {c}  reference {r}"))

    def fail(self, name, note):
        self.rows.append((name, "", None, None, math.inf, 0, False, note))

    def print(self, title):
        print(f"{'quantity':44s} {'max|err|':>10s} {'max|ref|':>10s} {'rel err':>10s} {'tol':>8s}  status")
        for name, _, err, scale, rel, tol, ok, note in self.rows:
            status = "ok" if ok else "MISMATCH"
            num = (lambda v: f"{'-':>10s}" if v is None else f"{v:10.3e}")
            if err is None:  # integers: exact match required
                line = f"{name:44s} {num(None)} {num(None)} {num(None)} {'exact':>8s}  {status}"
            else:
                line = f"{name:44s} {num(err)} {num(scale)} {num(rel)} {tol:8.1e}  {status}"
            print(line + (f"  ({note})" if note else ""))
        bad = [r for r in self.rows if not r[6]]
        worst = sorted((r for r in self.rows if math.isfinite(r[4])), key=lambda r: -r[4] / max(r[5], 1e-300) if r[5] > 0 else 0)[:5]
        print(f"\n{title}: {len(self.rows)} quantities compared, {len(bad)} mismatched")
        if worst:
            print("closest to their tolerance: " + ", ".join(f"{r[0]} ({r[4]:.2e})" for r in worst))
        for r in bad:
            print(f"MISMATCH {r[0]}: relative error {r[4]:.3e} > tolerance {r[5]:.1e} {r[7]}")
        return not bad


def load_inputs(args, cfg):
    init, _ = safetensors_io.load(os.path.join(args.dir, "init.safetensors"))
    results, meta = safetensors_io.load(os.path.join(args.dir, "results.safetensors"))
    tokens = init.pop("tokens").long()
    targets = init.pop("targets").long()
    expected = reference.expected_param_shapes(cfg)
    problems = []
    for name, shape in expected.items():
        if name not in init:
            problems.append(f"init.safetensors lacks '{name}' {shape}")
        elif list(init[name].shape) != shape:
            problems.append(f"'{name}' has shape {list(init[name].shape)}, model.h says {shape}")
    for name in init:
        if name not in expected:
            problems.append(f"init.safetensors has unexpected tensor '{name}'")
    return init, results, tokens, targets, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--param-tol", type=float, default=1e-4)
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--expect-drops", action="store_true", help="fail unless the capacity rule drops assignments")
    ap.add_argument("--expect-mismatch", metavar="NAME", default=None,
                    help="succeed only when exactly the quantity NAME mismatches (the self-check)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead on a shared machine
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)

    cfg = reference.load_config(args.config)
    init, results, tokens, targets, problems = load_inputs(args, cfg)
    report = Report()
    for p in problems:
        report.fail("parameter table", p)
    if problems:
        report.print(args.config)
        return 1

    model = reference.make_model(cfg).to(dtype)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(init[name].to(dtype))
    B, T = tokens.shape
    V = cfg.vocab_size

    # 1. Logits of the initial model.
    with torch.no_grad():
        logits, _ = model(tokens)
    report.tensor("logits", results["logits"], logits.reshape(B * T, V), args.tol)

    # 2. Losses and gradients of one training forward/backward.
    model.zero_grad(set_to_none=True)
    _, losses = model(tokens, targets)
    losses["total"].backward()
    for key in ("lm", "aux", "z"):
        report.scalar(f"loss.{key}", results[f"loss.{key}"].item(), losses[key].item(), args.tol)
    report.exact("loss.tokens", int(results["loss.tokens"].item()), int((targets >= 0).sum()))
    if cfg.num_experts > 0:
        c_counts = results["moe.expert_counts"]
        moe_layers = [i for i in range(cfg.num_layers) if cfg.is_moe_layer[i]]
        for layer, stats in zip(moe_layers, model.last_moe_stats):
            report.exact(f"moe.expert_counts[layer {layer}]", c_counts[layer].tolist(), stats["counts"].tolist())
        dropped = sum(s["dropped"] for s in model.last_moe_stats)
        report.exact("moe.dropped_assignments", int(results["moe.dropped_assignments"].item()), dropped)
        if args.expect_drops and dropped == 0:
            report.fail("moe.dropped_assignments", "the capacity rule dropped nothing: the test would not test dropping")
    grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in params.items()}
    grad_scale = max(g.abs().max().item() for g in grads.values())
    for name, g in grads.items():
        g_max = g.abs().max().item()
        if 0 < g_max <= FREE_GRAD_REL * grad_scale:
            report.tensor(f"grad.{name}", results[f"grad.{name}"], g, args.tol, scale_floor=grad_scale,
                          note="zero up to rounding: error relative to the model's largest gradient")
        else:
            report.tensor(f"grad.{name}", results[f"grad.{name}"], g, args.tol)

    # 3. Optimizer steps on the same batch: fivefold's trainer optimizer
    #    against torch.optim.AdamW with the same schedule, mask and clipping.
    steps = results["steps.loss_lm"].numel()
    opt, sched = reference_optimizer(model, params, steps)
    ref_steps = {"lm": [], "aux": [], "z": [], "norm": [], "lr": []}
    # Adam divides each gradient element by its own running RMS, so an element
    # whose gradient is zero up to float32 rounding takes a step of arbitrary
    # sign (up to lr): such elements cannot be compared tightly. Exact zeros
    # are deterministic (only weight decay moves them) and stay checked.
    free = {n: torch.zeros_like(p, dtype=torch.bool) for n, p in params.items()}
    for _ in range(steps):
        opt.zero_grad(set_to_none=False)
        _, losses = model(tokens, targets)
        losses["total"].backward()
        for p in params.values():
            if p.grad is None:  # unused this step: fivefold still decays it
                p.grad = torch.zeros_like(p)
        step_scale = max(p.grad.abs().max() for p in params.values())
        for n, p in params.items():
            g = p.grad.abs()  # exact zeros (unused rows, idle experts) stay checked tightly
            free[n] |= (g > 0) & (g <= FREE_GRAD_REL * g.max())
            if 0 < g.max() <= FREE_GRAD_REL * step_scale:  # the whole tensor is rounding noise
                free[n] |= True
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()), MAX_NORM)
        ref_steps["lr"].append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        for key in ("lm", "aux", "z"):
            ref_steps[key].append(losses[key].item())
        ref_steps["norm"].append(norm.item())
    if "steps.lr" not in results:
        report.fail("steps.lr", "the dump has no per-step learning rate (not made by the trainer's optimizer)")
    for key, c_name in (("lm", "loss_lm"), ("aux", "loss_aux"), ("z", "loss_z"), ("norm", "grad_norm"),
                        ("lr", "lr")):
        if f"steps.{c_name}" not in results:
            continue
        c_vals = results[f"steps.{c_name}"].tolist()
        if not c_vals:
            continue
        errs = [abs(c - r) / max(abs(r), 1e-6) for c, r in zip(c_vals, ref_steps[key])]
        i = max(range(steps), key=lambda k: errs[k])
        report.scalar(f"steps.{c_name}[{i + 1} of {steps}, worst]", c_vals[i], ref_steps[key][i], args.tol)
    for name, p in params.items():
        report.tensor(f"final.{name}", results[f"final.{name}"], p, args.param_tol, free[name], 2 * LR * steps)

    ok = report.print(f"{os.path.basename(args.config)} vs {args.dir}")
    if args.expect_mismatch is None:
        return 0 if ok else 1
    want = args.expect_mismatch
    bad = [r[0] for r in report.rows if not r[6]]
    named = [n for n in bad if n == want or n.startswith(want + "[")]
    others = [n for n in bad if n not in named]
    if named and not others:
        print(f"expected mismatch: exactly {want} was reported")
        return 0
    if not named:
        print(f"SELF-CHECK FAILED: {want} was expected to mismatch but passed")
    if others:
        print(f"SELF-CHECK FAILED: mismatches other than {want}: {', '.join(others)}")
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except safetensors_io.SafetensorsError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        sys.exit(2)
