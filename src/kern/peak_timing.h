/* The timing scaffold shared by the register-resident peak loops (FMA,
 * bf16 dot product, add + max): warm-up, then each thread's fastest batch.
 * Private to src/kern; the public entry points are in peak.h and
 * peak_tropical.h. */
#ifndef FIVEFOLD_KERN_PEAK_TIMING_H
#define FIVEFOLD_KERN_PEAK_TIMING_H

#include <omp.h>

#include "base/timer.h"

/* One batch of a peak loop: `iters` rounds from `seed`, returning a value
 * that depends on every round so the compiler cannot drop them. */
typedef float (*PeakBatchFn)(long iters, float seed);

/* Summed over `threads` threads (<= 0: the OpenMP default), the rate in
 * G-ops/s of `batch` (ops_per_batch operations per call of rounds_per_batch
 * rounds), timed for about `seconds` (<= 0: 0.1) after a warm-up of a tenth
 * of that. Each thread keeps its fastest batch: a batch that lost its core
 * to another process is slower, never faster, so the best batch is the
 * hardware rate even on a shared machine. */
static inline double peak_timed_rate(PeakBatchFn batch, long rounds_per_batch, double ops_per_batch,
                                     int threads, double seconds) {
  if (threads <= 0) threads = omp_get_max_threads();
  if (seconds <= 0.0) seconds = 0.1;
  double total = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    float sink = 0.0f;
    /* Warm-up lets the core reach its sustained clock before timing. */
    double warm_end = timer_now() + 0.1 * seconds;
    while (timer_now() < warm_end) sink += batch(rounds_per_batch, sink * 1e-30f);
#pragma omp barrier
    double start = timer_now(), now = start, best_batch = 1e30;
    do {
      double batch_start = now;
      sink += batch(rounds_per_batch, sink * 1e-30f);
      now = timer_now();
      if (now - batch_start < best_batch) best_batch = now - batch_start;
    } while (now - start < seconds);
    /* A volatile store keeps the batches' results, hence the batches, live. */
    volatile float keep = sink;
    (void)keep;
    total += ops_per_batch / best_batch * 1e-9;
  }
  return total;
}

#endif
