#!/usr/bin/env bash
# The zero-bubble H1 order (schedule zb-h1: each backward split into the
# input gradient B and the weight gradients W) through `fivefold train`
# under mpirun, against one rank with the ordinary backward (the golden
# rule, DESIGN.md). Tiny models as in mp_test.sh: 4 blocks, hidden 32,
# vocab 256, sequence 16, 4 micro-batches of 2 sequences per step.
#
# usage: zb_test.sh FIVEFOLD MPIEXEC MODE
#   golden-pp   zb-h1 on one rank (split backward, no pipeline) and PP2
#               (dense with tied embeddings); a traced PP2 run names its W
#               actions and trace analyze reads it
#   golden-more PP2 MoE, PP4 (dense, oversubscribed),
#               PP2 x DP2 zb-h1 with the distributed optimizer and small
#               buckets (the reductions start from each chunk's last W),
#               GPT-2 PP2 (its MLP stays in B), PP2 with warm-up depths 3,1;
#               depths that grow along the pipeline or do not match pp refused
# Each golden run: 5 steps; losses within 1e-4 relative of one rank, the
# final model and optimizer tensors within 1e-4 relative + 1e-5 absolute.
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=$3
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir zb-test

make_corpus
dense_json dense.json 4 tied
moe_json moe.json 4 4
gpt2_json gpt2.json 4
for model in dense moe gpt2; do run_json "run-$model.json" "$model.json"; done

case "$MODE" in
  golden-pp)
    train 0 one-dense dense --grad-accum 4 || exit 1
    train 0 zb1-dense dense --grad-accum 4 --schedule zb-h1 && same zb1-dense one-dense 5
    train 2 zb2-dense dense --grad-accum 4 --pp 2 --schedule zb-h1 && same zb2-dense one-dense 5
    grep -q "schedule zb-h1" zb2-dense.log || fail "the PP2 banner does not name schedule zb-h1"
    # The tracer names the weight-gradient actions: one W per micro-batch,
    # rank and step (4 x 2 x 5), labelled W<mb>, and analyzes the program.
    train 2 zbt-dense dense --grad-accum 4 --pp 2 --schedule zb-h1 --trace zbt-dense.trace.json || exit 1
    n=$(grep -o '"cat":"BWD_WEIGHT"' zbt-dense.trace.json | wc -l)
    [ "$n" -eq 40 ] || fail "the trace holds $n BWD_WEIGHT actions, expected 40"
    grep -q '"name":"W3"' zbt-dense.trace.json || fail "the trace does not label weight gradients W<mb>"
    "$FIVEFOLD" trace analyze zbt-dense.trace.json >analyze.log 2>&1 || fail "trace analyze failed: $(tail -1 analyze.log)"
    grep -q "zb-h1 program (pp 2" analyze.log || fail "trace analyze does not name the zb-h1 program"
    ;;
  golden-more)
    train 0 one-dense dense --grad-accum 4 || exit 1
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 0 one-gpt2 gpt2 --grad-accum 4 || exit 1
    train 2 zb2-moe moe --grad-accum 4 --pp 2 --schedule zb-h1 && same zb2-moe one-moe 5
    train 4 zb4-dense dense --grad-accum 4 --pp 4 --schedule zb-h1 && same zb4-dense one-dense 5
    train 4 zb2dp2-dense dense --grad-accum 2 --pp 2 --dp 2 --schedule zb-h1 --distributed-optimizer \
      --bucket-mb 0.004 && same zb2dp2-dense one-dense 5
    train 2 zb2-gpt2 gpt2 --grad-accum 4 --pp 2 --schedule zb-h1 && same zb2-gpt2 one-gpt2 5
    # Deeper warm-up (rank 0 runs 3 forwards before its first backward).
    train 2 zbw-dense dense --grad-accum 4 --pp 2 --schedule zb-h1 --warmup 3,1 && same zbw-dense one-dense 5
    grep -q '"warmup":[[:space:]]*\[3, 1\]' zbw-dense/config.json || fail "config.json does not record the warm-up depths"
    refused 2 dense "must not grow along the pipeline" --pp 2 --schedule zb-h1 --warmup 0,1
    refused 2 dense "2 warm-up depths for pp 1" --warmup 1,0
    ;;
  *) echo "unknown mode $MODE"; exit 2 ;;
esac
[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all checks passed"
