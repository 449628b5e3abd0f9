/* Internal to the conv2d module: a convolution seen as the relation
 * between a "big" tensor B and a "small" one S (conv: x is B and y is S;
 * transposed conv: x is S and y is B), which lets one piece of geometry and
 * one reference loop serve both directions. Not a public header. */
#ifndef FIVEFOLD_KERN_CONV2D_GEOM_H
#define FIVEFOLD_KERN_CONV2D_GEOM_H

#include "base/error.h"
#include "kern/conv2d.h"

typedef struct Conv2dGeom {
  int n, groups;
  int cb, hb, wb;          /* big side: channels and size */
  int cs, hs, ws;          /* small side */
  int kh, kw, sh, sw, dh, dw, ph, pw;
  /* The part of B the kernel taps reach: PyTorch's floor (conv) or output
   * padding (transposed) may leave trailing rows/columns outside it, which
   * oneDNN wants expressed as negative right padding; a view of B of this
   * size with B's strides expresses it without one. */
  int hb_view, wb_view;
  int big_layout, small_layout; /* the Conv2dLayout of B and of S */
} Conv2dGeom;

/* S[n, cs, i, j] = sum over cb of group(cs), kh, kw of
 *   W[cs][cb - group start][kh][kw] * B[n, cb, i sh - ph + kh dh, j sw - pw + kw dw]
 * with W in the weight layout of conv2d.h in both directions. */
int conv2d_geom(const Conv2dShape *s, Conv2dGeom *g, Error *err);

/* The offset of element (n, c, y, x) of an n x c x h x w tensor in a
 * layout. */
static inline size_t conv2d_layout_index(int layout, int c_total, int h, int w, int n, int c, int y, int x) {
  if (layout == CONV2D_NHWC) return (((size_t)n * h + y) * w + x) * c_total + c;
  if (layout == CONV2D_NCHW16C)
    return ((((size_t)n * (c_total / 16) + c / 16) * h + y) * w + x) * 16 + (size_t)(c % 16);
  return (((size_t)n * c_total + c) * h + y) * w + x;
}

/* dbias (=|+=) the sum of dy over batch and space, per output channel, in
 * y's layout; each channel summed in a fixed order (float within a row of
 * the image, double across rows), whatever the thread count. */
void conv2d_bias_gradient(const Conv2dShape *s, float *dbias, const float *dy, int accumulate);

#endif
