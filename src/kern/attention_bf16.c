/* bf16 tile products of flash attention (QK^T and PV, forward and
 * backward): the operands rounded to bf16 (nearest-even), products summed
 * in fp32 by vdpbf16ps. The online softmax around them stays fp32
 * (attention.c).
 *
 * vdpbf16ps multiplies pairs of bf16 that are adjacent along the reduction
 * dimension, so both operands are first packed pair-wise: A as 32-bit
 * (a[i][2q], a[i][2q+1]) pairs, B as rows of 16-column blocks of pairs
 * (b[2q][j], b[2q+1][j]), odd k padded with a zero. The micro-kernel keeps
 * a 6 x 32 block of C in twelve zmm registers; one broadcast of an A pair
 * and two B loads feed twelve dot products. Packing reads each operand
 * once per tile product, against 64 x 64 x 64 multiply-adds.
 *
 * Without AVX-512 BF16 in the build the same numbers come from a scalar
 * loop over bf16-rounded operands (slow; only for builds without
 * -march=native on a bf16 machine). */
#include <stdint.h>

#include "kern/attention_internal.h"
#include "kern/bf16.h"

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

/* Largest operand a tile product sees: 64-row tiles and head dims up to
 * ATTN_BF16_MAX_DIM; bigger products take the scalar path. */
enum { ATTN_BF16_MAX_ROWS = 64, ATTN_BF16_MAX_DIM = 256 };

static _Thread_local uint32_t a_pairs[ATTN_BF16_MAX_DIM / 2 * ATTN_BF16_MAX_DIM];
static _Thread_local uint32_t b_pairs[ATTN_BF16_MAX_DIM / 2 * ATTN_BF16_MAX_DIM];

/* Two rows of 16 floats (x0 from row 2q, x1 from row 2q+1) as 16 pairs. */
static inline __m512i pair_rows(__m512 x0, __m512 x1) {
  const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x0));
  const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x1));
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}

/* dst[q * ld_pairs + j] = pair (src[2q][j], src[2q+1][j]) for j < cols
 * (zero past cols up to a multiple of 16), q < kp / 2; a missing row 2q+1
 * (odd rows) is zero. Rows of src are `ld` apart, columns contiguous. */
static void pack_row_pairs(uint32_t *dst, long ld_pairs, const float *src, long ld, int rows, int cols) {
  for (int q = 0; 2 * q < rows; q++) {
    const float *r0 = src + 2L * q * ld, *r1 = r0 + ld;
    const int has_r1 = 2 * q + 1 < rows;
    for (int j = 0; j < cols; j += 16) {
      const __mmask16 m = cols - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - j)) - 1u);
      const __m512 x0 = _mm512_maskz_loadu_ps(m, r0 + j);
      const __m512 x1 = has_r1 ? _mm512_maskz_loadu_ps(m, r1 + j) : _mm512_setzero_ps();
      _mm512_storeu_si512(dst + q * ld_pairs + j, pair_rows(x0, x1));
    }
  }
}

/* dst[i * ld_pairs + q] = pair (src[i][2q], src[i][2q+1]): rows with
 * contiguous k; an odd k gets a zero partner. */
static void pack_contiguous_pairs(uint32_t *dst, long ld_pairs, const float *src, long ld, int rows, int k) {
  const int kp = (k + 1) & ~1;
  for (int i = 0; i < rows; i++) {
    const float *r = src + (long)i * ld;
    uint32_t *d = dst + (long)i * ld_pairs;
    for (int p = 0; p < kp; p += 32) {
      const int left = k - p;
      const __mmask16 m0 = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1u) : 0;
      const __mmask16 m1 = left >= 32 ? (__mmask16)0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1u) : 0;
      const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(m1, r + p + 16), _mm512_maskz_loadu_ps(m0, r + p));
      const int pairs = (kp - p) / 2 < 16 ? (kp - p) / 2 : 16;
      _mm512_mask_storeu_epi32(d + p / 2, (__mmask16)((1u << pairs) - 1u), (__m512i)h);
    }
  }
}

/* C block of `rows` (<= 6) x 16 * nv (nv 1 or 2) columns, `cols` valid. */
static inline __attribute__((always_inline)) void micro_kernel(int rows, int nv, int cols, int kp2,
                                                               const uint32_t *ap, long a_row, long a_q,
                                                               const uint32_t *bp, long b_q, float *c, long ldc,
                                                               int accumulate) {
  __m512 acc[6][2];
  const __mmask16 m0 = cols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cols) - 1u);
  const __mmask16 m1 = cols >= 32 ? (__mmask16)0xffff : cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1u) : 0;
  for (int r = 0; r < 6; r++)
    for (int v = 0; v < 2; v++) {
      if (r >= rows || v >= nv) continue;
      acc[r][v] = accumulate ? _mm512_maskz_loadu_ps(v ? m1 : m0, c + r * ldc + 16 * v) : _mm512_setzero_ps();
    }
  for (int q = 0; q < kp2; q++) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + q * b_q);
    const __m512bh b1 = nv > 1 ? (__m512bh)_mm512_loadu_si512(bp + q * b_q + 16) : b0;
    for (int r = 0; r < 6; r++) {
      if (r >= rows) continue;
      const __m512bh a = (__m512bh)_mm512_set1_epi32((int)ap[r * a_row + q * a_q]);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
      if (nv > 1) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
    }
  }
  for (int r = 0; r < 6; r++) {
    if (r >= rows) continue;
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc[r][0]);
    if (nv > 1) _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc[r][1]);
  }
}

/* One row count per instantiation, so the accumulators stay in registers. */
#define ATTN_BF16_ROWS(R)                                                                                    \
  case R:                                                                                                    \
    if (nv == 2)                                                                                             \
      micro_kernel(R, 2, cols, kp2, ap, a_row, a_q, bp, b_q, c, ldc, accumulate);                            \
    else                                                                                                     \
      micro_kernel(R, 1, cols, kp2, ap, a_row, a_q, bp, b_q, c, ldc, accumulate);                            \
    break;

static void block(int rows, int nv, int cols, int kp2, const uint32_t *ap, long a_row, long a_q, const uint32_t *bp,
                  long b_q, float *c, long ldc, int accumulate) {
  switch (rows) {
    ATTN_BF16_ROWS(1)
    ATTN_BF16_ROWS(2)
    ATTN_BF16_ROWS(3)
    ATTN_BF16_ROWS(4)
    ATTN_BF16_ROWS(5)
    ATTN_BF16_ROWS(6)
    default: break;
  }
}
#undef ATTN_BF16_ROWS

static int fits(int m, int n, int k) {
  return m <= ATTN_BF16_MAX_DIM && n <= ATTN_BF16_MAX_DIM && k <= ATTN_BF16_MAX_DIM;
}
#endif

/* Reference numbers for any shape: bf16-rounded operands, fp32 sums in k
 * order. */
static void tile_gemm_bf16_scalar(int m, int n, int k, const float *a, long rsa, long csa, const float *b, long ldb,
                                  float *c, long ldc, int accumulate) {
  for (int i = 0; i < m; i++) {
    float *cr = c + i * ldc;
    if (!accumulate)
      for (int j = 0; j < n; j++) cr[j] = 0.0f;
    for (int p = 0; p < k; p++) {
      const float av = bf16_round(a[i * rsa + p * csa]);
      const float *br = b + p * ldb;
      for (int j = 0; j < n; j++) cr[j] += av * bf16_round(br[j]);
    }
  }
}

void attn_tile_gemm_bf16(int m, int n, int k, const float *a, long rsa, long csa, const float *b, long ldb, float *c,
                         long ldc, int accumulate) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  if (fits(m, n, k) && (csa == 1 || rsa == 1)) {
    const int kp2 = (k + 1) / 2, np = (n + 15) / 16 * 16;
    long a_row, a_q;
    if (csa == 1) { /* rows of A contiguous in k */
      a_row = kp2;
      a_q = 1;
      pack_contiguous_pairs(a_pairs, a_row, a, rsa, m, k);
    } else { /* A transposed: each k is a contiguous run of the m rows */
      a_row = 1;
      a_q = (m + 15) / 16 * 16;
      pack_row_pairs(a_pairs, a_q, a, csa, k, m);
    }
    pack_row_pairs(b_pairs, np, b, ldb, k, n);
    for (int j = 0; j < n; j += 32) {
      const int cols = n - j < 32 ? n - j : 32;
      const int nv = cols > 16 ? 2 : 1;
      for (int i = 0; i < m; i += 6)
        block(m - i < 6 ? m - i : 6, nv, cols, kp2, a_pairs + i * a_row, a_row, a_q, b_pairs + j, np,
              c + i * ldc + j, ldc, accumulate);
    }
    return;
  }
#endif
  tile_gemm_bf16_scalar(m, n, k, a, rsa, csa, b, ldb, c, ldc, accumulate);
}
