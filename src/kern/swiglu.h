/* SwiGLU activation on a fused gate/up projection output.
 * h [N, 2F]: columns [0, F) are the gate, [F, 2F) the up projection;
 * out [N, F] = silu(gate) * up, silu(x) = x * sigmoid(x). */
#ifndef FIVEFOLD_KERN_SWIGLU_H
#define FIVEFOLD_KERN_SWIGLU_H

void swiglu_forward(float *out, const float *h, int N, int F);

/* dh [N, 2F] is overwritten. */
void swiglu_backward(float *dh, const float *dout, const float *h, int N, int F);

#endif
