/* GEMM wrappers: every transpose combination with padded leading
 * dimensions against a double reference, and the linear layer's forward,
 * backward (finite differences) and accumulate/overwrite contract. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/gemm.h"
#include "kern/kern_test_util.h"

static void gemm_reference(int transA, int transB, int M, int N, int K, double alpha, const float *A, int lda,
                           const float *B, int ldb, double beta, const float *C0, int ldc, double *C) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0.0;
      for (int k = 0; k < K; k++) {
        double a = transA ? A[(long)k * lda + i] : A[(long)i * lda + k];
        double b = transB ? B[(long)j * ldb + k] : B[(long)k * ldb + j];
        s += a * b;
      }
      C[(long)i * ldc + j] = alpha * s + beta * C0[(long)i * ldc + j];
    }
}

static void test_gemm_all_transposes(void **state) {
  (void)state;
  const int M = 13, N = 9, K = 17, pad = 3;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      int rows_a = ta ? K : M, rows_b = tb ? N : K;
      float *A = test_alloc((size_t)rows_a * lda), *B = test_alloc((size_t)rows_b * ldb);
      float *C = test_alloc((size_t)M * ldc), *C0 = test_alloc((size_t)M * ldc);
      double *ref = test_alloc_d((size_t)M * ldc);
      test_fill_normal(A, (size_t)rows_a * lda, 1 + ta, 1.0f);
      test_fill_normal(B, (size_t)rows_b * ldb, 3 + tb, 1.0f);
      test_fill_normal(C0, (size_t)M * ldc, 5, 1.0f);
      for (int i = 0; i < M * ldc; i++) C[i] = C0[i];
      gemm(ta, tb, M, N, K, 0.7f, A, lda, B, ldb, -1.5f, C, ldc);
      gemm_reference(ta, tb, M, N, K, 0.7, A, lda, B, ldb, -1.5, C0, ldc, ref);
      double worst = 0.0;
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double d = fabs(C[i * ldc + j] - ref[i * ldc + j]);
          if (d > worst) worst = d;
        }
      /* padding columns of C are outside the product and must be untouched */
      for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) assert_true(C[i * ldc + j] == C0[i * ldc + j]);
      print_message("gemm ta=%d tb=%d max abs err %.3g\n", ta, tb, worst);
      assert_true(worst < 1e-4);
      free(A), free(B), free(C), free(C0), free(ref);
    }
}

static void test_gemm_empty_inner_dimension_applies_beta(void **state) {
  (void)state;
  float C[6] = {1, 2, 3, 4, 5, NAN};
  float dummy = 0.0f;
  gemm(0, 0, 2, 3, 0, 1.0f, &dummy, 1, &dummy, 3, 2.0f, C, 3);
  assert_true(C[0] == 2.0f && C[4] == 10.0f);
  gemm(0, 0, 2, 3, 0, 1.0f, &dummy, 1, &dummy, 3, 0.0f, C, 3);
  for (int i = 0; i < 6; i++) assert_true(C[i] == 0.0f); /* beta 0 overwrites, NaN included */
}

typedef struct LinearCase {
  int M, K, N;
  float *x, *w, *y, *r;
} LinearCase;

static double linear_loss(void *ctx) {
  LinearCase *c = ctx;
  linear_forward(c->y, c->x, c->w, c->M, c->K, c->N, 0);
  return test_dot_loss(c->y, c->r, (size_t)c->M * c->N);
}

static void test_linear_forward_and_accumulate(void **state) {
  (void)state;
  const int M = 5, K = 7, N = 4;
  float *x = test_alloc(M * K), *w = test_alloc(N * K), *y = test_alloc(M * N);
  double *ref = test_alloc_d(M * N);
  test_fill_normal(x, M * K, 10, 1.0f);
  test_fill_normal(w, N * K, 11, 1.0f);
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double s = 0.0;
      for (int k = 0; k < K; k++) s += (double)x[m * K + k] * w[n * K + k];
      ref[m * N + n] = s;
    }
  for (int i = 0; i < M * N; i++) y[i] = NAN;
  linear_forward(y, x, w, M, K, N, 0);
  assert_true(test_rel_err(y, ref, M * N, 1.0) < 1e-6);
  linear_forward(y, x, w, M, K, N, 1);
  for (int i = 0; i < M * N; i++) ref[i] *= 2.0;
  assert_true(test_rel_err(y, ref, M * N, 1.0) < 1e-6);
  free(x), free(w), free(y), free(ref);
}

static void test_linear_backward_gradcheck(void **state) {
  (void)state;
  LinearCase c = {.M = 6, .K = 5, .N = 7};
  c.x = test_alloc(c.M * c.K), c.w = test_alloc(c.N * c.K), c.y = test_alloc(c.M * c.N), c.r = test_alloc(c.M * c.N);
  test_fill_normal(c.x, c.M * c.K, 20, 1.0f);
  test_fill_normal(c.w, c.N * c.K, 21, 1.0f);
  test_fill_normal(c.r, c.M * c.N, 22, 1.0f);
  float *dx = test_alloc(c.M * c.K), *dw = test_alloc(c.N * c.K);
  float *dx_acc = test_alloc(c.M * c.K), *dw_base = test_alloc(c.N * c.K);
  test_fill_normal(dw_base, c.N * c.K, 23, 1.0f);
  for (int i = 0; i < c.M * c.K; i++) dx[i] = NAN; /* overwritten */
  linear_backward(dx, dw, c.r, c.x, c.w, c.M, c.K, c.N, 0);
  double ex = test_gradcheck(c.x, dx, c.M * c.K, linear_loss, &c, 1e-2f, 1000);
  double ew = test_gradcheck(c.w, dw, c.N * c.K, linear_loss, &c, 1e-2f, 1000);
  print_message("linear gradcheck: dx %.3g dw %.3g\n", ex, ew);
  assert_true(ex < 1e-3);
  assert_true(ew < 1e-3);

  /* dw accumulates onto what is there; dx accumulates only when asked. */
  float *dw2 = test_alloc(c.N * c.K);
  for (int i = 0; i < c.N * c.K; i++) dw2[i] = dw_base[i];
  for (int i = 0; i < c.M * c.K; i++) dx_acc[i] = 1.0f;
  linear_backward(dx_acc, dw2, c.r, c.x, c.w, c.M, c.K, c.N, 1);
  for (int i = 0; i < c.N * c.K; i++) assert_true(fabsf(dw2[i] - (dw_base[i] + dw[i])) < 1e-5f);
  for (int i = 0; i < c.M * c.K; i++) assert_true(fabsf(dx_acc[i] - (1.0f + dx[i])) < 1e-5f);
  /* NULL outputs are skipped. */
  linear_backward(NULL, dw2, c.r, c.x, c.w, c.M, c.K, c.N, 0);
  linear_backward(dx_acc, NULL, c.r, c.x, c.w, c.M, c.K, c.N, 0);
  for (int i = 0; i < c.M * c.K; i++) assert_true(dx_acc[i] == dx[i]);
  free(c.x), free(c.w), free(c.y), free(c.r), free(dx), free(dw), free(dx_acc), free(dw_base), free(dw2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_all_transposes),
      cmocka_unit_test(test_gemm_empty_inner_dimension_applies_beta),
      cmocka_unit_test(test_linear_forward_and_accumulate),
      cmocka_unit_test(test_linear_backward_gradcheck),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
