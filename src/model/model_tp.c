/* The tensor-parallel exchanges of a model shard (sequence parallelism):
 * row all-gathers and reduce-scatters of the [N, C] activation, the sum of
 * TP-replicated gradients, the vocab-parallel embedding and the
 * vocab-parallel LM head + cross-entropy. All go through Model.ops, bound
 * by the runtime to the TP group; every TP rank makes the same calls in the
 * same order. Only called when tp_size > 1. */
#include <string.h>

#include "kern/cross_entropy_vp.h"
#include "kern/vecops.h"
#include "model/model.h"
#include "model/model_internal.h"

void tp_allgather_rows(const Model *m, float *out, const float *in, int Nl, int C) {
  m->ops->allgather(m->ops->ctx, out, in, (size_t)Nl * C);
}

void tp_reduce_scatter_rows(const Model *m, float *out, const float *in, int Nl, int C) {
  m->ops->reduce_scatter(m->ops->ctx, out, in, (size_t)Nl * C);
}

void tp_add_reduced(const Model *m, float *dw, float *scratch, size_t n) {
  m->ops->allreduce_sum(m->ops->ctx, scratch, n);
  vec_acc(dw, scratch, n);
}

/* Each rank looks up the tokens of its vocabulary range (zeros for the
 * others) for the whole sequence; the reduce-scatter sums the ranks'
 * contributions and leaves each its own rows. */
void tp_embedding_forward(Model *m, ModelActs *A, float *out_local) {
  const int N = A->N, C = A->C;
  float *full = A->s->full;
  const float *table = m->params + A->embed;
  for (int n = 0; n < N; n++) {
    const int row = A->tokens[n] - A->vocab0;
    float *dst = full + (size_t)n * C;
    if (row >= 0 && row < A->V)
      memcpy(dst, table + (size_t)row * C, (size_t)C * sizeof *dst);
    else
      memset(dst, 0, (size_t)C * sizeof *dst);
  }
  tp_reduce_scatter_rows(m, out_local, full, A->Nl, C);
}

void tp_embedding_backward(Model *m, ModelActs *A, const float *dout_local) {
  const int N = A->N, C = A->C;
  float *full = A->s->full;
  tp_allgather_rows(m, full, dout_local, A->Nl, C);
  float *dtable = m->grads + A->embed;
  for (int n = 0; n < N; n++) {
    const int row = A->tokens[n] - A->vocab0;
    if (row < 0 || row >= A->V) continue;
    float *dst = dtable + (size_t)row * C;
    const float *src = full + (size_t)n * C;
    for (int c = 0; c < C; c++) dst[c] += src[c];
  }
}

void tp_lmhead_xent(Model *m, ModelActs *A, const int *targets, float grad_scale, double *loss_sum, long *count,
                    int training) {
  const XentVpReduce reduce = {m->ops->ctx, m->ops->allreduce_max, m->ops->allreduce_sum};
  ModelScratch *S = A->s;
  lmhead_xent_vp(A->lnf, m->params + A->lm_head, targets, A->N, A->C, A->V, A->vocab0, grad_scale, loss_sum, count,
                 training ? S->full : NULL, training ? m->grads + A->lm_head : NULL, S->xent_scratch, S->xent_chunk,
                 &reduce);
  /* The gathered rows' gradient is a sum over the vocabulary shards. */
  if (training) tp_reduce_scatter_rows(m, A->dlnf, S->full, A->Nl, A->C);
}
