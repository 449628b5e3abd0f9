#!/usr/bin/env bash
# CLI checks for `fivefold`: the help texts list every command and option,
# mistakes in configs, flags and tokenize arguments give
# "fivefold <command>: <message>" naming the file and field and exit
# non-zero, and a tiny tokenize + train round trip works end to end.
# Usage: cli_test.sh path/to/fivefold
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: the script changes directory
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-cli-test-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
failures=0

# fail, expect (tests/parallel/lib.sh)
# shellcheck source=../parallel/lib.sh
. "$(dirname "$0")/../parallel/lib.sh"

# --- help texts
expect 0 "train" "tokenize" "usage: fivefold" -- "$FIVEFOLD" --help
expect 2 "usage: fivefold" -- "$FIVEFOLD"
expect 2 "unknown command 'trian'" -- "$FIVEFOLD" trian
expect 0 "--config FILE" "--steps" "--lr" "--micro-batch-size" "--seq-len" "--grad-accum" "--seed" \
  "--log-interval" "--eval-interval" "--threads" "--peak-gflops" "--train-data" "--val-data" "--out" \
  -- "$FIVEFOLD" train --help
expect 0 "--byte-level" "--input" "--out" "--val-fraction" -- "$FIVEFOLD" tokenize --help

# --- tokenize: a small text, then its errors
for i in $(seq 1 400); do echo "In the beginning line $i: and the evening and the morning were the day $i."; done >"$WORK/text.txt"
expect 0 "train.bin" "val.bin" "vocab 256" -- "$FIVEFOLD" tokenize --byte-level --input "$WORK/text.txt" --out "$WORK/shards" --val-fraction 0.1
[ -s "$WORK/shards/train.bin" ] && [ -s "$WORK/shards/val.bin" ] || fail "tokenize wrote no shards"
[ "$(head -c 8 "$WORK/shards/train.bin")" = "FFTOKEN1" ] || fail "train.bin lacks the FFTOKEN1 magic"
# Every byte becomes one uint16 token, and validation starts at a line start.
text_bytes=$(wc -c <"$WORK/text.txt")
train_tokens=$(( ($(wc -c <"$WORK/shards/train.bin") - 64) / 2 ))
val_tokens=$(( ($(wc -c <"$WORK/shards/val.bin") - 64) / 2 ))
[ $((train_tokens + val_tokens)) -eq "$text_bytes" ] || fail "shards hold $train_tokens + $val_tokens tokens for $text_bytes bytes"
[ "$val_tokens" -gt $((text_bytes / 20)) ] && [ "$val_tokens" -lt $((text_bytes / 5)) ] || fail "val split of $val_tokens tokens is not ~10%"
[ "$(dd if="$WORK/shards/val.bin" bs=1 skip=64 count=1 2>/dev/null)" = "I" ] || fail "val.bin does not start at a line start"
expect nonzero "fivefold tokenize:" "$WORK/missing.txt" -- "$FIVEFOLD" tokenize --byte-level --input "$WORK/missing.txt" --out "$WORK/x"
expect nonzero "fivefold tokenize:" "--byte-level" -- "$FIVEFOLD" tokenize --input "$WORK/text.txt" --out "$WORK/x"
expect nonzero "fivefold tokenize:" "--val-fraction" -- "$FIVEFOLD" tokenize --byte-level --input "$WORK/text.txt" --out "$WORK/x" --val-fraction 1.5

# --- configs with mistakes
cat >"$WORK/model.json" <<'JSON'
{"model_type": "fivefold", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 1,
 "num_attention_heads": 2, "intermediate_size": 64, "num_experts": 2, "num_experts_per_tok": 1,
 "moe_intermediate_size": 32}
JSON
cat >"$WORK/typo.json" <<'JSON'
{"model": "model.json", "training": {"micro_batch_sise": 2}, "data": {"train": "shards/train.bin"}}
JSON
expect 1 "fivefold train:" "$WORK/typo.json" "training.micro_batch_sise" "did you mean 'micro_batch_size'" \
  -- "$FIVEFOLD" train --config "$WORK/typo.json"
cat >"$WORK/type.json" <<'JSON'
{"model": "model.json", "training": {"lr": "fast"}, "data": {"train": "shards/train.bin"}}
JSON
expect 1 "fivefold train:" "$WORK/type.json" "training.lr" "must be a number" -- "$FIVEFOLD" train --config "$WORK/type.json"
cat >"$WORK/path.json" <<'JSON'
{"model": "model.json", "data": {"train": "shards/nope.bin"}}
JSON
expect 1 "fivefold train:" "$WORK/path.json" "data.train" "shards/nope.bin" -- "$FIVEFOLD" train --config "$WORK/path.json"
expect 1 "fivefold train:" "$WORK/absent.json" -- "$FIVEFOLD" train --config "$WORK/absent.json"
expect 2 "fivefold train:" "no config" -- "$FIVEFOLD" train
cat >"$WORK/ok.json" <<'JSON'
{"model": "model.json",
 "training": {"micro_batch_size": 2, "seq_len": 16, "steps": 3, "log_interval": 1, "eval_interval": 2,
              "eval_batches": 2, "threads": 1, "peak_gflops": 50, "warmup_steps": 1},
 "data": {"train": "shards/train.bin", "val": "shards/val.bin"}}
JSON
expect 2 "fivefold train:" "--steps" "'abc'" -- "$FIVEFOLD" train --config "$WORK/ok.json" --steps abc
expect 2 "fivefold train:" "did you mean '--steps'" -- "$FIVEFOLD" train --config "$WORK/ok.json" --stpes 3
# A lower --lr than the file's min_lr: the error points at --min-lr, which fixes it.
sed 's/"warmup_steps": 1}/"warmup_steps": 1, "min_lr": 0.0003}/' "$WORK/ok.json" >"$WORK/minlr.json"
expect 1 "fivefold train:" "training.min_lr" "--min-lr" -- "$FIVEFOLD" train --config "$WORK/minlr.json" --lr 1e-4 --steps 1 --out "$WORK/minlr-bad"
expect 0 "step 1/1" -- "$FIVEFOLD" train --config "$WORK/minlr.json" --lr 1e-4 --min-lr 1e-5 --warmup-steps 0 --steps 1 --out "$WORK/minlr-ok"
grep -Eq '"min_lr":[[:space:]]*1e-05,' "$WORK/minlr-ok/config.json" || fail "config.json does not record --min-lr 1e-5 as 1e-05"
cat >"$WORK/section.json" <<'JSON'
{"model": "model.json", "trcae": {}, "data": {"train": "shards/train.bin"}}
JSON
expect 1 "fivefold train:" "unknown section \"trcae\"" "did you mean 'trace'" "checkpoint, parallel, trace, out" \
  -- "$FIVEFOLD" train --config "$WORK/section.json"

# --- a tiny run through the CLI, with overrides (relative to the current directory)
cd "$WORK" || exit 1
expect 0 "fivefold train:" "step 4/4 | loss" "eval step 4/4 | val loss" "done: 4 steps" "output run1" \
  -- "$FIVEFOLD" train --config ok.json --steps 4 --out run1 --seed 5
[ -s run1/config.json ] && [ -s run1/metrics.jsonl ] || fail "run files missing in run1/"
grep -q '"type":"eval"' run1/metrics.jsonl || fail "metrics.jsonl has no eval record"
expect 0 "step 2/2" -- "$FIVEFOLD" train --config=ok.json --steps=2 --train-data=shards/train.bin --val-data=shards/val.bin --out=run2

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all CLI checks passed"
