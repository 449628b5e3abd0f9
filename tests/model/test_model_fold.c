/* MoE parallel folding in the model (model.h: context parallelism, expert
 * parallelism) against the one-rank model, ranks as threads
 * (fold_threads.h). All ranks of a TP x CP group get the same micro-batch,
 * the DP groups different ones; the one-rank model runs each micro-batch
 * (grad_scale 1, gradients accumulated). For every rank:
 *  - lm, aux, z and tokens equal the one-rank values of its micro-batch
 *    (every rank reports the whole micro-batch's);
 *  - expert_counts equal the one-rank counts of its micro-batch;
 *  - every local parameter equals the one-rank value at its view position
 *    (init by global index), and the gradient, summed over the group the
 *    runtime reduces over (EDP for reduce_over_edp tensors, DP x CP for
 *    all others), equals the one-rank gradient summed over micro-batches.
 * Layouts: EP2, EP4, EP2 x ETP2, TP2 with EP2 (folded, EDP 2), TP2 x CP2
 * with EP4, CP2 dense, TP2 x CP2 dense, CP2 MoE (EP1 and EP2); each MoE one
 * with both dispatchers. Dropping (capacity factor 1): with a rank's tokens
 * = its micro-batch the run equals the one-rank model (drops included);
 * with TP2 the dropped count of each rank equals the capacity rule applied
 * to its own routed tokens. Also the table's views/flags and the errors.
 * Tolerances: shard_check.h. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/rng.h"
#include "fold_threads.h"
#include "model/model.h"
#include "model/model_internal.h"
#include "shard_check.h"

enum { B = 2, T = 8, N = B * T, SEED = 4321, MAX_MB = 4 };

static void dense_cfg(ModelConfig *c) { shard_dense_cfg(c); }

/* 8 experts, dropless, a shared expert, layer 1 dense. */
static void moe_cfg(ModelConfig *c) { shard_moe_cfg(c, 8); }

static void moe_drop_cfg(ModelConfig *c) {
  moe_cfg(c);
  c->capacity_factor = 1.0f;
}

static int g_tokens[MAX_MB][N], g_targets[MAX_MB][N];

static void make_batches(int V) {
  for (int mb = 0; mb < MAX_MB; mb++)
    for (int n = 0; n < N; n++) {
      g_tokens[mb][n] = (int)(rng_u64(17, (uint64_t)mb, (uint64_t)n) % (uint64_t)V);
      g_targets[mb][n] = n % 5 == 2 ? -1 : (int)(rng_u64(18, (uint64_t)mb, (uint64_t)n) % (uint64_t)V);
    }
}

/* ------------------------------------------------------------ reference */

typedef struct Reference {
  Model m;
  ModelLoss loss[MAX_MB];
  long *counts[MAX_MB];
  long dropped[MAX_MB];
} Reference;

static void run_reference(const ModelConfig *c, int dp, Reference *ref) {
  Error err = {0};
  if (model_create(&ref->m, c, B, T, &err)) fail_msg("%s", err.msg);
  model_init_weights(&ref->m, SEED);
  model_zero_grad(&ref->m);
  const size_t nc = (size_t)c->num_layers * (c->num_experts > 0 ? c->num_experts : 1);
  for (int mb = 0; mb < dp; mb++) {
    if (model_forward(&ref->m, g_tokens[mb], g_targets[mb], B, T, 1, 1.0f, &ref->loss[mb], &err))
      fail_msg("%s", err.msg);
    ref->counts[mb] = malloc(nc * sizeof(long));
    memcpy(ref->counts[mb], ref->m.expert_counts, nc * sizeof(long));
    ref->dropped[mb] = ref->m.dropped_assignments;
    if (model_backward(&ref->m, &err)) fail_msg("%s", err.msg);
  }
}

static void free_reference(Reference *ref, int dp) {
  for (int mb = 0; mb < dp; mb++) free(ref->counts[mb]);
  model_free(&ref->m);
}

/* ------------------------------------------------------------ one rank */

typedef struct Layout {
  int tp, cp, dp, ep, etp, dispatcher;
} Layout;

typedef struct RankRun {
  const ModelConfig *cfg;
  Layout lay;
  FoldRank *fr;
  Model m;
  ModelLoss loss;
  long drop_rule; /* dropped assignments by the capacity rule on this rank's routed tokens */
} RankRun;

/* Assignments over capacity on this rank's own tokens, from its routing. */
static long capacity_rule_drops(const Model *m) {
  const ModelActs *A = m->acts;
  long total = 0;
  const int cap = moe_capacity(&A->moe, A->Nl);
  for (int l = A->layer_begin; l < A->layer_end; l++) {
    if (!(A->moe.E > 0 && m->cfg.is_moe_layer[l])) continue;
    const LayerActs *la = &A->layers[l];
    const int *idx = A->dispatcher == MODEL_MOE_ALLTOALL ? la->a2a.routing.topk_idx : la->ag.routing.topk_idx;
    long counts[64] = {0};
    for (int a = 0; a < A->Nl * A->moe.K; a++) counts[idx[a]]++;
    for (int e = 0; e < A->moe.E; e++) total += counts[e] > cap ? counts[e] - cap : 0;
  }
  return total;
}

static void *rank_worker(void *arg) {
  RankRun *r = arg;
  FoldRank *fr = r->fr;
  ModelShard sh;
  model_shard_default(r->cfg, &sh);
  sh.tp_size = r->lay.tp;
  sh.tp_rank = fr->tp_i;
  sh.cp_size = r->lay.cp;
  sh.cp_rank = fr->cp_i;
  sh.ep_size = r->lay.ep;
  sh.ep_rank = fr->ep_i;
  sh.etp_size = r->lay.etp;
  sh.etp_rank = fr->etp_i;
  sh.moe_dispatcher = r->lay.dispatcher;
  Error err = {0};
  /* A failing rank would leave its peers in a barrier: end the test here. */
  if (model_create_shard(&r->m, r->cfg, &sh, &fr->ops, B, T, &err)) {
    fprintf(stderr, "rank %d: %s\n", fr->rank, err.msg);
    _exit(1);
  }
  model_init_weights(&r->m, SEED);
  model_zero_grad(&r->m);
  const int mb = fr->dp_i;
  if (model_forward(&r->m, g_tokens[mb], g_targets[mb], B, T, 1, 1.0f, &r->loss, &err) ||
      model_backward(&r->m, &err)) {
    fprintf(stderr, "rank %d: %s\n", fr->rank, err.msg);
    _exit(1);
  }
  if (r->cfg->capacity_factor > 0) r->drop_rule = capacity_rule_drops(&r->m);
  return NULL;
}

/* ------------------------------------------------------------ comparing */

/* Rank k's gradient of tensor i summed over the group the runtime reduces
 * it over (the members hold the same slice: same table). */
static void reduced_grad(RankRun *runs, int size, int k, const ParamTensor *t, double *out) {
  const FoldRank *me = runs[k].fr;
  memset(out, 0, t->numel * sizeof *out);
  for (int j = 0; j < size; j++) {
    const FoldRank *o = runs[j].fr;
    const int same = t->reduce_over_edp ? o->ep_i == me->ep_i && o->etp_i == me->etp_i : o->tp_i == me->tp_i;
    if (!same) continue;
    const ParamTensor *u = model_find_tensor(&runs[j].m, t->name);
    assert_non_null(u);
    assert_true(u->numel == t->numel);
    for (size_t i = 0; i < t->numel; i++) out[i] += runs[j].m.grads[u->offset + i];
  }
}

static void compare_rank(const Reference *ref, RankRun *runs, int size, int k, const char *what) {
  const Model *m = &runs[k].m;
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *t = &m->tensors[i];
    double *g = malloc(t->numel * sizeof *g);
    reduced_grad(runs, size, k, t, g);
    compare_slice(&ref->m, t, m->params + t->offset, g, what);
    free(g);
  }
}

/* Runs the layout, checks every rank; `exact_drops`: each rank's tokens
 * are its micro-batch, so drops match the one-rank model too. */
static void check_layout(void (*cfg_fn)(ModelConfig *), Layout lay, const char *what) {
  ModelConfig c;
  cfg_fn(&c);
  make_batches(c.vocab_size);
  const int size = lay.tp * lay.cp * lay.dp;
  assert_true(size <= FOLD_MAX_RANKS && lay.dp <= MAX_MB && size % (lay.ep * lay.etp) == 0);
  Reference ref;
  memset(&ref, 0, sizeof ref);
  run_reference(&c, lay.dp, &ref);

  FoldWorld w;
  FoldRank fr[FOLD_MAX_RANKS];
  fold_world_init(&w, fr, lay.tp, lay.cp, lay.dp, lay.ep, lay.etp);
  RankRun runs[FOLD_MAX_RANKS];
  void *args[FOLD_MAX_RANKS];
  for (int k = 0; k < size; k++) {
    memset(&runs[k], 0, sizeof runs[k]);
    runs[k].cfg = &c;
    runs[k].lay = lay;
    runs[k].fr = &fr[k];
    args[k] = &runs[k];
  }
  fold_run(size, rank_worker, args);
  const int local_is_microbatch = lay.tp * lay.cp == 1;
  long any_dropped = 0;
  for (int k = 0; k < size; k++) any_dropped += runs[k].m.dropped_assignments;
  if (c.capacity_factor > 0 && any_dropped == 0) fail_msg("%s: the dropping case dropped nothing", what);
  for (int k = 0; k < size; k++) {
    char label[192];
    snprintf(label, sizeof label, "%s (%s), rank %d (tp %d cp %d dp %d | etp %d ep %d edp %d)", what,
             lay.dispatcher ? "all-gather" : "all-to-all", k, fr[k].tp_i, fr[k].cp_i, fr[k].dp_i, fr[k].etp_i,
             fr[k].ep_i, fr[k].edp_i);
    const int mb = fr[k].dp_i;
    const Model *m = &runs[k].m;
    if (c.capacity_factor > 0) {
      assert_int_equal(m->dropped_assignments, runs[k].drop_rule);
      if (!local_is_microbatch) continue; /* another model than the one-rank one */
      assert_int_equal(m->dropped_assignments, ref.dropped[mb]);
      assert_true(ref.dropped[mb] > 0);
    } else {
      assert_int_equal(m->dropped_assignments, 0);
    }
    expect_loss(&runs[k].loss, &ref.loss[mb], label);
    for (int i = 0; c.num_experts > 0 && i < c.num_layers * c.num_experts; i++)
      if (m->expert_counts[i] != ref.counts[mb][i])
        fail_msg("%s: expert_counts[%d] = %ld, one rank %ld", label, i, m->expert_counts[i], ref.counts[mb][i]);
    compare_rank(&ref, runs, size, k, label);
  }
  for (int k = 0; k < size; k++) model_free(&runs[k].m);
  fold_world_destroy(&w);
  free_reference(&ref, lay.dp);
}

static void check_both(void (*cfg_fn)(ModelConfig *), Layout lay, const char *what) {
  for (int d = 0; d < 2; d++) {
    lay.dispatcher = d;
    check_layout(cfg_fn, lay, what);
  }
}

/* ---------------------------------------------------------------- cases */

static void test_expert_parallel(void **state) {
  (void)state;
  check_both(moe_cfg, (Layout){1, 1, 2, 2, 1, 0}, "EP2");
  check_both(moe_cfg, (Layout){1, 1, 4, 4, 1, 0}, "EP4");
  check_both(moe_cfg, (Layout){1, 1, 4, 2, 2, 0}, "EP2 x ETP2");
  check_both(moe_cfg, (Layout){1, 1, 2, 1, 2, 0}, "ETP2");
}

static void test_folded_tp(void **state) {
  (void)state;
  check_both(moe_cfg, (Layout){2, 1, 2, 2, 1, 0}, "TP2 attention, EP2 MoE, EDP2");
  check_both(moe_cfg, (Layout){2, 1, 1, 1, 2, 0}, "TP2 attention, ETP2 MoE");
}

static void test_folded_tp_cp(void **state) {
  (void)state;
  check_both(moe_cfg, (Layout){2, 2, 1, 4, 1, 0}, "TP2 x CP2 attention, EP4 MoE");
  check_both(moe_cfg, (Layout){2, 2, 1, 2, 2, 0}, "TP2 x CP2 attention, EP2 x ETP2 MoE");
}

static void test_context_parallel(void **state) {
  (void)state;
  check_layout(dense_cfg, (Layout){1, 2, 2, 1, 1, 0}, "CP2 dense, DP2");
  check_layout(dense_cfg, (Layout){2, 2, 1, 1, 1, 0}, "TP2 x CP2 dense");
  check_layout(dense_cfg, (Layout){1, 4, 1, 1, 1, 0}, "CP4 dense");
  check_both(moe_cfg, (Layout){1, 2, 2, 1, 1, 0}, "CP2 MoE, EP1, DP2");
  check_both(moe_cfg, (Layout){1, 2, 1, 2, 1, 0}, "CP2 MoE, EP2");
}

static void test_dropping(void **state) {
  (void)state;
  check_both(moe_drop_cfg, (Layout){1, 1, 2, 2, 1, 0}, "dropping, EP2");
  check_both(moe_drop_cfg, (Layout){1, 1, 4, 2, 2, 0}, "dropping, EP2 x ETP2");
  check_both(moe_drop_cfg, (Layout){2, 1, 1, 2, 1, 0}, "dropping, TP2 attention, EP2 MoE");
  check_both(moe_drop_cfg, (Layout){1, 2, 1, 2, 1, 0}, "dropping, CP2, EP2");
}

/* ------------------------------------------------------------ the table */

static void test_table(void **state) {
  (void)state;
  ModelConfig c;
  moe_cfg(&c);
  FoldWorld w;
  FoldRank fr[FOLD_MAX_RANKS];
  fold_world_init(&w, fr, 1, 1, 4, 2, 2);
  ModelShard s;
  model_shard_default(&c, &s);
  assert_int_equal(s.cp_size, 1);
  assert_int_equal(s.ep_size, 1);
  assert_int_equal(s.etp_size, 1);
  s.ep_size = 2;
  s.ep_rank = 1;
  s.etp_size = 2;
  s.etp_rank = 1;
  Model m;
  Error err = {0};
  if (model_create_shard(&m, &c, &s, &fr[3].ops, B, T, &err)) fail_msg("%s", err.msg);
  const ParamTensor *t = model_find_tensor(&m, "layers.0.moe.experts.w_gate_up");
  assert_non_null(t);
  assert_int_equal(t->shape[0], 4);
  assert_int_equal(t->shape[1], 16);
  assert_int_equal(t->shape[2], 32);
  assert_int_equal(t->view_ndim, 4);
  const int vs[4] = {8, 2, 16, 32}, st[4] = {4, 0, 8, 0}, ct[4] = {4, 2, 8, 32};
  for (int d = 0; d < 4; d++) {
    assert_int_equal(t->view_shape[d], vs[d]);
    assert_int_equal(t->view_start[d], st[d]);
    assert_int_equal(t->view_count[d], ct[d]);
  }
  assert_true(t->is_expert && t->reduce_over_edp);
  assert_int_equal(t->tp_ranks, 1);
  t = model_find_tensor(&m, "layers.2.moe.experts.w_down");
  assert_int_equal(t->shape[0], 4);
  assert_int_equal(t->shape[1], 32);
  assert_int_equal(t->shape[2], 8);
  assert_int_equal(t->view_start[0], 4);
  assert_int_equal(t->view_start[2], 8);
  assert_true(t->reduce_over_edp);
  t = model_find_tensor(&m, "layers.0.moe.router");
  assert_false(t->reduce_over_edp);
  assert_false(t->is_expert);
  model_free(&m);

  /* the TP path keeps whole experts, reduced like dense tensors; zeroed new fields mean size 1 */
  memset(&s, 0, sizeof s);
  s.tp_size = 1;
  s.num_chunks = 1;
  s.layer_end[0] = c.num_layers;
  s.has_embedding[0] = s.has_head[0] = 1;
  s.num_slots = 1;
  if (model_create_shard(&m, &c, &s, NULL, B, T, &err)) fail_msg("%s", err.msg);
  t = model_find_tensor(&m, "layers.0.moe.experts.w_gate_up");
  assert_int_equal(t->shape[0], 8);
  assert_false(t->reduce_over_edp);
  assert_int_equal(m.shard.cp_size, 1);
  assert_int_equal(model_chunk_rows(&m, B, T), N);
  model_free(&m);

  /* CP2 x TP2 rows */
  model_shard_default(&c, &s);
  s.tp_size = 2;
  s.cp_size = 2;
  s.cp_rank = 1;
  if (model_create_shard(&m, &c, &s, &fr[0].ops, B, T, &err)) fail_msg("%s", err.msg);
  assert_int_equal(model_chunk_rows(&m, B, T), N / 4);
  model_free(&m);
  fold_world_destroy(&w);
}

/* ---------------------------------------------------------------- errors */

static void expect_error(const ModelConfig *c, const ModelShard *s, const ModelParallelOps *ops, int max_T, int code,
                         const char *needle) {
  Model m;
  Error err = {0};
  expect_create_failed(model_create_shard(&m, c, s, ops, B, max_T, &err), &m, &err, code, needle);
}

static void test_errors(void **state) {
  (void)state;
  ModelConfig c;
  moe_cfg(&c);
  FoldWorld w;
  FoldRank fr[FOLD_MAX_RANKS];
  fold_world_init(&w, fr, 1, 1, 1, 1, 1);
  const ModelParallelOps *ops = &fr[0].ops;
  ModelShard s;
  model_shard_default(&c, &s);
  s.ep_size = 3;
  expect_error(&c, &s, ops, T, ERR_CONFIG, "num_experts 8 is not divisible by ep_size 3");
  model_shard_default(&c, &s);
  s.etp_size = 3;
  expect_error(&c, &s, ops, T, ERR_CONFIG, "moe_intermediate_size 16 is not divisible by etp_size 3");
  model_shard_default(&c, &s);
  s.ep_size = 2;
  s.ep_rank = 2;
  expect_error(&c, &s, ops, T, ERR_CONFIG, "ep_rank 2 of ep_size 2");
  model_shard_default(&c, &s);
  s.cp_size = 2;
  s.cp_rank = -1;
  expect_error(&c, &s, ops, T, ERR_CONFIG, "cp_rank -1");
  model_shard_default(&c, &s);
  s.moe_dispatcher = 2;
  expect_error(&c, &s, ops, T, ERR_CONFIG, "moe_dispatcher 2");
  model_shard_default(&c, &s);
  s.cp_size = 3;
  expect_error(&c, &s, ops, T, ERR_CONFIG, "not divisible by 2 * cp_size = 6");
  model_shard_default(&c, &s);
  s.ep_size = 2;
  expect_error(&c, &s, NULL, T, ERR_ARG, "ModelParallelOps.moe");
  model_shard_default(&c, &s);
  s.cp_size = 2;
  ModelParallelOps no_cp = *ops;
  no_cp.cp = NULL;
  expect_error(&c, &s, &no_cp, T, ERR_ARG, "ModelParallelOps.cp");

  /* a sequence the CP split cannot cut, at forward time (no collective runs) */
  dense_cfg(&c);
  model_shard_default(&c, &s);
  s.cp_size = 2;
  Model m;
  Error err = {0};
  if (model_create_shard(&m, &c, &s, ops, B, T, &err)) fail_msg("%s", err.msg);
  make_batches(c.vocab_size);
  assert_int_equal(model_forward(&m, g_tokens[0], NULL, 1, 6, 0, 1.0f, NULL, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "2 * cp_size = 4"));
  float logits[4];
  assert_int_equal(model_logits(&m, g_tokens[0], 1, 4, logits, &err), ERR_ARG);
  model_free(&m);
  fold_world_destroy(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),          cmocka_unit_test(test_errors),
      cmocka_unit_test(test_expert_parallel), cmocka_unit_test(test_folded_tp),
      cmocka_unit_test(test_folded_tp_cp),    cmocka_unit_test(test_context_parallel),
      cmocka_unit_test(test_dropping),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
