#!/usr/bin/env bash
# The program priced is the program trained, for the order the planner
# chooses. A 4-layer dense model planned as PP4 for a spec of 2 nodes x 2
# devices with a slow network between them: the planner chooses zero-bubble
# H1 with warm-up depths other than 1F1B's and places the sends by priced
# forward/backward durations (parallel.order_fwd_cost / order_bwd_cost of
# the plan, not the scheduler's 1 and 2).
#  - the plan's costs matter: priced with 1 and 2 instead, the same plan is
#    another program (so a trainer that dropped them would run another);
#  - `train --plan` on 4 ranks runs (and traces, otherData.program) the
#    program `simulate --plan --program` priced, action for action;
#  - `trace compare` says so, and its predicted iteration and per-kind
#    means are those of `simulate --plan` (its predicted timeline), to the
#    printed microsecond; it builds with the order costs the trace records
#    (a copy that records 1 and 2 is priced as another program, and said);
#  - without a plan, `train` and `simulate` given the same schedule and
#    warm-up flags build one program too (both with the scheduler's costs).
# usage: trace_order_test.sh FIVEFOLD MPIEXEC
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=zb-h1
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir trace-order

make_corpus
dense_json dense.json 4
run_json run-dense.json dense.json steps=2 interval=0 global_batch_size=8 micro_batch_size=2
two_node_pp4_plan || finish trace_order_test
$PY - <<'PY' || fail "the plan is not the zero-bubble order this test is about"
import json
p = json.load(open("plan.json"))["parallel"]
print("plan:", p["schedule"], "warm-up", p.get("warmup"), "order costs", p.get("order_fwd_cost"), p.get("order_bwd_cost"))
assert p["pp"] == 4 and p["schedule"] == "zb-h1", p
assert p.get("warmup") and p["warmup"] != [3, 2, 1, 0], p
assert p["order_fwd_cost"] > 0 and p["order_bwd_cost"] > 0 and p["order_bwd_cost"] / p["order_fwd_cost"] != 2, p
p = json.load(open("plan.json"))
for k in ("order_fwd_cost", "order_bwd_cost"):
    p["parallel"].pop(k)
json.dump(p, open("plan-default-costs.json", "w"))
PY

# same_program A B: the action lists of two programs (JSON files, or a
# trace's otherData.program), field by field; prints where they differ.
same_program() {
  $PY - "$1" "$2" <<'PY'
import json, sys
def actions(path):
    j = json.load(open(path))
    if "traceEvents" in j:
        j = j["otherData"]["program"]
    return sorted((dict(a, rank=r["rank"]) for r in j["ranks"] for a in r["actions"]), key=lambda a: a["id"])
a, b = actions(sys.argv[1]), actions(sys.argv[2])
diff = [i for i in range(min(len(a), len(b))) if a[i] != b[i]]
if len(a) != len(b) or diff:
    print(f"{sys.argv[1]} and {sys.argv[2]}: {len(a)} and {len(b)} actions, {len(diff)} differ", end="")
    print(f" (ids {diff[:8]}; first {a[diff[0]]} against {b[diff[0]]})" if diff else "")
    sys.exit(1)
print(f"{sys.argv[1]} and {sys.argv[2]}: the same {len(a)} actions")
PY
}

"$FIVEFOLD" simulate --plan plan.json --model dense.json --cluster cluster.json --trace pred.json \
  --program priced.json --quiet >sim.log 2>&1 || { cat sim.log; fail "simulate --plan plan.json"; }
"$FIVEFOLD" simulate --plan plan-default-costs.json --model dense.json --cluster cluster.json \
  --program default-costs.json --quiet >sim-default.log 2>&1 ||
  { cat sim-default.log; fail "simulate --plan plan-default-costs.json"; }
if same_program priced.json default-costs.json >/dev/null; then
  fail "the plan's order costs do not change its program: the test proves nothing"
fi

if train 4 run dense --plan plan.json --trace run.trace.json; then
  same_program run.trace.json priced.json || fail "train --plan does not run the program simulate --plan priced"
  "$FIVEFOLD" trace compare run.trace.json --cluster cluster.json >compare.txt 2>&1 ||
    { cat compare.txt; fail "trace compare"; }
  grep -q '^program: the priced program is the traced one, action for action' compare.txt ||
    { cat compare.txt; fail "trace compare does not price the traced program"; }
  # The run's first step (iteration 0, one-time costs) is left out of the
  # measured means, and compared when asked for.
  grep -q "over every rank and iteration 1 (iteration 0, the run's first step, holds one-time costs and is left out" \
    compare.txt || { cat compare.txt; fail "trace compare's means include the run's first step"; }
  grep -q '^  iteration  *1 ' compare.txt || { cat compare.txt; fail "trace compare counted more than iteration 1"; }
  "$FIVEFOLD" trace compare run.trace.json --cluster cluster.json --iteration 0 >compare-0.txt 2>&1 ||
    { cat compare-0.txt; fail "trace compare --iteration 0"; }
  grep -q "over every rank and iteration 0 (a posted" compare-0.txt ||
    { cat compare-0.txt; fail "trace compare --iteration 0 does not compare the first step"; }
  # compare builds with the order costs the trace records: told the run
  # used 1 and 2, it prices another program, and says where it differs.
  $PY -c 'import json, sys; t = json.load(open(sys.argv[1])); c = t["otherData"]["program"]["config"]
c["order_fwd_cost"], c["order_bwd_cost"] = 1, 2; json.dump(t, open(sys.argv[2], "w"))' run.trace.json costs-2.trace.json
  "$FIVEFOLD" trace compare costs-2.trace.json --cluster cluster.json >compare-2.txt 2>&1 ||
    { cat compare-2.txt; fail "trace compare of the trace with other order costs"; }
  grep -q '^warning: the priced program differs from the traced one from id ' compare-2.txt ||
    { cat compare-2.txt; fail "trace compare does not build with the trace's order costs, or does not say a difference"; }
  # Per-kind means: trace compare's predicted column against simulate's timeline.
  $PY - pred.json compare.txt <<'PY' || fail "trace compare's prediction is not simulate --plan's"
import json, re, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
want = {"iteration": f"{(max(e['ts'] + e['dur'] for e in ev) - min(e['ts'] for e in ev)) / 1e3:.3f}"}
kinds = {}
for e in ev:
    kinds.setdefault(e["cat"], []).append(e["dur"] / 1e3)
for k, v in kinds.items():
    want[k] = f"{sum(v) / len(v):.3f}"
got = {}
for line in open(sys.argv[2]):
    m = re.match(r"^  (\S+) +\d+ +[0-9.]+ +([0-9.]+) ", line)
    if m:
        got[m.group(1)] = m.group(2)
print("simulate --plan:", " ".join(f"{k} {want[k]}" for k in sorted(want)))
print("trace compare:  ", " ".join(f"{k} {got.get(k)}" for k in sorted(want)))
sys.exit(0 if want == got else 1)
PY
fi

# Without a plan: the same flags, one program (the scheduler's order costs).
WARMUP=$($PY -c 'import json; print(",".join(map(str, json.load(open("plan.json"))["parallel"]["warmup"])))')
flags=(--pp 4 --schedule zb-h1 --warmup "$WARMUP" --layers-per-stage 1,1,1,1)
if train 4 run-flags dense "${flags[@]}" --trace flags.trace.json; then
  "$FIVEFOLD" simulate --model dense.json --cluster cluster.json --gpus 4 --seq 16 --global-batch 8 --dtype fp32 \
    --mbs 2 "${flags[@]}" --program flags.json --quiet >sim-flags.log 2>&1 ||
    { cat sim-flags.log; fail "simulate with the schedule flags"; }
  same_program flags.trace.json flags.json || fail "train and simulate without a plan build different programs"
  same_program flags.json default-costs.json ||
    fail "simulate without a plan does not build with the scheduler's costs"
fi
finish trace_order_test
