#!/usr/bin/env bash
# Model parallelism through `fivefold train` under mpirun, against one rank
# (the golden rule, DESIGN.md): tensor parallelism (with sequence
# parallelism), pipeline parallelism (1F1B, interleaved, an uneven
# partition) and their combinations with data parallelism, all on the same
# global batch of 8 sequences per step. Tiny models: hidden 32, vocab 256,
# sequence 16; the dense one has 4 blocks and tied embeddings (so the
# pipeline sums the embedding's and the LM head's gradients), the MoE one 4
# blocks, 4 experts, top-2, separate LM head.
#
# usage: mp_test.sh FIVEFOLD MPIEXEC MODE
#   golden-tp     TP2 (dense, MoE), TP4 (dense: KV heads shared by rank pairs);
#                 dense TP2 with --fuse-norm-residual 0 bit for bit the fused TP2
#   golden-pp     PP2 1F1B (dense, MoE), PP2 GPipe (MoE), PP2 x vpp 2 interleaved (dense),
#                 PP4 with layers_per_stage 0,2,1,1 (dense: the first stage
#                 holds only the embedding)
#   golden-mixed  TP2 x PP2 (dense, MoE), TP2 x DP2 x PP2 on 8 ranks (dense,
#                 with the distributed optimizer)
#   golden-gpt2   GPT-2 (4 blocks, tied head, biases, position embeddings on
#                 the first stage): TP2, PP2, DP2, CP2, TP2 x PP2; TP2 with
#                 --fuse-norm-residual 0 bit for bit the fused TP2 (the
#                 residual add after the reduce-scatter, kern/fusion.h)
#   reshard       a TP2 x PP2 checkpoint at step 3 resumed by one rank and by
#                 DP4 with the distributed optimizer; both end where the
#                 uninterrupted one-rank run ends
#   config        a layout that does not fit the world is refused with a
#                 message naming the product
# Each golden run: 5 steps; per-step loss, lm, aux, z, grad norm and lr
# within 1e-4 relative of one rank; the final checkpoint's model and
# optimizer tensors (full logical tensors) within 1e-4 relative + 1e-5
# absolute per element (fp32: TP and PP sum in other orders than one rank;
# over 5 Adam steps that reaches a few 1e-6 on some elements).
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=$3
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir mp-test

make_corpus
dense_json dense.json 4 tied
moe_json moe.json 4 4
gpt2_json gpt2.json 4
for model in dense moe gpt2; do run_json "run-$model.json" "$model.json"; done

# bit_identical RUN REF: the same checkpoint files at step 5 and losses.
bit_identical() {
  local f
  for f in model optimizer; do
    cmp -s "$(ckpt "$1" 5)/$f.safetensors" "$(ckpt "$2" 5)/$f.safetensors" ||
      fail "$1: $f.safetensors differs from $2's (expected bit-identical)"
  done
  $PY "$COMPARE" losses "$1" "$2" 0 || fail "$1: losses differ from $2's"
}

case "$MODE" in
  golden-tp)
    for model in dense moe; do
      train 0 one-$model $model --grad-accum 4 || exit 1
      train 2 tp2-$model $model --grad-accum 4 --tp 2 && same tp2-$model one-$model 5
    done
    train 2 tp2-dense-unfused dense --grad-accum 4 --tp 2 --fuse-norm-residual 0 &&
      bit_identical tp2-dense-unfused tp2-dense
    # TP4 with 2 KV heads: pairs of ranks hold the same KV head, whose
    # gradient the global norm (clipping is on) must count once.
    train 4 tp4-dense dense --grad-accum 4 --tp 4 && same tp4-dense one-dense 5
    grep -q "parallel tp 2 x pp 1 x dp 1" tp2-dense.log || fail "the TP2 banner does not show the layout"
    one_printer tp2-moe
    ;;
  golden-pp)
    train 0 one-dense dense --grad-accum 4 || exit 1
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 2 pp2-dense dense --grad-accum 4 --pp 2 && same pp2-dense one-dense 5
    train 2 pp2-moe moe --grad-accum 4 --pp 2 && same pp2-moe one-moe 5
    grep -q "schedule 1f1b" pp2-dense.log || fail "pp 2 does not default to 1f1b"
    train 2 gpipe-moe moe --grad-accum 4 --pp 2 --schedule gpipe && same gpipe-moe one-moe 5
    train 2 vpp2-dense dense --grad-accum 4 --pp 2 --vpp 2 && same vpp2-dense one-dense 5
    grep -q "schedule interleaved, 2 chunks per pipeline rank" vpp2-dense.log || fail "vpp 2 does not run interleaved"
    train 4 pp4-dense dense --grad-accum 4 --pp 4 --layers-per-stage 0,2,1,1 && same pp4-dense one-dense 5
    grep -q "blocks per stage 0,2,1,1" pp4-dense.log || fail "the uneven partition is not the one asked for"
    one_printer pp4-dense
    ;;
  golden-mixed)
    train 0 one-dense dense --grad-accum 4 || exit 1
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 4 tp2pp2-dense dense --grad-accum 4 --tp 2 --pp 2 && same tp2pp2-dense one-dense 5
    train 4 tp2pp2-moe moe --grad-accum 4 --tp 2 --pp 2 && same tp2pp2-moe one-moe 5
    train 8 tp2dp2pp2-dense dense --grad-accum 2 --tp 2 --pp 2 --distributed-optimizer --bucket-mb 0.004 &&
      same tp2dp2pp2-dense one-dense 5
    one_printer tp2dp2pp2-dense
    ;;
  golden-gpt2)
    train 0 one-gpt2 gpt2 --grad-accum 4 || exit 1
    train 2 tp2-gpt2 gpt2 --grad-accum 4 --tp 2 && same tp2-gpt2 one-gpt2 5
    train 2 tp2-gpt2-unfused gpt2 --grad-accum 4 --tp 2 --fuse-norm-residual 0 &&
      bit_identical tp2-gpt2-unfused tp2-gpt2
    train 2 pp2-gpt2 gpt2 --grad-accum 4 --pp 2 && same pp2-gpt2 one-gpt2 5
    train 2 dp2-gpt2 gpt2 --grad-accum 2 && same dp2-gpt2 one-gpt2 5
    train 2 cp2-gpt2 gpt2 --grad-accum 4 --cp 2 && same cp2-gpt2 one-gpt2 5
    train 4 tp2pp2-gpt2 gpt2 --grad-accum 4 --tp 2 --pp 2 && same tp2pp2-gpt2 one-gpt2 5
    ;;
  reshard)
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 4 tp2pp2-moe moe --grad-accum 4 --tp 2 --pp 2 || exit 1
    train 0 resumed1-moe moe --grad-accum 4 --resume "$(ckpt tp2pp2-moe 3)" && same resumed1-moe one-moe 5
    train 4 resumed-dp4-moe moe --grad-accum 1 --distributed-optimizer --resume "$(ckpt tp2pp2-moe 3)" &&
      same resumed-dp4-moe one-moe 5
    ;;
  config)
    refused 4 dense "tp 2 x pp 2 x dp 2 = 8 ranks" --tp 2 --pp 2 --dp 2
    refused 3 dense "do not divide the job's 3 rank" --pp 2
    ;;
  *)
    echo "unknown mode $MODE"
    exit 2
    ;;
esac
finish mp_test
