/* SwiGLU activation on a fused gate/up projection output.
 * h [N, 2F]: columns [0, F) are the gate, [F, 2F) the up projection;
 * out [N, F] = silu(gate) * up, silu(x) = x * sigmoid(x).
 *
 * swiglu_forward / swiglu_backward run the fused kernels or, with
 * kern_fusion().swiglu 0, the unfused chains below (bit-identical: the
 * same products in the same order). */
#ifndef FIVEFOLD_KERN_SWIGLU_H
#define FIVEFOLD_KERN_SWIGLU_H

void swiglu_forward(float *out, const float *h, int N, int F);

/* dh [N, 2F] is overwritten. */
void swiglu_backward(float *dh, const float *dout, const float *h, int N, int F);

/* The fused kernels: one pass over gate, up (and dout), whatever the switch. */
void swiglu_forward_fused(float *out, const float *h, int N, int F);
void swiglu_backward_fused(float *dh, const float *dout, const float *h, int N, int F);

/* The unfused chains, each operation a pass of its own over memory:
 * forward  out = silu(gate) (written), then out *= up;
 * backward dup = silu(gate) (written), dup *= dout; dgate = dout * up
 *          (written), dgate *= silu'(gate).
 * Traffic per element of [N, F]: forward 5 floats (fused 3), backward 11
 * (fused 5). */
void swiglu_forward_unfused(float *out, const float *h, int N, int F);
void swiglu_backward_unfused(float *dh, const float *dout, const float *h, int N, int F);

#endif
