/* Upcycling (convert/upcycle.h): the MoE made from a dense model computes the
 * dense logits at initialisation for every configuration where the math
 * says so (granularity 1, 2 and 4; both router orders; renormalised and
 * sigmoid routing), and only approximately for unnormalised
 * softmax-then-top-k with a random router; the weight layout and the
 * routing pick whole copies of the MLP; bad options are refused with clear
 * messages; and the checkpoint it writes resumes through the trainer at the
 * dense model's validation loss and then trains. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>

#include "convert/upcycle.h"
#include "upcycle/upcycle_test_util.h"

enum { B = 2, T = 16 };

static void dense_config(ModelConfig *cfg) {
  cJSON *j = cJSON_Parse(UPC_DENSE_MODEL);
  Error err = {0};
  if (!j || model_config_from_json(cfg, j, "dense", &err)) fail_msg("%s", err.msg);
  cJSON_Delete(j);
}

/* A dense model with random weights and norm weights away from 1, as a
 * trained one has. */
static void make_dense(Model *m) {
  ModelConfig cfg;
  dense_config(&cfg);
  Error err = {0};
  if (model_create(m, &cfg, B, T, &err)) fail_msg("%s", err.msg);
  model_init_weights(m, 7);
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *t = &m->tensors[i];
    if (!t->no_weight_decay) continue;
    for (size_t j = 0; j < t->numel; j++)
      m->params[t->offset + j] = (float)(1.0 + 0.3 * rng_normal(11, (uint64_t)i, j));
  }
  /* A trained MLP is larger than its initialisation: it matters to the
   * logits, so a wrong expert scale shows. */
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *t = &m->tensors[i];
    if (strstr(t->name, "mlp."))
      for (size_t j = 0; j < t->numel; j++) m->params[t->offset + j] *= 4.0f;
  }
}

static void tokens(int *tok) {
  for (int i = 0; i < B * T; i++) tok[i] = (int)(rng_u64(5, 1, (uint64_t)i) % UPC_VOCAB);
}

typedef struct Case {
  int E, K, G;
  RouterScore score;
  RouterOrder order;
  int norm;
  float std; /* router init std; < 0: the model's */
} Case;

static void options_of(const Case *c, UpcycleOptions *o) {
  upcycle_options_default(o);
  o->num_experts = c->E;
  o->top_k = c->K;
  o->granularity = c->G;
  o->router_score = c->score;
  o->router_order = c->order;
  o->norm_topk_prob = c->norm;
  o->router_init_std = c->std;
  o->seed = 99;
}

/* Builds the upcycled model of `c` from `dense` (caller frees). */
static void upcycle_model(const Model *dense, const Case *c, Model *moe) {
  UpcycleOptions o;
  options_of(c, &o);
  ModelConfig mc;
  Error err = {0};
  if (upcycle_model_config(&dense->cfg, &o, &mc, &err)) fail_msg("%s", err.msg);
  if (model_create(moe, &mc, B, T, &err)) fail_msg("%s", err.msg);
  if (upcycle_weights(dense, moe, &o, &err)) fail_msg("%s", err.msg);
}

/* max |moe - dense| over the logits, relative to max |dense|. */
static double logits_gap(Model *dense, const Case *c, Model *moe_out) {
  static float ld[B * T * UPC_VOCAB], lm[B * T * UPC_VOCAB];
  int tok[B * T];
  tokens(tok);
  Error err = {0};
  Model moe;
  upcycle_model(dense, c, &moe);
  if (model_logits(dense, tok, B, T, ld, &err) || model_logits(&moe, tok, B, T, lm, &err)) fail_msg("%s", err.msg);
  double diff = 0, scale = 0;
  for (int i = 0; i < B * T * UPC_VOCAB; i++) {
    diff = fmax(diff, fabs((double)lm[i] - ld[i]));
    scale = fmax(scale, fabs((double)ld[i]));
  }
  if (moe_out)
    *moe_out = moe;
  else
    model_free(&moe);
  return diff / scale;
}

#define TOL 2e-6

static void test_logits_match_dense(void **state) {
  (void)state;
  static const Case cases[] = {
      /* granularity 1: copies of the whole MLP */
      {4, 1, 1, ROUTER_SCORE_SOFTMAX, ROUTER_SOFTMAX_THEN_TOPK, 0, 0.0f},
      {4, 2, 1, ROUTER_SCORE_SOFTMAX, ROUTER_SOFTMAX_THEN_TOPK, 0, 0.0f},
      {4, 2, 1, ROUTER_SCORE_SOFTMAX, ROUTER_TOPK_THEN_SOFTMAX, 0, -1.0f},
      {4, 2, 1, ROUTER_SCORE_SOFTMAX, ROUTER_SOFTMAX_THEN_TOPK, 1, -1.0f},
      {4, 1, 1, ROUTER_SCORE_SOFTMAX, ROUTER_TOPK_THEN_SOFTMAX, 0, 0.5f},
      /* fine-grained: one copy of every slice per pick group */
      {8, 2, 2, ROUTER_SCORE_SOFTMAX, ROUTER_SOFTMAX_THEN_TOPK, 0, 0.0f},
      {8, 2, 2, ROUTER_SCORE_SOFTMAX, ROUTER_TOPK_THEN_SOFTMAX, 0, -1.0f},
      {8, 4, 2, ROUTER_SCORE_SOFTMAX, ROUTER_TOPK_THEN_SOFTMAX, 0, 0.3f},
      {8, 4, 4, ROUTER_SCORE_SOFTMAX, ROUTER_SOFTMAX_THEN_TOPK, 0, 0.0f},
      {8, 4, 4, ROUTER_SCORE_SOFTMAX, ROUTER_TOPK_THEN_SOFTMAX, 0, -1.0f},
      {16, 8, 4, ROUTER_SCORE_SOFTMAX, ROUTER_SOFTMAX_THEN_TOPK, 1, 0.3f},
      /* sigmoid: renormalised for K > 1, sigma(0) = 1/2 for one pick */
      {4, 1, 1, ROUTER_SCORE_SIGMOID, ROUTER_SOFTMAX_THEN_TOPK, 0, 0.0f},
      {8, 4, 2, ROUTER_SCORE_SIGMOID, ROUTER_SOFTMAX_THEN_TOPK, 0, -1.0f},
  };
  Model dense;
  make_dense(&dense);
  double worst = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double gap = logits_gap(&dense, &cases[i], NULL);
    worst = fmax(worst, gap);
    if (!(gap <= TOL))
      fail_msg("case %zu (E%d K%d G%d, score %d, order %d, norm %d, std %g): logits differ by %.3g (relative)", i,
               cases[i].E, cases[i].K, cases[i].G, cases[i].score, cases[i].order, cases[i].norm, cases[i].std, gap);
  }
  print_message("largest relative logit gap over %zu exact cases: %.2g\n", sizeof cases / sizeof cases[0], worst);
  model_free(&dense);
}

/* Unnormalised softmax-then-top-k weighs each pick by its probability: the
 * scale assumes 1/E, exact for a zero router only. With random rows the
 * start is measurably off (which is why a wrong scale would be caught by
 * the test above: the same comparison sees it). */
static void test_unnormalised_softmax_needs_uniform_router(void **state) {
  (void)state;
  Model dense;
  make_dense(&dense);
  Case c = {8, 2, 1, ROUTER_SCORE_SOFTMAX, ROUTER_SOFTMAX_THEN_TOPK, 0, 0.0f};
  assert_true(logits_gap(&dense, &c, NULL) <= TOL);
  c.std = 0.3f;
  double off = logits_gap(&dense, &c, NULL);
  if (!(off > 1e-3)) fail_msg("a random router should move the logits (gap %.3g)", off);
  c.std = 0.02f; /* the usual initializer_range */
  double usual = logits_gap(&dense, &c, NULL);
  c.std = -1.0f; /* the default: router logits of std 0.01 */
  double small = logits_gap(&dense, &c, NULL);
  if (!(small > TOL && small < usual && usual < off))
    fail_msg("default gap %.3g, std 0.02 gap %.3g, std 0.3 gap %.3g", small, usual, off);
  print_message(
      "unnormalised softmax_then_topk E8 K2: relative logit gap %.2g with the default router (logit std 0.01), "
      "%.2g at router std 0.02, %.2g at 0.3\n",
      small, usual, off);
  /* The flags that make it exact for any router say so. */
  UpcycleOptions o;
  options_of(&c, &o);
  ModelConfig mc;
  Error err = {0};
  assert_int_equal(upcycle_model_config(&dense.cfg, &o, &mc, &err), 0);
  assert_false(upcycle_exact_for_any_router(&mc));
  mc.router_order = ROUTER_TOPK_THEN_SOFTMAX;
  assert_true(upcycle_exact_for_any_router(&mc));
  model_free(&dense);
}

/* Expert e = slice e mod G, copy e / G; scale c = E*G/K for unnormalised
 * softmax, G when the picks are renormalised. */
static void test_layout_and_scale(void **state) {
  (void)state;
  Model dense, moe;
  make_dense(&dense);
  const Case c = {8, 4, 4, ROUTER_SCORE_SOFTMAX, ROUTER_SOFTMAX_THEN_TOPK, 0, -1.0f};
  upcycle_model(&dense, &c, &moe);
  const int C = 32, F = 64, G = 4, Fe = F / G, E = 8;
  assert_int_equal(moe.cfg.moe_intermediate_size, Fe);
  assert_string_equal(moe.cfg.model_type, "fivefold");
  const double scale = upcycle_expert_scale(&moe.cfg, G);
  assert_true(fabs(scale - 8.0 * 4 / 4) < 1e-12);
  const float s = (float)sqrt(scale);
  for (int layer = 0; layer < 2; layer++) {
    char name[96];
    snprintf(name, sizeof name, "layers.%d.mlp.w_gate_up", layer);
    const float *dgu = dense.params + model_find_tensor(&dense, name)->offset;
    snprintf(name, sizeof name, "layers.%d.mlp.w_down", layer);
    const float *dd = dense.params + model_find_tensor(&dense, name)->offset;
    snprintf(name, sizeof name, "layers.%d.moe.experts.w_gate_up", layer);
    const float *gu = moe.params + model_find_tensor(&moe, name)->offset;
    snprintf(name, sizeof name, "layers.%d.moe.experts.w_down", layer);
    const float *down = moe.params + model_find_tensor(&moe, name)->offset;
    snprintf(name, sizeof name, "layers.%d.moe.router", layer);
    const float *router = moe.params + model_find_tensor(&moe, name)->offset;
    for (int e = 0; e < E; e++) {
      const int sl = e % G;
      for (int r = 0; r < Fe; r++)
        for (int j = 0; j < C; j++) {
          assert_true(gu[((size_t)e * 2 * Fe + r) * C + j] == dgu[(size_t)(sl * Fe + r) * C + j]);
          float up = gu[((size_t)e * 2 * Fe + Fe + r) * C + j], want = dgu[(size_t)(F + sl * Fe + r) * C + j] * s;
          assert_true(fabsf(up - want) <= 1e-6f * fabsf(want));
        }
      for (int j = 0; j < C; j++)
        for (int r = 0; r < Fe; r++) {
          float got = down[((size_t)e * C + j) * Fe + r], want = dd[(size_t)j * F + sl * Fe + r] * s;
          assert_true(fabsf(got - want) <= 1e-6f * fabsf(want));
        }
      /* the G experts of copy e / G share a router row; copies differ */
      for (int j = 0; j < C; j++) assert_true(router[(size_t)e * C + j] == router[(size_t)(e / G * G) * C + j]);
      if (e >= G) assert_true(router[(size_t)e * C] != router[0]);
    }
  }
  model_free(&moe);
  UpcycleOptions o;
  options_of(&c, &o);
  o.norm_topk_prob = 1;
  ModelConfig mc;
  Error err = {0};
  assert_int_equal(upcycle_model_config(&dense.cfg, &o, &mc, &err), 0);
  assert_true(fabs(upcycle_expert_scale(&mc, G) - G) < 1e-12);
  o.norm_topk_prob = 0;
  o.router_order = ROUTER_TOPK_THEN_SOFTMAX;
  assert_int_equal(upcycle_model_config(&dense.cfg, &o, &mc, &err), 0);
  assert_true(fabs(upcycle_expert_scale(&mc, G) - G) < 1e-12);
  model_free(&dense);
}

/* Every token picks whole copies: per layer, the G experts of one copy get
 * the same count. With a zero router all scores tie and the lowest indices
 * win: experts 0..K-1, which are copies 0..K/G-1 of every slice. */
static void test_routing_picks_whole_copies(void **state) {
  (void)state;
  Model dense, moe;
  make_dense(&dense);
  int tok[B * T];
  tokens(tok);
  Error err = {0};
  const Case random = {16, 4, 2, ROUTER_SCORE_SOFTMAX, ROUTER_SOFTMAX_THEN_TOPK, 0, 0.5f};
  upcycle_model(&dense, &random, &moe);
  assert_int_equal(model_forward(&moe, tok, NULL, B, T, 0, 1.0f, NULL, &err), 0);
  int copies_used = 0;
  for (int l = 0; l < 2; l++)
    for (int e = 0; e < 16; e++) {
      const long *cnt = moe.expert_counts + (size_t)l * 16;
      assert_int_equal(cnt[e], cnt[e / 2 * 2]);
      copies_used += e % 2 == 0 && cnt[e] > 0;
    }
  assert_true(copies_used > 2 * 2); /* the random router spreads tokens over more than K/G copies per layer */
  model_free(&moe);
  const Case zero = {16, 4, 2, ROUTER_SCORE_SOFTMAX, ROUTER_SOFTMAX_THEN_TOPK, 0, 0.0f};
  upcycle_model(&dense, &zero, &moe);
  assert_int_equal(model_forward(&moe, tok, NULL, B, T, 0, 1.0f, NULL, &err), 0);
  for (int l = 0; l < 2; l++)
    for (int e = 0; e < 16; e++) assert_int_equal(moe.expert_counts[(size_t)l * 16 + e], e < 4 ? B * T : 0);
  model_free(&moe);
  model_free(&dense);
}

static void expect_config_error(const ModelConfig *dense, const UpcycleOptions *o, const char *needle) {
  ModelConfig mc;
  Error err = {0};
  int rc = upcycle_model_config(dense, o, &mc, &err);
  if (rc != ERR_CONFIG) fail_msg("expected ERR_CONFIG mentioning '%s', got %d", needle, rc);
  if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_config_errors(void **state) {
  (void)state;
  ModelConfig dense;
  dense_config(&dense);
  UpcycleOptions o;
  upcycle_options_default(&o);
  o.num_experts = 6, o.granularity = 4, o.top_k = 4;
  expect_config_error(&dense, &o, "--experts (6) must be a multiple of --granularity (4)");
  o.num_experts = 6, o.granularity = 3, o.top_k = 3;
  expect_config_error(&dense, &o, "intermediate_size 64) is not divisible by --granularity 3");
  o.num_experts = 4, o.granularity = 1, o.top_k = 5;
  expect_config_error(&dense, &o, "--topk must be in 1..--experts (4), got 5");
  o.num_experts = 8, o.granularity = 2, o.top_k = 3;
  expect_config_error(&dense, &o, "--topk (3) must be a multiple of --granularity (2)");
  o.top_k = 2, o.moe_layer_freq = 3;
  expect_config_error(&dense, &o, "--moe-layer-freq must be in 1..num_hidden_layers (2)");
  o.moe_layer_freq = 2;
  ModelConfig mc;
  Error err = {0};
  assert_int_equal(upcycle_model_config(&dense, &o, &mc, &err), 0);
  assert_int_equal(model_config_num_moe_layers(&mc), 1); /* layer 0 MoE, layer 1 stays dense */
  expect_config_error(&mc, &o, "already an MoE model");
}

/* Only layer 0 becomes MoE: layer 1's MLP is copied as it is. */
static void test_partial_moe_layers(void **state) {
  (void)state;
  Model dense, moe;
  make_dense(&dense);
  UpcycleOptions o;
  const Case c = {4, 2, 2, ROUTER_SCORE_SOFTMAX, ROUTER_TOPK_THEN_SOFTMAX, 0, -1.0f};
  options_of(&c, &o);
  o.moe_layer_freq = 2;
  ModelConfig mc;
  Error err = {0};
  assert_int_equal(upcycle_model_config(&dense.cfg, &o, &mc, &err), 0);
  assert_int_equal(model_create(&moe, &mc, B, T, &err), 0);
  assert_int_equal(upcycle_weights(&dense, &moe, &o, &err), 0);
  assert_non_null(model_find_tensor(&moe, "layers.1.mlp.w_gate_up"));
  static float ld[B * T * UPC_VOCAB], lm[B * T * UPC_VOCAB];
  int tok[B * T];
  tokens(tok);
  assert_int_equal(model_logits(&dense, tok, B, T, ld, &err), 0);
  assert_int_equal(model_logits(&moe, tok, B, T, lm, &err), 0);
  double diff = 0, scale = 0;
  for (int i = 0; i < B * T * UPC_VOCAB; i++) {
    diff = fmax(diff, fabs((double)lm[i] - ld[i]));
    scale = fmax(scale, fabs(ld[i]));
  }
  assert_true(diff <= TOL * scale);
  model_free(&moe);
  model_free(&dense);
}

/* ---- through checkpoints and the trainer ---- */

static int setup_shards(void **state) {
  (void)state;
  return upc_write_shards();
}

/* Loads a run config, resumes it from its own output directory and returns
 * the trainer (step 0 after an upcycle). */
static void resume_run(const char *run_json, TrainConfig *cfg, Trainer *tr) {
  Error err = {0};
  char dir[CHECKPOINT_PATH_MAX];
  if (train_config_load(cfg, run_json, &err) || train_config_finalize(cfg, &err) || trainer_create(tr, cfg, &err) ||
      checkpoint_resolve(cfg->out_dir, dir, sizeof dir, &err) || trainer_resume(tr, dir, &err))
    fail_msg("%s", err.msg);
}

static double val_loss(Trainer *tr) {
  EvalResult ev;
  Error err = {0};
  if (trainer_evaluate(tr, &ev, &err)) fail_msg("%s", err.msg);
  return ev.loss;
}

static void test_checkpoint_resumes_and_trains(void **state) {
  (void)state;
  const char *dense_cfg = upc_write_dense_config("dense.json", "dense-run", 30);
  assert_int_equal(upc_train_dense(dense_cfg), 0);
  TrainConfig dcfg;
  Trainer dtr;
  resume_run(dense_cfg, &dcfg, &dtr);
  assert_int_equal(dtr.step, 30);
  const double dense_loss = val_loss(&dtr);
  const DataLoaderState dense_pos = dtr.train.state;

  UpcycleOptions o;
  upcycle_options_default(&o);
  o.num_experts = 8, o.top_k = 2, o.granularity = 2, o.router_order = ROUTER_TOPK_THEN_SOFTMAX;
  UpcycleInfo info;
  Error err = {0};
  if (upcycle_checkpoint(upc_path("dense-run"), upc_path("moe-run"), &o, &info, &err)) fail_msg("%s", err.msg);
  assert_int_equal(info.dense_step, 30);
  assert_true(info.exact_for_any_router);
  assert_true(info.params > info.dense_params);
  assert_true(upc_exists(upc_path("moe-run/checkpoints/step-00000000/model.safetensors")));
  assert_true(upc_exists(upc_path("moe-run/run.json")));
  Error verr = {0};
  assert_int_equal(checkpoint_verify(info.checkpoint, &verr), 0);

  TrainConfig mcfg;
  Trainer mtr;
  resume_run(info.run_config, &mcfg, &mtr);
  assert_int_equal(mtr.step, 0);
  assert_int_equal(mtr.opt.step, 0);
  assert_int_equal(mtr.model.cfg.num_experts, 8);
  /* the data order goes on where the dense run stopped */
  assert_true(mtr.train.state.position == dense_pos.position && mtr.train.state.epoch == dense_pos.epoch);
  for (size_t i = 0; i < mtr.model.num_params; i++) assert_true(mtr.opt.m[i] == 0 && mtr.opt.v[i] == 0);
  const double start = val_loss(&mtr);
  if (!(fabs(start - dense_loss) <= 1e-5 * dense_loss))
    fail_msg("upcycled val loss %.7f, dense %.7f", start, dense_loss);
  double first = 0, last = 0;
  for (int s = 0; s < 30; s++) {
    TrainStepResult r;
    if (trainer_step(&mtr, &r, &err)) fail_msg("%s", err.msg);
    double lm = network_metric(r.metrics, r.num_metrics, "lm");
    if (s == 0) first = lm;
    last = lm;
  }
  const double end = val_loss(&mtr);
  print_message("dense val %.4f; upcycled E8 K2 G2 starts at %.4f, after 30 steps %.4f (train %.4f -> %.4f)\n",
                dense_loss, start, end, first, last);
  assert_true(end < start);
  assert_true(last < first);

  /* An upcycled checkpoint is MoE: upcycling it again is refused, and so is
   * writing into a directory that already holds checkpoints. */
  int rc = upcycle_checkpoint(upc_path("moe-run"), upc_path("again"), &o, NULL, &err);
  assert_int_equal(rc, ERR_CONFIG);
  assert_non_null(strstr(err.msg, "already an MoE model"));
  rc = upcycle_checkpoint(upc_path("dense-run"), upc_path("moe-run"), &o, NULL, &err);
  assert_int_equal(rc, ERR_ARG);
  assert_non_null(strstr(err.msg, "already holds 1 checkpoint"));
  rc = upcycle_checkpoint(upc_path("no-such-run"), upc_path("x"), &o, NULL, &err);
  assert_true(rc != 0);

  /* The dense control: same model, fresh start, identical loss. */
  UpcycleOptions dc;
  upcycle_options_default(&dc);
  dc.dense_control = 1;
  if (upcycle_checkpoint(upc_path("dense-run"), upc_path("control-run"), &dc, &info, &err)) fail_msg("%s", err.msg);
  assert_int_equal(info.params, info.dense_params);
  TrainConfig ccfg;
  Trainer ctr;
  resume_run(info.run_config, &ccfg, &ctr);
  assert_int_equal(ctr.step, 0);
  assert_int_equal(ctr.model.cfg.num_experts, 0);
  assert_true(val_loss(&ctr) == dense_loss);
  trainer_free(&ctr);
  train_config_free(&ccfg);
  trainer_free(&mtr);
  train_config_free(&mcfg);
  trainer_free(&dtr);
  train_config_free(&dcfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_logits_match_dense),
      cmocka_unit_test(test_unnormalised_softmax_needs_uniform_router),
      cmocka_unit_test(test_layout_and_scale),
      cmocka_unit_test(test_routing_picks_whole_copies),
      cmocka_unit_test(test_config_errors),
      cmocka_unit_test(test_partial_moe_layers),
      cmocka_unit_test(test_checkpoint_resumes_and_trains),
  };
  return cmocka_run_group_tests(tests, setup_shards, NULL);
}
