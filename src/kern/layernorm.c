/* LayerNorm forward and backward over rows of [N, C]. */
#include "kern/layernorm.h"

#include <math.h>

#include "kern/kern_util.h"

static float row_mean(const float *xr, int C) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; c++) sum += xr[c];
  return sum / (float)C;
}

void layernorm_forward(float *out, float *rstd, const float *x, const float *w, const float *b, int N, int C,
                       float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const float *xr = x + (long)n * C;
    float *outr = out + (long)n * C;
    const float mean = row_mean(xr, C);
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; c++) var += (xr[c] - mean) * (xr[c] - mean);
    const float r = 1.0f / sqrtf(var / (float)C + eps);
    rstd[n] = r;
    for (int c = 0; c < C; c++) outr[c] = (xr[c] - mean) * r * w[c] + b[c];
  }
}

/* With xhat = (x - mean) r and g = dy * w:
 *   dx_j = r * (g_j - mean_i(g_i) - xhat_j * mean_i(g_i xhat_i)),
 *   dw_j = sum over rows of dy_j xhat_j,  db_j = sum over rows of dy_j.
 * dw and db are sums over rows, so they are split over column blocks: each
 * thread owns a slice and the result does not depend on the thread count. */
void layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
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
      const float r = rstd[n], mean = row_mean(xr, C);
      float g_sum = 0.0f, gx_sum = 0.0f;
#pragma omp simd reduction(+ : g_sum, gx_sum)
      for (int c = 0; c < C; c++) {
        const float g = dyr[c] * w[c];
        g_sum += g;
        gx_sum += g * (xr[c] - mean) * r;
      }
      const float g_mean = g_sum / (float)C, gx_mean = gx_sum / (float)C;
      for (int c = 0; c < C; c++) dxr[c] += r * (dyr[c] * w[c] - g_mean - (xr[c] - mean) * r * gx_mean);
    }
#pragma omp for schedule(static)
    for (int blk = 0; blk < n_col_blocks; blk++) {
      const int c0 = blk * col_block, c1 = c0 + col_block < C ? c0 + col_block : C;
      float acc_w[32], acc_b[32];
      for (int c = 0; c < c1 - c0; c++) acc_w[c] = acc_b[c] = 0.0f;
      for (int n = 0; n < N; n++) {
        const float *xr = x + (long)n * C;
        const float *dyr = dout + (long)n * C + c0;
        const float r = rstd[n], mean = row_mean(xr, C);
        for (int c = 0; c < c1 - c0; c++) {
          acc_w[c] += dyr[c] * (xr[c0 + c] - mean) * r;
          acc_b[c] += dyr[c];
        }
      }
      for (int c = 0; c < c1 - c0; c++) {
        dw[c0 + c] += acc_w[c];
        db[c0 + c] += acc_b[c];
      }
    }
  }
}
