#!/usr/bin/env bash
# Sleeping waits (comm/waits.h) change when a rank looks at MPI, never what
# it computes: a dense model trained PP2 x DP2 with TP-free stages on 4
# ranks (oversubscribed on small hosts) and MoE EP2 on 2 ranks, each with
# FIVEFOLD_WAIT_SLEEP=on, off and auto, gives bit-identical checkpoints and
# losses; the banner says which was chosen and why (auto sleeps exactly
# when the ranks' threads outnumber the cores); ranks that were asked
# differently (one on, one off) agree to sleep, since a blocking collective
# on one rank never matches the non-blocking form on another, and train
# bit-identically; a bad value is refused naming the variable.
# usage: waits_test.sh FIVEFOLD MPIEXEC
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
MODE=golden
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/lib.sh"
work_dir waits-test

make_corpus
dense_json dense.json 4
moe_json moe.json 2 4
run_json run-dense.json dense.json
run_json run-moe.json moe.json

identical() { # RUN REF STEP: the same bytes, the same losses
  local f
  for f in model optimizer; do
    cmp -s "$(ckpt "$1" "$3")/$f.safetensors" "$(ckpt "$2" "$3")/$f.safetensors" ||
      fail "$1: $f.safetensors at step $3 differs from $2"
  done
  $PY "$COMPARE" losses "$1" "$2" 0 || fail "$1: per-step losses differ from $2"
}

cores=$(getconf _NPROCESSORS_ONLN)
for mode in off on auto; do
  FIVEFOLD_WAIT_SLEEP=$mode train 4 "pp-$mode" dense --pp 2 --grad-accum 2 || exit 1
  FIVEFOLD_WAIT_SLEEP=$mode train 2 "ep-$mode" moe --ep 2 || exit 1
done
for mode in on auto; do
  identical "pp-$mode" pp-off 5
  identical "ep-$mode" ep-off 5
done
grep -q "waits    spinning (FIVEFOLD_WAIT_SLEEP=off)" pp-off.log || fail "the off run's banner does not say it spins"
grep -q "waits    sleeping (FIVEFOLD_WAIT_SLEEP=on)" pp-on.log || fail "the on run's banner does not say it sleeps"
if [ "$cores" -lt 4 ]; then want="sleeping (auto: 4 threads on $cores core"; else want="spinning (auto: 4 threads on $cores core"; fi
grep -q "waits    $want" pp-auto.log || { grep waits pp-auto.log; fail "the auto run's banner does not say '$want'"; }

# Rank 0 asked to spin, rank 1 to sleep: both sleep, and say why.
"$MPIEXEC" --oversubscribe -np 1 -x FIVEFOLD_WAIT_SLEEP=off "$FIVEFOLD" train --config run-moe.json --out ep-mixed \
  --no-progress --ep 2 : -np 1 -x FIVEFOLD_WAIT_SLEEP=on "$FIVEFOLD" train --config run-moe.json --out ep-mixed \
  --no-progress --ep 2 >ep-mixed.log 2>&1 || { tail -20 ep-mixed.log; fail "training ep-mixed (ranks asked to wait differently)"; }
identical ep-mixed ep-off 5
grep -q "waits    sleeping (FIVEFOLD_WAIT_SLEEP=off; another rank sleeps" ep-mixed.log ||
  { grep waits ep-mixed.log; fail "the mixed run's banner does not say that another rank sleeps"; }

FIVEFOLD_WAIT_SLEEP=sometimes refused 2 moe 'FIVEFOLD_WAIT_SLEEP="sometimes": expected on, off or auto' --ep 2
finish waits_test
