#!/usr/bin/env bash
# `fivefold trace record --ebpf -- fivefold train ...` on runs that were NOT
# started with --trace: every action and every operation of a training run
# reaches its USDT probe (trace/probes.h, base/usdt.h) whether or not the
# built-in recorder is on, so bpftrace sees the whole run.
#   one rank   (while another job runs the same binary, left out of the
#              trace) every action of the 1-rank program in each of the 3 steps
#              (compare-ready), GEMM operations with their shapes inside
#              every FWD and BWD (the same count in each), no operation
#              outside an action (the evaluation pass is left out), on-CPU
#              times, a critical path that spans each iteration;
#   PP2        the same under mpirun (--binary names the program), on both
#              ranks, with the pipeline's sends and receives paired; and
#              the DAG the analysis rebuilds from it has the same nodes and
#              edges as the one from a --trace recording of the same run.
# Skipped (77) only where ebpf_lib.sh's probe finds eBPF impossible.
# usage: ebpf_train_test.sh FIVEFOLD MPIEXEC
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/parallel/lib.sh
. "$here/../parallel/lib.sh"
# shellcheck source=tests/trace/ebpf_lib.sh
. "$here/ebpf_lib.sh"
ebpf_probe
work_dir ebpf-train

make_corpus
moe_json moe.json 2 4
# 4 micro-batches a step (8 sequences of 2), 3 steps, an evaluation at the end.
run_json run.json moe.json steps=3 global_batch_size=8 interval=0 keep_last=1

# record NAME PROGRAM [record options] -- COMMAND...: the eBPF recording
# NAME.json of COMMAND, the recorder's report in NAME.txt.
record() {
  local name=$1 prog=$2
  shift 2
  "$FIVEFOLD" trace record --ebpf --program "$prog" -o "$name.json" "$@" >"$name.txt" 2>&1 ||
    { cat "$name.txt"; fail "trace record --ebpf of $name"; return 1; }
  grep "^trace:\|^warning" "$name.txt"
  grep -q "with on-CPU times" "$name.txt" || fail "$name: no on-CPU times"
  ! grep -q "no partner\|never announced\|bpftrace lost" "$name.txt" || fail "$name: events lost or unpaired"
  "$FIVEFOLD" trace compare-ready "$name.json" >"$name.ready" 2>&1 || { cat "$name.ready"; fail "$name: incomplete"; }
  "$FIVEFOLD" trace analyze "$name.json" >"$name.analyze" 2>&1 || { cat "$name.analyze"; fail "$name: analyze"; }
  [ "$(grep -c '^iteration [0-2]: .*(100.00%' "$name.analyze")" = 3 ] ||
    { cat "$name.analyze"; fail "$name: not 3 iterations, each spanned by its critical path"; }
}

# check_ops NAME RANKS: the operations of the trace, checked in Python.
check_ops() {
  $PY - "$1.json" "$2" <<'PY' || fail "$1: the operations"
import collections, json, sys
d = json.load(open(sys.argv[1]))
ranks = int(sys.argv[2])
ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
acts = [e for e in ev if e["cat"] != "op"]
ops = [e for e in ev if e["cat"] == "op"]
assert {e["pid"] for e in acts} == set(range(ranks)), "actions not from every rank"
assert {e["pid"] for e in ops} == set(range(ranks)), "operations not from every rank"
eps = 0.002
def encloses(a, o):
    return a["pid"] == o["pid"] and a["ts"] - eps <= o["ts"] and o["ts"] + o["dur"] <= a["ts"] + a["dur"] + eps
per_action = collections.Counter()
for o in ops:
    outer = [a for a in acts if encloses(a, o) and a["cat"] in ("FWD", "BWD", "OPTIM", "SEND_ACT", "SEND_GRAD",
                                                               "GRAD_REDUCE")]
    assert outer, f"operation {o['name']} at {o['ts']} us on rank {o['pid']} lies in no action"
    if o["name"] == "gemm":
        a = min(outer, key=lambda a: a["dur"])
        assert all(o["args"].get(k, -1) > 0 for k in ("m", "n", "k")), f"a GEMM without its shape: {o}"
        per_action[(a["pid"], a["cat"], a["args"]["id"], a["args"]["iter"])] += 1
for cat in ("FWD", "BWD"):
    for rank in range(ranks):
        counts = {n for (r, c, _, _), n in per_action.items() if r == rank and c == cat}
        n_acts = sum(1 for a in acts if a["cat"] == cat and a["pid"] == rank)
        with_gemm = sum(1 for (r, c, _, _) in per_action if r == rank and c == cat)
        assert n_acts > 0 and with_gemm == n_acts, f"rank {rank}: {with_gemm} of {n_acts} {cat} actions hold GEMMs"
        assert len(counts) == 1, f"rank {rank}: {cat} actions hold different GEMM counts {sorted(counts)}"
print(f"{sys.argv[1]}: {len(acts)} actions, {len(ops)} operations on {ranks} rank(s), every one inside an action; "
      f"every FWD and BWD holds its GEMMs")
PY
}

# DAG nodes and edges of one iteration, times and colours aside (as in ebpf_test.sh).
structure() {
  grep -E -- '->|^ *n[0-9]+ \[' "$1" | sed -E -e 's/\\n.*//' -e 's/ *\[[^"]*$//' | sort
}

# One rank, no MPI, no --trace; all the while another job runs the same
# binary (a PP2 training under mpirun, started before the recording and
# still running after it), whose processes fire the same probes and must
# stay out of the trace.
"$FIVEFOLD" schedule --pp 1 --microbatches 4 --json prog1.json >/dev/null || fail "schedule --pp 1"
run_json decoy.json moe.json steps=100000 global_batch_size=8 interval=0 keep_last=1
"$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train --config decoy.json --pp 2 --out decoy --no-progress >decoy.log 2>&1 &
decoy=$!
BG_PID=$decoy # killed by the cleanup if the script ends first
for _ in $(seq 300); do grep -q "^step 1/" decoy.log 2>/dev/null && break; sleep 0.1; done
grep -q "^step 1/" decoy.log || { cat decoy.log; fail "the other job did not start"; }
record one prog1.json -- "$FIVEFOLD" train --config run.json --out one --no-progress
kill -0 "$decoy" 2>/dev/null || { tail -5 decoy.log; fail "the other job ended before the recording did"; }
kill "$decoy"
wait "$decoy" 2>/dev/null
BG_PID=
grep -q "^done: 3 steps" one.txt || { cat one.txt; fail "the recorded training run did not finish"; }
check_ops one 1

# PP2 under mpirun, no --trace; then the same run with --trace for the DAG.
"$FIVEFOLD" schedule --pp 2 --microbatches 4 --json prog2.json >/dev/null || fail "schedule --pp 2"
record pp2 prog2.json --binary "$FIVEFOLD" -- \
  "$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --pp 2 --out pp2 --no-progress
check_ops pp2 2
grep -q "on message edges" pp2.analyze || { cat pp2.analyze; fail "pp2: no message edge on any critical path"; }
"$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --pp 2 --out pp2-traced --no-progress \
  --trace recorder.json >recorder.log 2>&1 || { tail -20 recorder.log; fail "the --trace run"; }
for it in 0 1 2; do
  for src in pp2 recorder; do
    "$FIVEFOLD" trace analyze "$src.json" --iteration "$it" --dot "$src-$it.dot" >/dev/null 2>&1 ||
      fail "trace analyze --dot of $src, iteration $it"
  done
  [ "$(structure "pp2-$it.dot")" = "$(structure "recorder-$it.dot")" ] ||
    { diff <(structure "pp2-$it.dot") <(structure "recorder-$it.dot") | head; fail "iteration $it: the DAGs differ"; }
  [ "$(grep -c -- '->' "pp2-$it.dot")" -gt 0 ] || fail "iteration $it: no edges"
done
echo "pp2: the eBPF trace of the untraced run gives the DAG of the --trace recording (iterations 0 to 2)"

if [ "$failures" -gt 0 ]; then
  echo "ebpf_train_test: $failures failure(s)"
  exit 1
fi
echo "ebpf_train_test: all checks passed"
