/* The key/value-cached forward (model_decode.h) against model_logits over
 * the same tokens: a prefill and then one position at a time, for a dense
 * GQA model (also with attention biases), a dropless MoE model with a
 * shared expert, and GPT-2; a reset
 * starts again at position 0; overflow, bad tokens and a capacity factor
 * are refused. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "model/model.h"
#include "model/model_decode.h"

enum { MAX_T = 12, PREFILL = 5 };

static void dense_gqa(ModelConfig *c) {
  model_config_defaults(c);
  c->vocab_size = 40;
  c->hidden_size = 32;
  c->num_layers = 2;
  c->num_heads = 4;
  c->num_kv_heads = 2;
  c->intermediate_size = 48;
  c->max_position_embeddings = 64;
  c->init_std = 0.3f;
}

static void moe(ModelConfig *c) {
  dense_gqa(c);
  c->num_experts = 4;
  c->top_k = 2;
  c->moe_intermediate_size = 16;
  c->shared_expert_intermediate_size = 8;
  model_config_set_moe_layer_freq(c, 1);
}

static void biased(ModelConfig *c) {
  dense_gqa(c);
  c->qkv_bias = 1;
  c->o_bias = 1;
}

static void gpt2(ModelConfig *c) {
  dense_gqa(c);
  c->gpt2 = 1;
  strcpy(c->model_type, "gpt2");
  c->num_kv_heads = 4;
  c->tie_word_embeddings = 1;
  c->max_position_embeddings = MAX_T;
}

/* Nonzero biases, so that the decode path must add them. */
static void set_biases(Model *m) {
  for (int i = 0; i < m->num_tensors; i++)
    if (m->tensors[i].is_bias)
      for (size_t j = 0; j < m->tensors[i].numel; j++)
        m->params[m->tensors[i].offset + j] = 0.2f * (float)rng_normal(5, (uint64_t)i, j);
}

static double rel_err(const float *a, const float *b, int n) {
  double err = 0, scale = 1e-30;
  for (int i = 0; i < n; i++) {
    err = fmax(err, fabs((double)a[i] - b[i]));
    scale = fmax(scale, fabs((double)b[i]));
  }
  return err / scale;
}

static void check_config(void (*cfg_fn)(ModelConfig *), const char *what) {
  ModelConfig c;
  cfg_fn(&c);
  Model m;
  Error err = {0};
  if (model_create(&m, &c, 1, MAX_T, &err)) fail_msg("%s: %s", what, err.msg);
  model_init_weights(&m, 42);
  set_biases(&m);
  const int V = c.vocab_size;
  int tokens[MAX_T];
  for (int i = 0; i < MAX_T; i++) tokens[i] = (int)(rng_u64(3, 0, (uint64_t)i) % (uint64_t)V);
  float *ref = malloc((size_t)MAX_T * V * sizeof *ref), *got = malloc((size_t)V * sizeof *got);
  ModelKvCache kv;
  if (model_kv_cache_create(&kv, &m, &err)) fail_msg("%s: %s", what, err.msg);
  for (int pass = 0; pass < 2; pass++) {
    model_kv_cache_reset(&kv);
    for (int T = PREFILL; T <= MAX_T; T++) {
      const int from = T == PREFILL ? 0 : T - 1;
      if (model_decode(&m, &kv, tokens + from, T - from, got, &err)) fail_msg("%s: %s", what, err.msg);
      if (model_logits(&m, tokens, 1, T, ref, &err)) fail_msg("%s: %s", what, err.msg);
      const double e = rel_err(got, ref + (size_t)(T - 1) * V, V);
      if (e > 1e-5) fail_msg("%s: logits at position %d differ from model_logits by %.3g (relative)", what, T - 1, e);
    }
    assert_int_equal(kv.len, MAX_T);
  }
  /* Full: one more position is refused, naming the cache. */
  assert_int_equal(model_decode(&m, &kv, tokens, 1, got, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "cache"));
  model_kv_cache_reset(&kv);
  const int bad = V;
  assert_int_equal(model_decode(&m, &kv, &bad, 1, got, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "vocabulary"));
  model_kv_cache_free(&kv);
  free(ref);
  free(got);
  model_free(&m);
}

static void test_dense_gqa(void **state) {
  (void)state;
  check_config(dense_gqa, "dense GQA");
}

static void test_moe(void **state) {
  (void)state;
  check_config(moe, "MoE");
}

static void test_gpt2(void **state) {
  (void)state;
  check_config(gpt2, "GPT-2");
  check_config(biased, "attention biases with RoPE");
}

static void test_capacity_refused(void **state) {
  (void)state;
  ModelConfig c;
  moe(&c);
  c.capacity_factor = 1.0f;
  Model m;
  Error err = {0};
  if (model_create(&m, &c, 1, MAX_T, &err)) fail_msg("%s", err.msg);
  ModelKvCache kv;
  assert_int_equal(model_kv_cache_create(&kv, &m, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "capacity"));
  model_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dense_gqa),
      cmocka_unit_test(test_moe),
      cmocka_unit_test(test_gpt2),
      cmocka_unit_test(test_capacity_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
