"""The learning-rate search behind configs/vision/tlenet5-std.json and
mmp-wide.json (docs/tropical.md, "Choices made on validation"): short runs
of candidate networks and learning rates, seed 1, 1 thread, cosine decay to
lr / 100 over the run, the validation accuracy (the 5,000 images held out
of the training file; the test set is never evaluated) twice per epoch.
Figures only.

  python3 bench/tropical/lr_search.py FIVEFOLD WORK_DIR

Prints one line per run: tag, epochs, lr, seconds and the validation curve
as (epoch, accuracy) pairs; finished runs in WORK_DIR are reused.
"""
import copy
import json
import math
import os
import subprocess
import sys
import time

FIVEFOLD, WORK = sys.argv[1:3]
CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "vision")
TRAIN_IMAGES = 55000


def load(name):
    with open(os.path.join(CONFIGS, name + ".json")) as f:
        return json.load(f)


def run(tag, cfg, epochs, lr, seed=1):
    out = os.path.join(WORK, tag)
    if os.path.exists(out + ".res"):
        with open(out + ".res") as f:
            print(f.read(), end="", flush=True)
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
    res = f"{tag} epochs={epochs} lr={lr} secs={time.time() - t0:.0f} val={curve}\n"
    with open(out + ".res", "w") as f:
        f.write(res)
    print(res, end="", flush=True)


def with_layers(base, layers):
    cfg = load(base)
    cfg["model"]["layers"] = layers
    return cfg


def main():
    os.makedirs(WORK, exist_ok=True)
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
