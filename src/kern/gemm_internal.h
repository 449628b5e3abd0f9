/* Private to the GEMM sources of kern/ (not part of the kern API): the
 * backends behind gemm() and the direct kernels for very narrow linear
 * layers. The public contract (row-major, op = transpose if trans*,
 * beta == 0 overwrites) is gemm.h's. */
#ifndef FIVEFOLD_KERN_GEMM_INTERNAL_H
#define FIVEFOLD_KERN_GEMM_INTERNAL_H

#include <stddef.h>

/* OpenBLAS cblas_sgemm (gemm_openblas.c). M, N, K > 0. */
void gemm_openblas_f32(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc);

/* oneDNN matmul (gemm_onednn.c), fp32 or bf16 inputs with fp32
 * accumulation and fp32 C. M, N, K > 0 and beta 0 or 1 (gemm() scales C
 * itself for other betas). 0 on success, -1 when oneDNN failed (err says
 * why; C is unchanged). */
int gemm_onednn(int bf16, int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc, char *err, size_t err_len);

/* oneDNN's effective ISA, e.g. "avx512_core_bf16" (gemm_onednn.c). */
const char *gemm_onednn_isa_name(void);
/* Primitives created so far (gemm_onednn.c). */
int gemm_onednn_primitive_count(void);

/* One bf16 product's shape, the key of the fixed-shape primitives
 * (gemm_onednn_shapes.c); A and B are dense in the bf16 path, so their
 * strides follow from the dimensions. */
typedef struct GemmShapeKey {
  int ta, tb, beta_sum, alpha_scaled;
  int M, N, K, ldc;
} GemmShapeKey;
/* Makes the primitive for a key (an opaque pointer), or NULL on failure. */
typedef void *(*GemmShapeCreate)(const GemmShapeKey *key);
/* The fixed-shape primitive for `key`, made by `create` on first use and
 * kept; NULL when oneDNN could not make one (the caller then uses the
 * run-time primitive). *owned is 1 when the table was full and the
 * primitive was made for this call only: the caller destroys it. */
void *gemm_shape_primitive(const GemmShapeKey *key, GemmShapeCreate create, int *owned);
/* Counts one product run on a fixed-shape primitive. */
void gemm_shape_count_product(void);
/* Whether the calling thread is inside kern_gemm_rows_vary_begin/end. */
int gemm_shape_rows_vary(void);

/* Direct kernels for linear layers with N <= 16 outputs (gemm_skinny.c);
 * gemm_skinny_applies() is 0 where the build has no AVX2. */
int gemm_skinny_applies(int M, int K, int N);
void gemm_skinny_forward(float *y, const float *x, const float *w, int M, int K, int N, int accumulate);
void gemm_skinny_backward_dx(float *dx, const float *dy, const float *w, int M, int K, int N, int accumulate);
void gemm_skinny_backward_dw(float *dw, const float *dy, const float *x, int M, int K, int N);

#endif
