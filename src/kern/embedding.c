/* Token embedding lookup and its scatter-add backward. */
#include "kern/embedding.h"

#include <string.h>

#include "kern/kern_util.h"

void embedding_forward(float *out, const int *tokens, const float *table, int N, int C) {
#pragma omp parallel for schedule(static) if ((long)N * C >= KERN_PAR_MIN_ELEMS)
  for (int n = 0; n < N; n++) memcpy(out + (long)n * C, table + (long)tokens[n] * C, sizeof(float) * (size_t)C);
}

/* Repeated tokens make a row-parallel scatter race, so threads split the
 * columns instead: each owns a slice of every table row and visits the
 * tokens in order, which also keeps the sums independent of thread count. */
void embedding_backward(float *dtable, const int *tokens, const float *dout, int N, int C) {
  const int col_block = 32;
  const int n_col_blocks = (C + col_block - 1) / col_block;
#pragma omp parallel for schedule(static) if ((long)N * C >= KERN_PAR_MIN_ELEMS)
  for (int b = 0; b < n_col_blocks; b++) {
    int c0 = b * col_block, width = c0 + col_block < C ? col_block : C - c0;
    for (int n = 0; n < N; n++) {
      float *dst = dtable + (long)tokens[n] * C + c0;
      const float *src = dout + (long)n * C + c0;
      for (int c = 0; c < width; c++) dst[c] += src[c];
    }
  }
}
