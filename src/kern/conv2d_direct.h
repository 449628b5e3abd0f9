/* Internal to the conv2d module: fivefold's own kernels for convolutions
 * with few channels on one side (conv2d.h, "Direct kernels"), which
 * conv2d_onednn.c's public passes call for the passes conv2d_uses_direct
 * accepts. Not a public header.
 *
 * The idea: of the two sides of such a convolution, the "narrow" one has
 * at most CONV2D_DIRECT_NARROW channels and the "wide" one any number.
 * The kernels vectorise over the wide side's channels, which they read
 * channels-last or blocked (adjacent channels are adjacent floats), and
 * broadcast the narrow side's values one at a time, so no lane is wasted
 * on padding channels to a block of 16. Every pass of a narrow-output or
 * narrow-input convolution is one of three kernels:
 *
 *   reduce   narrow[n][k][p][q] = sum over taps and wide channels c of
 *            weight[k][tap][c] wide[n][(p, q) + tap][c]
 *            (forward of a narrow output, backward-data of a narrow input)
 *   spread   wide[n][p][q][c] = sum over k and taps of
 *            weight[k][tap][c] narrow[n][k][(p, q) + tap]
 *            (forward of a narrow input, backward-data of a narrow output)
 *   weights  dweight[k][tap][c] = sum over n, p, q of
 *            narrow[n][k][...] wide[n][...][c], one of the two shifted by
 *            the tap (both backward-weights passes)
 *
 * with weights packed [k][a][b][c] (the wide channel fastest). A tap (a, b)
 * pairs position (p, q) of the tensor a kernel writes (or, in `weights`,
 * of the unshifted tensor) with (p + h0 + a hd, q + w0 + b wd) of the one
 * it reads: (h0, hd) = (-pad, dilation) in the forward direction and
 * (pad, -dilation) in the backward-data direction (stride 1 only).
 * Positions outside the tensor read are skipped (zero padding).
 *
 * Determinism: reduce and spread give each output to one thread, weights
 * gives each weight to one thread, and each sums its terms in a fixed
 * order, so results are bit-identical for any thread count. */
#ifndef FIVEFOLD_KERN_CONV2D_DIRECT_H
#define FIVEFOLD_KERN_CONV2D_DIRECT_H

#include <stddef.h>

#include "base/error.h"
#include "kern/conv2d.h"

/* A wide tensor, channels contiguous in groups of 16: element (n, y, x, c)
 * at p[n sn + y sy + x sx + (c / 16) s16 + c % 16] (channels-last: s16 =
 * 16; blocked, conv2d.h's CONV2D_NCHW16C: s16 = h w 16). */
typedef struct DirectWide {
  float *p;
  ptrdiff_t sn, sy, sx, s16;
  int h, w, c;
} DirectWide;

/* A narrow tensor in any layout: element (n, k, y, x) at
 * p[n sn + k sk + y sy + x sx]. */
typedef struct DirectNarrow {
  float *p;
  ptrdiff_t sn, sk, sy, sx;
  int h, w, k;
} DirectNarrow;

typedef struct DirectTaps {
  int kh, kw;
  int h0, hd, w0, wd;
} DirectTaps;

/* out (=|+=) [bias[k] +] reduce(in); bias may be NULL; relu: then
 * max(out, 0) (conv2d.h's Conv2dEpilogue). */
void conv2d_direct_reduce(const DirectNarrow *out, const DirectWide *in, const float *weight, const float *bias,
                          const DirectTaps *t, int batch, int accumulate, int relu);
/* out (=|+=) [bias[c] +] spread(in); bias may be NULL; relu as above. */
void conv2d_direct_spread(const DirectWide *out, const DirectNarrow *in, const float *weight, const float *bias,
                          const DirectTaps *t, int batch, int accumulate, int relu);
/* dweight = weights(narrow, wide) (overwritten). shift_narrow 0: the sum
 * runs over the narrow tensor's positions and the wide one is read at the
 * tap's offset; 1: the other way round. */
void conv2d_direct_weights(float *dweight, const DirectNarrow *narrow, const DirectWide *wide, const DirectTaps *t,
                           int batch, int shift_narrow);

/* The three public passes on the direct kernels (the caller has checked
 * the shape and the pointers). */
int conv2d_direct_forward(const Conv2dShape *s, float *y, const float *x, const float *w, const float *bias,
                          Conv2dEpilogue ep, Error *err);
int conv2d_direct_backward_data(const Conv2dShape *s, float *dx, const float *dy, const float *w, int accumulate,
                                Error *err);
int conv2d_direct_backward_weights(const Conv2dShape *s, float *dw, float *dbias, const float *dy, const float *x,
                                   int accumulate, Error *err);

#endif
