/* LayerNorm forward and backward over rows of [N, C], and the residual add
 * before it as one fused pass or as separate ones (layernorm.h). Compiled
 * with -ffp-contract=off like rmsnorm.c, for the same reason: the fused and
 * unfused backward add the input gradient to the residual gradient in
 * different places, the same rounding only without FMA contraction. */
#include "kern/layernorm.h"

#include <math.h>

#include "kern/fusion.h"
#include "kern/gelu.h"
#include "kern/kern_util.h"
#include "kern/vecops.h"

static float row_mean(const float *xr, int C) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; c++) sum += xr[c];
  return sum / (float)C;
}

/* One row's norm; returns 1/sqrt(var + eps). */
static inline float ln_row(float *outr, const float *xr, const float *w, const float *b, int C, float eps) {
  const float mean = row_mean(xr, C);
  float var = 0.0f;
#pragma omp simd reduction(+ : var)
  for (int c = 0; c < C; c++) var += (xr[c] - mean) * (xr[c] - mean);
  const float r = 1.0f / sqrtf(var / (float)C + eps);
  for (int c = 0; c < C; c++) outr[c] = (xr[c] - mean) * r * w[c] + b[c];
  return r;
}

void layernorm_forward(float *out, float *rstd, const float *x, const float *w, const float *b, int N, int C,
                       float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) rstd[n] = ln_row(out + (long)n * C, x + (long)n * C, w, b, C, eps);
}

/* With xhat = (x - mean) r and g = dy * w:
 *   dx_j = r * (g_j - mean_i(g_i) - xhat_j * mean_i(g_i xhat_i)),
 *   dw_j = sum over rows of dy_j xhat_j,  db_j = sum over rows of dy_j.
 * dw and db are sums over rows, so they are split over column blocks: each
 * thread owns a slice and the result does not depend on the thread count.
 * accumulate 1: dx += the input gradient; 0: dx = it. */
static void ln_backward(float *dx, int accumulate, float *dw, float *db, const float *dout, const float *x,
                        const float *w, const float *rstd, int N, int C) {
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
      if (accumulate)
        for (int c = 0; c < C; c++) dxr[c] = dxr[c] + r * (dyr[c] * w[c] - g_mean - (xr[c] - mean) * r * gx_mean);
      else
        for (int c = 0; c < C; c++) dxr[c] = r * (dyr[c] * w[c] - g_mean - (xr[c] - mean) * r * gx_mean);
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

void layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                        const float *rstd, int N, int C) {
  ln_backward(dx, 1, dw, db, dout, x, w, rstd, N, C);
}

/* ---- the residual add and the norm after it ---- */

void add_layernorm_forward_fused(float *x_out, float *out, float *rstd, const float *res, const float *y,
                                 const float *bias, const float *w, const float *b, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const long at = (long)n * C;
    float *xr = x_out + at;
    /* the row (4C bytes) is still in cache when the norm reads it back */
    kern_residual_row(xr, res + at, y + at, bias, C);
    rstd[n] = ln_row(out + at, xr, w, b, C, eps);
  }
}

void add_layernorm_forward_unfused(float *x_out, float *out, float *rstd, const float *res, const float *y,
                                   const float *bias, const float *w, const float *b, int N, int C, float eps) {
  vec_add(x_out, res, y, (size_t)N * C);
  if (bias) bias_add_rows(x_out, bias, N, C);
  layernorm_forward(out, rstd, x_out, w, b, N, C, eps);
}

void add_layernorm_backward_fused(float *dres, float *dw, float *db, const float *dout, const float *x,
                                  const float *w, const float *rstd, int N, int C) {
  ln_backward(dres, 1, dw, db, dout, x, w, rstd, N, C);
}

void add_layernorm_backward_unfused(float *dres, float *tmp, float *dw, float *db, const float *dout, const float *x,
                                    const float *w, const float *rstd, int N, int C) {
  ln_backward(tmp, 0, dw, db, dout, x, w, rstd, N, C);
  vec_acc(dres, tmp, (size_t)N * C);
}

void add_layernorm_forward(float *x_out, float *out, float *rstd, const float *res, const float *y,
                           const float *bias, const float *w, const float *b, int N, int C, float eps) {
  if (kern_fusion().norm_residual) add_layernorm_forward_fused(x_out, out, rstd, res, y, bias, w, b, N, C, eps);
  else add_layernorm_forward_unfused(x_out, out, rstd, res, y, bias, w, b, N, C, eps);
}

void add_layernorm_backward(float *dres, float *tmp, float *dw, float *db, const float *dout, const float *x,
                            const float *w, const float *rstd, int N, int C) {
  if (kern_fusion().norm_residual) add_layernorm_backward_fused(dres, dw, db, dout, x, w, rstd, N, C);
  else add_layernorm_backward_unfused(dres, tmp, dw, db, dout, x, w, rstd, N, C);
}
