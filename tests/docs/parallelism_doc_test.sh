#!/usr/bin/env bash
# docs/parallelism.md keeps up with the runtime it describes: every
# parallel.* option `fivefold train --help` lists is named there, every
# multi-rank test script under tests/parallel/ is named there (a layout or
# feature with a test is one the page must describe), and the README links
# it. usage: parallelism_doc_test.sh SOURCE_DIR FIVEFOLD
set -u
SRC=$1
FIVEFOLD=$2
DOC=$SRC/docs/parallelism.md
fail=0
[ -s "$DOC" ] || { echo "FAIL: $DOC is missing"; exit 1; }
grep -q '(docs/parallelism.md)\|`docs/parallelism.md`' "$SRC/README.md" || { echo "FAIL: README.md does not link docs/parallelism.md"; fail=1; }
fields=$("$FIVEFOLD" train --help | grep -o '\[parallel\.[a-z_]*\]' | sed 's/\[parallel\.//; s/\]//' | sort -u)
[ -n "$fields" ] || { echo "FAIL: train --help lists no parallel.* option"; exit 1; }
for f in $fields; do
  flag="--${f//_/-}"
  if ! grep -q -- "\`$f\`\|$flag" "$DOC"; then
    echo "FAIL: parallel.$f ($flag) is not described in docs/parallelism.md"
    fail=1
  fi
done
for t in "$SRC"/tests/parallel/*_test.sh; do
  name=$(basename "$t")
  grep -q "$name" "$DOC" || { echo "FAIL: docs/parallelism.md does not name tests/parallel/$name"; fail=1; }
done
[ "$fail" = 0 ] && echo "docs/parallelism.md names every parallel option ($(echo $fields | wc -w)) and test script"
exit $fail
