#!/usr/bin/env bash
# What device mapping buys, by topology: for each cluster shape (64 H100-like
# GPUs as 8 nodes of 8, the same devices and links, only the fabric
# differs) and model, `fivefold plan --map-devices` picks the best layout
# under rank order and then searches the device of every rank; the table
# prints the step time in rank order, mapped, and the gain. Regular
# fabrics should gain little; irregular ones (switch boundaries that cut
# pipeline stages, a slow node, PCIe islands) more, the direction reported
# for arbitrary topologies by arXiv 2204.10562. Prints figures only.
#
# usage: bench/bench_mapping.sh [BUILD_DIR]   (default build)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
FIVEFOLD=$BUILD/fivefold
[ -x "$FIVEFOLD" ] || { echo "bench_mapping: $FIVEFOLD not built" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-bench-mapping-XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# spec NAME TOPOLOGY_JSON: 8 nodes x 8 H100-like devices with the given tiers.
spec() {
  local topo=""
  [ -n "$2" ] && topo=", \"topology\": $2"
  cat >"$WORK/$1.json" <<JSON
{"name": "$1", "nodes": 8, "devices_per_node": 8,
 "peak_tflops": {"bf16": 989.5}, "memory": {"capacity_GiB": 80, "reserved_GiB": 4, "bandwidth_GBps": 3350},
 "intra_node": {"bandwidth_GBps": 450, "latency_us": 3, "efficiency": 0.8},
 "inter_node": {"bandwidth_Gbps": 400, "latency_us": 6, "efficiency": 0.9}$topo}
JSON
}
spec regular ""
spec two-tier-aligned '{"nodes_per_switch": 4, "oversubscription": 8, "switch_latency_us": 2}'
spec two-tier-misaligned '{"nodes_per_switch": 3, "oversubscription": 8, "switch_latency_us": 2}'
spec slow-node '{"slow_nodes": [{"node": 2, "bandwidth_Gbps": 25, "latency_us": 20}]}'
spec pcie-islands '{"devices_per_island": 4, "cross_island": {"bandwidth_GBps": 12, "latency_us": 6}}'
spec irregular-mix '{"nodes_per_switch": 3, "oversubscription": 8, "devices_per_island": 4, "cross_island": {"bandwidth_GBps": 12, "latency_us": 6}, "slow_nodes": [{"node": 2, "bandwidth_Gbps": 25, "latency_us": 20}]}'

printf '%-20s %-14s %-34s %11s %11s %7s  %s\n' topology model layout "rank order" mapped gain "how"
for model in llama-3-8b mixtral-8x7b; do
  for topo in regular two-tier-aligned two-tier-misaligned slow-node pcie-islands irregular-mix; do
    out=$("$FIVEFOLD" plan --model "$model" --cluster "$WORK/$topo.json" --gpus 64 --seq 4096 --global-batch 256 \
      --top 1 --map-devices 2>&1) || { echo "$topo $model: plan failed: $out" >&2; continue; }
    layout=$(echo "$out" | awk '$1 == "1" {print $2, $3, $4, $5, $6; exit}')
    line=$(echo "$out" | grep '^device mapping:')
    t0=$(echo "$line" | sed -E 's/.*rank order ([0-9.]+) s\/step.*/\1/')
    t1=$(echo "$line" | sed -E 's/.*chosen ([0-9.]+) s\/step.*/\1/')
    gain=$(echo "$line" | sed -E 's/.*\(([0-9.]+% faster).*/\1/')
    how=$(echo "$line" | sed -E 's/.*faster; ([^,]*), ([0-9]+) simulations.*/\1 (\2 sims)/')
    printf '%-20s %-14s %-34s %9s s %9s s %7s  %s\n' "$topo" "$model" "$layout" "$t0" "$t1" "${gain% faster}" "$how"
  done
done
