#!/usr/bin/env bash
# `fivefold import` end to end: a model trained here (BPE tokenizer) is
# exported, imported, and exported again to the same bytes (model.safetensors,
# config.json, tokenizer.json); the imported run samples exactly what the
# original samples, fine-tunes with `train --resume` on the user's data,
# upcycles to an MoE that trains on; a GPT-2 makes the same round trip; usage
# errors and an --out that already holds checkpoints are refused.
# Usage: import_cli_test.sh path/to/fivefold
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MODE=one-process
# shellcheck source=../parallel/lib.sh
. "$(dirname "$0")/../parallel/lib.sh"
work_dir import-cli

expect 0 "--format hf" "--model DIR" "--out RUN" "--tokenizer FILE" "upcycle" -- "$FIVEFOLD" import --help
expect 0 "import" -- "$FIVEFOLD" --help
expect 2 "fivefold import:" "--model" -- "$FIVEFOLD" import --format hf --out x
expect 2 "fivefold import:" "unknown format 'gguf'" -- "$FIVEFOLD" import --format gguf --model x --out y
expect 1 "fivefold import:" "nothing/config.json" -- "$FIVEFOLD" import --format hf --model nothing --out y

for i in $(seq 1 200); do echo "$i And God said, Let there be light: and there was light. And God saw the light."; done >text.txt
expect 0 "BPE" -- "$FIVEFOLD" tokenize --vocab-size 300 --input text.txt --out bpe --val-fraction 0.1

train_run() { # NAME MODEL_JSON
  cat >"$1.json" <<JSON
{"model": $2,
 "training": {"micro_batch_size": 2, "seq_len": 16, "steps": 3, "lr": 0.01, "warmup_steps": 1, "log_interval": 3,
              "eval_interval": 0, "eval_batches": 1, "threads": 1, "peak_gflops": 100},
 "data": {"train": "bpe/train.bin", "val": "bpe/val.bin", "tokenizer": "bpe/tokenizer.json"},
 "out": "$1"}
JSON
  expect 0 "step" -- "$FIVEFOLD" train --config "$1.json" --no-progress
}
train_run dense '{"model_type": "llama", "vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 32}'
train_run gpt2 '{"model_type": "gpt2", "vocab_size": 300, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 32}'

# --- export -> import -> export gives the same bytes
for m in dense gpt2; do
  expect 0 "" -- "$FIVEFOLD" export --format hf --checkpoint $m --out $m-hf
  expect 0 "1 file" "F32" "$WORK/$m-imported/run.json" -- "$FIVEFOLD" import --format hf --model $m-hf --out $m-imported
  expect 0 "" -- "$FIVEFOLD" export --format hf --checkpoint $m-imported --out $m-hf2
  for f in model.safetensors config.json tokenizer.json; do
    cmp -s $m-hf/$f $m-hf2/$f || fail "$m: export -> import -> export changed $f"
  done
  cmp -s bpe/tokenizer.json $m-imported/tokenizer.json || fail "$m: the run does not keep a copy of the tokenizer"
  a=$("$FIVEFOLD" sample --checkpoint $m --threads 1 --max-tokens 12 --prompt "And God" --temperature 0 2>/dev/null)
  b=$("$FIVEFOLD" sample --checkpoint $m-imported --threads 1 --max-tokens 12 --prompt "And God" --temperature 0 2>/dev/null)
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$m: the imported model samples '$b', the original '$a'"
done
grep -q '"GPT2LMHeadModel"' gpt2-hf/config.json || fail "the GPT-2 export is not a GPT2LMHeadModel"
expect 1 "fivefold import:" "already holds 1 checkpoint" -- "$FIVEFOLD" import --format hf --model dense-hf --out dense-imported

# --- fine-tune the imported run on the user's data, and upcycle it
R=(--resume --train-data bpe/train.bin --val-data bpe/val.bin --steps 2 --micro-batch-size 2 --seq-len 16
   --threads 1 --eval-windows 2 --peak-gflops 100 --no-progress)
expect 0 "step 2" -- "$FIVEFOLD" train --config dense-imported/run.json "${R[@]}"
ls -d dense-imported/checkpoints/step-00000002 >/dev/null 2>&1 || fail "the fine-tune wrote no step-2 checkpoint"
expect 0 "export   refused: the top-k routing weights are not renormalised (upcycle with --norm-topk-prob" -- "$FIVEFOLD" upcycle --checkpoint dense-imported --experts 4 --topk 2 --out moe
expect 0 "step 2" -- "$FIVEFOLD" train --config moe/run.json "${R[@]}"
ls -d moe/checkpoints/step-00000002 >/dev/null 2>&1 || fail "the upcycled import did not train"
expect 1 "GPT-2" -- "$FIVEFOLD" upcycle --checkpoint gpt2-imported --experts 4 --topk 2 --out gpt2-moe

finish import
