/* Model construction: the flat parameter and gradient buffers of a shard
 * (table in model_table.c), weight initialisation from the counter RNG by
 * global element index, and the activation arenas: one per (chunk, slot),
 * sized once for (max_B, max_T) and that chunk's layers, plus one scratch
 * arena every chunk shares. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "kern/bf16_weights.h"
#include "kern/rope.h"
#include "kern/vecops.h"
#include "model/model_internal.h"
#include "model/model_table.h"

/* ------------------------------------------------------ activation arena */

typedef struct Carver {
  char *base; /* NULL: only measure */
  size_t used;
} Carver;

static void *carve(Carver *cv, size_t bytes) {
  size_t off = cv->used;
  cv->used += (bytes + 63) / 64 * 64;
  return cv->base ? cv->base + off : NULL;
}

#define CARVE_F(cv, n) ((float *)carve(cv, (size_t)(n) * sizeof(float)))
#define CARVE_I(cv, n) ((int *)carve(cv, (size_t)(n) * sizeof(int)))

static size_t max3(size_t a, size_t b, size_t c) {
  size_t m = a > b ? a : b;
  return m > c ? m : c;
}

static int layer_is_moe(const ModelActs *A, const ModelConfig *c, int l) { return A->moe.E > 0 && c->is_moe_layer[l]; }

/* Whether block l of A's chunk is recomputed, and its group [*gb, *ge)
 * (ModelShard.recompute_method). */
static int rc_group(const ModelActs *A, int l, int *gb, int *ge) {
  const int b = A->layer_begin, e = A->layer_end, k = A->rc_num > 1 ? A->rc_num : 1;
  if (A->rc_method == MODEL_RECOMPUTE_UNIFORM) {
    *gb = b + (l - b) / k * k;
    *ge = *gb + k < e ? *gb + k : e;
    return 1;
  }
  if (A->rc_method == MODEL_RECOMPUTE_BLOCK && l - b < A->rc_num) {
    *gb = l;
    *ge = l + 1;
    return 1;
  }
  return 0;
}

/* What one block keeps for backward besides its residual rows: the
 * normed inputs, q/k/v, the attention output, and the MLP's (dense) or the
 * MoE layer's (moe) state. */
static void layout_layer_body(LayerActs *la, const ModelActs *A, int dense, int moe, Carver *cv) {
  const size_t N = (size_t)A->max_N, Nl = N / (size_t)A->tp, C = A->C;
  const int E = A->moe.E, K = A->moe.K;
  const size_t rows = A->max_rows;
  const int keep_ln = !(A->sel & MODEL_RECOMPUTE_LAYERNORM_BIT); /* else ModelScratch.sel_ln */
  if (keep_ln) la->ln1 = CARVE_F(cv, N * C);
  la->rstd1 = CARVE_F(cv, Nl);
  la->q = CARVE_F(cv, N * A->QD);
  la->k = CARVE_F(cv, N * A->KVD);
  la->v = CARVE_F(cv, N * A->KVD);
  la->att = CARVE_F(cv, N * A->QD);
  la->lse = CARVE_F(cv, N * A->Hq);
  if (keep_ln) la->ln2 = CARVE_F(cv, N * C);
  la->rstd2 = CARVE_F(cv, Nl);
  if (moe && A->moe_folded) {
    const int max_tokens = (int)Nl;
    if (A->dispatcher == MODEL_MOE_ALLTOALL) {
      void *mem = carve(cv, moe_a2a_sizes(&A->moe, &A->ep, max_tokens).acts_bytes);
      if (mem) moe_a2a_bind_acts(&la->a2a, mem, &A->moe, &A->ep, max_tokens);
    } else {
      void *mem = carve(cv, moe_ag_sizes(&A->moe, &A->ep, max_tokens).acts_bytes);
      if (mem) moe_ag_bind_acts(&la->ag, mem, &A->moe, &A->ep, max_tokens);
    }
  } else if (moe) {
    MoeLayerActs *ma = &la->moe;
    ma->routing.logits = CARVE_F(cv, N * E);
    ma->routing.scores = CARVE_F(cv, N * E);
    ma->routing.lse = CARVE_F(cv, N);
    ma->routing.topk_idx = CARVE_I(cv, N * K);
    ma->routing.topk_w = CARVE_F(cv, N * K);
    ma->routing.counts = carve(cv, (size_t)E * sizeof(long));
    ma->routing.prob_sum = carve(cv, (size_t)E * sizeof(double));
    ma->routing.aux_dq = carve(cv, (size_t)E * sizeof(double));
    ma->perm.row_of = CARVE_I(cv, N * K);
    ma->perm.token_of_row = CARVE_I(cv, rows);
    ma->perm.expert_offset = CARVE_I(cv, (size_t)E + 1);
    ma->perm.kept = CARVE_I(cv, E);
    ma->xp = CARVE_F(cv, rows * C);
    ma->h = CARVE_F(cv, rows * 2 * A->moe.Fe);
    ma->y = CARVE_F(cv, rows * C);
    if (A->moe.Fs > 0) ma->shared_h = CARVE_F(cv, N * 2 * A->moe.Fs);
  }
  if (dense && !(A->sel & MODEL_RECOMPUTE_MLP_BIT)) la->mlp_h = CARVE_F(cv, N * 2 * A->F);
}

/* One (chunk, slot): the residual stream of its layers ([Nl, C] rows),
 * what each layer keeps for backward, the head's buffers, and the running
 * gradient. A recomputed block keeps only its group's checkpoint (the
 * first block's input); bind_recompute points the rest at the workspace. */
static void layout_acts(ModelActs *A, const ModelConfig *c, Carver *cv) {
  const size_t N = (size_t)A->max_N, Nl = N / (size_t)A->tp, C = A->C;
  A->tokens = CARVE_I(cv, N);
  A->pos = CARVE_I(cv, N);
  for (int l = A->layer_begin; l < A->layer_end; l++) {
    LayerActs *la = &A->layers[l];
    memset(la, 0, sizeof *la);
    int gb, ge;
    if (rc_group(A, l, &gb, &ge)) {
      la->rc = 1;
      la->rc_begin = gb;
      la->rc_end = ge;
      if (l == gb) la->res_attn = CARVE_F(cv, Nl * C);
      continue;
    }
    la->res_attn = CARVE_F(cv, Nl * C);
    la->res_mlp = CARVE_F(cv, Nl * C);
    const int moe = layer_is_moe(A, c, l);
    layout_layer_body(la, A, !moe, moe, cv);
    if (A->split_ok) {
      la->keep_datt = CARVE_F(cv, N * C);
      la->keep_dq = CARVE_F(cv, N * A->QD);
      la->keep_dk = CARVE_F(cv, N * A->KVD);
      la->keep_dv = CARVE_F(cv, N * A->KVD);
      if (!moe && !c->gpt2) {
        la->keep_dmlp = CARVE_F(cv, N * C);
        la->keep_dh = CARVE_F(cv, N * 2 * A->F);
      }
    }
  }
  A->final_in = CARVE_F(cv, Nl * C);
  if (A->has_head) {
    A->lnf = CARVE_F(cv, N * C);
    A->rstdf = CARVE_F(cv, Nl);
    A->dlnf = CARVE_F(cv, Nl * C);
  }
  A->dres = CARVE_F(cv, Nl * C);
}

/* The recomputation workspace: rc_ws_n blocks' activations, each able to
 * hold a dense or a MoE block (whichever this rank recomputes), and the
 * rerun's output rows. */
static void layout_recompute(ModelScratch *S, const ModelActs *A, int dense, int moe, Carver *cv) {
  const size_t Nl = (size_t)A->max_N / (size_t)A->tp, C = A->C;
  for (int j = 0; j < S->rc_ws_n; j++) {
    LayerActs *w = &S->rc_ws[j];
    memset(w, 0, sizeof *w);
    if (j > 0) w->res_attn = CARVE_F(cv, Nl * C); /* position 0's input is the slot's checkpoint */
    w->res_mlp = CARVE_F(cv, Nl * C);
    layout_layer_body(w, A, dense, moe, cv);
  }
  S->rc_out = CARVE_F(cv, Nl * C);
}

/* Points every recomputed block of A at its workspace position, keeping
 * the group's checkpoint and the block's group bounds. */
static void bind_recompute(ModelActs *A) {
  for (int l = A->layer_begin; l < A->layer_end; l++) {
    LayerActs *la = &A->layers[l];
    if (!la->rc) continue;
    const LayerActs own = *la;
    *la = A->s->rc_ws[l - own.rc_begin];
    la->rc = 1;
    la->rc_begin = own.rc_begin;
    la->rc_end = own.rc_end;
    if (l == own.rc_begin) la->res_attn = own.res_attn;
  }
}

/* Points the blocks of A at the shared buffers of what selective
 * recomputation no longer keeps (ModelScratch.sel_ln, sel_h). */
static void bind_selective(ModelActs *A, const ModelConfig *c) {
  for (int l = A->layer_begin; l < A->layer_end; l++) {
    LayerActs *la = &A->layers[l];
    if (A->s->sel_ln) la->ln1 = la->ln2 = A->s->sel_ln;
    if (A->s->sel_h && !layer_is_moe(A, c, l)) la->mlp_h = A->s->sel_h;
  }
}

/* What all chunks share; A supplies the (local) shapes. Returns the bytes
 * of the recomputation workspace among them. */
static size_t layout_scratch(ModelScratch *S, const ModelActs *A, int max_T, int any_head, int kv_dw_floats,
                             int rc_dense, int rc_moe, int sel_dense, Carver *cv) {
  const size_t N = (size_t)A->max_N, Nl = N / (size_t)A->tp, C = A->C;
  const int E = A->moe.E, K = A->moe.K;
  const size_t rows = A->max_rows;
  S->rope_cos = CARVE_F(cv, (size_t)max_T * A->D / 2);
  S->rope_sin = CARVE_F(cv, (size_t)max_T * A->D / 2);
  S->dropped = carve(cv, (size_t)A->L * sizeof(long));
  S->dln = CARVE_F(cv, N * C);
  S->dq = CARVE_F(cv, N * A->QD);
  S->dk = CARVE_F(cv, N * A->KVD);
  S->dv = CARVE_F(cv, N * A->KVD);
  S->datt = CARVE_F(cv, N * A->QD);
  /* MLP scratch serves dense layers, routed experts and the shared expert. */
  size_t ffn = max3(N * (size_t)A->F, rows * (size_t)A->moe.Fe, N * (size_t)A->moe.Fs);
  MoeScratch *s = &S->moe;
  s->a = CARVE_F(cv, ffn);
  s->da = CARVE_F(cv, ffn);
  s->dh = CARVE_F(cv, 2 * ffn);
  if (E > 0) {
    s->dy = CARVE_F(cv, rows * C);
    s->dxp = CARVE_F(cv, rows * C);
    s->dtopk_w = CARVE_F(cv, N * K);
    s->dz = CARVE_F(cv, N * E);
    s->dscore = CARVE_F(cv, N * E);
    s->plan = carve(cv, moe_plan_scratch_bytes(&A->moe, (int)N));
  }
  /* The residual adds before the norms (kern/fusion.h: norm_residual). */
  S->full = CARVE_F(cv, N * C);
  S->norm_dx = CARVE_F(cv, Nl * C);
  if (A->tp > 1) {
    S->dln_local = CARVE_F(cv, Nl * C);
    S->ln_local = CARVE_F(cv, Nl * C);
    S->norm_dw = CARVE_F(cv, 2 * C);
    if (kv_dw_floats > 0) S->kv_dw = CARVE_F(cv, kv_dw_floats);
  }
  if (E > 0 && A->moe_folded) {
    const int max_tokens = (int)Nl;
    if (A->dispatcher == MODEL_MOE_ALLTOALL) {
      void *mem = carve(cv, moe_a2a_sizes(&A->moe, &A->ep, max_tokens).scratch_bytes);
      if (mem) moe_a2a_bind_scratch(&S->a2a, mem, &A->moe, &A->ep, max_tokens);
    } else {
      void *mem = carve(cv, moe_ag_sizes(&A->moe, &A->ep, max_tokens).scratch_bytes);
      if (mem) moe_ag_bind_scratch(&S->ag, mem, &A->moe, &A->ep, max_tokens);
    }
    if (A->tp > 1) S->moe_dw = CARVE_F(cv, ((size_t)E + 3 * (size_t)A->moe.Fs) * C);
  }
  if (A->cp > 1) {
    S->cp_work = carve(cv, cp_attention_workspace_bytes(A->max_N / (max_T / A->cp), max_T / A->cp, A->Hq, A->Hkv,
                                                        A->D));
    if (any_head) S->targets_local = CARVE_I(cv, N);
  }
  if (any_head) S->xent_scratch = CARVE_F(cv, (size_t)S->xent_chunk * A->V + (A->tp > 1 ? 3 * (size_t)S->xent_chunk : 0));
  const size_t before = cv->used;
  if (S->rc_ws_n > 0) layout_recompute(S, A, rc_dense, rc_moe, cv);
  S->sel_ln = S->sel_h = NULL;
  if (A->sel & MODEL_RECOMPUTE_LAYERNORM_BIT) S->sel_ln = CARVE_F(cv, N * C);
  if ((A->sel & MODEL_RECOMPUTE_MLP_BIT) && sel_dense) S->sel_h = CARVE_F(cv, N * 2 * (size_t)A->F);
  return cv->used - before;
}

/* ------------------------------------------------------------- lifecycle */

int model_create(Model *m, const ModelConfig *cfg, int max_B, int max_T, Error *err) {
  ModelShard shard;
  model_shard_default(cfg, &shard);
  return model_create_shard(m, cfg, &shard, NULL, max_B, max_T, err);
}

static void fill_dims(ModelActs *A, const ModelConfig *c, const ShardDims *d, int max_N) {
  A->C = c->hidden_size;
  A->V = d->V;
  A->L = c->num_layers;
  A->Hq = d->Hq;
  A->Hkv = d->Hkv;
  A->D = c->head_dim;
  A->QD = A->Hq * A->D;
  A->KVD = A->Hkv * A->D;
  A->F = d->F;
  A->kv_head0 = d->kv_head0;
  A->kv_shared = d->kv_ranks > 1;
  A->vocab0 = d->vocab0;
  A->tp = d->t;
  A->tp_rank = d->r;
  A->cp = d->cp;
  A->cp_rank = d->cp_rank;
  A->moe_folded = d->moe_folded;
  A->dispatcher = d->dispatcher;
  A->ep = (MoeEpLayout){d->ep, d->ep_rank, d->etp, d->etp_rank};
  A->max_N = max_N;
  moe_spec_from_config(&A->moe, c);
  if (model_config_num_moe_layers(c) == 0) A->moe.E = 0;
  A->max_rows = A->moe.E > 0 ? moe_max_rows(&A->moe, max_N) : 0;
}

int model_create_shard(Model *m, const ModelConfig *cfg, const ModelShard *shard, const ModelParallelOps *ops,
                       int max_B, int max_T, Error *err) {
  memset(m, 0, sizeof *m);
  if (model_config_validate(cfg, "model_create", err)) return err ? err->code : ERR_CONFIG;
  if (max_B < 1 || max_T < 1 || (long long)max_B * max_T > (1LL << 30))
    return error_set(err, ERR_ARG, "model_create: batch %d x sequence %d is out of range", max_B, max_T);
  ShardDims d;
  if (model_shard_dims(cfg, shard, &d, err)) return err ? err->code : ERR_CONFIG;
  if (d.t > 1 && (!ops || !ops->allreduce_sum || !ops->allreduce_max || !ops->allgather || !ops->reduce_scatter))
    return error_set(err, ERR_ARG, "model_create: tp_size %d needs ModelParallelOps with all four collectives", d.t);
  if (d.cp > 1 && max_T % (2 * d.cp))
    return error_set(err, ERR_CONFIG, "model_create: max sequence %d is not divisible by 2 * cp_size = %d", max_T,
                     2 * d.cp);
  if (d.cp > 1 && (!ops || !ops->cp || !ops->cp->ring_shift || !ops->cp->allreduce_sum_f64))
    return error_set(err, ERR_ARG,
                     "model_create: cp_size %d needs ModelParallelOps.cp with ring_shift and allreduce_sum_f64", d.cp);
  int holds_moe = 0;
  for (int i = 0; i < shard->num_chunks; i++)
    for (int l = shard->layer_begin[i]; l < shard->layer_end[i]; l++)
      holds_moe |= cfg->num_experts > 0 && cfg->is_moe_layer[l];
  const int need_moe = d.moe_folded && holds_moe;
  if (need_moe) {
    const MoeCommOps *mo = ops ? ops->moe : NULL;
    if (!mo || !mo->alltoall_i64 || !mo->alltoallv_f32 || !mo->allgather_i64 || !mo->allgatherv_f32 ||
        !mo->reduce_scatterv_f32 || !mo->allreduce_f64)
      return error_set(err, ERR_ARG,
                       "model_create: MoE layers under ep_size %d x etp_size %d (cp_size %d) need "
                       "ModelParallelOps.moe with all six collectives",
                       d.ep, d.etp, d.cp);
  }
  m->cfg = *cfg;
  m->cfg.head_dim = model_config_head_dim(cfg);
  m->cfg.num_kv_heads = model_config_kv_heads(cfg);
  for (int l = cfg->num_layers; l < MODEL_MAX_LAYERS; l++) m->cfg.is_moe_layer[l] = 0;
  const ModelConfig *c = &m->cfg;
  m->shard = *shard;
  m->shard.cp_size = d.cp;
  m->shard.ep_size = d.ep;
  m->shard.etp_size = d.etp;
  m->ops = d.t > 1 || d.cp > 1 || need_moe ? ops : NULL;
  m->max_B = max_B;
  m->max_T = max_T;
  const int num_acts = shard->num_chunks * shard->num_slots, L = c->num_layers;

  TableBuilder count = {NULL, 0, 0, &d};
  model_build_table(c, shard, &count, NULL, NULL);
  m->num_tensors = count.n;
  m->num_params = count.total;
  m->tensors = calloc((size_t)count.n > 0 ? (size_t)count.n : 1, sizeof *m->tensors);
  m->acts = calloc((size_t)num_acts, sizeof *m->acts);
  LayerTensors *lt = calloc((size_t)L, sizeof *lt);
  ModelScratch *S = calloc(1, sizeof *S);
  if (m->acts) {
    m->acts[0].lt = lt; /* owned through acts[0] from here on */
    m->acts[0].s = S;
  }
  for (int i = 0; m->acts && i < num_acts; i++) m->acts[i].layers = calloc((size_t)L, sizeof(LayerActs));
  m->expert_counts = calloc((size_t)L * (cfg->num_experts > 0 ? cfg->num_experts : 1), sizeof *m->expert_counts);
  int missing = !m->tensors || !m->acts || !lt || !S || !m->expert_counts;
  for (int i = 0; !missing && i < num_acts; i++) missing = !m->acts[i].layers;
  if (missing) {
    if (!m->acts) {
      free(lt);
      free(S);
    }
    model_free(m);
    return error_set(err, ERR_NOMEM, "model_create: out of memory");
  }
  for (int l = 0; l < L; l++)
    for (size_t *p = (size_t *)&lt[l]; p < (size_t *)(&lt[l] + 1); p++) *p = NO_TENSOR;
  TableChunk chunks[MODEL_MAX_CHUNKS];
  TableBuilder fill = {m->tensors, 0, 0, &d};
  model_build_table(c, shard, &fill, lt, chunks);

  const int max_N = max_B * (max_T / d.cp);
  int any_head = 0;
  for (int i = 0; i < shard->num_chunks; i++) any_head |= shard->has_head[i] != 0;
  for (int i = 0; i < num_acts; i++) {
    ModelActs *A = &m->acts[i];
    const int ch = i / shard->num_slots;
    fill_dims(A, c, &d, max_N);
    A->chunk = ch;
    A->slot = i % shard->num_slots;
    A->layer_begin = shard->layer_begin[ch];
    A->layer_end = shard->layer_end[ch];
    A->has_embedding = shard->has_embedding[ch] != 0;
    A->has_head = shard->has_head[ch] != 0;
    A->split_ok = shard->split_backward && d.t == 1;
    A->rc_method = shard->recompute_method;
    A->rc_num = shard->recompute_num_layers;
    A->sel = shard->recompute_modules;
    A->embed = chunks[ch].embed;
    A->final_norm = chunks[ch].final_norm;
    A->final_norm_bias = chunks[ch].final_norm_bias;
    A->pos_embed = chunks[ch].pos_embed;
    A->lm_head = chunks[ch].lm_head;
    A->param_begin = chunks[ch].param_begin;
    A->param_end = chunks[ch].param_end;
    A->lt = lt;
    A->s = S;
  }
  {
    /* Logit chunk: at most about 64 MiB of scratch, a multiple of 32 rows
     * (the row blocks of oneDNN's AMX kernels), at least 32. Why that
     * much: each chunk's three products read the whole head matrix (V x C,
     * 77 MB in bf16 for GPT-2) and oneDNN's fixed-shape kernels repack it
     * per call, so few large chunks beat many small ones. */
    long chunk = (16L << 20) / d.V / 32 * 32;
    if (chunk < 32) chunk = 32;
    if (chunk > max_N) chunk = max_N;
    S->xent_chunk = (int)chunk;
  }
  const int kv_dw_floats = d.kv_ranks > 1 ? 2 * c->num_kv_heads * c->head_dim * c->hidden_size : 0;
  /* The recomputation workspace: as many blocks as the longest group, of
   * the kinds this rank recomputes. */
  int rc_dense = 0, rc_moe = 0, sel_dense = 0;
  for (int ch = 0; ch < shard->num_chunks; ch++) {
    const ModelActs *A = model_acts(m, ch, 0);
    for (int l = A->layer_begin; l < A->layer_end; l++) {
      int gb, ge;
      if (!layer_is_moe(A, c, l)) sel_dense = 1;
      if (!rc_group(A, l, &gb, &ge)) continue;
      if (ge - gb > S->rc_ws_n) S->rc_ws_n = ge - gb;
      if (layer_is_moe(A, c, l))
        rc_moe = 1;
      else
        rc_dense = 1;
    }
  }
  if (S->rc_ws_n > 0 && !(S->rc_ws = calloc((size_t)S->rc_ws_n, sizeof *S->rc_ws))) {
    model_free(m);
    return error_set(err, ERR_NOMEM, "model_create: out of memory");
  }

  m->params = alloc_big(m->num_params * sizeof(float) + 64);
  m->grads = alloc_big(m->num_params * sizeof(float) + 64);
  size_t act_bytes = 0;
  int ok = m->params && m->grads;
  for (int i = 0; ok && i < num_acts; i++) {
    Carver measure = {NULL, 0};
    layout_acts(&m->acts[i], c, &measure);
    m->acts[i].arena = alloc_big(measure.used);
    act_bytes += measure.used;
    if (!m->acts[i].arena) ok = 0;
  }
  Carver measure = {NULL, 0};
  const size_t rc_bytes = layout_scratch(S, &m->acts[0], max_T, any_head, kv_dw_floats, rc_dense, rc_moe, sel_dense, &measure);
  act_bytes += measure.used;
  if (ok) S->arena = alloc_big(measure.used);
  if (!ok || !S->arena) {
    size_t pb = m->num_params * sizeof(float);
    model_free(m);
    return error_set(err, ERR_NOMEM,
                     "model_create: cannot allocate %.2f GB of parameters+gradients and %.2f GB of activations "
                     "(reduce the batch or sequence length)",
                     2.0 * pb / 1e9, act_bytes / 1e9);
  }
  for (int i = 0; i < num_acts; i++) {
    Carver place = {m->acts[i].arena, 0};
    layout_acts(&m->acts[i], c, &place);
  }
  Carver place = {S->arena, 0};
  layout_scratch(S, &m->acts[0], max_T, any_head, kv_dw_floats, rc_dense, rc_moe, sel_dense, &place);
  m->activation_bytes = act_bytes;
  m->recompute_workspace_bytes = rc_bytes;
  for (int i = 0; i < num_acts; i++) {
    bind_recompute(&m->acts[i]);
    bind_selective(&m->acts[i], c);
    m->acts[i].rope_cos = S->rope_cos;
    m->acts[i].rope_sin = S->rope_sin;
    m->acts[i].dropped = S->dropped;
  }
  rope_table_init(S->rope_cos, S->rope_sin, max_T, c->head_dim, c->rope_theta);
  return 0;
}

void model_free(Model *m) {
  if (!m) return;
  if (m->acts) {
    const int num_acts = m->shard.num_chunks * m->shard.num_slots;
    for (int i = 0; i < num_acts; i++) {
      alloc_big_free(m->acts[i].arena);
      free(m->acts[i].layers);
    }
    if (m->acts[0].s) {
      alloc_big_free(m->acts[0].s->arena);
      free(m->acts[0].s->rc_ws);
    }
    free(m->acts[0].s);
    free((void *)m->acts[0].lt);
    free(m->acts);
  }
  if (m->params) bf16_weights_forget(m->params, m->num_params);
  alloc_big_free(m->params);
  alloc_big_free(m->grads);
  free(m->tensors);
  free(m->expert_counts);
  memset(m, 0, sizeof *m);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Local element o * inner + i of t is logical element base(o) + i: the
 * view's last dimension is contiguous in both. */
static uint64_t view_row_base(const ParamTensor *t, size_t o) {
  uint64_t g = 0, stride = (uint64_t)t->view_shape[t->view_ndim - 1];
  g = (uint64_t)t->view_start[t->view_ndim - 1];
  for (int k = t->view_ndim - 2; k >= 0; k--) {
    const size_t idx = o % (size_t)t->view_count[k];
    o /= (size_t)t->view_count[k];
    g += (uint64_t)(idx + (size_t)t->view_start[k]) * stride;
    stride *= (uint64_t)t->view_shape[k];
  }
  return g;
}

void model_init_weights(Model *m, uint64_t seed) {
  /* Output projections feed the residual stream once per layer; scaling
   * them keeps its variance independent of depth. */
  const double out_scale = 1.0 / sqrt(2.0 * m->cfg.num_layers);
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *t = &m->tensors[i];
    float *p = m->params + t->offset;
    const long n = (long)t->numel;
    if (t->is_bias) {
      vec_zero(p, t->numel);
      continue;
    }
    if (t->no_weight_decay) {
#pragma omp parallel for schedule(static) if ((size_t)n > PARALLEL_MIN_WORK)
      for (long j = 0; j < n; j++) p[j] = 1.0f;
      continue;
    }
    double std = m->cfg.init_std;
    if (ends_with(t->name, "attn.wo") || ends_with(t->name, "w_down") || ends_with(t->name, "w_proj")) std *= out_scale;
    const uint64_t stream = rng_stream_id(t->name);
    const long inner = t->view_count[t->view_ndim - 1];
    const long outer = inner > 0 ? n / inner : 0;
#pragma omp parallel for schedule(static) if ((size_t)n > PARALLEL_MIN_WORK / 64)
    for (long o = 0; o < outer; o++) {
      const uint64_t g = view_row_base(t, (size_t)o);
      float *row = p + o * inner;
      for (long j = 0; j < inner; j++) row[j] = (float)(std * rng_normal(seed, stream, g + (uint64_t)j));
    }
  }
  model_weights_changed(m);
}

void model_cache_bf16_weights(const Model *m) {
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *t = &m->tensors[i];
    if (t->no_weight_decay || t->ndim < 2) continue;
    bf16_weights_register_tensor(m->params + t->offset, t->ndim, t->shape[0], t->shape[1], t->numel);
  }
}

void model_weights_changed(const Model *m) { bf16_weights_invalidate(m->params, m->num_params); }

const ParamTensor *model_find_tensor(const Model *m, const char *name) {
  for (int i = 0; i < m->num_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  return NULL;
}

void model_zero_grad(Model *m) { vec_zero(m->grads, m->num_params); }

void model_chunk_params(const Model *m, int chunk, size_t *offset, size_t *count) {
  if (chunk < 0 || chunk >= m->shard.num_chunks) {
    *offset = 0;
    *count = 0;
    return;
  }
  const ModelActs *A = model_acts(m, chunk, 0);
  *offset = A->param_begin;
  *count = A->param_end - A->param_begin;
}

int model_chunk_rows(const Model *m, int B, int T) {
  const int tp = m->shard.tp_size > 0 ? m->shard.tp_size : 1, cp = m->shard.cp_size > 0 ? m->shard.cp_size : 1;
  return B * (T / cp) / tp;
}

uint64_t model_routing_fingerprint(const Model *m) {
  const ModelActs *A = m->acts;
  uint64_t h = 0x6a09e667f3bcc908ULL;
  for (int l = A->layer_begin; l < A->layer_end; l++) {
    if (!layer_is_moe(A, &m->cfg, l) || A->moe_folded) continue;
    const MoeLayerActs *ma = &A->layers[l].moe;
    for (long a = 0; a < (long)A->N * A->moe.K; a++) {
      h = rng_hash64(h ^ (uint64_t)(uint32_t)ma->routing.topk_idx[a]);
      h = rng_hash64(h ^ (uint64_t)(uint32_t)ma->perm.row_of[a]);
    }
  }
  return h;
}

long model_chunk_dropped(const Model *m, int chunk) {
  if (chunk < 0 || chunk >= m->shard.num_chunks) return 0;
  const ModelActs *A = model_acts(m, chunk, 0);
  long dropped = 0;
  for (int l = A->layer_begin; l < A->layer_end; l++) dropped += A->dropped[l];
  return dropped;
}
