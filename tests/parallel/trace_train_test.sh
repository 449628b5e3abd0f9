#!/usr/bin/env bash
# Tracing and plan files wired into `fivefold train` (docs/tracing.md):
#
# usage: trace_train_test.sh FIVEFOLD MPIEXEC CHECKER MODE
#   (CHECKER: tests/tools/trace_mpi_pipeline, whose `check` mode derives the
#    DAG's edges from the program independently of the analyzer)
#   same-1     one rank without MPI: the run with --trace has bit-identical
#              per-step losses (metrics.jsonl records minus timings) and
#              byte-identical final checkpoint tensors to the run without;
#              the trace carries the run and model configurations
#   same-pp    the same on PP2 (1F1B) x DP2 on 4 ranks (MoE model)
#   dag        the trace of that PP2 x DP2 1F1B run: `trace analyze` reports
#              the critical path and bubbles, its DOT is accepted by `dot`,
#              and every iteration's DAG has exactly the edges the program
#              implies (CHECKER check --reduce-group dp)
#   steps      --trace-steps 1:2 records exactly iterations 1 and 2 (and the
#              "trace" config section does the same); a window outside the
#              run, or steps without a path, are refused with a message
#   plan       `fivefold plan --out` on the tiny model for 2 GPUs, then
#              `train --plan` under mpirun takes its layout (flags still
#              override it); bad plan files are refused naming the problem
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
CHECKER=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
MODE=$4
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/parallel/lib.sh
. "$HERE/lib.sh"
work_dir trace-train

make_corpus
moe_json moe.json 4 4
run_json run-moe.json moe.json steps=4 global_batch_size=16 interval=0 keep_last=1
# The per-step records without their timings, and the final tensors, byte for byte.
identical() {
  local a=$1 b=$2
  $PY - "$a/metrics.jsonl" "$b/metrics.jsonl" <<'PY' || fail "$a and $b: per-step records differ"
import json, sys
# what the run computes; everything else in a record is a timing
KEEP = {"type", "step", "loss", "lm", "aux", "z", "lr", "grad_norm", "moe_imbalance", "val_loss", "tokens"}
def records(p):
    return [{k: v for k, v in json.loads(line).items() if k in KEEP} for line in open(p)]
ra, rb = records(sys.argv[1]), records(sys.argv[2])
steps = [r for r in ra if r.get("type") == "train"]
assert len(steps) == 4, f"{len(steps)} step records, expected 4"
for x, y in zip(ra, rb):
    assert x == y, f"{x} != {y}"
assert len(ra) == len(rb)
PY
  local ca cb
  ca=$(ls -d "$a"/checkpoints/step-* | tail -1)
  cb=$(ls -d "$b"/checkpoints/step-* | tail -1)
  [ "$(basename "$ca")" = "$(basename "$cb")" ] || fail "$a and $b end at different checkpoints"
  for f in "$ca"/*.safetensors; do
    cmp -s "$f" "$cb/$(basename "$f")" || fail "$(basename "$f") of $a and $b differ"
  done
  [ -n "$(ls "$ca"/*.safetensors 2>/dev/null)" ] || fail "$ca holds no tensors"
}
# trace_meta FILE: the run and model configurations are in otherData.
trace_meta() {
  $PY - "$1" <<'PY' || fail "$1: metadata"
import json, sys
t = json.load(open(sys.argv[1]))
od = t["otherData"]
assert od["config"]["training"]["seq_len"] == 16, od.get("config")
assert od["config"]["training"]["micro_batch_size"] == 2
assert od["model"]["hidden_size"] == 32, od.get("model")
assert any(e.get("ph") == "X" for e in t["traceEvents"]), "no spans"
PY
}
# iterations FILE: the iteration numbers the trace's spans carry.
iterations() {
  $PY - "$1" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
its = sorted({e["args"]["iter"] for e in t["traceEvents"] if e.get("ph") == "X" and "iter" in e.get("args", {})})
print(",".join(map(str, its)))
PY
}

# The results above were bit-identical with the operations inside the
# layers recorded too: the trace holds GEMMs and attention on every rank.
has_ops() {
  $PY - "$1" <<'PY' || fail "$1: no operation events"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "op"]
for pid in {e["pid"] for e in ev if e.get("ph") == "X"}:
    names = {o["name"] for o in ops if o["pid"] == pid}
    assert {"gemm", "attn_fwd", "attn_bwd"} <= names, f"rank {pid}: op kinds {sorted(names)}"
PY
}
case "$MODE" in
  same-1)
    train 0 plain moe || exit 1
    train 0 traced moe --trace traced.trace.json || exit 1
    identical traced plain
    [ -s traced.trace.json ] || fail "one rank without MPI wrote no trace"
    trace_meta traced.trace.json
    grep -q "trace: traced.trace.json" traced.log || fail "the run does not say where the trace went"
    has_ops traced.trace.json
    ;;
  same-pp)
    train 4 plain moe --pp 2 || exit 1
    train 4 traced moe --pp 2 --trace traced.trace.json || exit 1
    identical traced plain
    trace_meta traced.trace.json
    has_ops traced.trace.json
    ;;
  dag)
    train 4 traced moe --pp 2 --trace-steps 1:3 --trace traced.trace.json || exit 1
    trace_meta traced.trace.json
    "$FIVEFOLD" trace analyze traced.trace.json --dot dag.dot >analyze.txt 2>&1 || { cat analyze.txt; fail "trace analyze"; }
    grep -qi "critical path" analyze.txt || { cat analyze.txt; fail "analyze reports no critical path"; }
    grep -qi "bubble" analyze.txt || { cat analyze.txt; fail "analyze reports no bubbles"; }
    if command -v dot >/dev/null; then
      dot -Tsvg dag.dot >dag.svg 2>dot.err || { cat dot.err; fail "dot rejects the DAG"; }
    else
      echo "SKIP (missing dependency: graphviz): dot is not installed; the DAG was not rendered"
    fi
    # 2 pipeline ranks x dp 2, 4 micro-batches per replica per step (16 / (2 x 2)).
    "$CHECKER" check traced.trace.json --pp 2 --microbatches 4 --reduce-group dp >check.txt 2>&1 ||
      { cat check.txt; fail "the DAG of the traced training run"; }
    grep -E '^(iteration [0-9]+: the DAG|FAIL|all checks)' check.txt
    ;;
  steps)
    train 0 window moe --trace w.json --trace-steps 1:2 || exit 1
    [ "$(iterations w.json)" = "1,2" ] || fail "--trace-steps 1:2 recorded iterations $(iterations w.json)"
    train 0 all moe --trace a.json || exit 1
    [ "$(iterations a.json)" = "0,1,2,3" ] || fail "the whole run recorded iterations $(iterations a.json)"
    $PY - <<'PY'
import json
c = json.load(open("run-moe.json"))
c["trace"] = {"path": "section.json", "steps": "3"}
json.dump(c, open("run-trace.json", "w"))
PY
    "$FIVEFOLD" train --config run-trace.json --out section --no-progress >section.log 2>&1 || { tail section.log; fail "trace section"; }
    [ "$(iterations section.json)" = "3" ] || fail "trace.steps \"3\" recorded iterations $(iterations section.json)"
    "$FIVEFOLD" train --config run-moe.json --out bad --trace bad.json --trace-steps 7:9 >bad.log 2>&1 &&
      fail "a window past the run was accepted"
    grep -q "never reached" bad.log || { cat bad.log; fail "no clear message for a window past the run"; }
    "$FIVEFOLD" train --config run-moe.json --out bad --trace-steps 1:2 >bad2.log 2>&1 && fail "steps without a path accepted"
    grep -q "without trace.path" bad2.log || { cat bad2.log; fail "no clear message for steps without a path"; }
    "$FIVEFOLD" train --config run-moe.json --out bad --trace x.json --trace-steps 2:1 >bad3.log 2>&1 && fail "window 2:1 accepted"
    grep -qi "trace" bad3.log || { cat bad3.log; fail "no message for window 2:1"; }
    ;;
  plan)
    cat >cluster.json <<'JSON'
{"name": "tiny", "gpus_per_node": 2, "nodes": 1}
JSON
    # the planner's model: the tiny MoE; the plan is made for 2 GPUs, pipeline only
    if ! "$FIVEFOLD" plan --model moe.json --cluster "$HERE/../../configs/clusters/dgx-h100.json" --gpus 2 --seq 16 \
      --global-batch 16 --max-tp 1 --max-ep 1 --max-etp 1 --max-cp 1 --recompute-list none --mbs-list 2 \
      --out plan.json >plan.log 2>&1; then
      cat plan.log
      fail "fivefold plan"
    else
      $PY - <<'PY' || fail "rewriting the plan"
import json
p = json.load(open("plan.json"))
par = p["parallel"]
# pin a pipeline layout, so the run under mpirun has something to show
par.update({"tp": 1, "cp": 1, "ep": 1, "etp": 1, "pp": 2, "vpp": 1, "dp": 1, "edp": 1, "micro_batch_size": 2,
            "global_batch_size": 16, "microbatches": 8, "schedule": "1f1b", "recompute": "none",
            "distributed_optimizer": False, "layers_per_stage": [1, 3]})
json.dump(p, open("plan-pp2.json", "w"))
q = json.loads(json.dumps(p)); q["parallel"]["ep"] = 2; q["parallel"]["edp"] = 1; q["parallel"]["dp"] = 1
q["parallel"].update({"pp": 1, "layers_per_stage": [4], "tp": 2, "etp": 1, "schedule": "none"})
json.dump(q, open("plan-ep.json", "w"))
r = json.loads(json.dumps(p)); r["parallel"]["recompute"] = "full"
json.dump(r, open("plan-recompute.json", "w"))
PY
      train 2 planned moe --plan plan-pp2.json || true
      grep -q "pp 2" planned.log || { cat planned.log; fail "the plan's pp 2 was not applied"; }
      grep -q "1,3" planned.log || fail "the plan's layers_per_stage 1,3 was not applied"
      train 0 one moe || true
      $PY "$COMPARE" losses planned one 1e-4 || fail "the planned PP2 run differs from one rank"
      # a folded plan: attention TP2, MoE EP2 on the same 2 ranks
      train 2 planned_ep moe --plan plan-ep.json || true
      grep -q "ep 2" planned_ep.log || { cat planned_ep.log; fail "the plan's ep 2 was not applied"; }
      $PY "$COMPARE" losses planned_ep one 1e-4 || fail "the planned TP2 + EP2 run differs from one rank"
      # an explicit flag wins over the plan
      train 2 override moe --plan plan-pp2.json --layers-per-stage 2,2 || true
      grep -q "2,2" override.log || fail "--layers-per-stage did not override the plan"
      "$FIVEFOLD" train --config run-moe.json --out x --plan plan-recompute.json >rc.log 2>&1 && fail "recompute accepted"
      grep -q "recompute" rc.log || { cat rc.log; fail "no message naming recompute"; }
    fi
    echo '{"format": "fivefold.plan", "version": 1}' >broken.json
    "$FIVEFOLD" train --config run-moe.json --out x --plan broken.json >b1.log 2>&1 && fail "a plan without parallel accepted"
    grep -q "broken.json" b1.log || { cat b1.log; fail "no message naming the bad plan"; }
    "$FIVEFOLD" train --config run-moe.json --out x --plan missing.json >b2.log 2>&1 && fail "a missing plan accepted"
    grep -q "missing.json" b2.log || { cat b2.log; fail "no message naming the missing plan"; }
    echo 'not json' >garbage.json
    "$FIVEFOLD" train --config run-moe.json --out x --plan garbage.json >b3.log 2>&1 && fail "a non-JSON plan accepted"
    grep -q "garbage.json" b3.log || { cat b3.log; fail "no message naming the non-JSON plan"; }
    ;;
  *)
    echo "unknown mode $MODE"
    exit 2
    ;;
esac
finish trace_train_test
