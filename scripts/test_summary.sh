#!/usr/bin/env bash
# The end of `make test`: what was NOT tested, and why, so that a run with a
# missing dependency cannot pass quietly with a layer untested.
#
# usage: test_summary.sh BUILD_DIR...
# For each build directory that holds a ctest run (BUILD_DIR/ctest.log,
# the console output `make test` keeps, and ctest's own
# Testing/Temporary/LastTest.log), lists
#   * tests ctest reports as skipped, each with the SKIP line it printed;
#   * checks skipped inside tests that passed otherwise (a "SKIP (missing
#     dependency: ...)" line in a passing test's output);
#   * layers CMake did not register at all (BUILD_DIR/untested-layers/*.txt,
#     written at configure time, e.g. the fuzz tests without clang);
#   * tests that passed only on a retry (a "RETRY:" line in their output).
# A skip is a missing dependency when its line says "missing dependency"
# (what scripts/install-deps.sh should have installed); other skips (eBPF not
# permitted in a container, no quiet run for a timing check) are properties
# of the machine and are listed but never fail.
# Exit status: 1 when CI=true and anything was untested for a missing
# dependency; 0 otherwise.
set -u
missing=0
other=0
retry_lines=()
for build in "$@"; do
  [ -f "$build/ctest.log" ] || continue
  log="$build/Testing/Temporary/LastTest.log"
  # The test names ctest did not run to completion as passes or failures.
  mapfile -t skipped < <(sed -n 's/^[[:space:]]*[0-9][0-9]* - \([^ ]*\) (Skipped)$/\1/p' "$build/ctest.log")
  # name<TAB>line for every SKIP line of every test's output.
  mapfile -t lines < <(awk '
    / Testing: / { name = $NF; next }
    /^<end of output>/ { name = ""; next }
    name != "" && /SKIP/ { print name "\t" $0 }' "$log" 2>/dev/null)
  # Tests that passed only on a second attempt say so with a RETRY: line.
  while IFS= read -r l; do
    [ -n "$l" ] && retry_lines+=("  $build: ${l%%$'\t'*}: ${l#*$'\t'}")
  done < <(awk '
    / Testing: / { name = $NF; next }
    /^<end of output>/ { name = ""; next }
    name != "" && /RETRY:/ { print name "\t" $0 }' "$log" 2>/dev/null)
  for t in "${skipped[@]}"; do
    reason=$(printf '%s\n' "${lines[@]}" | awk -F'\t' -v t="$t" '$1 == t { print $2; exit }')
    [ -n "$reason" ] || reason="(the test printed no SKIP line)"
    if grep -q "missing dependency" <<<"$reason"; then
      missing_lines+=("  $build: $t skipped: $reason")
      missing=$((missing + 1))
    else
      other_lines+=("  $build: $t skipped: $reason")
      other=$((other + 1))
    fi
  done
  for l in "${lines[@]}"; do
    t=${l%%$'\t'*}
    reason=${l#*$'\t'}
    printf '%s\n' "${skipped[@]}" | grep -qx "$t" && continue
    grep -q "missing dependency" <<<"$reason" || continue
    missing_lines+=("  $build: $t passed without a check: $reason")
    missing=$((missing + 1))
  done
  for f in "$build"/untested-layers/*.txt; do
    [ -s "$f" ] || continue
    while IFS= read -r l; do
      missing_lines+=("  $build: not registered: $l")
      missing=$((missing + 1))
    done <"$f"
  done
done

echo
echo "=== what make test did not test ==="
if [ $missing -eq 0 ] && [ $other -eq 0 ]; then
  echo "  nothing: every registered test ran, and every layer is registered"
fi
if [ ${#retry_lines[@]} -gt 0 ]; then
  echo "retried (the second attempt counted):"
  printf '%s\n' "${retry_lines[@]}"
fi
if [ $other -gt 0 ]; then
  echo "skipped for reasons of this machine (not a missing dependency):"
  printf '%s\n' "${other_lines[@]}"
fi
if [ $missing -gt 0 ]; then
  echo "!!! UNTESTED FOR A MISSING DEPENDENCY ($missing): install it (scripts/install-deps.sh) and run make test again:"
  printf '%s\n' "${missing_lines[@]}"
  if [ "${CI:-}" = true ]; then
    echo "!!! CI=true: a missing dependency is a failure"
    exit 1
  fi
fi
exit 0
