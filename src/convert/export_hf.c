/* Hugging Face export: config.json of each family, model.safetensors
 * written tensor by tensor from the table of convert/hf_layout.h, and the
 * tokenizer file. */
#include "convert/export_hf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_text.h"
#include "base/fs.h"
#include "base/safetensors.h"
#include "ckpt/checkpoint.h"
#include "convert/hf_layout.h"
#include "train/net_transformer.h"

int export_hf_check(const ModelConfig *cfg, Error *err) {
  HfFamily family;
  return hf_family_for_model(cfg, &family, err);
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

/* The fields every family's config.json ends with. */
static void add_common_tail(cJSON *o, const ModelConfig *cfg, int bos_id, int eos_id) {
  cJSON_AddBoolToObject(o, "tie_word_embeddings", cfg->tie_word_embeddings);
  cJSON_AddNumberToObject(o, "initializer_range", shortest(cfg->init_std));
  add_id_or_null(o, "bos_token_id", bos_id);
  add_id_or_null(o, "eos_token_id", eos_id);
  cJSON_AddStringToObject(o, "torch_dtype", "float32");
  cJSON_AddBoolToObject(o, "use_cache", 1);
}

static void replace_number(cJSON *o, const char *key, double v) {
  cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateNumber(v));
}

/* fivefold's canonical GPT-2 form has GPT2Config's field names already;
 * config.json adds what transformers reads besides. */
static cJSON *gpt2_config_json(const ModelConfig *cfg, int bos_id, int eos_id) {
  cJSON *o = model_config_to_json(cfg);
  if (!o) return NULL;
  cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString(hf_family_architecture(HF_GPT2)));
  replace_number(o, "layer_norm_epsilon", shortest(cfg->rms_norm_eps));
  cJSON_DeleteItemFromObjectCaseSensitive(o, "tie_word_embeddings");
  cJSON_DeleteItemFromObjectCaseSensitive(o, "initializer_range");
  cJSON_AddNumberToObject(o, "n_ctx", cfg->max_position_embeddings);
  /* fivefold computes without dropout; a model loaded for training elsewhere
   * would otherwise get GPT2Config's 0.1. */
  cJSON_AddNumberToObject(o, "resid_pdrop", 0.0);
  cJSON_AddNumberToObject(o, "embd_pdrop", 0.0);
  cJSON_AddNumberToObject(o, "attn_pdrop", 0.0);
  cJSON_AddBoolToObject(o, "scale_attn_weights", 1);
  cJSON_AddBoolToObject(o, "scale_attn_by_inverse_layer_idx", 0);
  cJSON_AddBoolToObject(o, "reorder_and_upcast_attn", 0);
  add_common_tail(o, cfg, bos_id, eos_id);
  return o;
}

/* Qwen2-MoE's fields for which layers are MoE and what its experts do. */
static void qwen2_moe_fields(cJSON *o, const ModelConfig *cfg) {
  cJSON_AddNumberToObject(o, "num_experts", cfg->num_experts);
  cJSON_AddNumberToObject(o, "num_experts_per_tok", cfg->top_k);
  cJSON_AddNumberToObject(o, "moe_intermediate_size", cfg->moe_intermediate_size);
  cJSON_AddNumberToObject(o, "shared_expert_intermediate_size", cfg->shared_expert_intermediate_size);
  /* top-k then softmax is softmax, top-k, renormalise */
  cJSON_AddBoolToObject(o, "norm_topk_prob", cfg->norm_topk_prob || cfg->router_order == ROUTER_TOPK_THEN_SOFTMAX);
  cJSON_AddNumberToObject(o, "decoder_sparse_step", 1);
  cJSON *only = cJSON_AddArrayToObject(o, "mlp_only_layers");
  for (int i = 0; i < cfg->num_layers; i++)
    if (!cfg->is_moe_layer[i]) cJSON_AddItemToArray(only, cJSON_CreateNumber(i));
  cJSON_AddNumberToObject(o, "router_aux_loss_coef", shortest(cfg->aux_loss_coeff));
  cJSON_AddBoolToObject(o, "output_router_logits", 0);
  cJSON_AddBoolToObject(o, "use_sliding_window", 0);
  cJSON_AddNullToObject(o, "sliding_window");
}

cJSON *export_hf_config_json(const ModelConfig *cfg, int bos_id, int eos_id) {
  HfFamily family;
  if (hf_family_for_model(cfg, &family, NULL)) return NULL;
  if (family == HF_GPT2) return gpt2_config_json(cfg, bos_id, eos_id);
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
  cJSON_AddItemToArray(arch, cJSON_CreateString(hf_family_architecture(family)));
  cJSON_AddStringToObject(o, "model_type", hf_family_model_type(family));
  cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size);
  cJSON_AddNumberToObject(o, "hidden_size", cfg->hidden_size);
  const int ffn = family == HF_MIXTRAL ? cfg->moe_intermediate_size
                  : cfg->intermediate_size > 0 ? cfg->intermediate_size
                                               : cfg->moe_intermediate_size;
  cJSON_AddNumberToObject(o, "intermediate_size", ffn);
  cJSON_AddNumberToObject(o, "num_hidden_layers", cfg->num_layers);
  cJSON_AddNumberToObject(o, "num_attention_heads", cfg->num_heads);
  cJSON_AddNumberToObject(o, "num_key_value_heads", model_config_kv_heads(cfg));
  cJSON_AddNumberToObject(o, "head_dim", model_config_head_dim(cfg));
  cJSON_AddStringToObject(o, "hidden_act", "silu");
  cJSON_AddNumberToObject(o, "max_position_embeddings", cfg->max_position_embeddings);
  cJSON_AddNumberToObject(o, "rms_norm_eps", shortest(cfg->rms_norm_eps));
  cJSON_AddNumberToObject(o, "rope_theta", shortest(cfg->rope_theta));
  cJSON_AddNullToObject(o, "rope_scaling");
  /* Qwen2's q/k/v biases are part of the architecture, not a field. */
  if (family == HF_LLAMA || family == HF_MIXTRAL) cJSON_AddBoolToObject(o, "attention_bias", cfg->o_bias != 0);
  cJSON_AddNumberToObject(o, "attention_dropout", 0.0);
  if (family == HF_MIXTRAL) {
    cJSON_AddNumberToObject(o, "num_local_experts", cfg->num_experts);
    cJSON_AddNumberToObject(o, "num_experts_per_tok", cfg->top_k);
    cJSON_AddNumberToObject(o, "router_aux_loss_coef", shortest(cfg->aux_loss_coeff));
    cJSON_AddBoolToObject(o, "output_router_logits", 0);
    cJSON_AddNumberToObject(o, "router_jitter_noise", 0.0);
    cJSON_AddNullToObject(o, "sliding_window");
  } else if (family == HF_QWEN2_MOE) {
    qwen2_moe_fields(o, cfg);
  } else if (family == HF_QWEN2) {
    cJSON_AddBoolToObject(o, "use_sliding_window", 0);
    cJSON_AddNullToObject(o, "sliding_window");
  } else {
    cJSON_AddBoolToObject(o, "mlp_bias", 0);
    cJSON_AddNumberToObject(o, "pretraining_tp", 1);
  }
  add_common_tail(o, cfg, bos_id, eos_id);
  return o;
}

/* ---- tokenizer ---- */

int export_hf_byte_level_tokenizer(Tokenizer **out, Error *err) {
  static const char *no_specials[1] = {NULL};
  TokTrainOptions opts = {.vocab_size = 256, .special_tokens = no_specials, .n_special = 0};
  return tok_train(out, NULL, NULL, 0, &opts, err);
}

/* ---- files ---- */


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
  if (!rc) rc = fs_write_atomic(path, text, n, err);
  free(text);
  return rc;
}

/* One HF tensor: the run of pieces [first, end) of the table that fill it. */
static int group_end(const HfLayout *lay, int first) {
  int end = first + 1;
  while (end < lay->n && !strcmp(lay->pieces[end].hf, lay->pieces[first].hf)) end++;
  return end;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t at) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = pwrite(fd, p, n, (off_t)at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k, n -= (size_t)k, at += (uint64_t)k;
  }
  return 0;
}

static size_t hf_numel(const HfPiece *p) {
  return (size_t)p->hf_shape[0] * (size_t)(p->hf_ndim == 2 ? p->hf_shape[1] : 1);
}

/* model.safetensors, one HF tensor at a time through one scratch buffer
 * (transposed and fused tensors need one), so an export holds the model
 * and at most its largest tensor. */
static int export_weights(const Model *m, HfFamily family, const char *out_dir, Error *err) {
  HfLayout lay;
  int rc = hf_layout_build(&lay, &m->cfg, family, "transformer.", err);
  if (rc) return rc;
  SafetensorsWriter *w = safetensors_writer_new();
  uint64_t *offsets = calloc((size_t)(lay.n + lay.n_zeros + 1), sizeof *offsets);
  char *header = NULL;
  float *scratch = NULL;
  size_t header_bytes = 0, biggest = 0;
  int fd = -1, ntensors = 0;
  char path[4200], tmp[4220];
  snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (!w || !offsets) rc = error_set(err, ERR_NOMEM, "out of memory");
  /* transformers refuses safetensors files without format "pt". */
  if (!rc) rc = safetensors_writer_set_metadata(w, "format", "pt", err);
  for (int i = 0; i < lay.n && !rc; i = group_end(&lay, i)) {
    const HfPiece *p = &lay.pieces[i];
    if (!model_find_tensor(m, p->ours))
      rc = error_set(err, ERR_INTERNAL, "export: the model has no tensor %s", p->ours);
    else rc = safetensors_writer_add(w, p->hf, ST_F32, p->hf_ndim, p->hf_shape, NULL, err);
    if (hf_numel(p) > biggest) biggest = hf_numel(p);
    ntensors++;
  }
  for (int i = 0; i < lay.n_zeros && !rc; i++) {
    rc = safetensors_writer_add(w, lay.zeros[i].hf, ST_F32, lay.zeros[i].hf_ndim, lay.zeros[i].hf_shape, NULL, err);
    if (hf_numel(&lay.zeros[i]) > biggest) biggest = hf_numel(&lay.zeros[i]);
  }
  if (!rc) rc = safetensors_writer_layout(w, &header, &header_bytes, offsets, NULL, err);
  if (!rc && !(scratch = malloc((biggest ? biggest : 1) * sizeof *scratch)))
    rc = error_set(err, ERR_NOMEM, "out of memory for a %zu-element tensor", biggest);
  if (!rc && (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
    rc = error_set(err, ERR_IO, "cannot create %s: %s", tmp, error_errno_text(errno));
  if (!rc && pwrite_all(fd, header, header_bytes, 0))
    rc = error_set(err, ERR_IO, "cannot write %s: %s", tmp, error_errno_text(errno));
  int k = 0;
  for (int i = 0; i < lay.n && !rc; i = group_end(&lay, i), k++) {
    for (int j = i; j < group_end(&lay, i); j++) {
      const ParamTensor *t = model_find_tensor(m, lay.pieces[j].ours);
      hf_piece_to_hf(&lay.pieces[j], m->params + t->offset, scratch);
    }
    if (pwrite_all(fd, scratch, hf_numel(&lay.pieces[i]) * sizeof *scratch, offsets[k]))
      rc = error_set(err, ERR_IO, "cannot write %s: %s", tmp, error_errno_text(errno));
  }
  for (int i = 0; i < lay.n_zeros && !rc; i++, k++) {
    memset(scratch, 0, hf_numel(&lay.zeros[i]) * sizeof *scratch);
    if (pwrite_all(fd, scratch, hf_numel(&lay.zeros[i]) * sizeof *scratch, offsets[k]))
      rc = error_set(err, ERR_IO, "cannot write %s: %s", tmp, error_errno_text(errno));
  }
  if (!rc && fsync(fd) != 0) rc = error_set(err, ERR_IO, "cannot fsync %s: %s", tmp, error_errno_text(errno));
  if (fd >= 0 && close(fd) != 0 && !rc) rc = error_set(err, ERR_IO, "cannot close %s: %s", tmp, error_errno_text(errno));
  if (!rc && rename(tmp, path) != 0)
    rc = error_set(err, ERR_IO, "cannot rename %s to %s: %s", tmp, path, error_errno_text(errno));
  if (rc && fd >= 0) unlink(tmp);
  free(scratch);
  free(header);
  free(offsets);
  safetensors_writer_free(w);
  hf_layout_free(&lay);
  return rc;
}

int export_hf_write(const Model *m, const char *tokenizer, const char *out_dir, Error *err) {
  HfFamily family;
  int rc = hf_family_for_model(&m->cfg, &family, err);
  if (!rc) rc = fs_mkdir_p(out_dir, err);
  int eot = -1;
  if (!rc) rc = export_tokenizer(tokenizer, m->cfg.vocab_size, out_dir, &eot, err);
  if (!rc) rc = export_weights(m, family, out_dir, err);
  if (rc) return rc;
  cJSON *cfg = export_hf_config_json(&m->cfg, eot, eot);
  char *text = cfg ? cJSON_Print(cfg) : NULL;
  cJSON_Delete(cfg);
  if (!text) return error_set(err, ERR_NOMEM, "out of memory writing config.json");
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", out_dir);
  rc = fs_write_text_atomic(path, text, err);
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
  HfFamily family = HF_LLAMA;
  if (!rc) rc = hf_family_for_model(&cfg, &family, err);
  if (rc) return rc;
  info->architecture = hf_family_architecture(family);
  Model m; /* weights only: an export holds one copy of the model */
  if ((rc = hf_table_model_create(&m, &cfg, err))) return rc;
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
  hf_table_model_free(&m);
  return rc;
}
