/* RMSNorm: forward against a double reference, backward by finite
 * differences (dx and dw), the accumulate contract, and the row/column
 * parallel paths against the double-precision analytic gradient. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/kern_test_util.h"
#include "kern/rmsnorm.h"

static const float kEps = 1e-5f;

static void rmsnorm_reference(double *out, double *rstd, const float *x, const float *w, int N, int C) {
  for (int n = 0; n < N; n++) {
    double ss = 0.0;
    for (int c = 0; c < C; c++) ss += (double)x[n * C + c] * x[n * C + c];
    double r = 1.0 / sqrt(ss / C + kEps);
    rstd[n] = r;
    for (int c = 0; c < C; c++) out[n * C + c] = x[n * C + c] * r * w[c];
  }
}

/* Analytic gradient in double, for the sizes too large to difference. */
static void rmsnorm_backward_reference(double *dx, double *dw, const float *dy, const float *x, const float *w,
                                       int N, int C) {
  for (int n = 0; n < N; n++) {
    double ss = 0.0, dot = 0.0;
    for (int c = 0; c < C; c++) ss += (double)x[n * C + c] * x[n * C + c];
    double r = 1.0 / sqrt(ss / C + kEps);
    for (int c = 0; c < C; c++) dot += (double)dy[n * C + c] * w[c] * x[n * C + c];
    for (int c = 0; c < C; c++) {
      dx[n * C + c] = r * (dy[n * C + c] * (double)w[c] - x[n * C + c] * r * r * dot / C);
      dw[c] += (double)dy[n * C + c] * x[n * C + c] * r;
    }
  }
}

typedef struct RmsCase {
  int N, C;
  float *x, *w, *out, *rstd, *r;
} RmsCase;

static double rms_loss(void *ctx) {
  RmsCase *c = ctx;
  rmsnorm_forward(c->out, c->rstd, c->x, c->w, c->N, c->C, kEps);
  return test_dot_loss(c->out, c->r, (size_t)c->N * c->C);
}

static void test_rmsnorm_forward_matches_reference(void **state) {
  (void)state;
  const int N = 5, C = 37;
  float *x = test_alloc(N * C), *w = test_alloc(C), *out = test_alloc(N * C), *rstd = test_alloc(N);
  double *ref = test_alloc_d(N * C), *ref_rstd = test_alloc_d(N);
  test_fill_normal(x, N * C, 1, 2.0f);
  test_fill_normal(w, C, 2, 1.0f);
  rmsnorm_forward(out, rstd, x, w, N, C, kEps);
  rmsnorm_reference(ref, ref_rstd, x, w, N, C);
  assert_true(test_rel_err(out, ref, N * C, 1.0) < 1e-6);
  assert_true(test_rel_err(rstd, ref_rstd, N, 1.0) < 1e-6);
  free(x), free(w), free(out), free(rstd), free(ref), free(ref_rstd);
}

static void test_rmsnorm_backward_gradcheck(void **state) {
  (void)state;
  RmsCase c = {.N = 4, .C = 19};
  size_t nc = (size_t)c.N * c.C;
  c.x = test_alloc(nc), c.w = test_alloc(c.C), c.out = test_alloc(nc), c.rstd = test_alloc(c.N), c.r = test_alloc(nc);
  test_fill_normal(c.x, nc, 10, 1.0f);
  test_fill_normal(c.w, c.C, 11, 1.0f);
  test_fill_normal(c.r, nc, 12, 1.0f);
  float *dx = test_alloc(nc), *dw = test_alloc(c.C);
  rmsnorm_forward(c.out, c.rstd, c.x, c.w, c.N, c.C, kEps);
  rmsnorm_backward(dx, dw, c.r, c.x, c.w, c.rstd, c.N, c.C);
  double ex = test_gradcheck(c.x, dx, nc, rms_loss, &c, 1e-2f, 1000);
  double ew = test_gradcheck(c.w, dw, c.C, rms_loss, &c, 1e-2f, 1000);
  print_message("rmsnorm gradcheck: dx %.3g dw %.3g\n", ex, ew);
  assert_true(ex < 2e-3);
  assert_true(ew < 2e-3);

  /* Both gradients accumulate onto existing contents. */
  float *dx2 = test_alloc(nc), *dw2 = test_alloc(c.C);
  for (size_t i = 0; i < nc; i++) dx2[i] = 0.5f;
  for (int i = 0; i < c.C; i++) dw2[i] = -0.25f;
  rmsnorm_backward(dx2, dw2, c.r, c.x, c.w, c.rstd, c.N, c.C);
  for (size_t i = 0; i < nc; i++) assert_true(fabsf(dx2[i] - (0.5f + dx[i])) < 1e-5f);
  for (int i = 0; i < c.C; i++) assert_true(fabsf(dw2[i] - (-0.25f + dw[i])) < 1e-5f);
  free(c.x), free(c.w), free(c.out), free(c.rstd), free(c.r), free(dx), free(dw), free(dx2), free(dw2);
}

/* Large enough for the OpenMP paths; C not a multiple of the column block. */
static void test_rmsnorm_parallel_sizes_match_reference(void **state) {
  (void)state;
  const int N = 300, C = 200;
  size_t nc = (size_t)N * C;
  float *x = test_alloc(nc), *w = test_alloc(C), *out = test_alloc(nc), *rstd = test_alloc(N), *dy = test_alloc(nc);
  float *dx = test_alloc(nc), *dw = test_alloc(C);
  double *ref = test_alloc_d(nc), *ref_rstd = test_alloc_d(N), *ref_dx = test_alloc_d(nc), *ref_dw = test_alloc_d(C);
  test_fill_normal(x, nc, 30, 1.0f);
  test_fill_normal(w, C, 31, 1.0f);
  test_fill_normal(dy, nc, 32, 1.0f);
  rmsnorm_forward(out, rstd, x, w, N, C, kEps);
  rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
  rmsnorm_reference(ref, ref_rstd, x, w, N, C);
  rmsnorm_backward_reference(ref_dx, ref_dw, dy, x, w, N, C);
  double eo = test_rel_err(out, ref, nc, 1.0), ex = test_rel_err(dx, ref_dx, nc, 1.0),
         ew = test_rel_err(dw, ref_dw, C, 1.0);
  print_message("rmsnorm large: out %.3g dx %.3g dw %.3g\n", eo, ex, ew);
  assert_true(eo < 1e-5 && ex < 1e-5 && ew < 1e-5);
  free(x), free(w), free(out), free(rstd), free(dy), free(dx), free(dw);
  free(ref), free(ref_rstd), free(ref_dx), free(ref_dw);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rmsnorm_forward_matches_reference),
      cmocka_unit_test(test_rmsnorm_backward_gradcheck),
      cmocka_unit_test(test_rmsnorm_parallel_sizes_match_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
