/* Elementwise helpers on float arrays; large arrays are split over the
 * OpenMP pool, small ones stay on the calling thread. */
#include "kern/vecops.h"

#include <stdlib.h>
#include <string.h>

#include "kern/kern_util.h"

void vec_zero(float *x, size_t n) {
  if (n < (size_t)KERN_PAR_MIN_ELEMS * 8) {
    memset(x, 0, n * sizeof *x);
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) x[i] = 0.0f;
}

void vec_copy(float *dst, const float *src, size_t n) {
  if (n < (size_t)KERN_PAR_MIN_ELEMS * 8) {
    memcpy(dst, src, n * sizeof *dst);
    return;
  }
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

void vec_add(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= KERN_PAR_MIN_ELEMS)
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void vec_acc(float *acc, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= KERN_PAR_MIN_ELEMS)
  for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

void vec_scale(float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= KERN_PAR_MIN_ELEMS)
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

void vec_axpy(float *y, float a, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= KERN_PAR_MIN_ELEMS)
  for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* Sum of squares over fixed-size blocks, the block sums added in order: the
 * result is the same bits whatever the thread count (it feeds gradient
 * clipping, which every parallel layout must agree on). */
#define SUMSQ_BLOCK ((size_t)1 << 14)

/* Sixteen running sums (four AVX2 registers of doubles) instead of one: with
 * a single vector accumulator every 4 elements wait on the previous FMA
 * (~1 element per cycle), slower than the stream of a 450 MB gradient buffer
 * can be read. The lanes are combined in a fixed order, so the result is
 * still the same on every run and thread count. */
enum { SUMSQ_LANES = 16 };

static double sumsq_block(const float *x, size_t n) {
  double acc[SUMSQ_LANES] = {0};
  size_t i = 0;
  for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
    for (int j = 0; j < SUMSQ_LANES; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
  for (int j = 0; i + j < n; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
  double s = 0.0;
  for (int j = 0; j < SUMSQ_LANES; j++) s += acc[j];
  return s;
}

double vec_sumsq(const float *x, size_t n) {
  size_t n_blocks = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
  if (n_blocks <= 1) return sumsq_block(x, n);
  double *partial = malloc(n_blocks * sizeof *partial);
  if (!partial) {
    /* Out of memory for a few KB: fall back to one serial pass, same blocks. */
    double s = 0.0;
    for (size_t b = 0; b < n_blocks; b++) {
      size_t i0 = b * SUMSQ_BLOCK;
      s += sumsq_block(x + i0, n - i0 < SUMSQ_BLOCK ? n - i0 : SUMSQ_BLOCK);
    }
    return s;
  }
#pragma omp parallel for schedule(static) if (n >= KERN_PAR_MIN_ELEMS)
  for (size_t b = 0; b < n_blocks; b++) {
    size_t i0 = b * SUMSQ_BLOCK;
    partial[b] = sumsq_block(x + i0, n - i0 < SUMSQ_BLOCK ? n - i0 : SUMSQ_BLOCK);
  }
  double s = 0.0;
  for (size_t b = 0; b < n_blocks; b++) s += partial[b];
  free(partial);
  return s;
}
