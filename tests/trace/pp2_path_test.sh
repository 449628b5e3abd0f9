#!/usr/bin/env bash
# `trace analyze` on real PP2 training traces (fivefold train --pp 2 --trace
# under mpirun) with a straggler of known cause, injected by the trace
# session's test hook (FIVEFOLD_TEST_DELAY_ACTION, train/trace_session.h):
#   recv   rank 1's backward of micro-batch 0 in iteration 1 sleeps DELAY.
#          Rank 1 posted the receive of micro-batch 1's activations before
#          that backward, so the receive's span covers it: the critical
#          path must run through the backward (not through the receive,
#          which only waited once the backward and its send were done) and
#          name rank 1 as the straggler for it;
#   send   the send of that backward's gradient sleeps DELAY instead: the
#          same receive's span covers the send, whose time must count as
#          exposed SEND_GRAD, not as exposed RECV_ACT;
#   sync   rank 0's last backward (micro-batch 3) in iteration 1 sleeps
#          DELAY, and rank 1's OPTIM 5 ms after its work (so that rank 1
#          ends the iteration). Rank 1's OPTIM waits inside the gradient
#          norm's all-gather for rank 0: the path must end in rank 1's
#          OPTIM, cross the all-gather to rank 0 (a sync edge) and run
#          through rank 0's delayed backward, naming rank 0, with no long
#          OPTIM of rank 1 on it.
# DELAY is 1 s against actions of a fraction of a ms and against the stalls
# of a heavily loaded machine (seen up to ~0.2 s), so the machine's load
# cannot take the verdict (the bounds below are a quarter of it).
# usage: pp2_path_test.sh FIVEFOLD MPIEXEC
set -u
FIVEFOLD=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
MPIEXEC=$2
# shellcheck source=tests/parallel/lib.sh
. "$(dirname "$0")/../parallel/lib.sh"
work_dir pp2-path

DELAY=1000
BOUND=250
make_corpus
moe_json moe.json 2 4
run_json run.json moe.json steps=3 global_batch_size=8 interval=0 keep_last=1

# traced NAME DELAYS: the PP2 run with the injected delays, analyzed
# (iteration 1, every segment of the path) into NAME.txt.
traced() {
  FIVEFOLD_TEST_DELAY_ACTION=$2 "$MPIEXEC" -np 2 --oversubscribe "$FIVEFOLD" train --config run.json --pp 2 \
    --out "$1" --no-progress --trace "$1.json" >"$1.log" 2>&1 || { tail -20 "$1.log"; fail "training $1"; return 1; }
  "$FIVEFOLD" trace analyze "$1.json" --iteration 1 --all-path >"$1.txt" 2>&1 ||
    { cat "$1.txt"; fail "trace analyze $1"; return 1; }
  sed -n '/^iteration 1:/,/^timing/p' "$1.txt"
}
# path_ms NAME RANK LABEL VERB: the longest "RANK LABEL VERB X ms" segment of the path, in ms (0 if none).
path_ms() {
  awk -v r="$2" -v l="$3" -v v="$4" '$3 == "rank" && $4 == r && $5 ~ l && $6 == v && $7 + 0 > m { m = $7 + 0 }
    END { print m + 0 }' "$1.txt"
}
at_least() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x >= y) }'; }
exposed_recv_ms() { # the exposed RECV_ACT + RECV_GRAD of the iteration
  sed -n 's/.*exposed communication:\(.*\)/\1/p' "$1.txt" |
    awk -F, '{ for (i = 1; i <= NF; i++) if ($i ~ /RECV_(ACT|GRAD)/) { split($i, w, " "); s += w[2] } } END { print s + 0 }'
}

if traced recv "1:BWD:0:1:$DELAY"; then
  at_least "$(path_ms recv 1 '^B0$' ran)" $DELAY || fail "recv: rank 1's delayed B0 is not on the critical path"
  for r in 0 1; do
    ! at_least "$(path_ms recv $r '^R[AG]' ran)" $BOUND ||
      fail "recv: a receive of rank $r 'ran' $(path_ms recv $r '^R[AG]' ran) ms on the path: its span covered other work"
  done
  grep -q "straggler: rank 1, .*(mostly B0:" recv.txt || fail "recv: rank 1's B0 is not named as the straggler"
  act=$(sed -n 's/.*exposed communication:.*RECV_ACT \([0-9.]*\) ms.*/\1/p' recv.txt)
  ! at_least "${act:-0}" $BOUND || fail "recv: $act ms of exposed RECV_ACT, but rank 1 never waited for activations"
fi

if traced send "1:SEND_GRAD:0:1:$DELAY"; then
  act=$(sed -n 's/.*exposed communication:.*RECV_ACT \([0-9.]*\) ms.*/\1/p' send.txt)
  ! at_least "${act:-0}" $BOUND || fail "send: $act ms of exposed RECV_ACT: the send's time was taken for a receive's"
  sg=$(sed -n 's/.*exposed communication:.*SEND_GRAD \([0-9.]*\) ms.*/\1/p' send.txt)
  at_least "${sg:-0}" $DELAY || fail "send: only ${sg:-0} ms of exposed SEND_GRAD for a $DELAY ms send"
fi

if traced sync "0:BWD:3:1:$DELAY,1:OPTIM:-1:1:5:end"; then
  at_least "$(path_ms sync 0 '^B3$' ran)" $DELAY || fail "sync: rank 0's delayed B3 is not on the critical path"
  last=$(grep -E '^ +[0-9.]+ ms +rank ' sync.txt | tail -n 1)
  grep -qE 'rank 1 +OPT +ran' <<<"$last" || fail "sync: the path does not end in rank 1's OPT ($last)"
  grep -qE 'rank 1 +OPT +waited +[0-9.]+ ms on sync from rank 0 OPT' sync.txt ||
    fail "sync: the path does not cross OPTIM's all-gather from rank 1 to rank 0"
  ! at_least "$(path_ms sync 1 '^OPT$' ran)" $BOUND ||
    fail "sync: rank 1's OPT 'ran' $(path_ms sync 1 '^OPT$' ran) ms on the path: its wait for rank 0 was taken for work"
  grep -q "straggler: rank 0, .*(mostly B3:" sync.txt || fail "sync: rank 0's B3 is not named as the straggler"
  ! at_least "$(exposed_recv_ms sync)" $BOUND || fail "sync: $(exposed_recv_ms sync) ms of exposed receives"
fi

if [ "$failures" -gt 0 ]; then
  echo "pp2_path_test: $failures failure(s)"
  exit 1
fi
echo "pp2_path_test: all checks passed"
