/* Direct kernels for linear layers with very few outputs (the MoE
 * router: N = experts), used by gemm.c's fp32 linear_forward/backward
 * (the router stays fp32 under bf16, as in Megatron-Core).
 *
 * Why the skinny path: inside a training step of the reference MoE, OpenBLAS
 * took ~1.1 ms per router product ([2048 x 512] x [512 x 8], about 15
 * GFLOP/s, one thread): it packs both operands, its register tiles are
 * mostly padding at N = 8, and with two threads it also splits and
 * synchronises a product this small. The direct kernels took ~0.7 ms per
 * product in the same step (perf, one thread). With N <= SKINNY_MAX_N the
 * whole weight ([N, K], 16 KiB for the router) stays in L1: each output row
 * is N dot products (forward), N broadcast-FMAs per 8 outputs (dx), or N
 * sums over the tokens (dw). Every output element is computed by one thread
 * in a fixed order, so results do not depend on the thread count. */
#include "kern/gemm_internal.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define GEMM_SKINNY 1
#endif

#ifdef GEMM_SKINNY

/* Outputs per pass (one accumulator register each) and the largest N that
 * takes the direct path: two passes at most. */
enum { SKINNY_LANES = 8, SKINNY_MAX_N = 16 };

/* Below this many multiply-adds a product runs on the calling thread. */
#define SKINNY_PAR_MIN_FMAS ((long)1 << 20)

static int skinny_applies_avx2(int M, int K, int N) { return N <= SKINNY_MAX_N && K >= SKINNY_LANES && M > 0 && N > 0; }

static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* y[m, n0 + j] (+)= x[m] . w[n0 + j] for j < nb <= 8. Rows past nb reuse the
 * last valid row so the loop stays branch-free; their sums are dropped. */
static void skinny_forward_row(float *y, const float *xr, const float *w, int K, int n0, int nb, int accumulate) {
  const float *wr[SKINNY_LANES];
  for (int j = 0; j < SKINNY_LANES; j++) wr[j] = w + (long)(n0 + (j < nb ? j : nb - 1)) * K;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  int k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 xv = _mm256_loadu_ps(xr + k);
    a0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wr[0] + k), a0);
    a1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wr[1] + k), a1);
    a2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wr[2] + k), a2);
    a3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wr[3] + k), a3);
    a4 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wr[4] + k), a4);
    a5 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wr[5] + k), a5);
    a6 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wr[6] + k), a6);
    a7 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wr[7] + k), a7);
  }
  float sums[SKINNY_LANES] = {hsum8(a0), hsum8(a1), hsum8(a2), hsum8(a3),
                              hsum8(a4), hsum8(a5), hsum8(a6), hsum8(a7)};
  for (; k < K; k++)
    for (int j = 0; j < SKINNY_LANES; j++) sums[j] += xr[k] * wr[j][k];
  for (int j = 0; j < nb; j++) y[n0 + j] = accumulate ? y[n0 + j] + sums[j] : sums[j];
}

void gemm_skinny_forward(float *y, const float *x, const float *w, int M, int K, int N, int accumulate) {
#pragma omp parallel for schedule(static) if ((long)M * K * N >= SKINNY_PAR_MIN_FMAS)
  for (int m = 0; m < M; m++)
    for (int n0 = 0; n0 < N; n0 += SKINNY_LANES)
      skinny_forward_row(y + (long)m * N, x + (long)m * K, w, K, n0,
                         N - n0 < SKINNY_LANES ? N - n0 : SKINNY_LANES, accumulate);
}

/* Column blocks of 64 outputs: eight accumulator registers, so eight
 * independent FMA chains (one chain per block would wait on the FMA latency
 * at every step). */
enum { SKINNY_COLS = 64 };

#define ACC8_DECL __m256 c0, c1, c2, c3, c4, c5, c6, c7
#define ACC8_ZERO c0 = c1 = c2 = c3 = c4 = c5 = c6 = c7 = _mm256_setzero_ps()
#define ACC8_LOAD(p)                                                                       \
  c0 = _mm256_loadu_ps((p)), c1 = _mm256_loadu_ps((p) + 8), c2 = _mm256_loadu_ps((p) + 16), \
  c3 = _mm256_loadu_ps((p) + 24), c4 = _mm256_loadu_ps((p) + 32), c5 = _mm256_loadu_ps((p) + 40), \
  c6 = _mm256_loadu_ps((p) + 48), c7 = _mm256_loadu_ps((p) + 56)
#define ACC8_FMA(s, p)                                                                     \
  c0 = _mm256_fmadd_ps(s, _mm256_loadu_ps((p)), c0), c1 = _mm256_fmadd_ps(s, _mm256_loadu_ps((p) + 8), c1), \
  c2 = _mm256_fmadd_ps(s, _mm256_loadu_ps((p) + 16), c2),                                   \
  c3 = _mm256_fmadd_ps(s, _mm256_loadu_ps((p) + 24), c3),                                   \
  c4 = _mm256_fmadd_ps(s, _mm256_loadu_ps((p) + 32), c4),                                   \
  c5 = _mm256_fmadd_ps(s, _mm256_loadu_ps((p) + 40), c5),                                   \
  c6 = _mm256_fmadd_ps(s, _mm256_loadu_ps((p) + 48), c6),                                   \
  c7 = _mm256_fmadd_ps(s, _mm256_loadu_ps((p) + 56), c7)
#define ACC8_STORE(p)                                                                      \
  _mm256_storeu_ps((p), c0), _mm256_storeu_ps((p) + 8, c1), _mm256_storeu_ps((p) + 16, c2), \
  _mm256_storeu_ps((p) + 24, c3), _mm256_storeu_ps((p) + 32, c4), _mm256_storeu_ps((p) + 40, c5), \
  _mm256_storeu_ps((p) + 48, c6), _mm256_storeu_ps((p) + 56, c7)

/* dx[m] (+)= sum_n dy[m, n] w[n], the weight rows (N x K floats) read from
 * L1. */
void gemm_skinny_backward_dx(float *dx, const float *dy, const float *w, int M, int K, int N, int accumulate) {
  const int kfull = K / SKINNY_COLS * SKINNY_COLS;
#pragma omp parallel for schedule(static) if ((long)M * K * N >= SKINNY_PAR_MIN_FMAS)
  for (int m = 0; m < M; m++) {
    const float *g = dy + (long)m * N;
    float *out = dx + (long)m * K;
    for (int k = 0; k < kfull; k += SKINNY_COLS) {
      ACC8_DECL;
      if (accumulate)
        ACC8_LOAD(out + k);
      else
        ACC8_ZERO;
      for (int n = 0; n < N; n++) {
        const __m256 gn = _mm256_broadcast_ss(g + n);
        ACC8_FMA(gn, w + (long)n * K + k);
      }
      ACC8_STORE(out + k);
    }
    for (int k = kfull; k < K; k++) {
      float acc = accumulate ? out[k] : 0.0f;
      for (int n = 0; n < N; n++) acc += g[n] * w[(long)n * K + k];
      out[k] = acc;
    }
  }
}

/* dw[n, k] += sum_m dy[m, n] x[m, k]. A thread owns a block of 64 columns;
 * the tokens go by in L1-sized chunks, and for each output row the block's
 * partial sums sit in registers while the chunk is read. Tokens are summed
 * in order within a block, so the result does not depend on the threads. */
enum { SKINNY_DW_ROWS = 64 };

void gemm_skinny_backward_dw(float *dw, const float *dy, const float *x, int M, int K, int N) {
  const int blocks = K / SKINNY_COLS;
#pragma omp parallel for schedule(static) if ((long)M * K * N >= SKINNY_PAR_MIN_FMAS)
  for (int b = 0; b < blocks; b++) {
    const int k = b * SKINNY_COLS;
    float part[SKINNY_MAX_N][SKINNY_COLS] __attribute__((aligned(32)));
    for (int n = 0; n < N; n++)
      for (int j = 0; j < SKINNY_COLS; j++) part[n][j] = 0.0f;
    for (int m0 = 0; m0 < M; m0 += SKINNY_DW_ROWS) {
      const int m1 = M - m0 < SKINNY_DW_ROWS ? M : m0 + SKINNY_DW_ROWS;
      for (int n = 0; n < N; n++) {
        ACC8_DECL;
        ACC8_LOAD(part[n]);
        for (int m = m0; m < m1; m++) {
          const __m256 gm = _mm256_broadcast_ss(dy + (long)m * N + n);
          ACC8_FMA(gm, x + (long)m * K + k);
        }
        ACC8_STORE(part[n]);
      }
    }
    for (int n = 0; n < N; n++) {
      float *d = dw + (long)n * K + k;
      for (int j = 0; j < SKINNY_COLS; j++) d[j] += part[n][j];
    }
  }
  for (int k = blocks * SKINNY_COLS; k < K; k++)
    for (int n = 0; n < N; n++) {
      float acc = 0.0f;
      for (int m = 0; m < M; m++) acc += dy[(long)m * N + n] * x[(long)m * K + k];
      dw[(long)n * K + k] += acc;
    }
}

#undef ACC8_DECL
#undef ACC8_ZERO
#undef ACC8_LOAD
#undef ACC8_FMA
#undef ACC8_STORE

#endif /* GEMM_SKINNY */

int gemm_skinny_applies(int M, int K, int N) {
#ifdef GEMM_SKINNY
  return skinny_applies_avx2(M, K, N);
#else
  (void)M, (void)K, (void)N;
  return 0;
#endif
}

#ifndef GEMM_SKINNY
/* Never called without AVX2 (gemm_skinny_applies() is 0); defined so that
 * the symbols exist in every build. */
void gemm_skinny_forward(float *y, const float *x, const float *w, int M, int K, int N, int accumulate) {
  (void)y, (void)x, (void)w, (void)M, (void)K, (void)N, (void)accumulate;
}
void gemm_skinny_backward_dx(float *dx, const float *dy, const float *w, int M, int K, int N, int accumulate) {
  (void)dx, (void)dy, (void)w, (void)M, (void)K, (void)N, (void)accumulate;
}
void gemm_skinny_backward_dw(float *dw, const float *dy, const float *x, int M, int K, int N) {
  (void)dw, (void)dy, (void)x, (void)M, (void)K, (void)N;
}
#endif
