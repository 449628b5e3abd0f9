#!/usr/bin/env bash
# scripts/test_summary.sh, the end of `make test`, on made-up ctest runs:
# a test skipped for a missing dependency, a check skipped inside a test
# that passed, and a layer CMake did not register are reported as untested
# and fail under CI=true; a skip that is a property of the machine (eBPF not
# permitted, no quiet run) and a test that passed on a retry are listed and
# never fail; a clean run says so.
# usage: summary_test.sh SUMMARY_SCRIPT
set -u
summary=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-summary-XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# fake_build DIR: a build directory as ctest leaves it; tests given as
# NAME:STATUS:LINE (STATUS Passed or Skipped, LINE what the test printed).
fake_build() {
  local dir=$1 t name status line i=0
  shift
  mkdir -p "$dir/Testing/Temporary" "$dir/untested-layers"
  : >"$dir/ctest.log"
  : >"$dir/Testing/Temporary/LastTest.log"
  local skipped=()
  for t in "$@"; do
    i=$((i + 1))
    IFS=: read -r name status line <<<"$t"
    printf '%d/%d Testing: %s\n%d/%d Test: %s\nOutput:\n----\n%s\n<end of output>\nTest Passed.\n\n' \
      "$i" "$#" "$name" "$i" "$#" "$name" "$line" >>"$dir/Testing/Temporary/LastTest.log"
    printf '%d/%d Test #%d: %s ....   %s\n' "$i" "$#" "$i" "$name" "$status" >>"$dir/ctest.log"
    [ "$status" = Skipped ] && skipped+=("$(printf '\t%3d - %s (Skipped)' "$i" "$name")")
  done
  if [ ${#skipped[@]} -gt 0 ]; then
    printf '\nThe following tests did not run:\n' >>"$dir/ctest.log"
    printf '%s\n' "${skipped[@]}" >>"$dir/ctest.log"
  fi
}

# expect NAME CI_RC PATTERN... : the summary of $work/NAME under CI=true
# exits CI_RC and prints every PATTERN; without CI it exits 0.
expect() {
  local name=$1 want=$2 p
  shift 2
  CI=true bash "$summary" "$work/$name" >"$work/$name.out" 2>&1
  local rc=$?
  [ $rc = "$want" ] || { cat "$work/$name.out"; fail "$name: exit $rc under CI=true, expected $want"; }
  env -u CI bash "$summary" "$work/$name" >/dev/null 2>&1 || fail "$name: fails without CI=true"
  for p in "$@"; do
    grep -q -- "$p" "$work/$name.out" || { cat "$work/$name.out"; fail "$name: no '$p' in the summary"; }
  done
}

fake_build "$work/clean" "a.one:Passed:ok" "a.two:Passed:all checks passed"
expect clean 0 "nothing: every registered test ran"

fake_build "$work/torch" "a.one:Passed:ok" \
  "torch_ref.x:Skipped:SKIP (missing dependency: python3-torch): PyTorch is not installed"
expect torch 1 "UNTESTED FOR A MISSING DEPENDENCY" "torch_ref.x skipped: SKIP (missing dependency: python3-torch)"

fake_build "$work/ebpf" "trace.ebpf:Skipped:SKIP (not available here): bpftrace cannot run even a BEGIN probe" \
  "trace.pipeline_delay:Skipped:SKIP: no quiet run"
expect ebpf 0 "reasons of this machine" "trace.ebpf skipped: SKIP (not available here)" "trace.pipeline_delay skipped"

fake_build "$work/partial" "trace.pipeline:Passed:SKIP (missing dependency: graphviz): dot is not installed"
expect partial 1 "trace.pipeline passed without a check: SKIP (missing dependency: graphviz)"

fake_build "$work/retry" "trace.ebpf:Passed:RETRY: trace.ebpf: events were lost; recording once more"
expect retry 0 "retried" "trace.ebpf: RETRY: trace.ebpf: events were lost"

fake_build "$work/layer" "a.one:Passed:ok"
echo "fuzz.* (the libFuzzer tests): no clang (missing dependency: clang libclang-rt-dev)" \
  >"$work/layer/untested-layers/fuzz.txt"
expect layer 1 "not registered: fuzz"

if [ $failures -gt 0 ]; then
  echo "summary_test: $failures failure(s)"
  exit 1
fi
echo "summary_test: all cases as expected"
