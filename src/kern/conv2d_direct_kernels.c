/* The three vector kernels of the direct convolution (reduce, spread,
 * weights: kern/conv2d_direct.h says what each computes) over a small
 * vector vocabulary for AVX-512, AVX2 + FMA or plain floats, chosen when
 * the file is compiled (tests/kern builds it three ways).
 *
 * Register blocking: reduce and spread compute up to CV_T adjacent output
 * columns at once, so that each weight vector loaded serves CV_T
 * multiply-adds; weights keeps CV_T taps of one kernel row in registers
 * while it walks the image once, so each value it broadcasts (or each
 * vector it loads) serves CV_T taps. Blocks whose taps all fall inside
 * the image run without bounds checks; only the few columns at the
 * image's edges test each tap (column_block). The inner loops take their
 * sizes and strides as scalars and step pointers, so that nothing is
 * reloaded or multiplied per multiply-add.
 *
 * Sliding windows. Loads, not multiply-adds, bound these kernels (this
 * machine sustains well under one 512-bit load per FMA). Where a kernel
 * row has at most CV_KW_MAX taps one column apart (dilation 1, either
 * direction), the blocks inside the image keep a kernel row's weights (or
 * a block's values) in registers and load each input vector (or value)
 * once for all the taps that read it: 21 loads per 56 multiply-adds at 8
 * columns and 7 taps, where one pass per tap takes 63 (reduce and spread;
 * tried in `weights`, it ran slower). It changes the order of an output's
 * terms (channel groups outermost), which still depends only on the
 * output's position, not on the threads. Whole vectors of channels are
 * read with plain loads and only a last partial one with a masked load
 * (a masked load costs more than a plain one here: measured). */
#define CV_LOAD(p, m, masked) ((masked) ? cv_load((p), (m)) : cv_loadu(p))
#include <stdint.h>

#include "kern/conv2d_direct.h"

#define CV_INLINE static inline __attribute__((always_inline))
#define CV_T 8    /* output columns (reduce, spread) or taps (weights) per register block */
#define CV_KW_MAX 8 /* kernel widths up to this run the sliding windows (below) */

#if defined(__AVX512F__)
#include <immintrin.h>
#define CV_TS 8 /* columns per sliding-window block: 8 accumulators + 8 weights + 1 of 32 registers */
#define CV_LANES 16
#define CV_ISA "avx512"
typedef __m512 cvec;
typedef __mmask16 cmask;
CV_INLINE cmask cv_mask(int n) { return n >= 16 ? (cmask)0xFFFF : (cmask)((1u << n) - 1u); }
CV_INLINE cvec cv_load(const float *p, cmask m) { return _mm512_maskz_loadu_ps(m, p); }
CV_INLINE cvec cv_loadu(const float *p) { return _mm512_loadu_ps(p); }
CV_INLINE void cv_store(float *p, cvec v, cmask m) { _mm512_mask_storeu_ps(p, m, v); }
CV_INLINE cvec cv_set1(float x) { return _mm512_set1_ps(x); }
CV_INLINE cvec cv_zero(void) { return _mm512_setzero_ps(); }
CV_INLINE cvec cv_fma(cvec a, cvec b, cvec c) { return _mm512_fmadd_ps(a, b, c); }
CV_INLINE cvec cv_add(cvec a, cvec b) { return _mm512_add_ps(a, b); }
CV_INLINE float cv_hsum(cvec v) { return _mm512_reduce_add_ps(v); }
CV_INLINE cvec cv_relu(cvec v) { return _mm512_max_ps(v, _mm512_setzero_ps()); }
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define CV_TS 4 /* 4 accumulators + 8 weights + 1 of 16 registers */
#define CV_LANES 8
#define CV_ISA "avx2"
typedef __m256 cvec;
typedef __m256i cmask;
CV_INLINE cmask cv_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
CV_INLINE cvec cv_load(const float *p, cmask m) { return _mm256_maskload_ps(p, m); }
CV_INLINE cvec cv_loadu(const float *p) { return _mm256_loadu_ps(p); }
CV_INLINE void cv_store(float *p, cvec v, cmask m) { _mm256_maskstore_ps(p, m, v); }
CV_INLINE cvec cv_set1(float x) { return _mm256_set1_ps(x); }
CV_INLINE cvec cv_zero(void) { return _mm256_setzero_ps(); }
CV_INLINE cvec cv_fma(cvec a, cvec b, cvec c) { return _mm256_fmadd_ps(a, b, c); }
CV_INLINE cvec cv_add(cvec a, cvec b) { return _mm256_add_ps(a, b); }
CV_INLINE float cv_hsum(cvec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
CV_INLINE cvec cv_relu(cvec v) { return _mm256_max_ps(v, _mm256_setzero_ps()); }
#else
/* Plain floats: one lane, so a "chunk" is one channel. */
#define CV_TS 4
#define CV_LANES 1
#define CV_ISA "scalar"
typedef float cvec;
typedef int cmask;
CV_INLINE cmask cv_mask(int n) { return n > 0; }
CV_INLINE cvec cv_load(const float *p, cmask m) { return m ? *p : 0.0f; }
CV_INLINE cvec cv_loadu(const float *p) { return *p; }
CV_INLINE void cv_store(float *p, cvec v, cmask m) {
  if (m) *p = v;
}
CV_INLINE cvec cv_set1(float x) { return x; }
CV_INLINE cvec cv_zero(void) { return 0.0f; }
CV_INLINE cvec cv_fma(cvec a, cvec b, cvec c) { return a * b + c; }
CV_INLINE cvec cv_add(cvec a, cvec b) { return a + b; }
CV_INLINE float cv_hsum(cvec v) { return v; }
CV_INLINE cvec cv_relu(cvec v) { return v < 0.0f ? 0.0f : v; }
#endif

const char *conv2d_direct_isa(void) { return CV_ISA; }

static int chunks_of(int c) { return (c + CV_LANES - 1) / CV_LANES; }

/* Where chunk ch of a wide tensor's channels starts within a pixel (the
 * tensor keeps channels in groups of 16, s16 apart; DirectWide). */
static inline ptrdiff_t chunk_offset(ptrdiff_t s16, int ch) {
  int c0 = ch * CV_LANES;
  return (ptrdiff_t)(c0 / 16) * s16 + c0 % 16;
}

/* The smallest and largest column offset of taps b in [b0, b0 + bn). */
static void column_offsets(const DirectTaps *t, int b0, int bn, int *lo, int *hi) {
  int first = t->w0 + b0 * t->wd, last = t->w0 + (b0 + bn - 1) * t->wd;
  *lo = first < last ? first : last;
  *hi = first < last ? last : first;
}

/* The next block of output columns from q0 (of width out_w, reading a
 * tensor of width in_w at column offsets lo..hi): 8 or 4 columns whose
 * taps all fall inside (no checks), else 4 or 1 checked ones. Returns the
 * block kind: 0 fast 8, 1 fast 4, 2 checked 4, 3 checked 1. */
static int column_block(int q0, int out_w, int in_w, int lo, int hi) {
  int inside8 = q0 + 8 <= out_w && q0 + lo >= 0 && q0 + 7 + hi < in_w;
  int inside4 = q0 + 4 <= out_w && q0 + lo >= 0 && q0 + 3 + hi < in_w;
  return inside8 ? 0 : inside4 ? 1 : q0 + 4 <= out_w ? 2 : 3;
}
static const int kBlockWidth[4] = {8, 4, 4, 1};

/* The kernel width the sliding windows run at (taps one column apart, at
 * most CV_KW_MAX of them), or 0. */
static int slide_width(const DirectTaps *t) { return (t->wd == 1 || t->wd == -1) && t->kw <= CV_KW_MAX ? t->kw : 0; }

/* CALL(KW) with KW a constant equal to w (1..8), so that each kernel width
 * gets code with its loops unrolled and its window in registers. */
#define SLIDE_SWITCH(w, CALL) \
  switch (w) {                \
    case 1: CALL(1); break;   \
    case 2: CALL(2); break;   \
    case 3: CALL(3); break;   \
    case 4: CALL(4); break;   \
    case 5: CALL(5); break;   \
    case 6: CALL(6); break;   \
    case 7: CALL(7); break;   \
    default: CALL(8); break;  \
  }

/* ---- reduce ---- */

typedef struct ReduceArgs {
  const float *img; /* the wide input of this image */
  ptrdiff_t isy, isx, s16;
  int H, W, C, chunks, KH, KW, h0, hd, w0, wd;
} ReduceArgs;

/* One tap's chunk of channels for T output columns. */
CV_INLINE void reduce_chunk(cvec *acc, const float *row, ptrdiff_t isx, ptrdiff_t coff, const float *wv, int ch,
                            int C, int W, int x0, const int T, const int check, const int masked) {
  cmask m = cv_mask(C - ch * CV_LANES);
  cvec w = CV_LOAD(wv + ch * CV_LANES, m, masked);
  if (!check) {
    const float *src = row + x0 * isx + coff;
#pragma GCC unroll 8
    for (int i = 0; i < T; i++, src += isx) acc[i] = cv_fma(CV_LOAD(src, m, masked), w, acc[i]);
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < T; i++)
      if ((unsigned)(x0 + i) < (unsigned)W) acc[i] = cv_fma(CV_LOAD(row + (x0 + i) * isx + coff, m, masked), w, acc[i]);
  }
}

/* One kernel row's contribution to T interior columns through a sliding
 * window (KW taps, wd = +1 or -1): window column u is read by tap b of
 * output t where u = t + b (wd = 1) or u = t + KW - 1 - b (wd = -1), so
 * wv[j] holds the weights of the tap at window offset j. */
CV_INLINE void reduce_slide(cvec *acc, const float *row, ptrdiff_t isx, ptrdiff_t s16, const float *wrow, int C,
                            int chunks, int first, int wd, const int T, const int KW) {
  for (int ch = 0; ch < chunks; ch++) {
    const int masked = C - ch * CV_LANES < CV_LANES;
    cmask m = cv_mask(C - ch * CV_LANES);
    cvec wv[CV_KW_MAX];
#pragma GCC unroll 8
    for (int j = 0; j < KW; j++) wv[j] = CV_LOAD(wrow + (size_t)(wd > 0 ? j : KW - 1 - j) * C + ch * CV_LANES, m, masked);
    const float *src = row + first * isx + chunk_offset(s16, ch);
#pragma GCC unroll 16
    for (int u = 0; u < T + KW - 1; u++, src += isx) {
      cvec v = CV_LOAD(src, m, masked);
#pragma GCC unroll 8
      for (int j = 0; j < KW; j++)
        if (u - j >= 0 && u - j < T) acc[u - j] = cv_fma(v, wv[j], acc[u - j]);
    }
  }
}

/* Columns q0 .. q0 + T - 1 of output row p of one narrow channel (weights
 * wk); slide = KW runs reduce_slide (interior blocks, check 0), 0 the taps
 * one by one. */
CV_INLINE void reduce_block(float *out, ptrdiff_t osx, const ReduceArgs *r, const float *wk, int p, int q0,
                            const int T, const int check, const int slide, float init, int accumulate, int relu) {
  const float *img = r->img;
  const ptrdiff_t isy = r->isy, isx = r->isx, s16 = r->s16;
  const int H = r->H, W = r->W, C = r->C, chunks = r->chunks, KH = r->KH, KW = r->KW;
  const int h0 = r->h0, hd = r->hd, w0 = r->w0, wd = r->wd;
  cvec acc[CV_T];
#pragma GCC unroll 8
  for (int i = 0; i < T; i++) acc[i] = cv_zero();
  for (int a = 0; a < KH; a++) {
    int y = p + h0 + a * hd;
    if ((unsigned)y >= (unsigned)H) continue;
    const float *row = img + y * isy, *wrow = wk + (size_t)a * KW * C;
    if (slide) {
      reduce_slide(acc, row, isx, s16, wrow, C, chunks, q0 + w0 + (wd > 0 ? 0 : -(slide - 1)), wd, T, slide);
      continue;
    }
    for (int b = 0; b < KW; b++) {
      int x0 = q0 + w0 + b * wd;
      const float *wv = wrow + (size_t)b * C;
      for (int ch = 0; ch < chunks; ch++) {
        ptrdiff_t coff = chunk_offset(s16, ch);
        if (C - ch * CV_LANES >= CV_LANES)
          reduce_chunk(acc, row, isx, coff, wv, ch, C, W, x0, T, check, 0);
        else
          reduce_chunk(acc, row, isx, coff, wv, ch, C, W, x0, T, check, 1);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < T; i++) {
    float v = init + cv_hsum(acc[i]);
    float *o = out + i * osx;
    v = accumulate ? *o + v : v;
    *o = relu && v < 0.0f ? 0.0f : v;
  }
}

void conv2d_direct_reduce(const DirectNarrow *out, const DirectWide *in, const float *weight, const float *bias,
                          const DirectTaps *t, int batch, int accumulate, int relu) {
  int lo, hi, rows = batch * out->h, out_h = out->h, out_w = out->w, K = out->k;
  const ptrdiff_t osn = out->sn, osk = out->sk, osy = out->sy, osx = out->sx;
  const int slide = slide_width(t);
  column_offsets(t, 0, t->kw, &lo, &hi);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    int n = r / out_h, p = r % out_h;
    ReduceArgs ra = {in->p + n * in->sn, in->sy, in->sx, in->s16, in->h, in->w, in->c, chunks_of(in->c),
                     t->kh, t->kw, t->h0, t->hd, t->w0, t->wd};
    for (int k = 0; k < K; k++) {
      float *orow = out->p + n * osn + k * osk + p * osy;
      const float *wk = weight + (size_t)k * t->kh * t->kw * in->c;
      float init = bias ? bias[k] : 0.0f;
      for (int q0 = 0, kind; q0 < out_w; q0 += kBlockWidth[kind]) {
        kind = column_block(q0, out_w, ra.W, lo, hi);
        float *o = orow + q0 * osx;
        if (kind == 0 && slide) {
          /* interior: sliding windows of CV_TS columns (every case a constant kernel width) */
          for (int h = 0; h < 8; h += CV_TS) {
#define REDUCE_SLIDE(KW) reduce_block(o + h * osx, osx, &ra, wk, p, q0 + h, CV_TS, 0, KW, init, accumulate, relu)
            SLIDE_SWITCH(slide, REDUCE_SLIDE);
#undef REDUCE_SLIDE
          }
        } else if (kind == 1 && slide) {
#define REDUCE_SLIDE4(KW) reduce_block(o, osx, &ra, wk, p, q0, 4, 0, KW, init, accumulate, relu)
          SLIDE_SWITCH(slide, REDUCE_SLIDE4);
#undef REDUCE_SLIDE4
        } else if (kind == 0) {
          reduce_block(o, osx, &ra, wk, p, q0, 8, 0, 0, init, accumulate, relu);
        } else if (kind == 1) {
          reduce_block(o, osx, &ra, wk, p, q0, 4, 0, 0, init, accumulate, relu);
        } else if (kind == 2) {
          reduce_block(o, osx, &ra, wk, p, q0, 4, 1, 0, init, accumulate, relu);
        } else {
          reduce_block(o, osx, &ra, wk, p, q0, 1, 1, 0, init, accumulate, relu);
        }
      }
    }
  }
}

/* ---- spread ---- */

typedef struct SpreadArgs {
  const float *img; /* the narrow input of this image */
  ptrdiff_t isk, isy, isx, os16;
  int H, W, K, C, KH, KW, h0, hd, w0, wd;
  const float *weight, *bias;
} SpreadArgs;

/* Columns q0 .. q0 + T - 1 of output row p, all wide channels; slide =
 * KW: each kernel row through a sliding window (interior blocks, check 0:
 * the window's values broadcast once for every tap that reads them, the
 * row's weights in registers; the same pairing as reduce_slide). */
CV_INLINE void spread_block(float *out, ptrdiff_t osx, const SpreadArgs *r, int p, int q0, const int T,
                            const int check, const int slide, int accumulate, int relu) {
  const float *img = r->img, *weight = r->weight, *bias = r->bias;
  const ptrdiff_t isk = r->isk, isy = r->isy, isx = r->isx;
  const int H = r->H, W = r->W, K = r->K, C = r->C, KH = r->KH, KW = r->KW;
  const int h0 = r->h0, hd = r->hd, w0 = r->w0, wd = r->wd;
  for (int ch = 0, chunks = chunks_of(C); ch < chunks; ch++) {
    cmask m = cv_mask(C - ch * CV_LANES);
    const int full = C - ch * CV_LANES >= CV_LANES;
    const ptrdiff_t coff = chunk_offset(r->os16, ch);
    cvec acc[CV_T];
#pragma GCC unroll 8
    for (int i = 0; i < T; i++) acc[i] = cv_zero();
    for (int k = 0; k < K; k++)
      for (int a = 0; a < KH; a++) {
        int y = p + h0 + a * hd;
        if ((unsigned)y >= (unsigned)H) continue;
        const float *row = img + k * isk + y * isy;
        const float *wrow = weight + ((size_t)k * KH + a) * KW * C + ch * CV_LANES;
        if (slide) {
          cvec wv[CV_KW_MAX];
#pragma GCC unroll 8
          for (int j = 0; j < slide; j++) {
            const float *wp = wrow + (size_t)(wd > 0 ? j : slide - 1 - j) * C;
            wv[j] = full ? cv_loadu(wp) : cv_load(wp, m);
          }
          const float *src = row + (q0 + w0 + (wd > 0 ? 0 : -(slide - 1))) * isx;
#pragma GCC unroll 16
          for (int u = 0; u < T + slide - 1; u++, src += isx) {
            cvec v = cv_set1(*src);
#pragma GCC unroll 8
            for (int j = 0; j < slide; j++)
              if (u - j >= 0 && u - j < T) acc[u - j] = cv_fma(v, wv[j], acc[u - j]);
          }
          continue;
        }
        for (int b = 0; b < KW; b++) {
          int x0 = q0 + w0 + b * wd;
          cvec w = full ? cv_loadu(wrow + (size_t)b * C) : cv_load(wrow + (size_t)b * C, m);
          if (!check) {
            const float *src = row + x0 * isx;
#pragma GCC unroll 8
            for (int i = 0; i < T; i++, src += isx) acc[i] = cv_fma(cv_set1(*src), w, acc[i]);
          } else {
#pragma GCC unroll 8
            for (int i = 0; i < T; i++)
              if ((unsigned)(x0 + i) < (unsigned)W) acc[i] = cv_fma(cv_set1(row[(x0 + i) * isx]), w, acc[i]);
          }
        }
      }
    cvec bv = bias ? cv_load(bias + ch * CV_LANES, m) : cv_zero();
#pragma GCC unroll 8
    for (int i = 0; i < T; i++) {
      float *o = out + i * osx + coff;
      cvec v = bias ? cv_add(acc[i], bv) : acc[i];
      if (accumulate) v = cv_add(cv_load(o, m), v);
      if (relu) v = cv_relu(v);
      cv_store(o, v, m);
    }
  }
}

void conv2d_direct_spread(const DirectWide *out, const DirectNarrow *in, const float *weight, const float *bias,
                          const DirectTaps *t, int batch, int accumulate, int relu) {
  int lo, hi, rows = batch * out->h, out_h = out->h, out_w = out->w;
  const ptrdiff_t osn = out->sn, osy = out->sy, osx = out->sx;
  const int slide = slide_width(t);
  column_offsets(t, 0, t->kw, &lo, &hi);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    int n = r / out_h, p = r % out_h;
    SpreadArgs sa = {in->p + n * in->sn, in->sk, in->sy, in->sx, out->s16, in->h, in->w, in->k, out->c,
                     t->kh, t->kw, t->h0, t->hd, t->w0, t->wd, weight, bias};
    float *orow = out->p + n * osn + p * osy;
    for (int q0 = 0, kind; q0 < out_w; q0 += kBlockWidth[kind]) {
      kind = column_block(q0, out_w, sa.W, lo, hi);
      float *o = orow + q0 * osx;
      if (kind == 0 && slide) {
        for (int h = 0; h < 8; h += CV_TS) {
#define SPREAD_SLIDE(KW) spread_block(o + h * osx, osx, &sa, p, q0 + h, CV_TS, 0, KW, accumulate, relu)
          SLIDE_SWITCH(slide, SPREAD_SLIDE);
#undef SPREAD_SLIDE
        }
      } else if (kind == 1 && slide) {
#define SPREAD_SLIDE4(KW) spread_block(o, osx, &sa, p, q0, 4, 0, KW, accumulate, relu)
        SLIDE_SWITCH(slide, SPREAD_SLIDE4);
#undef SPREAD_SLIDE4
      } else if (kind == 0) {
        spread_block(o, osx, &sa, p, q0, 8, 0, 0, accumulate, relu);
      } else if (kind == 1) {
        spread_block(o, osx, &sa, p, q0, 4, 0, 0, accumulate, relu);
      } else if (kind == 2) {
        spread_block(o, osx, &sa, p, q0, 4, 1, 0, accumulate, relu);
      } else {
        spread_block(o, osx, &sa, p, q0, 1, 1, 0, accumulate, relu);
      }
    }
  }
}

/* ---- weights ---- */

/* Columns j0 .. j1 - 1 of one row pair into acc[bt] (taps b0 + bt, bt <
 * bn). nrow and wrow are the rows of the narrow and the wide tensor (wrow
 * already at the chunk); the one that shift_narrow names is read at the
 * tap's column offset, which is w0 + b wd columns. */
CV_INLINE void weights_columns(cvec *acc, const float *nrow, ptrdiff_t nsx, const float *wrow, ptrdiff_t wsx,
                               cmask m, int first, int wd, int bn, int shifted_w, int j0, int j1,
                               const int shift_narrow, const int check, const int masked) {
  if (shift_narrow) {
    const ptrdiff_t step = (ptrdiff_t)wd * nsx;
    for (int j = j0; j < j1; j++) {
      cvec v = CV_LOAD(wrow + j * wsx, m, masked);
      if (!check) {
        const float *src = nrow + (j + first) * nsx;
#pragma GCC unroll 8
        for (int bt = 0; bt < CV_T; bt++, src += step)
          if (bt < bn) acc[bt] = cv_fma(cv_set1(*src), v, acc[bt]);
      } else {
#pragma GCC unroll 8
        for (int bt = 0; bt < CV_T; bt++) {
          int x = j + first + bt * wd;
          if (bt < bn && (unsigned)x < (unsigned)shifted_w) acc[bt] = cv_fma(cv_set1(nrow[x * nsx]), v, acc[bt]);
        }
      }
    }
  } else {
    const ptrdiff_t step = (ptrdiff_t)wd * wsx;
    for (int j = j0; j < j1; j++) {
      cvec s = cv_set1(nrow[j * nsx]);
      if (!check) {
        const float *src = wrow + (j + first) * wsx;
#pragma GCC unroll 8
        for (int bt = 0; bt < CV_T; bt++, src += step)
          if (bt < bn) acc[bt] = cv_fma(s, CV_LOAD(src, m, masked), acc[bt]);
      } else {
#pragma GCC unroll 8
        for (int bt = 0; bt < CV_T; bt++) {
          int x = j + first + bt * wd;
          if (bt < bn && (unsigned)x < (unsigned)shifted_w)
            acc[bt] = cv_fma(s, CV_LOAD(wrow + x * wsx, m, masked), acc[bt]);
        }
      }
    }
  }
}

/* One row pair, all columns: those whose taps all fall inside the shifted
 * tensor without checks. Each row's sum is kept apart and added to the
 * total afterwards (a sum of row sums loses less than one long sum). The
 * sliding windows of reduce and spread did not pay here (measured slower:
 * the compiler kept the row sums in memory). */
CV_INLINE void weights_row(cvec *total, const float *nrow, ptrdiff_t nsx, const float *wrow, ptrdiff_t wsx, cmask m,
                           int first, int wd, int bn, int width, int shifted_w, int jlo, int jhi,
                           const int shift_narrow, const int masked) {
  cvec acc[CV_T];
#pragma GCC unroll 8
  for (int bt = 0; bt < CV_T; bt++) acc[bt] = cv_zero();
  weights_columns(acc, nrow, nsx, wrow, wsx, m, first, wd, bn, shifted_w, 0, jlo, shift_narrow, 1, masked);
  weights_columns(acc, nrow, nsx, wrow, wsx, m, first, wd, bn, shifted_w, jlo, jhi, shift_narrow, 0, masked);
  weights_columns(acc, nrow, nsx, wrow, wsx, m, first, wd, bn, shifted_w, jhi, width, shift_narrow, 1, masked);
#pragma GCC unroll 8
  for (int bt = 0; bt < CV_T; bt++) total[bt] = cv_add(total[bt], acc[bt]);
}

void conv2d_direct_weights(float *dweight, const DirectNarrow *narrow, const DirectWide *wide, const DirectTaps *t,
                           int batch, int shift_narrow) {
  const int C = wide->c, chunks = chunks_of(C), tap_blocks = (t->kw + CV_T - 1) / CV_T;
  /* the unshifted tensor's size (the positions summed over) and the shifted one's */
  const int uh = shift_narrow ? wide->h : narrow->h, uw = shift_narrow ? wide->w : narrow->w;
  const int sh = shift_narrow ? narrow->h : wide->h, sw = shift_narrow ? narrow->w : wide->w;
  const int tasks = narrow->k * t->kh * chunks * tap_blocks;
  const ptrdiff_t nsn = narrow->sn, nsk = narrow->sk, nsy = narrow->sy, nsx = narrow->sx;
  const ptrdiff_t wsn = wide->sn, wsy = wide->sy, wsx = wide->sx;
#pragma omp parallel for schedule(static)
  for (int task = 0; task < tasks; task++) {
    int tb = task % tap_blocks, ch = task / tap_blocks % chunks, a = task / tap_blocks / chunks % t->kh;
    int k = task / tap_blocks / chunks / t->kh;
    int b0 = tb * CV_T, bn = t->kw - b0 < CV_T ? t->kw - b0 : CV_T;
    int lo, hi, first = t->w0 + b0 * t->wd;
    column_offsets(t, b0, bn, &lo, &hi);
    /* columns j with j + lo >= 0 and j + hi < sw need no check */
    int jlo = -lo < 0 ? 0 : -lo < uw ? -lo : uw;
    int jhi = sw - hi < jlo ? jlo : sw - hi < uw ? sw - hi : uw;
    cmask m = cv_mask(C - ch * CV_LANES);
    cvec total[CV_T];
    for (int bt = 0; bt < CV_T; bt++) total[bt] = cv_zero();
    for (int n = 0; n < batch; n++)
      for (int i = 0; i < uh; i++) {
        int y = i + t->h0 + a * t->hd;
        if ((unsigned)y >= (unsigned)sh) continue;
        const float *nrow = narrow->p + n * nsn + k * nsk + (shift_narrow ? y : i) * nsy;
        const float *wrow = wide->p + n * wsn + (shift_narrow ? i : y) * wsy + chunk_offset(wide->s16, ch);
        int masked = C - ch * CV_LANES < CV_LANES;
        if (shift_narrow && !masked)
          weights_row(total, nrow, nsx, wrow, wsx, m, first, t->wd, bn, uw, sw, jlo, jhi, 1, 0);
        else if (shift_narrow)
          weights_row(total, nrow, nsx, wrow, wsx, m, first, t->wd, bn, uw, sw, jlo, jhi, 1, 1);
        else if (!masked)
          weights_row(total, nrow, nsx, wrow, wsx, m, first, t->wd, bn, uw, sw, jlo, jhi, 0, 0);
        else
          weights_row(total, nrow, nsx, wrow, wsx, m, first, t->wd, bn, uw, sw, jlo, jhi, 0, 1);
      }
    for (int bt = 0; bt < bn; bt++)
      cv_store(dweight + (((size_t)k * t->kh + a) * t->kw + b0 + bt) * C + ch * CV_LANES, total[bt], m);
  }
}
