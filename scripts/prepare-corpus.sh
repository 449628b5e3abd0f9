#!/usr/bin/env bash
# Prepares fivefold's default real corpus: the King James Bible (public
# domain) from Debian's bible-kjv package. Dumps the whole text with the
# `bible` command (Genesis 1:1 through Revelation 22:21, about 4.3 MB) to
# data/cache/kjv.txt, then tokenizes it byte-level into
# data/cache/kjv-bytes/{train,val}.bin (the last 5% is validation).
# Idempotent: each step is skipped when its output is already there.
# Usage: scripts/prepare-corpus.sh   (env BUILD=build-dir, default build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
CACHE=data/cache
TEXT=$CACHE/kjv.txt
SHARDS=$CACHE/kjv-bytes

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

if [ ! -s "$SHARDS/train.bin" ] || [ ! -s "$SHARDS/val.bin" ] || [ "$TEXT" -nt "$SHARDS/train.bin" ]; then
  if [ ! -x "$BUILD/fivefold" ]; then
    echo "prepare-corpus: $BUILD/fivefold is missing; run 'make' first" >&2
    exit 1
  fi
  "$BUILD/fivefold" tokenize --byte-level --input "$TEXT" --out "$SHARDS" --val-fraction 0.05
fi
echo "prepare-corpus: corpus ready in $SHARDS (train.bin, val.bin)"
