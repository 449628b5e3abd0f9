/* GEMM: the matrix products of every layer, in the row-major layouts the
 * model uses. Weights are stored [out, in] (PyTorch / Hugging Face layout),
 * activations [tokens, features], all float32 in memory. Parameter
 * gradients always accumulate (+=) so micro-batches can be summed in place.
 *
 * Two backends compute them: oneDNN matmul (the default) and OpenBLAS
 * cblas_sgemm. The process-wide precision (kern/precision.h) decides whether
 * the inputs are multiplied in fp32 or rounded to bf16 with fp32
 * accumulation; bf16 always runs on oneDNN (OpenBLAS has no bf16 path we
 * use), whichever backend is selected for fp32. In bf16 an operand that
 * lies in a weight matrix registered in the bf16 weight cache
 * (kern/bf16_weights.h) is read from its bf16 copy, converted once per
 * optimizer step, with the same result bit for bit. Safe to call from
 * OpenMP worker threads concurrently. */
#ifndef FIVEFOLD_KERN_GEMM_H
#define FIVEFOLD_KERN_GEMM_H

#include <stddef.h>

#include "kern/precision.h"

typedef enum { GEMM_BACKEND_ONEDNN = 0, GEMM_BACKEND_OPENBLAS = 1 } GemmBackend;

/* Selects the backend of every later gemm() call (process-wide). Returns 0,
 * or -1 with `err` set when the backend cannot run here (oneDNN failing
 * its first product). */
int kern_gemm_set_backend(GemmBackend backend, char *err, size_t err_len);
GemmBackend kern_gemm_backend(void);
/* "onednn" / "openblas". */
const char *kern_gemm_backend_name(GemmBackend backend);
/* 0 and *out set for "onednn" or "openblas"; -1 otherwise. */
int kern_gemm_backend_parse(const char *name, GemmBackend *out);
/* The instruction set oneDNN runs with here, e.g. "avx512_core_bf16"
 * (after ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA caps). */
const char *kern_gemm_isa_name(void);
/* How many oneDNN matmul primitives exist (each made once, on first use
 * of its transpose/beta/alpha/precision kind): shapes never add any. */
int kern_gemm_primitive_count(void);

/* C[M,N] = alpha * op(A) * op(B) + beta * C, row-major, op = transpose if
 * trans*, on the selected backend in the process-wide precision. beta == 0
 * overwrites C (NaN included); K == 0 applies beta only. If oneDNN fails
 * (it should not), the product is computed by OpenBLAS in fp32 and a
 * warning is printed once. */
void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc);

/* gemm() on an explicit backend and precision (tests and benchmarks).
 * Returns 0, or -1 with `err` set when that combination cannot run here:
 * bf16 without CPU support (C unchanged), or a oneDNN failure (C then
 * holds the product computed by OpenBLAS in fp32). */
int gemm_with(GemmBackend backend, KernPrecision precision, int transA, int transB, int M, int N, int K,
              float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
              char *err, size_t err_len);

/* y[M,N] = x[M,K] * w[N,K]^T (+ y if accumulate). */
void linear_forward(float *y, const float *x, const float *w, int M, int K, int N, int accumulate);

/* Backward of linear_forward given dy[M,N]:
 *   dx[M,K]  = dy * w      (skipped if dx == NULL; += if accumulate_dx, else overwritten)
 *   dw[N,K] += dy^T * x    (skipped if dw == NULL) */
void linear_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int M, int K,
                     int N, int accumulate_dx);

/* The same in fp32 whatever the process-wide precision: for the layers
 * Megatron-Core keeps in fp32 under bf16 (the MoE router). */
void linear_forward_fp32(float *y, const float *x, const float *w, int M, int K, int N, int accumulate);
void linear_backward_fp32(float *dx, float *dw, const float *dy, const float *x, const float *w, int M, int K, int N,
                          int accumulate_dx);

#endif
