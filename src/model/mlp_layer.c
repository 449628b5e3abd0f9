/* Dense SwiGLU MLP (also the MoE shared expert):
 * out = W_down . (silu(gate) * up), [gate; up] = W_gate_up . x,
 * and GPT-2's GeLU MLP: out = W_proj . gelu(W_fc . x + b_fc).
 * The activation a is recomputed from h in backward rather than stored:
 * it is one cheap elementwise pass and saves N*F floats per layer. */
#include "base/op_probe.h"
#include "kern/gelu.h"
#include "kern/gemm.h"
#include "kern/swiglu.h"
#include "model/model_internal.h"
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

void gelu_mlp_forward(float *out, int accumulate, float *h, float *a, const float *x, const float *w_fc,
                      const float *b_fc, const float *w_proj, int N, int C, int F) {
  OP_PROBED_GEMM(N, F, C, linear_forward(h, x, w_fc, N, C, F, 0));
  bias_gelu_forward(h, a, b_fc, N, F);
  OP_PROBED_GEMM(N, C, F, linear_forward(out, a, w_proj, N, F, C, accumulate));
}

/* dx is overwritten. */
void gelu_mlp_backward(float *dx, float *dw_fc, float *db_fc, float *dw_proj, const float *dout, const float *x,
                       const float *h, float *a, float *da, float *dh, const float *w_fc, const float *w_proj, int N,
                       int C, int F) {
  gelu_forward(a, h, (size_t)N * F);
  OP_PROBED_GEMM(N, C, 2 * F, linear_backward(da, dw_proj, dout, a, w_proj, N, F, C, 0));
  bias_gelu_backward(dh, db_fc, da, h, N, F);
  OP_PROBED_GEMM(N, F, 2 * C, linear_backward(dx, dw_fc, dh, x, w_fc, N, C, F, 0));
}
