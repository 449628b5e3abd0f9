/* Hugging Face import (convert/import_hf.h) against export: for each family
 * (Llama, Qwen2, Mixtral, Qwen2-MoE with a shared expert and a dense layer,
 * GPT-2 tied and untied) a model whose every parameter holds a distinct
 * value is exported, imported, and must come back bit for bit with the
 * same model config; and malformed directories (a missing shard, an index
 * naming an absent tensor, a missing tensor, a wrong shape, an integer
 * dtype, a truncated file, an unknown architecture, unrepresentable config
 * fields, a tensor with no place, a non-zero Qwen2-MoE shared-expert gate)
 * are refused with messages naming the file and the tensor or field. */
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
#include "ckpt/checkpoint.h"
#include "convert/export_hf.h"
#include "convert/import_hf.h"
#include "train/net_transformer.h"
#include "export/export_test_util.h"

/* base_config as a config.json of model_type `type` reads back. */
static void decoder_config(ModelConfig *c, const char *type, int moe, int tied) {
  base_config(c, moe, tied);
  snprintf(c->model_type, sizeof c->model_type, "%s", type);
  if (!moe) c->moe_intermediate_size = c->intermediate_size;
  if (moe) c->aux_loss_coeff = 0.01f;
}

static void gpt2_config(ModelConfig *c, int tied) {
  char text[256];
  snprintf(text, sizeof text,
           "{\"model_type\": \"gpt2\", \"vocab_size\": 260, \"n_embd\": 16, \"n_layer\": 2, \"n_head\": 4, "
           "\"n_positions\": 32, \"n_inner\": 40, \"tie_word_embeddings\": %s}",
           tied ? "true" : "false");
  cJSON *j = cJSON_Parse(text);
  Error err = {0};
  if (!j || model_config_from_json(c, j, "gpt2", &err)) fail_msg("%s", err.msg);
  cJSON_Delete(j);
}

/* Every parameter a distinct value, so a tensor read into the wrong place
 * (or transposed, or split at the wrong row) cannot come back equal. */
static void make_model(Model *m, const ModelConfig *c) {
  Error err = {0};
  if (model_create(m, c, 1, 1, &err)) fail_msg("%s", err.msg);
  for (size_t j = 0; j < m->num_params; j++) m->params[j] = (float)((double)((j * 2654435761u) % 1000003u) / 1e6 - 0.5);
}

static void export_to(const Model *m, const char *dir) {
  Error err = {0};
  if (export_hf_write(m, CHECKPOINT_BYTE_LEVEL, dir, &err)) fail_msg("export: %s", err.msg);
}

static void round_trip(const ModelConfig *c, const char *name, const char *architecture) {
  Model m, back;
  make_model(&m, c);
  char hf[1024], run[1100];
  snprintf(hf, sizeof hf, "%s", scratch_path(name));
  snprintf(run, sizeof run, "%s-run", hf);
  export_to(&m, hf);
  ImportHfInfo info;
  Error err = {0};
  if (import_hf_directory(hf, run, NULL, &info, &err)) fail_msg("import %s: %s", name, err.msg);
  assert_string_equal(info.architecture, architecture);
  assert_string_equal(info.dtypes, "F32");
  ModelConfig cfg;
  if (checkpoint_read_model_config(info.checkpoint, &cfg, NULL, 0, NULL, &err)) fail_msg("%s", err.msg);
  if (checkpoint_compare_model_configs(c, "the exported model", &cfg, "the imported one", &err))
    fail_msg("%s: %s", name, err.msg);
  if (model_create(&back, &cfg, 1, 1, &err) || net_transformer_load_weights(info.checkpoint, &back, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(back.num_params, m.num_params);
  assert_int_equal(info.num_params, m.num_params);
  for (int i = 0; i < m.num_tensors; i++) {
    const ParamTensor *t = &m.tensors[i], *u = model_find_tensor(&back, t->name);
    assert_non_null(u);
    if (memcmp(m.params + t->offset, back.params + u->offset, t->numel * sizeof(float)) != 0)
      fail_msg("%s: tensor %s differs after export -> import", name, t->name);
  }
  model_free(&back);
  model_free(&m);
}

static void test_round_trips(void **state) {
  (void)state;
  ModelConfig c;
  decoder_config(&c, "llama", 0, 0);
  round_trip(&c, "llama", "LlamaForCausalLM");
  decoder_config(&c, "llama", 0, 1);
  c.qkv_bias = c.o_bias = 1;
  round_trip(&c, "llama-bias-tied", "LlamaForCausalLM");
  decoder_config(&c, "qwen2", 0, 1);
  c.qkv_bias = 1;
  round_trip(&c, "qwen2", "Qwen2ForCausalLM");
  decoder_config(&c, "mixtral", 1, 0);
  c.intermediate_size = c.moe_intermediate_size; /* Mixtral has one FFN size */
  round_trip(&c, "mixtral", "MixtralForCausalLM");
  decoder_config(&c, "qwen2_moe", 1, 0);
  c.qkv_bias = 1;
  c.norm_topk_prob = 0;
  c.shared_expert_intermediate_size = 8;
  c.is_moe_layer[1] = 0;
  round_trip(&c, "qwen2-moe", "Qwen2MoeForCausalLM");
  gpt2_config(&c, 1);
  round_trip(&c, "gpt2-tied", "GPT2LMHeadModel");
  gpt2_config(&c, 0);
  round_trip(&c, "gpt2", "GPT2LMHeadModel");
}

/* ---- malformed directories ---- */

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) fail_msg("cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

static void expect_refused(const char *hf, const char *const needles[]) {
  char run[1100];
  snprintf(run, sizeof run, "%s-run", hf);
  Error err = {0};
  if (import_hf_directory(hf, run, NULL, NULL, &err) == 0) fail_msg("%s was imported", hf);
  for (int i = 0; needles[i]; i++)
    if (!strstr(err.msg, needles[i])) fail_msg("the refusal of %s lacks \"%s\":\n%s", hf, needles[i], err.msg);
  char ck[1200];
  snprintf(ck, sizeof ck, "%s/checkpoints", run);
  assert_int_not_equal(access(ck, F_OK), 0);
}

/* A fresh export of a small Mixtral (or Qwen2-MoE) into scratch `name`. */
static const char *fresh(const char *name, int qwen) {
  ModelConfig c;
  decoder_config(&c, qwen ? "qwen2_moe" : "mixtral", 1, 0);
  if (qwen) c.qkv_bias = 1, c.shared_expert_intermediate_size = 8;
  Model m;
  make_model(&m, &c);
  const char *dir = scratch_path(name);
  export_to(&m, dir);
  model_free(&m);
  return dir;
}

enum { DROP, RESHAPE, TO_I32, EXTRA, NONZERO };

/* Rewrites dir/model.safetensors with `victim` dropped, reshaped, stored
 * as I32, filled with ones, or with an extra tensor. */
static void tamper(const char *dir, const char *victim, int how) {
  char path[1100];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  SafetensorsReader *r;
  Error err = {0};
  if (safetensors_open(&r, path, &err)) fail_msg("%s", err.msg);
  SafetensorsWriter *w = safetensors_writer_new();
  const int n = safetensors_num_tensors(r);
  void **bufs = calloc((size_t)n + 1, sizeof *bufs);
  for (int i = 0; i < n; i++) {
    const SafetensorsTensorInfo *t = safetensors_tensor_at(r, i);
    bufs[i] = malloc(t->nbytes);
    if (safetensors_read(r, t->name, t->dtype, bufs[i], t->nbytes, &err)) fail_msg("%s", err.msg);
    int64_t flat[1] = {(int64_t)t->numel};
    const int hit = !strcmp(t->name, victim);
    if (hit && how == DROP) continue;
    if (hit && how == NONZERO)
      for (uint64_t j = 0; j < t->numel; j++) ((float *)bufs[i])[j] = 1.0f;
    int rc = hit && how == RESHAPE  ? safetensors_writer_add(w, t->name, t->dtype, 1, flat, bufs[i], &err)
             : hit && how == TO_I32 ? safetensors_writer_add(w, t->name, ST_I32, t->ndim, t->shape, bufs[i], &err)
                                    : safetensors_writer_add(w, t->name, t->dtype, t->ndim, t->shape, bufs[i], &err);
    if (rc) fail_msg("%s", err.msg);
  }
  static const float one = 1.0f;
  int64_t shape1[1] = {1};
  if (how == EXTRA && safetensors_writer_add(w, victim, ST_F32, 1, shape1, &one, &err)) fail_msg("%s", err.msg);
  safetensors_close(r);
  if (safetensors_writer_write(w, path, &err)) fail_msg("%s", err.msg);
  safetensors_writer_free(w);
  for (int i = 0; i < n; i++) free(bufs[i]);
  free(bufs);
}

static void test_malformed(void **state) {
  (void)state;
  char path[1200], other[1200];
  /* Shards: the index puts one tensor in a shard that is not there. */
  const char *dir = fresh("missing-shard", 0);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  snprintf(other, sizeof other, "%s/model-00001-of-00002.safetensors", dir);
  assert_int_equal(rename(path, other), 0);
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  write_text(path,
             "{\"metadata\": {}, \"weight_map\": {\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\", "
             "\"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}");
  expect_refused(dir, (const char *const[]){"model-00002-of-00002.safetensors", "missing shard", "lm_head.weight",
                                            NULL});
  /* The index names a tensor its shard does not hold. */
  write_text(path,
             "{\"weight_map\": {\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\", "
             "\"model.layers.0.mlp.nothing.weight\": \"model-00001-of-00002.safetensors\"}}");
  expect_refused(dir, (const char *const[]){"model-00001-of-00002.safetensors", "model.layers.0.mlp.nothing.weight",
                                            "no tensor named", NULL});

  dir = fresh("missing-tensor", 0);
  tamper(dir, "model.layers.1.block_sparse_moe.experts.2.w3.weight", DROP);
  expect_refused(dir, (const char *const[]){"model.layers.1.block_sparse_moe.experts.2.w3.weight", "missing",
                                            "model.safetensors", NULL});
  dir = fresh("shape", 0);
  tamper(dir, "model.layers.2.self_attn.k_proj.weight", RESHAPE);
  expect_refused(dir, (const char *const[]){"model.safetensors: tensor 'model.layers.2.self_attn.k_proj.weight' has "
                                            "shape [192], expected [12, 16]",
                                            NULL});
  dir = fresh("dtype", 0);
  tamper(dir, "model.norm.weight", TO_I32);
  expect_refused(dir, (const char *const[]){"model.safetensors: tensor 'model.norm.weight' is I32", NULL});
  dir = fresh("extra", 0);
  tamper(dir, "model.layers.0.mlp.gate_proj.weight", EXTRA);
  expect_refused(dir, (const char *const[]){"model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' has no "
                                            "place",
                                            NULL});
  dir = fresh("gate", 1);
  tamper(dir, "model.layers.0.mlp.shared_expert_gate.weight", NONZERO);
  expect_refused(dir, (const char *const[]){"model.layers.0.mlp.shared_expert_gate.weight", "not zero", NULL});

  dir = fresh("truncated", 0);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FILE *f = fopen(path, "rb");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  assert_int_equal(truncate(path, size - 100), 0);
  expect_refused(dir, (const char *const[]){path, NULL});

  dir = fresh("architecture", 0);
  snprintf(path, sizeof path, "%s/config.json", dir);
  write_text(path, "{\"model_type\": \"bert\", \"vocab_size\": 260}");
  expect_refused(dir, (const char *const[]){"config.json", "\"model_type\": \"bert\"", NULL});
  write_text(path,
             "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForSequenceClassification\"], "
             "\"vocab_size\": 260, \"hidden_size\": 16, \"num_hidden_layers\": 3, \"num_attention_heads\": 4, "
             "\"intermediate_size\": 24, \"hidden_act\": \"gelu\", \"mlp_bias\": true, \"rope_scaling\": "
             "{\"type\": \"linear\", \"factor\": 2.0}, \"frobnicate\": 1}");
  expect_refused(dir, (const char *const[]){"config.json", "LlamaForSequenceClassification", "\"hidden_act\"",
                                            "\"mlp_bias\"", "\"rope_scaling\"", "\"frobnicate\"", NULL});
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_round_trips), cmocka_unit_test(test_malformed)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
