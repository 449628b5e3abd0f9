/* RMSNorm forward and backward over rows of [N, C], and the residual add
 * before it as one fused pass or as separate ones (rmsnorm.h). This file
 * is compiled with -ffp-contract=off (CMakeLists.txt): the fused backward
 * adds the norm's input gradient to the residual gradient in the same
 * expression that computes it, the unfused one in vec_acc, and only
 * without contraction into an FMA are the two the same rounding. */
#include "kern/rmsnorm.h"

#include <math.h>

#include "kern/fusion.h"
#include "kern/gelu.h"
#include "kern/kern_util.h"
#include "kern/vecops.h"

/* One row's norm: outr = xr * r * w; returns r. */
static inline float rms_row(float *outr, const float *xr, const float *w, int C, float eps) {
  float sumsq = 0.0f;
#pragma omp simd reduction(+ : sumsq)
  for (int c = 0; c < C; c++) sumsq += xr[c] * xr[c];
  const float r = 1.0f / sqrtf(sumsq / (float)C + eps);
  for (int c = 0; c < C; c++) outr[c] = xr[c] * r * w[c];
  return r;
}

void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) rstd[n] = rms_row(out + (long)n * C, x + (long)n * C, w, C, eps);
}

/* With y = x * r * w and r = (mean(x^2) + eps)^(-1/2):
 *   dx_j = r * (dy_j w_j - x_j * r^2 * mean_i(dy_i w_i x_i)),
 *   dw_j = sum over rows of dy_j * x_j * r.
 * dw is a sum over rows, so it is split over column blocks instead of rows:
 * each thread owns a slice of dw and the result does not depend on the
 * number of threads. accumulate 1: dx += the input gradient; 0: dx = it. */
static void rms_backward(float *dx, int accumulate, float *dw, const float *dout, const float *x, const float *w,
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
      if (accumulate)
        for (int c = 0; c < C; c++) dxr[c] = dxr[c] + r * (dyr[c] * w[c] - xr[c] * coef);
      else
        for (int c = 0; c < C; c++) dxr[c] = r * (dyr[c] * w[c] - xr[c] * coef);
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

void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int C) {
  rms_backward(dx, 1, dw, dout, x, w, rstd, N, C);
}

/* ---- the residual add and the norm after it ---- */

void add_rmsnorm_forward_fused(float *x_out, float *out, float *rstd, const float *res, const float *y,
                               const float *bias, const float *w, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const long at = (long)n * C;
    float *xr = x_out + at;
    /* the row (4C bytes) is still in cache when the norm reads it back */
    kern_residual_row(xr, res + at, y + at, bias, C);
    rstd[n] = rms_row(out + at, xr, w, C, eps);
  }
}

void add_rmsnorm_forward_unfused(float *x_out, float *out, float *rstd, const float *res, const float *y,
                                 const float *bias, const float *w, int N, int C, float eps) {
  vec_add(x_out, res, y, (size_t)N * C);
  if (bias) bias_add_rows(x_out, bias, N, C);
  rmsnorm_forward(out, rstd, x_out, w, N, C, eps);
}

void add_rmsnorm_backward_fused(float *dres, float *dw, const float *dout, const float *x, const float *w,
                                const float *rstd, int N, int C) {
  rms_backward(dres, 1, dw, dout, x, w, rstd, N, C);
}

void add_rmsnorm_backward_unfused(float *dres, float *tmp, float *dw, const float *dout, const float *x,
                                  const float *w, const float *rstd, int N, int C) {
  rms_backward(tmp, 0, dw, dout, x, w, rstd, N, C);
  vec_acc(dres, tmp, (size_t)N * C);
}

void add_rmsnorm_forward(float *x_out, float *out, float *rstd, const float *res, const float *y, const float *bias,
                         const float *w, int N, int C, float eps) {
  if (kern_fusion().norm_residual) add_rmsnorm_forward_fused(x_out, out, rstd, res, y, bias, w, N, C, eps);
  else add_rmsnorm_forward_unfused(x_out, out, rstd, res, y, bias, w, N, C, eps);
}

void add_rmsnorm_backward(float *dres, float *tmp, float *dw, const float *dout, const float *x, const float *w,
                          const float *rstd, int N, int C) {
  if (kern_fusion().norm_residual) add_rmsnorm_backward_fused(dres, dw, dout, x, w, rstd, N, C);
  else add_rmsnorm_backward_unfused(dres, tmp, dw, dout, x, w, rstd, N, C);
}
