/* bench_fusion: the fused elementwise chains (kern/fusion.h) against their
 * unfused variants, forward + backward, and what the planner predicts the
 * difference to be: the unfused chain's extra bytes (SwiGLU 2 + 8 floats
 * per element of [rows, cols], bias + GeLU 1 + 1; the residual add +
 * RMSNorm 1 + 2 for one norm's forward and backward, + LayerNorm with the
 * projection's bias 3 + 2; plan/cost_layer.c) at the streaming bandwidth
 * measured here (a copy of the same size).
 *
 *   bench_fusion [ROWS COLS [REPS]]     (default 1024 x 3072, 15 repetitions)
 *
 * Prints the median of each; run with OMP_NUM_THREADS set (1: one core).
 * Figures only, no pass or fail: times depend on the machine's load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "kern/fusion.h"
#include "kern/gelu.h"
#include "kern/layernorm.h"
#include "kern/rmsnorm.h"
#include "kern/swiglu.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp);
  return t[n / 2];
}

int main(int argc, char **argv) {
  int rows = argc > 2 ? atoi(argv[1]) : 1024, cols = argc > 2 ? atoi(argv[2]) : 3072;
  int reps = argc > 3 ? atoi(argv[3]) : 15;
  if (rows < 1 || cols < 1 || reps < 1 || reps > 1000) {
    fprintf(stderr, "usage: bench_fusion [ROWS COLS [REPS]]\n");
    return 2;
  }
  size_t n = (size_t)rows * cols;
  float *h = malloc(n * sizeof *h), *h0 = malloc(n * sizeof *h0), *a = malloc(n * sizeof *a);
  float *da = malloc(n * sizeof *da), *dh = malloc(n * sizeof *dh), *b = malloc((size_t)cols * sizeof *b);
  float *db = malloc((size_t)cols * sizeof *db), *gu = malloc(2 * n * sizeof *gu), *dgu = malloc(2 * n * sizeof *dgu);
  double *t = malloc((size_t)reps * sizeof *t);
  float *rstd = malloc((size_t)rows * sizeof *rstd), *db2 = malloc((size_t)cols * sizeof *db2);
  if (!h || !h0 || !a || !da || !dh || !b || !db || !gu || !dgu || !t || !rstd || !db2) return 1;
  for (size_t i = 0; i < n; i++) h0[i] = (float)((i * 7919) % 2001) / 500.0f - 2.0f, da[i] = 1e-3f * (float)(i % 13);
  for (size_t i = 0; i < 2 * n; i++) gu[i] = (float)((i * 104729) % 4001) / 1000.0f - 2.0f;
  for (int c = 0; c < cols; c++) b[c] = 0.01f * (float)(c % 7);
  /* Streaming bandwidth: a copy of n floats reads and writes 8n bytes. */
  for (int r = 0; r < reps; r++) {
    double t0 = timer_now();
    memcpy(a, h0, n * sizeof *a);
    t[r] = timer_now() - t0;
  }
  double bw = 8.0 * n / median(t, reps);
  printf("rows %d cols %d (%.1f MB per [rows, cols] tensor), %d repetitions, copy bandwidth %.2f GB/s\n", rows, cols,
         4.0 * n / 1e6, reps, bw / 1e9);
  printf("%-12s %12s %12s %12s %14s\n", "chain", "fused ms", "unfused ms", "diff ms", "predicted ms");
  static const char *const names[] = {"bias+gelu", "swiglu", "add+rmsnorm", "add+ln+bias"};
  static const double extra_values[] = {2.0, 10.0, 3.0, 5.0};
  for (int chain = 0; chain < 4; chain++)
    {
    double med[2];
    for (int fused = 1; fused >= 0; fused--) {
      kern_set_fusion((KernFusion){.swiglu = fused, .bias_gelu = fused, .norm_residual = fused});
      for (int r = 0; r < reps; r++) {
        memcpy(h, h0, n * sizeof *h);
        memset(db, 0, (size_t)cols * sizeof *db);
        memset(db2, 0, (size_t)cols * sizeof *db2);
        if (chain >= 2) memset(dh, 0, n * sizeof *dh); /* the residual gradient the norm's adds to */
        double t0 = timer_now();
        if (chain == 0) {
          bias_gelu_forward(h, a, b, rows, cols);
          bias_gelu_backward(dh, db, da, h, rows, cols);
        } else if (chain >= 2) {
          /* x = h0 + y (+ b), its norm with weight b; then dh += the norm's input gradient */
          if (chain == 2) {
            add_rmsnorm_forward(h, a, rstd, h0, gu, NULL, b, rows, cols, 1e-5f);
            add_rmsnorm_backward(dh, dgu, db, da, h, b, rstd, rows, cols);
          } else {
            add_layernorm_forward(h, a, rstd, h0, gu, b, b, b, rows, cols, 1e-5f);
            add_layernorm_backward(dh, dgu, db, db2, da, h, b, rstd, rows, cols);
          }
        } else {
          swiglu_forward(a, gu, rows, cols);
          swiglu_forward(a, gu, rows, cols); /* the backward's recomputation (model/mlp_layer.c) */
          swiglu_backward(dgu, da, gu, rows, cols);
        }
        t[r] = timer_now() - t0;
      }
      med[fused] = median(t, reps);
    }
    double extra = extra_values[chain] * 4.0 * n / bw;
    printf("%-12s %12.3f %12.3f %12.3f %14.3f\n", names[chain], med[1] * 1e3, med[0] * 1e3, (med[0] - med[1]) * 1e3,
           extra * 1e3);
  }
  free(h), free(h0), free(a), free(da), free(dh), free(b), free(db), free(gu), free(dgu), free(t), free(rstd), free(db2);
  return 0;
}
