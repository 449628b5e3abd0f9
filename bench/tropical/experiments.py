"""The Fashion-MNIST experiments of docs/tropical.md: trains every network
one after another with `fivefold train` (1 thread), and writes the tables
(results.md) and plots (PNG, matplotlib when installed) from what the runs
recorded in their metrics.jsonl and banners.

  1. TCNN comparison: the small conv net as published (linear) and with ReLU,
     the six tropical variants, LeNet-5 and tropical LeNet; test accuracy
     mean and standard deviation over the seeds, parameters and
     multiplications per image as the banner states them.
  2. Robustness: test accuracy under Gaussian and salt-and-pepper noise at
     five levels for the ReLU conv net, the best small TCNN (chosen by mean
     VALIDATION accuracy, never by test accuracy), LeNet-5 and tropical
     LeNet. Each trained run is resumed from its next-to-last checkpoint with
     noise on the test part only: the last step is replayed bit for bit
     (training data stays clean), then the test part is evaluated noisy.
  3. MMP-NN against ReLU MLPs (as shipped, at equal parameters, at equal
     multiplications), with each normalisation candidate and both: epochs
     until the validation accuracy first reaches 85%.

The networks chosen for the issue's targets (mixed-lenet-conv3-tconv5-wide
and its conv twin lenet-conv3-conv5-wide in table 1, mmp-192-linear-out in
table 3) train for their configs' own steps unless TARGET_EPOCHS is set, so
that the rows are what the shipped configs train. NAME-e20 (the two mixed
ones, mmp and mmp+recenter) is NAME's config trained for 20 epochs;
mlp-relu-eN is mlp-relu.json trained as long as mmp-192-linear-out.

Multiplications per image are counted: tropical_count (bench/tropical/
count.c) runs a forward pass of each run's config with the instrumented
counter of kern/op_count.h on, and the script stops if that count differs
from the banner's analytic figure.

Nothing is chosen on the test set: learning rates and schedules are the
configs' as shipped, every run ends at its last step (no early stopping),
and the only selection (the best TCNN) uses validation accuracy.

Usage: experiments.py FIVEFOLD CONFIG_DIR WORK_DIR OUT_DIR
Environment: EPOCHS (small nets), LENET_EPOCHS, MMP_EPOCHS (MMP-NN and MLPs),
TARGET_EPOCHS (the target networks; their configs' steps by default),
SEEDS, LENET_SEEDS (comma-separated), EVALS_PER_EPOCH, EXPERIMENTS (a subset
of "1,2,3"), NETS (comma-separated network names: train and tabulate only
these; experiment 2 needs all of its four and is skipped otherwise), JOBS
(runs trained at once, each on 1 thread; 1).
"""
import concurrent.futures
import copy
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time

FIVEFOLD, CONFIGS, WORK, OUT = sys.argv[1:5]
EPOCHS = float(os.environ.get("EPOCHS", "10"))
LENET_EPOCHS = float(os.environ.get("LENET_EPOCHS", os.environ.get("EPOCHS", "10")))
SEEDS = [int(s) for s in os.environ.get("SEEDS", "1,2,3").split(",")]
LENET_SEEDS = [int(s) for s in os.environ.get("LENET_SEEDS", ",".join(map(str, SEEDS))).split(",")]
MMP_EPOCHS = float(os.environ.get("MMP_EPOCHS", os.environ.get("EPOCHS", "10")))
TARGET_EPOCHS = float(os.environ["TARGET_EPOCHS"]) if os.environ.get("TARGET_EPOCHS") else None
JOBS = int(os.environ.get("JOBS", "1"))
NETS = set(os.environ["NETS"].split(",")) if os.environ.get("NETS") else None
COUNTER = os.path.join(os.path.dirname(os.path.abspath(FIVEFOLD)), "bench", "tropical_count")
EVALS_PER_EPOCH = int(os.environ.get("EVALS_PER_EPOCH", "4"))
EXPERIMENTS = set(os.environ.get("EXPERIMENTS", "1,2,3").split(","))
TRAIN_IMAGES = 60000 - 5000  # the training file less the validation part (data.val_images as shipped)
GAUSSIAN = [0.05, 0.1, 0.2, 0.3, 0.5]
SALT_PEPPER = [0.02, 0.05, 0.1, 0.2, 0.3]

SMALL = ["tcnn-small-conv", "tcnn-small-conv-relu", "tcnn-max-sum", "tcnn-min-sum", "tcnn-max-max",
         "tcnn-min-max", "tcnn-max-min", "tcnn-min-min"]
LENET = ["lenet5", "tlenet5", "tlenet5-std"]
MIXED = ["mixed-lenet-conv3-tconv5-wide", "lenet-conv3-conv5-wide"]  # the target network and its conv twin
# Each also at MIXED_ALT_EPOCHS (a name's suffix -eN): the other training length compared on validation.
MIXED_ALT_EPOCHS = 20.0
ALT = {f"{n}-e{MIXED_ALT_EPOCHS:g}": n for n in MIXED}
MIXED = [m for n in MIXED for m in (n, f"{n}-e{MIXED_ALT_EPOCHS:g}")]
MMP_TARGET = "mmp-192-linear-out"
# The unnormalised MMP-NNs also at MIXED_ALT_EPOCHS: whether they reach 85% at all when trained twice as long.
MMP_ALT = {f"{n}-e{MIXED_ALT_EPOCHS:g}": n for n in ("mmp", "mmp+recenter")}
COUNTERPART = {name: "tcnn-small-conv" for name in SMALL} | {"tlenet5": "lenet5", "tlenet5-std": "lenet5",
                                                             "lenet5": "lenet5"} | {n: "lenet5" for n in MIXED}
TWIN = {"mixed-lenet-conv3-tconv5-wide": "lenet-conv3-conv5-wide",
        f"mixed-lenet-conv3-tconv5-wide-e{MIXED_ALT_EPOCHS:g}": "lenet-conv3-conv5-wide"}
TWINS = {"lenet-conv3-conv5-wide", f"lenet-conv3-conv5-wide-e{MIXED_ALT_EPOCHS:g}"}


CONFIG_STEPS = "(their configs' steps)"


def selected(name):
    return NETS is None or name in NETS


def config_epochs(name):
    """A target network's epochs: TARGET_EPOCHS or its config's steps."""
    if name in ALT:
        return MIXED_ALT_EPOCHS
    if TARGET_EPOCHS is not None:
        return TARGET_EPOCHS
    return load_config(name)["training"]["steps"] * 64 / TRAIN_IMAGES


def load_config(name):
    name = ALT.get(name, name)
    with open(os.path.join(CONFIGS, name + ".json")) as f:
        return json.load(f)


def mmp_variants():
    """The normalisation candidates, each alone and both (mmp-norm.json)."""
    plain, both = load_config("mmp"), load_config("mmp-norm")
    recenter = copy.deepcopy(plain)
    for layer in recenter["model"]["layers"]:
        if layer["type"] in ("maxplus", "minplus"):
            layer["recenter"] = True
    standardize = copy.deepcopy(both)
    for layer in standardize["model"]["layers"]:
        layer.pop("recenter", None)
    out = {"mmp": plain, "mmp+recenter": recenter}
    out |= {alt: out[name] for alt, name in MMP_ALT.items()}
    return out | {"mmp+standardize": standardize, "mmp-norm": both, "mmp-wide": load_config("mmp-wide"),
                  MMP_TARGET: load_config(MMP_TARGET)}


def mlp_variants():
    """mlp-relu.json as shipped (hidden 256) and at MMP-NN's size: hidden 69
    (about its parameters) and 64 (about its multiplications); hidden 128
    about mmp-wide's multiplications."""
    out = {"mlp-relu": load_config("mlp-relu")}
    for tag, hidden in (("mlp-relu-h69", 69), ("mlp-relu-h64", 64), ("mlp-relu-h128", 128)):
        cfg = load_config("mlp-relu")
        cfg["model"]["layers"][0]["out"] = hidden
        out[tag] = cfg
    out[long_mlp()] = load_config("mlp-relu")  # trained as long as mmp-192-linear-out
    return out


def long_mlp():
    """mlp-relu.json at the epochs of mmp-192-linear-out: the ReLU MLP given
    the same training as the MMP-NN it is compared with."""
    return f"mlp-relu-e{config_epochs(MMP_TARGET):.3g}"


def run_dir(name, seed):
    return os.path.join(WORK, f"{name}-s{seed}")


def train(name, cfg, seed, epochs):
    """Trains cfg into WORK/name-sSEED unless a finished run is there;
    returns its record (evals, test, params, mults, steps, seconds)."""
    out = run_dir(name, seed)
    steps = math.ceil(epochs * TRAIN_IMAGES / 64 - 1e-9)  # a config's own steps give back its steps
    cfg = copy.deepcopy(cfg)
    cfg.setdefault("data", {})["test_at_end"] = True
    t = cfg["training"]
    t.update({"micro_batch_size": 64, "grad_accum_steps": 1, "steps": steps, "seed": seed, "threads": 1,
              "eval_interval": max(1, round(TRAIN_IMAGES / 64 / EVALS_PER_EPOCH)), "log_interval": steps})
    t.pop("eval_batches", None)
    cfg["checkpoint"] = {"interval": steps - 1, "keep_last": 0}
    path = out + ".json"
    same = False
    if os.path.exists(path):  # the description does not change what trains
        with open(path) as f:
            same = {k: v for k, v in json.load(f).items() if k != "description"} == {
                k: v for k, v in cfg.items() if k != "description"}
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    if not same or not os.path.exists(os.path.join(out, "done")):  # a finished run of this very config is reused
        subprocess.run(["rm", "-rf", out], check=True)
        t0 = time.time()
        with open(out + ".log", "w") as log:
            rc = subprocess.run([FIVEFOLD, "train", "--config", path, "--out", out, "--no-progress"], stdout=log,
                                stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1")).returncode
        if rc:
            sys.exit(f"{name} seed {seed}: fivefold train exited {rc} (see {out}.log)")
        with open(os.path.join(out, "done"), "w") as f:
            f.write(f"{time.time() - t0:.1f}\n")
    return read_run(name, out, steps)


def read_run(name, out, steps):
    evals, test, summary = [], None, None
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["type"] == "eval":
                evals.append((r["step"] * 64 / TRAIN_IMAGES, r["val_accuracy"]))
            elif r["type"] == "test":
                test = r
            elif r["type"] == "summary":
                summary = r
    with open(out + ".log") as f:
        banner = f.read()
    m = re.search(r"params +([\d,]+) parameters; ([\d,]+) multiplications", banner)
    with open(os.path.join(out, "done")) as f:
        seconds = float(f.read())
    counted = subprocess.run([COUNTER, out + ".json"], check=True, capture_output=True, text=True).stdout
    counted = int(re.search(r" counted=(\d+) ", counted).group(1))
    if counted != int(m.group(2).replace(",", "")):
        sys.exit(f"{out}: {counted} multiplications per image counted, the banner's analytic figure is {m.group(2)}")
    return {"name": name, "out": out, "steps": steps, "evals": evals, "test": test["test_accuracy"],
            "val": evals[-1][1], "params": int(m.group(1).replace(",", "")),
            "mults": counted, "seconds": seconds, "epochs": steps * 64 / TRAIN_IMAGES,
            "train_seconds": summary["train_seconds"]}


def count_config(name):
    """Multiplications per image of configs/vision/NAME.json, counted."""
    out = subprocess.run([COUNTER, os.path.join(CONFIGS, name + ".json")], check=True, capture_output=True,
                         text=True).stdout
    return int(re.search(r" counted=(\d+) ", out).group(1))


def train_many(jobs):
    """train() over (name, cfg, seed, epochs) jobs, JOBS at a time; records
    in the jobs' order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, JOBS)) as pool:
        return list(pool.map(lambda j: train(*j), jobs))


def noisy_test(rec, cfg_path, kind, level):
    """Test accuracy of a finished run with noise on the test part: resumed
    from step steps-1 with the noise set (only the test part noisy)."""
    tag = f"{kind}-{level:g}"
    out = f"{rec['out']}-noise-{tag}"
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["data"].update({"noise_gaussian": level if kind == "gaussian" else 0,
                        "noise_salt_pepper": level if kind == "salt_pepper" else 0, "noise_on": "test"})
    cfg["training"]["eval_interval"] = 0
    cfg["checkpoint"] = {"interval": 0, "keep_last": 1}
    path = out + ".json"
    same = False
    if os.path.exists(path):
        with open(path) as f:
            same = json.load(f) == cfg
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    if same and os.path.exists(os.path.join(out, "done")):  # this very evaluation finished before
        return read_test(out)
    ckpt = os.path.join(rec["out"], "checkpoints", "step-%08d" % (rec["steps"] - 1))
    subprocess.run(["rm", "-rf", out], check=True)
    with open(out + ".log", "w") as log:
        rc = subprocess.run([FIVEFOLD, "train", "--config", path, "--out", out, "--resume", ckpt, "--no-progress"],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1")).returncode
    if rc:
        sys.exit(f"{out}: fivefold train --resume exited {rc} (see {out}.log)")
    subprocess.run(["rm", "-rf", os.path.join(out, "checkpoints")], check=True)
    acc = read_test(out)
    with open(os.path.join(out, "done"), "w") as f:
        f.write("\n")
    return acc


def read_test(out):
    acc = None
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["type"] == "test":
                acc = r["test_accuracy"]
    return acc


def mean_sd(values, scale=100.0, digits=2):
    values = [v * scale for v in values]
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def fmt(n):
    return f"{n:,}"


def first_reaching(evals, target):
    for epoch, acc in evals:
        if acc >= target:
            return epoch
    return None


def mean_curve(recs):
    """The validation curve averaged over seeds (the runs share eval steps)."""
    n = min(len(r["evals"]) for r in recs)
    return [(recs[0]["evals"][i][0], statistics.mean(r["evals"][i][1] for r in recs)) for i in range(n)]


def plot(path, series, xlabel, ylabel, title):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no {path}", file=sys.stderr)
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    for label, xy, style in series:
        ax.plot([p[0] for p in xy], [100 * p[1] for p in xy], style, label=label, markersize=3)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return os.path.basename(path)


def main():
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(OUT, exist_ok=True)
    lines = []
    say = lines.append
    started = time.time()
    say(f"Settings: EPOCHS={EPOCHS:g} (small nets), LENET_EPOCHS={LENET_EPOCHS:g}, MMP_EPOCHS={MMP_EPOCHS:g} "
        f"(MMP-NN, MLPs), TARGET_EPOCHS={TARGET_EPOCHS or CONFIG_STEPS} (the target networks), JOBS={JOBS}, "
        f"{'NETS=' + ','.join(sorted(NETS)) + ', ' if NETS else ''}"
        f"SEEDS={','.join(map(str, SEEDS))}, LENET_SEEDS={','.join(map(str, LENET_SEEDS))}, "
        f"EVALS_PER_EPOCH={EVALS_PER_EPOCH}; batch 64, 1 thread, {TRAIN_IMAGES:,} training / 5,000 validation / "
        f"10,000 test images; learning rates and schedules as in the configs (cosine over the run's steps).")
    say("")
    runs = {}
    table1 = [n for n in SMALL + LENET + MIXED if selected(n)]
    if EXPERIMENTS & {"1", "2"}:
        def epochs(name):
            return config_epochs(name) if name in MIXED else LENET_EPOCHS if name in LENET else EPOCHS
        jobs = [(name, load_config(name), s, epochs(name))
                for name in table1 for s in (LENET_SEEDS if name in LENET + MIXED else SEEDS)]
        recs = train_many(jobs)
        for (name, *_), rec in zip(jobs, recs):
            runs.setdefault(name, []).append(rec)
    if "1" in EXPERIMENTS:
        say("### 1. Tropical CNNs against CNNs")
        say("")
        say("| network | parameters | multiplications / image | vs conv counterpart | epochs | seeds | "
            "validation accuracy % | test accuracy % |")
        say("|---|---|---|---|---|---|---|---|")
        for name in table1:
            recs = runs[name]
            fewer = 100.0 * (1 - recs[0]["mults"] / count_config(COUNTERPART[name]))
            vs = ("—" if COUNTERPART[name] == name or name == "tcnn-small-conv-relu" or name in TWINS
                  else f"{fewer:.1f}% fewer")
            if name in TWIN:
                vs += f" ({100.0 * (1 - recs[0]['mults'] / count_config(TWIN[name])):.1f}% fewer than {TWIN[name]})"
            say(f"| {name} | {fmt(recs[0]['params'])} | {fmt(recs[0]['mults'])} | {vs} | "
                f"{recs[0]['steps'] * 64 / TRAIN_IMAGES:.2f} | {len(recs)} | {mean_sd([r['val'] for r in recs])} | "
                f"{mean_sd([r['test'] for r in recs])} |")
        say("")
        say("Accuracies are mean ± standard deviation over the seeds at the last step. The vs-counterpart "
            "column compares with the conv net of the same architecture (tcnn-small-conv for the small nets, "
            "lenet5 for tlenet5, tlenet5-std and the mixed nets; in brackets the mixed net against its conv twin, "
            "the same network with an ordinary conv in place of its tropical one; a name ending in "
            f"-e{MIXED_ALT_EPOCHS:g} is that config trained for {MIXED_ALT_EPOCHS:g} epochs instead of its own steps). "
            "Multiplications are counted in a forward pass "
            "(tropical_count, kern/op_count.h) and equal the layers' analytic sums (checked by the script).")
        say("")
        png = plot(os.path.join(OUT, "tropical-tcnn-val.png"),
                   [(n, mean_curve(runs[n]), "-o" if "conv" in n or n == "lenet5" else "--.") for n in table1],
                   "epoch", "validation accuracy %", "Fashion-MNIST validation accuracy (mean over seeds)")
        if png:
            say(f"![validation accuracy against epochs]({png})")
            say("")
    if "2" in EXPERIMENTS and not all(selected(n) for n in SMALL + LENET):
        say("(Experiment 2 skipped: NETS leaves out networks it compares.)")
        say("")
    elif "2" in EXPERIMENTS:
        tropical = SMALL[2:]
        best = max(tropical, key=lambda n: statistics.mean(r["val"] for r in runs[n]))
        say("### 2. Robustness to noise on the test images")
        say("")
        say(f"Best small TCNN by mean validation accuracy: **{best}**. Training was clean; only the test part "
            "is noisy (Gaussian sigma in pixel units of [0, 1], then clipped; salt-and-pepper: the fraction of "
            "pixels set to 0 or 1). Each entry is the mean ± standard deviation over the seeds' final models.")
        say("")
        models = ["tcnn-small-conv-relu", best, "lenet5", "tlenet5-std"]
        levels = [("gaussian", 0.0)] + [("gaussian", g) for g in GAUSSIAN] + [("salt_pepper", p) for p in SALT_PEPPER]
        table = {}
        cases = [(name, kind, level, rec) for name in models for kind, level in levels for rec in runs[name]]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, JOBS)) as pool:
            accs = list(pool.map(lambda c: noisy_test(c[3], c[3]["out"] + ".json", c[1], c[2]), cases))
        for (name, kind, level, rec), acc in zip(cases, accs):
            if level == 0.0 and acc != rec["test"]:
                sys.exit(f"{rec['out']}: the resumed clean test accuracy {acc} is not the run's {rec['test']}")
            table.setdefault((name, kind, level), []).append(acc)
        say("| noise | level | " + " | ".join(models) + " |")
        say("|---|---|" + "---|" * len(models))
        for kind, level in levels:
            label = "none" if level == 0 else kind.replace("_", "-")
            say(f"| {label} | {level:g} | " + " | ".join(mean_sd(table[(n, kind, level)]) for n in models) + " |")
        say("")
        say("The clean row was recomputed by the resumed runs and equals each run's own test accuracy "
            "(checked by the script): the replayed last step is bit for bit the original.")
        say("")
        for kind, xs in (("gaussian", GAUSSIAN), ("salt_pepper", SALT_PEPPER)):
            png = plot(os.path.join(OUT, f"tropical-noise-{kind}.png"),
                       [(n, [(0.0, statistics.mean(table[(n, 'gaussian', 0.0)]))] +
                         [(x, statistics.mean(table[(n, kind, x)])) for x in xs], "-o") for n in models],
                       f"{kind.replace('_', '-')} level", "test accuracy %",
                       f"Test accuracy under {kind.replace('_', '-')} noise (mean over seeds)")
            if png:
                say(f"![test accuracy against {kind} noise]({png})")
                say("")
    if "3" in EXPERIMENTS:
        nets = {n: cfg for n, cfg in (mmp_variants() | mlp_variants()).items() if selected(n)}
        def mmp_epochs(name):
            if name in MMP_ALT:
                return MIXED_ALT_EPOCHS
            return config_epochs(MMP_TARGET) if name in (MMP_TARGET, long_mlp()) else MMP_EPOCHS
        jobs = [(name, cfg, s, mmp_epochs(name)) for name, cfg in nets.items() for s in SEEDS]
        mruns = {}
        for (name, *_), rec in zip(jobs, train_many(jobs)):
            mruns.setdefault(name, []).append(rec)
        say("### 3. Min-max-plus networks against ReLU MLPs")
        say("")
        say("| network | parameters | multiplications / image | epochs | seeds | epochs to 85% validation "
            "(per seed) | validation accuracy % | test accuracy % |")
        say("|---|---|---|---|---|---|---|---|")
        for name, recs in mruns.items():
            reach = [first_reaching(r["evals"], 0.85) for r in recs]
            reach_s = ", ".join("not reached" if e is None else f"{e:.2f}" for e in reach)
            say(f"| {name} | {fmt(recs[0]['params'])} | {fmt(recs[0]['mults'])} | "
                f"{recs[0]['steps'] * 64 / TRAIN_IMAGES:.2f} | {len(recs)} | {reach_s} | "
                f"{mean_sd([r['val'] for r in recs])} | {mean_sd([r['test'] for r in recs])} |")
        say("")
        say(f"Validation is evaluated {EVALS_PER_EPOCH} times per epoch, so epochs to 85% are multiples of "
            f"{1 / EVALS_PER_EPOCH:.2f} epoch (of {TRAIN_IMAGES:,} images). mmp+recenter and mmp+standardize "
            "are mmp.json with one candidate each (made by the script); mlp-relu-h69, -h64 and -h128 are mlp-relu.json "
            "with 69, 64 and 128 hidden units: about MMP-NN's parameters, its multiplications, and mmp-wide's "
            f"multiplications; {long_mlp()} is mlp-relu.json trained as long as {MMP_TARGET}; "
            f"{' and '.join(MMP_ALT)} are {' and '.join(MMP_ALT.values())} trained for {MIXED_ALT_EPOCHS:g} epochs "
            f"(the cosine schedule over their {MIXED_ALT_EPOCHS:g} epochs).")
        say("")
        png = plot(os.path.join(OUT, "tropical-mmp-val.png"),
                   [(n, mean_curve(r), "-o" if n.startswith("mmp") else "--.") for n, r in mruns.items()],
                   "epoch", "validation accuracy %", "MMP-NN and ReLU MLPs: validation accuracy (mean over seeds)")
        if png:
            say(f"![MMP-NN validation accuracy against epochs]({png})")
            say("")
        runs.update(mruns)
    total = sum(r["seconds"] for recs in runs.values() for r in recs)
    say(f"Training wall time (all runs, 1 thread each, {JOBS} at a time): {total / 60:.1f} min; the whole script "
        f"{(time.time() - started) / 60:.1f} min; machine {platform.machine()}, load average at the end "
        f"{os.getloadavg()[0]:.1f}.")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(OUT, "results.md"), "w") as f:
        f.write(text)
    with open(os.path.join(OUT, "runs.json"), "w") as f:
        json.dump({n: [{k: v for k, v in r.items()} for r in recs] for n, recs in runs.items()}, f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
