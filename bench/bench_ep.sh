#!/usr/bin/env bash
# Expert parallelism against data parallelism on the reference MoE model
# (configs/models/ref-moe.json, 8 experts top-2) with byte-level data, both
# on 2 ranks x 1 thread under mpirun with the same micro-batch per rank:
#   DP2  every rank holds all 8 experts; expert gradients join the DP
#        all-reduce;
#   EP2  attention stays DP2, the MoE layers are EP2 (4 experts per rank,
#        tokens exchanged by the all-to-all dispatcher; expert gradients are
#        not reduced at all since EDP = 1).
# Prints tokens/s of each and, for EP2, the share of training time rank 0
# spent inside the dispatcher's collectives (the trainer's "moe:" line:
# all-to-all-v of tokens and counts and the router-statistics all-reduce,
# waiting for the peer included). Figures only, no thresholds.
#
# usage: bench/bench_ep.sh [BUILD_DIR] [STEPS]     (defaults: build, 4)
# env:   BENCH_EP_BATCH (micro-batch, default 2), BENCH_EP_SEQ (default 256),
#        BENCH_EP_DISPATCHER (alltoall | allgather, default alltoall)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STEPS=${2:-4}
FIVEFOLD=$(cd "$BUILD" && pwd)/fivefold
B=${BENCH_EP_BATCH:-2}
T=${BENCH_EP_SEQ:-256}
DISPATCHER=${BENCH_EP_DISPATCHER:-alltoall}
[ -x "$FIVEFOLD" ] || { echo "bench_ep: $FIVEFOLD not built" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-bench-ep-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

for i in $(seq 1 4000); do
  echo "Line $i: the quick brown fox $((i * 7919 % 1009)) jumps over the lazy dog $((i * 104729 % 997)) again."
done >text.txt
"$FIVEFOLD" tokenize --byte-level --input text.txt --out shards --val-fraction 0.01 >/dev/null
cat >run.json <<JSON
{"model": "$ROOT/configs/models/ref-moe.json",
 "training": {"micro_batch_size": $B, "seq_len": $T, "steps": $STEPS,
              "lr": 0.0003, "warmup_steps": 1, "log_interval": 1, "eval_interval": 0, "eval_batches": 1,
              "threads": 1, "peak_gflops": 100},
 "data": {"train": "shards/train.bin"}}
JSON

# tokens/s of the steps after the first (the first touches every page).
steady_tps() {
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"type":"train"' in l]
steady = recs[1:] or recs
sec = sum(r["ms_per_step"] / 1e3 for r in steady)
tok = sum(r["tokens_per_s"] * r["ms_per_step"] / 1e3 for r in steady)
print(f"{tok / sec:.1f}" if sec > 0 else "0")
PY
}

echo "bench_ep: ref-moe, micro-batch $B x $T tokens per rank, $STEPS steps, 2 ranks x 1 thread, dispatcher $DISPATCHER"
mpirun -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --out dp2 --no-progress >dp2.log 2>&1 ||
  { cat dp2.log; exit 1; }
mpirun -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --out ep2 --no-progress --ep 2 \
  --dispatcher "$DISPATCHER" >ep2.log 2>&1 || { cat ep2.log; exit 1; }
t_dp=$(steady_tps dp2)
t_ep=$(steady_tps ep2)
printf '  DP2 (experts replicated)     : %10.1f tok/s\n' "$t_dp"
printf '  EP2 (attention DP2, MoE EP2) : %10.1f tok/s   (%s x DP2)\n' "$t_ep" \
  "$(/usr/bin/python3 -c "print(f'{$t_ep / $t_dp:.2f}' if $t_dp > 0 else 'n/a')")"
grep -E "^moe:" ep2.log | sed 's/^moe:/  EP2 dispatcher share         :/'
grep -E "^dp:" dp2.log | sed 's/^dp:/  DP2 reduction                :/'
grep -E "^dp:" ep2.log | sed 's/^dp:/  EP2 reduction (dense only)   :/'
