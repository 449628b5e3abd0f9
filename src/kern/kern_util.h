/* Private helpers shared by the kernel sources (not part of the kern API):
 * an exp that GCC vectorises inside loops, and the size below which OpenMP
 * fork/join costs more than the work it spreads. */
#ifndef FIVEFOLD_KERN_KERN_UTIL_H
#define FIVEFOLD_KERN_KERN_UTIL_H

#include <stdint.h>
#include <string.h>

/* Elementwise work smaller than this (in floats) runs on the calling thread:
 * a parallel region costs a few microseconds, about what one core needs for
 * ~32K simple float operations. */
#define KERN_PAR_MIN_ELEMS (1 << 15)

/* min(max(x, lo), hi) as a bit blend. A plain ?: with a constant arm lets
 * GCC thread jumps (the clamped path constant-folds), which leaves control
 * flow in the loop and stops vectorisation; masks keep it straight-line.
 * NaN compares false both ways and passes through. */
static inline float kern_clampf(float x, float lo, float hi) {
  int32_t xb, lob, hib;
  memcpy(&xb, &x, sizeof xb);
  memcpy(&lob, &lo, sizeof lob);
  memcpy(&hib, &hi, sizeof hib);
  int32_t below = -(int32_t)(x < lo), above = -(int32_t)(x > hi);
  xb = (xb & ~below) | (lob & below);
  xb = (xb & ~above) | (hib & above);
  memcpy(&x, &xb, sizeof x);
  return x;
}

/* exp(x) for float, within ~2 ulp of expf over the whole range, written
 * branch-free with a Cody-Waite reduction and a degree-6 polynomial so that
 * loops calling it vectorise (glibc's expf only vectorises under fast-math).
 * Overflow gives +inf, large negative x gives 0 (the clamp at -104 makes
 * the final product round to zero), NaN stays NaN. */
/* x = res + y (+ bias) over one row of C: the residual add that the fused
 * add+norm kernels (rmsnorm.c, layernorm.c) run before the row's norm. */
static inline void kern_residual_row(float *x, const float *res, const float *y, const float *bias, int C) {
  for (int c = 0; c < C; c++) x[c] = res[c] + y[c];
  if (bias)
    for (int c = 0; c < C; c++) x[c] += bias[c];
}

static inline float kern_expf(float x) {
  const float log2e = 1.44269504088896341f;
  const float ln2_hi = 0.693359375f;       /* few mantissa bits: n*ln2_hi is exact */
  const float ln2_lo = -2.12194440e-4f;
  const float round_magic = 12582912.0f;   /* 1.5 * 2^23: adding it rounds to an integer */
  float xc = kern_clampf(x, -104.0f, 89.0f);
  float shifted = xc * log2e + round_magic;
  float n = shifted - round_magic;
  int32_t shifted_bits;
  memcpy(&shifted_bits, &shifted, sizeof shifted_bits);
  int32_t ni = shifted_bits - 0x4B400000; /* integer value of n */
  float r = xc - n * ln2_hi;
  r = r - n * ln2_lo;
  float r2 = r * r;
  float poly = 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  float y = poly * r2 + r + 1.0f;
  /* 2^n in two factors so n in [-150, 129] never leaves the exponent range
   * of a single factor; the products then round/overflow like expf. */
  int32_t n1 = ni >> 1, n2 = ni - n1;
  int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  float result = y * s1 * s2;
  return result;
}

#endif
