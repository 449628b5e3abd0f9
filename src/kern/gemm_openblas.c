/* The OpenBLAS backend of gemm(): cblas_sgemm as it is, fp32 only. Kept
 * selectable (--gemm-backend openblas) as the reference the oneDNN backend
 * is compared with, and for machines where oneDNN is slower. */
#include <cblas.h>

#include "kern/gemm_internal.h"

void gemm_openblas_f32(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
}
