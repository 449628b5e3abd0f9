#!/usr/bin/env bash
# bench_netns.sh: device mapping measured on the emulated two-host cluster
# (scripts/netns-cluster.sh; needs root), next to the simulator's prediction.
#
#   bench/bench_netns.sh [BUILD] [STEPS]
#   RATE=50mbit PASSES=2 bench/bench_netns.sh build 12
#
# 1. makes a cluster of two hosts (one core each, 2 ranks per host) whose
#    uplink runs at RATE;
# 2. calibrates it (`fivefold calibrate --quick` on 4 ranks under the
#    cluster's mpirun): a tiered spec of 2 nodes x 2 devices with the
#    measured shared-memory and uplink links, and the uplink measured
#    shared by a host's two ranks (topology.devices_per_nic, which the
#    simulator's shared-port model prices: src/plan/link_share.h);
# 3. plans PP x DP for a small dense model (hidden 64, 4 layers, vocabulary
#    256, sequence 128, global batch 32; `plan --min-pp 2 --max-pp 2`): the
#    planner's layout and its device mapping (the plan file), and a copy of
#    the plan in rank order;
# 4. trains each plan for STEPS steps on the cluster (`train --plan`, which
#    places the ranks by the mapping) in PASSES passes, interleaved, and
#    takes each plan's median ms_per_step of steps 3..STEPS, the lower of
#    the passes (other processes only add time);
# 5. prices each with `fivefold simulate --plan` on the calibrated spec.
# It prints the table (predicted, measured, error) and the settings; it
# never passes or fails on time. The cluster is removed at the end.
set -u
BUILD=${1:-build}
STEPS=${2:-12}
RATE=${RATE:-50mbit}
PASSES=${PASSES:-2}
HERE=$(cd "$(dirname "$0")/.." && pwd)
F=$(cd "$BUILD" && pwd)/fivefold
NETNS=$HERE/scripts/netns-cluster.sh
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
why=$("$NETNS" check) || { echo "bench_netns: cannot make the cluster here: $why"; exit 0; }
[ -x "$F" ] || { echo "bench_netns: no $F (build first)"; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-bench-netns-XXXXXX")
CLUSTER=b$(printf '%05d' $((($$ * 7 + RANDOM) % 100000)))
trap '"$NETNS" down "$CLUSTER"; [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
"$NETNS" up "$CLUSTER" "$RATE" || exit 1
run() { "$NETNS" mpirun "$CLUSTER" "$@"; }

for i in $(seq 1 400); do
  echo "Line $i: in the beginning was the word, and the evening and the morning were day $i of $((i * 7 % 31))."
done >text.txt
"$F" tokenize --byte-level --input text.txt --out shards --val-fraction 0.1 >/dev/null || exit 1
cat >model.json <<'EOF'
{"model_type": "fivefold", "vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}
EOF
cat >run.json <<EOF
{"model": "model.json",
 "training": {"seq_len": 128, "steps": $STEPS, "lr": 0.001, "warmup_steps": 2, "log_interval": 1,
              "eval_interval": 0, "threads": 1, "peak_gflops": 50},
 "data": {"train": "shards/train.bin", "val": "shards/val.bin"},
 "checkpoint": {"interval": 0, "keep_last": 1}}
EOF

echo "== calibrating the cluster (uplink $RATE)"
run -np 4 "$F" calibrate --quick --out spec.json >calibrate.log 2>&1 || { cat calibrate.log; exit 1; }
sed -n '/intra-node/,/runtime/p' calibrate.log | grep -v runtime

echo "== planning PP x DP on it"
"$F" plan --model model.json --cluster spec.json --gpus 4 --seq 128 --global-batch 32 --dtype fp32 --min-pp 2 \
  --max-pp 2 --max-tp 1 --mbs-list 4 --top 3 --out plan-mapped.json >plan.log 2>&1 || { cat plan.log; exit 1; }
grep -E "^ +1 |device mapping|device of rank" plan.log
$PY - <<'PY'
import json
p = json.load(open("plan-mapped.json"))
q = dict(p)
n = p["gpus"]
q["mapping"] = {"device_of_rank": list(range(n)), "method": "rank order"}
json.dump(q, open("plan-order.json", "w"), indent=1)
if "mapping" not in p:
    p["mapping"] = {"device_of_rank": list(range(n)), "method": "rank order (the planner kept it)"}
    json.dump(p, open("plan-mapped.json", "w"), indent=1)
PY

median_ms() { # LOG: the median ms_per_step of the steps after warm-up (from metrics.jsonl)
  $PY - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ms = [r["ms_per_step"] for r in rows if r.get("type", "train") == "train" and "ms_per_step" in r and r.get("step", 0) >= 3]
print(f"{statistics.median(ms):.1f}" if ms else "nan")
PY
}

declare -A best passes
for pass in $(seq 1 "$PASSES"); do
  for which in order mapped; do
    out=run-$which-$pass
    run -np 4 "$F" train --config run.json --plan "plan-$which.json" --out "$out" --no-progress >"$out.log" 2>&1 ||
      { tail -20 "$out.log"; exit 1; }
    ms=$(median_ms "$out/metrics.jsonl")
    passes[$which]="${passes[$which]:-}${passes[$which]:+ / }$ms"
    if [ -z "${best[$which]:-}" ] || $PY -c "import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))" "$ms" "${best[$which]}"; then
      best[$which]=$ms
    fi
  done
done
grep '^placement' run-mapped-1.log

echo
echo "uplink $RATE; 2 hosts x 1 core, 2 ranks per host (1 thread each); model hidden 64, 4 layers, vocabulary 256;"
echo "sequence 128, global batch 32; median ms/step of steps 3..$STEPS, lower of $PASSES passes"
echo
echo "| mapping | device of rank 0..3 | predicted | measured | error | passes (ms) |"
echo "|---|---|---|---|---|---|"
for which in order mapped; do
  pred=$("$F" simulate --plan "plan-$which.json" --cluster spec.json --model model.json --quiet 2>&1 |
    sed -n 's/.*step \([0-9.]*\) ms.*/\1/p' | head -1)
  [ -n "$pred" ] || pred=$("$F" simulate --plan "plan-$which.json" --cluster spec.json --model model.json --quiet 2>&1 | head -3)
  map=$($PY -c 'import json, sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["mapping"]["device_of_rank"])))' "plan-$which.json")
  $PY - "$which" "$map" "$pred" "${best[$which]}" "${passes[$which]}" <<'PY'
import sys
which, m, pred, meas, passes = sys.argv[1:]
try:
    p, x = float(pred), float(meas)
    print(f"| {'rank order' if which == 'order' else 'planner'} | {m} | {p:.0f} ms | {x:.0f} ms | {100 * (p - x) / x:+.1f}% | {passes} |")
except ValueError:
    print(f"| {which} | {m} | {pred} | {meas} | ? | {passes} |")
PY
done
