/* The model's contract apart from gradients: parameter names, shapes and
 * flat layout of model.h; initialisation as a pure function of (seed, name,
 * index); logits consistent with the reported loss; gradient accumulation
 * and grad_scale; MoE statistics; errors for misuse. */
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

static void tiny(ModelConfig *c) {
  model_config_defaults(c);
  c->vocab_size = 40;
  c->hidden_size = 24;
  c->num_layers = 3;
  c->num_heads = 6;
  c->num_kv_heads = 2;
  c->head_dim = 6;
  c->intermediate_size = 20;
  c->num_experts = 5;
  c->top_k = 2;
  c->moe_intermediate_size = 12;
  c->shared_expert_intermediate_size = 8;
  c->is_moe_layer[0] = 1;
  c->is_moe_layer[2] = 1;
  c->init_std = 0.1f;
  c->aux_loss_coeff = 0.01f;
  c->z_loss_coeff = 0.001f;
}

static void expect_tensor(const Model *m, const char *name, int ndim, int d0, int d1, int d2, int nwd, int expert) {
  const ParamTensor *t = model_find_tensor(m, name);
  if (!t) fail_msg("tensor %s missing", name);
  assert_int_equal(t->ndim, ndim);
  assert_int_equal(t->shape[0], d0);
  if (ndim > 1) assert_int_equal(t->shape[1], d1);
  if (ndim > 2) assert_int_equal(t->shape[2], d2);
  assert_int_equal(t->no_weight_decay, nwd);
  assert_int_equal(t->is_expert, expert);
}

static void test_parameter_table(void **state) {
  (void)state;
  ModelConfig c;
  tiny(&c);
  Model m;
  Error err = {0};
  if (model_create(&m, &c, 2, 8, &err)) fail_msg("%s", err.msg);
  const int C = 24, V = 40, QD = 36, KVD = 12, F = 20, E = 5, Fe = 12, Fs = 8;
  expect_tensor(&m, "embed.weight", 2, V, C, 0, 0, 0);
  for (int l = 0; l < 3; l++) {
    char n[96];
#define T(suffix, ...)                              \
  snprintf(n, sizeof n, "layers.%d.%s", l, suffix); \
  expect_tensor(&m, n, __VA_ARGS__)
    T("attn_norm.weight", 1, C, 0, 0, 1, 0);
    T("attn.wq", 2, QD, C, 0, 0, 0);
    T("attn.wk", 2, KVD, C, 0, 0, 0);
    T("attn.wv", 2, KVD, C, 0, 0, 0);
    T("attn.wo", 2, C, QD, 0, 0, 0);
    T("mlp_norm.weight", 1, C, 0, 0, 1, 0);
    if (l != 1) {
      T("moe.router", 2, E, C, 0, 0, 0);
      T("moe.experts.w_gate_up", 3, E, 2 * Fe, C, 0, 1);
      T("moe.experts.w_down", 3, E, C, Fe, 0, 1);
      T("moe.shared.w_gate_up", 2, 2 * Fs, C, 0, 0, 0);
      T("moe.shared.w_down", 2, C, Fs, 0, 0, 0);
      snprintf(n, sizeof n, "layers.%d.mlp.w_gate_up", l);
      assert_null(model_find_tensor(&m, n));
    } else {
      T("mlp.w_gate_up", 2, 2 * F, C, 0, 0, 0);
      T("mlp.w_down", 2, C, F, 0, 0, 0);
      snprintf(n, sizeof n, "layers.%d.moe.router", l);
      assert_null(model_find_tensor(&m, n));
    }
#undef T
  }
  expect_tensor(&m, "final_norm.weight", 1, C, 0, 0, 1, 0);
  expect_tensor(&m, "lm_head.weight", 2, V, C, 0, 0, 0);
  /* Tensors tile the flat buffer exactly, in table order. */
  size_t next = 0;
  for (int i = 0; i < m.num_tensors; i++) {
    assert_int_equal(m.tensors[i].offset, next);
    next += m.tensors[i].numel;
  }
  assert_int_equal(next, m.num_params);
  model_free(&m);

  c.tie_word_embeddings = 1;
  if (model_create(&m, &c, 1, 4, &err)) fail_msg("%s", err.msg);
  assert_null(model_find_tensor(&m, "lm_head.weight"));
  model_free(&m);
}

static void test_init_is_pure(void **state) {
  (void)state;
  ModelConfig c;
  tiny(&c);
  Model m;
  Error err = {0};
  if (model_create(&m, &c, 1, 4, &err)) fail_msg("%s", err.msg);
  model_init_weights(&m, 77);
  const double out_scale = 1.0 / sqrt(2.0 * 3);
  struct {
    const char *name;
    double scale;
  } cases[] = {{"embed.weight", 1},
               {"layers.1.attn.wq", 1},
               {"layers.1.attn.wo", out_scale},
               {"layers.1.mlp.w_down", out_scale},
               {"layers.2.moe.router", 1},
               {"layers.2.moe.experts.w_gate_up", 1},
               {"layers.2.moe.experts.w_down", out_scale},
               {"layers.0.moe.shared.w_down", out_scale},
               {"lm_head.weight", 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const ParamTensor *t = model_find_tensor(&m, cases[i].name);
    assert_non_null(t);
    uint64_t stream = rng_stream_id(cases[i].name);
    for (size_t j = 0; j < t->numel; j += t->numel / 7 + 1) {
      float want = (float)((double)c.init_std * cases[i].scale * rng_normal(77, stream, j));
      if (m.params[t->offset + j] != want)
        fail_msg("%s[%zu] = %.9g, expected %.9g", cases[i].name, j, m.params[t->offset + j], want);
    }
  }
  const ParamTensor *norm = model_find_tensor(&m, "layers.2.mlp_norm.weight");
  for (size_t j = 0; j < norm->numel; j++) assert_true(m.params[norm->offset + j] == 1.0f);
  model_free(&m);
}

static void test_logits_match_loss(void **state) {
  (void)state;
  ModelConfig c;
  tiny(&c);
  enum { B = 3, T = 7, V = 40 };
  Model m;
  Error err = {0};
  if (model_create(&m, &c, 4, 8, &err)) fail_msg("%s", err.msg); /* smaller batch than the buffers */
  model_init_weights(&m, 3);
  int tokens[B * T], targets[B * T];
  for (int n = 0; n < B * T; n++) tokens[n] = (n * 11 + 5) % V, targets[n] = n % 4 == 0 ? -1 : (n * 3 + 1) % V;
  ModelLoss loss;
  if (model_forward(&m, tokens, targets, B, T, 0, 1.0f, &loss, &err)) fail_msg("%s", err.msg);
  long counts_sum[2] = {0, 0};
  for (int e = 0; e < 5; e++) counts_sum[0] += m.expert_counts[e], counts_sum[1] += m.expert_counts[2 * 5 + e];
  assert_int_equal(counts_sum[0], B * T * 2);
  assert_int_equal(counts_sum[1], B * T * 2);
  for (int e = 0; e < 5; e++) assert_int_equal(m.expert_counts[1 * 5 + e], 0); /* the dense layer */
  assert_int_equal(m.dropped_assignments, 0);
  assert_true(loss.aux > 0 && loss.z > 0);

  float *logits = malloc(sizeof(float) * B * T * V);
  if (model_logits(&m, tokens, B, T, logits, &err)) fail_msg("%s", err.msg);
  double sum = 0;
  long counted = 0;
  for (int n = 0; n < B * T; n++) {
    if (targets[n] < 0) continue;
    const float *z = logits + (size_t)n * V;
    double mx = z[0], s = 0;
    for (int v = 1; v < V; v++) mx = fmax(mx, z[v]);
    for (int v = 0; v < V; v++) s += exp(z[v] - mx);
    sum += mx + log(s) - z[targets[n]];
    counted++;
  }
  assert_int_equal(loss.tokens, counted);
  if (fabs(sum / counted - loss.lm) > 1e-5) fail_msg("loss %.8g, from logits %.8g", loss.lm, sum / counted);
  free(logits);
  model_free(&m);
}

static void test_accumulation_and_scale(void **state) {
  (void)state;
  ModelConfig c;
  tiny(&c);
  enum { B = 2, T = 6 };
  Model m;
  Error err = {0};
  if (model_create(&m, &c, B, T, &err)) fail_msg("%s", err.msg);
  model_init_weights(&m, 11);
  int tokens[B * T], targets[B * T];
  for (int n = 0; n < B * T; n++) tokens[n] = (n * 13 + 2) % 40, targets[n] = (n * 7 + 3) % 40;
  model_zero_grad(&m);
  if (model_forward(&m, tokens, targets, B, T, 1, 1.0f, NULL, &err) || model_backward(&m, &err))
    fail_msg("%s", err.msg);
  float *once = malloc(sizeof(float) * m.num_params);
  memcpy(once, m.grads, sizeof(float) * m.num_params);
  double norm = 0;
  for (size_t i = 0; i < m.num_params; i++) norm += (double)once[i] * once[i];
  assert_true(norm > 0);
  /* Two micro-batches at scale 0.5 sum to one at scale 1. */
  model_zero_grad(&m);
  for (int k = 0; k < 2; k++)
    if (model_forward(&m, tokens, targets, B, T, 1, 0.5f, NULL, &err) || model_backward(&m, &err))
      fail_msg("%s", err.msg);
  for (size_t i = 0; i < m.num_params; i++)
    if (fabsf(m.grads[i] - once[i]) > 1e-6f + 1e-4f * fabsf(once[i]))
      fail_msg("gradient %zu: %.8g after two half-scaled passes, %.8g once", i, m.grads[i], once[i]);
  free(once);
  model_free(&m);
}

static void test_misuse(void **state) {
  (void)state;
  ModelConfig c;
  tiny(&c);
  Model m;
  Error err = {0};
  if (model_create(&m, &c, 2, 4, &err)) fail_msg("%s", err.msg);
  int tokens[12] = {0}, targets[12] = {0};
  assert_int_equal(model_backward(&m, &err), ERR_ARG);
  assert_int_equal(model_forward(&m, tokens, targets, 3, 4, 1, 1.0f, NULL, &err), ERR_ARG);
  assert_int_equal(model_forward(&m, tokens, targets, 2, 5, 1, 1.0f, NULL, &err), ERR_ARG);
  tokens[5] = 40;
  assert_int_equal(model_forward(&m, tokens, targets, 2, 4, 1, 1.0f, NULL, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "position 5"));
  tokens[5] = 1;
  /* A forward without training leaves nothing to differentiate. */
  assert_int_equal(model_forward(&m, tokens, targets, 2, 4, 0, 1.0f, NULL, &err), 0);
  assert_int_equal(model_backward(&m, &err), ERR_ARG);
  model_free(&m);

  c.top_k = 6;
  assert_int_equal(model_create(&m, &c, 2, 4, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "num_experts_per_tok"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parameter_table),
      cmocka_unit_test(test_init_is_pure),
      cmocka_unit_test(test_logits_match_loss),
      cmocka_unit_test(test_accumulation_and_scale),
      cmocka_unit_test(test_misuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
