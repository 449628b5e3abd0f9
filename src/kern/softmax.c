/* Row-wise softmax, sigmoid, log-sum-exp and deterministic top-k over
 * [N, E] router scores. */
#include "kern/softmax.h"

#include <math.h>

#include "kern/kern_util.h"

void softmax_forward(float *p, const float *z, int N, int E) {
#pragma omp parallel for schedule(static) if ((long)N * E >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const float *zr = z + (long)n * E;
    float *pr = p + (long)n * E;
    float zmax = -INFINITY;
#pragma omp simd reduction(max : zmax)
    for (int e = 0; e < E; e++) zmax = zr[e] > zmax ? zr[e] : zmax;
    /* A row of -inf (everything masked) gives zeros rather than NaNs. */
    float shift = zmax == -INFINITY ? 0.0f : zmax;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int e = 0; e < E; e++) {
      float ex = kern_expf(zr[e] - shift);
      pr[e] = ex;
      sum += ex;
    }
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int e = 0; e < E; e++) pr[e] *= inv;
  }
}

/* dz_e = p_e * (dp_e - sum_j dp_j p_j). */
void softmax_backward(float *dz, const float *dp, const float *p, int N, int E) {
#pragma omp parallel for schedule(static) if ((long)N * E >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const float *dpr = dp + (long)n * E;
    const float *pr = p + (long)n * E;
    float *dzr = dz + (long)n * E;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int e = 0; e < E; e++) dot += dpr[e] * pr[e];
    for (int e = 0; e < E; e++) dzr[e] = pr[e] * (dpr[e] - dot);
  }
}

void sigmoid_forward(float *s, const float *z, int n) {
#pragma omp parallel for simd schedule(static) if (n >= KERN_PAR_MIN_ELEMS)
  for (int i = 0; i < n; i++) s[i] = 1.0f / (1.0f + kern_expf(-z[i]));
}

void sigmoid_backward(float *dz, const float *ds, const float *s, int n) {
#pragma omp parallel for simd schedule(static) if (n >= KERN_PAR_MIN_ELEMS)
  for (int i = 0; i < n; i++) dz[i] = ds[i] * s[i] * (1.0f - s[i]);
}

void logsumexp_rows(float *lse, const float *z, int N, int E) {
#pragma omp parallel for schedule(static) if ((long)N * E >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const float *zr = z + (long)n * E;
    float zmax = -INFINITY;
#pragma omp simd reduction(max : zmax)
    for (int e = 0; e < E; e++) zmax = zr[e] > zmax ? zr[e] : zmax;
    if (zmax == -INFINITY || zmax == INFINITY) {
      lse[n] = zmax;
      continue;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int e = 0; e < E; e++) sum += kern_expf(zr[e] - zmax);
    lse[n] = zmax + logf(sum);
  }
}

/* Ranking used by top-k: a before b if a > b; NaN ranks below every number
 * so it is only picked when a row has fewer than k numbers. */
static inline int ranks_above(float a, float b) { return a > b || (isnan(b) && !isnan(a)); }

/* One pass per row keeping the best k seen so far in sorted order. A new
 * value moves ahead of an entry only if it ranks strictly above it, and
 * values arrive in index order, so among equal values the lower index stays
 * ahead. */
void topk_rows(int *idx, float *val, const float *x, int N, int E, int k) {
  if (k <= 0) return;
#pragma omp parallel for schedule(static) if ((long)N * E * k >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const float *xr = x + (long)n * E;
    int *ir = idx + (long)n * k;
    int filled = 0;
    for (int e = 0; e < E; e++) {
      float v = xr[e];
      int slot;
      if (filled < k)
        slot = filled++;
      else if (ranks_above(v, xr[ir[k - 1]]))
        slot = k - 1;
      else
        continue;
      while (slot > 0 && ranks_above(v, xr[ir[slot - 1]])) {
        ir[slot] = ir[slot - 1];
        slot--;
      }
      ir[slot] = e;
    }
    /* k > E: the missing picks are marked so a caller cannot mistake them. */
    for (int j = filled; j < k; j++) ir[j] = -1;
    if (val)
      for (int j = 0; j < k; j++) val[(long)n * k + j] = ir[j] >= 0 ? xr[ir[j]] : -INFINITY;
  }
}
