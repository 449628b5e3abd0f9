/* The dense tropical product (max-plus / min-plus) with winner indices,
 * blocked like a GEMM: w packed into panels of TROP_LANES outputs, register
 * tiles of TROP_MR rows x one panel, K blocks of TROP_KB, winners tracked
 * per chunk of TROP_CH candidates and resolved inside the chunk after the
 * tile (tropical.h says why); its backward
 * pass; and the per-thread scratch buffers of all tropical kernels. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kern/tropical.h"
#include "kern/tropical_simd.h"

#if defined(__AVX512F__)
#define TROP_MR 8 /* 8 rows x (best, winner) = 16 of 32 registers */
#else
#define TROP_MR 4 /* 4 x 2 of 16 registers, leaving room for panel, k, masks */
#endif
#define TROP_KB 256      /* a panel block of 256 x 16 floats is 16 KiB: L1 */
#define TROP_CH 8        /* candidates per winner chunk (divides TROP_KB) */
#define TROP_MB (8 * TROP_MR) /* rows per work unit: X block stays in L2 */

static _Thread_local void *scratch_ptr[TROP_SCRATCH_SLOTS];
static _Thread_local size_t scratch_size[TROP_SCRATCH_SLOTS];

void *tropical_scratch(int slot, size_t bytes) {
  if (bytes <= scratch_size[slot]) return scratch_ptr[slot];
  free(scratch_ptr[slot]);
  scratch_size[slot] = 0;
  size_t rounded = (bytes + 4095) & ~(size_t)4095;
  void *p = NULL;
  if (posix_memalign(&p, 4096, rounded)) p = NULL;
  scratch_ptr[slot] = p;
  if (!p) return NULL;
#ifdef MADV_HUGEPAGE
  if (rounded >= ((size_t)2 << 20)) madvise(p, rounded, MADV_HUGEPAGE);
#endif
  scratch_size[slot] = rounded;
  return p;
}

void tropical_scratch_release(void) {
  for (int s = 0; s < TROP_SCRATCH_SLOTS; s++) {
    free(scratch_ptr[s]);
    scratch_ptr[s] = NULL;
    scratch_size[s] = 0;
  }
}

const char *tropical_isa(void) { return TROP_ISA_NAME; }

/* packed[panel][kk][lane] = w[(panel L + lane) k + kk]; lanes past n are 0
 * (they are computed and never stored). */
static void pack_weights(float *packed, const float *w, int n, int k) {
  int panels = (n + TROP_LANES - 1) / TROP_LANES;
#pragma omp parallel for schedule(static) if ((size_t)n * (size_t)k > (1u << 16))
  for (int p = 0; p < panels; p++) {
    float *dst = packed + (size_t)p * (size_t)k * TROP_LANES;
    for (int lane = 0; lane < TROP_LANES; lane++) {
      int j = p * TROP_LANES + lane;
      if (j < n) {
        const float *src = w + (size_t)j * (size_t)k;
        for (int kk = 0; kk < k; kk++) dst[(size_t)kk * TROP_LANES + lane] = src[kk];
      } else {
        for (int kk = 0; kk < k; kk++) dst[(size_t)kk * TROP_LANES + lane] = 0.0f;
      }
    }
  }
}

/* One register tile, values only: rows xr[0..MR) against panel block wp
 * over k in [k0, k0 + kb), updating best. */
TROP_INLINE void matmul_tile_values(int is_min, const float *const *xr, const float *wp, int k0, int kb,
                                    tvec *best) {
  tvec b[TROP_MR];
#pragma GCC unroll 16
  for (int r = 0; r < TROP_MR; r++) b[r] = best[r];
  for (int kk = 0; kk < kb; kk++) {
    tvec wv = tv_load(wp + (size_t)kk * TROP_LANES);
#pragma GCC unroll 16
    for (int r = 0; r < TROP_MR; r++) b[r] = tv_best(is_min, tv_add(tv_set1(xr[r][k0 + kk]), wv), b[r]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < TROP_MR; r++) best[r] = b[r];
}

/* The best of candidates [c0, c0 + len) of each row, from the start value
 * (so a NaN candidate never enters, as in the value-only tile). */
TROP_INLINE void chunk_best(int is_min, const float *const *xr, const float *wp, int k0, int c0, int len, tvec start,
                            tvec *cm) {
#pragma GCC unroll 16
  for (int r = 0; r < TROP_MR; r++) cm[r] = start;
#pragma GCC unroll 8
  for (int kk = c0; kk < c0 + len; kk++) {
    tvec wv = tv_load(wp + (size_t)kk * TROP_LANES);
#pragma GCC unroll 16
    for (int r = 0; r < TROP_MR; r++) cm[r] = tv_best(is_min, tv_add(tv_set1(xr[r][k0 + kk]), wv), cm[r]);
  }
}

/* One register tile with winners. Tracking the winner of every candidate
 * costs a compare and two selects on top of the add and max; instead the
 * tile takes the plain best of each chunk of TROP_CH candidates and
 * records, per lane, only the first chunk whose best strictly beats the
 * running best (`win` holds that chunk's first k). matmul_unit finds the
 * winner inside that chunk afterwards (fix_winners): the first k whose
 * candidate equals the best, which is the strict first-index rule. */
TROP_INLINE void matmul_tile_winners(int is_min, const float *const *xr, const float *wp, int k0, int kb,
                                     tvec *best, tivec *win) {
  tvec b[TROP_MR], cm[TROP_MR];
  tivec wi[TROP_MR];
  tvec start = tv_set1(trop_start(is_min));
#pragma GCC unroll 16
  for (int r = 0; r < TROP_MR; r++) b[r] = best[r], wi[r] = win[r];
  for (int c0 = 0; c0 < kb; c0 += TROP_CH) {
    if (c0 + TROP_CH <= kb) chunk_best(is_min, xr, wp, k0, c0, TROP_CH, start, cm);
    else chunk_best(is_min, xr, wp, k0, c0, kb - c0, start, cm);
    tivec kv = ti_set1(k0 + c0);
#pragma GCC unroll 16
    for (int r = 0; r < TROP_MR; r++) {
      tmask m = tv_better(is_min, cm[r], b[r]);
      b[r] = tv_select(m, cm[r], b[r]);
      wi[r] = ti_select(m, kv, wi[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < TROP_MR; r++) best[r] = b[r], win[r] = wi[r];
}

/* winner[c] holds the first k of the chunk that won output j0 + c: the
 * winner is the first k of that chunk whose candidate equals the output's
 * best, recomputed from x and w (one row each, contiguous; their chunk is
 * TROP_CH = 8 floats, one masked 256-bit load). Where no candidate beat the
 * start value (best still +-inf, or every candidate NaN) the rule says 0. */
static void fix_winners(int is_min, const float *xrow, const float *w, int k, const float *best, int32_t *winner,
                        int j0, int cols) {
  float start = trop_start(is_min);
  for (int c = 0; c < cols; c++) {
    int32_t kf = winner[c], len = k - kf < TROP_CH ? k - kf : TROP_CH, found = 0;
    const float *xp = xrow + kf, *wp = w + (size_t)(j0 + c) * (size_t)k + kf;
#if defined(__AVX512F__) && defined(__AVX512VL__)
    __mmask8 valid = (__mmask8)((1u << len) - 1);
    __m256 cand = _mm256_add_ps(_mm256_maskz_loadu_ps(valid, xp), _mm256_maskz_loadu_ps(valid, wp));
    unsigned eq = _mm256_mask_cmp_ps_mask(valid, cand, _mm256_set1_ps(best[c]), _CMP_EQ_OQ);
    if (best[c] != start && eq) found = kf + __builtin_ctz(eq);
#elif defined(__AVX2__)
    __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(len), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 cand = _mm256_add_ps(_mm256_maskload_ps(xp, valid), _mm256_maskload_ps(wp, valid));
    unsigned eq = (unsigned)_mm256_movemask_ps(
        _mm256_and_ps(_mm256_cmp_ps(cand, _mm256_set1_ps(best[c]), _CMP_EQ_OQ), _mm256_castsi256_ps(valid)));
    if (best[c] != start && eq) found = kf + __builtin_ctz(eq);
#else
    for (int32_t t = 0; t < len && best[c] != start; t++)
      if (xp[t] + wp[t] == best[c]) {
        found = kf + t;
        break;
      }
#endif
    winner[c] = found;
  }
}

/* Work unit: rows [m0, m0 + TROP_MB) x panel p, all of K. */
TROP_INLINE void matmul_unit(int is_min, int with_winner, int m, int n, int k, const float *x, const float *w,
                             const float *packed, const float *bias, float *y, int32_t *winner, int m0, int p) {
  tvec best[TROP_MB];
  tivec win[TROP_MB];
  int rows = m - m0 < TROP_MB ? m - m0 : TROP_MB;
  int tiles = (rows + TROP_MR - 1) / TROP_MR;
  tvec start = tv_set1(trop_start(is_min));
  tivec zero = ti_set1(0);
  for (int t = 0; t < tiles * TROP_MR; t++) best[t] = start, win[t] = zero;
  const float *wpanel = packed + (size_t)p * (size_t)k * TROP_LANES;
  for (int k0 = 0; k0 < k; k0 += TROP_KB) {
    int kb = k - k0 < TROP_KB ? k - k0 : TROP_KB;
    for (int t = 0; t < tiles; t++) {
      const float *xr[TROP_MR];
      for (int r = 0; r < TROP_MR; r++) {
        int row = t * TROP_MR + r;
        if (row >= rows) row = rows - 1; /* tail rows repeat the last; never stored */
        xr[r] = x + (size_t)(m0 + row) * (size_t)k;
      }
      if (with_winner)
        matmul_tile_winners(is_min, xr, wpanel + (size_t)k0 * TROP_LANES, k0, kb, best + t * TROP_MR,
                            win + t * TROP_MR);
      else
        matmul_tile_values(is_min, xr, wpanel + (size_t)k0 * TROP_LANES, k0, kb, best + t * TROP_MR);
    }
  }
  int j0 = p * TROP_LANES, cols = n - j0 < TROP_LANES ? n - j0 : TROP_LANES;
  tvec bv = tv_set1(0.0f);
  if (bias) {
    float bl[TROP_LANES] = {0};
    memcpy(bl, bias + j0, (size_t)cols * sizeof *bl);
    bv = tv_load(bl);
  }
  if (with_winner) {
    /* The chunks fix_winners reads lie in w rows that left the cache. */
    for (int r = 0; r < rows; r++) {
      int32_t kf[TROP_LANES];
      ti_store(kf, win[r]);
      for (int c = 0; c < cols; c++) __builtin_prefetch(w + (size_t)(j0 + c) * (size_t)k + kf[c]);
    }
  }
  for (int r = 0; r < rows; r++) {
    tvec out = bias ? tv_add(best[r], bv) : best[r];
    tv_store_n(y + (size_t)(m0 + r) * (size_t)n + j0, out, cols);
    if (with_winner) {
      float raw[TROP_LANES];
      int32_t *wrow = winner + (size_t)(m0 + r) * (size_t)n + j0;
      tv_store(raw, best[r]);
      ti_store_n(wrow, win[r], cols);
      fix_winners(is_min, x + (size_t)(m0 + r) * (size_t)k, w, k, raw, wrow, j0, cols);
    }
  }
}

static void matmul_run(int is_min, int with_winner, int m, int n, int k, const float *x, const float *w,
                       const float *packed,
                       const float *bias, float *y, int32_t *winner) {
  int panels = (n + TROP_LANES - 1) / TROP_LANES;
  int mblocks = (m + TROP_MB - 1) / TROP_MB;
  long units = (long)panels * mblocks;
  double work = (double)m * n * k;
  /* Unit u covers panel u / mblocks: consecutive units of one thread share
   * their panel, so it stays in cache across row blocks. */
#pragma omp parallel for schedule(static) if (work > 2e5 && units > 1)
  for (long u = 0; u < units; u++) {
    int p = (int)(u / mblocks), mb = (int)(u % mblocks);
    if (is_min) {
      if (with_winner) matmul_unit(1, 1, m, n, k, x, w, packed, bias, y, winner, mb * TROP_MB, p);
      else matmul_unit(1, 0, m, n, k, x, w, packed, bias, y, winner, mb * TROP_MB, p);
    } else {
      if (with_winner) matmul_unit(0, 1, m, n, k, x, w, packed, bias, y, winner, mb * TROP_MB, p);
      else matmul_unit(0, 0, m, n, k, x, w, packed, bias, y, winner, mb * TROP_MB, p);
    }
  }
}

static int check_dims(const char *what, int m, int n, int k, Error *err) {
  if (m < 1 || n < 1 || k < 1)
    return error_set(err, ERR_ARG, "%s: m=%d n=%d k=%d, expected all >= 1", what, m, n, k);
  return 0;
}

int tropical_matmul_forward(TropicalSemiring semiring, int m, int n, int k, const float *x, const float *w,
                            const float *bias, float *y, int32_t *winner, Error *err) {
  int rc = check_dims("tropical_matmul_forward", m, n, k, err);
  if (rc) return rc;
  if (semiring != TROPICAL_MAX_PLUS && semiring != TROPICAL_MIN_PLUS)
    return error_set(err, ERR_ARG, "tropical_matmul_forward: semiring %d, expected max-plus (0) or min-plus (1)",
                     (int)semiring);
  int panels = (n + TROP_LANES - 1) / TROP_LANES;
  float *packed = tropical_scratch(TROP_SCRATCH_PACK, (size_t)panels * TROP_LANES * (size_t)k * sizeof(float));
  if (!packed) return error_set(err, ERR_NOMEM, "tropical_matmul_forward: out of memory packing w (%d x %d)", n, k);
  pack_weights(packed, w, n, k);
  matmul_run(semiring == TROPICAL_MIN_PLUS, winner != NULL, m, n, k, x, w, packed, bias, y, winner);
  return 0;
}

int tropical_matmul_backward(int m, int n, int k, const float *dy, const int32_t *winner, float *dx, float *dw,
                             float *dbias, int accumulate, Error *err) {
  int rc = check_dims("tropical_matmul_backward", m, n, k, err);
  if (rc) return rc;
  double work = (double)m * n;
  if (dx) {
    /* Row m of dx is owned by one thread and sums over ascending j. */
#pragma omp parallel for schedule(static) if (work > 3e4)
    for (int i = 0; i < m; i++) {
      float *row = dx + (size_t)i * (size_t)k;
      if (!accumulate) memset(row, 0, (size_t)k * sizeof *row);
      const float *g = dy + (size_t)i * (size_t)n;
      const int32_t *win = winner + (size_t)i * (size_t)n;
      for (int j = 0; j < n; j++) row[win[j]] += g[j];
    }
  }
  if (dw || dbias) {
    /* Rows of dw (and entries of dbias) owned by column blocks, each summed
     * over ascending m. */
    const int block = 64;
    int blocks = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (work > 3e4)
    for (int bi = 0; bi < blocks; bi++) {
      int j0 = bi * block, j1 = j0 + block < n ? j0 + block : n;
      if (dw && !accumulate) memset(dw + (size_t)j0 * (size_t)k, 0, (size_t)(j1 - j0) * (size_t)k * sizeof *dw);
      if (dbias && !accumulate) memset(dbias + j0, 0, (size_t)(j1 - j0) * sizeof *dbias);
      for (int i = 0; i < m; i++) {
        const float *g = dy + (size_t)i * (size_t)n;
        const int32_t *win = winner + (size_t)i * (size_t)n;
        if (dw)
          for (int j = j0; j < j1; j++) dw[(size_t)j * (size_t)k + win[j]] += g[j];
        if (dbias)
          for (int j = j0; j < j1; j++) dbias[j] += g[j];
      }
    }
  }
  return 0;
}
