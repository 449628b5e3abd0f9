/* Hugging Face export: the representability check, config.json, the tensor
 * renaming / splitting into model.safetensors, and the tokenizer file. The
 * split tensors are views into the model's parameter buffer (row blocks of
 * [out, in] matrices are contiguous), so nothing is copied on the way. */
#include "convert/export_hf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_text.h"
#include "base/fs.h"
#include "base/safetensors.h"
#include "ckpt/checkpoint.h"
#include "train/net_transformer.h"

/* ---- what Mixtral can express ---- */

typedef struct Reasons {
  char buf[900];
  size_t used;
  int n;
} Reasons;

static void add_reason(Reasons *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_reason(Reasons *r, const char *fmt, ...) {
  if (r->used + 8 >= sizeof r->buf) return;
  r->used += (size_t)snprintf(r->buf + r->used, sizeof r->buf - r->used, "%s", r->n ? "; " : "");
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(r->buf + r->used, sizeof r->buf - r->used, fmt, ap);
  va_end(ap);
  if (k > 0) r->used += (size_t)k;
  if (r->used >= sizeof r->buf) r->used = sizeof r->buf - 1;
  r->n++;
}

int export_hf_check(const ModelConfig *cfg, Error *err) {
  if (cfg->gpt2)
    return error_set(err, ERR_CONFIG,
                     "this GPT-2 model cannot be exported yet (export writes LlamaForCausalLM and "
                     "MixtralForCausalLM directories; GPT2LMHeadModel is not written). See docs/export.md");
  if (cfg->qkv_bias)
    return error_set(err, ERR_CONFIG,
                     "this model has attention biases (qkv_bias / attention_bias), which export does not write yet. "
                     "See docs/export.md");
  int n_moe = model_config_num_moe_layers(cfg);
  if (n_moe == 0) return 0; /* LlamaForCausalLM expresses every dense fivefold model */
  Reasons r = {.used = 0, .n = 0};
  if (n_moe < cfg->num_layers) {
    char list[160] = "";
    size_t used = 0;
    int shown = 0;
    for (int i = 0; i < cfg->num_layers; i++) {
      if (cfg->is_moe_layer[i]) continue;
      if (shown == 8) {
        snprintf(list + used, sizeof list - used, ", ...");
        break;
      }
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", shown ? ", " : "", i);
      shown++;
    }
    add_reason(&r, "dense layers mixed with MoE layers (layer%s %s; Mixtral makes every layer MoE)",
               cfg->num_layers - n_moe == 1 ? "" : "s", list);
  }
  if (cfg->router_score != ROUTER_SCORE_SOFTMAX)
    add_reason(&r, "sigmoid router scores (moe_router_score_function; Mixtral routes with a softmax)");
  else if (cfg->router_order == ROUTER_SOFTMAX_THEN_TOPK && !cfg->norm_topk_prob)
    add_reason(&r, "top-k routing weights that are not renormalised (norm_topk_prob false; Mixtral renormalises)");
  if (cfg->shared_expert_intermediate_size > 0)
    add_reason(&r, "a shared expert (shared_expert_intermediate_size %d; Mixtral has none)",
               cfg->shared_expert_intermediate_size);
  if (cfg->capacity_factor > 0)
    add_reason(&r, "an expert capacity factor of %g (token dropping; Mixtral is dropless)",
               (double)cfg->capacity_factor);
  if (cfg->topk_scaling_factor != 1.0f)
    add_reason(&r, "routing weights scaled by %g (moe_router_topk_scaling_factor; Mixtral uses 1)",
               (double)cfg->topk_scaling_factor);
  if (!r.n) return 0;
  return error_set(err, ERR_CONFIG,
                   "this MoE model cannot be represented as a Hugging Face Mixtral model "
                   "(MixtralForCausalLM): it has %s. See docs/export.md",
                   r.buf);
}

/* ---- config.json ---- */

/* The shortest decimal that reads back as the same float, so config.json
 * says 1e-05 rather than 9.99999974737875e-06. */
static double shortest(float x) {
  char buf[32];
  for (int digits = 6; digits <= 9; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, (double)x);
    if ((float)strtod(buf, NULL) == x) break;
  }
  return strtod(buf, NULL);
}

static void add_id_or_null(cJSON *o, const char *key, int id) {
  if (id >= 0) cJSON_AddNumberToObject(o, key, id);
  else cJSON_AddNullToObject(o, key);
}

cJSON *export_hf_config_json(const ModelConfig *cfg, int bos_id, int eos_id) {
  const int moe = model_config_num_moe_layers(cfg) > 0;
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString(moe ? "MixtralForCausalLM" : "LlamaForCausalLM"));
  cJSON_AddStringToObject(o, "model_type", moe ? "mixtral" : "llama");
  cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size);
  cJSON_AddNumberToObject(o, "hidden_size", cfg->hidden_size);
  cJSON_AddNumberToObject(o, "intermediate_size", moe ? cfg->moe_intermediate_size : cfg->intermediate_size);
  cJSON_AddNumberToObject(o, "num_hidden_layers", cfg->num_layers);
  cJSON_AddNumberToObject(o, "num_attention_heads", cfg->num_heads);
  cJSON_AddNumberToObject(o, "num_key_value_heads", model_config_kv_heads(cfg));
  cJSON_AddNumberToObject(o, "head_dim", model_config_head_dim(cfg));
  cJSON_AddStringToObject(o, "hidden_act", "silu");
  cJSON_AddNumberToObject(o, "max_position_embeddings", cfg->max_position_embeddings);
  cJSON_AddNumberToObject(o, "rms_norm_eps", shortest(cfg->rms_norm_eps));
  cJSON_AddNumberToObject(o, "rope_theta", shortest(cfg->rope_theta));
  cJSON_AddNullToObject(o, "rope_scaling");
  cJSON_AddBoolToObject(o, "attention_bias", 0);
  cJSON_AddNumberToObject(o, "attention_dropout", 0.0);
  if (moe) {
    cJSON_AddNumberToObject(o, "num_local_experts", cfg->num_experts);
    cJSON_AddNumberToObject(o, "num_experts_per_tok", cfg->top_k);
    cJSON_AddNumberToObject(o, "router_aux_loss_coef", shortest(cfg->aux_loss_coeff));
    cJSON_AddBoolToObject(o, "output_router_logits", 0);
    cJSON_AddNumberToObject(o, "router_jitter_noise", 0.0);
    cJSON_AddNullToObject(o, "sliding_window");
  } else {
    cJSON_AddBoolToObject(o, "mlp_bias", 0);
    cJSON_AddNumberToObject(o, "pretraining_tp", 1);
  }
  cJSON_AddBoolToObject(o, "tie_word_embeddings", cfg->tie_word_embeddings);
  cJSON_AddNumberToObject(o, "initializer_range", shortest(cfg->init_std));
  add_id_or_null(o, "bos_token_id", bos_id);
  add_id_or_null(o, "eos_token_id", eos_id);
  cJSON_AddStringToObject(o, "torch_dtype", "float32");
  cJSON_AddBoolToObject(o, "use_cache", 1);
  return o;
}

/* ---- tokenizer ---- */

int export_hf_byte_level_tokenizer(Tokenizer **out, Error *err) {
  static const char *no_specials[1] = {NULL};
  TokTrainOptions opts = {.vocab_size = 256, .special_tokens = no_specials, .n_special = 0};
  return tok_train(out, NULL, NULL, 0, &opts, err);
}

/* ---- files ---- */


/* PATH.tmp, fsync, rename: a reader never sees half a file. */
static int write_file_atomic(const char *path, const void *data, size_t n, Error *err) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return error_set(err, ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
  const char *p = data;
  size_t done = 0;
  int rc = 0;
  while (done < n && !rc) {
    ssize_t k = write(fd, p + done, n - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) rc = error_set(err, ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    else done += (size_t)k;
  }
  if (!rc && fsync(fd) != 0) rc = error_set(err, ERR_IO, "cannot fsync %s: %s", tmp, strerror(errno));
  if (close(fd) != 0 && !rc) rc = error_set(err, ERR_IO, "cannot close %s: %s", tmp, strerror(errno));
  if (!rc && rename(tmp, path) != 0) rc = error_set(err, ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
  if (rc) unlink(tmp);
  return rc;
}

/* Writes out_dir/tokenizer.json and reports its end-of-text id (-1: none). */
static int export_tokenizer(const char *tokenizer, int vocab_size, const char *out_dir, int *eot, Error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/tokenizer.json", out_dir);
  *eot = -1;
  Tokenizer *tok = NULL;
  int rc;
  if (!strcmp(tokenizer, CHECKPOINT_BYTE_LEVEL)) {
    rc = export_hf_byte_level_tokenizer(&tok, err);
    if (!rc) rc = tok_save_json(tok, path, err);
    tok_free(tok);
    return rc;
  }
  /* Load first: an export must not ship a tokenizer the model cannot use. */
  if ((rc = tok_load_json(&tok, tokenizer, err))) return error_wrap(err, "tokenizer of the checkpoint");
  if (tok_vocab_size(tok) > vocab_size)
    rc = error_set(err, ERR_CONFIG, "tokenizer %s has ids up to %d but the model's vocab_size is %d", tokenizer,
                   tok_vocab_size(tok) - 1, vocab_size);
  *eot = tok_eot_id(tok);
  tok_free(tok);
  char *text = NULL;
  size_t n = 0;
  if (!rc) rc = file_read_text(tokenizer, "tokenizer", (size_t)1 << 30, &text, &n, err);
  if (!rc) rc = write_file_atomic(path, text, n, err);
  free(text);
  return rc;
}

static int add_view(SafetensorsWriter *w, const Model *m, const char *hf_name, const char *ours, size_t elem_offset,
                    int rows, int cols, Error *err) {
  const ParamTensor *t = model_find_tensor(m, ours);
  if (!t) return error_set(err, ERR_INTERNAL, "export: the model has no tensor %s", ours);
  if (elem_offset + (size_t)rows * (size_t)cols > t->numel)
    return error_set(err, ERR_INTERNAL, "export: %s view [%d, %d] at %zu exceeds %s", hf_name, rows, cols,
                     elem_offset, ours);
  int shape[2] = {rows, cols};
  return safetensors_writer_add_f32(w, hf_name, cols > 0 ? 2 : 1, shape, m->params + t->offset + elem_offset, err);
}

static int add_whole(SafetensorsWriter *w, const Model *m, const char *hf_name, const char *ours, Error *err) {
  const ParamTensor *t = model_find_tensor(m, ours);
  if (!t) return error_set(err, ERR_INTERNAL, "export: the model has no tensor %s", ours);
  return safetensors_writer_add_f32(w, hf_name, t->ndim, t->shape, m->params + t->offset, err);
}

static int add_layer(SafetensorsWriter *w, const Model *m, int i, Error *err) {
  const ModelConfig *c = &m->cfg;
  const int C = c->hidden_size;
  char hf[SAFETENSORS_MAX_NAME], ours[96];
  static const char *const proj[4][2] = {{"wq", "q_proj"}, {"wk", "k_proj"}, {"wv", "v_proj"}, {"wo", "o_proj"}};
  int rc = 0;
#define HF(...) snprintf(hf, sizeof hf, __VA_ARGS__)
#define OURS(...) snprintf(ours, sizeof ours, __VA_ARGS__)
  HF("model.layers.%d.input_layernorm.weight", i), OURS("layers.%d.attn_norm.weight", i);
  if ((rc = add_whole(w, m, hf, ours, err))) return rc;
  for (int p = 0; p < 4; p++) {
    HF("model.layers.%d.self_attn.%s.weight", i, proj[p][1]), OURS("layers.%d.attn.%s", i, proj[p][0]);
    if ((rc = add_whole(w, m, hf, ours, err))) return rc;
  }
  HF("model.layers.%d.post_attention_layernorm.weight", i), OURS("layers.%d.mlp_norm.weight", i);
  if ((rc = add_whole(w, m, hf, ours, err))) return rc;
  if (!c->is_moe_layer[i]) {
    const int F = c->intermediate_size;
    OURS("layers.%d.mlp.w_gate_up", i);
    HF("model.layers.%d.mlp.gate_proj.weight", i);
    if ((rc = add_view(w, m, hf, ours, 0, F, C, err))) return rc;
    HF("model.layers.%d.mlp.up_proj.weight", i);
    if ((rc = add_view(w, m, hf, ours, (size_t)F * C, F, C, err))) return rc;
    HF("model.layers.%d.mlp.down_proj.weight", i), OURS("layers.%d.mlp.w_down", i);
    return add_whole(w, m, hf, ours, err);
  }
  const int F = c->moe_intermediate_size;
  HF("model.layers.%d.block_sparse_moe.gate.weight", i), OURS("layers.%d.moe.router", i);
  if ((rc = add_whole(w, m, hf, ours, err))) return rc;
  char gu[96], down[96];
  snprintf(gu, sizeof gu, "layers.%d.moe.experts.w_gate_up", i);
  snprintf(down, sizeof down, "layers.%d.moe.experts.w_down", i);
  for (int e = 0; e < c->num_experts && !rc; e++) {
    const size_t gu_at = (size_t)e * 2 * F * C, down_at = (size_t)e * C * F;
    HF("model.layers.%d.block_sparse_moe.experts.%d.w1.weight", i, e);
    rc = add_view(w, m, hf, gu, gu_at, F, C, err);
    HF("model.layers.%d.block_sparse_moe.experts.%d.w2.weight", i, e);
    if (!rc) rc = add_view(w, m, hf, down, down_at, C, F, err);
    HF("model.layers.%d.block_sparse_moe.experts.%d.w3.weight", i, e);
    if (!rc) rc = add_view(w, m, hf, gu, gu_at + (size_t)F * C, F, C, err);
  }
#undef HF
#undef OURS
  return rc;
}

static int export_weights(const Model *m, const char *out_dir, Error *err) {
  SafetensorsWriter *w = safetensors_writer_new();
  if (!w) return error_set(err, ERR_NOMEM, "out of memory");
  /* transformers refuses safetensors files without format "pt". */
  int rc = safetensors_writer_set_metadata(w, "format", "pt", err);
  if (!rc) rc = add_whole(w, m, "model.embed_tokens.weight", "embed.weight", err);
  for (int i = 0; i < m->cfg.num_layers && !rc; i++) rc = add_layer(w, m, i, err);
  if (!rc) rc = add_whole(w, m, "model.norm.weight", "final_norm.weight", err);
  if (!rc && !m->cfg.tie_word_embeddings) rc = add_whole(w, m, "lm_head.weight", "lm_head.weight", err);
  char path[4200];
  snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
  if (!rc) rc = safetensors_writer_write(w, path, err);
  safetensors_writer_free(w);
  return rc;
}

int export_hf_write(const Model *m, const char *tokenizer, const char *out_dir, Error *err) {
  int rc = export_hf_check(&m->cfg, err);
  if (!rc) rc = fs_mkdir_p(out_dir, err);
  int eot = -1;
  if (!rc) rc = export_tokenizer(tokenizer, m->cfg.vocab_size, out_dir, &eot, err);
  if (!rc) rc = export_weights(m, out_dir, err);
  if (rc) return rc;
  cJSON *cfg = export_hf_config_json(&m->cfg, eot, eot);
  char *text = cfg ? cJSON_Print(cfg) : NULL;
  cJSON_Delete(cfg);
  if (!text) return error_set(err, ERR_NOMEM, "out of memory writing config.json");
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", out_dir);
  size_t n = strlen(text);
  text[n] = '\n'; /* cJSON's terminator becomes the final newline */
  rc = write_file_atomic(path, text, n + 1, err);
  free(text);
  return rc;
}

int export_hf_checkpoint(const char *checkpoint, const char *out_dir, ExportHfInfo *info, Error *err) {
  return export_hf_checkpoint_with_tokenizer(checkpoint, NULL, out_dir, info, err);
}

int export_hf_checkpoint_with_tokenizer(const char *checkpoint, const char *given_tokenizer, const char *out_dir,
                                        ExportHfInfo *info, Error *err) {
  ExportHfInfo local;
  if (!info) info = &local;
  memset(info, 0, sizeof *info);
  ModelConfig cfg;
  char tokenizer[4096];
  int rc = checkpoint_resolve(checkpoint, info->checkpoint, sizeof info->checkpoint, err);
  if (!rc)
    rc = checkpoint_read_model_config(info->checkpoint, &cfg, given_tokenizer ? NULL : tokenizer, sizeof tokenizer,
                                      &info->step, err);
  if (!rc && given_tokenizer) snprintf(tokenizer, sizeof tokenizer, "%s", given_tokenizer);
  /* Refuse before reading gigabytes of weights. */
  if (!rc) rc = export_hf_check(&cfg, err);
  if (rc) return rc;
  info->architecture = model_config_num_moe_layers(&cfg) > 0 ? "MixtralForCausalLM" : "LlamaForCausalLM";
  Model m;
  if ((rc = model_create(&m, &cfg, 1, 1, err))) return rc;
  rc = net_transformer_load_weights(info->checkpoint, &m, err);
  if (!rc) rc = export_hf_write(&m, tokenizer, out_dir, err);
  if (!rc) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    SafetensorsReader *r;
    if (!safetensors_open(&r, path, err)) {
      info->num_tensors = safetensors_num_tensors(r);
      safetensors_close(r);
    }
  }
  info->num_params = m.num_params;
  model_free(&m);
  return rc;
}
