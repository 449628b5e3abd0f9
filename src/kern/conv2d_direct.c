/* The direct convolution's passes (kern/conv2d_direct.h): which shapes it
 * takes, the views of the caller's tensors that its kernels read (a wide
 * tensor given NCHW is transposed to channels-last first), the packing of
 * PyTorch's weight layout into the kernels' and back, and the three
 * passes, each one call of a kernel of conv2d_direct_kernels.c. */
#include "kern/conv2d_direct.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kern/conv2d_geom.h"

static int g_direct_enabled = 1;
static atomic_size_t g_direct_calls;

void conv2d_set_direct(int enabled) { g_direct_enabled = enabled != 0; }
int conv2d_direct_enabled(void) { return g_direct_enabled; }
size_t conv2d_direct_calls(void) { return atomic_load(&g_direct_calls); }

/* The narrow side is the output (S) when it has no more channels than the
 * input: the kernels then vectorise over the input's channels. */
static int narrow_output(const Conv2dGeom *g) { return g->cs <= g->cb; }

/* conv2d.h ("Direct kernels") says why each pass's rule is what it is. */
int conv2d_uses_direct(const Conv2dShape *s, Conv2dPrecision prec, Conv2dPass pass) {
  Conv2dGeom g;
  if (!g_direct_enabled || prec != CONV2D_FP32 || !s || conv2d_geom(s, &g, NULL)) return 0;
  int narrow = g.cb < g.cs ? g.cb : g.cs;
  if (s->transposed || s->groups != 1 || s->stride_h != 1 || s->stride_w != 1 || narrow > CONV2D_DIRECT_NARROW)
    return 0;
  if (pass == CONV2D_PASS_FORWARD) return narrow_output(&g) || g.small_layout != CONV2D_NCHW || g.cs == 1;
  if (pass == CONV2D_PASS_BACKWARD_WEIGHTS) {
    size_t wide = narrow_output(&g) ? (size_t)g.n * g.cb * g.hb * g.wb : (size_t)g.n * g.cs * g.hs * g.ws;
    return wide <= CONV2D_DIRECT_WEIGHTS_MAX;
  }
  return pass == CONV2D_PASS_BACKWARD_DATA;
}

/* A narrow side is NCHW or NHWC (blocked needs 16 channels). */
static DirectNarrow narrow_view(const float *p, int k, int h, int w, int layout) {
  int nhwc = layout == CONV2D_NHWC;
  ptrdiff_t plane = (ptrdiff_t)h * w;
  if (nhwc) return (DirectNarrow){(float *)p, plane * k, 1, (ptrdiff_t)w * k, k, h, w, k};
  return (DirectNarrow){(float *)p, plane * k, plane, w, 1, h, w, k};
}

static DirectWide wide_view(const float *p, int h, int w, int c, int blocked) {
  ptrdiff_t image = (ptrdiff_t)h * w * c;
  if (blocked) return (DirectWide){(float *)p, image, (ptrdiff_t)w * 16, 16, (ptrdiff_t)h * w * 16, h, w, c};
  return (DirectWide){(float *)p, image, (ptrdiff_t)w * c, c, 16, h, w, c};
}

/* The transposes between NCHW and channels-last run over tiles of 16
 * pixels, every channel of a tile in turn, so that each cache line of
 * either side is read or written whole once (pixel by pixel, every channel's plane took a new
 * line per float: 9.5 of 11.9 ms for the 3 -> 64 channels, 128 x 128
 * forward of bench_conv's deblur_stem_7x7). */
enum { TILE = 16 };

/* dst[n][y][x][c] = src[n][c][y][x] */
static void nchw_to_nhwc(float *dst, const float *src, int n, int c, int h, int w) {
  const size_t plane = (size_t)h * w, tiles = (plane + TILE - 1) / TILE;
#pragma omp parallel for schedule(static)
  for (size_t t = 0; t < (size_t)n * tiles; t++) {
    size_t img = t / tiles, p0 = t % tiles * TILE, p1 = p0 + TILE < plane ? p0 + TILE : plane;
    const float *in = src + img * c * plane;
    float *out = dst + img * plane * c;
    for (int ch = 0; ch < c; ch++)
      for (size_t p = p0; p < p1; p++) out[p * c + ch] = in[ch * plane + p];
  }
}

/* dst[n][c][y][x] (=|+=) src[n][y][x][c], then max(dst, 0) with relu */
static void nhwc_to_nchw(float *dst, const float *src, int n, int c, int h, int w, int accumulate, int relu) {
  const size_t plane = (size_t)h * w, tiles = (plane + TILE - 1) / TILE;
#pragma omp parallel for schedule(static)
  for (size_t t = 0; t < (size_t)n * tiles; t++) {
    size_t img = t / tiles, p0 = t % tiles * TILE, p1 = p0 + TILE < plane ? p0 + TILE : plane;
    const float *in = src + img * plane * c;
    float *out = dst + img * c * plane;
    for (int ch = 0; ch < c; ch++)
      for (size_t p = p0; p < p1; p++) {
        float v = accumulate ? out[ch * plane + p] + in[p * c + ch] : in[p * c + ch];
        out[ch * plane + p] = relu && v < 0.0f ? 0.0f : v;
      }
  }
}

/* A wide input channels-last or blocked: the caller's memory when it is
 * so (or has one channel, where NCHW and NHWC coincide), else a
 * channels-last copy in *copy (freed by the caller). */
static int wide_input(const float *p, int n, int c, int h, int w, int layout, float **copy, DirectWide *view) {
  *copy = NULL;
  if (layout == CONV2D_NCHW && c > 1) {
    if (!(*copy = malloc((size_t)n * c * h * w * sizeof(float)))) return ERR_NOMEM;
    nchw_to_nhwc(*copy, p, n, c, h, w);
    p = *copy;
  }
  *view = wide_view(p, h, w, c, layout == CONV2D_NCHW16C);
  return 0;
}

/* A wide output: the caller's memory, or a channels-last buffer *staged
 * that the caller transposes back (nhwc_to_nchw). */
static int wide_output(float *p, int n, int c, int h, int w, int layout, float **staged, DirectWide *view) {
  *staged = NULL;
  if (layout == CONV2D_NCHW && c > 1) {
    if (!(*staged = malloc((size_t)n * c * h * w * sizeof(float)))) return ERR_NOMEM;
    p = *staged;
  }
  *view = wide_view(p, h, w, c, layout == CONV2D_NCHW16C);
  return 0;
}

/* PyTorch's w[cs][cb][kh][kw] as the kernels' [k][a][b][c]: k the narrow
 * side's channel, c the wide side's. */
static float *pack_weights(const float *w, const Conv2dGeom *g) {
  int out_narrow = narrow_output(g), kk = g->kh * g->kw;
  int narrow = out_narrow ? g->cs : g->cb, wide = out_narrow ? g->cb : g->cs;
  float *packed = malloc((size_t)narrow * kk * wide * sizeof(float));
  if (!packed) return NULL;
  for (int o = 0; o < g->cs; o++)
    for (int c = 0; c < g->cb; c++)
      for (int t = 0; t < kk; t++) {
        int k = out_narrow ? o : c, ch = out_narrow ? c : o;
        packed[((size_t)k * kk + t) * wide + ch] = w[((size_t)o * g->cb + c) * kk + t];
      }
  return packed;
}

/* The inverse of pack_weights, into dw (=|+=). */
static void unpack_weights(float *dw, const float *packed, const Conv2dGeom *g, int accumulate) {
  int out_narrow = narrow_output(g), kk = g->kh * g->kw;
  int wide = out_narrow ? g->cb : g->cs;
  for (int o = 0; o < g->cs; o++)
    for (int c = 0; c < g->cb; c++)
      for (int t = 0; t < kk; t++) {
        int k = out_narrow ? o : c, ch = out_narrow ? c : o;
        float v = packed[((size_t)k * kk + t) * wide + ch];
        float *d = dw + ((size_t)o * g->cb + c) * kk + t;
        *d = accumulate ? *d + v : v;
      }
}

static DirectTaps forward_taps(const Conv2dGeom *g) {
  return (DirectTaps){g->kh, g->kw, -g->ph, g->dh, -g->pw, g->dw};
}

/* Backward-data reads dy at (y + pad - a dilation, x + pad - b dilation). */
static DirectTaps backward_taps(const Conv2dGeom *g) {
  return (DirectTaps){g->kh, g->kw, g->ph, -g->dh, g->pw, -g->dw};
}

static int oom(Error *err, const char *pass, const Conv2dGeom *g) {
  return error_set(err, ERR_NOMEM, "conv2d %s: out of memory for the direct kernel's buffers (%d x %d x %d x %d)",
                   pass, g->n, g->cb, g->hb, g->wb);
}

int conv2d_direct_forward(const Conv2dShape *s, float *y, const float *x, const float *w, const float *bias,
                          Conv2dEpilogue ep, Error *err) {
  Conv2dGeom g;
  int rc = conv2d_geom(s, &g, err);
  if (rc) return rc;
  atomic_fetch_add(&g_direct_calls, 1);
  float *packed = pack_weights(w, &g), *buffer = NULL;
  if (!packed) return oom(err, "forward", &g);
  DirectTaps t = forward_taps(&g);
  if (narrow_output(&g)) {
    DirectWide in;
    if (!(rc = wide_input(x, g.n, g.cb, g.hb, g.wb, g.big_layout, &buffer, &in))) {
      DirectNarrow out = narrow_view(y, g.cs, g.hs, g.ws, g.small_layout);
      conv2d_direct_reduce(&out, &in, packed, bias, &t, g.n, ep.accumulate, ep.relu);
    }
  } else {
    DirectWide out;
    if (!(rc = wide_output(y, g.n, g.cs, g.hs, g.ws, g.small_layout, &buffer, &out))) {
      DirectNarrow in = narrow_view(x, g.cb, g.hb, g.wb, g.big_layout);
      /* into a staging buffer: the epilogue where it is copied out */
      conv2d_direct_spread(&out, &in, packed, bias, &t, g.n, buffer ? 0 : ep.accumulate, buffer ? 0 : ep.relu);
      if (buffer) nhwc_to_nchw(y, buffer, g.n, g.cs, g.hs, g.ws, ep.accumulate, ep.relu);
    }
  }
  free(packed);
  free(buffer);
  return rc ? oom(err, "forward", &g) : 0;
}

int conv2d_direct_backward_data(const Conv2dShape *s, float *dx, const float *dy, const float *w, int accumulate,
                                Error *err) {
  Conv2dGeom g;
  int rc = conv2d_geom(s, &g, err);
  if (rc) return rc;
  atomic_fetch_add(&g_direct_calls, 1);
  float *packed = pack_weights(w, &g), *buffer = NULL;
  if (!packed) return oom(err, "backward-data", &g);
  DirectTaps t = backward_taps(&g);
  if (narrow_output(&g)) {
    /* dx is wide: spread dy's few channels over it */
    DirectWide out;
    if (!(rc = wide_output(dx, g.n, g.cb, g.hb, g.wb, g.big_layout, &buffer, &out))) {
      DirectNarrow in = narrow_view(dy, g.cs, g.hs, g.ws, g.small_layout);
      conv2d_direct_spread(&out, &in, packed, NULL, &t, g.n, buffer ? 0 : accumulate, 0);
      if (buffer) nhwc_to_nchw(dx, buffer, g.n, g.cb, g.hb, g.wb, accumulate, 0);
    }
  } else {
    DirectWide in;
    if (!(rc = wide_input(dy, g.n, g.cs, g.hs, g.ws, g.small_layout, &buffer, &in))) {
      DirectNarrow out = narrow_view(dx, g.cb, g.hb, g.wb, g.big_layout);
      conv2d_direct_reduce(&out, &in, packed, NULL, &t, g.n, accumulate, 0);
    }
  }
  free(packed);
  free(buffer);
  return rc ? oom(err, "backward-data", &g) : 0;
}

int conv2d_direct_backward_weights(const Conv2dShape *s, float *dw, float *dbias, const float *dy, const float *x,
                                   int accumulate, Error *err) {
  Conv2dGeom g;
  int rc = conv2d_geom(s, &g, err);
  if (rc) return rc;
  atomic_fetch_add(&g_direct_calls, 1);
  size_t count = (size_t)g.cs * g.cb * g.kh * g.kw;
  float *packed = malloc(count * sizeof(float)), *buffer = NULL;
  if (!packed) return oom(err, "backward-weights", &g);
  DirectTaps t = forward_taps(&g);
  DirectWide wide;
  if (narrow_output(&g)) {
    /* sum over dy's positions, x read at the tap's offset */
    if (!(rc = wide_input(x, g.n, g.cb, g.hb, g.wb, g.big_layout, &buffer, &wide))) {
      DirectNarrow narrow = narrow_view(dy, g.cs, g.hs, g.ws, g.small_layout);
      conv2d_direct_weights(packed, &narrow, &wide, &t, g.n, 0);
    }
  } else {
    /* sum over dy's positions, the narrow x read at the tap's offset */
    if (!(rc = wide_input(dy, g.n, g.cs, g.hs, g.ws, g.small_layout, &buffer, &wide))) {
      DirectNarrow narrow = narrow_view(x, g.cb, g.hb, g.wb, g.big_layout);
      conv2d_direct_weights(packed, &narrow, &wide, &t, g.n, 1);
    }
  }
  if (!rc) unpack_weights(dw, packed, &g, accumulate);
  free(packed);
  free(buffer);
  if (rc) return oom(err, "backward-weights", &g);
  if (dbias) conv2d_bias_gradient(s, dbias, dy, accumulate);
  return 0;
}
