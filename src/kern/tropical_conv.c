/* Tropical conv2d, all six variants (inner max|min over the window, outer
 * sum|max|min over input channels): shape checks, im2col (zero padding),
 * a direct register-tile kernel that does both reductions in registers
 * with winner tracking, and the backward pass over the winners. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kern/tropical.h"
#include "kern/tropical_simd.h"

#if defined(__AVX512F__)
#define CONV_MR 6 /* 6 pixels x (outer, outer winner, inner, inner winner) = 24 of 32 registers */
#else
#define CONV_MR 2 /* 2 x 4 of 16 */
#endif
#define CONV_PB (8 * CONV_MR) /* pixels per work unit */

int tropical_conv2d_output_size(const TropicalConvShape *s, int *out_h, int *out_w, Error *err) {
  if (!s) return error_set(err, ERR_ARG, "tropical conv2d: shape is NULL");
  struct {
    const char *name;
    int value, min;
  } pos[] = {{"batch", s->batch, 1},         {"in_channels", s->in_channels, 1}, {"in_h", s->in_h, 1},
             {"in_w", s->in_w, 1},           {"out_channels", s->out_channels, 1}, {"kernel_h", s->kernel_h, 1},
             {"kernel_w", s->kernel_w, 1},   {"stride_h", s->stride_h, 1},       {"stride_w", s->stride_w, 1},
             {"pad_h", s->pad_h, 0},         {"pad_w", s->pad_w, 0}};
  for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
    if (pos[i].value < pos[i].min)
      return error_set(err, ERR_ARG, "tropical conv2d: %s = %d, expected >= %d", pos[i].name, pos[i].value,
                       pos[i].min);
  if (s->pad_h >= s->kernel_h || s->pad_w >= s->kernel_w)
    return error_set(err, ERR_ARG, "tropical conv2d: pad %dx%d, expected below the kernel %dx%d", s->pad_h, s->pad_w,
                     s->kernel_h, s->kernel_w);
  if (s->inner != TROPICAL_INNER_MAX && s->inner != TROPICAL_INNER_MIN)
    return error_set(err, ERR_ARG, "tropical conv2d: inner = %d, expected max (0) or min (1)", (int)s->inner);
  if (s->outer != TROPICAL_OUTER_SUM && s->outer != TROPICAL_OUTER_MAX && s->outer != TROPICAL_OUTER_MIN)
    return error_set(err, ERR_ARG, "tropical conv2d: outer = %d, expected sum (0), max (1) or min (2)",
                     (int)s->outer);
  int eh = s->in_h + 2 * s->pad_h - s->kernel_h, ew = s->in_w + 2 * s->pad_w - s->kernel_w;
  if (eh < 0 || ew < 0)
    return error_set(err, ERR_ARG, "tropical conv2d: padded input %dx%d is smaller than the kernel %dx%d",
                     s->in_h + 2 * s->pad_h, s->in_w + 2 * s->pad_w, s->kernel_h, s->kernel_w);
  if (out_h) *out_h = eh / s->stride_h + 1;
  if (out_w) *out_w = ew / s->stride_w + 1;
  return 0;
}

static size_t output_pixels(const TropicalConvShape *s) {
  int oh = 0, ow = 0;
  if (tropical_conv2d_output_size(s, &oh, &ow, NULL)) return 0;
  return (size_t)oh * (size_t)ow;
}

size_t tropical_conv2d_input_count(const TropicalConvShape *s) {
  if (!output_pixels(s)) return 0;
  return (size_t)s->batch * (size_t)s->in_channels * (size_t)s->in_h * (size_t)s->in_w;
}

size_t tropical_conv2d_output_count(const TropicalConvShape *s) {
  return (size_t)(s ? s->batch : 0) * (size_t)(s ? s->out_channels : 0) * output_pixels(s);
}

size_t tropical_conv2d_weight_count(const TropicalConvShape *s) {
  if (!output_pixels(s)) return 0;
  return (size_t)s->out_channels * (size_t)s->in_channels * (size_t)s->kernel_h * (size_t)s->kernel_w;
}

size_t tropical_conv2d_winner_count(const TropicalConvShape *s) {
  size_t out = tropical_conv2d_output_count(s);
  return s && s->outer == TROPICAL_OUTER_SUM ? out * (size_t)s->in_channels : out;
}

double tropical_conv2d_forward_ops(const TropicalConvShape *s) {
  return (double)tropical_conv2d_output_count(s) * (double)(s ? s->in_channels : 0) *
         (double)(s ? s->kernel_h * s->kernel_w : 0);
}

const char *tropical_conv2d_variant_name(TropicalInner inner, TropicalOuter outer) {
  static const char *names[2][3] = {{"max_sum", "max_max", "max_min"}, {"min_sum", "min_max", "min_min"}};
  if ((int)inner < 0 || inner > 1 || (int)outer < 0 || outer > 2) return "invalid";
  return names[inner][outer];
}

/* cols[n][p][c kh kw + a kw + b] = xpad at that tap (0 outside x). */
static void im2col(const TropicalConvShape *s, int oh, int ow, const float *x, float *cols) {
  int kk = s->kernel_h * s->kernel_w, ck = s->in_channels * kk;
  long rows = (long)s->batch * oh * ow;
#pragma omp parallel for schedule(static) if (rows * ck > (1 << 16))
  for (long row = 0; row < rows; row++) {
    int n = (int)(row / (oh * ow)), p = (int)(row % (oh * ow));
    int i = p / ow, j = p % ow;
    float *dst = cols + (size_t)row * (size_t)ck;
    for (int c = 0; c < s->in_channels; c++) {
      const float *plane = x + ((size_t)n * s->in_channels + c) * (size_t)s->in_h * (size_t)s->in_w;
      for (int a = 0; a < s->kernel_h; a++) {
        int ih = i * s->stride_h - s->pad_h + a;
        for (int b = 0; b < s->kernel_w; b++) {
          int iw = j * s->stride_w - s->pad_w + b;
          int inside = ih >= 0 && ih < s->in_h && iw >= 0 && iw < s->in_w;
          *dst++ = inside ? plane[(size_t)ih * s->in_w + iw] : 0.0f;
        }
      }
    }
  }
}

/* packed[panel][c kk + t][lane] = w[panel L + lane][c][t] (0 past out_channels). */
static void pack_conv_weights(const TropicalConvShape *s, const float *w, float *packed) {
  int ck = s->in_channels * s->kernel_h * s->kernel_w;
  int panels = (s->out_channels + TROP_LANES - 1) / TROP_LANES;
  for (int p = 0; p < panels; p++)
    for (int lane = 0; lane < TROP_LANES; lane++) {
      int o = p * TROP_LANES + lane;
      float *dst = packed + (size_t)p * (size_t)ck * TROP_LANES + lane;
      for (int t = 0; t < ck; t++) dst[(size_t)t * TROP_LANES] = o < s->out_channels ? w[(size_t)o * ck + t] : 0.0f;
    }
}

/* One tile: CONV_MR pixel rows of cols against one panel of output
 * channels. Results go to `out` (values) and the winner arrays. */
TROP_INLINE void conv_tile(int inner_min, int outer, const float *const *xr, const float *wp, int cin, int kk,
                           tvec *out, tivec *out_win, int32_t *sum_win, size_t sum_win_row, int sum_win_pix,
                           int lanes, int rows) {
  tvec acc[CONV_MR];
  tivec acc_win[CONV_MR];
  int outer_min = outer == TROPICAL_OUTER_MIN;
  tvec start_outer = tv_set1(outer == TROPICAL_OUTER_SUM ? 0.0f : trop_start(outer_min));
  tvec start_inner = tv_set1(trop_start(inner_min));
  tivec zero = ti_set1(0);
#pragma GCC unroll 8
  for (int r = 0; r < CONV_MR; r++) acc[r] = start_outer, acc_win[r] = zero;
  for (int c = 0; c < cin; c++) {
    tvec in[CONV_MR];
    tivec in_win[CONV_MR];
#pragma GCC unroll 8
    for (int r = 0; r < CONV_MR; r++) in[r] = start_inner, in_win[r] = zero;
    const float *wc = wp + (size_t)c * kk * TROP_LANES;
    for (int t = 0; t < kk; t++) {
      tvec wv = tv_load(wc + (size_t)t * TROP_LANES);
      tivec tv = ti_set1(t);
#pragma GCC unroll 8
      for (int r = 0; r < CONV_MR; r++) {
        tvec cand = tv_add(tv_set1(xr[r][c * kk + t]), wv);
        tmask m = tv_better(inner_min, cand, in[r]);
        in[r] = tv_select(m, cand, in[r]);
        in_win[r] = ti_select(m, tv, in_win[r]);
      }
    }
    if (outer == TROPICAL_OUTER_SUM) {
#pragma GCC unroll 8
      for (int r = 0; r < CONV_MR; r++) {
        acc[r] = tv_add(acc[r], in[r]);
        if (r < rows) ti_store_n(sum_win + (size_t)r * sum_win_row + (size_t)c * sum_win_pix, in_win[r], lanes);
      }
    } else {
      tivec base = ti_set1(c * kk);
#pragma GCC unroll 8
      for (int r = 0; r < CONV_MR; r++) {
        tmask m = tv_better(outer_min, in[r], acc[r]);
        acc[r] = tv_select(m, in[r], acc[r]);
        acc_win[r] = ti_select(m, ti_add(base, in_win[r]), acc_win[r]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < CONV_MR; r++) out[r] = acc[r], out_win[r] = acc_win[r];
}

typedef struct ConvRun {
  const TropicalConvShape *s;
  int pixels, panels, kk, ck;
  const float *cols, *packed;
  float *y;
  int32_t *winner;
} ConvRun;

/* Work unit: image n, pixels [p0, p0 + CONV_PB), output-channel panel. */
TROP_INLINE void conv_unit(int inner_min, int outer, const ConvRun *cr, int n, int p0, int panel) {
  const TropicalConvShape *s = cr->s;
  int cout = s->out_channels, cin = s->in_channels;
  int o0 = panel * TROP_LANES, lanes = cout - o0 < TROP_LANES ? cout - o0 : TROP_LANES;
  int end = p0 + CONV_PB < cr->pixels ? p0 + CONV_PB : cr->pixels;
  const float *wp = cr->packed + (size_t)panel * (size_t)cr->ck * TROP_LANES;
  for (int pt = p0; pt < end; pt += CONV_MR) {
    int rows = end - pt < CONV_MR ? end - pt : CONV_MR;
    const float *xr[CONV_MR];
    for (int r = 0; r < CONV_MR; r++) {
      int p = pt + (r < rows ? r : rows - 1);
      xr[r] = cr->cols + ((size_t)n * cr->pixels + p) * (size_t)cr->ck;
    }
    tvec out[CONV_MR];
    tivec out_win[CONV_MR];
    /* Outer sum: winner[n][p][c][o]; the tile writes its lanes o0.. */
    int32_t *sum_win = cr->winner + ((size_t)n * cr->pixels + pt) * (size_t)cin * cout + o0;
    conv_tile(inner_min, outer, xr, wp, cin, cr->kk, out, out_win, sum_win, (size_t)cin * cout, cout, lanes, rows);
    float vals[CONV_MR][TROP_LANES];
    for (int r = 0; r < CONV_MR; r++) tv_store(vals[r], out[r]);
    for (int l = 0; l < lanes; l++) {
      float *dst = cr->y + ((size_t)n * cout + o0 + l) * (size_t)cr->pixels + pt;
      for (int r = 0; r < rows; r++) dst[r] = vals[r][l];
    }
    if (outer != TROPICAL_OUTER_SUM)
      for (int r = 0; r < rows; r++)
        ti_store_n(cr->winner + ((size_t)n * cr->pixels + pt + r) * (size_t)cout + o0, out_win[r], lanes);
  }
}

static void conv_unit_dispatch(const ConvRun *cr, int n, int p0, int panel) {
  int inner_min = cr->s->inner == TROPICAL_INNER_MIN;
  switch (cr->s->outer) {
    case TROPICAL_OUTER_SUM:
      if (inner_min) conv_unit(1, TROPICAL_OUTER_SUM, cr, n, p0, panel);
      else conv_unit(0, TROPICAL_OUTER_SUM, cr, n, p0, panel);
      break;
    case TROPICAL_OUTER_MAX:
      if (inner_min) conv_unit(1, TROPICAL_OUTER_MAX, cr, n, p0, panel);
      else conv_unit(0, TROPICAL_OUTER_MAX, cr, n, p0, panel);
      break;
    case TROPICAL_OUTER_MIN:
      if (inner_min) conv_unit(1, TROPICAL_OUTER_MIN, cr, n, p0, panel);
      else conv_unit(0, TROPICAL_OUTER_MIN, cr, n, p0, panel);
      break;
  }
}

int tropical_conv2d_forward(const TropicalConvShape *s, const float *x, const float *w, float *y, int32_t *winner,
                            Error *err) {
  int oh = 0, ow = 0;
  int rc = tropical_conv2d_output_size(s, &oh, &ow, err);
  if (rc) return rc;
  if (!winner) return error_set(err, ERR_ARG, "tropical_conv2d_forward: winner is NULL, expected a buffer of %zu",
                                tropical_conv2d_winner_count(s));
  ConvRun cr = {.s = s, .pixels = oh * ow, .kk = s->kernel_h * s->kernel_w, .y = y, .winner = winner};
  cr.ck = s->in_channels * cr.kk;
  cr.panels = (s->out_channels + TROP_LANES - 1) / TROP_LANES;
  size_t cols_bytes = (size_t)s->batch * (size_t)cr.pixels * (size_t)cr.ck * sizeof(float);
  size_t pack_bytes = (size_t)cr.panels * TROP_LANES * (size_t)cr.ck * sizeof(float);
  float *cols = tropical_scratch(TROP_SCRATCH_COLS, cols_bytes);
  float *packed = tropical_scratch(TROP_SCRATCH_PACK, pack_bytes);
  if (!cols || !packed)
    return error_set(err, ERR_NOMEM, "tropical_conv2d_forward: out of memory for im2col (%zu bytes)", cols_bytes);
  im2col(s, oh, ow, x, cols);
  pack_conv_weights(s, w, packed);
  cr.cols = cols, cr.packed = packed;
  int pblocks = (cr.pixels + CONV_PB - 1) / CONV_PB;
  long units = (long)s->batch * pblocks * cr.panels;
  double work = tropical_conv2d_forward_ops(s);
#pragma omp parallel for schedule(static) if (work > 2e5 && units > 1)
  for (long u = 0; u < units; u++) {
    int panel = (int)(u % cr.panels);
    long rest = u / cr.panels;
    int pb = (int)(rest % pblocks), n = (int)(rest / pblocks);
    conv_unit_dispatch(&cr, n, pb * CONV_PB, panel);
  }
  return 0;
}

/* The input offset of tap t at output pixel p, or -1 for a padded tap. */
static inline long tap_offset(const TropicalConvShape *s, int ow, int p, int t) {
  int i = p / ow, j = p % ow, a = t / s->kernel_w, b = t % s->kernel_w;
  int ih = i * s->stride_h - s->pad_h + a, iw = j * s->stride_w - s->pad_w + b;
  if (ih < 0 || ih >= s->in_h || iw < 0 || iw >= s->in_w) return -1;
  return (long)ih * s->in_w + iw;
}

int tropical_conv2d_backward(const TropicalConvShape *s, const float *dy, const int32_t *winner, float *dx, float *dw,
                             int accumulate, Error *err) {
  int oh = 0, ow = 0;
  int rc = tropical_conv2d_output_size(s, &oh, &ow, err);
  if (rc) return rc;
  int pixels = oh * ow, cin = s->in_channels, cout = s->out_channels, kk = s->kernel_h * s->kernel_w;
  size_t plane = (size_t)s->in_h * (size_t)s->in_w;
  int sum = s->outer == TROPICAL_OUTER_SUM;
  double work = (double)tropical_conv2d_winner_count(s);
  if (dx) {
    /* dx[n][c] is owned by one thread; contributions in ascending (o, p). */
    long owners = sum ? (long)s->batch * cin : s->batch;
#pragma omp parallel for schedule(static) if (work > 3e4)
    for (long own = 0; own < owners; own++) {
      int n = sum ? (int)(own / cin) : (int)own;
      if (!accumulate) {
        size_t count = sum ? plane : plane * (size_t)cin;
        memset(dx + (size_t)own * count, 0, count * sizeof *dx);
      }
      for (int o = 0; o < cout; o++) {
        const float *g = dy + ((size_t)n * cout + o) * (size_t)pixels;
        for (int p = 0; p < pixels; p++) {
          int c, t;
          if (sum) {
            c = (int)(own % cin);
            t = winner[(((size_t)n * pixels + p) * cin + c) * cout + o];
          } else {
            int flat = winner[((size_t)n * pixels + p) * cout + o];
            c = flat / kk, t = flat % kk;
          }
          long off = tap_offset(s, ow, p, t);
          if (off >= 0) dx[((size_t)n * cin + c) * plane + (size_t)off] += g[p];
        }
      }
    }
  }
  if (dw) {
    /* dw[o] is owned by one thread; contributions in ascending (n, p). */
#pragma omp parallel for schedule(static) if (work > 3e4)
    for (int o = 0; o < cout; o++) {
      float *wo = dw + (size_t)o * cin * kk;
      if (!accumulate) memset(wo, 0, (size_t)cin * kk * sizeof *wo);
      for (int n = 0; n < s->batch; n++) {
        const float *g = dy + ((size_t)n * cout + o) * (size_t)pixels;
        for (int p = 0; p < pixels; p++) {
          if (sum) {
            const int32_t *win = winner + ((size_t)n * pixels + p) * (size_t)cin * cout + o;
            for (int c = 0; c < cin; c++) wo[c * kk + win[(size_t)c * cout]] += g[p];
          } else {
            wo[winner[((size_t)n * pixels + p) * cout + o]] += g[p];
          }
        }
      }
    }
  }
  return 0;
}
