/* Counter-based random numbers: every draw is a pure function of
 * (seed, stream, index), so any rank can reproduce any element of any tensor
 * without replaying a sequence (needed when tensors are sharded). */
#ifndef FIVEFOLD_BASE_RNG_H
#define FIVEFOLD_BASE_RNG_H

#include <stdint.h>

uint64_t rng_hash64(uint64_t x);                 /* splitmix64 finaliser */
uint64_t rng_stream_id(const char *name);        /* stable id from a string */
uint64_t rng_u64(uint64_t seed, uint64_t stream, uint64_t index);
double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index); /* [0,1) */
double rng_normal(uint64_t seed, uint64_t stream, uint64_t index);  /* N(0,1) */

/* Sequential generator for places where a stream is natural (data order,
 * sampling). Its whole state is `counter`, so it checkpoints as one number. */
typedef struct Rng {
  uint64_t seed, stream, counter;
} Rng;

static inline Rng rng_make(uint64_t seed, uint64_t stream) {
  Rng r = {seed, stream, 0};
  return r;
}
uint64_t rng_next_u64(Rng *r);
double rng_next_uniform(Rng *r);
uint64_t rng_next_below(Rng *r, uint64_t n); /* uniform in [0, n) */

#endif
