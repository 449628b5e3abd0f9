/* Tropical conv2d, all six variants (inner max|min over the window, outer
 * sum|max|min over input channels): shape checks, im2col (zero padding),
 * a direct register-tile kernel that does both reductions in registers
 * with winner tracking, and the backward pass over the winners (dx
 * scattered into zero-padded planes so it tests no bounds, dw's sums of a
 * few taps kept in one register on AVX-512). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kern/tropical.h"
#include "kern/tropical_simd.h"

#if defined(__AVX512F__)
#define CONV_MR 6 /* 6 channels x (outer, outer winner, inner, inner winner) = 24 of 32 registers */
#else
#define CONV_MR 2 /* 2 x 4 of 16 */
#endif
#define CONV_QB (8 * TROP_LANES) /* output pixels per work unit */

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

/* cols[c kh kw + a kw + b][q] = xpad at that tap for output pixel q = n
 * pixels + p (0 outside x); rows padded with zeros to `stride` floats so
 * that a vector load at any q < pixels_total stays inside its row. Per
 * output row the columns whose tap falls inside x form one range
 * [j_lo, j_hi), so the copy loop has no bounds test (at the few channels
 * of tropical CNNs the copy costs more than the reductions). */
static void im2col_t(const TropicalConvShape *s, int oh, int ow, const float *x, float *cols, size_t stride) {
  int kk = s->kernel_h * s->kernel_w, ck = s->in_channels * kk, sw = s->stride_w;
  size_t q_total = (size_t)s->batch * oh * ow;
#pragma omp parallel for schedule(static) if ((double)ck * q_total > (1 << 16))
  for (int row = 0; row < ck; row++) {
    int c = row / kk, a = (row % kk) / s->kernel_w, b = row % s->kernel_w;
    /* iw = j sw - pw + b is inside x for j in [j_lo, j_hi) */
    int off = b - s->pad_w, j_lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
    int j_hi = s->in_w - 1 - off < 0 ? 0 : (s->in_w - 1 - off) / sw + 1;
    if (j_hi > ow) j_hi = ow;
    if (j_lo > j_hi) j_lo = j_hi;
    float *dst = cols + (size_t)row * stride;
    for (int n = 0; n < s->batch; n++) {
      const float *plane = x + ((size_t)n * s->in_channels + c) * (size_t)s->in_h * (size_t)s->in_w;
      for (int i = 0; i < oh; i++, dst += ow) {
        int ih = i * s->stride_h - s->pad_h + a;
        if (ih < 0 || ih >= s->in_h) {
          memset(dst, 0, (size_t)ow * sizeof *dst);
          continue;
        }
        const float *src = plane + (size_t)ih * s->in_w + off;
        for (int j = 0; j < j_lo; j++) dst[j] = 0.0f;
        if (sw == 1)
          memcpy(dst + j_lo, src + j_lo, (size_t)(j_hi - j_lo) * sizeof *dst);
        else
          for (int j = j_lo; j < j_hi; j++) dst[j] = src[(size_t)j * sw];
        for (int j = j_hi; j < ow; j++) dst[j] = 0.0f;
      }
    }
    for (size_t q = q_total; q < stride; q++) *dst++ = 0.0f;
  }
}

typedef struct ConvRun {
  const TropicalConvShape *s;
  int pixels, kk, ck, cout;
  size_t q_total, stride;
  const float *cols, *w;
  float *y;
  int32_t *winner;
} ConvRun;

/* One tile: `rows` output channels from o0 (weights broadcast) x
 * TROP_LANES output pixels from q0 (loaded from cols), both reductions in
 * registers; winners and values stored. */
TROP_INLINE void conv_tile(int inner_min, int outer, int rows, const ConvRun *cr, int o0, size_t q0) {
  tvec acc[CONV_MR];
  tivec acc_win[CONV_MR];
  const float *wr[CONV_MR];
  int outer_min = outer == TROPICAL_OUTER_MIN, cin = cr->s->in_channels, kk = cr->kk;
  int lanes = cr->q_total - q0 < TROP_LANES ? (int)(cr->q_total - q0) : TROP_LANES;
  tvec start_outer = tv_set1(outer == TROPICAL_OUTER_SUM ? 0.0f : trop_start(outer_min));
  tvec start_inner = tv_set1(trop_start(inner_min));
  tivec zero = ti_set1(0);
#pragma GCC unroll 8
  for (int r = 0; r < rows; r++) {
    acc[r] = start_outer, acc_win[r] = zero;
    wr[r] = cr->w + (size_t)(o0 + r) * cr->ck;
  }
  const float *xq = cr->cols + q0;
  for (int c = 0; c < cin; c++) {
    tvec in[CONV_MR];
    tivec in_win[CONV_MR];
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++) in[r] = start_inner, in_win[r] = zero;
    for (int t = 0; t < kk; t++) {
      int col = c * kk + t;
      tvec xv = tv_load(xq + (size_t)col * cr->stride);
      tivec tv = ti_set1(t);
#pragma GCC unroll 8
      for (int r = 0; r < rows; r++) {
        tvec cand = tv_add(xv, tv_set1(wr[r][col]));
        tmask m = tv_better(inner_min, cand, in[r]);
        in[r] = tv_select(m, cand, in[r]);
        in_win[r] = ti_select(m, tv, in_win[r]);
      }
    }
    if (outer == TROPICAL_OUTER_SUM) {
#pragma GCC unroll 8
      for (int r = 0; r < rows; r++) {
        acc[r] = tv_add(acc[r], in[r]);
        ti_store_n(cr->winner + ((size_t)c * cr->cout + o0 + r) * cr->q_total + q0, in_win[r], lanes);
      }
    } else {
      tivec base = ti_set1(c * kk);
#pragma GCC unroll 8
      for (int r = 0; r < rows; r++) {
        tmask m = tv_better(outer_min, in[r], acc[r]);
        acc[r] = tv_select(m, in[r], acc[r]);
        acc_win[r] = ti_select(m, ti_add(base, in_win[r]), acc_win[r]);
      }
    }
  }
  size_t n0 = q0 / (size_t)cr->pixels, p0 = q0 % (size_t)cr->pixels;
  int one_image = p0 + (size_t)lanes <= (size_t)cr->pixels;
  for (int r = 0; r < rows; r++) {
    int o = o0 + r;
    if (outer != TROPICAL_OUTER_SUM) ti_store_n(cr->winner + (size_t)o * cr->q_total + q0, acc_win[r], lanes);
    if (one_image) {
      tv_store_n(cr->y + (n0 * cr->cout + o) * cr->pixels + p0, acc[r], lanes);
    } else {
      float vals[TROP_LANES];
      tv_store(vals, acc[r]);
      for (int l = 0; l < lanes; l++) {
        size_t q = q0 + l, n = q / cr->pixels, p = q % cr->pixels;
        cr->y[(n * cr->cout + o) * cr->pixels + p] = vals[l];
      }
    }
  }
}

/* Work unit: output channels [o0, o0 + CONV_MR) x pixels [q0, q0 + CONV_QB). */
TROP_INLINE void conv_unit(int inner_min, int outer, const ConvRun *cr, int o0, size_t q0) {
  int rows = cr->cout - o0 < CONV_MR ? cr->cout - o0 : CONV_MR;
  size_t end = q0 + CONV_QB < cr->q_total ? q0 + CONV_QB : cr->q_total;
  for (size_t q = q0; q < end; q += TROP_LANES) {
    /* One inlined copy per row count, so that every tile keeps its
     * accumulators in registers and computes no padding rows. */
    switch (rows) {
#define CONV_ROWS_CASE(R) \
  case R: conv_tile(inner_min, outer, R, cr, o0, q); break;
      CONV_ROWS_CASE(1)
      CONV_ROWS_CASE(2)
#if CONV_MR > 2
      CONV_ROWS_CASE(3)
      CONV_ROWS_CASE(4)
      CONV_ROWS_CASE(5)
      CONV_ROWS_CASE(6)
#endif
#undef CONV_ROWS_CASE
      default: break;
    }
  }
}

static void conv_unit_dispatch(const ConvRun *cr, int o0, size_t q0) {
  int inner_min = cr->s->inner == TROPICAL_INNER_MIN;
  switch (cr->s->outer) {
    case TROPICAL_OUTER_SUM:
      if (inner_min) conv_unit(1, TROPICAL_OUTER_SUM, cr, o0, q0);
      else conv_unit(0, TROPICAL_OUTER_SUM, cr, o0, q0);
      break;
    case TROPICAL_OUTER_MAX:
      if (inner_min) conv_unit(1, TROPICAL_OUTER_MAX, cr, o0, q0);
      else conv_unit(0, TROPICAL_OUTER_MAX, cr, o0, q0);
      break;
    case TROPICAL_OUTER_MIN:
      if (inner_min) conv_unit(1, TROPICAL_OUTER_MIN, cr, o0, q0);
      else conv_unit(0, TROPICAL_OUTER_MIN, cr, o0, q0);
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
  ConvRun cr = {.s = s, .pixels = oh * ow, .kk = s->kernel_h * s->kernel_w, .cout = s->out_channels, .w = w,
                .y = y, .winner = winner};
  cr.ck = s->in_channels * cr.kk;
  cr.q_total = (size_t)s->batch * (size_t)cr.pixels;
  cr.stride = (cr.q_total + TROP_LANES - 1) / TROP_LANES * TROP_LANES;
  size_t cols_bytes = (size_t)cr.ck * cr.stride * sizeof(float);
  float *cols = tropical_scratch(TROP_SCRATCH_COLS, cols_bytes);
  if (!cols)
    return error_set(err, ERR_NOMEM, "tropical_conv2d_forward: out of memory for im2col (%zu bytes)", cols_bytes);
  im2col_t(s, oh, ow, x, cols, cr.stride);
  cr.cols = cols;
  int oblocks = (cr.cout + CONV_MR - 1) / CONV_MR;
  long qblocks = (long)((cr.q_total + CONV_QB - 1) / CONV_QB);
  long units = oblocks * qblocks;
  double work = tropical_conv2d_forward_ops(s);
  /* Consecutive units share their pixel block (its columns stay in cache). */
#pragma omp parallel for schedule(static) if (work > 2e5 && units > 1)
  for (long u = 0; u < units; u++)
    conv_unit_dispatch(&cr, (int)(u % oblocks) * CONV_MR, (size_t)(u / oblocks) * CONV_QB);
  return 0;
}

int tropical_conv2d_backward(const TropicalConvShape *s, const float *dy, const int32_t *winner, float *dx, float *dw,
                             int accumulate, Error *err) {
  int oh = 0, ow = 0;
  int rc = tropical_conv2d_output_size(s, &oh, &ow, err);
  if (rc) return rc;
  int pixels = oh * ow, cin = s->in_channels, cout = s->out_channels, kk = s->kernel_h * s->kernel_w;
  size_t plane = (size_t)s->in_h * (size_t)s->in_w, q_total = (size_t)s->batch * pixels;
  int sum = s->outer == TROPICAL_OUTER_SUM;
  double work = (double)tropical_conv2d_winner_count(s);
  if (dx) {
    /* Each owner scatters into a zero-padded copy of its planes (padded
     * taps land in the border and are dropped), so the loop tests no
     * bounds: winner index -> offset in that copy. */
    int hp = s->in_h + 2 * s->pad_h, wp = s->in_w + 2 * s->pad_w;
    size_t plane_p = (size_t)hp * wp;
    int32_t *tap = malloc((size_t)cin * kk * sizeof *tap);
    if (!tap) return error_set(err, ERR_NOMEM, "tropical_conv2d_backward: out of memory for the tap table");
    for (int f = 0; f < cin * kk; f++)
      tap[f] = (int32_t)((size_t)(f / kk) * plane_p + (size_t)((f % kk) / s->kernel_w) * wp + f % s->kernel_w);
    /* dx[n][c] (dx[n] for an outer max/min) is owned by one thread;
     * contributions in ascending (o, p). */
    long owners = sum ? (long)s->batch * cin : s->batch;
    int planes = sum ? 1 : cin, threads = work > 3e4 ? omp_get_max_threads() : 1;
    float *pads = malloc((size_t)threads * planes * plane_p * sizeof *pads);
    if (!pads) {
      free(tap);
      return error_set(err, ERR_NOMEM, "tropical_conv2d_backward: out of memory for the padded planes");
    }
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long own = 0; own < owners; own++) {
      int n = sum ? (int)(own / cin) : (int)own, c_own = sum ? (int)(own % cin) : 0;
      float *pad = pads + (size_t)omp_get_thread_num() * planes * plane_p;
      memset(pad, 0, (size_t)planes * plane_p * sizeof *pad);
      for (int o = 0; o < cout; o++) {
        const float *g = dy + ((size_t)n * cout + o) * (size_t)pixels;
        const int32_t *win = winner + ((sum ? (size_t)c_own * cout : 0) + o) * q_total + (size_t)n * pixels;
        for (int i = 0, p = 0; i < oh; i++) {
          float *prow = pad + (size_t)i * s->stride_h * wp;
          for (int j = 0; j < ow; j++, p++) prow[(size_t)j * s->stride_w + tap[win[p]]] += g[p];
        }
      }
      size_t count = sum ? plane : plane * (size_t)cin;
      float *dst = dx + (size_t)own * count;
      for (int c = 0; c < planes; c++)
        for (int ih = 0; ih < s->in_h; ih++) {
          const float *src = pad + (size_t)c * plane_p + (size_t)(ih + s->pad_h) * wp + s->pad_w;
          float *d = dst + ((size_t)c * s->in_h + ih) * s->in_w;
          if (accumulate)
            for (int iw = 0; iw < s->in_w; iw++) d[iw] += src[iw];
          else
            memcpy(d, src, (size_t)s->in_w * sizeof *d);
        }
    }
    free(tap);
    free(pads);
  }
  if (dw) {
    /* dw[o] is owned by one thread; contributions in ascending (n, p). */
#pragma omp parallel for schedule(static) if (work > 3e4)
    for (int o = 0; o < cout; o++) {
      float *wo = dw + (size_t)o * cin * kk;
      if (!accumulate) memset(wo, 0, (size_t)cin * kk * sizeof *wo);
      for (int c = 0; c < (sum ? cin : 1); c++) {
        const int32_t *win = winner + ((sum ? (size_t)c * cout : 0) + o) * q_total;
        float *wc = sum ? wo + (size_t)c * kk : wo;
#if defined(__AVX512F__)
        int taps = sum ? kk : cin * kk;
        if (taps <= 16) {
          /* The taps' sums in one register: a masked add per pixel changes
           * only the winner's lane, in the same order as the loop below,
           * without its store-to-load chain through wc. */
          __mmask16 live = (__mmask16)((1u << taps) - 1);
          __m512 acc = _mm512_maskz_loadu_ps(live, wc);
          for (int n = 0; n < s->batch; n++) {
            const float *g = dy + ((size_t)n * cout + o) * (size_t)pixels;
            const int32_t *wn = win + (size_t)n * pixels;
            for (int p = 0; p < pixels; p++)
              acc = _mm512_mask_add_ps(acc, (__mmask16)(1u << wn[p]), acc, _mm512_set1_ps(g[p]));
          }
          _mm512_mask_storeu_ps(wc, live, acc);
          continue;
        }
#endif
        for (int n = 0; n < s->batch; n++) {
          const float *g = dy + ((size_t)n * cout + o) * (size_t)pixels;
          const int32_t *wn = win + (size_t)n * pixels;
          for (int p = 0; p < pixels; p++) wc[wn[p]] += g[p];
        }
      }
    }
  }
  return 0;
}
