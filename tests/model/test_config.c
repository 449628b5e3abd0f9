/* Model config parsing: the Llama, Mixtral, Qwen2-MoE and fivefold tiny
 * configs under configs/models/tiny/ mean what they mean upstream; bad
 * configs fail with messages naming the field and what was expected; the
 * canonical form round-trips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "model/config.h"

static char repo_root[1024];

static void find_repo_root(void) {
  /* This file is <root>/tests/model/test_config.c. */
  snprintf(repo_root, sizeof repo_root, "%s", __FILE__);
  for (int i = 0; i < 3; i++) {
    char *slash = strrchr(repo_root, '/');
    if (slash) *slash = '\0';
  }
}

static void load_tiny(ModelConfig *cfg, const char *name) {
  char path[1200];
  snprintf(path, sizeof path, "%s/configs/models/tiny/%s", repo_root, name);
  Error err = {0};
  int rc = model_config_load(cfg, path, &err);
  if (rc) fail_msg("%s", err.msg);
}

static int parse_string(ModelConfig *cfg, const char *json, Error *err) {
  cJSON *root = cJSON_Parse(json);
  assert_non_null(root);
  int rc = model_config_from_json(cfg, root, "inline.json", err);
  cJSON_Delete(root);
  return rc;
}

static void test_llama(void **state) {
  (void)state;
  ModelConfig c;
  load_tiny(&c, "llama.json");
  assert_string_equal(c.model_type, "llama");
  assert_int_equal(c.vocab_size, 64);
  assert_int_equal(c.hidden_size, 32);
  assert_int_equal(c.num_layers, 2);
  assert_int_equal(c.num_heads, 4);
  assert_int_equal(c.num_kv_heads, 2);
  assert_int_equal(c.head_dim, 8);
  assert_int_equal(c.intermediate_size, 48);
  assert_int_equal(c.num_experts, 0);
  assert_int_equal(model_config_num_moe_layers(&c), 0);
  assert_int_equal(c.tie_word_embeddings, 0);
  assert_true(c.rms_norm_eps == 1e-5f);
  assert_true(c.rope_theta == 10000.0f);
}

static void test_mixtral(void **state) {
  (void)state;
  ModelConfig c;
  load_tiny(&c, "mixtral.json");
  assert_string_equal(c.model_type, "mixtral");
  assert_int_equal(c.num_experts, 4);
  assert_int_equal(c.top_k, 2);
  assert_int_equal(c.moe_intermediate_size, 40); /* intermediate_size is the expert FFN */
  assert_int_equal(c.shared_expert_intermediate_size, 0);
  assert_int_equal(c.norm_topk_prob, 1);
  assert_int_equal(model_config_num_moe_layers(&c), 2);
  assert_int_equal(c.num_kv_heads, 1);
  assert_true(c.aux_loss_coeff == 0.02f);
  assert_true(c.capacity_factor <= 0); /* dropless */
}

static void test_qwen2_moe(void **state) {
  (void)state;
  ModelConfig c;
  load_tiny(&c, "qwen2_moe.json");
  assert_string_equal(c.model_type, "qwen2_moe");
  assert_int_equal(c.num_experts, 6);
  assert_int_equal(c.top_k, 3);
  assert_int_equal(c.moe_intermediate_size, 16);
  assert_int_equal(c.shared_expert_intermediate_size, 24);
  assert_int_equal(c.intermediate_size, 56);
  assert_int_equal(c.norm_topk_prob, 0);
  /* mlp_only_layers [2] */
  assert_int_equal(c.is_moe_layer[0], 1);
  assert_int_equal(c.is_moe_layer[1], 1);
  assert_int_equal(c.is_moe_layer[2], 0);
  assert_int_equal(c.is_moe_layer[3], 1);
}

static void test_mixed_fivefold(void **state) {
  (void)state;
  ModelConfig c;
  load_tiny(&c, "mixed.json");
  assert_int_equal(c.is_moe_layer[0], 1);
  assert_int_equal(c.is_moe_layer[1], 0);
  assert_int_equal(c.is_moe_layer[2], 1);
  assert_int_equal(c.is_moe_layer[3], 0);
  assert_int_equal(c.router_order, ROUTER_TOPK_THEN_SOFTMAX);
  assert_int_equal(c.drop_policy, DROP_POLICY_PROBS);
  assert_true(c.capacity_factor == 1.25f);
  assert_int_equal(c.tie_word_embeddings, 1);
}

static void test_decoder_sparse_step(void **state) {
  (void)state;
  ModelConfig c;
  Error err = {0};
  int rc = parse_string(&c,
                        "{\"model_type\":\"qwen2_moe\",\"vocab_size\":8,\"hidden_size\":8,\"num_hidden_layers\":6,"
                        "\"num_attention_heads\":2,\"intermediate_size\":8,\"num_experts\":4,"
                        "\"moe_intermediate_size\":4,\"decoder_sparse_step\":2}",
                        &err);
  if (rc) fail_msg("%s", err.msg);
  const unsigned char want[6] = {0, 1, 0, 1, 0, 1};
  for (int i = 0; i < 6; i++) assert_int_equal(c.is_moe_layer[i], want[i]);
  /* The explicit pattern wins over the frequency. */
  rc = parse_string(&c,
                    "{\"vocab_size\":8,\"hidden_size\":8,\"num_hidden_layers\":3,\"num_attention_heads\":2,"
                    "\"intermediate_size\":8,\"num_experts\":4,\"moe_layer_freq\":1,\"moe_layer_pattern\":[0,0,1]}",
                    &err);
  if (rc) fail_msg("%s", err.msg);
  assert_int_equal(c.is_moe_layer[0], 0);
  assert_int_equal(c.is_moe_layer[1], 0);
  assert_int_equal(c.is_moe_layer[2], 1);
}

static void expect_error(const char *json, const char *must_contain1, const char *must_contain2) {
  ModelConfig c;
  Error err = {0};
  int rc = parse_string(&c, json, &err);
  if (rc == 0) fail_msg("accepted: %s", json);
  assert_int_equal(err.code, ERR_CONFIG);
  if (!strstr(err.msg, must_contain1)) fail_msg("message \"%s\" lacks \"%s\"", err.msg, must_contain1);
  if (must_contain2 && !strstr(err.msg, must_contain2)) fail_msg("message \"%s\" lacks \"%s\"", err.msg, must_contain2);
  if (!strstr(err.msg, "inline.json")) fail_msg("message \"%s\" does not name the file", err.msg);
}

#define BASE "\"vocab_size\":8,\"hidden_size\":8,\"num_hidden_layers\":2,\"num_attention_heads\":2,"

static void test_errors(void **state) {
  (void)state;
  expect_error("{" BASE "\"intermediate_size\":\"big\"}", "\"intermediate_size\"", "expected an integer");
  expect_error("{" BASE "\"intermediate_size\":8,\"tie_word_embeddings\":1}", "tie_word_embeddings", "true or false");
  expect_error("{" BASE "\"intermediate_size\":8,\"rms_norm_eps\":\"1e-5\"}", "rms_norm_eps", "expected a number");
  expect_error("{" BASE "\"intermediate_size\":8,\"num_key_value_heds\":1}", "num_key_value_heds",
               "did you mean \"num_key_value_heads\"");
  expect_error("{" BASE "\"intermediate_size\":8,\"frobnicate\":1}", "unknown field \"frobnicate\"", NULL);
  expect_error("{" BASE "\"intermediate_size\":8,\"num_experts\":4,\"moe_router_order\":\"topk_first\"}",
               "unknown value \"topk_first\"", "\"softmax_then_topk\", \"topk_then_softmax\"");
  expect_error("{" BASE "\"intermediate_size\":8,\"num_experts\":4,\"moe_token_drop_policy\":\"random\"}",
               "moe_token_drop_policy", "\"probs\", \"position\"");
  expect_error("{" BASE "\"intermediate_size\":8,\"hidden_act\":\"gelu\"}", "hidden_act", "silu");
  expect_error("{" BASE "\"intermediate_size\":8,\"num_experts\":4,\"num_experts_per_tok\":5}", "num_experts_per_tok",
               NULL);
  expect_error(
      "{\"vocab_size\":8,\"hidden_size\":8,\"num_hidden_layers\":0,\"num_attention_heads\":2,"
      "\"intermediate_size\":8}",
      "num_hidden_layers", "out of range");
  expect_error("{" BASE "\"intermediate_size\":8,\"num_hidden_layers\":3}", "num_hidden_layers", "more than once");
  expect_error(
      "{\"vocab_size\":8,\"hidden_size\":10,\"num_hidden_layers\":2,\"num_attention_heads\":3,"
      "\"intermediate_size\":8}",
      "divisible", NULL);
  expect_error(
      "{\"vocab_size\":8,\"hidden_size\":8,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
      "\"num_key_value_heads\":3,\"intermediate_size\":8}",
      "multiple of num_key_value_heads", NULL);
  expect_error(
      "{\"vocab_size\":8,\"hidden_size\":6,\"num_hidden_layers\":2,\"num_attention_heads\":2,"
      "\"intermediate_size\":8}",
      "even", NULL);
  expect_error("{" BASE "\"intermediate_size\":8,\"num_experts\":4,\"moe_layer_pattern\":[1,0,1]}", "moe_layer_pattern",
               "one per layer");
  expect_error("{" BASE "\"intermediate_size\":8,\"num_experts\":4,\"moe_pad_expert_input_to_capacity\":true}",
               "moe_pad_expert_input_to_capacity", NULL);
  expect_error("{" BASE "\"num_experts\":4,\"moe_intermediate_size\":8,\"moe_layer_freq\":2}", "intermediate_size",
               NULL);
  expect_error("{\"hidden_size\":8,\"num_hidden_layers\":2,\"num_attention_heads\":2,\"intermediate_size\":8}",
               "missing required field \"vocab_size\"", NULL);
  expect_error("{" BASE "\"intermediate_size\":8,\"model_type\":\"gpt_neox\"}", "model_type", "\"llama\"");
}

/* Attention features fivefold does not compute are refused, naming the
 * field, rather than trained as plain attention. */
static void accept(const char *json) {
  ModelConfig c;
  Error err = {0};
  if (parse_string(&c, json, &err)) fail_msg("refused %s: %s", json, err.msg);
}

static void test_unimplemented_attention_refused(void **state) {
  (void)state;
  expect_error("{" BASE "\"intermediate_size\":8,\"use_sliding_window\":true,\"sliding_window\":4}",
               "\"use_sliding_window\"", "must be false");
  /* Mistral semantics: a window applies whenever it is set. */
  expect_error("{" BASE "\"intermediate_size\":8,\"max_position_embeddings\":64,\"sliding_window\":16}",
               "\"sliding_window\"", "smaller than max_position_embeddings 64");
  expect_error("{" BASE "\"intermediate_size\":8,\"sliding_window\":\"wide\"}", "\"sliding_window\"",
               "positive integer");
  accept("{" BASE "\"intermediate_size\":8,\"qkv_bias\":false}");
  accept("{" BASE "\"intermediate_size\":8,\"sliding_window\":null}");
  accept("{" BASE "\"intermediate_size\":8,\"max_position_embeddings\":64,\"sliding_window\":64}");
  accept("{" BASE "\"intermediate_size\":8,\"max_position_embeddings\":64,\"sliding_window\":16,"
         "\"use_sliding_window\":false}");
}

static void test_load_errors(void **state) {
  (void)state;
  ModelConfig c;
  Error err = {0};
  assert_int_equal(model_config_load(&c, "/nonexistent/config.json", &err), ERR_IO);
  assert_non_null(strstr(err.msg, "/nonexistent/config.json"));
  char path[] = "/tmp/fivefold_test_config_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fputs("{\n  \"vocab_size\": 8,\n  \"hidden_size\": ,\n}\n", f);
  fclose(f);
  assert_int_equal(model_config_load(&c, path, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, path));
  assert_non_null(strstr(err.msg, "line 3"));
  remove(path);
}

static void round_trip(const ModelConfig *c) {
  cJSON *j = model_config_to_json(c);
  assert_non_null(j);
  char *text = cJSON_Print(j);
  cJSON_Delete(j);
  ModelConfig back;
  Error err = {0};
  cJSON *parsed = cJSON_Parse(text);
  int rc = model_config_from_json(&back, parsed, "round-trip", &err);
  cJSON_Delete(parsed);
  if (rc) fail_msg("%s\n%s", err.msg, text);
  if (memcmp(c, &back, sizeof back) != 0) fail_msg("round trip changed the config:\n%s", text);
  free(text);
}

static void test_round_trip(void **state) {
  (void)state;
  const char *names[] = {"llama.json", "mixtral.json", "qwen2_moe.json", "mixed.json"};
  for (int i = 0; i < 4; i++) {
    ModelConfig c;
    load_tiny(&c, names[i]);
    round_trip(&c);
  }
  /* Non-default values everywhere. */
  ModelConfig c;
  load_tiny(&c, "mixed.json");
  c.router_score = ROUTER_SCORE_SIGMOID;
  c.drop_policy = DROP_POLICY_POSITION;
  c.pad_to_capacity = 1;
  c.topk_scaling_factor = 2.5f;
  c.rope_theta = 123456.7f;
  c.rms_norm_eps = 3.3e-6f;
  c.init_std = 0.0173f;
  c.norm_topk_prob = 0;
  c.is_moe_layer[3] = 1;
  Error err = {0};
  if (model_config_validate(&c, "modified", &err)) fail_msg("%s", err.msg);
  round_trip(&c);
}

/* q/k/v biases (qkv_bias) and Llama's attention_bias (q/k/v and o). */
static void test_attention_biases(void **state) {
  (void)state;
  ModelConfig c;
  Error err = {0};
  if (parse_string(&c, "{" BASE "\"intermediate_size\":8,\"qkv_bias\":true}", &err)) fail_msg("%s", err.msg);
  assert_int_equal(c.qkv_bias, 1);
  assert_int_equal(c.o_bias, 0);
  round_trip(&c);
  if (parse_string(&c, "{" BASE "\"intermediate_size\":8,\"attention_bias\":true}", &err)) fail_msg("%s", err.msg);
  assert_int_equal(c.qkv_bias, 1);
  assert_int_equal(c.o_bias, 1);
  round_trip(&c);
}

/* GPT2Config fields: the published GPT-2 small shape and its defaults
 * (tied embeddings, n_inner = 4 n_embd); what GPT-2 cannot mean is refused. */
static void test_gpt2(void **state) {
  (void)state;
  ModelConfig c;
  char path[1200];
  snprintf(path, sizeof path, "%s/configs/models/gpt2-124m.json", repo_root);
  Error err = {0};
  if (model_config_load(&c, path, &err)) fail_msg("%s", err.msg);
  assert_int_equal(c.gpt2, 1);
  assert_string_equal(c.model_type, "gpt2");
  assert_int_equal(c.vocab_size, 50257);
  assert_int_equal(c.hidden_size, 768);
  assert_int_equal(c.num_layers, 12);
  assert_int_equal(c.num_heads, 12);
  assert_int_equal(model_config_kv_heads(&c), 12);
  assert_int_equal(model_config_head_dim(&c), 64);
  assert_int_equal(c.intermediate_size, 3072);
  assert_int_equal(c.max_position_embeddings, 1024);
  assert_int_equal(c.tie_word_embeddings, 1);
  assert_float_equal(c.rms_norm_eps, 1e-5f, 0);
  assert_int_equal(c.num_experts, 0);
  round_trip(&c);
  load_tiny(&c, "gpt2.json");
  assert_int_equal(c.intermediate_size, 40);
  assert_int_equal(c.max_position_embeddings, 64);
  round_trip(&c);
#define GPT2_BASE "\"model_type\":\"gpt2\",\"vocab_size\":16,\"n_embd\":8,\"n_layer\":1,\"n_head\":2"
  expect_error("{" GPT2_BASE ",\"hidden_size\":8}", "hidden_size", "n_embd");
  expect_error("{" GPT2_BASE ",\"activation_function\":\"relu\"}", "activation_function", "gelu_new");
  expect_error("{" GPT2_BASE ",\"scale_attn_by_inverse_layer_idx\":true}", "scale_attn_by_inverse_layer_idx",
               "false");
  expect_error("{" GPT2_BASE ",\"n_positions\":32,\"n_ctx\":16}", "n_ctx", "n_positions");
  expect_error("{\"model_type\":\"gpt2\",\"vocab_size\":16,\"n_embd\":9,\"n_layer\":1,\"n_head\":2}", "n_embd",
               "divisible");
#undef GPT2_BASE
}

static void test_programmatic_defaults(void **state) {
  (void)state;
  ModelConfig c;
  model_config_defaults(&c);
  Error err = {0};
  assert_int_not_equal(model_config_validate(&c, "defaults", &err), 0); /* sizes are required */
  c.vocab_size = 16;
  c.hidden_size = 16;
  c.num_layers = 2;
  c.num_heads = 2;
  c.intermediate_size = 8;
  if (model_config_validate(&c, "defaults", &err)) fail_msg("%s", err.msg);
  assert_int_equal(model_config_head_dim(&c), 8);
  assert_int_equal(model_config_kv_heads(&c), 2);
  c.num_experts = 4;
  assert_int_not_equal(model_config_validate(&c, "defaults", &err), 0); /* no MoE layer marked */
  model_config_set_moe_layer_freq(&c, 2);
  c.moe_intermediate_size = 8;
  if (model_config_validate(&c, "defaults", &err)) fail_msg("%s", err.msg);
  assert_int_equal(model_config_num_moe_layers(&c), 1);
}

int main(void) {
  find_repo_root();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama),
      cmocka_unit_test(test_mixtral),
      cmocka_unit_test(test_qwen2_moe),
      cmocka_unit_test(test_mixed_fivefold),
      cmocka_unit_test(test_decoder_sparse_step),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_unimplemented_attention_refused),
      cmocka_unit_test(test_load_errors),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_gpt2),
      cmocka_unit_test(test_attention_biases),
      cmocka_unit_test(test_programmatic_defaults),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
