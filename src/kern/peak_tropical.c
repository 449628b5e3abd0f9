/* Measured add + max peak: independent chains of best = max(best, x + c)
 * per OpenMP thread, the inner step of a tropical product without loads. */
#include "kern/peak_tropical.h"

#include "kern/peak_timing.h"

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

/* A chain step is an add then a max (latency ~5 cycles together); with two
 * or more vector pipes that needs >= 10 chains in flight. Each chain's
 * input x is its own register, updated by the add, so nothing folds. */
#if defined(__AVX512F__)
#define PT_LANES 16
#define PT_CHAINS 16
typedef __m512 pt_vec;
#define PT_SET1(v) _mm512_set1_ps(v)
#define PT_ADD(a, b) _mm512_add_ps(a, b)
#define PT_MAX(a, b) _mm512_max_ps(a, b)
static float pt_sum(pt_vec v) { return _mm512_reduce_add_ps(v); }
#elif defined(__AVX__)
#define PT_LANES 8
#define PT_CHAINS 12
typedef __m256 pt_vec;
#define PT_SET1(v) _mm256_set1_ps(v)
#define PT_ADD(a, b) _mm256_add_ps(a, b)
#define PT_MAX(a, b) _mm256_max_ps(a, b)
static float pt_sum(pt_vec v) {
  float l[8];
  _mm256_storeu_ps(l, v);
  return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}
#else
#define PT_LANES 1
#define PT_CHAINS 12
typedef float pt_vec;
#define PT_SET1(v) (v)
#define PT_ADD(a, b) ((a) + (b))
#define PT_MAX(a, b) ((a) > (b) ? (a) : (b))
static float pt_sum(pt_vec v) { return v; }
#endif

/* x = max(x + a, b) with a slightly negative: x drifts down to b and stays
 * finite, never denormal. */
__attribute__((noinline)) static float add_max_rounds(long iters, float seed) {
  pt_vec acc[PT_CHAINS];
  pt_vec a = PT_SET1(-1e-7f), b = PT_SET1(-1e6f);
  for (int j = 0; j < PT_CHAINS; j++) acc[j] = PT_SET1(seed + (float)j);
  for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
    for (int j = 0; j < PT_CHAINS; j++) acc[j] = PT_MAX(PT_ADD(acc[j], a), b);
  }
  pt_vec total = acc[0];
  for (int j = 1; j < PT_CHAINS; j++) total = PT_ADD(total, acc[j]);
  return pt_sum(total);
}

double peak_add_max_gops(int threads, double seconds) {
  const long rounds_per_batch = 1L << 15;
  const double ops_per_batch = (double)PT_LANES * PT_CHAINS * (double)rounds_per_batch;
  return peak_timed_rate(add_max_rounds, rounds_per_batch, ops_per_batch, threads, seconds);
}
