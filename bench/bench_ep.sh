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
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_setup bench_ep
bench_corpus
ref_moe_run_json run.json "$B" "$T" "$STEPS"

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
