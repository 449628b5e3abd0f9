/* LayerNorm (GPT-2): out = (x - mean(x)) / sqrt(var(x) + eps) * w + b,
 * per row of [N, C], with the biased (1/C) variance as PyTorch uses. */
#ifndef FIVEFOLD_KERN_LAYERNORM_H
#define FIVEFOLD_KERN_LAYERNORM_H

/* rstd[N] receives 1/sqrt(var+eps); the mean is recomputed in backward
 * (one pass over the row) rather than kept per layer. */
void layernorm_forward(float *out, float *rstd, const float *x, const float *w, const float *b, int N, int C,
                       float eps);

/* dx += d/dx (accumulates: x is the residual stream), dw += d/dw,
 * db += d/db. */
void layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                        const float *rstd, int N, int C);

#endif
