/* The key/value-cached forward of new positions (model_decode.h): per
 * layer, the new rows' norm and q/k/v projections, RoPE (or GPT-2's
 * biases), the keys and values appended to the cache, attention of the new
 * queries over every cached key (the flash kernel's block form with query
 * positions), and the rest of the block as in model_pass.c on the new rows
 * only. The buffers are the model's own activation arena, sized for max_T
 * rows, so decoding allocates nothing. */
#include "model/model_decode.h"

#include <stdlib.h>
#include <string.h>

#include "kern/attention.h"
#include "kern/embedding.h"
#include "kern/gelu.h"
#include "kern/gemm.h"
#include "kern/layernorm.h"
#include "kern/rmsnorm.h"
#include "kern/rope.h"
#include "kern/vecops.h"
#include "model/model_internal.h"
#include "model/moe.h"

int model_kv_cache_supported(const Model *m, Error *err) {
  const ModelShard *s = &m->shard;
  if (s->tp_size > 1 || s->cp_size > 1 || s->ep_size * s->etp_size > 1 || s->num_chunks != 1 ||
      !s->has_embedding[0] || !s->has_head[0])
    return error_set(err, ERR_ARG,
                     "key/value cache: needs a whole-model shard (tp, cp, ep, etp 1 and one chunk with embedding "
                     "and head)");
  if (m->cfg.num_experts > 0 && m->cfg.capacity_factor > 0)
    return error_set(err, ERR_ARG,
                     "key/value cache: an expert capacity factor (%g) makes routing depend on the whole forward; "
                     "decode without the cache",
                     (double)m->cfg.capacity_factor);
  return 0;
}

int model_kv_cache_create(ModelKvCache *c, const Model *m, Error *err) {
  memset(c, 0, sizeof *c);
  if (model_kv_cache_supported(m, err)) return ERR_ARG;
  c->capacity = m->max_T;
  if (m->cfg.gpt2 && c->capacity > m->cfg.max_position_embeddings) c->capacity = m->cfg.max_position_embeddings;
  c->L = m->cfg.num_layers;
  c->KVD = m->acts->KVD;
  const size_t n = (size_t)c->L * c->capacity * c->KVD;
  c->k = malloc(n * sizeof *c->k);
  c->v = malloc(n * sizeof *c->v);
  c->pos = malloc((size_t)c->capacity * sizeof *c->pos);
  if (!c->k || !c->v || !c->pos) {
    model_kv_cache_free(c);
    return error_set(err, ERR_NOMEM, "key/value cache: out of memory for %d layers x %d positions x %d floats (x2)",
                     m->cfg.num_layers, m->max_T, m->acts->KVD);
  }
  return 0;
}

void model_kv_cache_free(ModelKvCache *c) {
  if (!c) return;
  free(c->k);
  free(c->v);
  free(c->pos);
  memset(c, 0, sizeof *c);
}

void model_kv_cache_reset(ModelKvCache *c) { c->len = 0; }

static void norm_rows(const Model *m, float *out, float *rstd, const float *x, size_t w, size_t b, int n) {
  const float *P = m->params;
  const int C = m->cfg.hidden_size;
  if (b != NO_TENSOR)
    layernorm_forward(out, rstd, x, P + w, P + b, n, C, m->cfg.rms_norm_eps);
  else
    rmsnorm_forward(out, rstd, x, P + w, n, C, m->cfg.rms_norm_eps);
}

/* x [n, C] (the residual stream of the new rows) through block l, in place. */
static void decode_block(Model *m, ModelKvCache *c, int l, float *x, int n) {
  ModelActs *A = m->acts;
  LayerActs *la = &A->layers[l];
  const LayerTensors *t = &A->lt[l];
  ModelScratch *S = A->s;
  const float *P = m->params;
  const int C = A->C, QD = A->QD, KVD = A->KVD, p0 = c->len, Tk = p0 + n;
  float *kc = c->k + ((size_t)l * c->capacity) * KVD, *vc = c->v + ((size_t)l * c->capacity) * KVD;
  float *knew = kc + (size_t)p0 * KVD, *vnew = vc + (size_t)p0 * KVD;

  norm_rows(m, la->ln1, la->rstd1, x, t->attn_norm, t->attn_norm_bias, n);
  linear_forward(la->q, la->ln1, P + t->wq, n, C, QD, 0);
  linear_forward(knew, la->ln1, P + t->wk, n, C, KVD, 0);
  linear_forward(vnew, la->ln1, P + t->wv, n, C, KVD, 0);
  if (t->bq != NO_TENSOR) {
    bias_add_rows(la->q, P + t->bq, n, QD);
    bias_add_rows(knew, P + t->bk, n, KVD);
    bias_add_rows(vnew, P + t->bv, n, KVD);
  }
  if (!m->cfg.gpt2) {
    rope_forward(la->q, c->pos + p0, n, A->Hq, A->D, A->rope_cos, A->rope_sin);
    rope_forward(knew, c->pos + p0, n, A->Hkv, A->D, A->rope_cos, A->rope_sin);
  }
  /* Key j is visible from the query at position p when j <= p. */
  attention_forward_block(la->att, la->lse, la->q, c->pos + p0, n, kc, vc, c->pos, Tk, 1, A->Hq, A->Hkv, A->D);
  linear_forward(x, la->att, P + t->wo, n, QD, C, 1);
  if (t->bo != NO_TENSOR) bias_add_rows(x, P + t->bo, n, C);

  norm_rows(m, la->ln2, la->rstd2, x, t->mlp_norm, t->mlp_norm_bias, n);
  if (m->cfg.gpt2) {
    gelu_mlp_forward(x, 1, la->mlp_h, S->moe.a, la->ln2, P + t->mlp_fc, P + t->mlp_fc_bias, P + t->mlp_proj, n, C,
                     A->F);
    bias_add_rows(x, P + t->mlp_proj_bias, n, C);
  } else if (A->moe.E > 0 && m->cfg.is_moe_layer[l]) {
    MoeLayerParams p = {P + t->router, P + t->experts_gate_up, P + t->experts_down, NULL, NULL};
    if (t->shared_gate_up != NO_TENSOR) {
      p.shared_gate_up = P + t->shared_gate_up;
      p.shared_down = P + t->shared_down;
    }
    double aux = 0, z = 0;
    moe_layer_forward(x, &la->moe, &S->moe, la->ln2, &p, n, &A->moe, &aux, &z);
  } else {
    swiglu_mlp_forward(x, 1, la->mlp_h, S->moe.a, la->ln2, P + t->mlp_gate_up, P + t->mlp_down, n, C, A->F);
  }
}

int model_decode(Model *m, ModelKvCache *c, const int *tokens, int n, float *logits, Error *err) {
  if (model_kv_cache_supported(m, err)) return ERR_ARG;
  if (n < 1 || c->len + n > c->capacity)
    return error_set(err, ERR_ARG, "model_decode: %d new positions after %d do not fit the cache of %d", n, c->len,
                     c->capacity);
  const int V = m->cfg.vocab_size, C = m->cfg.hidden_size;
  for (int i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= V)
      return error_set(err, ERR_ARG, "model_decode: token %d is id %d, outside the vocabulary 0..%d", i, tokens[i],
                       V - 1);
  ModelActs *A = m->acts;
  A->training_pending = 0; /* the activation buffers are reused */
  for (int i = 0; i < c->len + n; i++) c->pos[i] = i;
  /* The residual stream of the new rows lives in the model's dres buffer
   * ([max_N, C]), free outside backward. */
  float *x = A->dres;
  embedding_forward(x, tokens, m->params + A->embed, n, C);
  if (A->pos_embed != NO_TENSOR)
    for (int i = 0; i < n; i++)
      vec_acc(x + (size_t)i * C, m->params + A->pos_embed + (size_t)(c->len + i) * C, (size_t)C);
  for (int l = 0; l < m->cfg.num_layers; l++) decode_block(m, c, l, x, n);
  const float *last = x + (size_t)(n - 1) * C;
  float rstd;
  norm_rows(m, A->lnf, &rstd, last, A->final_norm, A->final_norm_bias, 1);
  linear_forward(logits, A->lnf, m->params + A->lm_head, 1, C, V, 0);
  c->len += n;
  return 0;
}
