/* GEMM: thin wrappers over cblas_sgemm with the layouts the model uses.
 * Weights are stored [out, in] (PyTorch / Hugging Face layout), activations
 * [tokens, features], all row-major float32. Parameter gradients always
 * accumulate (+=) so micro-batches can be summed in place. */
#ifndef FIVEFOLD_KERN_GEMM_H
#define FIVEFOLD_KERN_GEMM_H

/* C[M,N] = alpha * op(A) * op(B) + beta * C, row-major, op = transpose if trans*. */
void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc);

/* y[M,N] = x[M,K] * w[N,K]^T (+ y if accumulate). */
void linear_forward(float *y, const float *x, const float *w, int M, int K, int N, int accumulate);

/* Backward of linear_forward given dy[M,N]:
 *   dx[M,K]  = dy * w      (skipped if dx == NULL; += if accumulate_dx, else overwritten)
 *   dw[N,K] += dy^T * x    (skipped if dw == NULL) */
void linear_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int M, int K,
                     int N, int accumulate_dx);

#endif
