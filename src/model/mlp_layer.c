/* Dense SwiGLU MLP (also the MoE shared expert):
 * out = W_down . (silu(gate) * up), [gate; up] = W_gate_up . x.
 * The activation a is recomputed from h in backward rather than stored:
 * it is one cheap elementwise pass and saves N*F floats per layer. */
#include "base/op_probe.h"
#include "kern/gemm.h"
#include "kern/swiglu.h"
#include "model/moe.h"

void swiglu_mlp_forward(float *out, int accumulate, float *h, float *a, const float *x, const float *w_gate_up,
                        const float *w_down, int N, int C, int F) {
  OP_PROBED_GEMM(N, 2 * F, C, linear_forward(h, x, w_gate_up, N, C, 2 * F, 0));
  OP_PROBED(OP_PROBE_SWIGLU, swiglu_forward(a, h, N, F));
  OP_PROBED_GEMM(N, C, F, linear_forward(out, a, w_down, N, F, C, accumulate));
}

void swiglu_mlp_backward(float *dx, int accumulate_dx, float *dw_gate_up, float *dw_down, const float *dout,
                         const float *x, const float *h, float *a, float *da, float *dh, const float *w_gate_up,
                         const float *w_down, int N, int C, int F) {
  OP_PROBED(OP_PROBE_SWIGLU, swiglu_forward(a, h, N, F));
  OP_PROBED_GEMM(N, C, 2 * F, linear_backward(da, dw_down, dout, a, w_down, N, F, C, 0));
  OP_PROBED(OP_PROBE_SWIGLU, swiglu_backward(dh, da, h, N, F));
  OP_PROBED_GEMM(N, 2 * F, 2 * C, linear_backward(dx, dw_gate_up, dh, x, w_gate_up, N, C, 2 * F, accumulate_dx));
}
