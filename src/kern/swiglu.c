/* SwiGLU on a fused [gate | up] projection: out = silu(gate) * up, fused
 * and as separate passes (swiglu.h). */
#include "kern/swiglu.h"

#include "kern/fusion.h"
#include "kern/kern_util.h"

static inline float sigmoid(float g) { return 1.0f / (1.0f + kern_expf(-g)); }

void swiglu_forward_fused(float *out, const float *h, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const float *gate = h + (long)n * 2 * F;
    const float *up = gate + F;
    float *o = out + (long)n * F;
    for (int f = 0; f < F; f++) {
      float g = gate[f];
      float sig = sigmoid(g);
      o[f] = g * sig * up[f];
    }
  }
}

/* d silu(g)/dg = sig(g) * (1 + g * (1 - sig(g))). */
void swiglu_backward_fused(float *dh, const float *dout, const float *h, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const float *gate = h + (long)n * 2 * F;
    const float *up = gate + F;
    const float *dy = dout + (long)n * F;
    float *dgate = dh + (long)n * 2 * F;
    float *dup = dgate + F;
    for (int f = 0; f < F; f++) {
      float g = gate[f];
      float sig = sigmoid(g);
      float silu = g * sig;
      dgate[f] = dy[f] * up[f] * sig * (1.0f + g * (1.0f - sig));
      dup[f] = dy[f] * silu;
    }
  }
}

/* ---- the unfused passes: [N, F] blocks at a row stride ---- */

/* y = silu(x) */
static void silu_pass(float *y, long ys, const float *x, long xs, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++)
    for (int f = 0; f < F; f++) {
      float g = x[n * xs + f];
      y[n * ys + f] = g * sigmoid(g);
    }
}

/* y = a * b (y may be a) */
static void mul_pass(float *y, long ys, const float *a, long as, const float *b, long bs, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++)
    for (int f = 0; f < F; f++) y[n * ys + f] = a[n * as + f] * b[n * bs + f];
}

/* y *= silu'(x) (the products in the fused kernel's order) */
static void silu_grad_pass(float *y, long ys, const float *x, long xs, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++)
    for (int f = 0; f < F; f++) {
      float g = x[n * xs + f];
      float sig = sigmoid(g);
      y[n * ys + f] = y[n * ys + f] * sig * (1.0f + g * (1.0f - sig));
    }
}

void swiglu_forward_unfused(float *out, const float *h, int N, int F) {
  long F2 = 2L * F;
  silu_pass(out, F, h, F2, N, F);
  mul_pass(out, F, out, F, h + F, F2, N, F);
}

void swiglu_backward_unfused(float *dh, const float *dout, const float *h, int N, int F) {
  long F2 = 2L * F;
  silu_pass(dh + F, F2, h, F2, N, F);                  /* dup = silu(gate) */
  mul_pass(dh + F, F2, dout, F, dh + F, F2, N, F);     /* dup = dout * silu(gate) */
  mul_pass(dh, F2, dout, F, h + F, F2, N, F);          /* dgate = dout * up */
  silu_grad_pass(dh, F2, h, F2, N, F);                 /* dgate *= silu'(gate) */
}

void swiglu_forward(float *out, const float *h, int N, int F) {
  if (kern_fusion().swiglu) swiglu_forward_fused(out, h, N, F);
  else swiglu_forward_unfused(out, h, N, F);
}

void swiglu_backward(float *dh, const float *dout, const float *h, int N, int F) {
  if (kern_fusion().swiglu) swiglu_backward_fused(dh, dout, h, N, F);
  else swiglu_backward_unfused(dh, dout, h, N, F);
}
