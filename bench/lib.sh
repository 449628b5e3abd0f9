# shellcheck shell=bash
# Shared setup of the mpirun throughput benchmarks (bench/bench_dp.sh,
# bench/bench_ep.sh, bench/bench_buckets.sh): the scratch directory and
# mpirun's environment, a byte-level corpus, the run configuration of the
# reference MoE model, the steady-state tokens/s and median step of a
# finished run, and the measurement hygiene of the accuracy benchmarks
# (waiting for a quiet machine, the CPU other processes took during a run). Sourced, not run, after the
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

# bench_median_step_ms RUN WARMUP: median ms_per_step after WARMUP steps.
bench_median_step_ms() {
  /usr/bin/python3 - "$1/metrics.jsonl" "$2" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"type":"train"' in l]
steady = [r["ms_per_step"] for r in recs[int(sys.argv[2]):]] or [r["ms_per_step"] for r in recs]
print(f"{statistics.median(steady):.3f}")
PY
}

# bench_busy_cores: cores busy over the last second (/proc/stat); called
# while nothing of ours runs, it is other people's load.
bench_busy_cores() {
  /usr/bin/python3 - <<'PY'
import os, time
def snap():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f), f[3] + f[4]
t0, i0 = snap(); time.sleep(1.0); t1, i1 = snap()
print(f"{(1 - (i1 - i0) / max(1, t1 - t0)) * os.cpu_count():.2f}")
PY
}

# bench_wait_quiet MAX_SECONDS: waits until other processes use under a
# third of a core (at most MAX_SECONDS); echoes the load last seen.
bench_wait_quiet() {
  local waited=0 load
  load=$(bench_busy_cores)
  while /usr/bin/python3 -c "import sys; sys.exit(0 if float('$load') > 0.33 else 1)" && [ "$waited" -lt "$1" ]; do
    sleep 2
    waited=$((waited + 3))
    load=$(bench_busy_cores)
  done
  echo "$load"
}

# bench_others_cores STAT0 STAT1 WALL0 WALL1 "USER SYS": cores other
# processes used during a run: the machine's busy time between two
# /proc/stat first lines minus the run's own CPU time, over its wall time.
bench_others_cores() {
  /usr/bin/python3 - "$@" <<'PY'
import os, sys
s0, s1 = ([int(x) for x in a.split()[1:]] for a in sys.argv[1:3])
busy = (sum(s1) - s1[3] - s1[4] - sum(s0) + s0[3] + s0[4]) / os.sysconf("SC_CLK_TCK")
wall = float(sys.argv[4]) - float(sys.argv[3])
print(f"{max(0.0, busy - sum(float(x) for x in sys.argv[5].split())) / wall:.2f}")
PY
}
