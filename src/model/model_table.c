/* The parameter table of a shard: which tensors one rank holds, in which
 * order (chunk by chunk), their local shapes under tensor parallelism and
 * where each sits in its full logical tensor (ParamTensor.view_*), plus
 * the validation of a ModelShard against a config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/model_internal.h"
#include "model/model_table.h"

void model_shard_default(const ModelConfig *cfg, ModelShard *shard) {
  memset(shard, 0, sizeof *shard);
  shard->tp_size = 1;
  shard->tp_rank = 0;
  shard->num_chunks = 1;
  shard->layer_begin[0] = 0;
  shard->layer_end[0] = cfg->num_layers;
  shard->has_embedding[0] = 1;
  shard->has_head[0] = 1;
  shard->num_slots = 1;
  shard->cp_size = 1;
  shard->ep_size = 1;
  shard->etp_size = 1;
  shard->moe_dispatcher = MODEL_MOE_ALLTOALL;
}

static int size_or_one(int n) { return n == 0 ? 1 : n; }

static int has_dense_layer(const ModelConfig *c) {
  for (int l = 0; l < c->num_layers; l++)
    if (!(c->num_experts > 0 && c->is_moe_layer[l])) return 1;
  return 0;
}

int model_shard_dims(const ModelConfig *c, const ModelShard *sh, ShardDims *d, Error *err) {
  const int t = sh->tp_size, r = sh->tp_rank, L = c->num_layers;
  memset(d, 0, sizeof *d);
  if (t < 1 || r < 0 || r >= t)
    return error_set(err, ERR_CONFIG, "model shard: tp_rank %d of tp_size %d is out of range (need 0 <= rank < size)",
                     r, t);
  if (sh->num_chunks < 1 || sh->num_chunks > MODEL_MAX_CHUNKS)
    return error_set(err, ERR_CONFIG, "model shard: num_chunks %d is out of range (1..%d, MODEL_MAX_CHUNKS)",
                     sh->num_chunks, MODEL_MAX_CHUNKS);
  if (sh->num_slots < 1 || sh->num_slots > 4096)
    return error_set(err, ERR_CONFIG, "model shard: num_slots %d is out of range (1..4096)", sh->num_slots);
  if (sh->recompute_method < MODEL_RECOMPUTE_NONE || sh->recompute_method > MODEL_RECOMPUTE_BLOCK)
    return error_set(err, ERR_CONFIG, "model shard: recompute_method %d is not none (0), uniform (1) or block (2)",
                     sh->recompute_method);
  if (sh->recompute_num_layers < 0 || sh->recompute_num_layers > MODEL_MAX_LAYERS)
    return error_set(err, ERR_CONFIG, "model shard: recompute_num_layers %d is out of range (0..%d)",
                     sh->recompute_num_layers, MODEL_MAX_LAYERS);
  if (sh->recompute_modules & ~(unsigned)(MODEL_RECOMPUTE_LAYERNORM_BIT | MODEL_RECOMPUTE_MLP_BIT))
    return error_set(err, ERR_CONFIG, "model shard: recompute_modules 0x%x has bits other than layernorm (1) and mlp (2)",
                     sh->recompute_modules);
  if (sh->recompute_modules && sh->recompute_method != MODEL_RECOMPUTE_NONE)
    return error_set(err, ERR_CONFIG,
                     "model shard: recompute_modules (selective recomputation) with recompute_method %d (full "
                     "recomputation): give one of them",
                     sh->recompute_method);
  int embed_chunks = 0, head_chunks = 0;
  for (int i = 0; i < sh->num_chunks; i++) {
    const int b = sh->layer_begin[i], e = sh->layer_end[i];
    if (b < 0 || e > L || b > e)
      return error_set(err, ERR_CONFIG, "model shard: chunk %d holds layers [%d, %d), outside [0, %d) or reversed", i,
                       b, e, L);
    for (int j = 0; j < i; j++) {
      const int bj = sh->layer_begin[j], ej = sh->layer_end[j];
      if (b < ej && bj < e)
        return error_set(err, ERR_CONFIG, "model shard: chunk %d layers [%d, %d) overlap chunk %d layers [%d, %d)", i,
                         b, e, j, bj, ej);
    }
    if (sh->has_embedding[i]) {
      embed_chunks++;
      if (b != 0)
        return error_set(err, ERR_CONFIG, "model shard: chunk %d has the embedding but starts at layer %d (not 0)", i,
                         b);
    }
    if (sh->has_head[i]) {
      head_chunks++;
      if (e != L)
        return error_set(err, ERR_CONFIG, "model shard: chunk %d has the LM head but ends at layer %d (not %d)", i, e,
                         L);
    }
  }
  if (embed_chunks > 1 || head_chunks > 1)
    return error_set(err, ERR_CONFIG, "model shard: %d chunks have the embedding and %d the head (at most one each)",
                     embed_chunks, head_chunks);
  const int Hq = c->num_heads, Hkv = model_config_kv_heads(c), D = model_config_head_dim(c);
  if (Hq % t)
    return error_set(err, ERR_CONFIG, "model shard: num_attention_heads %d is not divisible by tp_size %d", Hq, t);
  if (c->vocab_size % t)
    return error_set(err, ERR_CONFIG, "model shard: vocab_size %d is not divisible by tp_size %d", c->vocab_size, t);
  if (has_dense_layer(c) && c->intermediate_size % t)
    return error_set(err, ERR_CONFIG, "model shard: intermediate_size %d is not divisible by tp_size %d",
                     c->intermediate_size, t);
  d->t = t;
  d->r = r;
  d->D = D;
  d->Hq = Hq / t;
  d->q_head0 = r * d->Hq;
  if (Hkv % t == 0) {
    d->Hkv = Hkv / t;
    d->kv_head0 = r * d->Hkv;
    d->kv_ranks = 1;
  } else {
    const int group = Hq / Hkv; /* query heads per KV head */
    if (group % d->Hq)
      return error_set(err, ERR_CONFIG,
                       "model shard: the %d query heads of a TP rank (of %d, tp_size %d) do not map onto whole KV "
                       "heads (%d KV heads, %d query heads each); num_key_value_heads must be divisible by tp_size or "
                       "a rank's query heads must lie in one KV head",
                       d->Hq, Hq, t, Hkv, group);
    d->Hkv = 1;
    d->kv_head0 = d->q_head0 / group;
    d->kv_ranks = group / d->Hq;
  }
  if ((c->qkv_bias || c->gpt2) && d->kv_ranks > 1)
    return error_set(err, ERR_CONFIG,
                     "model shard: q/k/v biases with KV heads shared by %d TP ranks are not supported "
                     "(num_key_value_heads %d must be divisible by tp_size %d)",
                     d->kv_ranks, Hkv, t);
  d->F = has_dense_layer(c) ? c->intermediate_size / t : c->intermediate_size;
  d->V = c->vocab_size / t;
  d->vocab0 = r * d->V;
  d->embedding_here = 0;
  for (int i = 0; i < sh->num_chunks; i++) d->embedding_here |= sh->has_embedding[i] != 0;

  d->cp = size_or_one(sh->cp_size);
  d->ep = size_or_one(sh->ep_size);
  d->etp = size_or_one(sh->etp_size);
  d->cp_rank = sh->cp_rank;
  d->ep_rank = sh->ep_rank;
  d->etp_rank = sh->etp_rank;
  d->dispatcher = sh->moe_dispatcher;
  const struct {
    const char *what;
    int size, rank;
  } grid[] = {{"cp", d->cp, d->cp_rank}, {"ep", d->ep, d->ep_rank}, {"etp", d->etp, d->etp_rank}};
  for (size_t i = 0; i < sizeof grid / sizeof grid[0]; i++)
    if (grid[i].size < 1 || grid[i].rank < 0 || grid[i].rank >= grid[i].size)
      return error_set(err, ERR_CONFIG,
                       "model shard: %s_rank %d of %s_size %d is out of range (need 0 <= rank < size, size >= 1)",
                       grid[i].what, grid[i].rank, grid[i].what, grid[i].size);
  if (d->dispatcher != MODEL_MOE_ALLTOALL && d->dispatcher != MODEL_MOE_ALLGATHER)
    return error_set(err, ERR_CONFIG, "model shard: moe_dispatcher %d is unknown (0: all-to-all, 1: all-gather)",
                     d->dispatcher);
  const int has_moe = c->num_experts > 0 && model_config_num_moe_layers(c) > 0;
  if (has_moe && c->num_experts % d->ep)
    return error_set(err, ERR_CONFIG, "model shard: num_experts %d is not divisible by ep_size %d", c->num_experts,
                     d->ep);
  if (has_moe && c->moe_intermediate_size % d->etp)
    return error_set(err, ERR_CONFIG, "model shard: moe_intermediate_size %d is not divisible by etp_size %d",
                     c->moe_intermediate_size, d->etp);
  d->moe_folded = has_moe && (d->ep * d->etp > 1 || d->cp > 1);
  d->El = has_moe ? c->num_experts / d->ep : 0;
  d->Fl = has_moe ? c->moe_intermediate_size / d->etp : 0;
  return 0;
}

/* ------------------------------------------------------------ the table */

enum { NORM = 1, EXPERT = 2, SPLIT = 4, TIED_COPY = 8, EDP = 16, BIAS = 32 };

typedef struct TensorSpec {
  const char *name;
  int ndim, shape[4]; /* local */
  int global_shape[4];
  int view_ndim, view_shape[4], view_start[4], view_count[4];
  int flags, tp_ranks; /* tp_ranks: TP ranks that hold this same slice */
} TensorSpec;

static size_t add(TableBuilder *b, const TensorSpec *s) {
  size_t numel = 1;
  for (int i = 0; i < s->ndim; i++) numel *= (size_t)s->shape[i];
  const size_t offset = b->total;
  if (b->t) {
    ParamTensor *t = &b->t[b->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", s->name);
    t->ndim = s->ndim;
    for (int i = 0; i < s->ndim; i++) {
      t->shape[i] = s->shape[i];
      t->global_shape[i] = s->global_shape[i];
    }
    t->view_ndim = s->view_ndim;
    for (int i = 0; i < s->view_ndim; i++) {
      t->view_shape[i] = s->view_shape[i];
      t->view_start[i] = s->view_start[i];
      t->view_count[i] = s->view_count[i];
    }
    t->offset = offset;
    t->numel = numel;
    t->no_weight_decay = (s->flags & (NORM | BIAS)) != 0;
    t->is_bias = (s->flags & BIAS) != 0;
    t->is_expert = (s->flags & EXPERT) != 0;
    t->tied_copy = (s->flags & TIED_COPY) != 0;
    t->tp_ranks = s->tp_ranks;
    t->tp_replicated = s->tp_ranks == b->dims->t;
    t->reduce_over_edp = (s->flags & EDP) != 0;
  }
  b->n++;
  b->total += numel;
  return offset;
}

/* A tensor every TP rank holds whole. */
static size_t add_full(TableBuilder *b, const char *name, int ndim, int d0, int d1, int d2, int flags) {
  TensorSpec s = {name, ndim, {d0, d1, d2}, {d0, d1, d2}, ndim, {d0, d1, d2}, {0, 0, 0}, {d0, d1, d2}, flags,
                  b->dims->t};
  return add(b, &s);
}

/* Rows [start, start + count) of [rows, cols]. */
static size_t add_rows(TableBuilder *b, const char *name, int rows, int cols, int start, int count, int ranks,
                       int flags) {
  TensorSpec s = {name, 2, {count, cols, 0}, {rows, cols, 0}, 2, {rows, cols, 0}, {start, 0, 0}, {count, cols, 0},
                  flags, ranks};
  return add(b, &s);
}

/* Columns [start, start + count) of [rows, cols]. */
static size_t add_cols(TableBuilder *b, const char *name, int rows, int cols, int start, int count) {
  TensorSpec s = {name, 2, {rows, count, 0}, {rows, cols, 0}, 2, {rows, cols, 0}, {0, start, 0}, {rows, count, 0}, 0,
                  1};
  return add(b, &s);
}

/* Entries [start, start + count) of a vector of n (a column-parallel
 * layer's bias). */
static size_t add_vec_part(TableBuilder *b, const char *name, int n, int start, int count, int ranks) {
  TensorSpec s = {name, 1, {count, 0, 0}, {n, 0, 0}, 1, {n, 0, 0}, {start, 0, 0}, {count, 0, 0}, BIAS, ranks};
  return add(b, &s);
}

/* The fused [gate; up] projection [2F, C]: this rank's F/t gate rows, then
 * its F/t up rows (the view [2, F, C]). */
static size_t add_gate_up(TableBuilder *b, const char *name, int F, int C, int start, int count) {
  if (b->dims->t == 1) return add_full(b, name, 2, 2 * F, C, 0, 0);
  TensorSpec s = {name, 2, {2 * count, C, 0}, {2 * F, C, 0}, 3, {2, F, C}, {0, start, 0}, {2, count, C}, 0, 1};
  return add(b, &s);
}

static void add_block(const ModelConfig *c, TableBuilder *b, int l, LayerTensors *out) {
  const ShardDims *d = b->dims;
  const int C = c->hidden_size, D = d->D, t = d->t;
  const int QD = c->num_heads * D, KVD = model_config_kv_heads(c) * D;
  const int F = c->intermediate_size;
  char name[96];
  LayerTensors lt;
  for (size_t *p = (size_t *)&lt; p < (size_t *)(&lt + 1); p++) *p = NO_TENSOR;
#define NAME(suffix) (snprintf(name, sizeof name, "layers.%d.%s", l, suffix), name)
  lt.attn_norm = add_full(b, NAME("attn_norm.weight"), 1, C, 0, 0, NORM);
  if (c->gpt2) lt.attn_norm_bias = add_full(b, NAME("attn_norm.bias"), 1, C, 0, 0, BIAS);
  lt.wq = add_rows(b, NAME("attn.wq"), QD, C, d->q_head0 * D, d->Hq * D, 1, 0);
  if (c->qkv_bias || c->gpt2) lt.bq = add_vec_part(b, NAME("attn.bq"), QD, d->q_head0 * D, d->Hq * D, 1);
  lt.wk = add_rows(b, NAME("attn.wk"), KVD, C, d->kv_head0 * D, d->Hkv * D, d->kv_ranks, 0);
  if (c->qkv_bias || c->gpt2) lt.bk = add_vec_part(b, NAME("attn.bk"), KVD, d->kv_head0 * D, d->Hkv * D, d->kv_ranks);
  lt.wv = add_rows(b, NAME("attn.wv"), KVD, C, d->kv_head0 * D, d->Hkv * D, d->kv_ranks, 0);
  if (c->qkv_bias || c->gpt2) lt.bv = add_vec_part(b, NAME("attn.bv"), KVD, d->kv_head0 * D, d->Hkv * D, d->kv_ranks);
  lt.wo = add_cols(b, NAME("attn.wo"), C, QD, d->q_head0 * D, d->Hq * D);
  /* A row-parallel layer's bias is replicated and added once, after the sum. */
  if (c->o_bias || c->gpt2) lt.bo = add_full(b, NAME("attn.bo"), 1, C, 0, 0, BIAS);
  lt.mlp_norm = add_full(b, NAME("mlp_norm.weight"), 1, C, 0, 0, NORM);
  if (c->gpt2) lt.mlp_norm_bias = add_full(b, NAME("mlp_norm.bias"), 1, C, 0, 0, BIAS);
  if (c->gpt2) {
    lt.mlp_fc = add_rows(b, NAME("mlp.w_fc"), F, C, d->r * (F / t), F / t, 1, 0);
    lt.mlp_fc_bias = add_vec_part(b, NAME("mlp.b_fc"), F, d->r * (F / t), F / t, 1);
    lt.mlp_proj = add_cols(b, NAME("mlp.w_proj"), C, F, d->r * (F / t), F / t);
    lt.mlp_proj_bias = add_full(b, NAME("mlp.b_proj"), 1, C, 0, 0, BIAS);
  } else if (c->num_experts > 0 && c->is_moe_layer[l]) {
    const int E = c->num_experts, Fe = c->moe_intermediate_size, Fs = c->shared_expert_intermediate_size;
    lt.router = add_full(b, NAME("moe.router"), 2, E, C, 0, 0);
    if (!d->moe_folded) {
      lt.experts_gate_up = add_full(b, NAME("moe.experts.w_gate_up"), 3, E, 2 * Fe, C, EXPERT);
      lt.experts_down = add_full(b, NAME("moe.experts.w_down"), 3, E, C, Fe, EXPERT);
    } else {
      /* The MoE grid's slice: no TP rank shares it by construction (the
       * copies are EDP members), hence tp_ranks 1. */
      const int El = d->El, Fl = d->Fl, e0 = d->ep_rank * El, f0 = d->etp_rank * Fl;
      TensorSpec gu = {NAME("moe.experts.w_gate_up"), 3, {El, 2 * Fl, C, 0}, {E, 2 * Fe, C, 0}, 4, {E, 2, Fe, C},
                       {e0, 0, f0, 0}, {El, 2, Fl, C}, EXPERT | EDP, 1};
      lt.experts_gate_up = add(b, &gu);
      TensorSpec dn = {NAME("moe.experts.w_down"), 3, {El, C, Fl, 0}, {E, C, Fe, 0}, 3, {E, C, Fe, 0},
                       {e0, 0, f0, 0}, {El, C, Fl, 0}, EXPERT | EDP, 1};
      lt.experts_down = add(b, &dn);
    }
    if (Fs > 0) {
      lt.shared_gate_up = add_full(b, NAME("moe.shared.w_gate_up"), 2, 2 * Fs, C, 0, 0);
      lt.shared_down = add_full(b, NAME("moe.shared.w_down"), 2, C, Fs, 0, 0);
    }
  } else {
    lt.mlp_gate_up = add_gate_up(b, NAME("mlp.w_gate_up"), F, C, d->r * (F / t), F / t);
    lt.mlp_down = add_cols(b, NAME("mlp.w_down"), C, F, d->r * (F / t), F / t);
  }
#undef NAME
  if (out) out[l] = lt;
}

void model_build_table(const ModelConfig *c, const ModelShard *sh, TableBuilder *b, LayerTensors *lt,
                       TableChunk *chunks) {
  const ShardDims *d = b->dims;
  const int C = c->hidden_size, V = c->vocab_size;
  size_t embed = NO_TENSOR;
  for (int i = 0; i < sh->num_chunks; i++) {
    TableChunk ch = {NO_TENSOR, NO_TENSOR, NO_TENSOR, b->total, 0, NO_TENSOR, NO_TENSOR};
    if (sh->has_embedding[i]) embed = ch.embed = add_rows(b, "embed.weight", V, C, d->vocab0, d->V, 1, 0);
    /* Replicated over TP: each rank computes its full gradient from the
     * gathered rows, so no TP sum is needed. */
    if (sh->has_embedding[i] && c->gpt2)
      ch.pos_embed = add_full(b, "pos_embed.weight", 2, c->max_position_embeddings, C, 0, 0);
    for (int l = sh->layer_begin[i]; l < sh->layer_end[i]; l++) add_block(c, b, l, lt);
    if (sh->has_head[i]) {
      ch.final_norm = add_full(b, "final_norm.weight", 1, C, 0, 0, NORM);
      if (c->gpt2) ch.final_norm_bias = add_full(b, "final_norm.bias", 1, C, 0, 0, BIAS);
      if (!c->tie_word_embeddings)
        ch.lm_head = add_rows(b, "lm_head.weight", V, C, d->vocab0, d->V, 1, 0);
      else if (!d->embedding_here)
        ch.lm_head = add_rows(b, "embed.weight", V, C, d->vocab0, d->V, 1, TIED_COPY);
      else
        ch.lm_head = NO_TENSOR; /* resolved below: the embedding may come in a later chunk */
    }
    ch.param_end = b->total;
    if (chunks) chunks[i] = ch;
  }
  if (chunks && c->tie_word_embeddings && d->embedding_here)
    for (int i = 0; i < sh->num_chunks; i++)
      if (sh->has_head[i]) chunks[i].lm_head = embed;
}

int model_global_tensors(const ModelConfig *cfg, ParamTensor **out, int *n, Error *err) {
  *out = NULL;
  *n = 0;
  if (model_config_validate(cfg, "model_global_tensors", err)) return err ? err->code : ERR_CONFIG;
  ModelShard sh;
  model_shard_default(cfg, &sh);
  ShardDims d;
  if (model_shard_dims(cfg, &sh, &d, err)) return err ? err->code : ERR_CONFIG;
  TableBuilder count = {NULL, 0, 0, &d};
  model_build_table(cfg, &sh, &count, NULL, NULL);
  ParamTensor *t = calloc((size_t)count.n, sizeof *t);
  if (!t) return error_set(err, ERR_NOMEM, "model_global_tensors: out of memory");
  TableBuilder fill = {t, 0, 0, &d};
  model_build_table(cfg, &sh, &fill, NULL, NULL);
  *out = t;
  *n = count.n;
  return 0;
}
