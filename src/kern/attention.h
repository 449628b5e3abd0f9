/* Causal self-attention with grouped-query attention, flash style: tiled over
 * queries and keys with an online softmax, so the full T x T score matrix of a
 * head never exists; the backward pass recomputes scores tile by tile from the
 * saved log-sum-exp. RoPE is applied to q and k before (kern/rope.h).
 *
 * Layouts (row-major float32, the natural outputs of the q/k/v projections):
 *   q, out, dq, dout: [B, T, Hq,  D]
 *   k, v, dk, dv:     [B, T, Hkv, D]
 *   lse:              [B, Hq, T]   log-sum-exp of the scaled scores of each query
 * Hq % Hkv == 0; query head h reads kv head h / (Hq / Hkv). Scale 1/sqrt(D).
 * Token t attends to tokens 0..t of the same sequence. */
#ifndef FIVEFOLD_KERN_ATTENTION_H
#define FIVEFOLD_KERN_ATTENTION_H

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                       int Hq, int Hkv, int D);

/* Overwrites dq, dk, dv. `out` and `lse` are the forward's outputs. */
void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                        const float *q, const float *k, const float *v, int B, int T, int Hq, int Hkv, int D);

/* Context parallelism: a rank holds the queries of some positions and K/V
 * blocks arrive from other ranks. Positions are per token, shared by every
 * batch row, non-decreasing within each array (NULL means 0..n-1); key j is
 * visible from query i iff kpos[j] <= qpos[i].
 *   q, out, dq, dout: [B, Tq, Hq, D];  k, v, dk, dv: [B, Tk, Hkv, D];  lse: [B, Hq, Tq]
 *
 * attention_forward_block: normalised attention of the queries over this one
 * K/V block and its log-sum-exp (overwritten). A query that sees no key of the
 * block gets out = 0 and lse = -inf, the identity of attention_merge. */
void attention_forward_block(float *out, float *lse, const float *q, const int *qpos, int Tq, const float *k,
                             const float *v, const int *kpos, int Tk, int B, int Hq, int Hkv, int D);

/* Folds one block's (out_block, lse_block) into the running (out, lse), all
 * over the same T queries: the result is attention over the union of the
 * blocks. Start from lse = -inf everywhere (out is then ignored, garbage
 * included) or from the first block's results. */
void attention_merge(float *out, float *lse, const float *out_block, const float *lse_block, int B, int T, int Hq,
                     int D);

/* Gradient contribution of one K/V block. `out` and `lse` are the final
 * (merged over all blocks) forward results. ACCUMULATES (+=) into dq, dk, dv,
 * so dq sums over the blocks a rank sees and dk/dv over the ranks a block
 * visits. */
void attention_backward_block(float *dq, float *dk, float *dv, const float *dout, const float *out,
                              const float *lse, const float *q, const int *qpos, int Tq, const float *k,
                              const float *v, const int *kpos, int Tk, int B, int Hq, int Hkv, int D);

#endif
