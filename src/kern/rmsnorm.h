/* RMSNorm: out = x / sqrt(mean(x^2) + eps) * w, per row of [N, C]. */
#ifndef FIVEFOLD_KERN_RMSNORM_H
#define FIVEFOLD_KERN_RMSNORM_H

/* rstd[N] receives 1/sqrt(mean(x^2)+eps) for the backward pass. */
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);

/* dx += d/dx (accumulates: x is the residual stream), dw += d/dw. */
void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int C);

#endif
