#!/usr/bin/env bash
# The MLP with "param_groups": 2 (nets/mlp.h: its layers in two groups,
# each stepped in a phase of its own) through `fivefold train`: the run's
# program (in its trace) has two phases, whose OPTIM actions name groups 0
# and 1 and whose reductions name their own group only; a run resumed from
# its step-3 checkpoint ends bit for bit where it did; 2 data-parallel ranks,
# plain and ZeRO-1 with buckets small enough that both groups have several,
# train the same model as one rank (tests/parallel: compare_runs.py).
# Usage: mlp_groups_test.sh path/to/fivefold path/to/mpiexec
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=mlp-groups
. "$(dirname "$0")/../parallel/lib.sh"
. "$(dirname "$0")/net_runs.sh"
work_dir mlp-groups

cat >run-mlp2.json <<'JSON'
{"model": {"family": "mlp", "inputs": 12, "hidden": [24, 16], "classes": 3, "param_groups": 2},
 "training": {"micro_batch_size": 4, "grad_accum_steps": 4, "steps": 6, "lr": 0.02, "warmup_steps": 2,
              "weight_decay": 0.05, "grad_clip": 1.0, "seed": 11, "log_interval": 1, "eval_interval": 3,
              "eval_batches": 4},
 "checkpoint": {"interval": 3, "keep_last": 0}}
JSON

train 0 one mlp2 --trace one.trace.json || exit 1
grep -q "in 2 parameter groups stepped in turn" one.log || fail "the banner does not name the parameter groups"
$PY - one.trace.json <<'PY' || fail "the program does not have one phase per parameter group"
import json, sys
prog = json.load(open(sys.argv[1]))["otherData"]["program"]
assert prog["config"].get("param_groups") == 2, prog["config"]
acts = prog["ranks"][0]["actions"]
optims = [a.get("group") for a in acts if a["kind"] == "OPTIM"]
assert optims == [0, 1], f"OPTIM groups {optims}"
phase = 0
for a in acts:  # every action names the group of its phase, phases in order
    assert a.get("group") == phase, f"{a} in phase {phase}"
    if a["kind"] == "OPTIM":
        phase += 1
reduces = [a.get("group") for a in acts if a["kind"] == "GRAD_REDUCE"]
assert reduces == [0, 1], f"GRAD_REDUCE groups {reduces}"
PY
traced_every_action one.trace.json 6

# Resume from step 3 in a fresh directory: bit for bit the same end.
resumed_matches one 3 6 mlp2 || exit 1

# Data parallel, plain and ZeRO-1, against one rank (same global batch of 16).
train 2 dp2 mlp2 --grad-accum 2 && same dp2 one 6
train 2 zero2 mlp2 --grad-accum 2 --distributed-optimizer 1 --bucket-mb 0.0004 && same zero2 one 6
grep -Eq "parallel dp 2 \(mpi ranks\), ([4-9]|[1-9][0-9]+) gradient bucket" zero2.log ||
  fail "the ZeRO-1 run does not have several buckets per group"
finish mlp_groups_test
