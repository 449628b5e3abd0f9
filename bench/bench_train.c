/* bench_train: training throughput of one model config on random tokens —
 * forward, backward and the AdamW update, exactly the work of a training step
 * without data loading. Prints tokens/s, model GFLOP/s, MFU against the FMA
 * peak measured in the same process, and peak resident memory.
 * Usage: bench_train MODEL.json [batch seq steps threads] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "base/timer.h"
#include "kern/adamw.h"
#include "kern/peak.h"
#include "kern/vecops.h"
#include "model/flops.h"
#include "model/model.h"

static int fail(const Error *err) {
  fprintf(stderr, "bench_train: %s\n", err->msg);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_train MODEL.json [batch seq steps threads]\n");
    return 2;
  }
  int B = argc > 2 ? atoi(argv[2]) : 8;
  int T = argc > 3 ? atoi(argv[3]) : 256;
  int steps = argc > 4 ? atoi(argv[4]) : 10;
  int threads = argc > 5 ? atoi(argv[5]) : omp_get_max_threads();
  omp_set_num_threads(threads);

  Error err = {0};
  ModelConfig cfg;
  if (model_config_load(&cfg, argv[1], &err)) return fail(&err);
  Model m;
  if (model_create(&m, &cfg, B, T, &err)) return fail(&err);
  model_init_weights(&m, 1234);

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

  double peak = peak_fma_gflops(threads, 0.5);
  double flops_step = model_flops_per_sequence(&cfg, T) * B;
  int warmup = 2;
  double t0 = 0, loss_sum = 0;
  for (int s = 0; s < warmup + steps; s++) {
    if (s == warmup) t0 = timer_now();
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
    loss_sum += loss.lm;
  }
  double dt = (timer_now() - t0) / steps;
  double tok_s = (double)B * T / dt;
  double gflops = flops_step / dt * 1e-9;
  printf("train model=%s threads=%d batch=%d seq=%d params=%zu ms_per_step=%.1f tokens_per_s=%.0f "
         "model_gflops=%.1f fma_peak_gflops=%.1f mfu_pct=%.1f peak_rss_mb=%.0f mean_loss=%.3f\n",
         argv[1], threads, B, T, m.num_params, dt * 1e3, tok_s, gflops, peak, 100.0 * gflops / peak,
         (double)alloc_peak_rss_bytes() / 1048576.0, loss_sum / (warmup + steps));
  model_free(&m);
  free(tokens);
  free(inp);
  free(tgt);
  alloc_big_free(adam_m);
  alloc_big_free(adam_v);
  return 0;
}
