/* Token embedding lookup: out[n] = table[tokens[n]], table [V, C]. */
#ifndef FIVEFOLD_KERN_EMBEDDING_H
#define FIVEFOLD_KERN_EMBEDDING_H

void embedding_forward(float *out, const int *tokens, const float *table, int N, int C);

/* dtable[tokens[n]] += dout[n]. */
void embedding_backward(float *dtable, const int *tokens, const float *dout, int N, int C);

#endif
