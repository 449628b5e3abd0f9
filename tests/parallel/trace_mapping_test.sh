#!/usr/bin/env bash
# `trace compare` prices a run on the devices its ranks ran on. A 4-layer
# dense model planned as PP4 for a spec of 2 nodes x 2 devices with a slow
# network between them (every pipeline transfer that crosses nodes costs
# 2 ms), trained on 4 ranks by `train --plan` with the mapping
# device_of_rank [0, 2, 1, 3] (each transfer crosses nodes) and traced:
#  - the trace records the plan and its mapping (otherData.plan);
#  - `trace compare` prints that mapping, and its predicted iteration and
#    per-kind means are those of `simulate --plan` on the same plan and spec
#    (its predicted timeline, --trace), to the printed microsecond;
#  - they differ from the rank-order plan's (one transfer crosses nodes),
#    whose own traced run compare prices as `simulate --plan` prices it;
#  - --plan FILE that agrees with the trace is accepted, one that does not
#    (rank order against the mapping, and the reverse) is refused naming
#    both; a trace without a plan takes --plan's mapping.
# usage: trace_mapping_test.sh FIVEFOLD MPIEXEC
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=mapping
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir trace-mapping

make_corpus
dense_json dense.json 4
run_json run-dense.json dense.json steps=2 interval=0 global_batch_size=8 micro_batch_size=2
two_node_pp4_plan || finish trace_mapping_test
# The same plan in rank order and with every pipeline transfer across
# nodes, pinned to 1F1B with its default warm-up (the figures of
# docs/tracing.md; the planner's own zero-bubble order, its order costs
# carried from plan to trainer, is trace_order_test.sh's).
$PY - <<'PY' || fail "writing the plans"
import json
p = json.load(open("plan.json"))
assert p["parallel"]["pp"] == 4, p["parallel"]
p["parallel"]["schedule"] = "1f1b"
p["parallel"].pop("warmup", None)
p.pop("mapping", None)
json.dump(p, open("plan-order.json", "w"))
p["mapping"] = {"device_of_rank": [0, 2, 1, 3], "method": "given"}
json.dump(p, open("plan-mapped.json", "w"))
PY

# predicted FILE: "iteration ms" and "KIND mean-ms" lines of a predicted
# timeline (simulate --trace), to the microsecond as trace compare prints.
predicted() {
  $PY - "$1" <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
print(f"iteration {(max(e['ts'] + e['dur'] for e in ev) - min(e['ts'] for e in ev)) / 1e3:.3f}")
kinds = {}
for e in ev:
    kinds.setdefault(e["cat"], []).append(e["dur"] / 1e3)
for k in sorted(kinds):
    print(f"{k} {sum(kinds[k]) / len(kinds[k]):.3f}")
PY
}
# compared FILE: the same lines from trace compare's output.
compared() {
  $PY - "$1" <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"^  (\S+) +\d+ +[0-9.]+ +([0-9.]+) ", line)
    if m:
        rows[m.group(1)] = m.group(2)
for k in ["iteration"] + sorted(k for k in rows if k != "iteration"):
    print(f"{k} {rows[k]}")
PY
}

for kind in mapped order; do
  train 4 "run-$kind" dense --plan "plan-$kind.json" --trace "$kind.trace.json" || continue
  "$FIVEFOLD" simulate --plan "plan-$kind.json" --model dense.json --cluster cluster.json --trace "pred-$kind.json" \
    --quiet >"sim-$kind.log" 2>&1 || { cat "sim-$kind.log"; fail "simulate --plan plan-$kind.json"; continue; }
  "$FIVEFOLD" trace compare "$kind.trace.json" --cluster cluster.json >"compare-$kind.txt" 2>&1 ||
    { cat "compare-$kind.txt"; fail "trace compare of the $kind run"; continue; }
  predicted "pred-$kind.json" >"want-$kind.txt"
  compared "compare-$kind.txt" >"got-$kind.txt"
  echo "$kind: simulate --plan: $(tr '\n' ' ' <"want-$kind.txt")"
  echo "$kind: trace compare:   $(tr '\n' ' ' <"got-$kind.txt")"
  grep '^device mapping' "compare-$kind.txt"
  grep -q '^program: the priced program is the traced one, action for action' "compare-$kind.txt" ||
    fail "$kind: trace compare did not price the traced program"
  cmp -s "want-$kind.txt" "got-$kind.txt" ||
    { cat "compare-$kind.txt"; fail "$kind: trace compare's prediction is not simulate --plan's"; }
done
$PY - <<'PY' || fail "the trace does not record the plan's mapping"
import json
plan = json.load(open("mapped.trace.json"))["otherData"]["plan"]
assert plan["file"] == "plan-mapped.json" and plan["cluster"] == "two-nodes", plan
assert plan["mapping"]["device_of_rank"] == [0, 2, 1, 3], plan
plan = json.load(open("order.trace.json"))["otherData"]["plan"]
assert "mapping" not in plan, plan
PY
grep -q '^device mapping: device of rank 0..3: 0 2 1 3, from the plan the run was trained with (plan-mapped.json' \
  compare-mapped.txt || fail "trace compare does not print the run's mapping"
grep -q '^device mapping: rank order' compare-order.txt || fail "trace compare does not say the run was in rank order"
# The mapping matters on this spec: priced in rank order the run is another prediction.
[ "$(head -1 want-mapped.txt)" != "$(head -1 want-order.txt)" ] ||
  fail "the mapped and the rank-order plans have the same prediction: the test proves nothing"

# --plan: the trace's own plan is accepted; another placement is refused naming both.
"$FIVEFOLD" trace compare mapped.trace.json --cluster cluster.json --plan plan-mapped.json >agree.txt 2>&1 ||
  { cat agree.txt; fail "--plan with the run's own plan refused"; }
grep -q 'plan-mapped.json agrees' agree.txt || { cat agree.txt; fail "--plan that agrees is not said"; }
expect_refusal() {
  if "$FIVEFOLD" trace compare "$1" --cluster cluster.json --plan "$2" >refused.txt 2>&1; then
    fail "$1 with --plan $2: a disagreeing mapping was accepted"
  elif ! grep -q "placed by plan $3" refused.txt || ! grep -q -- "--plan $2 maps them $4" refused.txt; then
    cat refused.txt
    fail "$1 with --plan $2: the refusal does not name both mappings"
  fi
}
expect_refusal mapped.trace.json plan-order.json "plan-mapped.json with device of rank 0..3: 0 2 1 3" "rank order"
expect_refusal order.trace.json plan-mapped.json "plan-order.json with device of rank 0..3: rank order" "0 2 1 3"
# A trace that records no plan (an older one) is priced with --plan's mapping.
$PY -c 'import json, sys; t = json.load(open(sys.argv[1])); del t["otherData"]["plan"]; json.dump(t, open(sys.argv[2], "w"))' \
  mapped.trace.json noplan.trace.json
"$FIVEFOLD" trace compare noplan.trace.json --cluster cluster.json --plan plan-mapped.json >noplan.txt 2>&1 ||
  { cat noplan.txt; fail "trace compare --plan of a trace without a plan"; }
compared noplan.txt >got-noplan.txt
cmp -s want-mapped.txt got-noplan.txt || { cat noplan.txt; fail "--plan's mapping was not priced"; }
grep -q 'from --plan plan-mapped.json (the trace records no plan)' noplan.txt || fail "the mapping's source is not said"
finish trace_mapping_test
