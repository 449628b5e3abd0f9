/* linear_forward / linear_backward on narrow layers (N <= 16 outputs, the
 * router's shape), which take their own vectorised path rather than cblas:
 * against a double-precision reference, for shapes around the vector width. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "kern/gemm.h"

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void check_shape(int M, int K, int N) {
  unsigned seed = (unsigned)(M * 131 + K * 17 + N);
  float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K);
  float *y = malloc(sizeof(float) * M * N), *dy = malloc(sizeof(float) * M * N);
  float *dx = malloc(sizeof(float) * M * K), *dw = malloc(sizeof(float) * N * K);
  for (int i = 0; i < M * K; i++) x[i] = frand(&seed);
  for (int i = 0; i < N * K; i++) w[i] = frand(&seed);
  for (int i = 0; i < M * N; i++) dy[i] = frand(&seed);
  for (int i = 0; i < M * K; i++) dx[i] = 0.5f; /* checks accumulate_dx */
  for (int i = 0; i < N * K; i++) dw[i] = 0.25f; /* dw always accumulates */
  linear_forward(y, x, w, M, K, N, 0);
  linear_backward(dx, dw, dy, x, w, M, K, N, 1);
  double tol = 1e-5 * K;
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double ref = 0;
      for (int k = 0; k < K; k++) ref += (double)x[m * K + k] * w[n * K + k];
      assert_true(fabs(ref - y[m * N + n]) <= tol);
    }
  for (int m = 0; m < M; m++)
    for (int k = 0; k < K; k++) {
      double ref = 0.5;
      for (int n = 0; n < N; n++) ref += (double)dy[m * N + n] * w[n * K + k];
      assert_true(fabs(ref - dx[m * K + k]) <= 1e-5 * (N + 1));
    }
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) {
      double ref = 0.25;
      for (int m = 0; m < M; m++) ref += (double)dy[m * N + n] * x[m * K + k];
      assert_true(fabs(ref - dw[n * K + k]) <= 1e-5 * (M + 1));
    }
  free(x), free(w), free(y), free(dy), free(dx), free(dw);
}

static void test_narrow_layers_match_reference(void **state) {
  (void)state;
  static const int Ns[] = {1, 2, 7, 8, 9, 15, 16, 17};
  static const int Ks[] = {8, 9, 64, 100};
  static const int Ms[] = {1, 5, 300};
  for (size_t a = 0; a < sizeof Ns / sizeof *Ns; a++)
    for (size_t b = 0; b < sizeof Ks / sizeof *Ks; b++)
      for (size_t c = 0; c < sizeof Ms / sizeof *Ms; c++) check_shape(Ms[c], Ks[b], Ns[a]);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_narrow_layers_match_reference)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
