/* Internal to the tropical kernels: one small vector vocabulary (load, add,
 * strict compare into a mask, masked select of floats and of int32 winner
 * indices) over AVX-512, AVX2 or plain arrays, chosen at compile time, so
 * that one register-tile kernel serves every ISA; and the per-thread
 * scratch buffers the kernels reuse across calls. Not a public header.
 *
 * The tie rule lives here: "better" is a strict compare, and a select
 * moves the candidate in only where the mask is set, so a later equal
 * candidate never replaces an earlier one. */
#ifndef FIVEFOLD_KERN_TROPICAL_SIMD_H
#define FIVEFOLD_KERN_TROPICAL_SIMD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TROP_INLINE static inline __attribute__((always_inline))

#if defined(__AVX512F__)
#include <immintrin.h>
#define TROP_LANES 16
#define TROP_ISA_NAME "avx512"
typedef __m512 tvec;
typedef __m512i tivec;
typedef __mmask16 tmask;
TROP_INLINE tvec tv_load(const float *p) { return _mm512_loadu_ps(p); }
TROP_INLINE tvec tv_set1(float x) { return _mm512_set1_ps(x); }
TROP_INLINE tvec tv_add(tvec a, tvec b) { return _mm512_add_ps(a, b); }
/* max/min(candidate, best): x86 returns the second operand when either is
 * NaN, so a NaN candidate never replaces the best. */
TROP_INLINE tvec tv_max(tvec cand, tvec best) { return _mm512_max_ps(cand, best); }
TROP_INLINE tvec tv_min(tvec cand, tvec best) { return _mm512_min_ps(cand, best); }
TROP_INLINE tmask tv_gt(tvec a, tvec b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
TROP_INLINE tmask tv_lt(tvec a, tvec b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
TROP_INLINE tvec tv_select(tmask m, tvec if_set, tvec otherwise) { return _mm512_mask_mov_ps(otherwise, m, if_set); }
TROP_INLINE tivec ti_set1(int32_t x) { return _mm512_set1_epi32(x); }
TROP_INLINE tivec ti_add(tivec a, tivec b) { return _mm512_add_epi32(a, b); }
TROP_INLINE tivec ti_select(tmask m, tivec if_set, tivec otherwise) {
  return _mm512_mask_mov_epi32(otherwise, m, if_set);
}
TROP_INLINE void tv_store(float *p, tvec v) { _mm512_storeu_ps(p, v); }
TROP_INLINE void ti_store(int32_t *p, tivec v) { _mm512_storeu_si512((void *)p, v); }
TROP_INLINE tivec ti_load(const int32_t *p) { return _mm512_loadu_si512((const void *)p); }
#elif defined(__AVX2__)
#include <immintrin.h>
#define TROP_LANES 8
#define TROP_ISA_NAME "avx2"
typedef __m256 tvec;
typedef __m256i tivec;
typedef __m256 tmask;
TROP_INLINE tvec tv_load(const float *p) { return _mm256_loadu_ps(p); }
TROP_INLINE tvec tv_set1(float x) { return _mm256_set1_ps(x); }
TROP_INLINE tvec tv_add(tvec a, tvec b) { return _mm256_add_ps(a, b); }
TROP_INLINE tvec tv_max(tvec cand, tvec best) { return _mm256_max_ps(cand, best); }
TROP_INLINE tvec tv_min(tvec cand, tvec best) { return _mm256_min_ps(cand, best); }
TROP_INLINE tmask tv_gt(tvec a, tvec b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
TROP_INLINE tmask tv_lt(tvec a, tvec b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
TROP_INLINE tvec tv_select(tmask m, tvec if_set, tvec otherwise) { return _mm256_blendv_ps(otherwise, if_set, m); }
TROP_INLINE tivec ti_set1(int32_t x) { return _mm256_set1_epi32(x); }
TROP_INLINE tivec ti_add(tivec a, tivec b) { return _mm256_add_epi32(a, b); }
TROP_INLINE tivec ti_select(tmask m, tivec if_set, tivec otherwise) {
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(otherwise), _mm256_castsi256_ps(if_set), m));
}
TROP_INLINE void tv_store(float *p, tvec v) { _mm256_storeu_ps(p, v); }
TROP_INLINE void ti_store(int32_t *p, tivec v) { _mm256_storeu_si256((__m256i *)p, v); }
TROP_INLINE tivec ti_load(const int32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
#else
/* Scalar fallback: the same vocabulary over small arrays. */
#define TROP_LANES 8
#define TROP_ISA_NAME "scalar"
typedef struct { float v[TROP_LANES]; } tvec;
typedef struct { int32_t v[TROP_LANES]; } tivec;
typedef struct { unsigned char v[TROP_LANES]; } tmask;
TROP_INLINE tvec tv_load(const float *p) { tvec r; memcpy(r.v, p, sizeof r.v); return r; }
TROP_INLINE tvec tv_set1(float x) { tvec r; for (int l = 0; l < TROP_LANES; l++) r.v[l] = x; return r; }
TROP_INLINE tvec tv_add(tvec a, tvec b) { for (int l = 0; l < TROP_LANES; l++) a.v[l] += b.v[l]; return a; }
TROP_INLINE tvec tv_max(tvec cand, tvec best) {
  for (int l = 0; l < TROP_LANES; l++) best.v[l] = cand.v[l] > best.v[l] ? cand.v[l] : best.v[l];
  return best;
}
TROP_INLINE tvec tv_min(tvec cand, tvec best) {
  for (int l = 0; l < TROP_LANES; l++) best.v[l] = cand.v[l] < best.v[l] ? cand.v[l] : best.v[l];
  return best;
}
TROP_INLINE tmask tv_gt(tvec a, tvec b) {
  tmask m;
  for (int l = 0; l < TROP_LANES; l++) m.v[l] = a.v[l] > b.v[l];
  return m;
}
TROP_INLINE tmask tv_lt(tvec a, tvec b) {
  tmask m;
  for (int l = 0; l < TROP_LANES; l++) m.v[l] = a.v[l] < b.v[l];
  return m;
}
TROP_INLINE tvec tv_select(tmask m, tvec if_set, tvec otherwise) {
  for (int l = 0; l < TROP_LANES; l++) otherwise.v[l] = m.v[l] ? if_set.v[l] : otherwise.v[l];
  return otherwise;
}
TROP_INLINE tivec ti_set1(int32_t x) { tivec r; for (int l = 0; l < TROP_LANES; l++) r.v[l] = x; return r; }
TROP_INLINE tivec ti_add(tivec a, tivec b) { for (int l = 0; l < TROP_LANES; l++) a.v[l] += b.v[l]; return a; }
TROP_INLINE tivec ti_select(tmask m, tivec if_set, tivec otherwise) {
  for (int l = 0; l < TROP_LANES; l++) otherwise.v[l] = m.v[l] ? if_set.v[l] : otherwise.v[l];
  return otherwise;
}
TROP_INLINE void tv_store(float *p, tvec v) { memcpy(p, v.v, sizeof v.v); }
TROP_INLINE void ti_store(int32_t *p, tivec v) { memcpy(p, v.v, sizeof v.v); }
TROP_INLINE tivec ti_load(const int32_t *p) { tivec r; memcpy(r.v, p, sizeof r.v); return r; }
#endif

/* "Better" for a maximum or a minimum: strict, so ties keep the earlier. */
TROP_INLINE tmask tv_better(int is_min, tvec cand, tvec best) { return is_min ? tv_lt(cand, best) : tv_gt(cand, best); }
TROP_INLINE tvec tv_best(int is_min, tvec cand, tvec best) { return is_min ? tv_min(cand, best) : tv_max(cand, best); }
TROP_INLINE float trop_start(int is_min) { return is_min ? INFINITY : -INFINITY; }

/* The first `count` lanes of v to p (count <= TROP_LANES). */
TROP_INLINE void tv_store_n(float *p, tvec v, int count) {
  if (count == TROP_LANES) {
    tv_store(p, v);
  } else {
    float tmp[TROP_LANES];
    tv_store(tmp, v);
    memcpy(p, tmp, (size_t)count * sizeof *p);
  }
}
TROP_INLINE void ti_store_n(int32_t *p, tivec v, int count) {
  if (count == TROP_LANES) {
    ti_store(p, v);
  } else {
    int32_t tmp[TROP_LANES];
    ti_store(tmp, v);
    memcpy(p, tmp, (size_t)count * sizeof *p);
  }
}

/* Scratch buffer slots, one set per calling thread, grown on demand and
 * kept (allocation and first-touch faults cost more than small kernels). */
enum { TROP_SCRATCH_PACK = 0, TROP_SCRATCH_COLS = 1, TROP_SCRATCH_SLOTS = 2 };

/* At least `bytes` bytes, 64-byte aligned; NULL when out of memory. */
void *tropical_scratch(int slot, size_t bytes);

#endif
