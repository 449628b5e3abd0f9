#!/usr/bin/env bash
# CLI checks for the commands around a trained model: `fivefold tokenize`
# with a BPE tokenizer (trained, then reused with --tokenizer: identical
# shards), a tiny training run on those shards that records the tokenizer in
# its checkpoint, `fivefold sample` (help, prompt echo, greedy and seeded
# reproducibility, option errors) and `fivefold export` (help, usage errors,
# the BPE tokenizer copied byte for byte with its <|endoftext|> id as
# bos/eos); the checkpoint's stored tokenizer (a moved run still exports
# and samples, a rebuilt file at the old path is not used, a changed copy is
# refused, --tokenizer overrides it) and tokenizers that do not match the
# shards refused. Usage: cli_test.sh path/to/fivefold
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-export-cli-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failures=0

# fail, expect (tests/parallel/lib.sh)
# shellcheck source=../parallel/lib.sh
. "$(dirname "$0")/../parallel/lib.sh"

# u32 little-endian at byte offset $2 of file $1
u32() { od -An -tu4 -j "$2" -N 4 "$1" | tr -d ' '; }

# --- help texts
expect 0 "sample" "export" -- "$FIVEFOLD" --help
expect 0 "--byte-level" "--vocab-size N" "--tokenizer FILE" "--input" "--out" "--val-fraction" -- "$FIVEFOLD" tokenize --help
expect 0 "--checkpoint DIR" "--prompt TEXT" "--max-tokens" "--temperature" "--top-k" "--top-p" "--seed" \
  "--threads" "--context" "--tokenizer" "--no-echo" -- "$FIVEFOLD" sample --help
expect 0 "--format hf" "--checkpoint DIR" "--out DIR" "docs/export.md" -- "$FIVEFOLD" export --help

# --- tokenize with BPE
for i in $(seq 1 300); do
  echo "$i And God said, Let the waters bring forth abundantly the moving creature that hath life, and fowl that may fly."
done >"$WORK/a.txt"
for i in $(seq 1 200); do echo "$i And the evening and the morning were the fifth day; and God saw that it was good."; done >"$WORK/b.txt"
expect 0 "BPE" "vocab 300" "tokenizer.json" "val.bin" -- \
  "$FIVEFOLD" tokenize --vocab-size 300 --input "$WORK/a.txt" "$WORK/b.txt" --out "$WORK/bpe" --val-fraction 0.1
for f in tokenizer.json train.bin val.bin; do [ -s "$WORK/bpe/$f" ] || fail "tokenize --vocab-size wrote no $f"; done
[ "$(u32 "$WORK/bpe/train.bin" 24)" = 300 ] || fail "train.bin records vocab $(u32 "$WORK/bpe/train.bin" 24), expected 300"
train_tokens=$(( ($(wc -c <"$WORK/bpe/train.bin") - 64) / 2 ))
text_bytes=$(( $(wc -c <"$WORK/a.txt") + $(wc -c <"$WORK/b.txt") ))
[ "$train_tokens" -lt $((text_bytes / 2)) ] || fail "BPE compressed $text_bytes bytes only to $train_tokens train tokens"
# The same tokenizer, loaded, gives the same shards.
expect 0 "BPE" -- "$FIVEFOLD" tokenize --tokenizer "$WORK/bpe/tokenizer.json" --input "$WORK/a.txt" "$WORK/b.txt" \
  --out "$WORK/again" --val-fraction 0.1
cmp -s "$WORK/bpe/train.bin" "$WORK/again/train.bin" || fail "--tokenizer gave a different train.bin"
cmp -s "$WORK/bpe/val.bin" "$WORK/again/val.bin" || fail "--tokenizer gave a different val.bin"
# Without validation text, an old val.bin must not stay next to the new train.bin.
expect 0 "removed the old" -- "$FIVEFOLD" tokenize --tokenizer "$WORK/bpe/tokenizer.json" --input "$WORK/a.txt" \
  --out "$WORK/again" --val-fraction 0
[ ! -e "$WORK/again/val.bin" ] || fail "a stale val.bin survived --val-fraction 0"
expect 2 "fivefold tokenize:" "--vocab-size" "257" -- "$FIVEFOLD" tokenize --vocab-size 100 --input "$WORK/a.txt" --out "$WORK/x"
expect 2 "fivefold tokenize:" "exactly one tokenizer" -- "$FIVEFOLD" tokenize --byte-level --vocab-size 300 --input "$WORK/a.txt" --out "$WORK/x"
expect nonzero "fivefold tokenize:" "$WORK/none.json" -- "$FIVEFOLD" tokenize --tokenizer "$WORK/none.json" --input "$WORK/a.txt" --out "$WORK/x"

# --- a tiny model trained on the BPE shards, checkpointed with its tokenizer
cat >"$WORK/run.json" <<JSON
{
  "model": {"model_type": "fivefold", "vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64,
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
  "training": {"micro_batch_size": 4, "seq_len": 32, "steps": 6, "lr": 0.01, "warmup_steps": 1,
               "log_interval": 3, "eval_interval": 0, "eval_batches": 1, "threads": 1, "peak_gflops": 100},
  "data": {"train": "bpe/train.bin", "val": "bpe/val.bin", "tokenizer": "bpe/tokenizer.json"},
  "checkpoint": {"interval": 3, "keep_last": 2},
  "out": "run"
}
JSON
expect 0 "tokens   $WORK/bpe/tokenizer.json" -- "$FIVEFOLD" train --config "$WORK/run.json" --no-progress
ls -d "$WORK"/run/checkpoints/step-* >/dev/null 2>&1 || fail "training wrote no checkpoint"

# --- sample
S=("$FIVEFOLD" sample --checkpoint "$WORK/run" --threads 1 --max-tokens 24)
expect 0 "And God said" "sample: " "tokens/s" "context 32" -- "${S[@]}" --prompt "And God said"
greedy1=$("${S[@]}" --prompt "And God" --temperature 0 2>/dev/null)
greedy2=$("${S[@]}" --prompt "And God" --temperature 0 --seed 99 2>/dev/null)
[ "$greedy1" = "$greedy2" ] || fail "greedy sampling depends on the seed"
# Within the context the key/value cache picks what the full re-run picks.
nocache=$("${S[@]}" --prompt "And God" --temperature 0 --no-kv-cache 2>/dev/null)
[ "$greedy1" = "$nocache" ] || fail "--no-kv-cache gives other tokens than the cache: '$nocache' vs '$greedy1'"
expect 0 "(no kv cache)" -- "${S[@]}" --prompt "And" --no-kv-cache
case "$greedy1" in "And God"?*) ;; *) fail "greedy output does not continue the echoed prompt: '$greedy1'" ;; esac
s1=$("${S[@]}" --prompt "And" --temperature 1.5 --top-p 1 --seed 1 2>/dev/null)
s1b=$("${S[@]}" --prompt "And" --temperature 1.5 --top-p 1 --seed 1 2>/dev/null)
s2=$("${S[@]}" --prompt "And" --temperature 1.5 --top-p 1 --seed 2 2>/dev/null)
[ "$s1" = "$s1b" ] || fail "the same seed gave two different samples"
[ "$s1" != "$s2" ] || fail "seeds 1 and 2 gave the same sample"
noecho=$("${S[@]}" --prompt "And God" --temperature 0 --no-echo 2>/dev/null)
[ "And God$noecho" = "$greedy1" ] || fail "--no-echo output is not the continuation alone"
expect 0 "step-0000000" -- "${S[@]}" --prompt "" --max-tokens 4 --top-k 5
expect 2 "fivefold sample:" "top_p" -- "${S[@]}" --prompt "x" --top-p 0
expect 2 "fivefold sample:" "temperature" -- "${S[@]}" --prompt "x" --temperature -1
expect 2 "fivefold sample:" "--prompt" -- "$FIVEFOLD" sample --checkpoint "$WORK/run"
expect 2 "fivefold sample:" "unknown option '--topk'" -- "${S[@]}" --prompt "x" --topk 3
expect 1 "fivefold sample:" "max_position_embeddings" -- "${S[@]}" --prompt "x" --context 65
expect 1 "fivefold sample:" "$WORK/nothing" -- "$FIVEFOLD" sample --checkpoint "$WORK/nothing" --prompt "x"

# --- export
expect 2 "fivefold export:" "--format hf" -- "$FIVEFOLD" export --checkpoint "$WORK/run" --out "$WORK/hf"
expect 2 "fivefold export:" "unknown format 'onnx'" -- "$FIVEFOLD" export --format onnx --checkpoint "$WORK/run" --out "$WORK/hf"
expect 2 "fivefold export:" "--out" -- "$FIVEFOLD" export --format hf --checkpoint "$WORK/run"
expect 1 "fivefold export:" "$WORK/nothing" -- "$FIVEFOLD" export --format hf --checkpoint "$WORK/nothing" --out "$WORK/hf"
expect 0 "MixtralForCausalLM" "step 6" -- "$FIVEFOLD" export --format hf --checkpoint "$WORK/run" --out "$WORK/hf"
cmp -s "$WORK/bpe/tokenizer.json" "$WORK/hf/tokenizer.json" || fail "export did not copy the BPE tokenizer.json"
eot=$(( $(u32 "$WORK/bpe/train.bin" 64) & 0xffff )) # every part starts with <|endoftext|>
grep -q "\"eos_token_id\":[[:space:]]*$eot," "$WORK/hf/config.json" || fail "config.json lacks eos_token_id $eot"
grep -q '"model_type":[[:space:]]*"mixtral"' "$WORK/hf/config.json" || fail "config.json is not mixtral"

# --- the checkpoint carries its tokenizer: a copy and its CRC-32
last=$(ls -d "$WORK"/run/checkpoints/step-* | tail -n 1)
cmp -s "$WORK/bpe/tokenizer.json" "$last/tokenizer.json" || fail "the checkpoint holds no copy of the tokenizer"
grep -q '"tokenizer":[[:space:]]*"tokenizer.json"' "$last/state.json" || fail "state.json does not name the stored tokenizer"
grep -q '"crc32":[[:space:]]*"[0-9a-f]\{8\}"' "$last/state.json" || fail "state.json records no CRC-32"
# A moved run samples and exports with it, even with the original tokenizer gone.
mv "$WORK/run" "$WORK/moved-run"
mv "$WORK/bpe/tokenizer.json" "$WORK/bpe/tokenizer.json.away"
expect 0 "MixtralForCausalLM" -- "$FIVEFOLD" export --format hf --checkpoint "$WORK/moved-run" --out "$WORK/hf-moved"
cmp -s "$WORK/bpe/tokenizer.json.away" "$WORK/hf-moved/tokenizer.json" || fail "the moved run exported another tokenizer"
moved=$("$FIVEFOLD" sample --checkpoint "$WORK/moved-run" --threads 1 --max-tokens 24 --prompt "And God" \
  --temperature 0 2>/dev/null)
[ "$moved" = "$greedy1" ] || fail "the moved run samples differently: '$moved' vs '$greedy1'"
# A tokenizer rebuilt at the original path is not used: the stored copy is.
"$FIVEFOLD" tokenize --vocab-size 280 --input "$WORK/b.txt" --out "$WORK/bpe-other" >/dev/null 2>&1
cp "$WORK/bpe-other/tokenizer.json" "$WORK/bpe/tokenizer.json"
expect 0 -- "$FIVEFOLD" export --format hf --checkpoint "$WORK/moved-run" --out "$WORK/hf-moved"
cmp -s "$WORK/bpe/tokenizer.json.away" "$WORK/hf-moved/tokenizer.json" || fail "export used the tokenizer rebuilt at the old path"
# A tampered stored copy is refused by both, naming the file; --tokenizer overrides it.
last=$(ls -d "$WORK"/moved-run/checkpoints/step-* | tail -n 1)
cp "$WORK/bpe-other/tokenizer.json" "$last/tokenizer.json"
expect 1 "fivefold export:" "$last/tokenizer.json does not match" "CRC-32" -- \
  "$FIVEFOLD" export --format hf --checkpoint "$last" --out "$WORK/hf-bad"
expect 1 "fivefold sample:" "$last/tokenizer.json does not match" -- \
  "$FIVEFOLD" sample --checkpoint "$last" --prompt "And" --max-tokens 2
expect 0 -- "$FIVEFOLD" export --format hf --checkpoint "$last" --out "$WORK/hf-given" --tokenizer "$WORK/bpe/tokenizer.json.away"
cmp -s "$WORK/bpe/tokenizer.json.away" "$WORK/hf-given/tokenizer.json" || fail "export --tokenizer did not use the given file"
expect 0 -- "$FIVEFOLD" sample --checkpoint "$last" --prompt "And" --max-tokens 2 --tokenizer "$WORK/bpe/tokenizer.json.away"
rm "$last/tokenizer.json"
expect 1 "fivefold export:" "stored tokenizer is missing" -- "$FIVEFOLD" export --format hf --checkpoint "$last" --out "$WORK/hf-bad"
mv "$WORK/bpe/tokenizer.json.away" "$WORK/bpe/tokenizer.json"
expect 0 "--tokenizer FILE" -- "$FIVEFOLD" export --help

# --- a tokenizer that does not match the shards is refused, naming both files and sizes
"$FIVEFOLD" tokenize --byte-level --input "$WORK/a.txt" --out "$WORK/bytes" >/dev/null 2>&1
sed 's#"bpe/train.bin", "val": "bpe/val.bin"#"bytes/train.bin", "val": "bytes/val.bin"#; s#"out": "run"#"out": "run-x"#' \
  "$WORK/run.json" >"$WORK/run-bytes-bpe.json"
expect 1 "$WORK/bytes/train.bin has a vocabulary of 256 ids" "$WORK/bpe/tokenizer.json has 300" -- \
  "$FIVEFOLD" train --config "$WORK/run-bytes-bpe.json" --no-progress
sed 's#, "tokenizer": "bpe/tokenizer.json"##; s#"out": "run"#"out": "run-x"#' "$WORK/run.json" >"$WORK/run-bpe-bytes.json"
expect 1 "$WORK/bpe/train.bin has a vocabulary of 300 ids" "byte-level" -- \
  "$FIVEFOLD" train --config "$WORK/run-bpe-bytes.json" --no-progress
[ ! -d "$WORK/run-x/checkpoints" ] || fail "a refused run trained"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all export CLI checks passed"
