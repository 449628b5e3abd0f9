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

#endif
