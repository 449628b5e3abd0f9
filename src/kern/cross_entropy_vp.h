/* Vocab-parallel LM head + softmax cross-entropy: the vocabulary [V, C] of
 * the output embedding is split into contiguous shards, each caller holds
 * rows [vocab0, vocab0 + V_local) and every caller passes the same hidden
 * rows h [N, C] and targets [N]. The softmax needs the row maximum, the sum
 * of exponentials and the target's logit over the whole vocabulary: the
 * caller supplies element-wise max and sum reductions over the shards
 * (both NULL, or reduce NULL: a single shard holding the whole
 * vocabulary). Chunked over tokens like lmhead_xent; every shard makes the
 * same reduction calls in the same order.
 *
 * Outputs: *loss_sum, *count as lmhead_xent (identical on every shard).
 * If dh != NULL: dh (overwritten) = this shard's part of grad_scale *
 *   d(sum of losses)/dh (the shards' dh sum to the full gradient) and
 *   dw += grad_scale * d(sum of losses)/dw for this shard's rows (dw may be NULL).
 * scratch: chunk * V_local + 3 * chunk floats. */
#ifndef FIVEFOLD_KERN_CROSS_ENTROPY_VP_H
#define FIVEFOLD_KERN_CROSS_ENTROPY_VP_H

#include <stddef.h>

typedef struct XentVpReduce {
  void *ctx;
  void (*max)(void *ctx, float *buf, size_t n); /* in place, over the shards */
  void (*sum)(void *ctx, float *buf, size_t n);
} XentVpReduce;

void lmhead_xent_vp(const float *h, const float *w, const int *targets, int N, int C, int V_local, int vocab0,
                    float grad_scale, double *loss_sum, long *count, float *dh, float *dw, float *scratch, int chunk,
                    const XentVpReduce *reduce);

#endif
