"""The searches behind configs/vision/tlenet5-std.json, mmp-wide.json,
mixed-lenet-conv3-tconv5-wide.json (and its conv twin) and
mmp-192-linear-out.json (docs/tropical.md, "Selection rules"): short runs
of candidate networks and learning rates, seed 1, 1 thread, cosine decay to
lr / 100 over the run, the validation accuracy (the 5,000 images held out
of the training file; the test set is never evaluated) twice per epoch.
Figures only.

  python3 bench/tropical/lr_search.py FIVEFOLD WORK_DIR

Environment: SEARCH, the groups to run (comma-separated; all by default):
"earlier" (tlenet5-std, mmp-wide), "mixed" (conv 3x3 then tropical conv 5x5),
"twin" (its conv twin: an ordinary conv 5x5 in place of the tropical one), "mmp192" (784 -> 192 linear, tropical layers, linear out).
Prints one line per run: tag, epochs, lr, seconds, the last and best
validation accuracy and the validation curve as (epoch, accuracy) pairs;
finished runs in WORK_DIR are reused.
"""
import copy
import json
import math
import os
import re
import subprocess
import sys
import time

FIVEFOLD, WORK = sys.argv[1:3]
CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "vision")
TRAIN_IMAGES = 55000


def load(name):
    with open(os.path.join(CONFIGS, name + ".json")) as f:
        return json.load(f)


COUNTER = os.path.join(os.path.dirname(os.path.abspath(FIVEFOLD)), "bench", "tropical_count")
ROWS = []  # (tag, epochs, lr, init_range, multiplications, last, best) of the runs, for the summary table


def summarise(tag, out, epochs, lr, res):
    """Adds a run's row to ROWS: multiplications counted in a forward pass
    of its config (tropical_count), the last and best validation accuracy."""
    m = re.search(r" last=([\d.]+) best=([\d.]+) ", res)
    if not m:  # a run recorded before the summary existed: the curve only
        curve = [float(a) for a in re.findall(r", ([\d.]+)\)", res)]
        last, best = curve[-1], max(curve)
    else:
        last, best = float(m.group(1)), float(m.group(2))
    counted = subprocess.run([COUNTER, out + ".json"], check=True, capture_output=True, text=True).stdout
    with open(out + ".json") as f:
        ranges = {layer.get("init_range", 1) for layer in json.load(f)["model"]["layers"]
                  if layer["type"] in ("maxplus", "minplus")}
    ROWS.append((tag, epochs, lr, ",".join(f"{r:g}" for r in sorted(ranges)) or "—",
                 int(re.search(r" counted=(\d+) ", counted).group(1)), last, best))


def run(tag, cfg, epochs, lr, seed=1):
    out = os.path.join(WORK, tag)
    if os.path.exists(out + ".res"):
        with open(out + ".res") as f:
            res = f.read()
        print(res, end="", flush=True)
        summarise(tag, out, epochs, lr, res)
        return
    cfg = copy.deepcopy(cfg)
    steps = math.ceil(epochs * TRAIN_IMAGES / 64)
    cfg.setdefault("data", {})["test_at_end"] = False
    t = cfg["training"]
    t.update({"micro_batch_size": 64, "grad_accum_steps": 1, "steps": steps, "seed": seed, "threads": 1,
              "eval_interval": round(TRAIN_IMAGES / 64 / 2), "log_interval": steps, "lr": lr, "min_lr": lr / 100})
    t.pop("eval_batches", None)
    cfg["checkpoint"] = {"interval": 0, "keep_last": 0}
    with open(out + ".json", "w") as f:
        json.dump(cfg, f)
    subprocess.run(["rm", "-rf", out], check=True)
    t0 = time.time()
    with open(out + ".log", "w") as log:
        rc = subprocess.run(["nice", "-n", "5", FIVEFOLD, "train", "--config", out + ".json", "--out", out,
                             "--no-progress"], stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, OMP_NUM_THREADS="1")).returncode
    if rc:
        sys.exit(f"{tag}: fivefold train exited {rc} (see {out}.log)")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    curve = [(round(r["step"] * 64 / TRAIN_IMAGES, 2), round(r["val_accuracy"], 4)) for r in recs if r["type"] == "eval"]
    last, best = curve[-1][1], max(a for _, a in curve)
    res = f"{tag} epochs={epochs} lr={lr} secs={time.time() - t0:.0f} last={last} best={best} val={curve}\n"
    with open(out + ".res", "w") as f:
        f.write(res)
    print(res, end="", flush=True)
    summarise(tag, out, epochs, lr, res)


def with_layers(base, layers):
    cfg = load(base)
    cfg["model"]["layers"] = layers
    return cfg


def mixed_layers(c1, c2, hidden, tropical=True):
    """A conv 3x3 (c1 channels, padding 1), ReLU, max pool, standardize, then
    a tropical conv 5x5 (inner max, outer sum; c2 channels) or, for the conv
    twin, an ordinary conv 5x5 in its place, max pool, standardize, and
    linear layers (hidden: their widths) with ReLUs."""
    second = ({"type": "tropical_conv2d", "inner": "max", "outer": "sum", "out_channels": c2, "kernel": 5,
               "stride": 1, "padding": 0} if tropical else {"type": "conv2d", "out_channels": c2, "kernel": 5})
    layers = [{"type": "conv2d", "out_channels": c1, "kernel": 3, "padding": 1}, {"type": "relu"},
              {"type": "maxpool", "kernel": 2}, {"type": "standardize"}, second, {"type": "maxpool", "kernel": 2},
              {"type": "standardize"}]
    for h in hidden:
        layers += [{"type": "linear", "out": h, "bias": True}, {"type": "relu"}]
    return layers + [{"type": "linear", "out": 10, "bias": True}]


def mmp192_layers(tropical, init_range=None):
    """linear 784 -> 192, standardize, the tropical layers (kind, width),
    linear -> 10."""
    layers = [{"type": "linear", "out": 192, "bias": True}, {"type": "standardize"}]
    for kind, width in tropical:
        layer = {"type": kind, "out": width, "bias": True}
        if init_range is not None:
            layer["init_range"] = init_range
        layers.append(layer)
    return layers + [{"type": "linear", "out": 10, "bias": True}]


def search_mixed():
    """Round 1: sizes around 70-75k multiplications (LeNet-5 416,520) at
    10 epochs."""
    for c1, c2, hidden, lr in ((6, 24, [48], 0.003), (6, 24, [48], 0.01), (4, 32, [48], 0.003),
                               (6, 32, [32], 0.003)):
        tag = f"mixed-c{c1}-t{c2}-h{'-'.join(map(str, hidden))}-lr{lr}"
        run(tag, with_layers("tlenet5-std", mixed_layers(c1, c2, hidden)), 10, lr)
    # Round 2: round 1's best (6, 32, [32]) at lr 0.001.
    run("mixed-c6-t32-h32-lr0.001", with_layers("tlenet5-std", mixed_layers(6, 32, [32])), 10, 0.001)


def search_twin():
    """The conv twin of the chosen (6, 32, [32]), at the mixed net's lr and
    epochs: a check that it trains there (the time allowed no search of its own)."""
    run("twin-c6-c32-h32-lr0.003", with_layers("tlenet5-std", mixed_layers(6, 32, [32], False)), 10, 0.003)


def search_mmp192():
    """Round 1: one max-plus layer (or max-plus then min-plus) before a
    linear output of 128 inputs (152,192 multiplications, 25.1% fewer than
    mlp-relu.json's 203,264) at 10 epochs, init_range 1 and 0.1."""
    for tropical, init_range, lr in (([("maxplus", 128)], None, 0.005), ([("maxplus", 128)], 0.1, 0.005),
                                     ([("maxplus", 192), ("minplus", 128)], 0.1, 0.005)):
        kinds = "-".join(f"{k[:3]}{w}" for k, w in tropical)
        tag = f"mmp192-{kinds}-r{init_range or 1}-lr{lr}"
        run(tag, with_layers("mmp-norm", mmp192_layers(tropical, init_range)), 10, lr)
    # Round 2: one max-plus (or min-plus) layer of 128: the learning rate, init_range 0.3 and 3, 20 epochs.
    for tropical, init_range, lr, epochs in (([("maxplus", 128)], None, 0.002, 10), ([("maxplus", 128)], None, 0.01, 10),
                                             ([("maxplus", 128)], 0.3, 0.005, 10), ([("maxplus", 128)], 3.0, 0.005, 10),
                                             ([("minplus", 128)], None, 0.005, 10),
                                             ([("maxplus", 128)], None, 0.005, 20)):
        kinds = "-".join(f"{k[:3]}{w}" for k, w in tropical)
        tag = f"mmp192-{kinds}-r{init_range or 1}-lr{lr}" + ("" if epochs == 10 else f"-e{epochs}")
        run(tag, with_layers("mmp-norm", mmp192_layers(tropical, init_range)), epochs, lr)
    # Round 3: 20 epochs (round 2's 20-epoch run led): the learning rate, init_range, min-plus.
    for tropical, init_range, lr in (([("maxplus", 128)], 0.3, 0.005), ([("maxplus", 128)], 0.1, 0.005),
                                     ([("minplus", 128)], None, 0.005), ([("maxplus", 128)], None, 0.002),
                                     ([("maxplus", 128)], None, 0.01)):
        kinds = "-".join(f"{k[:3]}{w}" for k, w in tropical)
        run(f"mmp192-{kinds}-r{init_range or 1}-lr{lr}-e20", with_layers("mmp-norm", mmp192_layers(tropical, init_range)),
            20, lr)
    # Round 4: lr 0.01 (round 3's best) with init_range 0.1 and 3, and at 30 epochs.
    for init_range, epochs in ((0.1, 20), (3.0, 20), (None, 30)):
        run(f"mmp192-max128-r{init_range or 1}-lr0.01-e{epochs}",
            with_layers("mmp-norm", mmp192_layers([("maxplus", 128)], init_range)), epochs, 0.01)


def main():
    os.makedirs(WORK, exist_ok=True)
    groups = set(os.environ.get("SEARCH", "earlier,mixed,twin,mmp192").split(","))
    if "mixed" in groups:
        search_mixed()
    if "twin" in groups:
        search_twin()
    if "mmp192" in groups:
        search_mmp192()
    if "earlier" in groups:
        search_earlier()
    print("\n| run | multiplications / image | init_range | epochs | lr | last validation accuracy % | "
          "best validation accuracy % |")
    print("|---|---|---|---|---|---|---|")
    for tag, epochs, lr, init_range, mults, last, best in ROWS:
        print(f"| {tag} | {mults:,} | {init_range} | {epochs} | {lr} | {100 * last:.2f} | {100 * best:.2f} |")


def search_earlier():
    std_after_pool = []  # tlenet5 with a standardisation after each pooled tropical convolution
    for layer in load("tlenet5")["model"]["layers"]:
        std_after_pool.append(layer)
        if layer["type"] == "maxpool":
            std_after_pool.append({"type": "standardize"})
    wide = copy.deepcopy(load("mmp-norm")["model"]["layers"])
    wide[0]["out"] = wide[2]["out"] = 128
    for lr in (0.005, 0.002, 0.01):
        run(f"mmp-norm-lr{lr}", load("mmp-norm"), 10, lr)
    run("mmp-wide-lr0.005", with_layers("mmp-norm", wide), 10, 0.005)
    for lr in (0.003, 0.01):
        run(f"tlenet5-std-lr{lr}", with_layers("tlenet5", std_after_pool), 4, lr)
    run("tlenet5-lr0.001", load("tlenet5"), 4, 0.001)


if __name__ == "__main__":
    main()
