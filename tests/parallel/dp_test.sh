#!/usr/bin/env bash
# Data parallelism through `fivefold train` under mpirun, against one rank
# (the golden rule, DESIGN.md): the same global batch of 8 sequences per
# step, split as 1 rank x 4 micro-batches, 2 ranks x 2, 4 ranks x 1 and
# 2 ranks x 2 with the distributed optimizer (ZeRO-1), and both of those
# with blocking reductions (--overlap-grad-reduce 0); the DP2 run takes the
# default (auto), whose choice and reason the dp: line must state: blocking
# where 2 ranks of 1 thread leave no spare core (fewer than 4 online cores),
# overlapped otherwise; the DP4 and ZeRO-1 runs overlap explicitly (1);
# the MoE runs' summaries count every replica's tokens per expert as one
# rank counts them.
#
# usage: dp_test.sh FIVEFOLD MPIEXEC MODE
#   golden-dense, golden-moe  5 steps: per-step losses, grad norm and lr
#                             within 1e-5 relative; final model.safetensors
#                             and optimizer.safetensors within 1e-5 relative
#                             + 1e-6 absolute per element (fp32, the sum over
#                             ranks adds in another order than accumulation)
#   resume                    a ZeRO-1 DP2 checkpoint resumed by a plain DP2
#                             run, and a one-rank checkpoint resumed by a
#                             ZeRO-1 DP4 run, end where straight runs end
#   kill                      kill -9 of one rank mid-run ends the whole job
#                             with a non-zero status within seconds, naming
#                             the rank; the newest checkpoint still resumes
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=$3
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir dp-test
SAME_RTOL=1e-5 # data parallelism only reorders the sum over ranks
SAME_ATOL=1e-6

make_corpus
dense_json dense.json 2
moe_json moe.json 2 4

case "$MODE" in
  golden-dense | golden-moe)
    model=${MODE#golden-}
    run_json "run-$model.json" "$model.json"
    # 1 rank x 4 micro-batches of 2 = the global batch of every DP run below.
    train 0 one "$model" --grad-accum 4 || exit 1
    train 2 dp2 "$model" --grad-accum 2 && same dp2 one 5
    train 4 dp4 "$model" --grad-accum 1 --bucket-mb 0.004 --overlap-grad-reduce 1 && same dp4 one 5
    train 2 zero2 "$model" --grad-accum 2 --distributed-optimizer --bucket-mb 0.01 --overlap-grad-reduce 1 &&
      same zero2 one 5
    grep -q "parallel dp 2 .*ZeRO-1" zero2.log || fail "the ZeRO-1 run's banner does not say so"
    # blocking reductions where the program places them: the same numbers
    train 2 block2 "$model" --grad-accum 2 --overlap-grad-reduce 0 --bucket-mb 0.004 && same block2 one 5
    train 2 blockz2 "$model" --grad-accum 2 --overlap-grad-reduce 0 --distributed-optimizer --bucket-mb 0.01 &&
      same blockz2 one 5
    grep -q "blocking where the program reduces" block2.log || fail "the blocking run's banner does not say so"
    grep -q "hidden behind backward" dp2.log || fail "the DP run does not report the hidden reduction time"
    cores=$(getconf _NPROCESSORS_ONLN) # not nproc: it follows OMP_NUM_THREADS
    if [ "$cores" -lt 4 ]; then
      auto_line="dp: reduce blocking (auto: 2 ranks share one host, no spare core (2 ranks x 1 thread on $cores core"
      auto_json='"grad_reduce":"blocking","grad_reduce_reason":"auto: 2 ranks share one host, no spare core'
    else
      auto_line="dp: reduce overlapped (auto: 2 ranks share one host with a spare core each"
      auto_json='"grad_reduce":"overlapped","grad_reduce_reason":"auto: 2 ranks share one host with a spare core'
    fi
    grep -qF "$auto_line" dp2.log || { grep "dp:" dp2.log; fail "the default (auto) run's dp: line is not '$auto_line...'"; }
    grep -qF "$auto_json" dp2/metrics.jsonl || fail "dp2/metrics.jsonl's summary does not record the auto choice"
    grep -qF "dp: reduce overlapped (parallel.overlap_grad_reduce 1)" zero2.log || fail "zero2 did not overlap as told"
    grep -qF "dp: reduce blocking (parallel.overlap_grad_reduce 0)" block2.log || fail "block2 did not block as told"
    one_printer dp4
    if [ "$model" = moe ]; then
      # The summary's tokens per expert of each MoE layer (what `simulate
      # --expert-load` prices EP with) count every replica's tokens: the
      # 5 steps x 8 sequences x 16 tokens x top-2 in every layer, spread as
      # one rank spread them (a count may move by a token or two where the
      # reordered sums flip a near tie in the routing).
      for run in dp2 dp4 zero2; do
        $PY - "$run/metrics.jsonl" one/metrics.jsonl $((5 * 8 * 16 * 2)) <<'PY' || fail "$run: expert_tokens differ from one rank's"
import json, sys
def rows(path):
    for line in open(path):
        r = json.loads(line)
        if r.get("type") == "summary":
            return r.get("expert_tokens")
run, ref, per_layer = rows(sys.argv[1]), rows(sys.argv[2]), int(sys.argv[3])
assert run and ref and len(run) == len(ref) == 2, (run, ref)
for a, b in zip(run, ref):
    assert sum(a) == sum(b) == per_layer, (a, b, per_layer)
    assert all(abs(x - y) <= 2 + 0.02 * y for x, y in zip(a, b)), (a, b)
PY
      done
    fi
    ;;
  resume)
    run_json run-moe.json moe.json
    train 0 one moe --grad-accum 4 || exit 1
    train 2 zero2 moe --grad-accum 2 --distributed-optimizer || exit 1
    train 2 plain2 moe --grad-accum 2 --resume "$(ckpt zero2 3)" && same plain2 one 5
    train 4 zero4 moe --grad-accum 1 --distributed-optimizer --resume "$(ckpt one 3)" && same zero4 one 5
    # A dp that disagrees with the world is refused with a clear message.
    refused 2 moe "parallel.dp (--dp) is 4 but the job has 2 rank" --dp 4
    ;;
  kill)
    run_json run-moe.json moe.json steps=100000
    "$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train --config run-moe.json --out victim --no-progress \
      --grad-accum 2 --log-interval 1000 >victim.log 2>&1 &
    BG_PID=$!
    for _ in $(seq 1 600); do
      [ -d "$(ckpt victim 6)" ] && break
      sleep 0.1
    done
    [ -d "$(ckpt victim 6)" ] || { cat victim.log; fail "no checkpoint appeared"; exit 1; }
    # Rank 1: the child of mpirun whose environment says so.
    victim=
    for pid in $(ps -o pid= --ppid "$BG_PID"); do
      if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then victim=$pid; fi
    done
    [ -n "$victim" ] || { fail "cannot find the pid of rank 1"; exit 1; }
    kill -9 "$victim"
    start=$(date +%s)
    status=0
    if await_end 30; then status=$ENDED_STATUS; else fail "the job still runs 30 s after rank 1 was killed"; fi
    echo "job ended $(($(date +%s) - start)) s after the kill with status $status"
    [ "$status" -ne 0 ] || fail "the job exited with status 0 after a rank was killed"
    grep -Eq "rank 1.*(signal 9|Killed)|rank 1 failed" victim.log || { cat victim.log; fail "no message names rank 1"; }
    # The newest complete checkpoint still loads and trains on.
    newest=$(ls -d victim/checkpoints/step-* | sort | tail -1)
    step=$((10#${newest##*step-}))
    "$FIVEFOLD" train --config run-moe.json --out victim --no-progress --grad-accum 4 --steps $((step + 1)) \
      --resume >resumed.log 2>&1 || { cat resumed.log; fail "the newest checkpoint $newest does not resume"; }
    ;;
  *)
    echo "unknown mode $MODE"
    exit 2
    ;;
esac
finish dp_test
