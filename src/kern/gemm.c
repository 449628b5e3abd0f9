/* gemm() dispatch: the empty and beta cases every backend shares, the
 * choice between oneDNN and OpenBLAS and between fp32 and bf16, and the
 * linear-layer wrappers (which send very narrow fp32 layers, the MoE
 * router, to the direct kernels of gemm_skinny.c). Which products are
 * bf16 depends only on the layer, never on its shape, so that a TP shard
 * (narrower) runs in the same precision as the whole layer on one rank. */
#include "kern/gemm.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kern/bf16.h"
#include "kern/gemm_internal.h"

static _Atomic int selected_backend = GEMM_BACKEND_ONEDNN;
static atomic_flag fallback_warned = ATOMIC_FLAG_INIT;

const char *kern_gemm_backend_name(GemmBackend backend) {
  return backend == GEMM_BACKEND_OPENBLAS ? "openblas" : "onednn";
}

int kern_gemm_backend_parse(const char *name, GemmBackend *out) {
  if (!name) return -1;
  if (strcmp(name, "onednn") == 0) {
    *out = GEMM_BACKEND_ONEDNN;
    return 0;
  }
  if (strcmp(name, "openblas") == 0) {
    *out = GEMM_BACKEND_OPENBLAS;
    return 0;
  }
  return -1;
}

int kern_gemm_set_backend(GemmBackend backend, char *err, size_t err_len) {
  if (backend != GEMM_BACKEND_ONEDNN && backend != GEMM_BACKEND_OPENBLAS) {
    if (err && err_len) snprintf(err, err_len, "unknown GEMM backend %d (expected onednn or openblas)", (int)backend);
    return -1;
  }
  if (backend == GEMM_BACKEND_ONEDNN) {
    /* One tiny product proves the engine and a primitive can be made, so a
     * broken oneDNN is reported here rather than warned about mid-run. */
    const float a = 1.0f, b = 2.0f;
    float c = 0.0f;
    if (gemm_onednn(0, 0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1, err, err_len) != 0) return -1;
  }
  atomic_store(&selected_backend, (int)backend);
  return 0;
}

GemmBackend kern_gemm_backend(void) { return (GemmBackend)atomic_load_explicit(&selected_backend, memory_order_relaxed); }

const char *kern_gemm_isa_name(void) { return gemm_onednn_isa_name(); }

int kern_gemm_primitive_count(void) { return gemm_onednn_primitive_count(); }

/* Applies C = beta * C; returns 1 when that finished the product (K == 0). */
static int apply_beta(int M, int N, int K, float *beta, float *C, int ldc) {
  if (K > 0 && (*beta == 0.0f || *beta == 1.0f)) return 0;
  for (int i = 0; i < M; i++) {
    float *row = C + (long)i * ldc;
    for (int j = 0; j < N; j++) row[j] = *beta == 0.0f ? 0.0f : *beta * row[j];
  }
  *beta = 1.0f;
  return K <= 0;
}

int gemm_with(GemmBackend backend, KernPrecision precision, int transA, int transB, int M, int N, int K,
              float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
              char *err, size_t err_len) {
  if (precision == KERN_PRECISION_BF16 && !kern_bf16_supported(err, err_len)) return -1;
  if (M <= 0 || N <= 0) return 0;
  /* BLAS implementations differ on whether they touch C at all when K is
   * 0, and oneDNN's accumulation is a sum post-op of scale 1: betas other
   * than 0 and 1, and empty products, are applied here. */
  if (apply_beta(M, N, K, &beta, C, ldc)) return 0;
  if (precision == KERN_PRECISION_BF16 || backend == GEMM_BACKEND_ONEDNN) {
    if (gemm_onednn(precision == KERN_PRECISION_BF16, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
                    err, err_len) == 0)
      return 0;
    /* oneDNN left C as it was (beta already applied): finish in fp32. */
    gemm_openblas_f32(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return -1;
  }
  gemm_openblas_f32(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  return 0;
}

static void gemm_in(KernPrecision precision, int transA, int transB, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  char err[256];
  if (gemm_with(kern_gemm_backend(), precision, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, err,
                sizeof err) == 0)
    return;
  /* C holds the product, computed by OpenBLAS in fp32 (kern_set_precision
   * refuses bf16 where it cannot run, so it is never left undone). */
  if (!atomic_flag_test_and_set(&fallback_warned))
    fprintf(stderr, "warning: GEMM backend %s (%s) failed: %s; such products are computed by OpenBLAS in fp32\n",
            kern_gemm_backend_name(kern_gemm_backend()), kern_precision_name(precision), err);
}

void gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc) {
  gemm_in(kern_precision(), transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void linear_forward_in(KernPrecision p, float *y, const float *x, const float *w, int M, int K, int N,
                              int accumulate) {
  if (p == KERN_PRECISION_FP32 && gemm_skinny_applies(M, K, N)) {
    gemm_skinny_forward(y, x, w, M, K, N, accumulate);
    return;
  }
  gemm_in(p, 0, 1, M, N, K, 1.0f, x, K, w, K, accumulate ? 1.0f : 0.0f, y, N);
}

static void linear_backward_in(KernPrecision p, float *dx, float *dw, const float *dy, const float *x, const float *w,
                               int M, int K, int N, int accumulate_dx) {
  if (p == KERN_PRECISION_FP32 && gemm_skinny_applies(M, K, N)) {
    if (dx) gemm_skinny_backward_dx(dx, dy, w, M, K, N, accumulate_dx);
    if (dw) gemm_skinny_backward_dw(dw, dy, x, M, K, N);
    return;
  }
  if (dx) gemm_in(p, 0, 0, M, K, N, 1.0f, dy, N, w, K, accumulate_dx ? 1.0f : 0.0f, dx, K);
  if (dw) gemm_in(p, 1, 0, N, K, M, 1.0f, dy, N, x, K, 1.0f, dw, K);
}

void linear_forward(float *y, const float *x, const float *w, int M, int K, int N, int accumulate) {
  linear_forward_in(kern_precision(), y, x, w, M, K, N, accumulate);
}

void linear_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int M, int K,
                     int N, int accumulate_dx) {
  linear_backward_in(kern_precision(), dx, dw, dy, x, w, M, K, N, accumulate_dx);
}

void linear_forward_fp32(float *y, const float *x, const float *w, int M, int K, int N, int accumulate) {
  linear_forward_in(KERN_PRECISION_FP32, y, x, w, M, K, N, accumulate);
}

void linear_backward_fp32(float *dx, float *dw, const float *dy, const float *x, const float *w, int M, int K, int N,
                          int accumulate_dx) {
  linear_backward_in(KERN_PRECISION_FP32, dx, dw, dy, x, w, M, K, N, accumulate_dx);
}
