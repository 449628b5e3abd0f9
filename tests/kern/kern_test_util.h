/* Shared helpers for the kernel tests: seeded random tensors, error norms
 * and a finite-difference gradient check whose loss is accumulated in
 * double. Header-only so each test stays one executable. */
#ifndef FIVEFOLD_TESTS_KERN_TEST_UTIL_H
#define FIVEFOLD_TESTS_KERN_TEST_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/rng.h"

/* x[i] = scale * N(0,1), reproducible from (seed, i). */
static inline void test_fill_normal(float *x, size_t n, uint64_t seed, float scale) {
  for (size_t i = 0; i < n; i++) x[i] = scale * (float)rng_normal(seed, 7, i);
}

static inline void test_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)rng_uniform(seed, 11, i);
}

static inline float *test_alloc(size_t n) {
  float *p = calloc(n ? n : 1, sizeof *p);
  if (!p) abort();
  return p;
}

static inline double *test_alloc_d(size_t n) {
  double *p = calloc(n ? n : 1, sizeof *p);
  if (!p) abort();
  return p;
}

/* max |a - b| / max(max |b|, floor): one number that is ~1e-7 for float
 * rounding and O(1) for a wrong result. */
static inline double test_rel_err(const float *a, const double *b, size_t n, double floor) {
  double diff = 0.0, scale = floor;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > diff || isnan(d)) diff = isnan(d) ? INFINITY : d;
    if (fabs(b[i]) > scale) scale = fabs(b[i]);
  }
  return diff / scale;
}

static inline double test_rel_err_ff(const float *a, const float *b, size_t n, double floor) {
  double diff = 0.0, scale = floor;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > diff || isnan(d)) diff = isnan(d) ? INFINITY : d;
    if (fabs((double)b[i]) > scale) scale = fabs((double)b[i]);
  }
  return diff / scale;
}

/* sum out[i] * r[i] in double: the scalar loss whose gradient w.r.t. out is r. */
static inline double test_dot_loss(const float *out, const float *r, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)out[i] * (double)r[i];
  return s;
}

typedef double (*TestLossFn)(void *ctx);

/* Central differences of loss() with respect to param[i], compared with
 * analytic[i], over up to max_checks indices spread across the tensor. The
 * step actually taken is the float-rounded one. Returns
 * max |analytic - numeric| / max(max |numeric|, 1e-6); param is restored. */
static inline double test_gradcheck(float *param, const float *analytic, size_t n, TestLossFn loss, void *ctx,
                                    float step, size_t max_checks) {
  size_t stride = n > max_checks ? n / max_checks : 1;
  double worst = 0.0, scale = 1e-6;
  for (size_t i = (stride > 1 ? stride / 2 : 0); i < n; i += stride) {
    float saved = param[i];
    float up = saved + step, down = saved - step;
    param[i] = up;
    double loss_up = loss(ctx);
    param[i] = down;
    double loss_down = loss(ctx);
    param[i] = saved;
    double numeric = (loss_up - loss_down) / ((double)up - (double)down);
    double d = fabs(numeric - (double)analytic[i]);
    if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
    if (fabs(numeric) > scale) scale = fabs(numeric);
  }
  return worst / scale;
}

#endif
