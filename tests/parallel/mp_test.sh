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
#   golden-tp     TP2 (dense, MoE)
#   golden-pp     PP2 1F1B (dense, MoE), PP2 GPipe (MoE), PP2 x vpp 2 interleaved (dense),
#                 PP4 with layers_per_stage 0,2,1,1 (dense: the first stage
#                 holds only the embedding)
#   golden-mixed  TP2 x PP2 (dense, MoE), TP2 x DP2 x PP2 on 8 ranks (dense,
#                 with the distributed optimizer)
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
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
COMPARE="$HERE/compare_runs.py"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-mp-test-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for i in $(seq 1 200); do
  echo "Line $i: in the beginning was the word, and the evening and the morning were day $i of $((i * 7 % 31))."
done >text.txt
"$FIVEFOLD" tokenize --byte-level --input text.txt --out shards --val-fraction 0.1 >/dev/null || { echo "FAIL: tokenize"; exit 1; }
cat >dense.json <<'JSON'
{"model_type": "fivefold", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "tie_word_embeddings": true}
JSON
cat >moe.json <<'JSON'
{"model_type": "fivefold", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 4,
 "num_attention_heads": 4, "intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 2,
 "moe_intermediate_size": 32, "moe_aux_loss_coeff": 0.01, "moe_z_loss_coeff": 0.001}
JSON
for model in dense moe; do
  cat >"run-$model.json" <<JSON
{"model": "$model.json",
 "training": {"micro_batch_size": 2, "seq_len": 16, "steps": 5, "lr": 0.003, "warmup_steps": 2,
              "log_interval": 1, "eval_interval": 0, "eval_batches": 2, "threads": 1, "peak_gflops": 50,
              "grad_clip": 0.5},
 "data": {"train": "shards/train.bin", "val": "shards/val.bin"},
 "checkpoint": {"interval": 3, "keep_last": 0}}
JSON
done
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
  fi || { tail -20 "$out.log"; fail "training $out"; return 1; }
}
same() { # RUN REFERENCE STEP: losses up to STEP and the checkpoint at STEP
  local run=$1 ref=$2 step=$3
  $PY "$COMPARE" losses "$run" "$ref" 1e-4 || fail "$run: per-step losses differ from $ref"
  for f in model optimizer; do
    $PY "$COMPARE" tensors "$(ckpt "$run" "$step")/$f.safetensors" "$(ckpt "$ref" "$step")/$f.safetensors" 1e-4 1e-5 ||
      fail "$run: $f.safetensors at step $step differs from $ref"
  done
}
# Only world rank 0 prints: one banner, one log line per step.
one_printer() {
  [ "$(grep -c '^fivefold train:' "$1.log")" -eq 1 ] || fail "$1 printed the banner more than once"
  [ "$(grep -c '^step ' "$1.log")" -eq 5 ] || fail "$1 printed $(grep -c '^step ' "$1.log") step lines, expected 5"
}

case "$MODE" in
  golden-tp)
    for model in dense moe; do
      train 0 one-$model $model --grad-accum 4 || exit 1
      train 2 tp2-$model $model --grad-accum 4 --tp 2 && same tp2-$model one-$model 5
    done
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
  reshard)
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 4 tp2pp2-moe moe --grad-accum 4 --tp 2 --pp 2 || exit 1
    train 0 resumed1-moe moe --grad-accum 4 --resume "$(ckpt tp2pp2-moe 3)" && same resumed1-moe one-moe 5
    train 4 resumed-dp4-moe moe --grad-accum 1 --distributed-optimizer --resume "$(ckpt tp2pp2-moe 3)" &&
      same resumed-dp4-moe one-moe 5
    ;;
  config)
    if "$MPIEXEC" -np 4 --oversubscribe "$FIVEFOLD" train --config run-dense.json --out bad --tp 2 --pp 2 --dp 2 \
      >bad.log 2>&1; then
      fail "tp 2 x pp 2 x dp 2 on 4 ranks was accepted"
    fi
    grep -q "tp 2 x pp 2 x dp 2 = 8 ranks" bad.log || { cat bad.log; fail "no clear message for tp2 x pp2 x dp2 on 4 ranks"; }
    if "$MPIEXEC" -np 3 --oversubscribe "$FIVEFOLD" train --config run-dense.json --out bad2 --pp 2 >bad2.log 2>&1; then
      fail "pp 2 on 3 ranks was accepted"
    fi
    grep -q "do not divide the job's 3 rank" bad2.log || { cat bad2.log; fail "no clear message for pp 2 on 3 ranks"; }
    ;;
  *)
    echo "unknown mode $MODE"
    exit 2
    ;;
esac
if [ "$failures" -gt 0 ]; then
  echo "mp_test $MODE: $failures failure(s)"
  exit 1
fi
echo "mp_test $MODE: PASS"
