#!/usr/bin/env bash
# Warm-up depths of the interleaved order (parallel.warmup with vpp > 1)
# through `fivefold train` under mpirun, against one rank (the golden rule,
# DESIGN.md). The tiny dense model of mp_test.sh (4 blocks, hidden 32, vocab
# 256, sequence 16), 4 micro-batches of 2 sequences per step, PP2 x VPP2:
# Megatron-Core's depths are 4,2 chunk forwards; runs at 3,2 (shallower on
# rank 0, fewer activations kept) and 6,3 (deeper on both ranks).
#
# usage: vpp_warmup_test.sh FIVEFOLD MPIEXEC
# Each golden run: 5 steps; losses within 1e-4 relative of one rank, the
# final model and optimizer tensors within 1e-4 relative + 1e-5 absolute;
# config.json records the depths; depths below the last rank's bound
# (vpp-1)*pp and above rank 0's refused with the rank, depth and bound.
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir vpp-warmup-test

make_corpus
dense_json dense.json 4 tied
run_json run-dense.json dense.json

train 0 one-dense dense --grad-accum 4 || exit 1
for w in 3,2 6,3; do
  run=vppw-${w/,/-}
  train 2 "$run" dense --grad-accum 4 --pp 2 --vpp 2 --warmup "$w" && same "$run" one-dense 5
  grep -q "\"warmup\":[[:space:]]*\[${w/,/, }\]" "$run/config.json" || fail "$run/config.json does not record warm-up $w"
done
refused 2 dense "warm-up depth of rank 1 (the last) is 1, below the bound (vpp-1)\*pp = 2" --grad-accum 4 --pp 2 \
  --vpp 2 --warmup 4,1
refused 2 dense "warm-up depth of rank 0 is 7, above the bound 6" --grad-accum 4 --pp 2 --vpp 2 --warmup 7,2
[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all checks passed"
