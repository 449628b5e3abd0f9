#!/usr/bin/env bash
# Scripts that remove output check their arguments first: a rejected value
# leaves the previous output (a marker file in it) untouched.
# usage: script_args_test.sh SOURCE_DIR BUILD_DIR
set -u
SRC=$1
BUILD=$2
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-script-args-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fail=0

# expect_rejected NAME MARKER CMD...: CMD must fail and MARKER must survive.
expect_rejected() {
  local name=$1 marker=$2
  shift 2
  if "$@" >"$WORK/$name.log" 2>&1; then
    echo "FAIL $name: the script accepted the value"
    fail=1
  elif [ ! -f "$marker" ] || [ "$(cat "$marker")" != keep ]; then
    echo "FAIL $name: $marker was removed or changed before the value was rejected"
    sed 's/^/    /' "$WORK/$name.log"
    fail=1
  else
    echo "ok   $name: $(head -n 1 "$WORK/$name.log")"
  fi
}

make_run() { # a previous run directory with a marker
  mkdir -p "$1/checkpoints"
  echo keep >"$1/marker"
  echo '{}' >"$1/metrics.jsonl"
}

make_run "$WORK/demo"
for ranks in 2 0 four; do
  expect_rejected "demo DEMO_RANKS=$ranks" "$WORK/demo/marker" \
    env BUILD="$BUILD" DEMO_RANKS=$ranks DEMO_OUT="$WORK/demo" bash "$SRC/scripts/demo.sh"
done
expect_rejected "demo DEMO_SAMPLE_TOKENS=x" "$WORK/demo/marker" \
  env BUILD="$BUILD" DEMO_SAMPLE_TOKENS=x DEMO_OUT="$WORK/demo" bash "$SRC/scripts/demo.sh"
# Arguments for `fivefold train` are its to check: the previous run is set
# aside while it trains and comes back when training fails.
expect_rejected "demo train --no-such-flag" "$WORK/demo/marker" \
  env BUILD="$BUILD" DEMO_RANKS=1 DEMO_OUT="$WORK/demo" bash "$SRC/scripts/demo.sh" --no-such-flag
if ls -d "$WORK"/demo.previous.* >/dev/null 2>&1; then
  echo "FAIL demo: the set-aside copy of the previous run was left behind"
  fail=1
fi

make_run "$WORK/up/pretrain"
for var in PRETRAIN_STEPS CONTINUE_STEPS THREADS EVAL_INTERVAL; do
  expect_rejected "upcycling $var=abc" "$WORK/up/pretrain/marker" \
    env FIVEFOLD="$BUILD/fivefold" OUT="$WORK/up" $var=abc bash "$SRC/bench/upcycling/run.sh"
done

make_run "$WORK/pa/run1.p1"
expect_rejected "plan_accuracy PLAN_ACC_PASSES=x" "$WORK/pa/run1.p1/marker" \
  env PLAN_ACC_KEEP="$WORK/pa" PLAN_ACC_PASSES=x bash "$SRC/bench/plan_accuracy.sh" "$BUILD"
expect_rejected "plan_accuracy STEPS=2" "$WORK/pa/run1.p1/marker" \
  env PLAN_ACC_KEEP="$WORK/pa" bash "$SRC/bench/plan_accuracy.sh" "$BUILD" 2
exit $fail
