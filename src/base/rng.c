/* splitmix64-based counter RNG and Box-Muller normals. */
#include "base/rng.h"

#include <math.h>

uint64_t rng_hash64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t rng_stream_id(const char *name) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a, then mixed */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    h ^= *p;
    h *= 1099511628211ULL;
  }
  return rng_hash64(h);
}

uint64_t rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
  return rng_hash64(rng_hash64(rng_hash64(seed) ^ stream) ^ index);
}

double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return (double)(rng_u64(seed, stream, index) >> 11) * (1.0 / 9007199254740992.0);
}

/* rng_uniform with the (seed, stream) part of rng_u64 already hashed. */
static inline double uniform_keyed(uint64_t key, uint64_t index) {
  return (double)(rng_hash64(key ^ index) >> 11) * (1.0 / 9007199254740992.0);
}

double rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  /* Box-Muller on two independent uniforms derived from the same index:
   * exactly rng_uniform(seed, stream, 2 * index) and (..., 2 * index + 1),
   * with their shared key hashed once (weight init draws one per element). */
  const uint64_t key = rng_hash64(rng_hash64(seed) ^ stream);
  double u1 = uniform_keyed(key, 2 * index);
  double u2 = uniform_keyed(key, 2 * index + 1);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t rng_next_u64(Rng *r) { return rng_u64(r->seed, r->stream, r->counter++); }

double rng_next_uniform(Rng *r) { return (double)(rng_next_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

uint64_t rng_next_below(Rng *r, uint64_t n) {
  /* Rejection sampling keeps it exactly uniform. */
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = rng_next_u64(r);
  while (x >= limit);
  return x % n;
}
