# shellcheck shell=bash
# Shared setup of the mpirun throughput benchmarks (bench/bench_dp.sh,
# bench/bench_ep.sh): the scratch directory and mpirun's environment, a
# byte-level corpus, the run configuration of the reference MoE model and
# the steady-state tokens/s of a finished run. Sourced, not run, after the
# script has set ROOT (the repository) and FIVEFOLD (the binary).

# bench_setup NAME: stops unless FIVEFOLD is built; lets mpirun run as root
# (CI) with one OpenMP thread per rank; enters a scratch directory removed
# at exit.
bench_setup() {
  [ -x "$FIVEFOLD" ] || { echo "$1: $FIVEFOLD not built" >&2; exit 2; }
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/fivefold-${1//_/-}-XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  cd "$WORK" || exit 1
}

# bench_corpus: byte-level text with plenty of windows for a few steps at
# any batch size, tokenized into shards/.
bench_corpus() {
  local i
  for i in $(seq 1 4000); do
    echo "Line $i: the quick brown fox $((i * 7919 % 1009)) jumps over the lazy dog $((i * 104729 % 997)) again."
  done >text.txt
  "$FIVEFOLD" tokenize --byte-level --input text.txt --out shards --val-fraction 0.01 >/dev/null
}

# ref_moe_run_json FILE BATCH SEQ STEPS [ACCUM]: configs/models/ref-moe.json
# at micro-batch BATCH x SEQ tokens, one thread per rank, no evaluation;
# ACCUM micro-batches per step when given (else the trainer's default).
ref_moe_run_json() {
  local accum=
  [ -n "${5:-}" ] && accum=" \"grad_accum_steps\": $5,"
  cat >"$1" <<JSON
{"model": "$ROOT/configs/models/ref-moe.json",
 "training": {"micro_batch_size": $2, "seq_len": $3,$accum "steps": $4,
              "lr": 0.0003, "warmup_steps": 1, "log_interval": 1, "eval_interval": 0, "eval_batches": 1,
              "threads": 1, "peak_gflops": 100},
 "data": {"train": "shards/train.bin"}}
JSON
}

# steady_tps RUN: tokens/s of the steps after the first (the first touches
# every page).
steady_tps() {
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"type":"train"' in l]
steady = recs[1:] or recs
sec = sum(r["ms_per_step"] / 1e3 for r in steady)
tok = sum(r["tokens_per_s"] * r["ms_per_step"] / 1e3 for r in steady)
print(f"{tok / sec:.1f}" if sec > 0 else "0")
PY
}
