#!/usr/bin/env bash
# fivefold across a real network: the emulated two-host cluster of
# scripts/netns-cluster.sh (two network namespaces, shared memory inside a
# host, Open MPI's TCP transport over a tbf-limited uplink between them),
# 4 ranks, 2 per host. Each mode makes its own cluster under a unique name
# and removes it when it ends (trap), whatever happens.
#   golden     PP2 x DP2 of the tiny dense model matches one rank; the
#              uplink's qdisc carried the traffic between the hosts (its
#              byte counter grew), and the ranks ran on both hosts
#   linkdown   the uplink goes down while the ranks hold after step 2
#              (FIVEFOLD_TEST_HOLD_AFTER_STEP): the job ends with a message
#              from a rank of one host naming the ranks of the other host it
#              lost (training.collective_timeout_s 2), instead of hanging
#   placement  a plan with a non-identity mapping (device of rank 0..3:
#              0 2 1 3) puts dp replica 0's two stages on host 0, and trains
#              the same losses as the rank-order plan and as one rank
#   calibrate  `fivefold calibrate --quick` on the cluster's 4 ranks writes a
#              tiered spec of 2 nodes x 2 devices: a topology section, the
#              intra- and inter-node links and collectives, the measured
#              1 MB send/recv across the hosts no faster than the tbf rate
#              (100 Mbit/s: 12.5 MB/s, which no measurement can exceed),
#              the fitted uplink below the shared-memory link and pricing
#              1 MB no faster than it was measured, and devices_per_nic 2
#              (the two ranks of a host share its one uplink: 1 MB alone
#              takes about half as long as both hosts' pairs at once)
#   placement-local  the same on plain mpirun on this machine (no cluster,
#              no root): the ranks are renumbered (launch rank 2 becomes
#              rank 1) and train the same losses
# Exit 77 (skip) without root or network namespaces (netns-cluster.sh check),
# except placement-local.
# usage: netns_test.sh FIVEFOLD MPIEXEC MODE
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MODE=$3
ROOT_DIR=$(cd "$(dirname "$0")/../.." && pwd)
NETNS=$ROOT_DIR/scripts/netns-cluster.sh
if [ "$MODE" != placement-local ]; then
  why=$("$NETNS" check) || { echo "SKIP: $why"; exit 77; }
fi
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir "netns-$MODE"

CLUSTER=
teardown() {
  [ -n "$BG_PID" ] && kill -9 "$BG_PID" 2>/dev/null
  BG_PID=
  [ -n "$CLUSTER" ] && "$NETNS" down "$CLUSTER"
  cleanup
}
trap teardown EXIT
if [ "$MODE" = placement-local ]; then
  MPIEXEC=$2
else
  # A name no other run uses: letters and digits, at most 8.
  for _ in 1 2 3 4 5; do
    CLUSTER=t$(printf '%05d' $((($$ * 7 + RANDOM) % 100000)))
    [ -e "/run/fivefold-netns/$CLUSTER" ] || break
  done
  # (up removes what it made when it fails)
  "$NETNS" up "$CLUSTER" 200mbit || { fail "making cluster $CLUSTER"; CLUSTER=; finish "netns"; }
  # lib.sh's train() runs "$MPIEXEC" -np N --oversubscribe ...: on the cluster.
  # Each host on a core of its own where the machine has two, even with
  # OMP_NUM_THREADS=1 in the environment (nproc follows it).
  if [ "$(env -u OMP_NUM_THREADS nproc)" -ge 2 ] &&
    [ "$(sort -u /run/fivefold-netns/"$CLUSTER"/host-* | wc -l)" -ne 2 ]; then
    fail "the two hosts of $CLUSTER share a core: $(cat /run/fivefold-netns/"$CLUSTER"/host-* | tr '\n' ' ')"
  fi
  MPIEXEC=$WORK/cluster-mpirun
  printf '#!/bin/sh\nexec "%s" mpirun %s "$@"\n' "$NETNS" "$CLUSTER" >"$MPIEXEC"
  chmod +x "$MPIEXEC"
fi

uplink_bytes() { # bytes host 0's end of the uplink has sent
  ip netns exec "$CLUSTER-h0" tc -s qdisc show dev "${CLUSTER}u0" | sed -n 's/.*Sent \([0-9]*\) bytes.*/\1/p' | head -1
}

make_corpus
dense_json dense.json 4
run_json run-dense.json dense.json steps=5 global_batch_size=8 micro_batch_size=2 interval=5

# A plan for PP2 x DP2 of dense.json (its model identity from `fivefold
# plan`, the layout set here) with the given mapping.
plan_with_mapping() { # OUT MAP(comma-separated)
  [ -f plan-base.json ] || "$FIVEFOLD" plan --model dense.json --cluster "$ROOT_DIR/configs/clusters/dgx-h100.json" \
    --gpus 4 --seq 16 --global-batch 8 --dtype fp32 --out plan-base.json >plan.log 2>&1 ||
    { cat plan.log; fail "fivefold plan"; return 1; }
  $PY - "$1" "$2" <<'PY'
import json, sys
p = json.load(open("plan-base.json"))
p["parallel"].update({"tp": 1, "cp": 1, "dp": 2, "pp": 2, "vpp": 1, "ep": 1, "etp": 1, "edp": 2,
                      "micro_batch_size": 2, "global_batch_size": 8, "microbatches": 2, "schedule": "1f1b",
                      "recompute": "none", "distributed_optimizer": False, "layers_per_stage": [2, 2]})
p.pop("buckets", None)
p["mapping"] = {"device_of_rank": [int(x) for x in sys.argv[2].split(",")], "method": "test"}
json.dump(p, open(sys.argv[1], "w"), indent=1)
PY
}

case $MODE in
  golden)
    train 0 one dense || finish "netns"
    before=$(uplink_bytes)
    train 4 cluster dense --pp 2 --dp 2 || finish "netns"
    after=$(uplink_bytes)
    same cluster one 5
    one_printer cluster
    echo "uplink: host 0 sent $((after - before)) bytes over it during the run"
    # Pipeline activations and gradients of 4 steps: far over 100 KB.
    [ $((after - before)) -gt 100000 ] || fail "the uplink carried $((after - before)) bytes: the ranks did not talk over it"
    ;;
  linkdown)
    $PY - <<'PY'
import json
cfg = json.load(open("run-dense.json"))
cfg["training"]["collective_timeout_s"] = 2
cfg["training"]["steps"] = 50
json.dump(cfg, open("run-down.json", "w"))
PY
    mkdir hold
    FIVEFOLD_TEST_HOLD_AFTER_STEP="2:$WORK/hold" "$MPIEXEC" -np 4 "$FIVEFOLD" train --config run-down.json \
      --out down --no-progress --pp 2 --dp 2 >down.log 2>&1 &
    BG_PID=$!
    await_holds hold down.log || finish "netns"
    "$NETNS" link "$CLUSTER" down || fail "taking the uplink down"
    touch hold/go
    if ! await_end 120; then
      fail "the job still runs 120 s after the uplink went down (collective timeout 2 s)"
      finish "netns"
    fi
    [ "$ENDED_STATUS" -ne 0 ] || fail "the job exited 0 although the uplink went down"
    grep -E "rank [0-9] failed" down.log | head -3
    # Rank order: ranks 0, 1 on host 0, ranks 2, 3 on host 1. A rank of one
    # host names a rank of the other as the one it lost, with both hosts.
    grep -Eq "rank [01] failed: .* rank [23] did not arrive .*rank [23] on $CLUSTER-h1.* than rank [01] \(on $CLUSTER-h0\).* lost each other" down.log ||
      grep -Eq "rank [23] failed: .* rank [01] did not arrive .*rank [01] on $CLUSTER-h0.* than rank [23] \(on $CLUSTER-h1\).* lost each other" down.log ||
      { tail -20 down.log; fail "no message naming the ranks of both hosts that lost each other"; }
    ;;
  placement)
    train 0 one dense || finish "netns"
    plan_with_mapping plan-order.json 0,1,2,3 || finish "netns"
    plan_with_mapping plan-mapped.json 0,2,1,3 || finish "netns"
    train 4 order dense --plan plan-order.json || finish "netns"
    train 4 mapped dense --plan plan-mapped.json || finish "netns"
    grep '^placement' mapped.log
    # Rank 1 (dp 1, stage 0) runs on device 2 (host 1), rank 2 (dp 0, stage 1) on device 1 (host 0).
    grep -q "0->0 ($CLUSTER-h0) 1->2 ($CLUSTER-h1) 2->1 ($CLUSTER-h0) 3->3 ($CLUSTER-h1)" mapped.log ||
      fail "the mapped run's ranks are not on the devices and hosts of the mapping"
    grep -q "0->0 ($CLUSTER-h0) 1->1 ($CLUSTER-h0) 2->2 ($CLUSTER-h1) 3->3 ($CLUSTER-h1)" order.log ||
      fail "the rank-order run's ranks are not in launch order"
    $PY "$COMPARE" losses mapped order 0 || fail "the mapped run's losses differ from the rank-order run's"
    same mapped one 5
    ;;
  calibrate)
    "$NETNS" rate "$CLUSTER" 100mbit || fail "setting the uplink's rate"
    "$MPIEXEC" -np 4 "$FIVEFOLD" calibrate --quick --out spec.json >calibrate.log 2>&1 ||
      { cat calibrate.log; fail "calibrate on the cluster"; finish "netns"; }
    grep -q "on 2 node(s)" calibrate.log || { cat calibrate.log; fail "calibrate did not see 2 nodes"; }
    $PY - <<'PY' || { cat calibrate.log; fail "the calibrated spec does not describe the cluster"; }
import json
s = json.load(open("spec.json"))
assert s["nodes"] == 2 and s["devices_per_node"] == 2, (s["nodes"], s["devices_per_node"])
assert "topology" in s, "no topology section"
intra, inter = s["intra_node"]["bandwidth_GBps"], s["inter_node"]["bandwidth_GBps"]
p2p = s["collectives"]["p2p"]
assert "intra_node" in p2p and "inter_node" in p2p, p2p
for kind in ("all_reduce", "all_gather"):
    assert "inter_node" in s["collectives"][kind] and "intra_node" in s["collectives"][kind], kind
print(f"intra_node {intra:.3f} GB/s, inter_node {inter * 1e3:.2f} MB/s per device (fitted)")
assert intra > 2 * inter, f"intra_node {intra} GB/s is not above inter_node {inter} GB/s"
# The measured 1 MB send/recv across the hosts (not the fit, which may
# extrapolate): no faster than the uplink's 12.5 MB/s per direction.
import re
log = open("calibrate.log").read()
inter_part = log[log.index("inter-node"):]
t = re.search(r"p2p .*\(4 KB\.\.1 MB: [0-9.]+\.\.([0-9.]+) us\)", inter_part)
assert t, "no inter-node p2p line in the calibrate output"
rate = 1048576 / (float(t.group(1)) * 1e-6)
print(f"1 MB across the hosts at {rate / 1e6:.2f} MB/s (uplink 12.5 MB/s per direction)")
assert rate <= 12.5e6 * 1.1, f"1 MB crossed at {rate / 1e6:.1f} MB/s, above the uplink's rate: not over it"
fit = p2p["inter_node"]["latency_us"] * 1e-6 + 1048576 / (p2p["inter_node"]["bandwidth_GBps"] * 1e9)
assert fit >= float(t.group(1)) * 1e-6 * 0.999, f"the fit prices 1 MB at {fit * 1e6:.0f} us, faster than measured"
nic = s["topology"].get("devices_per_nic")
print(f"devices_per_nic {nic}")
assert nic == 2, f"topology.devices_per_nic is {nic}: the two ranks of a host share its one uplink"
PY
    # The planner reads it and searches the mapping on it by default.
    "$FIVEFOLD" plan --model dense.json --cluster spec.json --gpus 4 --seq 16 --global-batch 8 --dtype fp32 \
      --min-pp 2 --max-pp 2 >plan.log 2>&1 || { cat plan.log; fail "plan on the calibrated spec"; }
    grep -q "device mapping: rank order" plan.log || { cat plan.log; fail "plan did not search the mapping on the spec"; }
    ;;
  placement-local)
    train 0 one dense || finish "netns"
    plan_with_mapping plan-order.json 0,1,2,3 || finish "netns"
    plan_with_mapping plan-mapped.json 0,2,1,3 || finish "netns"
    train 4 order dense --plan plan-order.json || finish "netns"
    train 4 mapped dense --plan plan-mapped.json || finish "netns"
    grep '^placement' mapped.log
    grep -Eq "placement .*ranks renumbered.* 0->0 \([^)]*\) 1->2 \([^)]*\) 2->1 \([^)]*\) 3->3 " mapped.log ||
      fail "the mapped run's rank 1 is not launch rank 2 (device 2) and rank 2 not launch rank 1"
    grep -Eq "placement .*rank order.* 0->0 \([^)]*\) 1->1 \([^)]*\) 2->2 " order.log ||
      fail "the rank-order run's ranks are not in launch order"
    $PY "$COMPARE" losses mapped order 0 || fail "the mapped run's losses differ from the rank-order run's"
    same mapped one 5
    ;;
  *) echo "unknown mode $MODE"; exit 2 ;;
esac
finish "netns"
