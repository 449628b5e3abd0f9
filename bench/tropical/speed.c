/* Tropical kernel speed: the machine's add + max peak, the max-plus product
 * at 1024^3 and at min-max-plus layer shapes, and tropical conv2d at the
 * TCNN paper's small net and tropical LeNet shapes, in G tropical
 * multiply-adds/s (one x + w candidate = one) and as a share of the peak,
 * forward (with winners, and value-only) and forward+backward (the same
 * multiply-adds over the time of both passes), at each thread count.
 * Each figure is the fastest of repeated runs within the time budget, so
 * other jobs on the machine lower it less; the load average is printed.
 * Figures only, never pass/fail.
 *
 *   tropical_speed [SECONDS_PER_FIGURE] [THREADS...]     (default 0.5, 1 2) */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/timer.h"
#include "kern/peak_tropical.h"
#include "kern/tropical.h"

typedef struct Bench {
  double seconds;
} Bench;

static float *alloc_filled(size_t n, uint64_t seed) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  if (!p) {
    fprintf(stderr, "tropical_speed: out of memory (%zu floats)\n", n);
    exit(1);
  }
  for (size_t i = 0; i < n; i++) p[i] = (float)rng_normal(seed, 1, i);
  return p;
}

typedef int (*BenchFn)(void *ctx, Error *err);

/* Fastest run of fn within the budget (at least 2 runs after a warm-up). */
static double best_seconds(const Bench *b, BenchFn fn, void *ctx) {
  Error err = {0};
  if (fn(ctx, &err)) {
    fprintf(stderr, "tropical_speed: %s\n", err.msg);
    exit(1);
  }
  double start = timer_now(), best = 1e30;
  int runs = 0;
  while (runs < 2 || timer_now() - start < b->seconds) {
    double t0 = timer_now();
    fn(ctx, &err);
    double t = timer_now() - t0;
    if (t < best) best = t;
    runs++;
  }
  return best;
}

typedef struct MatCtx {
  int m, n, k;
  float *x, *w, *b, *y, *dy, *dx, *dw, *db;
  int32_t *win;
} MatCtx;

static int mat_fwd(void *p, Error *err) {
  MatCtx *c = p;
  return tropical_matmul_forward(TROPICAL_MAX_PLUS, c->m, c->n, c->k, c->x, c->w, c->b, c->y, c->win, err);
}
static int mat_fwd_values(void *p, Error *err) {
  MatCtx *c = p;
  return tropical_matmul_forward(TROPICAL_MAX_PLUS, c->m, c->n, c->k, c->x, c->w, c->b, c->y, NULL, err);
}
static int mat_fwd_bwd(void *p, Error *err) {
  MatCtx *c = p;
  int rc = mat_fwd(p, err);
  return rc ? rc : tropical_matmul_backward(c->m, c->n, c->k, c->dy, c->win, c->dx, c->dw, c->db, 0, err);
}

static void bench_matmul(const Bench *b, const char *label, int m, int n, int k, int threads, double peak) {
  MatCtx c = {m, n, k, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  c.x = alloc_filled((size_t)m * k, 1), c.w = alloc_filled((size_t)n * k, 2), c.b = alloc_filled(n, 3);
  c.y = alloc_filled((size_t)m * n, 4), c.dy = alloc_filled((size_t)m * n, 5);
  c.dx = alloc_filled((size_t)m * k, 6), c.dw = alloc_filled((size_t)n * k, 7), c.db = alloc_filled(n, 8);
  c.win = malloc((size_t)m * n * sizeof *c.win);
  if (!c.win) exit(1);
  double ops = (double)m * n * k * 1e-9;
  double fwd = ops / best_seconds(b, mat_fwd, &c), vals = ops / best_seconds(b, mat_fwd_values, &c);
  double both = ops / best_seconds(b, mat_fwd_bwd, &c);
  printf("tropical_matmul shape=%s m=%d n=%d k=%d semiring=max_plus threads=%d isa=%s fwd_gops=%.2f "
         "fwd_values_only_gops=%.2f fwdbwd_gops=%.2f fwd_pct_peak=%.1f fwd_values_only_pct_peak=%.1f "
         "fwdbwd_pct_peak=%.1f\n",
         label, m, n, k, threads, tropical_isa(), fwd, vals, both, 100 * fwd / peak, 100 * vals / peak,
         100 * both / peak);
  free(c.x), free(c.w), free(c.b), free(c.y), free(c.dy), free(c.dx), free(c.dw), free(c.db), free(c.win);
}

typedef struct ConvCtx {
  TropicalConvShape s;
  float *x, *w, *y, *dy, *dx, *dw;
  int32_t *win;
} ConvCtx;

static int conv_fwd(void *p, Error *err) {
  ConvCtx *c = p;
  return tropical_conv2d_forward(&c->s, c->x, c->w, c->y, c->win, err);
}
static int conv_fwd_bwd(void *p, Error *err) {
  ConvCtx *c = p;
  int rc = conv_fwd(p, err);
  return rc ? rc : tropical_conv2d_backward(&c->s, c->dy, c->win, c->dx, c->dw, 0, err);
}

static void bench_conv(const Bench *b, const char *label, TropicalConvShape s, int threads, double peak) {
  ConvCtx c = {s, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  size_t nx = tropical_conv2d_input_count(&s), ny = tropical_conv2d_output_count(&s);
  size_t nw = tropical_conv2d_weight_count(&s);
  c.x = alloc_filled(nx, 11), c.w = alloc_filled(nw, 12), c.y = alloc_filled(ny, 13), c.dy = alloc_filled(ny, 14);
  c.dx = alloc_filled(nx, 15), c.dw = alloc_filled(nw, 16);
  c.win = malloc(tropical_conv2d_winner_count(&s) * sizeof *c.win);
  if (!c.win) exit(1);
  double ops = tropical_conv2d_forward_ops(&s) * 1e-9;
  double fwd = ops / best_seconds(b, conv_fwd, &c), both = ops / best_seconds(b, conv_fwd_bwd, &c);
  printf("tropical_conv shape=%s variant=%s threads=%d isa=%s fwd_gops=%.2f fwdbwd_gops=%.2f fwd_pct_peak=%.1f "
         "fwdbwd_pct_peak=%.1f\n",
         label, tropical_conv2d_variant_name(s.inner, s.outer), threads, tropical_isa(), fwd, both,
         100 * fwd / peak, 100 * both / peak);
  free(c.x), free(c.w), free(c.y), free(c.dy), free(c.dx), free(c.dw), free(c.win);
}

static double load_average(void) {
  double load = -1.0;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &load) != 1) load = -1.0;
    fclose(f);
  }
  return load;
}

int main(int argc, char **argv) {
  Bench b = {argc > 1 ? atof(argv[1]) : 0.5};
  if (b.seconds <= 0) b.seconds = 0.5;
  int threads_list[8] = {1, 2}, nthreads = 2;
  if (argc > 2) {
    nthreads = 0;
    for (int i = 2; i < argc && nthreads < 8; i++) threads_list[nthreads++] = atoi(argv[i]);
  }
  /* The TCNN paper's small net (two 4-channel 3x3 stride-2 layers) and a
   * LeNet-5 with tropical convolutions, batch 64 on 28x28 images. */
  const struct {
    const char *label;
    TropicalConvShape s;
  } convs[] = {
      {"tcnn1_b64_1x28x28_c4_k3s2p1", {64, 1, 28, 28, 4, 3, 3, 2, 2, 1, 1, TROPICAL_INNER_MAX, TROPICAL_OUTER_SUM}},
      {"tcnn2_b64_4x14x14_c4_k3s2p1", {64, 4, 14, 14, 4, 3, 3, 2, 2, 1, 1, TROPICAL_INNER_MAX, TROPICAL_OUTER_SUM}},
      {"lenet1_b64_1x28x28_c6_k5p2", {64, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2, TROPICAL_INNER_MAX, TROPICAL_OUTER_SUM}},
      {"lenet2_b64_6x14x14_c16_k5", {64, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0, TROPICAL_INNER_MAX, TROPICAL_OUTER_SUM}},
  };
  printf("tropical_speed: isa=%s seconds_per_figure=%.2f load_average_1min=%.2f\n", tropical_isa(), b.seconds,
         load_average());
  for (int ti = 0; ti < nthreads; ti++) {
    int threads = threads_list[ti];
    omp_set_num_threads(threads);
    double peak = peak_add_max_gops(threads, 0.3);
    printf("tropical_peak threads=%d add_max_gops=%.2f load_average_1min=%.2f\n", threads, peak, load_average());
    bench_matmul(&b, "1024x1024x1024", 1024, 1024, 1024, threads, peak);
    bench_matmul(&b, "mmp_b256_784to256", 256, 256, 784, threads, peak);
    bench_matmul(&b, "mmp_b256_256to256", 256, 256, 256, threads, peak);
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) {
      bench_conv(&b, convs[i].label, convs[i].s, threads, peak);
      if (i == 3) {
        TropicalConvShape s = convs[i].s;
        s.inner = TROPICAL_INNER_MIN, s.outer = TROPICAL_OUTER_MAX;
        bench_conv(&b, convs[i].label, s, threads, peak);
      }
    }
  }
  printf("tropical_speed: load_average_1min=%.2f at the end\n", load_average());
  tropical_scratch_release();
  return 0;
}
