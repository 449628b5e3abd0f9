#!/usr/bin/env bash
# The validation set is the config's, not the layout's: one config (eval
# windows from eval_batches 5 x micro_batch_size 2 = 10) evaluated on one
# rank and under DP2 with micro-batches of 4 (the last batch padded), TP2,
# PP2 with micro-batches of 1, and EP2 folded onto DP2 (MoE), before and
# after 2 steps of the same global batch: every evaluation covers 10
# windows and the same tokens, with the same loss: within 1e-6 relative
# before training (same weights), 1e-4 after (the golden rule's tolerance).
# --eval-windows sets the count explicitly. The banner announces the number
# of windows the eval lines use, under every layout.
# usage: eval_test.sh FIVEFOLD MPIEXEC
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=fixed-windows
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir eval-test

make_corpus
moe_json moe.json 2 4
run_json run-moe.json moe.json steps=2 eval_interval=1 eval_batches=5 global_batch_size=8 interval=0

# same_evals RUN REF: the eval records agree (windows and tokens exactly, the loss within 1e-5).
same_evals() {
  $PY - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY' || fail "$1: evaluations differ from $2"
import json, sys
def evals(p):
    return [r for r in map(json.loads, open(p)) if r.get("type") == "eval"]
a, b, want = evals(sys.argv[1]), evals(sys.argv[2]), int(sys.argv[3])
assert len(a) == len(b) == 3, f"{len(a)} and {len(b)} evaluations, expected 3"
for x, y in zip(a, b):
    assert x["windows"] == y["windows"] == want, f"windows {x['windows']} vs {y['windows']}, expected {want}"
    assert x["tokens"] == y["tokens"], f"step {x['step']}: tokens {x['tokens']} vs {y['tokens']}"
    # Before training the weights are identical: only the summation order may
    # differ. After it, the golden rule's 1e-4 of the trained weights applies.
    tol = 1e-6 if x["step"] == 0 else 1e-4
    rel = abs(x["val_loss"] - y["val_loss"]) / abs(y["val_loss"])
    assert rel <= tol, f"step {x['step']}: val_loss {x['val_loss']!r} vs {y['val_loss']!r} (relative {rel:.3g})"
print(f"{sys.argv[1]}: {len(a)} evaluations of {want} windows match")
PY
}

# banner_says LOG N: the banner announces the N windows the eval lines use.
banner_says() {
  grep -q "; $2 windows per evaluation" "$1.log" || { grep "per evaluation" "$1.log"; fail "$1: the banner does not announce $2 windows"; }
  grep -q "^eval step .* $2 windows," "$1.log" || fail "$1: no eval line of $2 windows"
}

train 0 one moe || exit 1
banner_says one 10
grep -q "^eval step 0/2 .* 10 windows, 160 tokens" one.log || { grep '^eval' one.log; fail "the eval line does not state 10 windows"; }
train 2 dp2 moe --micro-batch-size 4 && same_evals dp2 one 10 && banner_says dp2 10
train 2 tp2 moe --tp 2 && same_evals tp2 one 10
train 2 pp2 moe --pp 2 --micro-batch-size 1 && same_evals pp2 one 10 && banner_says pp2 10
train 2 dp2ep2 moe --ep 2 && same_evals dp2ep2 one 10
train 0 one-w7 moe --eval-windows 7 && train 2 dp2-w7 moe --eval-windows 7 --micro-batch-size 4 && same_evals dp2-w7 one-w7 7 && banner_says dp2-w7 7
finish eval_test
