/* Private to flash attention's sources (not part of the kern API): the
 * bf16 tile product of attention_bf16.c that attention.c calls in place of
 * its fp32 micro-kernel when the process-wide precision is bf16. */
#ifndef FIVEFOLD_KERN_ATTENTION_INTERNAL_H
#define FIVEFOLD_KERN_ATTENTION_INTERNAL_H

/* c[m x n] (+= if accumulate) a * b with a[i][p] at a[i * rsa + p * csa],
 * b[p][j] at b[p * ldb + j]; inputs rounded to bf16, sums in fp32. */
void attn_tile_gemm_bf16(int m, int n, int k, const float *a, long rsa, long csa, const float *b, long ldb, float *c,
                         long ldc, int accumulate);

#endif
