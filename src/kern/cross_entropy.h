/* Fused LM head + softmax cross-entropy. Tokens are processed in chunks so
 * the [N, V] logits never exist at once; the gradient is produced in the same
 * pass (the loss is the last op, so its gradient is known at forward time).
 *
 *   h [N, C] final hidden states, w [V, C] output embedding,
 *   targets [N] in [0, V) (a negative target is ignored: no loss, no gradient).
 * Loss of token n: logsumexp(logits_n) - logits_n[target_n].
 * Outputs: *loss_sum = sum over counted tokens, *count = number counted,
 *          losses[N] per-token loss (optional, 0 for ignored tokens).
 * If dh != NULL: dh (overwritten) = grad_scale * d(sum of losses)/dh and
 *                dw += grad_scale * d(sum of losses)/dw (dw may be NULL).
 * scratch: chunk * V floats owned by the caller. */
#ifndef FIVEFOLD_KERN_CROSS_ENTROPY_H
#define FIVEFOLD_KERN_CROSS_ENTROPY_H

void lmhead_xent(const float *h, const float *w, const int *targets, int N, int C, int V, float grad_scale,
                 double *loss_sum, long *count, float *losses, float *dh, float *dw, float *scratch,
                 int chunk);

#endif
