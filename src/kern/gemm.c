/* GEMM wrappers over cblas_sgemm in the row-major layouts the model uses
 * (weights [out, in], activations [tokens, features]). */
#include "kern/gemm.h"

#include <cblas.h>

void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    /* An empty product: BLAS implementations differ on whether they touch C
     * at all here, so apply beta ourselves (beta == 0 overwrites, even NaN). */
    for (int i = 0; i < M; i++) {
      float *row = C + (long)i * ldc;
      for (int j = 0; j < N; j++) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
}

void linear_forward(float *y, const float *x, const float *w, int M, int K, int N, int accumulate) {
  gemm(0, 1, M, N, K, 1.0f, x, K, w, K, accumulate ? 1.0f : 0.0f, y, N);
}

void linear_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int M, int K,
                     int N, int accumulate_dx) {
  if (dx) gemm(0, 0, M, K, N, 1.0f, dy, N, w, K, accumulate_dx ? 1.0f : 0.0f, dx, K);
  if (dw) gemm(1, 0, N, K, M, 1.0f, dy, N, x, K, 1.0f, dw, K);
}
