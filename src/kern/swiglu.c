/* SwiGLU on a fused [gate | up] projection: out = silu(gate) * up. */
#include "kern/swiglu.h"

#include "kern/kern_util.h"

void swiglu_forward(float *out, const float *h, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const float *gate = h + (long)n * 2 * F;
    const float *up = gate + F;
    float *o = out + (long)n * F;
    for (int f = 0; f < F; f++) {
      float g = gate[f];
      float sig = 1.0f / (1.0f + kern_expf(-g));
      o[f] = g * sig * up[f];
    }
  }
}

/* d silu(g)/dg = sig(g) * (1 + g * (1 - sig(g))). */
void swiglu_backward(float *dh, const float *dout, const float *h, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) {
    const float *gate = h + (long)n * 2 * F;
    const float *up = gate + F;
    const float *dy = dout + (long)n * F;
    float *dgate = dh + (long)n * 2 * F;
    float *dup = dgate + F;
    for (int f = 0; f < F; f++) {
      float g = gate[f];
      float sig = 1.0f / (1.0f + kern_expf(-g));
      float silu = g * sig;
      dgate[f] = dy[f] * up[f] * sig * (1.0f + g * (1.0f - sig));
      dup[f] = dy[f] * silu;
    }
  }
}
