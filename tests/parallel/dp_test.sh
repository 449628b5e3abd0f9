#!/usr/bin/env bash
# Data parallelism through `fivefold train` under mpirun, against one rank
# (the golden rule, DESIGN.md): the same global batch of 8 sequences per
# step, split as 1 rank x 4 micro-batches, 2 ranks x 2, 4 ranks x 1 and
# 2 ranks x 2 with the distributed optimizer (ZeRO-1).
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
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
COMPARE="$HERE/compare_runs.py"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-dp-test-XXXXXX")
BG_PID=
cleanup() {
  [ -n "$BG_PID" ] && kill -9 "$BG_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for i in $(seq 1 200); do
  echo "Line $i: in the beginning was the word, and the evening and the morning were day $i of $((i * 7 % 31))."
done >text.txt
"$FIVEFOLD" tokenize --byte-level --input text.txt --out shards --val-fraction 0.1 >/dev/null || { echo "FAIL: tokenize"; exit 1; }
cat >dense.json <<'JSON'
{"model_type": "fivefold", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64}
JSON
cat >moe.json <<'JSON'
{"model_type": "fivefold", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 2,
 "moe_intermediate_size": 32, "moe_aux_loss_coeff": 0.01, "moe_z_loss_coeff": 0.001}
JSON
run_config() { # MODEL STEPS
  cat >"run-$1.json" <<JSON
{"model": "$1.json",
 "training": {"micro_batch_size": 2, "seq_len": 16, "steps": $2, "lr": 0.003, "warmup_steps": 2,
              "log_interval": 1, "eval_interval": 0, "eval_batches": 2, "threads": 1, "peak_gflops": 50,
              "grad_clip": 0.5},
 "data": {"train": "shards/train.bin", "val": "shards/val.bin"},
 "checkpoint": {"interval": 3, "keep_last": 0}}
JSON
}
ckpt() { printf '%s/checkpoints/step-%08d' "$1" "$2"; }
# train NP OUT MODEL [flags]: NP 0 starts without mpirun.
train() {
  local np=$1 out=$2 model=$3
  shift 3
  if [ "$np" = 0 ]; then
    "$FIVEFOLD" train --config "run-$model.json" --out "$out" --no-progress "$@" >"$out.log" 2>&1
  else
    "$MPIEXEC" -np "$np" --oversubscribe "$FIVEFOLD" train --config "run-$model.json" --out "$out" --no-progress \
      "$@" >"$out.log" 2>&1
  fi || { cat "$out.log"; fail "training $out"; return 1; }
}
same() { # RUN REFERENCE STEP: losses up to STEP and the checkpoint at STEP
  local run=$1 ref=$2 step=$3
  $PY "$COMPARE" losses "$run" "$ref" 1e-5 || fail "$run: per-step losses differ from $ref"
  for f in model optimizer; do
    $PY "$COMPARE" tensors "$(ckpt "$run" "$step")/$f.safetensors" "$(ckpt "$ref" "$step")/$f.safetensors" 1e-5 1e-6 ||
      fail "$run: $f.safetensors at step $step differs from $ref"
  done
}

case "$MODE" in
  golden-dense | golden-moe)
    model=${MODE#golden-}
    run_config "$model" 5
    # 1 rank x 4 micro-batches of 2 = the global batch of every DP run below.
    train 0 one "$model" --grad-accum 4 || exit 1
    train 2 dp2 "$model" --grad-accum 2 && same dp2 one 5
    train 4 dp4 "$model" --grad-accum 1 --bucket-mb 0.004 && same dp4 one 5
    train 2 zero2 "$model" --grad-accum 2 --distributed-optimizer --bucket-mb 0.01 && same zero2 one 5
    grep -q "parallel dp 2 .*ZeRO-1" zero2.log || fail "the ZeRO-1 run's banner does not say so"
    grep -q "hidden behind backward" dp2.log || fail "the DP run does not report the hidden reduction time"
    # Only rank 0 prints: one banner, one log line per step.
    [ "$(grep -c '^fivefold train:' dp4.log)" -eq 1 ] || fail "dp4 printed the banner more than once"
    [ "$(grep -c '^step ' dp4.log)" -eq 5 ] || fail "dp4 printed $(grep -c '^step ' dp4.log) step lines, expected 5"
    ;;
  resume)
    run_config moe 5
    train 0 one moe --grad-accum 4 || exit 1
    train 2 zero2 moe --grad-accum 2 --distributed-optimizer || exit 1
    train 2 plain2 moe --grad-accum 2 --resume "$(ckpt zero2 3)" && same plain2 one 5
    train 4 zero4 moe --grad-accum 1 --distributed-optimizer --resume "$(ckpt one 3)" && same zero4 one 5
    # A dp that disagrees with the world is refused with a clear message.
    if "$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train --config run-moe.json --out bad --dp 4 >bad.log 2>&1; then
      fail "--dp 4 on 2 ranks was accepted"
    fi
    grep -q "parallel.dp (--dp) is 4 but the job has 2 rank" bad.log || { cat bad.log; fail "no clear message for --dp 4 on 2 ranks"; }
    ;;
  kill)
    run_config moe 100000
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
    for _ in $(seq 1 300); do
      kill -0 "$BG_PID" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$BG_PID" 2>/dev/null; then
      fail "the job still runs 30 s after rank 1 was killed"
    else
      wait "$BG_PID"
      status=$?
      BG_PID=
    fi
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
if [ "$failures" -gt 0 ]; then
  echo "dp_test $MODE: $failures failure(s)"
  exit 1
fi
echo "dp_test $MODE: PASS"
