/* GeLU (tanh approximation) forward and backward, and the row-bias helpers. */
#include "kern/gelu.h"

#include <math.h>

#include "kern/kern_util.h"

#define GELU_K0 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f

/* tanh(u) = 1 - 2 / (exp(2u) + 1). glibc's tanhf costs about 17 ns an
 * element here against 2 ns for this form on expf (measured), and GPT-2
 * 124M's GeLU runs on ~28 million elements a training step at batch 4 x 64
 * (forward and backward): 18% of the step's CPU time. It stays within 2e-7
 * of tanhf (absolute), and saturates to +-1 through expf's inf and 0. */
static inline float tanh_by_exp(float u) { return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f); }

void gelu_forward(float *out, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= KERN_PAR_MIN_ELEMS)
  for (long i = 0; i < (long)n; i++) {
    const float v = x[i];
    out[i] = 0.5f * v * (1.0f + tanh_by_exp(GELU_K0 * (v + GELU_K1 * v * v * v)));
  }
}

/* d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k0 (1 + 3 k1 x^2), t = tanh(u). */
void gelu_backward(float *dx, const float *dout, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= KERN_PAR_MIN_ELEMS)
  for (long i = 0; i < (long)n; i++) {
    const float v = x[i];
    const float t = tanh_by_exp(GELU_K0 * (v + GELU_K1 * v * v * v));
    const float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * v * v);
    dx[i] = dout[i] * d;
  }
}

void bias_add_rows(float *y, const float *b, int N, int C) {
#pragma omp parallel for schedule(static) if ((long)N * C >= KERN_PAR_MIN_ELEMS)
  for (int r = 0; r < N; r++) {
    float *yr = y + (long)r * C;
#pragma omp simd
    for (int c = 0; c < C; c++) yr[c] += b[c];
  }
}

/* Split over column blocks so that the sum's order, and so the result,
 * does not depend on the thread count. */
void bias_backward_rows(float *db, const float *dy, int N, int C) {
  const int col_block = 64, n_blocks = (C + col_block - 1) / col_block;
#pragma omp parallel for schedule(static) if ((long)N * C >= KERN_PAR_MIN_ELEMS)
  for (int blk = 0; blk < n_blocks; blk++) {
    const int c0 = blk * col_block, c1 = c0 + col_block < C ? c0 + col_block : C;
    float acc[64];
    for (int c = 0; c < c1 - c0; c++) acc[c] = 0.0f;
    for (int r = 0; r < N; r++) {
      const float *dyr = dy + (long)r * C + c0;
      for (int c = 0; c < c1 - c0; c++) acc[c] += dyr[c];
    }
    for (int c = 0; c < c1 - c0; c++) db[c0 + c] += acc[c];
  }
}
