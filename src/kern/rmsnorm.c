/* RMSNorm forward and backward over rows of [N, C]. */
#include "kern/rmsnorm.h"

#include <math.h>

#include "kern/kern_util.h"

void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const float *xr = x + (long)n * C;
    float *outr = out + (long)n * C;
    float sumsq = 0.0f;
#pragma omp simd reduction(+ : sumsq)
    for (int c = 0; c < C; c++) sumsq += xr[c] * xr[c];
    float r = 1.0f / sqrtf(sumsq / (float)C + eps);
    rstd[n] = r;
    for (int c = 0; c < C; c++) outr[c] = xr[c] * r * w[c];
  }
}

/* With y = x * r * w and r = (mean(x^2) + eps)^(-1/2):
 *   dx_j = r * (dy_j w_j - x_j * r^2 * mean_i(dy_i w_i x_i)),
 *   dw_j = sum over rows of dy_j * x_j * r.
 * dw is a sum over rows, so it is split over column blocks instead of rows:
 * each thread owns a slice of dw and the result does not depend on the
 * number of threads. */
void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int C) {
  const int col_block = 32;
  const int n_col_blocks = (C + col_block - 1) / col_block;
#pragma omp parallel if ((long)N * C >= KERN_PAR_MIN_ELEMS)
  {
#pragma omp for schedule(static) nowait
    for (int n = 0; n < N; n++) {
      const float *xr = x + (long)n * C;
      const float *dyr = dout + (long)n * C;
      float *dxr = dx + (long)n * C;
      float r = rstd[n];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; c++) dot += dyr[c] * w[c] * xr[c];
      float coef = r * r * dot / (float)C;
      for (int c = 0; c < C; c++) dxr[c] += r * (dyr[c] * w[c] - xr[c] * coef);
    }
#pragma omp for schedule(static)
    for (int b = 0; b < n_col_blocks; b++) {
      int c0 = b * col_block, c1 = c0 + col_block < C ? c0 + col_block : C;
      float acc[32];
      for (int c = 0; c < c1 - c0; c++) acc[c] = 0.0f;
      for (int n = 0; n < N; n++) {
        const float *xr = x + (long)n * C + c0;
        const float *dyr = dout + (long)n * C + c0;
        float r = rstd[n];
        for (int c = 0; c < c1 - c0; c++) acc[c] += dyr[c] * xr[c] * r;
      }
      for (int c = 0; c < c1 - c0; c++) dw[c0 + c] += acc[c];
    }
  }
}
