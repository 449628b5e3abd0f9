/* LayerNorm (GPT-2): out = (x - mean(x)) / sqrt(var(x) + eps) * w + b,
 * per row of [N, C], with the biased (1/C) variance as PyTorch uses; and
 * the residual add before it, fused into the norm's pass or not
 * (kern/fusion.h: norm_residual). */
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

/* The residual add and the norm of its result, as add_rmsnorm_forward
 * (rmsnorm.h) with the norm's own bias b: x_out = res + y (+ bias, the
 * projection's, when not NULL), out = layernorm(x_out). Fused: one pass
 * (4 values per element); unfused: vec_add, bias_add_rows, layernorm_forward
 * (5; 7 with the bias). Bit-identical. */
void add_layernorm_forward(float *x_out, float *out, float *rstd, const float *res, const float *y,
                           const float *bias, const float *w, const float *b, int N, int C, float eps);

/* dres += d/dx, dw += d/dw, db += d/db: fused (4 values per element) or
 * through tmp [N, C] and vec_acc (6). Bit-identical. */
void add_layernorm_backward(float *dres, float *tmp, float *dw, float *db, const float *dout, const float *x,
                            const float *w, const float *rstd, int N, int C);

/* Either variant, whatever the switch. */
void add_layernorm_forward_fused(float *x_out, float *out, float *rstd, const float *res, const float *y,
                                 const float *bias, const float *w, const float *b, int N, int C, float eps);
void add_layernorm_forward_unfused(float *x_out, float *out, float *rstd, const float *res, const float *y,
                                   const float *bias, const float *w, const float *b, int N, int C, float eps);
void add_layernorm_backward_fused(float *dres, float *dw, float *db, const float *dout, const float *x,
                                  const float *w, const float *rstd, int N, int C);
void add_layernorm_backward_unfused(float *dres, float *tmp, float *dw, float *db, const float *dout, const float *x,
                                    const float *w, const float *rstd, int N, int C);

#endif
