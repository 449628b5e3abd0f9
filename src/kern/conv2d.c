/* conv2d module, the parts that do not depend on oneDNN: shape checks and
 * sizes, the big/small geometry both directions share, the bf16 capability
 * test, and the direct double-precision reference of every pass. */
#include "kern/conv2d.h"

#include <dnnl.h>
#include <stdio.h>
#include <string.h>

#include "kern/conv2d_geom.h"

Conv2dShape conv2d_shape_default(void) {
  return (Conv2dShape){.batch = 1, .in_channels = 1, .in_h = 1, .in_w = 1, .out_channels = 1, .kernel_h = 1,
                       .kernel_w = 1, .stride_h = 1, .stride_w = 1, .dilation_h = 1, .dilation_w = 1, .groups = 1};
}

static int check_positive(int v, const char *field, Error *err) {
  if (v < 1) return error_set(err, ERR_ARG, "conv2d: %s is %d, expected >= 1", field, v);
  return 0;
}

/* One spatial axis: computes the other side's size and the view of B. */
static int axis_geom(int transposed, int in, int k, int stride, int pad, int dil, int out_pad, const char *axis,
                     int *out, int *b, int *s, int *b_view, Error *err) {
  long extent = (long)dil * (k - 1) + 1;
  if (pad < 0) return error_set(err, ERR_ARG, "conv2d: pad_%s is %d, expected >= 0", axis, pad);
  if (pad >= extent)
    return error_set(err, ERR_ARG, "conv2d: pad_%s is %d, expected < the dilated kernel extent %ld", axis, pad,
                     extent);
  long o;
  if (!transposed) {
    if (out_pad != 0)
      return error_set(err, ERR_ARG,
                       "conv2d: output_pad_%s is %d, expected 0 (only transposed convolutions have one)", axis,
                       out_pad);
    long span = (long)in + 2L * pad - extent;
    if (span < 0)
      return error_set(err, ERR_ARG,
                       "conv2d: input %s %d with padding %d is smaller than the dilated kernel extent %ld", axis, in,
                       pad, extent);
    o = span / stride + 1;
    *b = in, *s = (int)o;
  } else {
    int limit = stride > dil ? stride : dil;
    if (out_pad < 0 || out_pad >= limit)
      return error_set(err, ERR_ARG,
                       "conv2d: output_pad_%s is %d, expected 0 <= output_pad < max(stride, dilation) = %d", axis,
                       out_pad, limit);
    o = (long)(in - 1) * stride - 2L * pad + extent + out_pad;
    if (o < 1)
      return error_set(err, ERR_ARG, "conv2d: transposed output %s would be %ld, expected >= 1", axis, o);
    *b = (int)o, *s = in;
  }
  if (o > (1L << 30)) return error_set(err, ERR_ARG, "conv2d: output %s %ld is too large", axis, o);
  *out = (int)o;
  /* Rows of B beyond the last tap: the right padding oneDNN would need is
   * (s - 1) stride + extent - b - pad; when negative, shrink the view. */
  long right = (long)(*s - 1) * stride + extent - *b - pad;
  *b_view = right < 0 ? (int)(*b + right) : *b;
  return 0;
}

int conv2d_geom(const Conv2dShape *s, Conv2dGeom *g, Error *err) {
  if (!s) return error_set(err, ERR_ARG, "conv2d: no shape");
  int rc;
  if ((rc = check_positive(s->batch, "batch", err)) || (rc = check_positive(s->in_channels, "in_channels", err)) ||
      (rc = check_positive(s->out_channels, "out_channels", err)) || (rc = check_positive(s->in_h, "in_h", err)) ||
      (rc = check_positive(s->in_w, "in_w", err)) || (rc = check_positive(s->kernel_h, "kernel_h", err)) ||
      (rc = check_positive(s->kernel_w, "kernel_w", err)) || (rc = check_positive(s->stride_h, "stride_h", err)) ||
      (rc = check_positive(s->stride_w, "stride_w", err)) ||
      (rc = check_positive(s->dilation_h, "dilation_h", err)) ||
      (rc = check_positive(s->dilation_w, "dilation_w", err)) || (rc = check_positive(s->groups, "groups", err)))
    return rc;
  if (s->transposed != 0 && s->transposed != 1)
    return error_set(err, ERR_ARG, "conv2d: transposed is %d, expected 0 or 1", s->transposed);
  for (int side = 0; side < 2; side++) {
    int layout = side ? s->y_layout : s->x_layout, channels = side ? s->out_channels : s->in_channels;
    if (layout < CONV2D_NCHW || layout > CONV2D_NCHW16C)
      return error_set(err, ERR_ARG, "conv2d: %s is %d, expected CONV2D_NCHW (0), CONV2D_NHWC (1) or "
                       "CONV2D_NCHW16C (2)", side ? "y_layout" : "x_layout", layout);
    if (layout == CONV2D_NCHW16C && channels % 16)
      return error_set(err, ERR_ARG, "conv2d: %s is CONV2D_NCHW16C with %d channels, expected a multiple of 16",
                       side ? "y_layout" : "x_layout", channels);
  }
  if (s->winograd != 0 && s->winograd != 1)
    return error_set(err, ERR_ARG, "conv2d: winograd is %d, expected 0 or 1", s->winograd);
  if (s->in_channels % s->groups || s->out_channels % s->groups)
    return error_set(err, ERR_ARG, "conv2d: groups %d must divide in_channels %d and out_channels %d", s->groups,
                     s->in_channels, s->out_channels);
  Conv2dGeom r = {.n = s->batch, .groups = s->groups, .kh = s->kernel_h, .kw = s->kernel_w, .sh = s->stride_h,
                  .sw = s->stride_w, .dh = s->dilation_h, .dw = s->dilation_w, .ph = s->pad_h, .pw = s->pad_w};
  int out_h, out_w;
  if ((rc = axis_geom(s->transposed, s->in_h, s->kernel_h, s->stride_h, s->pad_h, s->dilation_h, s->output_pad_h, "h",
                      &out_h, &r.hb, &r.hs, &r.hb_view, err)) ||
      (rc = axis_geom(s->transposed, s->in_w, s->kernel_w, s->stride_w, s->pad_w, s->dilation_w, s->output_pad_w, "w",
                      &out_w, &r.wb, &r.ws, &r.wb_view, err)))
    return rc;
  r.cb = s->transposed ? s->out_channels : s->in_channels;
  r.cs = s->transposed ? s->in_channels : s->out_channels;
  r.big_layout = s->transposed ? s->y_layout : s->x_layout;
  r.small_layout = s->transposed ? s->x_layout : s->y_layout;
  double elems = (double)s->batch * (s->in_channels > s->out_channels ? s->in_channels : s->out_channels) * r.hb * r.wb;
  if (elems > 2147483647.0) return error_set(err, ERR_ARG, "conv2d: tensors of %.0f elements are too large", elems);
  if (g) *g = r;
  return 0;
}

int conv2d_output_size(const Conv2dShape *s, int *out_h, int *out_w, Error *err) {
  Conv2dGeom g;
  int rc = conv2d_geom(s, &g, err);
  if (rc) return rc;
  if (out_h) *out_h = s->transposed ? g.hb : g.hs;
  if (out_w) *out_w = s->transposed ? g.wb : g.ws;
  return 0;
}

size_t conv2d_input_count(const Conv2dShape *s) {
  if (conv2d_geom(s, NULL, NULL)) return 0;
  return (size_t)s->batch * s->in_channels * s->in_h * s->in_w;
}

size_t conv2d_output_count(const Conv2dShape *s) {
  int oh = 0, ow = 0;
  if (conv2d_output_size(s, &oh, &ow, NULL)) return 0;
  return (size_t)s->batch * s->out_channels * oh * ow;
}

size_t conv2d_weight_count(const Conv2dShape *s) {
  if (conv2d_geom(s, NULL, NULL)) return 0;
  return (size_t)s->in_channels / s->groups * s->out_channels * s->kernel_h * s->kernel_w;
}

double conv2d_forward_flops(const Conv2dShape *s) {
  Conv2dGeom g;
  if (conv2d_geom(s, &g, NULL)) return 0.0;
  /* Every small-side output takes (cb / groups) kh kw multiply-adds. */
  return 2.0 * g.n * g.cs * g.hs * g.ws * (double)(g.cb / g.groups) * g.kh * g.kw;
}

int conv2d_bf16_supported(char *why, size_t why_size) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) {
    if (why) snprintf(why, why_size, "the CPU lacks the avx512_bf16 feature");
    return 0;
  }
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if (((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) != (unsigned)dnnl_cpu_isa_avx512_core_bf16) {
    if (why)
      snprintf(why, why_size,
               "oneDNN's ISA is capped below avx512_core_bf16 (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA)");
    return 0;
  }
  if (why && why_size) why[0] = '\0';
  return 1;
}

/* The reference: one loop nest over the big/small relation; `mode` picks
 * which of the three tensors it produces. */
enum { REF_SMALL, REF_BIG, REF_WEIGHT };

static void ref_relation(const Conv2dGeom *g, int mode, double *out, const float *big, const float *small,
                         const float *w) {
  int cbg = g->cb / g->groups, csg = g->cs / g->groups;
  for (int n = 0; n < g->n; n++)
    for (int cs = 0; cs < g->cs; cs++) {
      int grp = cs / csg;
      for (int i = 0; i < g->hs; i++)
        for (int j = 0; j < g->ws; j++) {
          size_t si = (((size_t)n * g->cs + cs) * g->hs + i) * g->ws + j;
          double acc = 0.0;
          for (int c = 0; c < cbg; c++) {
            int cb = grp * cbg + c;
            for (int a = 0; a < g->kh; a++) {
              int y = i * g->sh - g->ph + a * g->dh;
              if (y < 0 || y >= g->hb) continue;
              for (int b = 0; b < g->kw; b++) {
                int x = j * g->sw - g->pw + b * g->dw;
                if (x < 0 || x >= g->wb) continue;
                size_t bi = (((size_t)n * g->cb + cb) * g->hb + y) * g->wb + x;
                size_t wi = (((size_t)cs * cbg + c) * g->kh + a) * g->kw + b;
                if (mode == REF_SMALL) acc += (double)w[wi] * big[bi];
                else if (mode == REF_BIG) out[bi] += (double)w[wi] * small[si];
                else out[wi] += (double)small[si] * big[bi];
              }
            }
          }
          if (mode == REF_SMALL) out[si] = acc;
        }
    }
}

static void ref_add_bias(const Conv2dShape *s, double *y, const float *bias) {
  int oh = 0, ow = 0;
  conv2d_output_size(s, &oh, &ow, NULL);
  size_t plane = (size_t)oh * ow;
  for (int n = 0; n < s->batch; n++)
    for (int c = 0; c < s->out_channels; c++)
      for (size_t p = 0; p < plane; p++) y[((size_t)n * s->out_channels + c) * plane + p] += bias[c];
}

/* The geometry of a reference pass: NCHW tensors only. */
static int ref_geom(const Conv2dShape *s, Conv2dGeom *g, Error *err) {
  int rc = conv2d_geom(s, g, err);
  if (rc) return rc;
  if (s->x_layout != CONV2D_NCHW || s->y_layout != CONV2D_NCHW)
    return error_set(err, ERR_ARG, "conv2d reference: %s is not NCHW, the reference takes NCHW tensors "
                     "(transpose them first)", s->x_layout != CONV2D_NCHW ? "x_layout" : "y_layout");
  return 0;
}

int conv2d_ref_forward(const Conv2dShape *s, double *y, const float *x, const float *w, const float *bias,
                       Error *err) {
  Conv2dGeom g;
  int rc = ref_geom(s, &g, err);
  if (rc) return rc;
  if (s->transposed) {
    memset(y, 0, conv2d_output_count(s) * sizeof *y);
    ref_relation(&g, REF_BIG, y, NULL, x, w);
  } else {
    ref_relation(&g, REF_SMALL, y, x, NULL, w);
  }
  if (bias) ref_add_bias(s, y, bias);
  return 0;
}

int conv2d_ref_backward_data(const Conv2dShape *s, double *dx, const float *dy, const float *w, Error *err) {
  Conv2dGeom g;
  int rc = ref_geom(s, &g, err);
  if (rc) return rc;
  if (s->transposed) {
    ref_relation(&g, REF_SMALL, dx, dy, NULL, w);
  } else {
    memset(dx, 0, conv2d_input_count(s) * sizeof *dx);
    ref_relation(&g, REF_BIG, dx, NULL, dy, w);
  }
  return 0;
}

int conv2d_ref_backward_weights(const Conv2dShape *s, double *dw, double *dbias, const float *dy, const float *x,
                                Error *err) {
  Conv2dGeom g;
  int rc = ref_geom(s, &g, err);
  if (rc) return rc;
  memset(dw, 0, conv2d_weight_count(s) * sizeof *dw);
  if (s->transposed) ref_relation(&g, REF_WEIGHT, dw, dy, x, NULL);
  else ref_relation(&g, REF_WEIGHT, dw, x, dy, NULL);
  if (dbias) {
    int oh = 0, ow = 0;
    conv2d_output_size(s, &oh, &ow, NULL);
    size_t plane = (size_t)oh * ow;
    for (int c = 0; c < s->out_channels; c++) {
      double acc = 0.0;
      for (int n = 0; n < s->batch; n++)
        for (size_t p = 0; p < plane; p++) acc += dy[((size_t)n * s->out_channels + c) * plane + p];
      dbias[c] = acc;
    }
  }
  return 0;
}

/* row[c] = the sum over the w pixels (stride floats apart) of channel c of
 * a row, c < cn <= 256, in four partial sums (pixels x mod 4) added last:
 * four independent chains of additions instead of one, each as long as a
 * quarter of the row. */
static void row_channel_sums(const float *p, int w, int stride, int cn, float *row) {
  float part[4][256];
  for (int k = 0; k < 4; k++)
    for (int c = 0; c < cn; c++) part[k][c] = 0.0f;
  int x = 0;
  for (; x + 4 <= w; x += 4, p += 4 * (size_t)stride)
    for (int k = 0; k < 4; k++)
      for (int c = 0; c < cn; c++) part[k][c] += p[(size_t)k * stride + c];
  for (; x < w; x++, p += stride)
    for (int c = 0; c < cn; c++) part[0][c] += p[c];
  for (int c = 0; c < cn; c++) row[c] = (part[0][c] + part[1][c]) + (part[2][c] + part[3][c]);
}

/* NCHW: one plane per (image, channel), summed in float, then the images
 * in double. NHWC and blocked: each row of the image summed across its
 * pixels into floats per channel (vectorisable: adjacent channels are
 * adjacent floats; row_channel_sums), then the rows in double. Parallel
 * over channels (NCHW), blocks of 16 channels, or not at all (NHWC: one
 * pass over dy is memory-bound), so the order never depends on the thread
 * count. */
void conv2d_bias_gradient(const Conv2dShape *s, float *dbias, const float *dy, int accumulate) {
  int oh = 0, ow = 0;
  conv2d_output_size(s, &oh, &ow, NULL);
  int channels = s->out_channels;
  size_t plane = (size_t)oh * ow;
  if (s->y_layout == CONV2D_NCHW16C) {
    /* 16 channels side by side in each pixel of a block */
    int blocks = channels / 16;
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int blk = 0; blk < blocks; blk++) {
      double total[16] = {0};
      float row[16];
      for (int n = 0; n < s->batch; n++)
        for (int y = 0; y < oh; y++) {
          row_channel_sums(dy + ((((size_t)n * blocks + blk) * oh + y) * ow) * 16, ow, 16, 16, row);
          for (int c = 0; c < 16; c++) total[c] += row[c];
        }
      for (int c = 0; c < 16; c++) {
        float *d = &dbias[blk * 16 + c];
        *d = accumulate ? *d + (float)total[c] : (float)total[c];
      }
    }
    return;
  }
  if (s->y_layout != CONV2D_NHWC || channels == 1) {
#pragma omp parallel for schedule(static) if (channels > 1)
    for (int c = 0; c < channels; c++) {
      double acc = 0.0;
      for (int n = 0; n < s->batch; n++) {
        const float *p = dy + ((size_t)n * channels + c) * plane;
        float part = 0.0f;
        for (size_t i = 0; i < plane; i++) part += p[i];
        acc += part;
      }
      dbias[c] = accumulate ? dbias[c] + (float)acc : (float)acc;
    }
    return;
  }
  double total[256];
  float row[256];
  /* Channels in groups of 256, each group one pass over dy. */
  for (int c0 = 0; c0 < channels; c0 += 256) {
    int cn = channels - c0 < 256 ? channels - c0 : 256;
    for (int c = 0; c < cn; c++) total[c] = 0.0;
    for (size_t r = 0; r < (size_t)s->batch * oh; r++) {
      row_channel_sums(dy + r * (size_t)ow * channels + c0, ow, channels, cn, row);
      for (int c = 0; c < cn; c++) total[c] += row[c];
    }
    for (int c = 0; c < cn; c++) dbias[c0 + c] = accumulate ? dbias[c0 + c] + (float)total[c] : (float)total[c];
  }
}
