/* Causal grouped-query flash attention (contract in attention.h).
 *
 * Both passes walk query tiles against key tiles and never hold more than one
 * TILE_Q x TILE_K block of scores. The forward keeps a running max and sum per
 * query row (online softmax) and rescales its output accumulator when the max
 * grows; the backward recomputes P = exp(S*scale - lse) per tile and forms
 * dV, dP, dS, dQ, dK from it (FlashAttention-2 order: key tiles outside, so
 * dK/dV of a tile accumulate in per-thread scratch).
 *
 * Work split: the forward runs one (batch, query head, query tile) per work
 * item, head-major so a head's K/V stay in cache across its query tiles; the
 * backward runs one (batch, kv head) per item and loops over the group's
 * query heads inside, so the dK/dV sums over a GQA group and the dQ rows of
 * a head are each written by a single thread (no atomics, no partials).
 *
 * Tile products use a register-blocked AVX2/FMA micro-kernel (6 x 16
 * outputs; a transposed A operand is just swapped strides) in fp32 runs,
 * attention_bf16.c's vdpbf16ps kernel in bf16 runs. Measured single
 * threaded at the bench shapes it was 15-20% faster end to end than
 * cblas_sgemm per tile: OpenBLAS packs both operands on every call, which
 * 64 x 64 x 64 products cannot amortise. Operand tiles whose rows lie far
 * apart in the [B, T, H, D] layout are first copied contiguous.
 *
 * Positions: every routine takes query and key positions (NULL = 0..n-1) so
 * the same code serves a rank that holds only part of a sequence (context
 * parallelism). Positions must be non-decreasing; key j is visible from query
 * i iff kpos[j] <= qpos[i]. */
#include "kern/attention.h"
#include "kern/attention_internal.h"
#include "kern/precision.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ATTN_AVX2 1
#endif

/* 64 x 64 tiles: S, P, dS and the transposed K/V tiles of one thread stay
 * well inside L2 for D up to 256, and 64 rows keep the micro-kernel busy. */
enum { TILE_Q = 64, TILE_K = 64 };

typedef struct AttnShape {
  int B, Tq, Tk, Hq, Hkv, D;
  const int *qpos, *kpos; /* NULL: position i is i */
} AttnShape;

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int pos_at(const int *pos, int i) { return pos ? pos[i] : i; }

/* How many leading keys of the tile [k0, k0 + bk) query position qp sees:
 * positions are non-decreasing, so the visible keys form a prefix. */
static int visible_keys(const int *kpos, int k0, int bk, int qp) {
  if (!kpos) {
    int n = qp - k0 + 1;
    return n < 0 ? 0 : n > bk ? bk : n;
  }
  int lo = 0, hi = bk; /* first c with kpos[k0 + c] > qp */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (kpos[k0 + mid] <= qp)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Scratch for one call: every worker thread's tiles plus, in the backward,
 * the per-row deltas. Kept between calls by the calling thread and only
 * grown, so steady-state training allocates nothing here and never pays
 * first-touch page faults again. Aborting is the only option on failure:
 * the API has no error path, and a few hundred KiB failing means the process
 * is already lost. */
static _Thread_local float *scratch_cache;
static _Thread_local size_t scratch_cache_floats;

static float *scratch_get(size_t floats, const char *who) {
  if (floats <= scratch_cache_floats) return scratch_cache;
  const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
  free(scratch_cache);
  scratch_cache = aligned_alloc(64, bytes);
  if (!scratch_cache) {
    fprintf(stderr, "%s: cannot allocate %zu bytes of attention scratch\n", who, bytes);
    abort();
  }
  scratch_cache_floats = bytes / sizeof(float);
  return scratch_cache;
}

/* Threads for one call: a tiny problem (decode-sized, or a test) finishes
 * before a parallel region would have started, so it stays on the caller.
 * The cut is ~1M multiply-adds in Q K^T. */
static int worker_threads(const AttnShape *s) {
  const double work = (double)s->B * s->Hq * s->Tq * (double)s->Tk * s->D;
  return work < (1 << 20) ? 1 : omp_get_max_threads();
}

/* Rounds a per-thread float count up to whole cache lines so threads never
 * share one. */
static size_t pad_floats(size_t n) { return (n + 15) / 16 * 16; }

/* ---------------------------------------------------------------------------
 * Tile products: C[m, n] (+)= A[m, k] * B[k, n] with A(i, p) = a[i*rsa + p*csa]
 * (so transposed A is just swapped strides), B rows at b + p*ldb (contiguous
 * along n) and C rows at c + i*ldc. */
#ifdef ATTN_AVX2

static inline __m256i tail_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* One mr x (8*nv) block, fully in registers over the whole k loop. mr, nv and
 * tail are constants at every call site, so the `mr > r` tests vanish; the
 * accumulators are named variables rather than an array because GCC kept an
 * array in memory and stored it back on every k step (measured: 2x slower).
 * `tail` masks the last vector of the row. */
#define ACC_DECL(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
#define ACC_FMA(r)                                               \
  if (mr > r) {                                                  \
    const __m256 av = _mm256_broadcast_ss(a + r * rsa);          \
    c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                  \
    if (nv == 2) c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);     \
  }
#define ACC_STORE(r) \
  if (mr > r) store_row(c + r * ldc, c##r##0, c##r##1, nv, tail, accumulate, mask);

static inline __attribute__((always_inline)) void store_row(float *cr, __m256 v0, __m256 v1, int nv, int tail,
                                                            int accumulate, __m256i mask) {
  if (nv == 1) {
    if (tail) {
      if (accumulate) v0 = _mm256_add_ps(v0, _mm256_maskload_ps(cr, mask));
      _mm256_maskstore_ps(cr, mask, v0);
    } else {
      if (accumulate) v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cr));
      _mm256_storeu_ps(cr, v0);
    }
    return;
  }
  if (accumulate) v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cr));
  _mm256_storeu_ps(cr, v0);
  if (tail) {
    if (accumulate) v1 = _mm256_add_ps(v1, _mm256_maskload_ps(cr + 8, mask));
    _mm256_maskstore_ps(cr + 8, mask, v1);
  } else {
    if (accumulate) v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cr + 8));
    _mm256_storeu_ps(cr + 8, v1);
  }
}

static inline __attribute__((always_inline)) void gemm_block(int mr, int nv, int tail, int k, const float *a,
                                                             long rsa, long csa, const float *b, long ldb,
                                                             float *c, long ldc, int accumulate, __m256i mask) {
  ACC_DECL(0) ACC_DECL(1) ACC_DECL(2) ACC_DECL(3) ACC_DECL(4) ACC_DECL(5)
#pragma GCC unroll 4 /* loop overhead is visible at k = 64 (~10%) */
  for (int p = 0; p < k; p++) {
    __m256 b0, b1 = _mm256_setzero_ps();
    if (nv == 1) {
      b0 = tail ? _mm256_maskload_ps(b, mask) : _mm256_loadu_ps(b);
    } else {
      b0 = _mm256_loadu_ps(b);
      b1 = tail ? _mm256_maskload_ps(b + 8, mask) : _mm256_loadu_ps(b + 8);
    }
    ACC_FMA(0) ACC_FMA(1) ACC_FMA(2) ACC_FMA(3) ACC_FMA(4) ACC_FMA(5)
    a += csa;
    b += ldb;
  }
  ACC_STORE(0) ACC_STORE(1) ACC_STORE(2) ACC_STORE(3) ACC_STORE(4) ACC_STORE(5)
}
#undef ACC_DECL
#undef ACC_FMA
#undef ACC_STORE

#define GEMM_BLOCK_ROWS(NV, TAIL)                                                       \
  switch (mr) {                                                                         \
  case 6: gemm_block(6, NV, TAIL, k, a, rsa, csa, b, ldb, c, ldc, accumulate, mask); break; \
  case 5: gemm_block(5, NV, TAIL, k, a, rsa, csa, b, ldb, c, ldc, accumulate, mask); break; \
  case 4: gemm_block(4, NV, TAIL, k, a, rsa, csa, b, ldb, c, ldc, accumulate, mask); break; \
  case 3: gemm_block(3, NV, TAIL, k, a, rsa, csa, b, ldb, c, ldc, accumulate, mask); break; \
  case 2: gemm_block(2, NV, TAIL, k, a, rsa, csa, b, ldb, c, ldc, accumulate, mask); break; \
  default: gemm_block(1, NV, TAIL, k, a, rsa, csa, b, ldb, c, ldc, accumulate, mask); break; \
  }

/* All 24 specialisations live here once; noinline keeps them from being
 * copied into every tile_gemm call site. */
__attribute__((noinline)) static void gemm_block_any(int mr, int nw, int k, const float *a, long rsa, long csa,
                                                     const float *b, long ldb, float *c, long ldc, int accumulate) {
  __m256i mask = tail_mask(nw > 8 ? nw - 8 : nw);
  if (nw == 16) {
    GEMM_BLOCK_ROWS(2, 0)
  } else if (nw > 8) {
    GEMM_BLOCK_ROWS(2, 1)
  } else if (nw == 8) {
    GEMM_BLOCK_ROWS(1, 0)
  } else {
    GEMM_BLOCK_ROWS(1, 1)
  }
}
#undef GEMM_BLOCK_ROWS

static void tile_gemm_fp32(int m, int n, int k, const float *a, long rsa, long csa, const float *b, long ldb, float *c,
                      long ldc, int accumulate) {
  /* Column panels outside: a k x 16 panel of B stays in L1 while every row
   * block of A streams past it. */
  for (int j = 0; j < n; j += 16) {
    int nw = imin(16, n - j);
    for (int i = 0; i < m; i += 6)
      gemm_block_any(imin(6, m - i), nw, k, a + i * rsa, rsa, csa, b + j, ldb, c + i * ldc + j, ldc,
                     accumulate);
  }
}

#else /* portable fallback */

static void tile_gemm_fp32(int m, int n, int k, const float *a, long rsa, long csa, const float *b, long ldb, float *c,
                      long ldc, int accumulate) {
  for (int i = 0; i < m; i++) {
    float *cr = c + i * ldc;
    if (!accumulate)
      for (int j = 0; j < n; j++) cr[j] = 0.0f;
    for (int p = 0; p < k; p++) {
      float av = a[i * rsa + p * csa];
      const float *br = b + p * ldb;
      for (int j = 0; j < n; j++) cr[j] += av * br[j];
    }
  }
}
#endif

/* The two matmuls run in the process-wide precision: bf16 inputs with fp32
 * sums (attention_bf16.c) in a bf16 run, the fp32 kernel above otherwise.
 * The softmax pieces below are fp32 in both. */
static void tile_gemm(int m, int n, int k, const float *a, long rsa, long csa, const float *b, long ldb, float *c,
                      long ldc, int accumulate) {
  if (kern_precision() == KERN_PRECISION_BF16)
    attn_tile_gemm_bf16(m, n, k, a, rsa, csa, b, ldb, c, ldc, accumulate);
  else
    tile_gemm_fp32(m, n, k, a, rsa, csa, b, ldb, c, ldc, accumulate);
}

/* ---------------------------------------------------------------------------
 * Row helpers for the softmax pieces. */
#ifdef ATTN_AVX2
/* exp on 8 lanes: Cody-Waite reduction to |r| <= ln2/2 and a degree-7 Taylor
 * polynomial (truncation below 1e-8 relative). Inputs below -87 (including
 * -inf) give exactly 0, so masked or negligible weights are true zeros. */
static inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  __m256 zero_lanes = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606820309417e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(zero_lanes, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

static float row_max(const float *x, int n) {
  float m = -INFINITY;
  int j = 0;
#ifdef ATTN_AVX2
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(x);
    for (j = 8; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + j));
    m = hmax8(vm);
  }
#endif
  for (; j < n; j++) m = fmaxf(m, x[j]);
  return m;
}

/* x[j] = exp(x[j]*scale - shift) for j < n; returns the sum. */
static float row_exp(float *x, int n, float scale, float shift) {
  float sum = 0.0f;
  int j = 0;
#ifdef ATTN_AVX2
  __m256 vs = _mm256_set1_ps(scale), vsh = _mm256_set1_ps(shift), acc = _mm256_setzero_ps();
  for (; j + 8 <= n; j += 8) {
    __m256 e = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(x + j), vs, vsh));
    _mm256_storeu_ps(x + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  sum = hsum8(acc);
#endif
  for (; j < n; j++) {
    x[j] = expf(fmaf(x[j], scale, -shift));
    sum += x[j];
  }
  return sum;
}

static float row_dot(const float *x, const float *y, int n) {
  float s = 0.0f;
  int j = 0;
#ifdef ATTN_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; j + 8 <= n; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(y + j), acc);
  s = hsum8(acc);
#endif
  for (; j < n; j++) s += x[j] * y[j];
  return s;
}

/* ds[j] = p[j] * (ds[j] - delta) * scale, where ds holds dP on entry. */
static void row_dsoftmax(float *ds, const float *p, int n, float delta, float scale) {
  int j = 0;
#ifdef ATTN_AVX2
  __m256 vd = _mm256_set1_ps(delta), vs = _mm256_set1_ps(scale);
  for (; j + 8 <= n; j += 8) {
    __m256 t = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(ds + j), vd), vs);
    _mm256_storeu_ps(ds + j, _mm256_mul_ps(t, _mm256_loadu_ps(p + j)));
  }
#endif
  for (; j < n; j++) ds[j] = p[j] * ((ds[j] - delta) * scale);
}

/* dst[n, D] (rows D apart) = n rows of src lying ld apart. */
static void copy_rows(float *dst, const float *src, long ld, int n, int D) {
  for (int r = 0; r < n; r++) {
    const float *in = src + r * ld;
    float *o = dst + (size_t)r * D;
    int d = 0;
#ifdef ATTN_AVX2
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(o + d, _mm256_loadu_ps(in + d));
#endif
    for (; d < D; d++) o[d] = in[d];
  }
}

#ifdef ATTN_AVX2
/* dst rows i = columns i of the 8 x 8 block at src. */
static inline void transpose8x8(const float *src, long lds, float *dst, long ldd) {
  __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds), r2 = _mm256_loadu_ps(src + 2 * lds),
         r3 = _mm256_loadu_ps(src + 3 * lds), r4 = _mm256_loadu_ps(src + 4 * lds),
         r5 = _mm256_loadu_ps(src + 5 * lds), r6 = _mm256_loadu_ps(src + 6 * lds),
         r7 = _mm256_loadu_ps(src + 7 * lds);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
         t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
         t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  /* u_i holds column i of rows 0-3 (low half) and column i+4 (high half). */
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE),
         u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE),
         u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE),
         u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

/* dst[D, TILE_K] = src[bk rows of stride ld, D]^T: the operand layout the
 * micro-kernel wants for Q K^T and dO V^T. Done per tile pair in the forward,
 * so it is vectorised (a scalar version cost ~15% of the forward). */
static void transpose_tile(float *dst, const float *src, long ld, int bk, int D) {
  int j0 = 0;
#ifdef ATTN_AVX2
  const int d8 = D / 8 * 8;
  for (; j0 + 8 <= bk; j0 += 8) {
    for (int d = 0; d < d8; d += 8) transpose8x8(src + j0 * ld + d, ld, dst + d * TILE_K + j0, TILE_K);
    for (int j = j0; j < j0 + 8; j++)
      for (int d = d8; d < D; d++) dst[d * TILE_K + j] = src[j * ld + d];
  }
#endif
  for (int j = j0; j < bk; j++) {
    const float *row = src + j * ld;
    for (int d = 0; d < D; d++) dst[d * TILE_K + j] = row[d];
  }
}

/* ---------------------------------------------------------------------------
 * Forward. */

static size_t forward_scratch_floats(int D) {
  return pad_floats(2 * (size_t)D * TILE_K + (size_t)TILE_Q * TILE_K + 2 * (size_t)TILE_Q * D + 2 * TILE_Q);
}

/* One query tile of one head against every key tile it can see. */
static void forward_tile(float *out, float *lse, const float *q, const float *k, const float *v,
                         const AttnShape *s, int b, int h, int qt, float *scratch) {
  const int D = s->D, Tq = s->Tq, Tk = s->Tk, Hq = s->Hq, Hkv = s->Hkv, kvh = h / (Hq / Hkv);
  const long ldq = (long)Hq * D, ldk = (long)Hkv * D;
  const float scale = 1.0f / sqrtf((float)D);
  const int q0 = qt * TILE_Q, bq = imin(TILE_Q, Tq - q0);
  const int qfirst = pos_at(s->qpos, q0), qlast = pos_at(s->qpos, q0 + bq - 1);
  const float *qtile = q + ((long)b * Tq + q0) * ldq + (long)h * D;

  float *kt = scratch;                         /* [D, TILE_K] */
  float *sc = kt + (size_t)D * TILE_K;         /* [TILE_Q, TILE_K] scores, then P */
  float *oacc = sc + (size_t)TILE_Q * TILE_K;  /* [TILE_Q, D] unnormalised output */
  float *qpack = oacc + (size_t)TILE_Q * D;    /* [TILE_Q, D] */
  float *vpack = qpack + (size_t)TILE_Q * D;   /* [TILE_K, D] */
  float *mrow = vpack + (size_t)TILE_K * D;    /* running max of scaled scores */
  float *lrow = mrow + TILE_Q;                 /* running sum of exp */
  for (int r = 0; r < bq; r++) {
    mrow[r] = -INFINITY;
    lrow[r] = 0.0f;
  }
  memset(oacc, 0, sizeof(float) * (size_t)bq * D);
  /* Rows of q (and v) lie Hq*D floats apart, a large power of two for the
   * usual shapes, so a tile read in place falls into a few L1 sets. */
  copy_rows(qpack, qtile, ldq, bq, D);

  for (int k0 = 0; k0 < Tk; k0 += TILE_K) {
    if (pos_at(s->kpos, k0) > qlast) break; /* this and every later key tile fully masked */
    const int bk = imin(TILE_K, Tk - k0);
    const int unmasked = pos_at(s->kpos, k0 + bk - 1) <= qfirst;
    const float *ktile = k + ((long)b * Tk + k0) * ldk + (long)kvh * D;
    const float *vtile = v + ((long)b * Tk + k0) * ldk + (long)kvh * D;
    transpose_tile(kt, ktile, ldk, bk, D);
    copy_rows(vpack, vtile, ldk, bk, D);
    tile_gemm(bq, bk, D, qpack, D, 1, kt, TILE_K, sc, TILE_K, 0);

    for (int r = 0; r < bq; r++) {
      float *srow = sc + (size_t)r * TILE_K;
      const int nvis = unmasked ? bk : visible_keys(s->kpos, k0, bk, pos_at(s->qpos, q0 + r));
      if (nvis < bk) memset(srow + nvis, 0, sizeof(float) * (size_t)(bk - nvis));
      if (nvis == 0) continue;
      const float m_old = mrow[r];
      const float m_new = fmaxf(m_old, row_max(srow, nvis) * scale);
      const float alpha = expf(m_old - m_new); /* 0 on the first visible tile (m_old = -inf) */
      const float sum = row_exp(srow, nvis, scale, m_new);
      if (alpha != 1.0f) {
        float *orow = oacc + (size_t)r * D;
        for (int d = 0; d < D; d++) orow[d] *= alpha;
      }
      lrow[r] = lrow[r] * alpha + sum;
      mrow[r] = m_new;
    }
    tile_gemm(bq, D, bk, sc, TILE_K, 1, vpack, D, oacc, D, 1);
  }

  float *otile = out + ((long)b * Tq + q0) * ldq + (long)h * D;
  float *lse_row = lse + ((long)b * Hq + h) * Tq + q0;
  for (int r = 0; r < bq; r++) {
    float *orow = otile + r * ldq;
    if (lrow[r] > 0.0f) {
      const float inv = 1.0f / lrow[r];
      for (int d = 0; d < D; d++) orow[d] = oacc[(size_t)r * D + d] * inv;
      lse_row[r] = mrow[r] + logf(lrow[r]);
    } else { /* sees no key in this block */
      memset(orow, 0, sizeof(float) * (size_t)D);
      lse_row[r] = -INFINITY;
    }
  }
}

static void forward_core(float *out, float *lse, const float *q, const float *k, const float *v,
                         const AttnShape *s) {
  assert(s->Hkv > 0 && s->Hq % s->Hkv == 0 && s->D > 0);
  if (s->B <= 0 || s->Tq <= 0) return;
  const int nqt = (s->Tq + TILE_Q - 1) / TILE_Q;
  const long heads = (long)s->B * s->Hq, items = heads * nqt;
  const size_t per_thread = forward_scratch_floats(s->D);
  const int threads = worker_threads(s);
  float *scratch = scratch_get(per_thread * (size_t)threads, "attention_forward");
#pragma omp parallel num_threads(threads)
  {
    float *mine = scratch + per_thread * (size_t)omp_get_thread_num();
    /* Head-major so consecutive items reuse the head's K/V from cache;
     * within a head the longest (last) query tiles go first, so the run
     * ends on short items that even out the threads. */
#pragma omp for schedule(dynamic, 1)
    for (long it = 0; it < items; it++) {
      const int qt = nqt - 1 - (int)(it % nqt);
      const long bh = it / nqt;
      forward_tile(out, lse, q, k, v, s, (int)(bh / s->Hq), (int)(bh % s->Hq), qt, mine);
    }
  }
}

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                       int Hq, int Hkv, int D) {
  AttnShape s = {B, T, T, Hq, Hkv, D, NULL, NULL};
  forward_core(out, lse, q, k, v, &s);
}

void attention_forward_block(float *out, float *lse, const float *q, const int *qpos, int Tq, const float *k,
                             const float *v, const int *kpos, int Tk, int B, int Hq, int Hkv, int D) {
  AttnShape s = {B, Tq, Tk, Hq, Hkv, D, qpos, kpos};
  if (Tk <= 0) { /* nothing visible: the merge identity */
    for (long i = 0; i < (long)B * Hq * Tq; i++) lse[i] = -INFINITY;
    memset(out, 0, sizeof(float) * (size_t)B * Tq * Hq * D);
    return;
  }
  forward_core(out, lse, q, k, v, &s);
}

void attention_merge(float *out, float *lse, const float *out_block, const float *lse_block, int B, int T, int Hq,
                     int D) {
  const long rows = (long)B * Hq * T;
#pragma omp parallel for schedule(static) if (rows * D > 65536)
  for (long i = 0; i < rows; i++) {
    const long b = i / ((long)Hq * T), h = (i / T) % Hq, t = i % T;
    const float la = lse[i], lb = lse_block[i];
    if (lb == -INFINITY) continue;
    float *o = out + ((b * T + t) * Hq + h) * D;
    const float *ob = out_block + ((b * T + t) * Hq + h) * D;
    if (la == -INFINITY) { /* nothing seen yet: whatever `out` holds is ignored */
      memcpy(o, ob, sizeof(float) * (size_t)D);
      lse[i] = lb;
      continue;
    }
    const float m = fmaxf(la, lb);
    const float wa = expf(la - m), wb = expf(lb - m);
    const float inv = 1.0f / (wa + wb);
    for (int d = 0; d < D; d++) o[d] = (o[d] * wa + ob[d] * wb) * inv;
    lse[i] = m + logf(wa + wb);
  }
}

/* ---------------------------------------------------------------------------
 * Backward. */

static size_t backward_scratch_floats(int D) {
  return pad_floats(2 * (size_t)D * TILE_K + 2 * (size_t)TILE_Q * TILE_K + 3 * (size_t)TILE_K * D +
                    2 * (size_t)TILE_Q * D);
}

/* Adds (or stores) a [bk, D] accumulator into rows of stride ld. */
static void flush_rows(float *dst, long ld, const float *acc, int bk, int D, int accumulate) {
  for (int j = 0; j < bk; j++) {
    float *row = dst + j * ld;
    const float *a = acc + (size_t)j * D;
    if (accumulate)
      for (int d = 0; d < D; d++) row[d] += a[d];
    else
      memcpy(row, a, sizeof(float) * (size_t)D);
  }
}

/* Everything for one (batch, kv head): dK/dV of its keys and dQ of its
 * group's query heads. */
static void backward_group(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                           const float *q, const float *k, const float *v, const AttnShape *s, int b, int kvh,
                           int accumulate, float *scratch, float *delta) {
  const int D = s->D, Tq = s->Tq, Tk = s->Tk, Hq = s->Hq, Hkv = s->Hkv, G = Hq / Hkv;
  const long ldq = (long)Hq * D, ldk = (long)Hkv * D;
  const float scale = 1.0f / sqrtf((float)D);
  const int qlast_all = pos_at(s->qpos, Tq - 1);

  float *kt = scratch;                          /* [D, TILE_K] */
  float *vt = kt + (size_t)D * TILE_K;          /* [D, TILE_K] */
  float *pt = vt + (size_t)D * TILE_K;          /* [TILE_Q, TILE_K] P */
  float *dst = pt + (size_t)TILE_Q * TILE_K;    /* [TILE_Q, TILE_K] dP, then dS */
  float *dkacc = dst + (size_t)TILE_Q * TILE_K; /* [TILE_K, D] */
  float *dvacc = dkacc + (size_t)TILE_K * D;    /* [TILE_K, D] */
  /* Contiguous copies of the tiles read as micro-kernel operands: in place
   * their rows lie a power-of-two stride apart and thrash a few L1 sets. */
  float *kpack = dvacc + (size_t)TILE_K * D;    /* [TILE_K, D] */
  float *qpack = kpack + (size_t)TILE_K * D;    /* [TILE_Q, D] */
  float *dopack = qpack + (size_t)TILE_Q * D;   /* [TILE_Q, D] */

  if (!accumulate)
    for (int t = 0; t < Tq; t++)
      memset(dq + ((long)b * Tq + t) * ldq + (long)kvh * G * D, 0, sizeof(float) * (size_t)G * D);
  /* delta = rowsum(dO o O) once per query row, not once per tile pair:
   * `out` is read nowhere else, so recomputing it streamed it from memory
   * T/TILE_K times (~9% of the backward). */
  for (int g = 0; g < G; g++) {
    const int h = kvh * G + g;
    float *drow = delta + ((long)b * Hq + h) * Tq;
    for (int t = 0; t < Tq; t++) {
      const long off = ((long)b * Tq + t) * ldq + (long)h * D;
      drow[t] = row_dot(dout + off, out + off, D);
    }
  }

  for (int k0 = 0; k0 < Tk; k0 += TILE_K) {
    const int bk = imin(TILE_K, Tk - k0);
    const int kfirst = pos_at(s->kpos, k0), klast = pos_at(s->kpos, k0 + bk - 1);
    const long koff = ((long)b * Tk + k0) * ldk + (long)kvh * D;
    if (kfirst > qlast_all) { /* no query sees these keys */
      if (!accumulate)
        for (int j = 0; j < bk; j++) {
          memset(dk + koff + j * ldk, 0, sizeof(float) * (size_t)D);
          memset(dv + koff + j * ldk, 0, sizeof(float) * (size_t)D);
        }
      continue;
    }
    transpose_tile(kt, k + koff, ldk, bk, D);
    transpose_tile(vt, v + koff, ldk, bk, D);
    copy_rows(kpack, k + koff, ldk, bk, D);
    memset(dkacc, 0, sizeof(float) * (size_t)bk * D);
    memset(dvacc, 0, sizeof(float) * (size_t)bk * D);

    for (int g = 0; g < G; g++) {
      const int h = kvh * G + g;
      for (int q0 = 0; q0 < Tq; q0 += TILE_Q) {
        const int bq = imin(TILE_Q, Tq - q0);
        const int qfirst = pos_at(s->qpos, q0);
        if (pos_at(s->qpos, q0 + bq - 1) < kfirst) continue; /* fully masked */
        const int unmasked = klast <= qfirst;
        const long qoff = ((long)b * Tq + q0) * ldq + (long)h * D;
        const float *lse_row = lse + ((long)b * Hq + h) * Tq + q0;
        const float *delta_row = delta + ((long)b * Hq + h) * Tq + q0;

        copy_rows(qpack, q + qoff, ldq, bq, D);
        copy_rows(dopack, dout + qoff, ldq, bq, D);
        tile_gemm(bq, bk, D, qpack, D, 1, kt, TILE_K, pt, TILE_K, 0);
        int nvis[TILE_Q];
        for (int r = 0; r < bq; r++) {
          float *prow = pt + (size_t)r * TILE_K;
          nvis[r] = unmasked ? bk : visible_keys(s->kpos, k0, bk, pos_at(s->qpos, q0 + r));
          if (lse_row[r] == -INFINITY) nvis[r] = 0; /* row sees no key anywhere */
          if (nvis[r] < bk) memset(prow + nvis[r], 0, sizeof(float) * (size_t)(bk - nvis[r]));
          row_exp(prow, nvis[r], scale, lse_row[r]);
        }
        /* dV += P^T dO */
        tile_gemm(bk, D, bq, pt, 1, TILE_K, dopack, D, dvacc, D, 1);
        /* dP = dO V^T, then dS = P (dP - rowsum(dO o O)) * scale in place */
        tile_gemm(bq, bk, D, dopack, D, 1, vt, TILE_K, dst, TILE_K, 0);
        for (int r = 0; r < bq; r++) {
          float *dsrow = dst + (size_t)r * TILE_K;
          row_dsoftmax(dsrow, pt + (size_t)r * TILE_K, nvis[r], delta_row[r], scale);
          if (nvis[r] < bk) memset(dsrow + nvis[r], 0, sizeof(float) * (size_t)(bk - nvis[r]));
        }
        /* dQ += dS K; dK += dS^T Q */
        tile_gemm(bq, D, bk, dst, TILE_K, 1, kpack, D, dq + qoff, ldq, 1);
        tile_gemm(bk, D, bq, dst, 1, TILE_K, qpack, D, dkacc, D, 1);
      }
    }
    flush_rows(dk + koff, ldk, dkacc, bk, D, accumulate);
    flush_rows(dv + koff, ldk, dvacc, bk, D, accumulate);
  }
}

static void backward_core(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                          const float *q, const float *k, const float *v, const AttnShape *s, int accumulate) {
  assert(s->Hkv > 0 && s->Hq % s->Hkv == 0 && s->D > 0);
  if (s->B <= 0) return;
  if (s->Tq <= 0 || s->Tk <= 0) {
    if (!accumulate) {
      memset(dq, 0, sizeof(float) * (size_t)s->B * (size_t)(s->Tq > 0 ? s->Tq : 0) * s->Hq * s->D);
      memset(dk, 0, sizeof(float) * (size_t)s->B * (size_t)(s->Tk > 0 ? s->Tk : 0) * s->Hkv * s->D);
      memset(dv, 0, sizeof(float) * (size_t)s->B * (size_t)(s->Tk > 0 ? s->Tk : 0) * s->Hkv * s->D);
    }
    return;
  }
  const long items = (long)s->B * s->Hkv;
  const size_t per_thread = backward_scratch_floats(s->D);
  const int threads = worker_threads(s);
  float *scratch = scratch_get(per_thread * (size_t)threads + (size_t)s->B * s->Hq * s->Tq, "attention_backward");
  float *delta = scratch + per_thread * (size_t)threads;
#pragma omp parallel num_threads(threads)
  {
    float *mine = scratch + per_thread * (size_t)omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (long it = 0; it < items; it++)
      backward_group(dq, dk, dv, dout, out, lse, q, k, v, s, (int)(it / s->Hkv), (int)(it % s->Hkv), accumulate,
                     mine, delta);
  }
}

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                        const float *q, const float *k, const float *v, int B, int T, int Hq, int Hkv, int D) {
  AttnShape s = {B, T, T, Hq, Hkv, D, NULL, NULL};
  backward_core(dq, dk, dv, dout, out, lse, q, k, v, &s, 0);
}

void attention_backward_block(float *dq, float *dk, float *dv, const float *dout, const float *out,
                              const float *lse, const float *q, const int *qpos, int Tq, const float *k,
                              const float *v, const int *kpos, int Tk, int B, int Hq, int Hkv, int D) {
  AttnShape s = {B, Tq, Tk, Hq, Hkv, D, qpos, kpos};
  backward_core(dq, dk, dv, dout, out, lse, q, k, v, &s, 1);
}
