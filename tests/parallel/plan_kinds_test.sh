#!/usr/bin/env bash
# `fivefold train --plan` runs every kind of plan `fivefold plan` emits, or
# refuses it naming the field. A tiny dense model (4 blocks, hidden 32,
# untied) on 2 ranks, global batch 8 of 16 tokens, planned on dgx-h100:
#   emitted  plans the planner writes under options that steer it to each
#            part of its search: a pipeline with the order search (its
#            schedule, warm-up depths and refined partition), the same with
#            1 sequence per micro-batch (8 micro-batches), the fixed order,
#            data parallelism with the bucket search's size, a cap of 2
#            chunks per rank, the device mapping search, stage replication,
#            the explorer's run (its --out is the best uniform layout: a
#            plan file has no per-layer fields), selective recomputation
#            of the attention core planned for another runtime (refused:
#            fivefold's attention keeps nothing to recompute), full
#            recomputation (trained), and an MoE
#            model's plan (2 blocks of 4 experts);
#   values   every value of the fields the writer emits that the search did
#            not pick here, set on an emitted plan: each schedule (gpipe,
#            1f1b and zb-h1 with warm-up depths, interleaved with vpp 2,
#            also with warm-up depths 3,2 other than Megatron-Core's 4,2),
#            an uneven partition, a device permutation, TP2, ZeRO-1 DP2 with
#            a bucket size, widths 1,1, the MoE grid folded (TP2 attention,
#            EP2 experts), zb-h1 and warm-up depths over replicated stages
#            (refused), full recomputation (uniform 1, block 1, uniform
#            groups of 2: trained, training.recompute* in its config.json),
#            selective recomputation of layernorm,mlp (trained, its modules
#            in config.json), of the attention core, of moe and an unknown
#            method (refused), an fp32
#            and a bf16 price, another sequence length, and a plan for 4
#            GPUs (refused: its data parallelism does not fit the job).
# A run must take 2 steps with the plan's fields in its config.json (tp,
# pp, vpp, dp, ep, etp, schedule, layers, warm-up, widths, ZeRO-1, bucket
# size), its mapping in the placement line, and a note when the plan
# priced another precision or sequence length (fields the run config
# owns); a refusal must exit non-zero and name the field. Widths 2,1 on 3
# ranks train under `train --plan` in parallel.stagerep_resume.
# usage: plan_kinds_test.sh FIVEFOLD MPIEXEC
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=plan-kinds
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir plan-kinds

make_corpus
dense_json dense.json 4
moe_json moe.json 2 4
run_json run-dense.json dense.json steps=2 interval=0 global_batch_size=8
run_json run-moe.json moe.json steps=2 interval=0 global_batch_size=8

$PY - "$FIVEFOLD" "$MPIEXEC" <<'PYEOF' || fail "a plan kind"
import copy, json, os, subprocess, sys

fivefold, mpiexec = sys.argv[1], sys.argv[2]
base = ["plan", "--model", "dense.json", "--cluster", "dgx-h100", "--gpus", "2", "--seq", "16",
        "--global-batch", "8", "--top", "3"]
failures = []

def emit(name, *opts, model="dense"):
    out = f"plan-{name}.json"
    args = [a if a != "dense.json" else f"{model}.json" for a in base]
    r = subprocess.run([fivefold, *args, *opts, "--out", out], capture_output=True, text=True)
    if r.returncode:
        failures.append(f"plan {name} {' '.join(opts)} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        return None
    return json.load(open(out))

def write(name, plan):
    path = f"plan-{name}.json"
    json.dump(plan, open(path, "w"), indent=1)
    return path

def train(name, path, model="dense"):
    cmd = [mpiexec, "-np", "2", "--oversubscribe", fivefold, "train", "--config", f"run-{model}.json",
           "--plan", path, "--out", f"run-{name}", "--no-progress"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr

def runs(name, plan, path, model="dense"):
    rc, log = train(name, path, model)
    if rc:
        failures.append(f"{name}: train --plan failed (rc {rc}):\n{log[-3000:]}")
        return
    steps = [l for l in log.splitlines() if l.startswith("step ")]
    if len(steps) != 2:
        failures.append(f"{name}: {len(steps)} step lines, expected 2")
    got = json.load(open(f"run-{name}/config.json"))["parallel"]
    par = plan["parallel"]
    want = {"tp": par["tp"], "pp": par["pp"], "vpp": par["vpp"], "schedule": par["schedule"],
            "ep": par["ep"] if model == "moe" else 1, "etp": par["etp"] if model == "moe" else 1,
            "layers_per_stage": par["layers_per_stage"],
            "distributed_optimizer": 1 if par["distributed_optimizer"] else 0}
    if par.get("stage_widths"):
        want["stage_widths"] = par["stage_widths"]
    else:
        want["dp"] = par["dp"]
    if par.get("warmup"):
        want["warmup"] = par["warmup"]
    if "buckets" in plan and par["dp"] > 1:
        want["bucket_mb"] = plan["buckets"]["bucket_mb"]
    # Recomputation is a training field: full with the plan's method and count.
    tr = json.load(open(f"run-{name}/config.json"))["training"]
    rc_want = {"recompute": par.get("recompute", "none")}
    if rc_want["recompute"] == "full":
        rc_want["recompute_method"] = par.get("recompute_method", "uniform")
        rc_want["recompute_num_layers"] = par.get("recompute_num_layers", 1)
        if "recompute full" not in log:
            failures.append(f"{name}: the banner does not say the run recomputes")
    if rc_want["recompute"] == "selective":
        rc_want["recompute_modules"] = par["recompute_modules"].split(",")
        if "recompute selective " + par["recompute_modules"] not in log:
            failures.append(f"{name}: the banner does not say the run recomputes selectively")
    for k, v in rc_want.items():
        if tr.get(k) != v:
            failures.append(f"{name}: the plan's {k} {v!r} is not the run's ({tr.get(k)!r})")
    for k, v in want.items():
        g = got.get(k)
        same = abs(g - v) <= 1e-6 * abs(v) if isinstance(v, float) and isinstance(g, (int, float)) else g == v
        if not same:
            failures.append(f"{name}: the plan's {k} {v!r} is not the run's ({g!r})")
    perm = plan.get("mapping", {}).get("device_of_rank")
    if perm and perm != list(range(len(perm))) and "ranks renumbered by the plan's mapping" not in log:
        failures.append(f"{name}: the mapping {perm} was not applied:\n{log[-1500:]}")
    if plan.get("dtype", "bf16") != "fp32" and 'field "dtype"' not in log:
        failures.append(f"{name}: no note that the plan priced {plan.get('dtype')} and the run computes in fp32")
    if plan.get("seq_length", 16) != 16 and 'field "seq_length"' not in log:
        failures.append(f"{name}: no note that the plan was made for sequence length {plan['seq_length']}")
    if plan.get("dtype") == "fp32" and 'field "dtype"' in log:
        failures.append(f"{name}: a note on the dtype of an fp32 plan")
    print(f"{name}: ran {', '.join(f'{k} {v}' for k, v in want.items())}"
          + (f", mapping {perm}" if perm else ""))

def refused(name, path, *needles):
    rc, log = train(name, path)
    if rc == 0:
        failures.append(f"{name}: train --plan accepted it")
        return
    missing = [n for n in needles if n not in log]
    if missing:
        failures.append(f"{name}: the refusal does not name {missing}:\n{log[-2000:]}")
    else:
        line = next((l for l in log.splitlines() if needles[0] in l), "")
        print(f"{name}: refused: {line.strip()[:200]}")

def check(name, plan, model="dense"):
    """An emitted plan: trained, unless it recomputes the attention core selectively (what fivefold refuses)."""
    if plan is None:
        return
    path = f"plan-{name}.json"
    if plan["parallel"]["recompute"] == "selective" and "layernorm" not in plan["parallel"].get("recompute_modules", ""):
        refused(name, path, "parallel.recompute", "selective")
    else:
        runs(name, plan, path, model)

# Emitted by the planner.
pipe = emit("pipe", "--min-pp", "2", "--max-tp", "1", "--max-cp", "1")
check("pipe", pipe)
check("pipe-m8", emit("pipe-m8", "--min-pp", "2", "--max-tp", "1", "--max-cp", "1", "--mbs-list", "1"))
check("fixed", emit("fixed", "--min-pp", "2", "--max-tp", "1", "--mbs-list", "2", "--no-search-order",
                    "--no-refine-partition"))
dp = emit("dp", "--max-pp", "1", "--max-tp", "1", "--max-cp", "1", "--mbs-list", "2")
check("dp", dp)
check("vpp", emit("vpp", "--min-pp", "2", "--max-vpp", "2", "--mbs-list", "1"))
check("mapped", emit("mapped", "--min-pp", "2", "--max-tp", "1", "--map-devices"))
check("replicated", emit("replicated", "--replicate-stages", "--mbs-list", "2"))
check("explored", emit("explored", "--min-pp", "2", "--max-tp", "1", "--max-vpp", "1", "--explore", "sa",
                       "--explore-budget", "40"))
check("recompute", emit("recompute", "--runtime", "any", "--recompute-list", "selective", "--max-pp", "1"))
check("recompute-full", emit("recompute-full", "--recompute-list", "full", "--max-pp", "1"))
if dp is not None and dp["parallel"]["dp"] > 1 and "buckets" not in dp:
    failures.append("the data-parallel plan carries no bucket size")
if pipe is None or dp is None:
    print("\n".join(failures)); sys.exit(1)

# Every value the writer emits, set on an emitted plan.
def variant(src, **par):
    p = copy.deepcopy(src)
    p["parallel"].update(par)
    for k in [k for k, v in par.items() if v is None]:
        del p["parallel"][k]
    return p

moe = emit("moe", "--max-pp", "1", "--mbs-list", "2", model="moe")
check("moe", moe, "moe")
if moe is not None:
    # the MoE grid folded: attention TP2, experts EP2 on the same ranks
    folded = variant(moe, tp=2, cp=1, dp=1, pp=1, ep=2, etp=1, edp=1, micro_batch_size=2, microbatches=4,
                     schedule="none", layers_per_stage=[2])
    runs("moe-folded", folded, write("moe-folded", folded), "moe")

def pp2(mbs, **par):
    """pipe with micro-batches of mbs sequences, 2 blocks per stage, no warm-up or widths."""
    d = {"tp": 1, "cp": 1, "dp": 1, "pp": 2, "vpp": 1, "ep": 1, "etp": 1, "edp": 1, "micro_batch_size": mbs,
         "microbatches": 8 // mbs, "layers_per_stage": [2, 2], "warmup": None, "stage_widths": None}
    d.update(par)
    return variant(pipe, **d)

cases = [
    ("gpipe", pp2(2, schedule="gpipe")),
    ("1f1b", pp2(2, schedule="1f1b")),
    ("1f1b-warmup", pp2(1, schedule="1f1b", warmup=[1, 0])),
    ("zb-h1-warmup", pp2(1, schedule="zb-h1", warmup=[3, 1])),
    ("interleaved", pp2(1, schedule="interleaved", vpp=2, layers_per_stage=[1, 1, 1, 1])),
    ("interleaved-warmup", pp2(1, schedule="interleaved", vpp=2, layers_per_stage=[1, 1, 1, 1], warmup=[3, 2])),
    ("uneven", pp2(2, schedule="1f1b", layers_per_stage=[1, 3])),
    ("tp2", variant(dp, tp=2, dp=1, edp=1, etp=2, pp=1, micro_batch_size=2, microbatches=4, schedule="none",
                    layers_per_stage=[4], distributed_optimizer=False)),
    ("zero1", variant(dp, distributed_optimizer=True)),
    ("widths-1-1", pp2(2, schedule="1f1b", stage_widths=[1, 1])),
]
swap = pp2(2, schedule="1f1b")
swap["mapping"] = {"device_of_rank": [1, 0], "method": "exhaustive"}
cases.append(("swapped", swap))
fp32 = pp2(2, schedule="1f1b")
fp32["dtype"] = "fp32"
cases.append(("fp32", fp32))
seq32 = pp2(2, schedule="1f1b")
seq32["seq_length"] = 32
cases.append(("seq32", seq32))
zero1 = dict(cases)["zero1"]
zero1["buckets"] = dict(zero1.get("buckets", {}), bucket_mb=0.01)
for name, plan in cases:
    runs(name, plan, write(name, plan))

refused("widths-zb", write("widths-zb", pp2(2, schedule="zb-h1", stage_widths=[1, 1])),
        'parallel.schedule "zb-h1" with parallel.stage_widths [1, 1]')
refused("widths-warmup", write("widths-warmup", pp2(1, schedule="1f1b", stage_widths=[1, 1], warmup=[1, 0])),
        "parallel.warmup with parallel.stage_widths [1, 1]")
# A plan for another job size: the grid that does not fit is named.
dp4 = variant(dp, dp=4, edp=4, micro_batch_size=1, microbatches=2)
dp4["gpus"] = 4
refused("gpus4", write("gpus4", dp4), "parallel.dp (--dp) is 4 but the job has 2 rank(s)")
full = pp2(2, schedule="1f1b", recompute="full")
runs("full", full, write("full", full))
full_block = pp2(2, schedule="1f1b", recompute="full", recompute_method="block", recompute_num_layers=1)
runs("full-block", full_block, write("full-block", full_block))
full_groups = variant(dp, recompute="full", recompute_method="uniform", recompute_num_layers=2)
runs("full-groups", full_groups, write("full-groups", full_groups))
refused("selective", write("selective", pp2(2, schedule="1f1b", recompute="selective")), "parallel.recompute",
        "selective")
sel = pp2(2, schedule="1f1b", recompute="selective", recompute_modules="layernorm,mlp")
runs("selective-modules", sel, write("selective-modules", sel))
refused("selective-moe", write("selective-moe", pp2(2, schedule="1f1b", recompute="selective",
                                                    recompute_modules="layernorm,moe")),
        "parallel.recompute_modules", "layernorm,moe")
refused("bad-method", write("bad-method", variant(dp, recompute="full", recompute_method="blocks")),
        "parallel.recompute_method")
if failures:
    print("\n".join(failures))
    sys.exit(1)
PYEOF
finish plan_kinds_test
