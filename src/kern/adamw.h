/* AdamW with decoupled weight decay (Loshchilov & Hutter) and global-norm
 * gradient clipping. Bias-corrected moments; step t is 1-based. */
#ifndef FIVEFOLD_KERN_ADAMW_H
#define FIVEFOLD_KERN_ADAMW_H

#include <stddef.h>

typedef struct AdamWHyper {
  float lr, beta1, beta2, eps, weight_decay;
} AdamWHyper;

/* One update of n parameters. grad_scale multiplies the gradient first (it
 * carries the clipping factor). Weight decay: p -= lr * wd * p, applied to
 * this call's parameters (callers pass wd = 0 for norms and biases). */
void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, int t, const AdamWHyper *h,
                  float grad_scale);

/* Multiplier that brings a gradient of global norm sqrt(total_sumsq) down to
 * max_norm (1 when already below, or when max_norm <= 0). */
float clip_grad_scale(double total_sumsq, float max_norm);

#endif
