/* The Hugging Face export on in-memory models: every HF tensor is the
 * documented slice of a fivefold tensor (gate/up split, experts w1/w3/w2),
 * lm_head is left out when tied, config.json names the right architecture
 * and reads back through fivefold's own config loader to the same model,
 * the byte-level tokenizer maps byte b to id b with no merges, a BPE
 * tokenizer.json is copied byte for byte (its <|endoftext|> id becoming
 * bos/eos), and every MoE feature Mixtral lacks is named in the refusal.
 * (tests/torch_ref/export_test.py checks the numbers against an
 * independent PyTorch model.) */
#define _XOPEN_SOURCE 700 /* nftw */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/safetensors.h"
#include "convert/export_hf.h"
#include "export/export_test_util.h"

static void make_model(Model *m, const ModelConfig *c) {
  Error err = {0};
  if (model_create(m, c, 1, 1, &err)) fail_msg("%s", err.msg);
  model_init_weights(m, 5);
}

/* Reads HF tensor `hf` and checks it equals `n` floats of our `ours` at
 * element offset `at`. */
static void expect_slice(SafetensorsReader *r, const Model *m, const char *hf, const char *ours, size_t at,
                         int rows, int cols) {
  const SafetensorsTensorInfo *ti = safetensors_find(r, hf);
  if (!ti) fail_msg("model.safetensors lacks %s", hf);
  assert_int_equal(ti->dtype, ST_F32);
  assert_int_equal(ti->ndim, cols ? 2 : 1);
  assert_int_equal(ti->shape[0], rows);
  if (cols) assert_int_equal(ti->shape[1], cols);
  size_t n = (size_t)rows * (cols ? cols : 1);
  float *buf = malloc(n * sizeof *buf);
  Error err = {0};
  assert_int_equal(safetensors_read(r, hf, ST_F32, buf, n * sizeof *buf, &err), 0);
  const ParamTensor *t = model_find_tensor(m, ours);
  assert_non_null(t);
  if (memcmp(buf, m->params + t->offset + at, n * sizeof *buf) != 0) fail_msg("%s is not %s at %zu", hf, ours, at);
  free(buf);
}

static void check_layout(const char *dir, const Model *m) {
  const ModelConfig *c = &m->cfg;
  const int C = c->hidden_size, D = 6, F = c->intermediate_size, Fe = c->moe_intermediate_size;
  char path[1024], hf[256], ours[96];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  SafetensorsReader *r;
  Error err = {0};
  assert_int_equal(safetensors_open(&r, path, &err), 0);
  assert_string_equal(safetensors_metadata_get(r, "format"), "pt");
  int expected = 2 + !c->tie_word_embeddings;
  expect_slice(r, m, "model.embed_tokens.weight", "embed.weight", 0, c->vocab_size, C);
  expect_slice(r, m, "model.norm.weight", "final_norm.weight", 0, C, 0);
  if (c->tie_word_embeddings) assert_null(safetensors_find(r, "lm_head.weight"));
  else expect_slice(r, m, "lm_head.weight", "lm_head.weight", 0, c->vocab_size, C);
  for (int i = 0; i < c->num_layers; i++) {
#define NAMES(H, O) (snprintf(hf, sizeof hf, "model.layers.%d." H, i), snprintf(ours, sizeof ours, "layers.%d." O, i))
    NAMES("input_layernorm.weight", "attn_norm.weight"), expect_slice(r, m, hf, ours, 0, C, 0);
    NAMES("post_attention_layernorm.weight", "mlp_norm.weight"), expect_slice(r, m, hf, ours, 0, C, 0);
    NAMES("self_attn.q_proj.weight", "attn.wq"), expect_slice(r, m, hf, ours, 0, 4 * D, C);
    NAMES("self_attn.k_proj.weight", "attn.wk"), expect_slice(r, m, hf, ours, 0, 2 * D, C);
    NAMES("self_attn.v_proj.weight", "attn.wv"), expect_slice(r, m, hf, ours, 0, 2 * D, C);
    NAMES("self_attn.o_proj.weight", "attn.wo"), expect_slice(r, m, hf, ours, 0, C, 4 * D);
    expected += 6;
    if (!c->is_moe_layer[i]) {
      NAMES("mlp.gate_proj.weight", "mlp.w_gate_up"), expect_slice(r, m, hf, ours, 0, F, C);
      NAMES("mlp.up_proj.weight", "mlp.w_gate_up"), expect_slice(r, m, hf, ours, (size_t)F * C, F, C);
      NAMES("mlp.down_proj.weight", "mlp.w_down"), expect_slice(r, m, hf, ours, 0, C, F);
      expected += 3;
      continue;
    }
    NAMES("block_sparse_moe.gate.weight", "moe.router"), expect_slice(r, m, hf, ours, 0, c->num_experts, C);
    expected += 1 + 3 * c->num_experts;
    for (int e = 0; e < c->num_experts; e++) {
      size_t gu = (size_t)e * 2 * Fe * C, dn = (size_t)e * C * Fe;
      snprintf(ours, sizeof ours, "layers.%d.moe.experts.w_gate_up", i);
      snprintf(hf, sizeof hf, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", i, e);
      expect_slice(r, m, hf, ours, gu, Fe, C);
      snprintf(hf, sizeof hf, "model.layers.%d.block_sparse_moe.experts.%d.w3.weight", i, e);
      expect_slice(r, m, hf, ours, gu + (size_t)Fe * C, Fe, C);
      snprintf(ours, sizeof ours, "layers.%d.moe.experts.w_down", i);
      snprintf(hf, sizeof hf, "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", i, e);
      expect_slice(r, m, hf, ours, dn, C, Fe);
    }
#undef NAMES
  }
  assert_int_equal(safetensors_num_tensors(r), expected);
  safetensors_close(r);
}

static cJSON *read_json(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  cJSON *j = cJSON_Parse(buf);
  if (!j) fail_msg("%s is not JSON", path);
  return j;
}

/* config.json names the architecture and loads back as the same model. */
static void check_config(const char *dir, const ModelConfig *c, const char *arch, int eot) {
  char path[1024];
  snprintf(path, sizeof path, "%s/config.json", dir);
  cJSON *j = read_json(path);
  assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "architectures"), 0)->valuestring, arch);
  const cJSON *bos = cJSON_GetObjectItem(j, "bos_token_id"), *eos = cJSON_GetObjectItem(j, "eos_token_id");
  if (eot < 0) assert_true(cJSON_IsNull(bos) && cJSON_IsNull(eos));
  else assert_true(bos->valueint == eot && eos->valueint == eot);
  cJSON_Delete(j);
  ModelConfig back;
  Error err = {0};
  if (model_config_load(&back, path, &err)) fail_msg("%s", err.msg);
  assert_int_equal(back.vocab_size, c->vocab_size);
  assert_int_equal(back.hidden_size, c->hidden_size);
  assert_int_equal(back.num_layers, c->num_layers);
  assert_int_equal(back.num_heads, c->num_heads);
  assert_int_equal(back.num_kv_heads, c->num_kv_heads);
  assert_int_equal(back.head_dim, c->head_dim);
  assert_int_equal(back.max_position_embeddings, c->max_position_embeddings);
  assert_int_equal(back.tie_word_embeddings, c->tie_word_embeddings);
  assert_true(back.rope_theta == c->rope_theta && back.rms_norm_eps == c->rms_norm_eps);
  assert_int_equal(model_config_num_moe_layers(&back), model_config_num_moe_layers(c));
  if (model_config_num_moe_layers(c)) {
    assert_int_equal(back.num_experts, c->num_experts);
    assert_int_equal(back.top_k, c->top_k);
    assert_int_equal(back.moe_intermediate_size, c->moe_intermediate_size);
    assert_int_equal(back.norm_topk_prob, 1);
    assert_int_equal(back.shared_expert_intermediate_size, 0);
  } else {
    assert_int_equal(back.intermediate_size, c->intermediate_size);
  }
}

static void export_case(int moe, int tied) {
  ModelConfig c;
  Model m;
  base_config(&c, moe, tied);
  make_model(&m, &c);
  char dir[600];
  snprintf(dir, sizeof dir, "%s/out-%d-%d/nested", scratch_dir(), moe, tied);
  Error err = {0};
  if (export_hf_write(&m, "byte-level", dir, &err)) fail_msg("%s", err.msg);
  check_layout(dir, &m);
  check_config(dir, &c, moe ? "MixtralForCausalLM" : "LlamaForCausalLM", -1);
  model_free(&m);
}

static void test_dense_untied(void **state) {
  (void)state;
  export_case(0, 0);
}
static void test_dense_tied(void **state) {
  (void)state;
  export_case(0, 1);
}
static void test_mixtral(void **state) {
  (void)state;
  export_case(1, 0);
}

static void test_byte_level_tokenizer(void **state) {
  (void)state;
  Tokenizer *tok;
  Error err = {0};
  assert_int_equal(export_hf_byte_level_tokenizer(&tok, &err), 0);
  assert_int_equal(tok_vocab_size(tok), 256);
  assert_int_equal(tok_num_merges(tok), 0);
  assert_int_equal(tok_eot_id(tok), -1);
  for (int b = 0; b < 256; b++) {
    size_t n;
    const uint8_t *bytes = tok_token_bytes(tok, b, &n);
    assert_true(bytes && n == 1 && bytes[0] == b);
  }
  /* Through the file and back, encoding is the identity on bytes. */
  const char *path = scratch_path("bytes.json");
  assert_int_equal(tok_save_json(tok, path, &err), 0);
  tok_free(tok);
  assert_int_equal(tok_load_json(&tok, path, &err), 0);
  TokEncoder *enc;
  TokIds ids = {0};
  const uint8_t text[] = "Gen 1:1 \xc3\xa9\x00\xff end";
  assert_int_equal(tok_encoder_new(&enc, tok, &err), 0);
  assert_int_equal(tok_encode(enc, text, sizeof text - 1, 0, &ids, &err), 0);
  assert_int_equal(ids.n, sizeof text - 1);
  for (size_t i = 0; i < ids.n; i++) assert_int_equal(ids.ids[i], text[i]);
  tok_ids_free(&ids);
  tok_encoder_free(enc);
  tok_free(tok);
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc(*n + 1);
  if (fread(b, 1, *n, f) != *n) abort();
  fclose(f);
  return b;
}

static void test_bpe_tokenizer_copied(void **state) {
  (void)state;
  const char *text = "the light and the darkness, the evening and the morning; the light was good. ";
  const uint8_t *texts[1] = {(const uint8_t *)text};
  size_t lens[1] = {strlen(text)};
  TokTrainOptions opts = {.vocab_size = 280};
  Tokenizer *tok;
  Error err = {0};
  assert_int_equal(tok_train(&tok, texts, lens, 1, &opts, &err), 0);
  const int eot = tok_eot_id(tok), V = tok_vocab_size(tok);
  assert_true(eot >= 256);
  const char *src = scratch_path("bpe.json");
  assert_int_equal(tok_save_json(tok, src, &err), 0);
  tok_free(tok);

  ModelConfig c;
  Model m;
  base_config(&c, 0, 1);
  c.vocab_size = V;
  make_model(&m, &c);
  char dir[600];
  snprintf(dir, sizeof dir, "%s/bpe-out", scratch_dir());
  if (export_hf_write(&m, src, dir, &err)) fail_msg("%s", err.msg);
  char dst[700];
  snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
  size_t na, nb;
  char *a = slurp(src, &na), *b = slurp(dst, &nb);
  assert_true(a && b && na == nb && memcmp(a, b, na) == 0);
  free(a);
  free(b);
  check_config(dir, &c, "LlamaForCausalLM", eot);
  model_free(&m);

  /* A tokenizer with more ids than the model's vocabulary is refused. */
  c.vocab_size = V - 1;
  make_model(&m, &c);
  snprintf(dir, sizeof dir, "%s/bpe-small", scratch_dir());
  assert_int_not_equal(export_hf_write(&m, src, dir, &err), 0);
  assert_non_null(strstr(err.msg, "vocab_size"));
  model_free(&m);
}

static void expect_refusal(const ModelConfig *c, const char *needle) {
  Error err = {0};
  assert_int_equal(export_hf_check(c, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "cannot be represented as a Hugging Face Mixtral model"));
  if (!strstr(err.msg, needle)) fail_msg("refusal lacks \"%s\": %s", needle, err.msg);
}

static void test_refusals(void **state) {
  (void)state;
  ModelConfig c;
  Error err = {0};
  base_config(&c, 0, 0);
  assert_int_equal(export_hf_check(&c, &err), 0);
  base_config(&c, 1, 0);
  assert_int_equal(export_hf_check(&c, &err), 0);
  c.router_order = ROUTER_TOPK_THEN_SOFTMAX; /* the same weights as softmax -> top-k -> renormalise */
  c.norm_topk_prob = 0;
  assert_int_equal(export_hf_check(&c, &err), 0);

  base_config(&c, 1, 0);
  c.shared_expert_intermediate_size = 8;
  expect_refusal(&c, "a shared expert (shared_expert_intermediate_size 8");
  base_config(&c, 1, 0);
  model_config_set_moe_layer_freq(&c, 2);
  expect_refusal(&c, "dense layers mixed with MoE layers (layer 1;");
  base_config(&c, 1, 0);
  c.router_score = ROUTER_SCORE_SIGMOID;
  expect_refusal(&c, "sigmoid router scores");
  base_config(&c, 1, 0);
  c.norm_topk_prob = 0;
  expect_refusal(&c, "not renormalised (norm_topk_prob false");
  base_config(&c, 1, 0);
  c.capacity_factor = 1.25f;
  expect_refusal(&c, "capacity factor of 1.25");
  base_config(&c, 1, 0);
  c.topk_scaling_factor = 2.5f;
  expect_refusal(&c, "scaled by 2.5");

  /* All at once: every reason is listed. */
  base_config(&c, 1, 0);
  c.shared_expert_intermediate_size = 8;
  c.capacity_factor = 2.0f;
  c.topk_scaling_factor = 0.5f;
  model_config_set_moe_layer_freq(&c, 2);
  assert_int_equal(export_hf_check(&c, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "shared expert"));
  assert_non_null(strstr(err.msg, "capacity factor"));
  assert_non_null(strstr(err.msg, "scaled by 0.5"));
  assert_non_null(strstr(err.msg, "dense layers"));

  /* export_hf_write refuses before writing anything. */
  Model m;
  make_model(&m, &c);
  char dir[600];
  snprintf(dir, sizeof dir, "%s/refused", scratch_dir());
  assert_int_equal(export_hf_write(&m, "byte-level", dir, &err), ERR_CONFIG);
  FILE *f = fopen(scratch_path("refused/model.safetensors"), "rb");
  assert_null(f);
  model_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dense_untied),     cmocka_unit_test(test_dense_tied),
      cmocka_unit_test(test_mixtral),          cmocka_unit_test(test_byte_level_tokenizer),
      cmocka_unit_test(test_bpe_tokenizer_copied), cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
