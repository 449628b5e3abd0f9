/* Vocab-parallel fused LM head + cross-entropy. Per chunk of rows: local
 * logits by one GEMM, the row maxima reduced (max) over the shards, then the
 * local sums of exponentials and the target logit (zero on shards that do
 * not hold the target) reduced (sum), and from those the loss and, in place
 * of the logits, the gradient; two GEMMs give dh and dw. */
#include "kern/cross_entropy_vp.h"

#include <math.h>
#include <string.h>

#include "kern/gemm.h"
#include "kern/kern_util.h"

void lmhead_xent_vp(const float *h, const float *w, const int *targets, int N, int C, int V_local, int vocab0,
                    float grad_scale, double *loss_sum, long *count, float *dh, float *dw, float *scratch, int chunk,
                    const XentVpReduce *reduce) {
  if (chunk <= 0 || chunk > N) chunk = N;
  const int Vl = V_local, want_grad = dh != NULL;
  const int use_reduce = reduce && reduce->max && reduce->sum;
  float *logits = scratch;
  float *row_max = scratch + (size_t)chunk * Vl;
  float *row_stats = row_max + chunk; /* [sum of exponentials | target logit] per row */
  double total = 0.0;
  long counted = 0;

  for (int n0 = 0; n0 < N; n0 += chunk) {
    const int rows = N - n0 < chunk ? N - n0 : chunk;
    const float *h_chunk = h + (size_t)n0 * C;
    const int *t_chunk = targets + n0;
    int chunk_counted = 0;
    for (int i = 0; i < rows; i++) chunk_counted += t_chunk[i] >= 0;
    if (chunk_counted == 0) {
      /* Decided from the targets, which every shard shares: all skip alike. */
      if (want_grad) memset(dh + (size_t)n0 * C, 0, sizeof(float) * (size_t)rows * (size_t)C);
      continue;
    }
    gemm(0, 1, rows, Vl, C, 1.0f, h_chunk, C, w, C, 0.0f, logits, Vl);

#pragma omp parallel for schedule(static) if ((long)rows * Vl >= KERN_PAR_MIN_ELEMS)
    for (int i = 0; i < rows; i++) {
      const float *row = logits + (size_t)i * Vl;
      float zmax = -INFINITY;
      for (int v = 0; v < Vl; v++) zmax = row[v] > zmax ? row[v] : zmax;
      row_max[i] = zmax;
    }
    if (use_reduce) reduce->max(reduce->ctx, row_max, (size_t)rows);

#pragma omp parallel for schedule(static) if ((long)rows * Vl >= KERN_PAR_MIN_ELEMS)
    for (int i = 0; i < rows; i++) {
      float *row = logits + (size_t)i * Vl;
      const float zmax = row_max[i];
      const int local_target = t_chunk[i] - vocab0;
      float z_target = 0.0f;
      if (t_chunk[i] >= 0 && local_target >= 0 && local_target < Vl) z_target = row[local_target];
      float sum = 0.0f;
      /* exponentials stay in the row: the gradient is them, rescaled */
      for (int v = 0; v < Vl; v++) {
        const float ex = kern_expf(row[v] - zmax);
        sum += ex;
        if (want_grad) row[v] = ex;
      }
      row_stats[i] = sum;
      row_stats[rows + i] = z_target;
    }
    if (use_reduce) reduce->sum(reduce->ctx, row_stats, 2 * (size_t)rows);

    for (int i = 0; i < rows; i++) {
      if (t_chunk[i] < 0) continue;
      total += (double)(row_max[i] + logf(row_stats[i]) - row_stats[rows + i]);
    }
    counted += chunk_counted;

    if (want_grad) {
#pragma omp parallel for schedule(static) if ((long)rows * Vl >= KERN_PAR_MIN_ELEMS)
      for (int i = 0; i < rows; i++) {
        float *row = logits + (size_t)i * Vl;
        if (t_chunk[i] < 0) {
          memset(row, 0, sizeof(float) * (size_t)Vl);
          continue;
        }
        const float scale = grad_scale / row_stats[i];
        for (int v = 0; v < Vl; v++) row[v] *= scale;
        const int local_target = t_chunk[i] - vocab0;
        if (local_target >= 0 && local_target < Vl) row[local_target] -= grad_scale;
      }
      gemm(0, 0, rows, C, Vl, 1.0f, logits, Vl, w, C, 0.0f, dh + (size_t)n0 * C, C);
      if (dw) gemm(1, 0, Vl, C, rows, 1.0f, logits, Vl, h_chunk, C, 1.0f, dw, C);
    }
  }
  *loss_sum = total;
  *count = counted;
}
