/* Model shards against the one-rank model (model.h, "sharding"):
 *  - tensor parallelism with sequence parallelism, t ranks as t threads
 *    (tp_threads.h): same losses, and each rank's gradient (and initial
 *    weights) equal the matching slice of the one-rank model's, after two
 *    accumulated micro-batches; dense, MoE, tied embeddings, shared and
 *    replicated KV heads, GPT-2 (biases, LayerNorm, position embeddings);
 *  - pipeline chunks, in one Model and as separate per-stage Models passing
 *    activations and gradients by hand, two slots, order F0 F1 B0 B1;
 *  - on_grads_ready ranges, model_global_tensors, and the errors for
 *    shards that do not fit.
 * Tolerances: shard_check.h. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "model/model.h"
#include "shard_check.h"
#include "tp_threads.h"

enum { B = 2, T = 8, N = B * T, SEED = 1234 };

static void dense_cfg(ModelConfig *c) { shard_dense_cfg(c); }

static void moe_cfg(ModelConfig *c) { shard_moe_cfg(c, 4); }

/* Capacity 1: assignments get dropped. */
static void moe_drop_cfg(ModelConfig *c) {
  moe_cfg(c);
  c->capacity_factor = 1.0f;
}

static void mqa_cfg(ModelConfig *c) {
  dense_cfg(c);
  c->num_kv_heads = 1;
}

static void tied_cfg(ModelConfig *c) {
  dense_cfg(c);
  c->tie_word_embeddings = 1;
}

/* GPT-2: LayerNorm, biases, learned positions, tied head. */
static void gpt2_cfg(ModelConfig *c) {
  dense_cfg(c);
  c->gpt2 = 1;
  strcpy(c->model_type, "gpt2");
  c->num_kv_heads = 4;
  c->max_position_embeddings = 16;
  c->tie_word_embeddings = 1;
}

/* Llama's attention_bias: q/k/v (before RoPE) and o biases, GQA. */
static void biased_cfg(ModelConfig *c) {
  dense_cfg(c);
  c->qkv_bias = 1;
  c->o_bias = 1;
}

/* Biases start at zero (model_init_weights); give them values, a function
 * of the logical element, so that sharded forwards that add them wrongly
 * show in the losses. */
static void set_biases(Model *m) {
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *t = &m->tensors[i];
    if (!t->is_bias) continue;
    const uint64_t stream = rng_stream_id(t->name);
    for (size_t j = 0; j < t->numel; j++)
      m->params[t->offset + j] = 0.3f * (float)rng_normal(SEED, stream, (uint64_t)t->view_start[0] + j);
  }
}

/* Two micro-batches; a few targets are ignored. */
static int g_tokens[2][N], g_targets[2][N];

static void make_batches(int V) {
  for (int mb = 0; mb < 2; mb++)
    for (int n = 0; n < N; n++) {
      g_tokens[mb][n] = (int)(rng_u64(7, (uint64_t)mb, (uint64_t)n) % (uint64_t)V);
      g_targets[mb][n] = n % 7 == 3 ? -1 : (int)(rng_u64(8, (uint64_t)mb, (uint64_t)n) % (uint64_t)V);
    }
}

/* The one-rank model after F0 B0 F1 B1 (grad_scale 1/2). */
static void run_reference(const ModelConfig *c, Model *ref, ModelLoss loss[2]) {
  Error err = {0};
  if (model_create(ref, c, B, T, &err)) fail_msg("%s", err.msg);
  model_init_weights(ref, SEED);
  set_biases(ref);
  model_zero_grad(ref);
  for (int mb = 0; mb < 2; mb++) {
    if (model_forward(ref, g_tokens[mb], g_targets[mb], B, T, 1, 0.5f, &loss[mb], &err)) fail_msg("%s", err.msg);
    if (model_backward(ref, &err)) fail_msg("%s", err.msg);
  }
}

/* A chunk's loss parts added into the micro-batch's. */
static void add_loss(ModelLoss *sum, const ModelLoss *l) {
  sum->lm += l->lm;
  sum->aux += l->aux;
  sum->z += l->z;
  sum->tokens += l->tokens;
}

/* ------------------------------------------------ on_grads_ready checking */

typedef struct GradLog {
  size_t next_end;   /* the next range must end here */
  size_t begin, end; /* the chunk's range */
  int bad;           /* ranges out of order, overlapping or missing */
  char why[160];
} GradLog;

static void log_ready(void *ctx, size_t offset, size_t count) {
  GradLog *g = ctx;
  if (offset + count != g->next_end || offset < g->begin || count == 0) {
    if (!g->bad)
      snprintf(g->why, sizeof g->why, "range [%zu, %zu) reported, expected one ending at %zu within [%zu, %zu)",
               offset, offset + count, g->next_end, g->begin, g->end);
    g->bad = 1;
  }
  g->next_end = offset;
}

static int chunk_backward_logged(Model *m, GradLog *g, int chunk, int slot, const float *dy, Error *err) {
  size_t off, cnt;
  model_chunk_params(m, chunk, &off, &cnt);
  g->begin = off;
  g->end = off + cnt;
  g->next_end = off + cnt;
  int rc = model_chunk_backward(m, chunk, slot, dy, err);
  if (!rc && g->next_end != g->begin && !g->bad) {
    snprintf(g->why, sizeof g->why, "chunk %d: [%zu, %zu) never reported", chunk, g->begin, g->next_end);
    g->bad = 1;
  }
  return rc;
}

/* ------------------------------------------- one rank of a sharded run */

typedef struct ShardRun {
  const ModelConfig *cfg;
  ModelShard shard;
  const ModelParallelOps *ops;
  Model m;
  ModelLoss loss[2]; /* summed over the chunks */
  int rc;
  Error err;
  GradLog log;
} ShardRun;

/* F0 F1 B0 B1 through every chunk of the shard, slot = micro-batch. */
static void *shard_worker(void *arg) {
  ShardRun *r = arg;
  Model *m = &r->m;
  if ((r->rc = model_create_shard(m, r->cfg, &r->shard, r->ops, B, T, &r->err))) return NULL;
  model_init_weights(m, SEED);
  set_biases(m);
  model_zero_grad(m);
  m->on_grads_ready = log_ready;
  m->on_grads_ready_ctx = &r->log;
  for (int mb = 0; mb < 2; mb++) {
    memset(&r->loss[mb], 0, sizeof r->loss[mb]);
    const float *x = NULL;
    for (int c = 0; c < r->shard.num_chunks; c++) {
      ModelLoss l;
      if ((r->rc = model_chunk_forward(m, c, mb, g_tokens[mb], g_targets[mb], x, B, T, 1, 0.5f, &l, &r->err)))
        return NULL;
      add_loss(&r->loss[mb], &l);
      x = model_chunk_output(m, c, mb);
    }
  }
  for (int mb = 0; mb < 2; mb++) {
    const float *dy = NULL;
    for (int c = r->shard.num_chunks - 1; c >= 0; c--) {
      if ((r->rc = chunk_backward_logged(m, &r->log, c, mb, dy, &r->err))) return NULL;
      dy = model_chunk_input_grad(m, c, mb);
    }
  }
  return NULL;
}

/* ------------------------------------------------------------ comparing */

/* Every local element of m's tensors against the same logical element of
 * the reference: gradients within the tolerance, parameters exactly.
 * `tied_split` leaves out tied copies and the embedding's gradient (its
 * sum with the copy's is checked by the caller). */
static void compare_to_reference(const Model *ref, const Model *m, int tied_split, const char *what) {
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *t = &m->tensors[i];
    if (tied_split && t->tied_copy) continue;
    /* GPT-2's key bias has a gradient that is zero up to rounding (the
     * softmax ignores a shift shared by all keys): nothing to compare. */
    const size_t len = strlen(t->name);
    const int key_bias = len > 7 && strcmp(t->name + len - 7, "attn.bk") == 0;
    const int check_grad =
        !key_bias && !(tied_split && ref->cfg.tie_word_embeddings && strcmp(t->name, "embed.weight") == 0);
    double *g = NULL;
    if (check_grad) {
      g = malloc(t->numel * sizeof *g);
      for (size_t j = 0; j < t->numel; j++) g[j] = m->grads[t->offset + j];
    }
    compare_slice(ref, t, m->params + t->offset, g, what);
    free(g);
  }
}

/* Chunks of the shard from a list of layer boundaries, e.g. {0, 2, 3}. */
static void split_chunks(ModelShard *s, const int *bounds, int num_chunks) {
  s->num_chunks = num_chunks;
  for (int c = 0; c < num_chunks; c++) {
    s->layer_begin[c] = bounds[c];
    s->layer_end[c] = bounds[c + 1];
    s->has_embedding[c] = c == 0;
    s->has_head[c] = c == num_chunks - 1;
  }
}

/* TP over t threads (t = 1: no ops), each rank holding the given chunks of
 * the whole model, against the one-rank model. */
static void check_sharded(void (*cfg_fn)(ModelConfig *), int t, const int *bounds, int num_chunks,
                          const char *what) {
  ModelConfig c;
  cfg_fn(&c);
  make_batches(c.vocab_size);
  Model ref;
  ModelLoss ref_loss[2];
  run_reference(&c, &ref, ref_loss);

  TpGroup group;
  TpRank ranks[TP_THREADS_MAX];
  tp_group_init(&group, ranks, t);
  ShardRun runs[TP_THREADS_MAX];
  void *args[TP_THREADS_MAX];
  for (int r = 0; r < t; r++) {
    memset(&runs[r], 0, sizeof runs[r]);
    runs[r].cfg = &c;
    model_shard_default(&c, &runs[r].shard);
    runs[r].shard.tp_size = t;
    runs[r].shard.tp_rank = r;
    runs[r].shard.num_slots = 2;
    split_chunks(&runs[r].shard, bounds, num_chunks);
    runs[r].ops = t > 1 ? &ranks[r].ops : NULL;
    args[r] = &runs[r];
  }
  tp_run(t, shard_worker, args);
  for (int r = 0; r < t; r++) {
    char label[128];
    snprintf(label, sizeof label, "%s, TP rank %d of %d", what, r, t);
    if (runs[r].rc) fail_msg("%s: %s", label, runs[r].err.msg);
    if (runs[r].log.bad) fail_msg("%s: on_grads_ready: %s", label, runs[r].log.why);
    for (int mb = 0; mb < 2; mb++) expect_loss(&runs[r].loss[mb], &ref_loss[mb], label);
    compare_to_reference(&ref, &runs[r].m, 0, label);
    if (c.num_experts > 0) {
      for (int i = 0; i < c.num_layers * c.num_experts; i++)
        assert_int_equal(runs[r].m.expert_counts[i], ref.expert_counts[i]);
      assert_int_equal(runs[r].m.dropped_assignments, ref.dropped_assignments);
      long per_chunk = 0;
      for (int ch = 0; ch < num_chunks; ch++) per_chunk += model_chunk_dropped(&runs[r].m, ch);
      assert_int_equal(per_chunk, ref.dropped_assignments);
      if (c.capacity_factor > 0) assert_true(ref.dropped_assignments > 0);
    }
  }
  for (int r = 0; r < t; r++) model_free(&runs[r].m);
  tp_group_destroy(&group, ranks);
  model_free(&ref);
}

static const int WHOLE[] = {0, 3};
static const int TWO_CHUNKS[] = {0, 2, 3};
static const int THREE_CHUNKS[] = {0, 1, 2, 3};

static void test_tp_dense(void **state) {
  (void)state;
  check_sharded(dense_cfg, 2, WHOLE, 1, "dense TP 2");
  check_sharded(dense_cfg, 4, WHOLE, 1, "dense TP 4 (KV heads shared by rank pairs)");
}

static void test_tp_replicated_kv(void **state) {
  (void)state;
  check_sharded(mqa_cfg, 2, WHOLE, 1, "one KV head, TP 2");
  check_sharded(mqa_cfg, 4, WHOLE, 1, "one KV head, TP 4");
}

static void test_tp_moe(void **state) {
  (void)state;
  check_sharded(moe_cfg, 2, WHOLE, 1, "MoE TP 2");
  check_sharded(moe_cfg, 4, WHOLE, 1, "MoE TP 4");
}

static void test_tp_tied(void **state) {
  (void)state;
  check_sharded(tied_cfg, 2, WHOLE, 1, "tied TP 2");
}

static void check_stages(void (*cfg_fn)(ModelConfig *), const int *bounds, int stages, const char *what);

static void test_tp_gpt2(void **state) {
  (void)state;
  check_sharded(gpt2_cfg, 2, WHOLE, 1, "GPT-2 TP 2");
  check_sharded(gpt2_cfg, 4, WHOLE, 1, "GPT-2 TP 4");
  check_sharded(gpt2_cfg, 1, TWO_CHUNKS, 2, "GPT-2, chunks {0-1},{2}");
  check_sharded(gpt2_cfg, 2, THREE_CHUNKS, 3, "GPT-2 TP 2, chunks {0},{1},{2}");
  check_stages(gpt2_cfg, TWO_CHUNKS, 2, "GPT-2, 2 stages");
  check_stages(gpt2_cfg, THREE_CHUNKS, 3, "GPT-2, 3 stages");
  check_sharded(biased_cfg, 2, WHOLE, 1, "attention biases TP 2");
  check_stages(biased_cfg, TWO_CHUNKS, 2, "attention biases, 2 stages");
  /* KV heads shared by TP ranks would need their bias gradients summed. */
  ModelConfig c;
  biased_cfg(&c);
  ModelShard sh;
  model_shard_default(&c, &sh);
  sh.tp_size = 4;
  Model m;
  Error err = {0};
  assert_int_equal(model_create_shard(&m, &c, &sh, NULL, B, T, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "biases"));
}

static void test_chunks_in_one_model(void **state) {
  (void)state;
  check_sharded(dense_cfg, 1, TWO_CHUNKS, 2, "dense, chunks {0-1},{2}");
  check_sharded(dense_cfg, 1, THREE_CHUNKS, 3, "dense, chunks {0},{1},{2}");
  check_sharded(moe_cfg, 1, THREE_CHUNKS, 3, "MoE, chunks {0},{1},{2}");
  check_sharded(tied_cfg, 1, TWO_CHUNKS, 2, "tied, chunks {0-1},{2}");
  check_sharded(moe_drop_cfg, 1, TWO_CHUNKS, 2, "MoE dropping, chunks {0-1},{2}");
  check_sharded(moe_cfg, 2, TWO_CHUNKS, 2, "MoE TP 2, chunks {0-1},{2}");
  check_sharded(tied_cfg, 2, THREE_CHUNKS, 3, "tied TP 2, chunks {0},{1},{2}");
}

/* --------------------------------------------- one Model per pipeline stage */

static void check_stages(void (*cfg_fn)(ModelConfig *), const int *bounds, int stages, const char *what) {
  ModelConfig c;
  cfg_fn(&c);
  make_batches(c.vocab_size);
  Model ref;
  ModelLoss ref_loss[2];
  run_reference(&c, &ref, ref_loss);
  Model st[4];
  GradLog logs[4];
  Error err = {0};
  memset(logs, 0, sizeof logs);
  for (int s = 0; s < stages; s++) {
    ModelShard sh;
    model_shard_default(&c, &sh);
    sh.num_slots = 2;
    sh.layer_begin[0] = bounds[s];
    sh.layer_end[0] = bounds[s + 1];
    sh.has_embedding[0] = s == 0;
    sh.has_head[0] = s == stages - 1;
    if (model_create_shard(&st[s], &c, &sh, NULL, B, T, &err)) fail_msg("%s: %s", what, err.msg);
    model_init_weights(&st[s], SEED);
    set_biases(&st[s]);
    model_zero_grad(&st[s]);
    st[s].on_grads_ready = log_ready;
    st[s].on_grads_ready_ctx = &logs[s];
  }
  ModelLoss loss[2] = {{0}};
  float *buf = malloc((size_t)N * c.hidden_size * sizeof *buf); /* what travels between stages */
  for (int mb = 0; mb < 2; mb++)
    for (int s = 0; s < stages; s++) {
      ModelLoss l;
      if (model_chunk_forward(&st[s], 0, mb, g_tokens[mb], g_targets[mb], s ? buf : NULL, B, T, 1, 0.5f, &l, &err))
        fail_msg("%s: stage %d: %s", what, s, err.msg);
      add_loss(&loss[mb], &l);
      if (s + 1 < stages) memcpy(buf, model_chunk_output(&st[s], 0, mb), (size_t)N * c.hidden_size * sizeof *buf);
    }
  for (int mb = 0; mb < 2; mb++)
    for (int s = stages - 1; s >= 0; s--) {
      if (chunk_backward_logged(&st[s], &logs[s], 0, mb, s + 1 < stages ? buf : NULL, &err))
        fail_msg("%s: stage %d: %s", what, s, err.msg);
      if (logs[s].bad) fail_msg("%s: stage %d on_grads_ready: %s", what, s, logs[s].why);
      if (s > 0) memcpy(buf, model_chunk_input_grad(&st[s], 0, mb), (size_t)N * c.hidden_size * sizeof *buf);
    }
  free(buf);
  for (int mb = 0; mb < 2; mb++) expect_loss(&loss[mb], &ref_loss[mb], what);
  for (int s = 0; s < stages; s++) compare_to_reference(&ref, &st[s], 1, what);
  if (c.tie_word_embeddings) {
    /* The last stage's head is a copy of embed.weight; the two gradients
     * sum to the one-rank one. */
    const ParamTensor *copy = model_find_tensor(&st[stages - 1], "embed.weight");
    const ParamTensor *emb = model_find_tensor(&st[0], "embed.weight");
    const ParamTensor *re = model_find_tensor(&ref, "embed.weight");
    assert_non_null(copy);
    assert_non_null(emb);
    assert_true(copy->tied_copy);
    assert_false(emb->tied_copy);
    assert_null(model_find_tensor(&st[stages - 1], "lm_head.weight"));
    const double scale = max_abs(ref.grads + re->offset, re->numel);
    for (size_t i = 0; i < re->numel; i++) {
      assert_true(st[stages - 1].params[copy->offset + i] == ref.params[re->offset + i]);
      const double a = (double)st[0].grads[emb->offset + i] + st[stages - 1].grads[copy->offset + i];
      const double b = ref.grads[re->offset + i];
      if (!grad_close(a, b, scale))
        fail_msg("%s: embed + tied copy grad [%zu] = %.8g, one rank %.8g", what, i, a, b);
    }
  }
  for (int s = 0; s < stages; s++) model_free(&st[s]);
  model_free(&ref);
}

static void test_stage_models(void **state) {
  (void)state;
  check_stages(dense_cfg, TWO_CHUNKS, 2, "dense, 2 stages");
  check_stages(moe_cfg, THREE_CHUNKS, 3, "MoE, 3 stages");
  check_stages(tied_cfg, TWO_CHUNKS, 2, "tied, 2 stages");
  check_stages(tied_cfg, THREE_CHUNKS, 3, "tied, 3 stages");
}

/* ------------------------------------------------------------ the table */

static void test_global_tensors(void **state) {
  (void)state;
  void (*cfgs[])(ModelConfig *) = {dense_cfg, moe_cfg, tied_cfg, gpt2_cfg};
  for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
    ModelConfig c;
    cfgs[k](&c);
    Model m;
    Error err = {0};
    if (model_create(&m, &c, 1, 4, &err)) fail_msg("%s", err.msg);
    ParamTensor *g = NULL;
    int n = 0;
    if (model_global_tensors(&c, &g, &n, &err)) fail_msg("%s", err.msg);
    assert_int_equal(n, m.num_tensors);
    assert_int_equal(m.shard.tp_size, 1);
    assert_null(m.ops);
    for (int i = 0; i < n; i++) {
      const ParamTensor *a = &g[i], *b = &m.tensors[i];
      assert_string_equal(a->name, b->name);
      assert_memory_equal(a, b, sizeof *a);
      assert_int_equal(a->view_ndim, a->ndim);
      assert_true(a->tp_replicated);
      assert_int_equal(a->tp_ranks, 1);
      for (int d = 0; d < a->ndim; d++) {
        assert_int_equal(a->global_shape[d], a->shape[d]);
        assert_int_equal(a->view_count[d], a->shape[d]);
        assert_int_equal(a->view_start[d], 0);
      }
    }
    free(g);
    model_free(&m);
  }
}

/* Local shapes and flags of model.h for TP 2 of the dense model, and the
 * chunk ranges of a pipeline shard. */
static void test_shard_table(void **state) {
  (void)state;
  ModelConfig c;
  dense_cfg(&c);
  ModelShard s;
  model_shard_default(&c, &s);
  s.tp_size = 2;
  s.tp_rank = 1;
  TpGroup group;
  TpRank ranks[2];
  tp_group_init(&group, ranks, 2);
  Model m;
  Error err = {0};
  if (model_create_shard(&m, &c, &s, &ranks[1].ops, B, T, &err)) fail_msg("%s", err.msg);
  const ParamTensor *t = model_find_tensor(&m, "layers.1.mlp.w_gate_up");
  assert_int_equal(t->shape[0], 48);
  assert_int_equal(t->view_ndim, 3);
  assert_int_equal(t->view_start[1], 24);
  assert_int_equal(t->view_count[0], 2);
  assert_false(t->tp_replicated);
  t = model_find_tensor(&m, "layers.0.attn.wo");
  assert_int_equal(t->shape[0], 32);
  assert_int_equal(t->shape[1], 16);
  assert_int_equal(t->view_start[1], 16);
  t = model_find_tensor(&m, "layers.0.attn.wk");
  assert_int_equal(t->shape[0], 8);
  assert_int_equal(t->view_start[0], 8);
  t = model_find_tensor(&m, "embed.weight");
  assert_int_equal(t->shape[0], 32);
  assert_int_equal(t->view_start[0], 32);
  t = model_find_tensor(&m, "final_norm.weight");
  assert_true(t->tp_replicated);
  assert_int_equal(t->tp_ranks, 2);
  assert_int_equal(model_chunk_rows(&m, B, T), N / 2);
  model_free(&m);
  tp_group_destroy(&group, ranks);

  /* pipeline: the chunks tile the buffer in order */
  model_shard_default(&c, &s);
  split_chunks(&s, THREE_CHUNKS, 3);
  if (model_create_shard(&m, &c, &s, NULL, B, T, &err)) fail_msg("%s", err.msg);
  size_t end = 0;
  for (int ch = 0; ch < 3; ch++) {
    size_t off, cnt;
    model_chunk_params(&m, ch, &off, &cnt);
    assert_true(off == end);
    end = off + cnt;
  }
  assert_true(end == m.num_params);
  assert_true(model_find_tensor(&m, "embed.weight")->offset == 0);
  model_free(&m);
}

/* ---------------------------------------------------------------- errors */

static void expect_shard_error(const ModelConfig *c, const ModelShard *s, int code, const char *needle) {
  TpGroup group;
  TpRank ranks[TP_THREADS_MAX];
  const int t = s->tp_size >= 1 && s->tp_size <= TP_THREADS_MAX ? s->tp_size : 1;
  tp_group_init(&group, ranks, t);
  Model m;
  Error err = {0};
  int rc = model_create_shard(&m, c, s, &ranks[0].ops, B, T, &err);
  tp_group_destroy(&group, ranks);
  expect_create_failed(rc, &m, &err, code, needle);
}

static void test_errors(void **state) {
  (void)state;
  ModelConfig c;
  ModelShard s;
  dense_cfg(&c);
  model_shard_default(&c, &s);
  s.tp_size = 3;
  expect_shard_error(&c, &s, ERR_CONFIG, "num_attention_heads 4 is not divisible by tp_size 3");
  c.vocab_size = 66;
  s.tp_size = 4;
  expect_shard_error(&c, &s, ERR_CONFIG, "vocab_size 66 is not divisible by tp_size 4");
  dense_cfg(&c);
  c.intermediate_size = 50;
  expect_shard_error(&c, &s, ERR_CONFIG, "intermediate_size 50 is not divisible by tp_size 4");
  dense_cfg(&c);
  c.num_heads = 6;
  c.num_kv_heads = 3;
  c.head_dim = 4;
  s.tp_size = 2;
  expect_shard_error(&c, &s, ERR_CONFIG, "KV heads");
  dense_cfg(&c);
  model_shard_default(&c, &s);
  s.layer_end[0] = 4;
  expect_shard_error(&c, &s, ERR_CONFIG, "outside [0, 3)");
  split_chunks(&s, TWO_CHUNKS, 2);
  s.layer_begin[1] = 1;
  expect_shard_error(&c, &s, ERR_CONFIG, "overlap");
  model_shard_default(&c, &s);
  s.num_chunks = 0;
  expect_shard_error(&c, &s, ERR_CONFIG, "num_chunks 0");
  s.num_chunks = MODEL_MAX_CHUNKS + 1;
  expect_shard_error(&c, &s, ERR_CONFIG, "MODEL_MAX_CHUNKS");
  model_shard_default(&c, &s);
  s.tp_rank = 1;
  expect_shard_error(&c, &s, ERR_CONFIG, "tp_rank 1");
  model_shard_default(&c, &s);
  s.num_slots = 0;
  expect_shard_error(&c, &s, ERR_CONFIG, "num_slots");

  /* rows not divisible by tp, checked at forward time (no collective runs) */
  model_shard_default(&c, &s);
  s.tp_size = 2;
  TpGroup group;
  TpRank ranks[2];
  tp_group_init(&group, ranks, 2);
  Model m;
  Error err = {0};
  if (model_create_shard(&m, &c, &s, &ranks[0].ops, B, T, &err)) fail_msg("%s", err.msg);
  assert_int_equal(model_forward(&m, g_tokens[0], NULL, 1, 5, 0, 1.0f, NULL, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "not divisible by tp_size 2"));
  model_free(&m);
  tp_group_destroy(&group, ranks);

  /* the whole-model calls need chunk 0 to hold embedding and head */
  model_shard_default(&c, &s);
  split_chunks(&s, TWO_CHUNKS, 2);
  if (model_create_shard(&m, &c, &s, NULL, B, T, &err)) fail_msg("%s", err.msg);
  assert_int_equal(model_forward(&m, g_tokens[0], NULL, B, T, 0, 1.0f, NULL, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "chunk 0"));
  assert_int_equal(model_chunk_forward(&m, 1, 0, NULL, NULL, NULL, B, T, 0, 1.0f, NULL, &err), ERR_ARG);
  assert_int_equal(model_chunk_backward(&m, 0, 1, NULL, &err), ERR_ARG);
  assert_int_equal(model_chunk_forward(&m, 2, 0, g_tokens[0], NULL, NULL, B, T, 0, 1.0f, NULL, &err), ERR_ARG);
  model_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_global_tensors),   cmocka_unit_test(test_shard_table),
      cmocka_unit_test(test_chunks_in_one_model), cmocka_unit_test(test_stage_models),
      cmocka_unit_test(test_tp_dense),         cmocka_unit_test(test_tp_replicated_kv),
      cmocka_unit_test(test_tp_moe),           cmocka_unit_test(test_tp_tied),
      cmocka_unit_test(test_tp_gpt2),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
