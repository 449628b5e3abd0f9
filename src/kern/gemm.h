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
/* How many run-time-shape oneDNN matmul primitives exist (each made once,
 * on first use of its transpose/beta/alpha/precision kind): shapes never
 * add any. */
int kern_gemm_primitive_count(void);

/* Fixed-shape primitives for bf16 products (gemm_onednn_shapes.c): each
 * shape gets a primitive of its own, which oneDNN can run on the AMX tile
 * unit. FIVEFOLD_GEMM_FIXED_SHAPES=auto (the default: only where oneDNN's
 * ISA has AMX), on or off, read at first use. Results agree with the
 * run-time primitive to fp32 rounding of the bf16 products (the kernels
 * sum in other orders), not bit for bit; which kernel a product gets
 * depends only on its shape and the rows-vary mark, so runs repeat bit for
 * bit. */
typedef enum { GEMM_FIXED_SHAPES_AUTO = 0, GEMM_FIXED_SHAPES_ON = 1, GEMM_FIXED_SHAPES_OFF = 2 } GemmFixedShapes;
GemmFixedShapes kern_gemm_fixed_shapes_mode(void);
/* Overrides the variable for the rest of the process (tests, benchmarks). */
void kern_gemm_set_fixed_shapes(GemmFixedShapes mode);
/* Whether bf16 products use fixed-shape primitives now (auto resolved). */
int kern_gemm_fixed_shapes_active(void);
/* Fixed-shape primitives made and kept so far, and products run on one. */
int kern_gemm_fixed_shape_count(void);
long kern_gemm_fixed_shape_products(void);
/* Marks the calling thread's products, until the matching end, as having
 * row counts that change from call to call (dropless MoE experts): they
 * keep the run-time primitive, since a fixed one would be compiled for
 * nearly every call. Nests; end takes what begin returned. */
int kern_gemm_rows_vary_begin(void);
void kern_gemm_rows_vary_end(int previous);
/* 0 when FIVEFOLD_GEMM_FIXED_SHAPES is unset, auto, on, off, 1 or 0; else
 * -1 with `err` naming the variable, its value and what is expected. */
int kern_gemm_fixed_shapes_check_env(char *err, size_t err_len);

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
