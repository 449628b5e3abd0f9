/* Forward and backward passes of the whole model and of one block:
 *   x += wo . attn(rope(q, k), v) of rmsnorm(x)
 *   x += mlp(rmsnorm(x))  or  moe(rmsnorm(x))
 * then the final norm and the fused LM head + cross-entropy, whose gradient
 * is produced during a training forward. Nothing here allocates. */
#include <string.h>

#include "kern/attention.h"
#include "kern/cross_entropy.h"
#include "kern/embedding.h"
#include "kern/gemm.h"
#include "kern/rmsnorm.h"
#include "kern/rope.h"
#include "kern/vecops.h"
#include "model/model.h"
#include "model/model_internal.h"

static int is_moe(const Model *m, int l) { return m->acts->moe.E > 0 && m->cfg.is_moe_layer[l]; }

static MoeLayerParams moe_params(const Model *m, const LayerTensors *t) {
  MoeLayerParams p = {m->params + t->router, m->params + t->experts_gate_up, m->params + t->experts_down, NULL, NULL};
  if (t->shared_gate_up != NO_TENSOR) {
    p.shared_gate_up = m->params + t->shared_gate_up;
    p.shared_down = m->params + t->shared_down;
  }
  return p;
}

static MoeLayerGrads moe_grads(const Model *m, const LayerTensors *t) {
  MoeLayerGrads g = {m->grads + t->router, m->grads + t->experts_gate_up, m->grads + t->experts_down, NULL, NULL};
  if (t->shared_gate_up != NO_TENSOR) {
    g.shared_gate_up = m->grads + t->shared_gate_up;
    g.shared_down = m->grads + t->shared_down;
  }
  return g;
}

void block_forward(Model *m, int l, double *aux, double *z) {
  ModelActs *A = m->acts;
  LayerActs *la = &A->layers[l];
  const LayerTensors *t = &A->lt[l];
  const float *P = m->params;
  const int N = A->N, C = A->C;
  const size_t NC = (size_t)N * C;
  const float eps = m->cfg.rms_norm_eps;

  rmsnorm_forward(la->ln1, la->rstd1, la->res_attn, P + t->attn_norm, N, C, eps);
  linear_forward(la->q, la->ln1, P + t->wq, N, C, A->QD, 0);
  linear_forward(la->k, la->ln1, P + t->wk, N, C, A->KVD, 0);
  linear_forward(la->v, la->ln1, P + t->wv, N, C, A->KVD, 0);
  rope_forward(la->q, A->pos, N, A->Hq, A->D, A->rope_cos, A->rope_sin);
  rope_forward(la->k, A->pos, N, A->Hkv, A->D, A->rope_cos, A->rope_sin);
  attention_forward(la->att, la->lse, la->q, la->k, la->v, A->B, A->T, A->Hq, A->Hkv, A->D);
  vec_copy(la->res_mlp, la->res_attn, NC);
  linear_forward(la->res_mlp, la->att, P + t->wo, N, A->QD, C, 1);

  rmsnorm_forward(la->ln2, la->rstd2, la->res_mlp, P + t->mlp_norm, N, C, eps);
  float *out = l + 1 < A->L ? A->layers[l + 1].res_attn : A->final_in;
  vec_copy(out, la->res_mlp, NC);
  if (is_moe(m, l)) {
    MoeLayerParams p = moe_params(m, t);
    double layer_aux = 0, layer_z = 0;
    moe_layer_forward(out, &la->moe, &A->scratch, la->ln2, &p, N, &A->moe, &layer_aux, &layer_z);
    *aux += layer_aux;
    *z += layer_z;
    for (int e = 0; e < A->moe.E; e++) m->expert_counts[(size_t)l * A->moe.E + e] = la->moe.routing.counts[e];
    m->dropped_assignments += la->moe.perm.dropped;
  } else {
    swiglu_mlp_forward(out, 1, la->mlp_h, A->scratch.a, la->ln2, P + t->mlp_gate_up, P + t->mlp_down, N, C, A->F);
  }
}

/* On entry A->dres is the gradient of the block's output; on exit, of its
 * input. */
void block_backward(Model *m, int l) {
  ModelActs *A = m->acts;
  LayerActs *la = &A->layers[l];
  const LayerTensors *t = &A->lt[l];
  const float *P = m->params;
  float *G = m->grads;
  const int N = A->N, C = A->C;
  MoeScratch *s = &A->scratch;

  if (is_moe(m, l)) {
    MoeLayerParams p = moe_params(m, t);
    MoeLayerGrads g = moe_grads(m, t);
    moe_layer_backward(A->dln, &g, s, A->dres, &la->moe, la->ln2, &p, N, &A->moe, A->grad_scale);
  } else {
    swiglu_mlp_backward(A->dln, 0, G + t->mlp_gate_up, G + t->mlp_down, A->dres, la->ln2, la->mlp_h, s->a, s->da, s->dh,
                        P + t->mlp_gate_up, P + t->mlp_down, N, C, A->F);
  }
  rmsnorm_backward(A->dres, G + t->mlp_norm, A->dln, la->res_mlp, P + t->mlp_norm, la->rstd2, N, C);

  linear_backward(A->datt, G + t->wo, A->dres, la->att, P + t->wo, N, A->QD, C, 0);
  attention_backward(A->dq, A->dk, A->dv, A->datt, la->att, la->lse, la->q, la->k, la->v, A->B, A->T, A->Hq, A->Hkv,
                     A->D);
  rope_backward(A->dq, A->pos, N, A->Hq, A->D, A->rope_cos, A->rope_sin);
  rope_backward(A->dk, A->pos, N, A->Hkv, A->D, A->rope_cos, A->rope_sin);
  linear_backward(A->dln, G + t->wq, A->dq, la->ln1, P + t->wq, N, C, A->QD, 0);
  linear_backward(A->dln, G + t->wk, A->dk, la->ln1, P + t->wk, N, C, A->KVD, 1);
  linear_backward(A->dln, G + t->wv, A->dv, la->ln1, P + t->wv, N, C, A->KVD, 1);
  rmsnorm_backward(A->dres, G + t->attn_norm, A->dln, la->res_attn, P + t->attn_norm, la->rstd1, N, C);
}

int model_forward(Model *m, const int *tokens, const int *targets, int B, int T, int training, float grad_scale,
                  ModelLoss *loss, Error *err) {
  ModelActs *A = m->acts;
  if (B < 1 || T < 1 || B > m->max_B || T > m->max_T)
    return error_set(err, ERR_ARG, "model_forward: batch %d x sequence %d exceeds the model's buffers (%d x %d)", B, T,
                     m->max_B, m->max_T);
  const int N = B * T, V = A->V, C = A->C;
  for (int n = 0; n < N; n++) {
    if (tokens[n] < 0 || tokens[n] >= V)
      return error_set(err, ERR_ARG, "model_forward: token %d at position %d is outside the vocabulary (0..%d)",
                       tokens[n], n, V - 1);
    if (targets && targets[n] >= V)
      return error_set(err, ERR_ARG, "model_forward: target %d at position %d is outside the vocabulary (0..%d)",
                       targets[n], n, V - 1);
  }
  A->B = B;
  A->T = T;
  A->N = N;
  A->training_pending = 0;
  A->grad_scale = grad_scale;
  memcpy(A->tokens, tokens, (size_t)N * sizeof *tokens);
  for (int n = 0; n < N; n++) A->pos[n] = n % T;
  if (A->moe.E > 0) memset(m->expert_counts, 0, (size_t)A->L * A->moe.E * sizeof *m->expert_counts);
  m->dropped_assignments = 0;

  embedding_forward(A->layers[0].res_attn, A->tokens, m->params + A->embed, N, C);
  double aux = 0, z = 0;
  for (int l = 0; l < A->L; l++) block_forward(m, l, &aux, &z);
  rmsnorm_forward(A->lnf, A->rstdf, A->final_in, m->params + A->final_norm, N, C, m->cfg.rms_norm_eps);

  double loss_sum = 0;
  long count = 0;
  if (targets)
    for (int n = 0; n < N; n++) count += targets[n] >= 0;
  if (count > 0) {
    float *dh = training ? A->dlnf : NULL;
    float *dw = training ? m->grads + A->lm_head : NULL;
    long counted = 0;
    lmhead_xent(A->lnf, m->params + A->lm_head, targets, N, C, V, grad_scale / (float)count, &loss_sum, &counted, NULL,
                dh, dw, A->xent_scratch, A->xent_chunk);
  } else if (training) {
    vec_zero(A->dlnf, (size_t)N * C);
  }
  if (loss) {
    loss->lm = count > 0 ? loss_sum / (double)count : 0.0;
    loss->aux = aux;
    loss->z = z;
    loss->tokens = count;
  }
  A->training_pending = training != 0;
  return 0;
}

/* Reports [begin, end) of the gradient buffer as final (model.h). */
static void grads_ready(Model *m, size_t begin, size_t end) {
  if (m->on_grads_ready && end > begin) m->on_grads_ready(m->on_grads_ready_ctx, begin, end - begin);
}

/* First parameter offset of block l (its first tensor is attn_norm); the
 * final norm for l = L. */
static size_t block_begin(const Model *m, int l) {
  return l < m->acts->L ? m->acts->lt[l].attn_norm : m->acts->final_norm;
}

int model_backward(Model *m, Error *err) {
  ModelActs *A = m->acts;
  if (!A->training_pending)
    return error_set(err, ERR_ARG,
                     "model_backward: no training forward to differentiate (call model_forward with "
                     "training = 1 first)");
  const int N = A->N, C = A->C;
  vec_zero(A->dres, (size_t)N * C);
  rmsnorm_backward(A->dres, m->grads + A->final_norm, A->dlnf, A->final_in, m->params + A->final_norm, A->rstdf, N, C);
  grads_ready(m, A->final_norm, m->num_params);
  for (int l = A->L - 1; l >= 0; l--) {
    block_backward(m, l);
    grads_ready(m, block_begin(m, l), block_begin(m, l + 1));
  }
  embedding_backward(m->grads + A->embed, A->tokens, A->dres, N, C);
  grads_ready(m, 0, block_begin(m, 0));
  A->training_pending = 0;
  return 0;
}

int model_logits(Model *m, const int *tokens, int B, int T, float *logits, Error *err) {
  if (model_forward(m, tokens, NULL, B, T, 0, 1.0f, NULL, err)) return err ? err->code : ERR_ARG;
  ModelActs *A = m->acts;
  linear_forward(logits, A->lnf, m->params + A->lm_head, A->N, A->C, A->V, 0);
  return 0;
}
