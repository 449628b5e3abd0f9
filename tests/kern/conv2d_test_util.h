/* Shared by the convolution tests (test_conv2d.c, test_conv2d_direct.c):
 * all three passes of one shape, in the layouts the shape names, against
 * the double-precision reference on NCHW copies. The tensors are drawn in
 * NCHW, transposed into the shape's layouts for the kernels, and the
 * kernels' outputs transposed back, so the reference never sees a layout
 * and a kernel that confuses two layouts fails. Header-only, like
 * kern_test_util.h. */
#ifndef FIVEFOLD_TESTS_KERN_CONV2D_TEST_UTIL_H
#define FIVEFOLD_TESTS_KERN_CONV2D_TEST_UTIL_H

#include <stdio.h>
#include <string.h>

#include "kern/conv2d.h"
#include "kern/kern_test_util.h"

/* Where element (image i, channel ch, pixel p) of an NCHW tensor sits in
 * a layout (conv2d.h's Conv2dLayout), written out here rather than taken
 * from the code under test. */
static inline size_t conv_test_index(int layout, int c, size_t plane, int i, int ch, size_t p) {
  if (layout == CONV2D_NHWC) return ((size_t)i * plane + p) * c + ch;
  if (layout == CONV2D_NCHW16C) return (((size_t)i * (c / 16) + ch / 16) * plane + p) * 16 + ch % 16;
  return ((size_t)i * c + ch) * plane + p;
}

/* NCHW -> layout, and back. */
static inline void conv_test_to_layout(float *dst, const float *src, int n, int c, int h, int w, int layout) {
  size_t plane = (size_t)h * w;
  for (int i = 0; i < n; i++)
    for (int ch = 0; ch < c; ch++)
      for (size_t p = 0; p < plane; p++) dst[conv_test_index(layout, c, plane, i, ch, p)] = src[((size_t)i * c + ch) * plane + p];
}

static inline void conv_test_from_layout(float *dst, const float *src, int n, int c, int h, int w, int layout) {
  size_t plane = (size_t)h * w;
  for (int i = 0; i < n; i++)
    for (int ch = 0; ch < c; ch++)
      for (size_t p = 0; p < plane; p++) dst[((size_t)i * c + ch) * plane + p] = src[conv_test_index(layout, c, plane, i, ch, p)];
}

static inline const char *conv_test_layout_name(int layout) {
  return layout == CONV2D_NHWC ? "NHWC" : layout == CONV2D_NCHW16C ? "NCHW16C" : "NCHW";
}

static inline void conv_test_describe(const Conv2dShape *s, char *buf, size_t n) {
  snprintf(buf, n, "%s N%d C%d->%d %dx%d k%dx%d s%dx%d p%dx%d d%dx%d g%d op%d x %s y %s%s",
           s->transposed ? "convT" : "conv", s->batch, s->in_channels, s->out_channels, s->in_h, s->in_w,
           s->kernel_h, s->kernel_w, s->stride_h, s->stride_w, s->pad_h, s->pad_w, s->dilation_h, s->dilation_w,
           s->groups, s->output_pad_h, conv_test_layout_name(s->x_layout), conv_test_layout_name(s->y_layout),
           s->winograd ? " winograd" : "");
}

/* The worst relative error of y, dx, dw, db (fp32, with the bias; with
 * `accumulate` the backward passes add onto random prior values), over
 * max(|reference|, 1) of each tensor. */
static inline double conv_test_check_layouts(const Conv2dShape *s, uint64_t seed, int accumulate) {
  Conv2dShape plain = *s;
  plain.x_layout = plain.y_layout = CONV2D_NCHW;
  int oh = 0, ow = 0;
  Error err = {0};
  if (conv2d_output_size(s, &oh, &ow, &err)) {
    fprintf(stderr, "conv_test_check_layouts: %s\n", err.msg);
    return INFINITY;
  }
  int xn = s->x_layout, yn = s->y_layout;
  size_t nx = conv2d_input_count(s), ny = conv2d_output_count(s), nw = conv2d_weight_count(s);
  size_t nb = (size_t)s->out_channels;
  float *x = test_alloc(nx), *w = test_alloc(nw), *b = test_alloc(nb), *r = test_alloc(ny);
  float *xl = test_alloc(nx), *rl = test_alloc(ny), *yl = test_alloc(ny), *y = test_alloc(ny);
  float *dx0 = test_alloc(nx), *dxl = test_alloc(nx), *dx = test_alloc(nx);
  float *dw = test_alloc(nw), *db = test_alloc(nb), *dw0 = test_alloc(nw), *db0 = test_alloc(nb);
  double *ry = test_alloc_d(ny), *rdx = test_alloc_d(nx), *rdw = test_alloc_d(nw), *rdb = test_alloc_d(nb);
  test_fill_normal(x, nx, seed, 1.0f);
  test_fill_normal(w, nw, seed + 1, 0.5f);
  test_fill_normal(b, nb, seed + 2, 1.0f);
  test_fill_normal(r, ny, seed + 3, 1.0f);
  test_fill_normal(dx0, nx, seed + 10, 1.0f);
  test_fill_normal(dw0, nw, seed + 11, 1.0f);
  test_fill_normal(db0, nb, seed + 12, 1.0f);
  conv_test_to_layout(xl, x, s->batch, s->in_channels, s->in_h, s->in_w, xn);
  conv_test_to_layout(rl, r, s->batch, s->out_channels, oh, ow, yn);
  conv_test_to_layout(dxl, dx0, s->batch, s->in_channels, s->in_h, s->in_w, xn);
  memcpy(dw, dw0, nw * sizeof *dw), memcpy(db, db0, nb * sizeof *db);
  int rc = conv2d_forward(s, CONV2D_FP32, yl, xl, w, b, &err) ||
           conv2d_backward_data(s, CONV2D_FP32, dxl, rl, w, accumulate, &err) ||
           conv2d_backward_weights(s, CONV2D_FP32, dw, db, rl, xl, accumulate, &err) ||
           conv2d_ref_forward(&plain, ry, x, w, b, &err) || conv2d_ref_backward_data(&plain, rdx, r, w, &err) ||
           conv2d_ref_backward_weights(&plain, rdw, rdb, r, x, &err);
  double worst = INFINITY;
  char d[200];
  conv_test_describe(s, d, sizeof d);
  if (rc) {
    fprintf(stderr, "%s: %s\n", d, err.msg);
  } else {
    conv_test_from_layout(y, yl, s->batch, s->out_channels, oh, ow, yn);
    conv_test_from_layout(dx, dxl, s->batch, s->in_channels, s->in_h, s->in_w, xn);
    if (accumulate) {
      for (size_t i = 0; i < nx; i++) rdx[i] += dx0[i];
      for (size_t i = 0; i < nw; i++) rdw[i] += dw0[i];
      for (size_t i = 0; i < nb; i++) rdb[i] += db0[i];
    }
    double e[4] = {test_rel_err(y, ry, ny, 1.0), test_rel_err(dx, rdx, nx, 1.0), test_rel_err(dw, rdw, nw, 1.0),
                   test_rel_err(db, rdb, nb, 1.0)};
    worst = 0.0;
    for (int i = 0; i < 4; i++) worst = isnan(e[i]) ? INFINITY : e[i] > worst ? e[i] : worst;
    if (worst > (s->winograd ? 1e-4 : 1e-5))
      fprintf(stderr, "%s acc %d: y %.3g dx %.3g dw %.3g db %.3g\n", d, accumulate, e[0], e[1], e[2], e[3]);
  }
  free(x), free(w), free(b), free(r), free(xl), free(rl), free(yl), free(y), free(dx0), free(dxl), free(dx);
  free(dw), free(db), free(dw0), free(db0), free(ry), free(rdx), free(rdw), free(rdb);
  return worst;
}

/* The forward with an epilogue (conv2d_forward_epilogue) against
 * relu?((accumulate ? y0 : 0) + reference), y0 random, in the shape's
 * layouts: the worst relative error. */
static inline double conv_test_check_epilogue(const Conv2dShape *s, uint64_t seed, Conv2dEpilogue ep) {
  Conv2dShape plain = *s;
  plain.x_layout = plain.y_layout = CONV2D_NCHW;
  int oh = 0, ow = 0;
  Error err = {0};
  if (conv2d_output_size(s, &oh, &ow, &err)) return INFINITY;
  size_t nx = conv2d_input_count(s), ny = conv2d_output_count(s), nw = conv2d_weight_count(s);
  float *x = test_alloc(nx), *w = test_alloc(nw), *b = test_alloc((size_t)s->out_channels), *y0 = test_alloc(ny);
  float *xl = test_alloc(nx), *yl = test_alloc(ny), *y = test_alloc(ny);
  double *ry = test_alloc_d(ny);
  test_fill_normal(x, nx, seed, 1.0f);
  test_fill_normal(w, nw, seed + 1, 0.5f);
  test_fill_normal(b, (size_t)s->out_channels, seed + 2, 1.0f);
  test_fill_normal(y0, ny, seed + 3, 2.0f);
  conv_test_to_layout(xl, x, s->batch, s->in_channels, s->in_h, s->in_w, s->x_layout);
  conv_test_to_layout(yl, y0, s->batch, s->out_channels, oh, ow, s->y_layout);
  double worst = INFINITY;
  char d[200];
  conv_test_describe(s, d, sizeof d);
  if (conv2d_forward_epilogue(s, CONV2D_FP32, yl, xl, w, b, ep, &err) || conv2d_ref_forward(&plain, ry, x, w, b, &err)) {
    fprintf(stderr, "%s: %s\n", d, err.msg);
  } else {
    conv_test_from_layout(y, yl, s->batch, s->out_channels, oh, ow, s->y_layout);
    int negative = 0;
    for (size_t i = 0; i < ny; i++) {
      double v = (ep.accumulate ? y0[i] : 0.0) + ry[i];
      negative += v < 0;
      ry[i] = ep.relu && v < 0 ? 0.0 : v;
    }
    worst = test_rel_err(y, ry, ny, 1.0);
    if (!(negative > 0 && negative < (int)ny)) worst = INFINITY; /* the ReLU had both sides to clamp and pass */
    if (worst > 1e-5) fprintf(stderr, "%s accumulate %d relu %d: y %.3g\n", d, ep.accumulate, ep.relu, worst);
  }
  free(x), free(w), free(b), free(y0), free(xl), free(yl), free(y), free(ry);
  return worst;
}

#endif
