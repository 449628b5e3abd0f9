/* Model construction: the parameter table (names and layouts of model.h),
 * the flat parameter and gradient buffers, weight initialisation from the
 * counter RNG, and the activation arena sized once for (max_B, max_T). */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "kern/rope.h"
#include "kern/vecops.h"
#include "model/model_internal.h"

/* ------------------------------------------------------- parameter table */

typedef struct TableBuilder {
  ParamTensor *t; /* NULL: only count */
  int n;
  size_t total;
} TableBuilder;

static size_t add_tensor(TableBuilder *b, const char *name, int ndim, int d0, int d1, int d2, int flags) {
  size_t numel = (size_t)d0 * (ndim > 1 ? (size_t)d1 : 1) * (ndim > 2 ? (size_t)d2 : 1);
  size_t offset = b->total;
  if (b->t) {
    ParamTensor *t = &b->t[b->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->shape[2] = ndim > 2 ? d2 : 0;
    t->offset = offset;
    t->numel = numel;
    t->no_weight_decay = (flags & 1) != 0;
    t->is_expert = (flags & 2) != 0;
  }
  b->n++;
  b->total += numel;
  return offset;
}

enum { NORM = 1, EXPERT = 2 };

/* Lays out every tensor; with lt != NULL also records each block's offsets. */
static void build_table(const ModelConfig *c, TableBuilder *b, LayerTensors *lt, size_t *embed, size_t *final_norm,
                        size_t *lm_head) {
  const int C = c->hidden_size, V = c->vocab_size, D = model_config_head_dim(c);
  const int QD = c->num_heads * D, KVD = model_config_kv_heads(c) * D;
  char name[96];
  size_t off_embed = add_tensor(b, "embed.weight", 2, V, C, 0, 0);
  for (int l = 0; l < c->num_layers; l++) {
    LayerTensors t;
    for (size_t *p = (size_t *)&t; p < (size_t *)(&t + 1); p++) *p = NO_TENSOR;
#define ADD(field, suffix, ...)                             \
  do {                                                      \
    snprintf(name, sizeof name, "layers.%d.%s", l, suffix); \
    t.field = add_tensor(b, name, __VA_ARGS__);             \
  } while (0)
    ADD(attn_norm, "attn_norm.weight", 1, C, 0, 0, NORM);
    ADD(wq, "attn.wq", 2, QD, C, 0, 0);
    ADD(wk, "attn.wk", 2, KVD, C, 0, 0);
    ADD(wv, "attn.wv", 2, KVD, C, 0, 0);
    ADD(wo, "attn.wo", 2, C, QD, 0, 0);
    ADD(mlp_norm, "mlp_norm.weight", 1, C, 0, 0, NORM);
    if (c->num_experts > 0 && c->is_moe_layer[l]) {
      const int E = c->num_experts, Fe = c->moe_intermediate_size, Fs = c->shared_expert_intermediate_size;
      ADD(router, "moe.router", 2, E, C, 0, 0);
      ADD(experts_gate_up, "moe.experts.w_gate_up", 3, E, 2 * Fe, C, EXPERT);
      ADD(experts_down, "moe.experts.w_down", 3, E, C, Fe, EXPERT);
      if (Fs > 0) {
        ADD(shared_gate_up, "moe.shared.w_gate_up", 2, 2 * Fs, C, 0, 0);
        ADD(shared_down, "moe.shared.w_down", 2, C, Fs, 0, 0);
      }
    } else {
      ADD(mlp_gate_up, "mlp.w_gate_up", 2, 2 * c->intermediate_size, C, 0, 0);
      ADD(mlp_down, "mlp.w_down", 2, C, c->intermediate_size, 0, 0);
    }
#undef ADD
    if (lt) lt[l] = t;
  }
  size_t off_final = add_tensor(b, "final_norm.weight", 1, C, 0, 0, NORM);
  size_t off_head = off_embed;
  if (!c->tie_word_embeddings) off_head = add_tensor(b, "lm_head.weight", 2, V, C, 0, 0);
  if (embed) *embed = off_embed;
  if (final_norm) *final_norm = off_final;
  if (lm_head) *lm_head = off_head;
}

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

static void layout_acts(ModelActs *A, const ModelConfig *c, int max_B, int max_T, Carver *cv) {
  const size_t N = (size_t)max_B * max_T, C = A->C;
  const int E = A->moe.E, K = A->moe.K;
  const size_t rows = A->max_rows;
  A->tokens = CARVE_I(cv, N);
  A->pos = CARVE_I(cv, N);
  A->rope_cos = CARVE_F(cv, (size_t)max_T * A->D / 2);
  A->rope_sin = CARVE_F(cv, (size_t)max_T * A->D / 2);
  float *residual = CARVE_F(cv, (2 * (size_t)A->L + 1) * N * C);
  for (int l = 0; l < A->L; l++) {
    LayerActs *la = &A->layers[l];
    memset(la, 0, sizeof *la);
    la->res_attn = residual ? residual + (2 * (size_t)l) * N * C : NULL;
    la->res_mlp = residual ? residual + (2 * (size_t)l + 1) * N * C : NULL;
    la->ln1 = CARVE_F(cv, N * C);
    la->rstd1 = CARVE_F(cv, N);
    la->q = CARVE_F(cv, N * A->QD);
    la->k = CARVE_F(cv, N * A->KVD);
    la->v = CARVE_F(cv, N * A->KVD);
    la->att = CARVE_F(cv, N * A->QD);
    la->lse = CARVE_F(cv, N * A->Hq);
    la->ln2 = CARVE_F(cv, N * C);
    la->rstd2 = CARVE_F(cv, N);
    if (E > 0 && c->is_moe_layer[l]) {
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
    } else {
      la->mlp_h = CARVE_F(cv, N * 2 * A->F);
    }
  }
  A->final_in = residual ? residual + 2 * (size_t)A->L * N * C : NULL;
  A->lnf = CARVE_F(cv, N * C);
  A->rstdf = CARVE_F(cv, N);
  A->dlnf = CARVE_F(cv, N * C);
  A->xent_scratch = CARVE_F(cv, (size_t)A->xent_chunk * A->V);
  A->dres = CARVE_F(cv, N * C);
  A->dln = CARVE_F(cv, N * C);
  A->dq = CARVE_F(cv, N * A->QD);
  A->dk = CARVE_F(cv, N * A->KVD);
  A->dv = CARVE_F(cv, N * A->KVD);
  A->datt = CARVE_F(cv, N * A->QD);
  /* MLP scratch serves dense layers, routed experts and the shared expert. */
  size_t ffn = max3(N * (size_t)A->F, rows * (size_t)A->moe.Fe, N * (size_t)A->moe.Fs);
  MoeScratch *s = &A->scratch;
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
}

/* ------------------------------------------------------------- lifecycle */

int model_create(Model *m, const ModelConfig *cfg, int max_B, int max_T, Error *err) {
  memset(m, 0, sizeof *m);
  if (model_config_validate(cfg, "model_create", err)) return err ? err->code : ERR_CONFIG;
  if (max_B < 1 || max_T < 1 || (long long)max_B * max_T > (1LL << 30))
    return error_set(err, ERR_ARG, "model_create: batch %d x sequence %d is out of range", max_B, max_T);
  m->cfg = *cfg;
  m->cfg.head_dim = model_config_head_dim(cfg);
  m->cfg.num_kv_heads = model_config_kv_heads(cfg);
  for (int l = cfg->num_layers; l < MODEL_MAX_LAYERS; l++) m->cfg.is_moe_layer[l] = 0;
  const ModelConfig *c = &m->cfg;
  m->max_B = max_B;
  m->max_T = max_T;

  ModelActs *A = calloc(1, sizeof *A);
  if (!A) return error_set(err, ERR_NOMEM, "model_create: out of memory");
  m->acts = A;
  A->C = c->hidden_size;
  A->V = c->vocab_size;
  A->L = c->num_layers;
  A->Hq = c->num_heads;
  A->Hkv = c->num_kv_heads;
  A->D = c->head_dim;
  A->QD = A->Hq * A->D;
  A->KVD = A->Hkv * A->D;
  A->F = c->intermediate_size;
  A->max_N = max_B * max_T;
  moe_spec_from_config(&A->moe, c);
  if (model_config_num_moe_layers(c) == 0) A->moe.E = 0;
  A->max_rows = A->moe.E > 0 ? moe_max_rows(&A->moe, A->max_N) : 0;
  {
    /* Logit chunk: about 16 MiB of scratch, at least 32 rows. */
    long chunk = (4L << 20) / A->V;
    if (chunk < 32) chunk = 32;
    if (chunk > A->max_N) chunk = A->max_N;
    A->xent_chunk = (int)chunk;
  }

  TableBuilder count = {0};
  build_table(c, &count, NULL, NULL, NULL, NULL);
  m->num_tensors = count.n;
  m->num_params = count.total;
  m->tensors = calloc((size_t)count.n, sizeof *m->tensors);
  A->lt = calloc((size_t)A->L, sizeof *A->lt);
  A->layers = calloc((size_t)A->L, sizeof *A->layers);
  m->expert_counts = calloc((size_t)A->L * (A->moe.E > 0 ? A->moe.E : 1), sizeof *m->expert_counts);
  if (!m->tensors || !A->lt || !A->layers || !m->expert_counts) {
    model_free(m);
    return error_set(err, ERR_NOMEM, "model_create: out of memory");
  }
  TableBuilder fill = {m->tensors, 0, 0};
  build_table(c, &fill, A->lt, &A->embed, &A->final_norm, &A->lm_head);

  m->params = alloc_big(m->num_params * sizeof(float));
  m->grads = alloc_big(m->num_params * sizeof(float));
  Carver measure = {NULL, 0};
  layout_acts(A, c, max_B, max_T, &measure);
  A->arena_bytes = measure.used;
  A->arena = alloc_big(A->arena_bytes);
  if (!m->params || !m->grads || !A->arena) {
    size_t pb = m->num_params * sizeof(float);
    size_t ab = A->arena_bytes;
    model_free(m);
    return error_set(err, ERR_NOMEM,
                     "model_create: cannot allocate %.2f GB of parameters+gradients and %.2f GB of activations "
                     "(reduce the batch or sequence length)",
                     2.0 * pb / 1e9, ab / 1e9);
  }
  Carver place = {A->arena, 0};
  layout_acts(A, c, max_B, max_T, &place);
  rope_table_init(A->rope_cos, A->rope_sin, max_T, A->D, c->rope_theta);
  return 0;
}

void model_free(Model *m) {
  if (!m) return;
  if (m->acts) {
    alloc_big_free(m->acts->arena);
    free(m->acts->lt);
    free(m->acts->layers);
    free(m->acts);
  }
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

void model_init_weights(Model *m, uint64_t seed) {
  /* Output projections feed the residual stream once per layer; scaling
   * them keeps its variance independent of depth. */
  const double out_scale = 1.0 / sqrt(2.0 * m->cfg.num_layers);
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *t = &m->tensors[i];
    float *p = m->params + t->offset;
    const long n = (long)t->numel;
    if (t->no_weight_decay) {
#pragma omp parallel for schedule(static) if ((size_t)n > PARALLEL_MIN_WORK)
      for (long j = 0; j < n; j++) p[j] = 1.0f;
      continue;
    }
    double std = m->cfg.init_std;
    if (ends_with(t->name, "attn.wo") || ends_with(t->name, "w_down")) std *= out_scale;
    const uint64_t stream = rng_stream_id(t->name);
#pragma omp parallel for schedule(static) if ((size_t)n > PARALLEL_MIN_WORK / 64)
    for (long j = 0; j < n; j++) p[j] = (float)(std * rng_normal(seed, stream, (uint64_t)j));
  }
}

const ParamTensor *model_find_tensor(const Model *m, const char *name) {
  for (int i = 0; i < m->num_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  return NULL;
}

void model_zero_grad(Model *m) { vec_zero(m->grads, m->num_params); }

uint64_t model_routing_fingerprint(const Model *m) {
  const ModelActs *A = m->acts;
  uint64_t h = 0x6a09e667f3bcc908ULL;
  for (int l = 0; l < A->L; l++) {
    if (!(A->moe.E > 0 && m->cfg.is_moe_layer[l])) continue;
    const MoeLayerActs *ma = &A->layers[l].moe;
    for (long a = 0; a < (long)A->N * A->moe.K; a++) {
      h = rng_hash64(h ^ (uint64_t)(uint32_t)ma->routing.topk_idx[a]);
      h = rng_hash64(h ^ (uint64_t)(uint32_t)ma->perm.row_of[a]);
    }
  }
  return h;
}
