/* Dense SwiGLU MLP (also the MoE shared expert):
 * out = W_down . (silu(gate) * up), [gate; up] = W_gate_up . x.
 * The activation a is recomputed from h in backward rather than stored:
 * it is one cheap elementwise pass and saves N*F floats per layer. */
#include "kern/gemm.h"
#include "kern/swiglu.h"
#include "model/moe.h"

void swiglu_mlp_forward(float *out, int accumulate, float *h, float *a, const float *x, const float *w_gate_up,
                        const float *w_down, int N, int C, int F) {
  linear_forward(h, x, w_gate_up, N, C, 2 * F, 0);
  swiglu_forward(a, h, N, F);
  linear_forward(out, a, w_down, N, F, C, accumulate);
}

void swiglu_mlp_backward(float *dx, int accumulate_dx, float *dw_gate_up, float *dw_down, const float *dout,
                         const float *x, const float *h, float *a, float *da, float *dh, const float *w_gate_up,
                         const float *w_down, int N, int C, int F) {
  swiglu_forward(a, h, N, F);
  linear_backward(da, dw_down, dout, a, w_down, N, F, C, 0);
  swiglu_backward(dh, da, h, N, F);
  linear_backward(dx, dw_gate_up, dh, x, w_gate_up, N, C, 2 * F, accumulate_dx);
}
