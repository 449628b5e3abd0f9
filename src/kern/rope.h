/* Rotary position embeddings in the Hugging Face Llama convention
 * ("rotate_half"): within a head of size D, element i pairs with i + D/2 and
 * the pair rotates by angle pos * theta^(-2i/D), i < D/2.
 * Tables are precomputed once: cos/sin [max_pos, D/2]. Positions are passed
 * per token so that a rank holding any subset of a sequence (context
 * parallelism) rotates correctly. */
#ifndef FIVEFOLD_KERN_ROPE_H
#define FIVEFOLD_KERN_ROPE_H

void rope_table_init(float *cos_table, float *sin_table, int max_pos, int D, float theta);

/* In place on x [N, H, D]; pos[n] is token n's position. */
void rope_forward(float *x, const int *pos, int N, int H, int D, const float *cos_table,
                  const float *sin_table);

/* In place on dx [N, H, D]: the transpose of the rotation (rotate by -angle). */
void rope_backward(float *dx, const int *pos, int N, int H, int D, const float *cos_table,
                   const float *sin_table);

#endif
