/* The split backward of zero-bubble pipeline orders (model.h,
 * model_chunk_backward_input / model_chunk_backward_weights): the first
 * part is block_backward with its weight GEMMs left out (model_pass.c,
 * ModelActs.deferring), the second runs exactly those GEMMs here from the
 * output gradients the first kept and the activations the forward kept.
 * Each deferred GEMM is the very call the unsplit backward makes
 * (linear_backward with dx NULL computes only dw += dy^T x), so the
 * weight gradients are bit-identical; only when they run moves. */
#include "base/op_probe.h"
#include "kern/gemm.h"
#include "kern/swiglu.h"
#include "model/model.h"
#include "model/model_internal.h"

void block_backward_weights(Model *m, ModelActs *A, int l) {
  LayerActs *la = &A->layers[l];
  const LayerTensors *t = &A->lt[l];
  const float *P = m->params;
  float *G = m->grads;
  const int N = A->N, C = A->C;
  if (!la->keep_datt) return; /* a recomputed block: nothing was deferred */
  OP_PROBE_LAYER(l);
  if (la->keep_dh) {
    /* Under selective recomputation the norm output and h are rebuilt
     * first: other micro-batches have used the shared buffers since. */
    selective_rebuild_norm(m, A, l, 2);
    selective_rebuild_h(m, A, l);
    /* The SwiGLU output is recomputed from h, as the unsplit backward does. */
    float *a = A->s->moe.a;
    OP_PROBED(OP_PROBE_SWIGLU, swiglu_forward(a, la->mlp_h, N, A->F));
    OP_PROBED_GEMM(N, C, A->F, linear_backward(NULL, G + t->mlp_down, la->keep_dmlp, a, P + t->mlp_down, N, A->F, C, 0));
    OP_PROBED_GEMM(N, 2 * A->F, C,
                   linear_backward(NULL, G + t->mlp_gate_up, la->keep_dh, la->ln2, P + t->mlp_gate_up, N, C, 2 * A->F, 0));
  }
  OP_PROBED_GEMM(N, C, A->QD, linear_backward(NULL, G + t->wo, la->keep_datt, la->att, P + t->wo, N, A->QD, C, 0));
  selective_rebuild_norm(m, A, l, 1);
  OP_PROBED_GEMM(N, A->QD, C, linear_backward(NULL, G + t->wq, la->keep_dq, la->ln1, P + t->wq, N, C, A->QD, 0));
  OP_PROBED_GEMM(N, A->KVD, C, linear_backward(NULL, G + t->wk, la->keep_dk, la->ln1, P + t->wk, N, C, A->KVD, 0));
  OP_PROBED_GEMM(N, A->KVD, C, linear_backward(NULL, G + t->wv, la->keep_dv, la->ln1, P + t->wv, N, C, A->KVD, 0));
}

static int check_split(const Model *m, int chunk, int slot, const char *who, Error *err) {
  if (!m->shard.split_backward)
    return error_set(err, ERR_ARG, "%s: the model shard was made without split_backward (a split backward keeps more per slot)",
                     who);
  if (chunk < 0 || chunk >= m->shard.num_chunks || slot < 0 || slot >= m->shard.num_slots)
    return error_set(err, ERR_ARG, "%s: chunk %d slot %d is out of range (%d chunks, %d slots)", who, chunk, slot,
                     m->shard.num_chunks, m->shard.num_slots);
  return 0;
}

int model_chunk_backward_input(Model *m, int chunk, int slot, const float *dy, Error *err) {
  const char *who = "model_chunk_backward_input";
  if (check_split(m, chunk, slot, who, err)) return ERR_ARG;
  return chunk_backward_pass(m, chunk, slot, dy, 1, who, err);
}

int model_chunk_backward_weights(Model *m, int chunk, int slot, Error *err) {
  const char *who = "model_chunk_backward_weights";
  if (check_split(m, chunk, slot, who, err)) return ERR_ARG;
  ModelActs *A = model_acts(m, chunk, slot);
  if (!A->weights_pending)
    return error_set(err, ERR_ARG, "%s: chunk %d slot %d has no split backward awaiting its weight gradients", who, chunk,
                     slot);
  if (A->split_ok)
    for (int l = A->layer_end - 1; l >= A->layer_begin; l--) block_backward_weights(m, A, l);
  A->weights_pending = 0;
  chunk_report_grads(m, A);
  return 0;
}
