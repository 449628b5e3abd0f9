# shellcheck shell=bash
# Shared setup of the scripted end-to-end tests that train tiny models
# through `fivefold train` (tests/parallel/*_test.sh,
# tests/trace/ops_trace_test.sh, tests/train/resume_test.sh). Sourced, not
# run, after the script has set FIVEFOLD (an absolute path) and, where it
# starts mpirun, MPIEXEC. Holds: the scratch directory and its cleanup, the
# failure counter, the byte-level corpus and its shards, the tiny model and
# run configurations, and the helpers that train, compare runs against one
# rank and check refusals and command outputs. What a script checks stays
# in the script.

PY=/usr/bin/python3
LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
COMPARE="$LIB_DIR/compare_runs.py"
BG_PID= # a job started in the background; killed if the script ends first
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# work_dir NAME: a fresh scratch directory, entered; removed at exit unless
# KEEP_WORK is set (to look at the runs of a failing test).
work_dir() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-$1-XXXXXX")
  trap cleanup EXIT
  cd "$WORK" || exit 1
}
cleanup() {
  [ -n "$BG_PID" ] && kill -9 "$BG_PID" 2>/dev/null
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}

# make_corpus [LINES]: text.txt of LINES (200) lines and its byte-level
# shards in shards/ (a tenth held out for validation).
make_corpus() {
  local i
  for i in $(seq 1 "${1:-200}"); do
    echo "Line $i: in the beginning was the word, and the evening and the morning were day $i of $((i * 7 % 31))."
  done >text.txt
  "$FIVEFOLD" tokenize --byte-level --input text.txt --out shards --val-fraction 0.1 >/dev/null ||
    { echo "FAIL: tokenize"; exit 1; }
}

# dense_json FILE LAYERS [tied]: a dense model, hidden 32, vocab 256, 4
# heads over 2 KV heads; "tied" ties the LM head to the embedding.
dense_json() {
  local tie=
  [ "${3:-}" = tied ] && tie=', "tie_word_embeddings": true'
  cat >"$1" <<JSON
{"model_type": "fivefold", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": $2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64$tie}
JSON
}

# gpt2_json FILE LAYERS: a GPT-2 (LayerNorm, biases, learned positions,
# tied head), hidden 32, vocab 256, 4 heads, 64 positions.
gpt2_json() {
  cat >"$1" <<JSON
{"model_type": "gpt2", "vocab_size": 256, "n_embd": 32, "n_layer": $2, "n_head": 4, "n_positions": 64,
 "n_inner": 64}
JSON
}

# moe_json FILE LAYERS EXPERTS [HIDDEN]: an MoE model, top-2 and dropless,
# hidden HIDDEN (32), dense FFN 2 x HIDDEN, expert FFN HIDDEN, aux and z
# losses on.
moe_json() {
  local hidden=${4:-32}
  cat >"$1" <<JSON
{"model_type": "fivefold", "vocab_size": 256, "hidden_size": $hidden, "num_hidden_layers": $2,
 "num_attention_heads": 4, "intermediate_size": $((2 * hidden)), "num_experts": $3, "num_experts_per_tok": 2,
 "moe_intermediate_size": $hidden, "moe_aux_loss_coeff": 0.01, "moe_z_loss_coeff": 0.001}
JSON
}

# run_json FILE MODEL_JSON [FIELD=VALUE...]: a run configuration on the
# shards of make_corpus. FIELD is a "training" field, or "interval" and
# "keep_last" of "checkpoint"; the value "-" leaves a field out. The
# defaults: 2 x 16 tokens per micro-batch, 5 steps, a log line per step,
# no evaluation, one thread, a checkpoint every 3 steps, all kept.
# cluster.json: 2 nodes of 2 devices with a slow network between them; and
# plan.json: the planner's PP4 plan of dense.json (4 layers, seq 16, global
# batch 8, fp32) on it. Fails (returning 1) with the planner's log.
two_node_pp4_plan() {
  cat >cluster.json <<'JSON'
{"name": "two-nodes", "description": "2 nodes of 2 devices, a slow network between them",
 "nodes": 2, "devices_per_node": 2,
 "peak_tflops": {"fp32": 1.0, "bf16": 2.0},
 "memory": {"capacity_GiB": 16, "reserved_GiB": 1, "bandwidth_GBps": 100, "efficiency": 0.7},
 "intra_node": {"bandwidth_GBps": 50, "latency_us": 5, "efficiency": 0.8},
 "inter_node": {"bandwidth_Gbps": 1, "latency_us": 2000, "efficiency": 0.9}}
JSON
  "$FIVEFOLD" plan --model dense.json --cluster cluster.json --gpus 4 --seq 16 --global-batch 8 --dtype fp32 \
    --min-pp 4 --max-tp 1 --max-cp 1 --mbs-list 2 --recompute-list none --out plan.json >plan.log 2>&1 ||
    { cat plan.log; fail "fivefold plan"; return 1; }
}

run_json() {
  local file=$1 model=$2 kv key training='' sep=''
  shift 2
  local -A v=([micro_batch_size]=2 [seq_len]=16 [steps]=5 [lr]=0.003 [warmup_steps]=2 [log_interval]=1
    [eval_interval]=0 [eval_batches]=2 [threads]=1 [peak_gflops]=50 [grad_clip]=0.5 [global_batch_size]=-
    [interval]=3 [keep_last]=0)
  local order=(micro_batch_size seq_len steps lr warmup_steps log_interval eval_interval eval_batches threads
    peak_gflops grad_clip global_batch_size)
  for kv in "$@"; do
    key=${kv%%=*}
    [ -n "${v[$key]+set}" ] || { echo "run_json: unknown field $key" >&2; exit 2; }
    v[$key]=${kv#*=}
  done
  for key in "${order[@]}"; do
    [ "${v[$key]}" = - ] && continue
    training+="$sep\"$key\": ${v[$key]}"
    sep=", "
  done
  cat >"$file" <<JSON
{"model": "$model",
 "training": {$training},
 "data": {"train": "shards/train.bin", "val": "shards/val.bin"},
 "checkpoint": {"interval": ${v[interval]}, "keep_last": ${v[keep_last]}}}
JSON
}

ckpt() { printf '%s/checkpoints/step-%08d' "$1" "$2"; }

# resumed_matches REF FROM LAST MODEL: a one-rank run of MODEL resumed in
# the fresh directory resumed/ from REF's step-FROM checkpoint ends bit for
# bit where REF did at step LAST: identical model and optimizer files, the
# same per-step losses.
resumed_matches() {
  local ref=$1 from=$2 last=$3 model=$4 f
  mkdir -p resumed/checkpoints && cp -r "$(ckpt "$ref" "$from")" resumed/checkpoints/
  train 0 resumed "$model" --resume || return 1
  for f in model optimizer; do
    cmp -s "$(ckpt "$ref" "$last")/$f.safetensors" "$(ckpt resumed "$last")/$f.safetensors" ||
      fail "the resumed run's $f.safetensors differs from the uninterrupted run's"
  done
  $PY "$COMPARE" losses resumed "$ref" 0 || fail "the resumed run's losses differ from the uninterrupted run's"
}

# await_holds DIR LOG: ranks 0 and 1 of the job $BG_PID, started with
# FIVEFOLD_TEST_HOLD_AFTER_STEP=STEP:DIR (train/stop_request.h), hold after
# STEP: their pid files DIR/rank-R exist. Fails (showing LOG) if the job
# ends first.
await_holds() {
  local i
  for i in $(seq 1 3000); do
    [ -f "$1/rank-0" ] && [ -f "$1/rank-1" ] && return 0
    kill -0 "$BG_PID" 2>/dev/null || break
    sleep 0.1
  done
  tail -20 "$2"
  fail "the ranks did not reach the hold of $1"
  return 1
}

# train NP OUT MODEL [flags]: trains run-MODEL.json into OUT (log OUT.log);
# NP 0 starts without mpirun.
train() {
  local np=$1 out=$2 model=$3
  shift 3
  if [ "$np" = 0 ]; then
    "$FIVEFOLD" train --config "run-$model.json" --out "$out" --no-progress "$@" >"$out.log" 2>&1
  else
    "$MPIEXEC" -np "$np" --oversubscribe "$FIVEFOLD" train --config "run-$model.json" --out "$out" --no-progress \
      "$@" >"$out.log" 2>&1
  fi || { tail -20 "$out.log"; fail "training $out"; return 1; }
}

# same RUN REFERENCE STEP: losses up to STEP within SAME_RTOL relative, and
# the checkpoint at STEP within SAME_RTOL relative + SAME_ATOL absolute per
# element (fp32 sums in another order than one rank).
SAME_RTOL=1e-4
SAME_ATOL=1e-5
same() {
  local run=$1 ref=$2 step=$3 f
  $PY "$COMPARE" losses "$run" "$ref" "$SAME_RTOL" || fail "$run: per-step losses differ from $ref"
  for f in model optimizer; do
    $PY "$COMPARE" tensors "$(ckpt "$run" "$step")/$f.safetensors" "$(ckpt "$ref" "$step")/$f.safetensors" \
      "$SAME_RTOL" "$SAME_ATOL" || fail "$run: $f.safetensors at step $step differs from $ref"
  done
}

# Only world rank 0 prints: one log line per step (5 steps), one banner.
one_step_log() {
  [ "$(grep -c '^step ' "$1.log")" -eq 5 ] || fail "$1 printed $(grep -c '^step ' "$1.log") step lines, expected 5"
}
one_printer() {
  [ "$(grep -c '^fivefold train:' "$1.log")" -eq 1 ] || fail "$1 printed the banner more than once"
  one_step_log "$1"
}

# refused NP MODEL EXPECTED-TEXT FLAGS...: training run-MODEL.json on NP
# ranks with FLAGS fails with a message holding EXPECTED-TEXT.
refused() {
  local np=$1 model=$2 text=$3
  shift 3
  if "$MPIEXEC" -np "$np" --oversubscribe "$FIVEFOLD" train --config "run-$model.json" --out bad --no-progress "$@" \
    >bad.log 2>&1; then
    fail "$* on $np ranks was accepted"
  fi
  grep -q "$text" bad.log || { cat bad.log; fail "no clear message for $* on $np ranks (expected '$text')"; }
}

# expect CODE NEEDLE... -- COMMAND...: COMMAND exits CODE (nonzero: any
# failure) and its stdout+stderr hold every NEEDLE.
expect() {
  local want=$1; shift
  local needles=()
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  local out code
  out=$("$@" 2>&1); code=$?
  if [ "$want" = nonzero ]; then
    [ "$code" -ne 0 ] || fail "expected failure from: $* (got exit 0)"
  elif [ "$code" -ne "$want" ]; then
    fail "expected exit $want from: $* (got $code)"; echo "$out" | tail -8
  fi
  for n in "${needles[@]}"; do
    grep -qF -- "$n" <<<"$out" || { fail "output of '$*' lacks '$n'"; echo "$out" | head -20; }
  done
}

# await_end SECONDS: waits up to SECONDS for the job $BG_PID to end; then
# ENDED_STATUS is its exit status, BG_PID is cleared and it returns 0.
# Returns 1 with the job still running if it did not end in time.
await_end() {
  local i
  for i in $(seq 1 $(($1 * 10))); do
    kill -0 "$BG_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$BG_PID" 2>/dev/null && return 1
  wait "$BG_PID"
  ENDED_STATUS=$?
  BG_PID=
}

# finish NAME: the verdict line, and the exit status.
finish() {
  if [ "$failures" -gt 0 ]; then
    echo "$1 $MODE: $failures failure(s)"
    exit 1
  fi
  echo "$1 $MODE: PASS"
}
