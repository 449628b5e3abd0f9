#!/usr/bin/env bash
# Prepares fivefold's default real corpus: the King James Bible (public
# domain) from Debian's bible-kjv package. Dumps the whole text with the
# `bible` command (Genesis 1:1 through Revelation 22:21, about 4.3 MB) to
# data/cache/kjv.txt, then tokenizes it twice:
#   data/cache/kjv-bytes/{train,val}.bin            byte-level (vocab 256)
#   data/cache/kjv-bpe<N>/{tokenizer.json,train,val.bin}  a byte-level BPE
#                                                    tokenizer of N ids trained
#                                                    on the training text
# The last 5% of the text is validation in both.
# Idempotent: each step is skipped when its output is already there and
# newer than the text.
# Usage: scripts/prepare-corpus.sh   (env BUILD=build-dir, default build;
#        BPE_VOCAB=N, default 4096, the vocabulary of configs/demo-moe.json)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BPE_VOCAB=${BPE_VOCAB:-4096}
CACHE=data/cache
TEXT=$CACHE/kjv.txt
SHARDS=$CACHE/kjv-bytes
BPE=$CACHE/kjv-bpe$BPE_VOCAB

mkdir -p "$CACHE"
if [ ! -s "$TEXT" ]; then
  if ! command -v bible >/dev/null 2>&1; then
    echo "prepare-corpus: the 'bible' command is missing; install Debian's bible-kjv package" >&2
    echo "                (scripts/install-deps.sh does it)" >&2
    exit 1
  fi
  # Pretty-printed form (book/chapter headings, numbered verses) with a fixed
  # line width so the text, and so the shards, are the same on every machine.
  COLUMNS=80 bible "Gen1:1-Rev22:21" </dev/null >"$TEXT.tmp"
  bytes=$(wc -c <"$TEXT.tmp")
  if [ "$bytes" -lt 4000000 ]; then
    echo "prepare-corpus: 'bible' printed only $bytes bytes (expected about 4.3 MB)" >&2
    rm -f "$TEXT.tmp"
    exit 1
  fi
  mv "$TEXT.tmp" "$TEXT"
  echo "prepare-corpus: wrote $TEXT ($bytes bytes)"
fi

need_fivefold() {
  if [ ! -x "$BUILD/fivefold" ]; then
    echo "prepare-corpus: $BUILD/fivefold is missing; run 'make' first" >&2
    exit 1
  fi
}

if [ ! -s "$SHARDS/train.bin" ] || [ ! -s "$SHARDS/val.bin" ] || [ "$TEXT" -nt "$SHARDS/train.bin" ]; then
  need_fivefold
  "$BUILD/fivefold" tokenize --byte-level --input "$TEXT" --out "$SHARDS" --val-fraction 0.05
fi
echo "prepare-corpus: byte-level corpus ready in $SHARDS (train.bin, val.bin)"

# The BPE tokenizer is trained once (about a second) and cached with its
# shards; the shards are written after tokenizer.json, so their presence
# means the set is complete.
if [ ! -s "$BPE/train.bin" ] || [ ! -s "$BPE/val.bin" ] || [ ! -s "$BPE/tokenizer.json" ] ||
   [ "$TEXT" -nt "$BPE/train.bin" ] || [ "$BPE/tokenizer.json" -nt "$BPE/train.bin" ]; then
  need_fivefold
  "$BUILD/fivefold" tokenize --vocab-size "$BPE_VOCAB" --input "$TEXT" --out "$BPE" --val-fraction 0.05 2>&1 |
    { grep -v '^bpe: [0-9]* merges, last with count' || true; }
fi
echo "prepare-corpus: BPE corpus ready in $BPE (tokenizer.json, train.bin, val.bin; vocab $BPE_VOCAB)"
