/* Fused LM head + softmax cross-entropy, chunked over tokens so that only
 * chunk x V logits exist at a time. Per chunk: logits by one GEMM into the
 * caller's scratch, a row-parallel stable softmax that turns the logits into
 * dlogits in place, then two GEMMs for dh and dw. */
#include "kern/cross_entropy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern/gemm.h"
#include "kern/kern_util.h"

/* Loss of one row of logits; when want_grad, the row is overwritten with
 * grad_scale * (softmax - onehot(target)). */
static float xent_row(float *row, int V, int target, int want_grad, float grad_scale) {
  float zmax = -INFINITY;
#pragma omp simd reduction(max : zmax)
  for (int v = 0; v < V; v++) zmax = row[v] > zmax ? row[v] : zmax;
  float z_target = row[target];
  float sum = 0.0f;
  if (want_grad) {
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) {
      float ex = kern_expf(row[v] - zmax);
      row[v] = ex;
      sum += ex;
    }
    float scale = grad_scale / sum;
    for (int v = 0; v < V; v++) row[v] *= scale;
    row[target] -= grad_scale;
  } else {
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) sum += kern_expf(row[v] - zmax);
  }
  return zmax + logf(sum) - z_target;
}

void lmhead_xent(const float *h, const float *w, const int *targets, int N, int C, int V, float grad_scale,
                 double *loss_sum, long *count, float *losses, float *dh, float *dw, float *scratch,
                 int chunk) {
  if (chunk <= 0 || chunk > N) chunk = N;
  double total = 0.0;
  long counted = 0;
  /* Per-row losses of a chunk, summed serially afterwards so the total does
   * not depend on how rows were spread over threads. Should the allocation
   * fail, smaller chunks fit the stack buffer (scratch is big enough). */
  enum { STACK_ROWS = 256 };
  float stack_row_loss[STACK_ROWS];
  float *row_loss = stack_row_loss;
  float *heap_row_loss = NULL;
  if (chunk > STACK_ROWS) {
    heap_row_loss = malloc((size_t)chunk * sizeof *heap_row_loss);
    if (heap_row_loss)
      row_loss = heap_row_loss;
    else
      chunk = STACK_ROWS;
  }
  int want_grad = dh != NULL;

  for (int n0 = 0; n0 < N; n0 += chunk) {
    int rows = N - n0 < chunk ? N - n0 : chunk;
    const float *h_chunk = h + (long)n0 * C;
    const int *t_chunk = targets + n0;
    int chunk_counted = 0;
    for (int i = 0; i < rows; i++) chunk_counted += t_chunk[i] >= 0;

    if (chunk_counted == 0) {
      /* Nothing to learn from here: skip the three GEMMs. */
      for (int i = 0; i < rows; i++)
        if (losses) losses[n0 + i] = 0.0f;
      if (want_grad) memset(dh + (long)n0 * C, 0, sizeof(float) * (size_t)rows * (size_t)C);
      continue;
    }

    gemm(0, 1, rows, V, C, 1.0f, h_chunk, C, w, C, 0.0f, scratch, V);

#pragma omp parallel for schedule(static) if ((long)rows * V >= KERN_PAR_MIN_ELEMS)
    for (int i = 0; i < rows; i++) {
      float *row = scratch + (long)i * V;
      int target = t_chunk[i];
      if (target < 0) {
        row_loss[i] = 0.0f;
        if (want_grad) memset(row, 0, sizeof(float) * (size_t)V);
        continue;
      }
      row_loss[i] = xent_row(row, V, target, want_grad, grad_scale);
    }

    for (int i = 0; i < rows; i++) {
      total += row_loss[i];
      if (losses) losses[n0 + i] = row_loss[i];
    }
    counted += chunk_counted;

    if (want_grad) {
      gemm(0, 0, rows, C, V, 1.0f, scratch, V, w, C, 0.0f, dh + (long)n0 * C, C);
      if (dw) gemm(1, 0, V, C, rows, 1.0f, scratch, V, h_chunk, C, 1.0f, dw, C);
    }
  }
  free(heap_row_loss);
  *loss_sum = total;
  *count = counted;
}
