/* bench_train: training throughput of one model config on random tokens —
 * forward, backward and the AdamW update, exactly the work of a training step
 * without data loading. Prints tokens/s, the model FLOPs of a step
 * (model_flops_per_sequence: matmuls only, 6 per weight and token plus
 * attention's scores), model GFLOP/s, MFU against the peak
 * of the precision used (fp32: the FMA loop; bf16: the vdpbf16ps loop, or AMX's)
 * measured in the same process, and peak resident memory.
 * Usage: bench_train MODEL.json [batch seq steps threads [fp32|bf16 [onednn|openblas]]]
 *
 * In bf16 the weight matrices are read from the bf16 weight cache
 * (kern/bf16_weights.h), converted once per optimizer step as in training;
 * FIVEFOLD_BF16_WEIGHT_CACHE=off converts them at every GEMM instead, and
 * the line says which (bf16_weight_cache) and how much memory the copies
 * take (bf16_cache_mb).
 *
 * The machine is shared, so next to wall time it prints the process CPU time
 * per step (cpu_ms_per_step): at one thread that is what the step costs when
 * the core is ours alone, and mfu_cpu_pct is the MFU it implies.
 * Profiling only the timed steps: with FIVEFOLD_PERF_CTL=FIFO (and
 * optionally FIVEFOLD_PERF_ACK=FIFO) the bench writes "enable" / "disable"
 * to perf record's control FIFO around them, e.g.
 *   mkfifo ctl ack; FIVEFOLD_PERF_CTL=ctl FIVEFOLD_PERF_ACK=ack \
 *     perf record -D -1 --control=fifo:ctl,ack -- bench_train ... */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "base/timer.h"
#include "kern/adamw.h"
#include "kern/bf16_weights.h"
#include "kern/gemm.h"
#include "kern/peak.h"
#include "kern/vecops.h"
#include "model/flops.h"
#include "model/model.h"

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sends one command to perf record's control FIFO (if one was given) and
 * waits for its acknowledgement so the events are on before work starts. */
static void perf_control(const char *command) {
  const char *ctl_path = getenv("FIVEFOLD_PERF_CTL");
  if (!ctl_path || !*ctl_path) return;
  FILE *ctl = fopen(ctl_path, "w");
  if (!ctl) {
    fprintf(stderr, "bench_train: cannot open perf control FIFO %s\n", ctl_path);
    return;
  }
  fprintf(ctl, "%s\n", command);
  fclose(ctl);
  const char *ack_path = getenv("FIVEFOLD_PERF_ACK");
  if (ack_path && *ack_path) {
    FILE *ack = fopen(ack_path, "r");
    char line[16];
    if (ack) {
      if (!fgets(line, sizeof line, ack)) line[0] = 0;
      fclose(ack);
    }
  }
}

static int fail(const Error *err) {
  fprintf(stderr, "bench_train: %s\n", err->msg);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_train MODEL.json [batch seq steps threads [fp32|bf16 [onednn|openblas]]]\n");
    return 2;
  }
  int B = argc > 2 ? atoi(argv[2]) : 8;
  int T = argc > 3 ? atoi(argv[3]) : 256;
  int steps = argc > 4 ? atoi(argv[4]) : 10;
  int threads = argc > 5 ? atoi(argv[5]) : omp_get_max_threads();
  omp_set_num_threads(threads);
  KernPrecision precision = KERN_PRECISION_FP32;
  GemmBackend backend = GEMM_BACKEND_ONEDNN;
  char why[512];
  if (argc > 6 && kern_precision_parse(argv[6], &precision) != 0) {
    fprintf(stderr, "bench_train: precision must be fp32 or bf16, got %s\n", argv[6]);
    return 2;
  }
  if (argc > 7 && kern_gemm_backend_parse(argv[7], &backend) != 0) {
    fprintf(stderr, "bench_train: backend must be onednn or openblas, got %s\n", argv[7]);
    return 2;
  }
  if (kern_gemm_set_backend(backend, why, sizeof why) != 0 || kern_set_precision(precision, why, sizeof why) != 0) {
    fprintf(stderr, "bench_train: %s\n", why);
    return 1;
  }

  Error err = {0};
  ModelConfig cfg;
  if (model_config_load(&cfg, argv[1], &err)) return fail(&err);
  Model m;
  if (model_create(&m, &cfg, B, T, &err)) return fail(&err);
  double init0 = timer_now();
  model_init_weights(&m, 1234);
  double init_s = timer_now() - init0;
  if (bf16_weights_check_env(why, sizeof why) != 0) {
    fprintf(stderr, "bench_train: %s\n", why);
    return 2;
  }
  const int cache = precision == KERN_PRECISION_BF16 && bf16_weights_enabled();
  if (cache) model_cache_bf16_weights(&m);

  int *tokens = malloc(sizeof(int) * (size_t)B * (T + 1));
  Rng rng = rng_make(42, 7);
  for (int i = 0; i < B * (T + 1); i++) tokens[i] = (int)rng_next_below(&rng, (uint64_t)cfg.vocab_size);
  int *inp = malloc(sizeof(int) * (size_t)B * T), *tgt = malloc(sizeof(int) * (size_t)B * T);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      inp[b * T + t] = tokens[b * (T + 1) + t];
      tgt[b * T + t] = tokens[b * (T + 1) + t + 1];
    }
  float *adam_m = alloc_big(m.num_params * sizeof(float));
  float *adam_v = alloc_big(m.num_params * sizeof(float));
  AdamWHyper hyper = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};

  double peak = precision == KERN_PRECISION_BF16 ? peak_bf16_gflops(threads, 0.5) : peak_fma_gflops(threads, 0.5);
  double flops_step = model_flops_per_sequence(&cfg, T) * B;
  int warmup = 2;
  double t0 = 0, cpu0 = 0, loss_sum = 0;
  for (int s = 0; s < warmup + steps; s++) {
    if (s == warmup) {
      perf_control("enable");
      t0 = timer_now();
      cpu0 = cpu_seconds();
    }
    ModelLoss loss;
    model_zero_grad(&m);
    if (model_forward(&m, inp, tgt, B, T, 1, 1.0f, &loss, &err)) return fail(&err);
    if (model_backward(&m, &err)) return fail(&err);
    float scale = clip_grad_scale(vec_sumsq(m.grads, m.num_params), 1.0f);
    for (int i = 0; i < m.num_tensors; i++) {
      const ParamTensor *pt = &m.tensors[i];
      AdamWHyper h = hyper;
      if (pt->no_weight_decay) h.weight_decay = 0;
      adamw_update(m.params + pt->offset, m.grads + pt->offset, adam_m + pt->offset, adam_v + pt->offset,
                   pt->numel, s + 1, &h, scale);
    }
    model_weights_changed(&m); /* the bf16 copies are stale: converted again at the next forward */
    loss_sum += loss.lm;
  }
  double dt = (timer_now() - t0) / steps;
  double cpu_dt = (cpu_seconds() - cpu0) / steps;
  perf_control("disable");
  Bf16WeightStats ws;
  bf16_weights_stats(&ws);
  double tok_s = (double)B * T / dt;
  double gflops = flops_step / dt * 1e-9;
  printf("train model=%s precision=%s backend=%s isa=%s threads=%d batch=%d seq=%d params=%zu ms_per_step=%.1f "
         "gflop_per_step=%.2f tokens_per_s=%.0f model_gflops=%.1f %s_peak_gflops=%.1f mfu_pct=%.1f cpu_ms_per_step=%.1f mfu_cpu_pct=%.1f peak_rss_mb=%.0f "
         "mean_loss=%.3f init_ms=%.0f bf16_weight_cache=%s bf16_cache_mb=%.1f gemm_fixed_shapes=%s(%d)\n",
         argv[1], kern_precision_name(precision), kern_gemm_backend_name(backend), kern_gemm_isa_name(), threads, B,
         T, m.num_params, dt * 1e3, flops_step * 1e-9, tok_s, gflops, precision == KERN_PRECISION_BF16 ? "bf16" : "fma", peak, 100.0 * gflops / peak, cpu_dt * 1e3,
         100.0 * flops_step / cpu_dt * 1e-9 / (peak / threads),
         (double)alloc_peak_rss_bytes() / 1048576.0, loss_sum / (warmup + steps), init_s * 1e3,
         precision != KERN_PRECISION_BF16 ? "n/a" : cache ? "on" : "off", (double)ws.resident_bytes / 1048576.0,
         precision != KERN_PRECISION_BF16 ? "n/a" : kern_gemm_fixed_shapes_active() ? "on" : "off",
         kern_gemm_fixed_shape_count());
  model_free(&m);
  free(tokens);
  free(inp);
  free(tgt);
  alloc_big_free(adam_m);
  alloc_big_free(adam_v);
  return 0;
}
