#!/usr/bin/env bash
# `fivefold trace record --ebpf` end to end: bpftrace attached to the USDT
# probes of trace_pipeline (a 1F1B run, pp 4, 8 micro-batches, a 20 ms delay
# injected into rank 2's forward of micro-batch 3 in iteration 1) while the
# built-in recorder records the same run. Checks that the eBPF trace is
# complete and analyzable, finds the injected straggler, carries on-CPU
# times, and agrees with the recorder on every forward and backward.
# Exits 77 (skipped) only where eBPF tracing is not possible at all, which
# ebpf_lib.sh's probe decides first (not root, no bpftrace, bpf() refused);
# after the probe any failure of the recording is a failure. One retry is
# allowed, and printed, when the recording reported lost events (bpftrace's
# own count, or begins without ends) and the trace came out incomplete (a loaded machine can overrun its buffers).
# usage: ebpf_test.sh TRACE_CLI TRACE_PIPELINE
set -u
cli=$1
pipeline=$2
# shellcheck source=tests/trace/ebpf_lib.sh
. "$(dirname "$0")/ebpf_lib.sh"
ebpf_probe

tmp=$(mktemp -d)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$pipeline" --pp 4 --microbatches 8 --iterations 1 --fwd-ms 0.1 --bwd-ms 0.1 --no-record \
  --program-out "$tmp/prog.json" || fail "trace_pipeline could not write the program"

record() {
  "$cli" trace record --ebpf --program "$tmp/prog.json" -o "$tmp/ebpf.json" -- \
    "$pipeline" --pp 4 --microbatches 8 --iterations 2 --fwd-ms 2 --bwd-ms 4 --delay 2:3:1:20 \
    --trace-out "$tmp/recorder.json" >"$tmp/record.txt" 2>&1 || { cat "$tmp/record.txt"; fail "trace record --ebpf failed"; }
}
record
if ! "$cli" trace compare-ready "$tmp/ebpf.json" >"$tmp/ready.txt" 2>&1; then
  cat "$tmp/record.txt" "$tmp/ready.txt"
  grep -q "bpftrace lost\|had no partner" "$tmp/record.txt" ||
    fail "the eBPF trace is incomplete although bpftrace lost no events"
  echo "RETRY: trace.ebpf: events were lost (see the warnings above) and the trace is incomplete; recording once more"
  record
fi
cat "$tmp/record.txt"
grep -q "with on-CPU times" "$tmp/record.txt" || fail "no sched_switch events (no on-CPU times)"

"$cli" trace analyze "$tmp/ebpf.json" >"$tmp/analyze.txt" || { cat "$tmp/analyze.txt"; fail "analyze failed"; }
cat "$tmp/analyze.txt"
grep -q "^iteration 1: .*(100.00%" "$tmp/analyze.txt" || fail "critical path of iteration 1 does not span it"
# The delayed forward (2 + 20 ms) is on the critical path of iteration 1.
# (Naming the straggler is tested under controlled conditions by
# trace.pipeline; here the machine's load may add its own.)
"$cli" trace analyze "$tmp/ebpf.json" --iteration 1 --all-path >"$tmp/iteration1.txt" || fail "analyze --iteration 1"
awk '$3 == "rank" && $4 == 2 && $5 == "F3" && $6 == "ran" && $7 + 0 >= 22.0 { found = 1 } END { exit !found }' \
  "$tmp/iteration1.txt" || fail "the delayed F3 of rank 2 is not on the critical path"
grep -q "on-CPU mean" "$tmp/analyze.txt" || fail "no on-CPU column"
"$cli" trace compare-ready "$tmp/ebpf.json" || fail "the eBPF trace is not complete"

# Forwards and backwards as seen by the probes and by the recorder.
/usr/bin/python3 - "$tmp/ebpf.json" "$tmp/recorder.json" <<'EOF' || fail "eBPF and recorder disagree"
import json, sys
def durations(path):
    out = {}
    for e in json.load(open(path))["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("FWD", "BWD"):
            out[(e["pid"], e["args"]["id"], e["args"]["iter"])] = e["dur"]
    return out
a, b = durations(sys.argv[1]), durations(sys.argv[2])
assert len(a) == len(b) == 2 * 4 * 8 * 2, (len(a), len(b))
diffs = sorted(abs(a[k] - b[k]) for k in a)
p95 = diffs[int(0.95 * (len(diffs) - 1))]
print("FWD/BWD difference between eBPF and the recorder: median %.1f us, 95th percentile %.1f us, largest %.1f us"
      % (diffs[len(diffs) // 2], p95, diffs[-1]))
assert p95 < 500, p95
EOF
# The same DAG from both: the nodes and edges the analysis rebuilds for each
# iteration (times and critical-path colours aside).
structure() {
  grep -E -- '->|^ *n[0-9]+ \[' "$1" | sed -E -e 's/\\n.*//' -e 's/ *\[[^"]*$//' | sort
}
for it in 0 1; do
  for src in ebpf recorder; do
    "$cli" trace analyze "$tmp/$src.json" --iteration "$it" --dot "$tmp/$src-$it.dot" >/dev/null 2>&1 ||
      fail "trace analyze of the $src trace, iteration $it"
  done
  [ "$(structure "$tmp/ebpf-$it.dot")" = "$(structure "$tmp/recorder-$it.dot")" ] ||
    fail "iteration $it: the eBPF trace's DAG differs from the recorder's"
  [ "$(grep -c -- '->' "$tmp/ebpf-$it.dot")" -gt 0 ] || fail "iteration $it: no edges"
done
echo "the same DAG from both traces (nodes and edges of iterations 0 and 1)"

# On-CPU time is part of the wall time of the action it belongs to.
/usr/bin/python3 - "$tmp/ebpf.json" <<'EOF' || fail "an action has more on-CPU time than wall time"
import json, sys
n = 0
for e in json.load(open(sys.argv[1]))["traceEvents"]:
    if e.get("ph") == "X" and "oncpu_us" in e.get("args", {}):
        n += 1
        assert e["args"]["oncpu_us"] <= e["dur"] + 0.002, e
assert n > 0, "no action carries an on-CPU time"
print("on-CPU <= wall for all %d actions that carry it" % n)
EOF
echo "ebpf_test: all checks passed"
