/* RMSNorm: out = x / sqrt(mean(x^2) + eps) * w, per row of [N, C]; and the
 * residual add before it, fused into the norm's pass or not
 * (kern/fusion.h: norm_residual). */
#ifndef FIVEFOLD_KERN_RMSNORM_H
#define FIVEFOLD_KERN_RMSNORM_H

/* rstd[N] receives 1/sqrt(mean(x^2)+eps) for the backward pass. */
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);

/* dx += d/dx (accumulates: x is the residual stream), dw += d/dw. */
void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                      const float *rstd, int N, int C);

/* The residual add and the norm of its result, [N, C]:
 *   x_out = res + y (+ bias per column when bias is not NULL: a row-parallel
 *   projection's bias), out = rmsnorm(x_out) (rstd as above).
 * Fused (kern_fusion().norm_residual 1): one pass, each row added and then
 * normed while it is in cache (res and y read, x_out and out written: 4
 * values per element). Unfused: vec_add, bias_add_rows, rmsnorm_forward, x_out
 * written and read back (5; 7 with the bias, whose pass reads and writes it
 * once more). Bit-identical: the same additions in the same order. */
void add_rmsnorm_forward(float *x_out, float *out, float *rstd, const float *res, const float *y, const float *bias,
                         const float *w, int N, int C, float eps);

/* Its backward into the residual stream's gradient: dres += d/dx of the
 * norm, dw += d/dw. Fused: the norm's input gradient added to dres where it
 * is computed (dout, x and dres read, dres written: 4 values per element);
 * unfused: written to tmp [N, C] and added by vec_acc (tmp written and read
 * back: 6). Bit-identical. tmp is unused when fused. */
void add_rmsnorm_backward(float *dres, float *tmp, float *dw, const float *dout, const float *x, const float *w,
                          const float *rstd, int N, int C);

/* Either variant, whatever the switch. */
void add_rmsnorm_forward_fused(float *x_out, float *out, float *rstd, const float *res, const float *y,
                               const float *bias, const float *w, int N, int C, float eps);
void add_rmsnorm_forward_unfused(float *x_out, float *out, float *rstd, const float *res, const float *y,
                                 const float *bias, const float *w, int N, int C, float eps);
void add_rmsnorm_backward_fused(float *dres, float *dw, const float *dout, const float *x, const float *w,
                                const float *rstd, int N, int C);
void add_rmsnorm_backward_unfused(float *dres, float *tmp, float *dw, const float *dout, const float *x,
                                  const float *w, const float *rstd, int N, int C);

#endif
