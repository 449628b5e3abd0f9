#!/usr/bin/env bash
# MoE parallel folding and context parallelism through `fivefold train`
# under mpirun, against one rank (the golden rule, DESIGN.md). A tiny MoE
# model (hidden 32, 4 blocks, 8 experts, top-2, dropless, expert FFN 32,
# aux and z losses on) and a tiny dense one, the same global batch of 8
# sequences of 16 tokens per step in every layout.
#
# usage: fold_test.sh FIVEFOLD MPIEXEC MODE
#   golden-ep     EP2 (2 ranks), EP4 (4), EP2 x ETP2 (4), EP2 x EDP2 (4), EP2 with the all-gather dispatcher
#   golden-fold   TP2 attention with EP2 MoE (2 ranks, folded), TP2 x CP2 attention with
#                 EP4 x ETP1 MoE (4 ranks, folded; both dispatchers), CP2 (dense and MoE)
#   golden-pp     PP2 x EP2 (4 ranks), TP2 x PP2 x EP4 (8 ranks)
#   golden-zero   the distributed optimizer (ZeRO-1) with folding: dense state sharded over
#                 DP x CP, expert state over EDP — EP2 (2 ranks: DP2 / EDP1), EP2 x EDP2
#                 (4 ranks: DP4 / EDP2), TP2 + EP2 with DP2 (4 ranks), CP2 on the MoE (2 ranks),
#                 TP2 x CP2 + EP4 (4 ranks: DP x CP 2 / EDP 1) and PP2 x EP2 (4 ranks); an EP2 x EDP2
#                 ZeRO-1 checkpoint resumed on one rank
#   reshard       an EP4 x ETP1 checkpoint at step 3 resumed at EP2 x ETP2 and on one
#                 rank; both end where the uninterrupted one-rank run ends
#   config        layouts that do not fit the world or the model are refused with a message
# Each golden run: 5 steps; per-step loss, lm, aux, z, grad norm and lr
# within 1e-4 relative of one rank (aux and z included: they must not
# depend on the layout); the final checkpoint's model and optimizer
# tensors (full logical tensors) within 1e-4 relative + 1e-5 absolute.
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=$3
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir fold-test

make_corpus
dense_json dense.json 4 tied
moe_json moe.json 4 8
for model in dense moe; do run_json "run-$model.json" "$model.json"; done
# The log's expert imbalance (tokens per expert, max / mean) is the one-rank run's.
same_imbalance() {
  local a b
  a=$(grep '^step ' "$1.log" | grep -o 'imbalance [0-9.]*' | head -5)
  b=$(grep '^step ' "$2.log" | grep -o 'imbalance [0-9.]*' | head -5)
  [ "$a" = "$b" ] || fail "$1: expert imbalance in the log ($a) differs from $2 ($b)"
}

case "$MODE" in
  golden-ep)
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 2 ep2 moe --grad-accum 2 --ep 2 && same ep2 one-moe 5 && same_imbalance ep2 one-moe
    train 4 ep4 moe --grad-accum 1 --ep 4 && same ep4 one-moe 5
    train 4 ep2etp2 moe --grad-accum 1 --ep 2 --etp 2 && same ep2etp2 one-moe 5
    train 4 ep2edp2 moe --grad-accum 1 --ep 2 && same ep2edp2 one-moe 5 # expert gradients over EDP 2
    train 2 ep2-ag moe --grad-accum 2 --ep 2 --dispatcher allgather && same ep2-ag one-moe 5
    grep -q "dispatcher allgather" ep2-ag.log || fail "the all-gather dispatcher is not the one the banner shows"
    one_step_log ep4
    ;;
  golden-fold)
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 0 one-dense dense --grad-accum 4 || exit 1
    train 2 tp2ep2 moe --grad-accum 4 --tp 2 --ep 2 && same tp2ep2 one-moe 5
    train 4 tp2cp2ep4 moe --grad-accum 4 --tp 2 --cp 2 --ep 4 && same tp2cp2ep4 one-moe 5 &&
      same_imbalance tp2cp2ep4 one-moe
    train 4 tp2cp2ep4-ag moe --grad-accum 4 --tp 2 --cp 2 --ep 4 --dispatcher allgather &&
      same tp2cp2ep4-ag one-moe 5
    train 2 cp2-dense dense --grad-accum 4 --cp 2 && same cp2-dense one-dense 5
    train 2 cp2-moe moe --grad-accum 4 --cp 2 && same cp2-moe one-moe 5
    grep -q "MoE etp 1 x ep 4 x edp 1 x pp 1" tp2cp2ep4.log || fail "the banner does not show the MoE grid"
    one_step_log tp2cp2ep4
    ;;
  golden-pp)
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 4 pp2ep2 moe --grad-accum 2 --pp 2 --ep 2 && same pp2ep2 one-moe 5
    train 8 tp2pp2ep4 moe --grad-accum 2 --tp 2 --pp 2 --ep 4 && same tp2pp2ep4 one-moe 5
    one_step_log tp2pp2ep4
    ;;
  golden-zero)
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 2 ep2-zero moe --grad-accum 2 --ep 2 --distributed-optimizer && same ep2-zero one-moe 5
    train 4 ep2edp2-zero moe --grad-accum 1 --ep 2 --distributed-optimizer && same ep2edp2-zero one-moe 5
    train 4 tp2ep2dp2-zero moe --grad-accum 2 --tp 2 --ep 2 --distributed-optimizer && same tp2ep2dp2-zero one-moe 5
    train 2 cp2-zero moe --grad-accum 4 --cp 2 --distributed-optimizer && same cp2-zero one-moe 5
    train 4 tp2cp2ep4-zero moe --grad-accum 4 --tp 2 --cp 2 --ep 4 --distributed-optimizer &&
      same tp2cp2ep4-zero one-moe 5
    train 4 pp2ep2-zero moe --grad-accum 2 --pp 2 --ep 2 --distributed-optimizer && same pp2ep2-zero one-moe 5
    grep -q "ZeRO-1" ep2edp2-zero.log || fail "the banner does not show the distributed optimizer"
    # A ZeRO-1 checkpoint of EP2 x EDP2 resumes on one rank where the one-rank run ends.
    train 0 zero-resumed-one moe --grad-accum 4 --resume "$(ckpt ep2edp2-zero 3)" && same zero-resumed-one one-moe 5
    ;;
  reshard)
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 4 ep4 moe --grad-accum 1 --ep 4 || exit 1
    train 4 resumed-ep2etp2 moe --grad-accum 1 --ep 2 --etp 2 --resume "$(ckpt ep4 3)" && same resumed-ep2etp2 one-moe 5
    train 0 resumed-one moe --grad-accum 4 --resume "$(ckpt ep4 3)" && same resumed-one one-moe 5
    ;;
  config)
    refused 4 moe "etp 3 x ep 1 x pp 1 = 3 ranks does not divide" --etp 3
    refused 3 moe "parallel.ep 3 does not divide the model's 8 experts" --ep 3
    refused 3 moe "parallel.etp 3 does not divide the model's moe_intermediate_size 32" --etp 3
    refused 2 dense "needs a MoE model" --ep 2
    refused 2 moe "tp 2 x cp 2 x dp 1 x pp 1 = 4 ranks" --tp 2 --cp 2 --dp 1
    refused 4 moe "seq_len 12 is not divisible by 2 x cp = 8" --cp 4 --seq-len 12
    refused 2 moe "dispatcher must be" --ep 2 --dispatcher ring
    ;;
  *)
    echo "unknown mode $MODE"
    exit 2
    ;;
esac
finish fold_test
