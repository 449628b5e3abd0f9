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

#endif
