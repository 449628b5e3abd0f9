/* The vocab-parallel LM head + cross-entropy (kern/cross_entropy_vp.h) for
 * one shard and for three shards held by three threads (tp_threads.h):
 * loss, the sum of the shards' dh, and each shard's dw rows against a
 * double-precision reference whose gradient is itself checked by finite
 * differences; chunk sizes that do and do not divide N, ignored targets
 * (one whole chunk of them), and the loss-only mode. Lives with the model
 * tests because it needs the thread harness. Tolerance: 2e-5 relative to
 * the largest element plus 1e-4 relative (fp32 GEMMs and sums). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "kern/cross_entropy_vp.h"
#include "tp_threads.h"

enum { XN = 11, XC = 7, XV = 12 };

static float g_h[XN * XC], g_w[XV * XC];
static int g_t[XN];

static void make_case(void) {
  for (int i = 0; i < XN * XC; i++) g_h[i] = (float)rng_normal(3, 0, (uint64_t)i);
  for (int i = 0; i < XV * XC; i++) g_w[i] = (float)(0.7 * rng_normal(3, 1, (uint64_t)i));
  for (int n = 0; n < XN; n++) g_t[n] = (int)(rng_u64(3, 2, (uint64_t)n) % XV);
  for (int n = 4; n < 8; n++) g_t[n] = -1; /* chunk [4, 8) ignores everything */
  g_t[1] = -1;
}

/* Sum of losses in double; dh, dw (if non-NULL) of scale * that sum. */
static double reference(const double *h, const double *w, double scale, double *dh, double *dw) {
  double total = 0;
  if (dh) memset(dh, 0, sizeof(double) * XN * XC);
  if (dw) memset(dw, 0, sizeof(double) * XV * XC);
  for (int n = 0; n < XN; n++) {
    if (g_t[n] < 0) continue;
    double z[XV], m = -INFINITY, s = 0;
    for (int v = 0; v < XV; v++) {
      z[v] = 0;
      for (int k = 0; k < XC; k++) z[v] += h[n * XC + k] * w[v * XC + k];
      m = fmax(m, z[v]);
    }
    for (int v = 0; v < XV; v++) s += exp(z[v] - m);
    total += m + log(s) - z[g_t[n]];
    for (int v = 0; v < XV && dh; v++) {
      const double g = scale * (exp(z[v] - m) / s - (v == g_t[n]));
      for (int k = 0; k < XC; k++) {
        dh[n * XC + k] += g * w[v * XC + k];
        dw[v * XC + k] += g * h[n * XC + k];
      }
    }
  }
  return total;
}

static void test_reference_by_finite_differences(void **state) {
  (void)state;
  make_case();
  double h[XN * XC], w[XV * XC], dh[XN * XC], dw[XV * XC];
  for (int i = 0; i < XN * XC; i++) h[i] = g_h[i];
  for (int i = 0; i < XV * XC; i++) w[i] = g_w[i];
  reference(h, w, 1.0, dh, dw);
  const double eps = 1e-6;
  for (int i = 0; i < XN * XC; i += 5) {
    const double keep = h[i];
    h[i] = keep + eps;
    const double up = reference(h, w, 1, NULL, NULL);
    h[i] = keep - eps;
    const double down = reference(h, w, 1, NULL, NULL);
    h[i] = keep;
    assert_true(fabs((up - down) / (2 * eps) - dh[i]) < 1e-6);
  }
  for (int i = 0; i < XV * XC; i += 3) {
    const double keep = w[i];
    w[i] = keep + eps;
    const double up = reference(h, w, 1, NULL, NULL);
    w[i] = keep - eps;
    const double down = reference(h, w, 1, NULL, NULL);
    w[i] = keep;
    assert_true(fabs((up - down) / (2 * eps) - dw[i]) < 1e-6);
  }
}

typedef struct Shard {
  TpRank *rank; /* NULL: one shard, no reduction */
  int t, r, chunk, want_grad;
  float dh[XN * XC], dw[XV * XC];
  float scratch[XN * XV + 3 * XN];
  double loss;
  long count;
} Shard;

static void *run_shard(void *arg) {
  Shard *s = arg;
  const int Vl = XV / s->t;
  XentVpReduce red = {s->rank, tp_allreduce_max, tp_allreduce_sum};
  memset(s->dw, 0, sizeof s->dw);
  lmhead_xent_vp(g_h, g_w + (size_t)s->r * Vl * XC, g_t, XN, XC, Vl, s->r * Vl, 0.25f, &s->loss, &s->count,
                 s->want_grad ? s->dh : NULL, s->want_grad ? s->dw : NULL, s->scratch, s->chunk,
                 s->rank ? &red : NULL);
  return NULL;
}

static void close_to(double a, double b, double scale, const char *what, int i) {
  if (fabs(a - b) > 2e-5 * scale + 1e-4 * fabs(b)) fail_msg("%s[%d] = %.8g, reference %.8g", what, i, a, b);
}

static void check_shards(int t, int chunk, int want_grad) {
  make_case();
  double h[XN * XC], w[XV * XC], dh[XN * XC], dw[XV * XC];
  for (int i = 0; i < XN * XC; i++) h[i] = g_h[i];
  for (int i = 0; i < XV * XC; i++) w[i] = g_w[i];
  const double loss = reference(h, w, 0.25, dh, dw);
  TpGroup group;
  TpRank ranks[TP_THREADS_MAX];
  tp_group_init(&group, ranks, t);
  static Shard sh[TP_THREADS_MAX];
  void *args[TP_THREADS_MAX];
  for (int r = 0; r < t; r++) {
    sh[r] = (Shard){t > 1 ? &ranks[r] : NULL, t, r, chunk, want_grad, {0}, {0}, {0}, 0, 0};
    args[r] = &sh[r];
  }
  tp_run(t, run_shard, args);
  double scale_h = 0, scale_w = 0;
  for (int i = 0; i < XN * XC; i++) scale_h = fmax(scale_h, fabs(dh[i]));
  for (int i = 0; i < XV * XC; i++) scale_w = fmax(scale_w, fabs(dw[i]));
  for (int r = 0; r < t; r++) {
    assert_int_equal(sh[r].count, XN - 5);
    if (fabs(sh[r].loss - loss) > 1e-5 * loss) fail_msg("shard %d: loss %.9g, reference %.9g", r, sh[r].loss, loss);
  }
  if (want_grad) {
    for (int i = 0; i < XN * XC; i++) {
      double sum = 0;
      for (int r = 0; r < t; r++) sum += sh[r].dh[i];
      close_to(sum, dh[i], scale_h, "dh summed over shards", i);
    }
    const int Vl = XV / t;
    for (int r = 0; r < t; r++)
      for (int i = 0; i < Vl * XC; i++) close_to(sh[r].dw[i], dw[(size_t)r * Vl * XC + i], scale_w, "dw", i);
  }
  tp_group_destroy(&group, ranks);
}

static void test_one_shard(void **state) {
  (void)state;
  check_shards(1, XN, 1);
  check_shards(1, 4, 1);
  check_shards(1, 3, 0);
}

static void test_three_shards(void **state) {
  (void)state;
  check_shards(3, XN, 1);
  check_shards(3, 4, 1);
  check_shards(3, 5, 0);
  check_shards(2, 4, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_by_finite_differences),
      cmocka_unit_test(test_one_shard),
      cmocka_unit_test(test_three_shards),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
