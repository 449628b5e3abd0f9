/* Plain-loop references of the tropical product and the tropical
 * convolutions, for the tests: one output at a time, the definition of
 * tropical.h written out, float arithmetic (x + w rounds once, as in the
 * fast paths) and the first-index tie rule as a strict compare. The
 * backward references find the winners again from x and w. */
#include <math.h>
#include <string.h>

#include "kern/tropical.h"

static int better(int is_min, float cand, float best) { return is_min ? cand < best : cand > best; }

/* Best of x[row] + w[col] over k, with its first winner. */
static float product_best(int is_min, int k, const float *xrow, const float *wrow, int32_t *win) {
  float best = is_min ? INFINITY : -INFINITY;
  int32_t at = 0;
  for (int kk = 0; kk < k; kk++) {
    float cand = xrow[kk] + wrow[kk];
    if (better(is_min, cand, best)) best = cand, at = kk;
  }
  *win = at;
  return best;
}

int tropical_matmul_ref_forward(TropicalSemiring semiring, int m, int n, int k, const float *x, const float *w,
                                const float *bias, float *y, int32_t *winner, Error *err) {
  if (m < 1 || n < 1 || k < 1)
    return error_set(err, ERR_ARG, "tropical_matmul_ref_forward: m=%d n=%d k=%d, expected all >= 1", m, n, k);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      int32_t at;
      float best = product_best(semiring == TROPICAL_MIN_PLUS, k, x + (size_t)i * k, w + (size_t)j * k, &at);
      y[(size_t)i * n + j] = bias ? best + bias[j] : best;
      if (winner) winner[(size_t)i * n + j] = at;
    }
  return 0;
}

int tropical_matmul_ref_backward(TropicalSemiring semiring, int m, int n, int k, const float *x, const float *w,
                                 const float *dy, float *dx, float *dw, float *dbias, Error *err) {
  if (m < 1 || n < 1 || k < 1)
    return error_set(err, ERR_ARG, "tropical_matmul_ref_backward: m=%d n=%d k=%d, expected all >= 1", m, n, k);
  if (dx) memset(dx, 0, (size_t)m * k * sizeof *dx);
  if (dw) memset(dw, 0, (size_t)n * k * sizeof *dw);
  if (dbias) memset(dbias, 0, (size_t)n * sizeof *dbias);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      int32_t at;
      product_best(semiring == TROPICAL_MIN_PLUS, k, x + (size_t)i * k, w + (size_t)j * k, &at);
      float g = dy[(size_t)i * n + j];
      if (dx) dx[(size_t)i * k + at] += g;
      if (dw) dw[(size_t)j * k + at] += g;
      if (dbias) dbias[j] += g;
    }
  return 0;
}

/* x at tap (a, b) of output (i, j) in channel plane `xc`, 0 when padded;
 * *off gets the input offset or -1. */
static float tap_value(const TropicalConvShape *s, const float *xc, int i, int j, int a, int b, long *off) {
  int ih = i * s->stride_h - s->pad_h + a, iw = j * s->stride_w - s->pad_w + b;
  if (ih < 0 || ih >= s->in_h || iw < 0 || iw >= s->in_w) {
    *off = -1;
    return 0.0f;
  }
  *off = (long)ih * s->in_w + iw;
  return xc[*off];
}

/* One output pixel: the inner winner of every channel (inner_win[c]), the
 * outer winner channel (*outer_win, max/min only) and the value. */
static float conv_output(const TropicalConvShape *s, const float *x, const float *w, int n, int o, int i, int j,
                         int32_t *inner_win, int32_t *outer_win) {
  int kk = s->kernel_h * s->kernel_w, inner_min = s->inner == TROPICAL_INNER_MIN;
  int outer_min = s->outer == TROPICAL_OUTER_MIN;
  float acc = s->outer == TROPICAL_OUTER_SUM ? 0.0f : (outer_min ? INFINITY : -INFINITY);
  *outer_win = 0;
  for (int c = 0; c < s->in_channels; c++) {
    const float *xc = x + ((size_t)n * s->in_channels + c) * (size_t)s->in_h * s->in_w;
    const float *wc = w + ((size_t)o * s->in_channels + c) * (size_t)kk;
    float best = inner_min ? INFINITY : -INFINITY;
    int32_t at = 0;
    for (int a = 0; a < s->kernel_h; a++)
      for (int b = 0; b < s->kernel_w; b++) {
        long off;
        float cand = tap_value(s, xc, i, j, a, b, &off) + wc[a * s->kernel_w + b];
        if (better(inner_min, cand, best)) best = cand, at = a * s->kernel_w + b;
      }
    inner_win[c] = at;
    if (s->outer == TROPICAL_OUTER_SUM) {
      acc = acc + best;
    } else if (better(outer_min, best, acc)) {
      acc = best;
      *outer_win = c;
    }
  }
  return acc;
}

int tropical_conv2d_ref_forward(const TropicalConvShape *s, const float *x, const float *w, float *y,
                                int32_t *winner, Error *err) {
  int oh = 0, ow = 0;
  int rc = tropical_conv2d_output_size(s, &oh, &ow, err);
  if (rc) return rc;
  int cin = s->in_channels, cout = s->out_channels, kk = s->kernel_h * s->kernel_w, pixels = oh * ow;
  size_t q_total = (size_t)s->batch * pixels;
  int32_t inner_win[cin];
  for (int n = 0; n < s->batch; n++)
    for (int o = 0; o < cout; o++)
      for (int i = 0; i < oh; i++)
        for (int j = 0; j < ow; j++) {
          int32_t outer_win, p = i * ow + j;
          y[((size_t)n * cout + o) * pixels + p] = conv_output(s, x, w, n, o, i, j, inner_win, &outer_win);
          if (!winner) continue;
          if (s->outer == TROPICAL_OUTER_SUM) {
            for (int c = 0; c < cin; c++)
              winner[((size_t)c * cout + o) * q_total + (size_t)n * pixels + p] = inner_win[c];
          } else {
            winner[(size_t)o * q_total + (size_t)n * pixels + p] = outer_win * kk + inner_win[outer_win];
          }
        }
  return 0;
}

int tropical_conv2d_ref_backward(const TropicalConvShape *s, const float *x, const float *w, const float *dy,
                                 float *dx, float *dw, Error *err) {
  int oh = 0, ow = 0;
  int rc = tropical_conv2d_output_size(s, &oh, &ow, err);
  if (rc) return rc;
  int cin = s->in_channels, cout = s->out_channels, kk = s->kernel_h * s->kernel_w, pixels = oh * ow;
  size_t plane = (size_t)s->in_h * s->in_w;
  if (dx) memset(dx, 0, (size_t)s->batch * cin * plane * sizeof *dx);
  if (dw) memset(dw, 0, (size_t)cout * cin * kk * sizeof *dw);
  int32_t inner_win[cin];
  for (int n = 0; n < s->batch; n++)
    for (int o = 0; o < cout; o++)
      for (int i = 0; i < oh; i++)
        for (int j = 0; j < ow; j++) {
          int32_t outer_win;
          conv_output(s, x, w, n, o, i, j, inner_win, &outer_win);
          float g = dy[((size_t)n * cout + o) * pixels + i * ow + j];
          int first = s->outer == TROPICAL_OUTER_SUM ? 0 : outer_win;
          int last = s->outer == TROPICAL_OUTER_SUM ? cin - 1 : outer_win;
          for (int c = first; c <= last; c++) {
            int t = inner_win[c];
            long off;
            tap_value(s, x, i, j, t / s->kernel_w, t % s->kernel_w, &off);
            if (dx && off >= 0) dx[((size_t)n * cin + c) * plane + (size_t)off] += g;
            if (dw) dw[((size_t)o * cin + c) * kk + t] += g;
          }
        }
  return 0;
}
