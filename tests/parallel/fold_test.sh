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
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
COMPARE="$HERE/compare_runs.py"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-fold-test-XXXXXX")
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
 "num_attention_heads": 4, "intermediate_size": 64, "num_experts": 8, "num_experts_per_tok": 2,
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
# World rank 0 alone prints, one line per step, and the log's imbalance
# (tokens per expert, max / mean) is the one-rank run's.
one_printer() {
  [ "$(grep -c '^step ' "$1.log")" -eq 5 ] || fail "$1 printed $(grep -c '^step ' "$1.log") step lines, expected 5"
}
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
    one_printer ep4
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
    one_printer tp2cp2ep4
    ;;
  golden-pp)
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 4 pp2ep2 moe --grad-accum 2 --pp 2 --ep 2 && same pp2ep2 one-moe 5
    train 8 tp2pp2ep4 moe --grad-accum 2 --tp 2 --pp 2 --ep 4 && same tp2pp2ep4 one-moe 5
    one_printer tp2pp2ep4
    ;;
  reshard)
    train 0 one-moe moe --grad-accum 4 || exit 1
    train 4 ep4 moe --grad-accum 1 --ep 4 || exit 1
    train 4 resumed-ep2etp2 moe --grad-accum 1 --ep 2 --etp 2 --resume "$(ckpt ep4 3)" && same resumed-ep2etp2 one-moe 5
    train 0 resumed-one moe --grad-accum 4 --resume "$(ckpt ep4 3)" && same resumed-one one-moe 5
    ;;
  config)
    refused() { # NP MODEL EXPECTED-TEXT FLAGS...
      local np=$1 model=$2 text=$3
      shift 3
      if "$MPIEXEC" -np "$np" --oversubscribe "$FIVEFOLD" train --config "run-$model.json" --out bad --no-progress "$@" \
        >bad.log 2>&1; then
        fail "$* on $np ranks was accepted"
      fi
      grep -q "$text" bad.log || { cat bad.log; fail "no clear message for $* on $np ranks (expected '$text')"; }
    }
    refused 4 moe "etp 3 x ep 1 x pp 1 = 3 ranks does not divide" --etp 3
    refused 3 moe "parallel.ep 3 does not divide the model's 8 experts" --ep 3
    refused 3 moe "parallel.etp 3 does not divide the model's moe_intermediate_size 32" --etp 3
    refused 2 dense "needs a MoE model" --ep 2
    refused 2 moe "tp 2 x cp 2 x dp 1 x pp 1 = 4 ranks" --tp 2 --cp 2 --dp 1
    refused 4 moe "seq_len 12 is not divisible by 2 x cp = 8" --cp 4 --seq-len 12
    refused 2 moe "dispatcher must be" --ep 2 --dispatcher ring
    refused 2 moe "distributed_optimizer is not supported" --ep 2 --distributed-optimizer
    ;;
  *)
    echo "unknown mode $MODE"
    exit 2
    ;;
esac
if [ "$failures" -gt 0 ]; then
  echo "fold_test $MODE: $failures failure(s)"
  exit 1
fi
echo "fold_test $MODE: PASS"
