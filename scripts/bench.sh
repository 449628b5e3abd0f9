#!/usr/bin/env bash
# make bench: prints, in one run on this machine, the measured FMA peak and
# sgemm speed, fivefold's training tokens/s and MFU for the reference MoE model
# and its dense twin, and PyTorch's tokens/s on the same models with the same
# thread count (fp32, and bf16 under torch.autocast), with the ratio; then
# the convolution kernels against PyTorch's conv2d at DeblurGAN- and
# LeNet-like shapes (fp32, bf16), and the tropical kernels against PyTorch's
# broadcast + amax layers; GPT-2 124M against llm.c's CPU trainer where
# LLMC_DIR names a copy of it (bench/llmc/compare.sh). Everything is run twice: with the environment
# as it is, and with OPENBLAS_CORETYPE unset for both programs (OpenBLAS then
# picks its kernels for the real CPU; PyTorch gets OMP_WAIT_POLICY=PASSIVE).
# Then the parallel runtime under mpirun: DP2 against one rank (scaling and
# the hidden share of the all-reduce), EP2 against DP2 on the MoE (and the
# dispatcher's share of the step), the tracer's overhead, and the planner's
# predicted against measured step times (BENCH_PLAN=0 skips that one).
# Figures only: nothing here passes or fails on time.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
STEPS=${BENCH_STEPS:-6}
TORCH_PY=/usr/bin/python3
MODELS=(configs/models/ref-moe.json configs/models/ref-dense.json)
THREADS_LIST=${BENCH_THREADS:-"1 2"}

field() { # field NAME LINE -> value of NAME=value in LINE
  sed -n "s/.*[ ^]$1=\([^ ]*\).*/\1/p" <<<"$2"
}

run_setting() {
  local label=$1; shift
  echo
  echo "=== setting: $label ==="
  for threads in $THREADS_LIST; do
    "$@" env OMP_NUM_THREADS="$threads" "$BUILD/bench/bench_machine" "$threads"
    for model in "${MODELS[@]}"; do
      local ours theirs
      ours=$("$@" env OMP_NUM_THREADS="$threads" "$BUILD/bench/bench_train" "$model" 8 256 "$STEPS" "$threads")
      echo "$ours"
      # bf16 mixed precision on the same model (MFU against the bf16 peak);
      # skipped with its reason on a CPU without avx512_bf16.
      local ours_bf16
      if ours_bf16=$("$@" env OMP_NUM_THREADS="$threads" "$BUILD/bench/bench_train" "$model" 8 256 "$STEPS" "$threads" bf16 2>&1); then
        echo "$ours_bf16"
        printf 'ratio model=%s threads=%d bf16_over_fp32=%s bf16_rss_over_fp32=%s\n' "$model" "$threads" \
          "$(awk -v a="$(field tokens_per_s "$ours_bf16")" -v b="$(field tokens_per_s "$ours")" 'BEGIN{printf "%.2fx", a/b}')" \
          "$(awk -v a="$(field peak_rss_mb "$ours_bf16")" -v b="$(field peak_rss_mb "$ours")" 'BEGIN{printf "%.2fx", a/b}')"
      else
        echo "bf16 skipped: $ours_bf16"
      fi
      theirs=$("$@" env OMP_NUM_THREADS="$threads" OMP_WAIT_POLICY=PASSIVE \
        "$TORCH_PY" bench/torch_bench.py "$model" 8 256 "$STEPS" "$threads")
      echo "$theirs"
      local a b
      # torch_bench.py prints an fp32 and a bf16-autocast line; the ratio is fp32's.
      a=$(field tokens_per_s "$ours"); b=$(field tokens_per_s "$(grep 'precision=fp32' <<<"$theirs")")
      c=$(field tokens_per_s "$(grep 'precision=bf16-autocast' <<<"$theirs")")
      printf 'ratio model=%s threads=%d fivefold_tokens_per_s=%s pytorch_tokens_per_s=%s fivefold_over_pytorch=%s mfu_pct=%s pytorch_bf16_autocast_tokens_per_s=%s\n' \
        "$model" "$threads" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2fx", a/b}')" "$(field mfu_pct "$ours")" "$c"
      # bf16 against bf16: fivefold's --precision bf16 over PyTorch's autocast.
      local d
      d=$(field tokens_per_s "$ours_bf16" 2>/dev/null || true)
      if [ -n "$d" ] && [ -n "$c" ]; then
        printf 'ratio model=%s threads=%d fivefold_bf16_over_pytorch_bf16_autocast=%s\n' "$model" "$threads" \
          "$(awk -v a="$d" -v b="$c" 'BEGIN{printf "%.2fx", a/b}')"
      fi
    done
  done
}

echo "fivefold benchmarks on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}"
run_setting "environment as is (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>})" env
run_setting "OPENBLAS_CORETYPE unset" env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE

echo
echo "=== bf16 against fp32 on the demo model (bench/bench_bf16_demo.sh; BENCH_BF16_DEMO=0 skips) ==="
if [ "${BENCH_BF16_DEMO:-1}" = 1 ]; then bash bench/bench_bf16_demo.sh "$BUILD" || echo "bf16 demo skipped"; fi

if [ -x "$BUILD/bench/bench_attention" ]; then
  echo
  echo "=== attention kernel ==="
  "$BUILD/bench/bench_attention"
fi

if [ -x "$BUILD/bench/bench_sample" ]; then
  echo
  echo "=== generation with and without the key/value cache (demo model, 1 thread, as fivefold sample) ==="
  env OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE "$BUILD/bench/bench_sample" configs/demo-moe.json 1
fi

if [ -x "$BUILD/bench/bench_conv" ]; then
  echo
  echo "=== convolution kernels against PyTorch (bench/bench_conv.sh) ==="
  bash bench/bench_conv.sh "$BUILD"
fi

if [ -x "$BUILD/bench/bench_op_probe" ]; then
  echo
  echo "=== operation probes with nothing attached (bench/bench_op_probe.c) ==="
  "$BUILD/bench/bench_op_probe"
fi

if [ -x "$BUILD/bench/tropical_speed" ]; then
  echo
  echo "=== tropical kernels against PyTorch (bench/tropical/speed.sh) ==="
  bash bench/tropical/speed.sh "$BUILD"
fi

if [ "${BENCH_LLMC:-1}" = 1 ] && [ -x "$BUILD/bench/bench_train" ]; then
  echo
  echo "=== GPT-2 124M against llm.c's CPU trainer and PyTorch (bench/llmc/compare.sh; LLMC_DIR, BENCH_LLMC=0 skips) ==="
  BUILD=$BUILD bash bench/llmc/compare.sh "${LLMC_DIR:-}" || echo "GPT-2 comparison failed"
fi

if command -v "${MPIEXEC:-mpiexec}" >/dev/null; then
  echo
  echo "=== data parallelism: DP2 versus one rank (bench/bench_dp.sh) ==="
  BENCH_DP_ZERO=1 bash bench/bench_dp.sh "$BUILD"
  echo
  echo "=== expert parallelism: EP2 versus DP2 (bench/bench_ep.sh) ==="
  bash bench/bench_ep.sh "$BUILD"
  echo
  echo "=== tracer overhead (bench/bench_trace.sh) ==="
  bash bench/bench_trace.sh "$BUILD"
  if [ "${BENCH_PLAN:-1}" = 1 ]; then
    echo
    echo "=== planner: predicted versus measured step time (bench/plan_accuracy.sh; BENCH_PLAN=0 skips) ==="
    bash bench/plan_accuracy.sh "$BUILD"
  fi
fi
