/* LayerNorm: forward against a double reference, backward (dx, dw, db) by
 * finite differences, the accumulate contract, and the OpenMP paths against
 * the double-precision analytic gradient. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/kern_test_util.h"
#include "kern/layernorm.h"

static const float kEps = 1e-5f;

static void layernorm_reference(double *out, const float *x, const float *w, const float *b, int N, int C) {
  for (int n = 0; n < N; n++) {
    double mean = 0.0, var = 0.0;
    for (int c = 0; c < C; c++) mean += x[n * C + c];
    mean /= C;
    for (int c = 0; c < C; c++) var += (x[n * C + c] - mean) * (x[n * C + c] - mean);
    const double r = 1.0 / sqrt(var / C + kEps);
    for (int c = 0; c < C; c++) out[n * C + c] = (x[n * C + c] - mean) * r * w[c] + b[c];
  }
}

static void layernorm_backward_reference(double *dx, double *dw, double *db, const float *dy, const float *x,
                                         const float *w, int N, int C) {
  for (int n = 0; n < N; n++) {
    double mean = 0.0, var = 0.0, g_sum = 0.0, gx_sum = 0.0;
    for (int c = 0; c < C; c++) mean += x[n * C + c];
    mean /= C;
    for (int c = 0; c < C; c++) var += (x[n * C + c] - mean) * (x[n * C + c] - mean);
    const double r = 1.0 / sqrt(var / C + kEps);
    for (int c = 0; c < C; c++) {
      const double xhat = (x[n * C + c] - mean) * r, g = (double)dy[n * C + c] * w[c];
      g_sum += g;
      gx_sum += g * xhat;
      dw[c] += dy[n * C + c] * xhat;
      db[c] += dy[n * C + c];
    }
    for (int c = 0; c < C; c++) {
      const double xhat = (x[n * C + c] - mean) * r;
      dx[n * C + c] = r * ((double)dy[n * C + c] * w[c] - g_sum / C - xhat * gx_sum / C);
    }
  }
}

typedef struct LnCase {
  int N, C;
  float *x, *w, *b, *out, *rstd, *r;
} LnCase;

static double ln_loss(void *ctx) {
  LnCase *c = ctx;
  layernorm_forward(c->out, c->rstd, c->x, c->w, c->b, c->N, c->C, kEps);
  return test_dot_loss(c->out, c->r, (size_t)c->N * c->C);
}

static void test_layernorm_forward_matches_reference(void **state) {
  (void)state;
  const int N = 5, C = 37;
  float *x = test_alloc(N * C), *w = test_alloc(C), *b = test_alloc(C), *out = test_alloc(N * C),
        *rstd = test_alloc(N);
  double *ref = test_alloc_d(N * C);
  test_fill_normal(x, N * C, 1, 2.0f);
  for (int i = 0; i < N * C; i++) x[i] += 3.0f; /* a mean far from zero */
  test_fill_normal(w, C, 2, 1.0f);
  test_fill_normal(b, C, 3, 1.0f);
  layernorm_forward(out, rstd, x, w, b, N, C, kEps);
  layernorm_reference(ref, x, w, b, N, C);
  assert_true(test_rel_err(out, ref, N * C, 1.0) < 1e-5);
  free(x), free(w), free(b), free(out), free(rstd), free(ref);
}

static void test_layernorm_backward_gradcheck(void **state) {
  (void)state;
  LnCase c = {.N = 4, .C = 19};
  const size_t nc = (size_t)c.N * c.C;
  c.x = test_alloc(nc), c.w = test_alloc(c.C), c.b = test_alloc(c.C), c.out = test_alloc(nc);
  c.rstd = test_alloc(c.N), c.r = test_alloc(nc);
  test_fill_normal(c.x, nc, 10, 1.0f);
  test_fill_normal(c.w, c.C, 11, 1.0f);
  test_fill_normal(c.b, c.C, 13, 1.0f);
  test_fill_normal(c.r, nc, 12, 1.0f);
  float *dx = test_alloc(nc), *dw = test_alloc(c.C), *db = test_alloc(c.C);
  layernorm_forward(c.out, c.rstd, c.x, c.w, c.b, c.N, c.C, kEps);
  layernorm_backward(dx, dw, db, c.r, c.x, c.w, c.rstd, c.N, c.C);
  const double ex = test_gradcheck(c.x, dx, nc, ln_loss, &c, 1e-2f, 1000);
  const double ew = test_gradcheck(c.w, dw, c.C, ln_loss, &c, 1e-2f, 1000);
  const double eb = test_gradcheck(c.b, db, c.C, ln_loss, &c, 1e-2f, 1000);
  print_message("layernorm gradcheck: dx %.3g dw %.3g db %.3g\n", ex, ew, eb);
  assert_true(ex < 2e-3);
  assert_true(ew < 2e-3);
  assert_true(eb < 2e-3);

  /* Every gradient accumulates onto existing contents. */
  float *dx2 = test_alloc(nc), *dw2 = test_alloc(c.C), *db2 = test_alloc(c.C);
  for (size_t i = 0; i < nc; i++) dx2[i] = 0.5f;
  for (int i = 0; i < c.C; i++) dw2[i] = -0.25f, db2[i] = 0.75f;
  layernorm_backward(dx2, dw2, db2, c.r, c.x, c.w, c.rstd, c.N, c.C);
  for (size_t i = 0; i < nc; i++) assert_true(fabsf(dx2[i] - (0.5f + dx[i])) < 1e-5f);
  for (int i = 0; i < c.C; i++) {
    assert_true(fabsf(dw2[i] - (-0.25f + dw[i])) < 1e-5f);
    assert_true(fabsf(db2[i] - (0.75f + db[i])) < 1e-5f);
  }
  free(c.x), free(c.w), free(c.b), free(c.out), free(c.rstd), free(c.r);
  free(dx), free(dw), free(db), free(dx2), free(dw2), free(db2);
}

/* Large enough for the OpenMP paths; C not a multiple of the column block. */
static void test_layernorm_parallel_sizes_match_reference(void **state) {
  (void)state;
  const int N = 300, C = 200;
  const size_t nc = (size_t)N * C;
  float *x = test_alloc(nc), *w = test_alloc(C), *b = test_alloc(C), *out = test_alloc(nc), *rstd = test_alloc(N);
  float *dy = test_alloc(nc), *dx = test_alloc(nc), *dw = test_alloc(C), *db = test_alloc(C);
  double *ref = test_alloc_d(nc), *ref_dx = test_alloc_d(nc), *ref_dw = test_alloc_d(C), *ref_db = test_alloc_d(C);
  test_fill_normal(x, nc, 30, 1.0f);
  test_fill_normal(w, C, 31, 1.0f);
  test_fill_normal(b, C, 33, 1.0f);
  test_fill_normal(dy, nc, 32, 1.0f);
  layernorm_forward(out, rstd, x, w, b, N, C, kEps);
  layernorm_backward(dx, dw, db, dy, x, w, rstd, N, C);
  layernorm_reference(ref, x, w, b, N, C);
  layernorm_backward_reference(ref_dx, ref_dw, ref_db, dy, x, w, N, C);
  const double eo = test_rel_err(out, ref, nc, 1.0), ex = test_rel_err(dx, ref_dx, nc, 1.0),
               ew = test_rel_err(dw, ref_dw, C, 1.0), eb = test_rel_err(db, ref_db, C, 1.0);
  print_message("layernorm large: out %.3g dx %.3g dw %.3g db %.3g\n", eo, ex, ew, eb);
  assert_true(eo < 1e-5 && ex < 1e-5 && ew < 1e-5 && eb < 1e-5);
  free(x), free(w), free(b), free(out), free(rstd), free(dy), free(dx), free(dw), free(db);
  free(ref), free(ref_dx), free(ref_dw), free(ref_db);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layernorm_forward_matches_reference),
      cmocka_unit_test(test_layernorm_backward_gradcheck),
      cmocka_unit_test(test_layernorm_parallel_sizes_match_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
