/* GeLU with the tanh approximation (GPT-2's "gelu_new", PyTorch's
 * gelu(approximate="tanh")):
 *   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
 * elementwise, and per-row bias helpers of the layers that carry biases. */
#ifndef FIVEFOLD_KERN_GELU_H
#define FIVEFOLD_KERN_GELU_H

#include <stddef.h>

void gelu_forward(float *out, const float *x, size_t n);

/* dx = dout * gelu'(x) (overwritten; dx may alias dout). */
void gelu_backward(float *dx, const float *dout, const float *x, size_t n);

/* y[r, :] += b for each of the N rows of y [N, C]. */
void bias_add_rows(float *y, const float *b, int N, int C);

/* db += the sum over the N rows of dy [N, C]. */
void bias_backward_rows(float *db, const float *dy, int N, int C);

/* GPT-2's fc output through its bias and GeLU: h [N, F] += b (per row, in
 * place: backward needs the biased value), a = gelu(h). Fused (one pass:
 * h read once, h and a written) or, with kern_fusion().bias_gelu 0,
 * bias_add_rows then gelu_forward (h written and read again). */
void bias_gelu_forward(float *h, float *a, const float *b, int N, int F);

/* Its backward from the biased h: dh = da * gelu'(h) (overwritten), db +=
 * the sum of dh over the rows. Fused (the sum taken where dh is written)
 * or gelu_backward then bias_backward_rows (dh read again). Both sum the
 * rows in the same order by column blocks, so the two are bit-identical
 * and independent of the thread count. */
void bias_gelu_backward(float *dh, float *db, const float *da, const float *h, int N, int F);

/* The fused kernels, whatever the switch. */
void bias_gelu_forward_fused(float *h, float *a, const float *b, int N, int F);
void bias_gelu_backward_fused(float *dh, float *db, const float *da, const float *h, int N, int F);

#endif
