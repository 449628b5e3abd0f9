#!/usr/bin/env bash
# Distributed checkpoints (ckpt/checkpoint_dist.h) under mpirun, driven by
# tests/tools/ckpt_dist_check.c on a tiny model.
#
# usage: ckpt_dist_test.sh CKPT_DIST_CHECK MPIEXEC MODE
#   layouts-moe, layouts-tied  (MoE layers + shared expert, untied; or dense
#       with tied embeddings, so pipeline stages hold the head's tied copy,
#       and transfers cut into collective calls of at most 3000 bytes, so
#       ranks make different numbers of calls)
#       - sharded saves on 4 ranks as TP2 x PP2, TP4 (two ranks share each
#         KV head), TP2 x DP2 and PP2 x 2 interleaved chunks x DP2 are
#         byte-for-byte the files of a one-rank checkpoint_save;
#       - a sharded checkpoint loads under other layouts (2 ranks TP2, 4 ranks
#         PP4 / PP2 x 2 chunks / TP4, 1 rank) and with the one-rank loaders,
#         and the one-rank checkpoint loads sharded: every local parameter and
#         moment equals its expected global value.
#   failures
#       - ranks that would write replicas twice: every rank fails with the
#         same ERR_CONFIG before anything is created;
#       - a checkpoint of another model: ERR_CONFIG naming the field;
#       - a file without a tensor, or with it in another shape: ERR_CONFIG
#         naming file and tensor;
#       - a truncated shard file: the error names the file, the older
#         checkpoint still loads (sharded and one-rank);
#       - rank 0 exiting halfway (the crash test hook) ends the job and
#         leaves no step directory; the next save cleans up and succeeds.
set -u
TOOL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=$3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-ckpt-dist-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ckpt() { printf '%s/checkpoints/step-%08d' "$1" "$2"; }
# run NP OPERATIONS...: one job of NP ranks running the tool's operations
# (separated by "+") one after the other.
run() {
  local np=$1
  shift
  "$MPIEXEC" -np "$np" --oversubscribe "$TOOL" "$@" >run.log 2>&1
  local rc=$?
  [ $rc -eq 0 ] || tail -30 run.log
  return $rc
}
same_files() { # DIR_A DIR_B
  for f in model.safetensors optimizer.safetensors state.json; do
    cmp -s "$1/$f" "$2/$f" || fail "$1/$f differs from $2/$f"
  done
}

layouts() {
  local m="--model $1 --step 7" step=7
  # shellcheck disable=SC2086
  run 4 save1 ref $m \
    + save s1 $m --tp 2 --pp 2 + save s2 $m --tp 4 + save s3 $m --tp 2 + save s4 $m --pp 2 --chunks 2 \
    + load "$(ckpt s1 $step)" $m --np 2 --tp 2 + load "$(ckpt s2 $step)" $m --pp 4 \
    + load "$(ckpt s3 $step)" $m --pp 2 --chunks 2 + load "$(ckpt s4 $step)" $m --tp 4 \
    + load "$(ckpt s1 $step)" $m --np 1 + load "$(ckpt ref $step)" $m --tp 2 --pp 2 \
    + load "$(ckpt ref $step)" $m --np 2 --pp 2 --chunks 2 + load1 "$(ckpt s2 $step)" $m ||
    fail "saving and loading under the layouts (see above)"
  for i in 1 2 3 4; do
    if [ -d "$(ckpt "s$i" $step)" ]; then same_files "$(ckpt "s$i" $step)" "$(ckpt ref $step)"
    else fail "no checkpoint s$i"; fi
  done
  [ "$(grep -c ': checks passed on' run.log)" = 13 ] || fail "not all 13 operations reported their checks"
}

failures_mode() {
  # Also intact files (sizes and CRC-32s recorded anew) that lack a tensor or
  # hold it with another shape: ERR_CONFIG naming the file and the tensor.
  run 4 save run --tp 2 --pp 2 --step 1 \
    + save run --tp 2 --step 2 --claim-dp0 --expect-fail "exactly once" \
    + load "$(ckpt run 1)" --np 2 --tp 2 --step 1 --model tied --expect-fail "the model configs differ" \
    + save run --tp 4 --step 2 \
    + save t --tp 2 --step 4 + tamper "$(ckpt t 4)" --drop layers.1.attn.wq \
    + load "$(ckpt t 4)" --tp 2 --pp 2 --step 4 --expect-fail "model.safetensors: tensor 'layers.1.attn.wq' is missing" \
    + save u --pp 4 --step 4 + tamper "$(ckpt u 4)" --flatten lm_head.weight \
    + load "$(ckpt u 4)" --tp 4 --step 4 --expect-fail "model.safetensors: tensor 'lm_head.weight' has global shape [" ||
    fail "a layout writing replicas twice, a checkpoint of another model, or a missing or reshaped tensor was not \
refused on every rank with an error naming what was wrong"
  grep -q "the ranks' slices do not cover" run.log || fail "the refusal does not say what was wrong"
  [ "$(grep -c 'expected failure (configuration error)' run.log)" = 4 ] || fail "those errors are not all ERR_CONFIG"
  ls -a run/checkpoints | grep -q '^\.tmp-' && fail "the refused save left a temporary directory"

  local victim
  victim="$(ckpt run 2)/optimizer.safetensors"
  truncate -s 50000 "$victim"
  run 4 load "$(ckpt run 2)" --np 2 --tp 2 --step 2 --expect-fail "$victim" \
    + load "$(ckpt run 1)" --pp 2 --chunks 2 --step 1 + load1 "$(ckpt run 1)" --step 1 ||
    fail "a truncated shard file was not refused with an error naming it, or the older checkpoint does not load"

  # Rank 0 dies between the data files and state.json: no step-3 directory.
  FIVEFOLD_TEST_CRASH_IN_CHECKPOINT=1 "$MPIEXEC" -np 4 --oversubscribe "$TOOL" save run --tp 2 --pp 2 --step 3 \
    >crash.log 2>&1
  local rc=$?
  [ $rc -ne 0 ] || fail "the crash hook did not end the job"
  [ -e "$(ckpt run 3)" ] && fail "a crash while writing left $(ckpt run 3)"
  ls -a run/checkpoints | grep -q '^\.tmp-step-00000003-' || fail "the crash left no temporary directory to clean"
  run 4 save run --tp 2 --pp 2 --step 3 --keep-last 2 + load "$(ckpt run 3)" --np 2 --tp 2 --step 3 ||
    fail "the save after the crash, or loading it"
  ls -a run/checkpoints | grep -q '^\.tmp-' && fail "the temporary directory of the crash was not removed"
  [ -e "$(ckpt run 1)" ] && fail "keep-last 2 kept step 1"
}

case "$MODE" in
layouts-moe) layouts moe ;;
layouts-tied)
  export FIVEFOLD_TEST_CKPT_BATCH_BYTES=3000
  layouts tied
  ;;
failures) failures_mode ;;
*)
  echo "usage: ckpt_dist_test.sh CKPT_DIST_CHECK MPIEXEC layouts-moe|layouts-tied|failures"
  exit 2
  ;;
esac
if [ $failures -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "ckpt_dist_test $MODE: all checks passed"
