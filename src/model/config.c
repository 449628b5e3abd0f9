/* Model configuration: defaults, parsing of Hugging Face config.json fields
 * (Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE) plus fivefold's moe_* options,
 * validation, and the canonical JSON form that parses back identically.
 *
 * Precedence rules, so that published configs mean what they mean upstream:
 *  - num_local_experts (Mixtral) and num_experts (Qwen2-MoE) are one field.
 *  - moe_intermediate_size absent: experts use intermediate_size (Mixtral).
 *  - norm_topk_prob absent: true, except qwen2_moe where HF's default is false.
 *  - rms_norm_eps / rope_theta absent: the HF class default of model_type.
 *  - MoE layers: moe_layer_pattern, else moe_layer_freq (layer i is MoE when
 *    i % k == 0), else Qwen2-MoE's decoder_sparse_step / mlp_only_layers
 *    (MoE when (i + 1) % step == 0 and i not listed), else every layer.
 * Not modelled (accepted so that published configs load): Qwen2-MoE's
 * sigmoid gate on the shared expert, router jitter noise. Refused, because
 * a model with them would train as a plain one: sliding-window attention (use_sliding_window true, or a
 * sliding_window smaller than max_position_embeddings without
 * use_sliding_window false: Mistral applies a window whenever one is set). */
#include "model/config.h"

#include "base/file_text.h"
#include "base/json_util.h"
#include "base/near_miss.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fields read by the parser. */
static const char *const PARSED_FIELDS[] = {
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "rope_theta",
    "rms_norm_eps",
    "tie_word_embeddings",
    "max_position_embeddings",
    "initializer_range",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "decoder_sparse_step",
    "mlp_only_layers",
    "norm_topk_prob",
    "router_aux_loss_coef",
    "moe_router_score_function",
    "moe_router_order",
    "moe_router_topk_scaling_factor",
    "moe_aux_loss_coeff",
    "moe_z_loss_coeff",
    "moe_expert_capacity_factor",
    "moe_token_drop_policy",
    "moe_pad_expert_input_to_capacity",
    "moe_layer_freq",
    "moe_layer_pattern",
    /* bookkeeping with a required value, checked below */
    "hidden_act",
    "attention_bias",
    "mlp_bias",
    "use_sliding_window",
    "rope_scaling",
    "layer_types",
    "qkv_bias",
    "sliding_window",
};

/* GPT-2 (GPT2Config) fields read by the parser. */
static const char *const GPT2_FIELDS[] = {
    "model_type", "vocab_size", "n_embd", "n_layer", "n_head", "n_positions", "n_ctx", "n_inner",
    "layer_norm_epsilon", "activation_function", "tie_word_embeddings", "initializer_range",
    "scale_attn_by_inverse_layer_idx",
};

/* GPT2Config fields that do not change fivefold's computation: dropout
 * (fivefold trains without it), the sequence-summary head, and attention
 * details that equal the default computation. */
static const char *const GPT2_IGNORED_FIELDS[] = {
    "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "scale_attn_weights", "reorder_and_upcast_attn",
    "task_specific_params", "n_special", "predict_special_tokens", "add_cross_attention",
};

/* Hugging Face bookkeeping fields that do not change the computation. */
static const char *const IGNORED_FIELDS[] = {
    "architectures",
    "torch_dtype",
    "dtype",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "transformers_version",
    "use_cache",
    "attention_dropout",
    "output_router_logits",
    "router_jitter_noise",
    "max_window_layers",
    "pretraining_tp",
    "_name_or_path",
    "tokenizer_class",
    "return_dict",
    "initializer_factor",
    "_attn_implementation",
};

static const char *const MODEL_TYPES[] = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "gpt2", "fivefold"};
static const char *const SCORE_NAMES[] = {"softmax", "sigmoid"};
static const char *const ORDER_NAMES[] = {"softmax_then_topk", "topk_then_softmax"};
static const char *const POLICY_NAMES[] = {"probs", "position"};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

void model_config_defaults(ModelConfig *cfg) {
  memset(cfg, 0, sizeof *cfg);
  strcpy(cfg->model_type, "fivefold");
  cfg->rope_theta = 10000.0f;
  cfg->rms_norm_eps = 1e-5f;
  cfg->max_position_embeddings = 2048;
  cfg->init_std = 0.02f;
  cfg->top_k = 2;
  cfg->router_score = ROUTER_SCORE_SOFTMAX;
  cfg->router_order = ROUTER_SOFTMAX_THEN_TOPK;
  cfg->norm_topk_prob = 1;
  cfg->topk_scaling_factor = 1.0f;
  cfg->drop_policy = DROP_POLICY_PROBS;
}

int model_config_head_dim(const ModelConfig *cfg) {
  if (cfg->head_dim > 0) return cfg->head_dim;
  return cfg->num_heads > 0 ? cfg->hidden_size / cfg->num_heads : 0;
}

int model_config_kv_heads(const ModelConfig *cfg) { return cfg->num_kv_heads > 0 ? cfg->num_kv_heads : cfg->num_heads; }

int model_config_num_moe_layers(const ModelConfig *cfg) {
  int n = 0;
  if (cfg->num_experts <= 0) return 0;
  for (int i = 0; i < cfg->num_layers && i < MODEL_MAX_LAYERS; i++) n += cfg->is_moe_layer[i] != 0;
  return n;
}

void model_config_set_moe_layer_freq(ModelConfig *cfg, int k) {
  for (int i = 0; i < MODEL_MAX_LAYERS; i++) cfg->is_moe_layer[i] = (k > 0 && i < cfg->num_layers && i % k == 0);
}

/* ---------------------------------------------------------------- parsing */

static int in_list(const char *s, const char *const *list, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(s, list[i]) == 0) return i;
  return -1;
}

static const char *nearest_field(const char *key) {
  const char *best = NULL;
  int best_d = INT_MAX;
  for (int pass = 0; pass < 2; pass++) {
    const char *const *list = pass ? IGNORED_FIELDS : PARSED_FIELDS;
    int n = pass ? COUNT(IGNORED_FIELDS) : COUNT(PARSED_FIELDS);
    for (int i = 0; i < n; i++) {
      int d = near_miss_distance(key, list[i]);
      if (d < best_d) best_d = d, best = list[i];
    }
  }
  int len = (int)strlen(key);
  int limit = len / 3 > 2 ? len / 3 : 2;
  return best_d <= limit ? best : NULL;
}

static void list_names(char *buf, size_t cap, const char *const *names, int n) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, "%s\"%s\"", i ? ", " : "", names[i]);
}

/* A field that is absent or null counts as absent everywhere. */
static const cJSON *field(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return (v && !cJSON_IsNull(v)) ? v : NULL;
}

static int get_int(const cJSON *obj, const char *origin, const char *key, long lo, long hi, int *out, Error *err) {
  const cJSON *v = field(obj, key);
  if (!v) return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
    return error_set(err, ERR_CONFIG, "%s: field \"%s\": expected an integer, got %s", origin, key, json_type_name(v));
  double d = v->valuedouble;
  if (d < (double)lo || d > (double)hi)
    return error_set(err, ERR_CONFIG, "%s: field \"%s\": %.17g is out of range, expected %ld..%ld", origin, key, d, lo,
                     hi);
  *out = (int)d;
  return 0;
}

/* lo_open: the bound itself is excluded. */
static int get_float(const cJSON *obj, const char *origin, const char *key, double lo, int lo_open, double hi,
                     float *out, Error *err) {
  const cJSON *v = field(obj, key);
  if (!v) return 0;
  if (!cJSON_IsNumber(v))
    return error_set(err, ERR_CONFIG, "%s: field \"%s\": expected a number, got %s", origin, key, json_type_name(v));
  double d = v->valuedouble;
  if (!isfinite(d) || d < lo || (lo_open && d == lo) || d > hi) {
    if (hi < FLT_MAX)
      return error_set(err, ERR_CONFIG, "%s: field \"%s\": %.9g is out of range, expected a value in %s%g, %g]", origin,
                       key, d, lo_open ? "(" : "[", lo, hi);
    return error_set(err, ERR_CONFIG, "%s: field \"%s\": %.9g is out of range, expected a value %s %g", origin, key, d,
                     lo_open ? ">" : ">=", lo);
  }
  *out = (float)d;
  return 0;
}

static int get_bool(const cJSON *obj, const char *origin, const char *key, int *out, Error *err) {
  const cJSON *v = field(obj, key);
  if (!v) return 0;
  if (!cJSON_IsBool(v))
    return error_set(err, ERR_CONFIG, "%s: field \"%s\": expected true or false, got %s", origin, key,
                     json_type_name(v));
  *out = cJSON_IsTrue(v) ? 1 : 0;
  return 0;
}

/* Returns the enum index through *out; unknown values list the valid ones. */
static int get_enum(const cJSON *obj, const char *origin, const char *key, const char *const *names, int n, int *out,
                    Error *err) {
  const cJSON *v = field(obj, key);
  if (!v) return 0;
  char valid[256];
  list_names(valid, sizeof valid, names, n);
  if (!cJSON_IsString(v))
    return error_set(err, ERR_CONFIG, "%s: field \"%s\": expected a string, one of %s; got %s", origin, key, valid,
                     json_type_name(v));
  int i = in_list(v->valuestring, names, n);
  if (i < 0)
    return error_set(err, ERR_CONFIG, "%s: field \"%s\": unknown value \"%s\"; valid values: %s", origin, key,
                     v->valuestring, valid);
  *out = i;
  return 0;
}

static int require_false(const cJSON *obj, const char *origin, const char *key, const char *why, Error *err) {
  int b = 0;
  if (get_bool(obj, origin, key, &b, err)) return err->code;
  if (b) return error_set(err, ERR_CONFIG, "%s: field \"%s\": must be false (%s)", origin, key, why);
  return 0;
}

static int check_bookkeeping(const cJSON *obj, const char *origin, Error *err) {
  const cJSON *v = field(obj, "hidden_act");
  if (v && (!cJSON_IsString(v) || strcmp(v->valuestring, "silu") != 0))
    return error_set(err, ERR_CONFIG, "%s: field \"hidden_act\": expected \"silu\" (fivefold's MLPs are SwiGLU)",
                     origin);
  if (require_false(obj, origin, "mlp_bias", "MLP projections have no bias", err)) return err->code;
  if (require_false(obj, origin, "use_sliding_window", "sliding-window attention is not implemented", err))
    return err->code;
  if (field(obj, "rope_scaling"))
    return error_set(err, ERR_CONFIG, "%s: field \"rope_scaling\": expected null (RoPE scaling is not supported)",
                     origin);
  v = field(obj, "layer_types");
  if (v) {
    const cJSON *e;
    if (!cJSON_IsArray(v))
      return error_set(err, ERR_CONFIG, "%s: field \"layer_types\": expected an array of strings", origin);
    cJSON_ArrayForEach(e, v) {
      if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention") != 0)
        return error_set(err, ERR_CONFIG,
                         "%s: field \"layer_types\": every entry must be \"full_attention\" "
                         "(sliding-window attention is not supported)",
                         origin);
    }
  }
  return 0;
}

/* A window at least as long as the longest sequence is full attention; a
 * shorter one is refused unless use_sliding_window false switches it off
 * (Qwen2 keeps a window value that is not used). */
static int check_sliding_window(const cJSON *obj, const char *origin, int max_positions, Error *err) {
  const cJSON *v = field(obj, "sliding_window");
  if (!v || cJSON_IsNull(v)) return 0;
  double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (!cJSON_IsNumber(v) || d != floor(d) || d < 1)
    return error_set(err, ERR_CONFIG, "%s: field \"sliding_window\": expected null or a positive integer, got %s",
                     origin, json_type_name(v));
  const cJSON *use = field(obj, "use_sliding_window");
  if (cJSON_IsFalse(use) || d >= max_positions) return 0;
  return error_set(err, ERR_CONFIG,
                   "%s: field \"sliding_window\": %.0f is smaller than max_position_embeddings %d, but "
                   "sliding-window attention is not implemented (expected null, a window >= %d, or "
                   "\"use_sliding_window\": false)",
                   origin, d, max_positions, max_positions);
}

static int check_known_fields(const cJSON *obj, const char *origin, Error *err) {
  const cJSON *item;
  cJSON_ArrayForEach(item, obj) {
    const char *key = item->string ? item->string : "";
    for (const cJSON *prev = obj->child; prev != item; prev = prev->next)
      if (prev->string && strcmp(prev->string, key) == 0)
        return error_set(err, ERR_CONFIG, "%s: field \"%s\" appears more than once", origin, key);
    if (in_list(key, PARSED_FIELDS, COUNT(PARSED_FIELDS)) >= 0) continue;
    if (in_list(key, IGNORED_FIELDS, COUNT(IGNORED_FIELDS)) >= 0) continue;
    const char *near = nearest_field(key);
    if (near) return error_set(err, ERR_CONFIG, "%s: unknown field \"%s\" (did you mean \"%s\"?)", origin, key, near);
    return error_set(err, ERR_CONFIG,
                     "%s: unknown field \"%s\"; fivefold accepts the Hugging Face fields of Llama, Mixtral and "
                     "Qwen2-MoE and its moe_* options (see src/model/config.h)",
                     origin, key);
  }
  return 0;
}

/* moe_layer_pattern: [0/1 or false/true] of length num_layers. */
static int parse_layer_pattern(ModelConfig *cfg, const cJSON *v, const char *origin, Error *err) {
  if (!cJSON_IsArray(v))
    return error_set(err, ERR_CONFIG, "%s: field \"moe_layer_pattern\": expected an array of 0/1, got %s", origin,
                     json_type_name(v));
  int n = cJSON_GetArraySize(v);
  if (n != cfg->num_layers)
    return error_set(err, ERR_CONFIG,
                     "%s: field \"moe_layer_pattern\": has %d entries, expected one per layer "
                     "(num_hidden_layers = %d)",
                     origin, n, cfg->num_layers);
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, v) {
    if (cJSON_IsBool(e))
      cfg->is_moe_layer[i] = cJSON_IsTrue(e) ? 1 : 0;
    else if (cJSON_IsNumber(e) && (e->valuedouble == 0.0 || e->valuedouble == 1.0))
      cfg->is_moe_layer[i] = (unsigned char)e->valuedouble;
    else
      return error_set(err, ERR_CONFIG, "%s: field \"moe_layer_pattern\": entry %d: expected 0 or 1", origin, i);
    i++;
  }
  return 0;
}

static int parse_mlp_only_layers(const cJSON *v, const char *origin, int num_layers, unsigned char *only, Error *err) {
  if (!cJSON_IsArray(v))
    return error_set(err, ERR_CONFIG, "%s: field \"mlp_only_layers\": expected an array of layer indices, got %s",
                     origin, json_type_name(v));
  const cJSON *e;
  cJSON_ArrayForEach(e, v) {
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
        e->valuedouble >= num_layers)
      return error_set(err, ERR_CONFIG, "%s: field \"mlp_only_layers\": entries must be layer indices in 0..%d", origin,
                       num_layers - 1);
    only[(int)e->valuedouble] = 1;
  }
  return 0;
}

static int require(const cJSON *obj, const char *origin, const char *key, Error *err) {
  if (!field(obj, key)) return error_set(err, ERR_CONFIG, "%s: missing required field \"%s\"", origin, key);
  return 0;
}

#define TRY(x)                                         \
  do {                                                 \
    if ((x) != 0) return err ? err->code : ERR_CONFIG; \
  } while (0)

/* GPT2Config: its own field names, mapped onto ModelConfig. */
static int parse_gpt2(ModelConfig *cfg, const cJSON *obj, const char *origin, Error *err) {
  const cJSON *item;
  cJSON_ArrayForEach(item, obj) {
    const char *key = item->string ? item->string : "";
    if (in_list(key, GPT2_FIELDS, COUNT(GPT2_FIELDS)) >= 0) continue;
    if (in_list(key, GPT2_IGNORED_FIELDS, COUNT(GPT2_IGNORED_FIELDS)) >= 0) continue;
    if (in_list(key, IGNORED_FIELDS, COUNT(IGNORED_FIELDS)) >= 0) continue;
    return error_set(err, ERR_CONFIG,
                     "%s: unknown field \"%s\" for model_type \"gpt2\"; expected the GPT2Config fields (n_embd, "
                     "n_layer, n_head, n_positions, n_inner, layer_norm_epsilon, activation_function, vocab_size, "
                     "tie_word_embeddings, initializer_range; see src/model/config.h)",
                     origin, key);
  }
  for (const cJSON *prev = obj->child; prev; prev = prev->next)
    for (const cJSON *next = prev->next; next; next = next->next)
      if (prev->string && next->string && strcmp(prev->string, next->string) == 0)
        return error_set(err, ERR_CONFIG, "%s: field \"%s\" appears more than once", origin, prev->string);
  cfg->gpt2 = 1;
  cfg->qkv_bias = 1;
  cfg->o_bias = 1;
  cfg->tie_word_embeddings = 1;
  cfg->max_position_embeddings = 1024;
  TRY(require(obj, origin, "vocab_size", err));
  TRY(require(obj, origin, "n_embd", err));
  TRY(require(obj, origin, "n_layer", err));
  TRY(require(obj, origin, "n_head", err));
  TRY(get_int(obj, origin, "vocab_size", 1, 1L << 30, &cfg->vocab_size, err));
  TRY(get_int(obj, origin, "n_embd", 1, 1L << 20, &cfg->hidden_size, err));
  TRY(get_int(obj, origin, "n_layer", 1, MODEL_MAX_LAYERS, &cfg->num_layers, err));
  TRY(get_int(obj, origin, "n_head", 1, 1L << 16, &cfg->num_heads, err));
  if (cfg->hidden_size % cfg->num_heads)
    return error_set(err, ERR_CONFIG, "%s: field \"n_embd\" (%d) must be divisible by \"n_head\" (%d)", origin,
                     cfg->hidden_size, cfg->num_heads);
  cfg->num_kv_heads = cfg->num_heads;
  cfg->head_dim = cfg->hidden_size / cfg->num_heads;
  TRY(get_int(obj, origin, "n_positions", 1, INT_MAX, &cfg->max_position_embeddings, err));
  int n_ctx = cfg->max_position_embeddings;
  TRY(get_int(obj, origin, "n_ctx", 1, INT_MAX, &n_ctx, err));
  if (n_ctx != cfg->max_position_embeddings)
    return error_set(err, ERR_CONFIG, "%s: field \"n_ctx\" (%d) must equal \"n_positions\" (%d)", origin, n_ctx,
                     cfg->max_position_embeddings);
  cfg->intermediate_size = 4 * cfg->hidden_size;
  TRY(get_int(obj, origin, "n_inner", 1, 1L << 24, &cfg->intermediate_size, err));
  TRY(get_float(obj, origin, "layer_norm_epsilon", 0.0, 1, 1.0, &cfg->rms_norm_eps, err));
  TRY(get_bool(obj, origin, "tie_word_embeddings", &cfg->tie_word_embeddings, err));
  TRY(get_float(obj, origin, "initializer_range", 0.0, 1, 1e3, &cfg->init_std, err));
  TRY(require_false(obj, origin, "scale_attn_by_inverse_layer_idx",
                    "attention scores are scaled by 1/sqrt(head_dim) only", err));
  const cJSON *act = field(obj, "activation_function");
  if (act && (!cJSON_IsString(act) ||
              (strcmp(act->valuestring, "gelu_new") != 0 && strcmp(act->valuestring, "gelu_pytorch_tanh") != 0)))
    return error_set(err, ERR_CONFIG,
                     "%s: field \"activation_function\": expected \"gelu_new\" or \"gelu_pytorch_tanh\" (GeLU with "
                     "the tanh approximation)",
                     origin);
  return model_config_validate(cfg, origin, err);
}

static int is_gpt2_type(const cJSON *obj) {
  const cJSON *v = field(obj, "model_type");
  return v && cJSON_IsString(v) && strcmp(v->valuestring, "gpt2") == 0;
}

int model_config_from_json(ModelConfig *cfg, const cJSON *obj, const char *origin, Error *err) {
  Error local;
  if (!err) err = &local;
  if (!origin) origin = "<config>";
  model_config_defaults(cfg);
  if (!cJSON_IsObject(obj)) return error_set(err, ERR_CONFIG, "%s: expected a JSON object", origin);
  if (is_gpt2_type(obj)) {
    snprintf(cfg->model_type, sizeof cfg->model_type, "gpt2");
    return parse_gpt2(cfg, obj, origin, err);
  }
  TRY(check_known_fields(obj, origin, err));
  TRY(check_bookkeeping(obj, origin, err));

  int type = COUNT(MODEL_TYPES) - 1;
  TRY(get_enum(obj, origin, "model_type", MODEL_TYPES, COUNT(MODEL_TYPES), &type, err));
  snprintf(cfg->model_type, sizeof cfg->model_type, "%s", MODEL_TYPES[type]);
  int is_qwen2_moe = strcmp(cfg->model_type, "qwen2_moe") == 0;
  /* Defaults of the HF config classes, for files that leave them out. */
  if (strcmp(cfg->model_type, "llama") == 0 || strncmp(cfg->model_type, "qwen2", 5) == 0) cfg->rms_norm_eps = 1e-6f;
  if (strcmp(cfg->model_type, "mixtral") == 0 || is_qwen2_moe) cfg->rope_theta = 1e6f;

  TRY(require(obj, origin, "vocab_size", err));
  TRY(require(obj, origin, "hidden_size", err));
  TRY(require(obj, origin, "num_hidden_layers", err));
  TRY(require(obj, origin, "num_attention_heads", err));
  TRY(get_int(obj, origin, "vocab_size", 1, 1L << 30, &cfg->vocab_size, err));
  TRY(get_int(obj, origin, "hidden_size", 1, 1L << 20, &cfg->hidden_size, err));
  TRY(get_int(obj, origin, "num_hidden_layers", 1, MODEL_MAX_LAYERS, &cfg->num_layers, err));
  TRY(get_int(obj, origin, "num_attention_heads", 1, 1L << 16, &cfg->num_heads, err));
  cfg->num_kv_heads = cfg->num_heads;
  TRY(get_int(obj, origin, "num_key_value_heads", 1, 1L << 16, &cfg->num_kv_heads, err));
  if (field(obj, "head_dim")) {
    TRY(get_int(obj, origin, "head_dim", 1, 1L << 16, &cfg->head_dim, err));
  } else {
    if (cfg->hidden_size % cfg->num_heads != 0)
      return error_set(err, ERR_CONFIG,
                       "%s: field \"hidden_size\" (%d) must be divisible by \"num_attention_heads\" (%d) "
                       "when \"head_dim\" is not given",
                       origin, cfg->hidden_size, cfg->num_heads);
    cfg->head_dim = cfg->hidden_size / cfg->num_heads;
  }
  TRY(get_int(obj, origin, "intermediate_size", 1, 1L << 24, &cfg->intermediate_size, err));
  TRY(get_float(obj, origin, "rope_theta", 0.0, 1, FLT_MAX, &cfg->rope_theta, err));
  TRY(get_float(obj, origin, "rms_norm_eps", 0.0, 1, 1.0, &cfg->rms_norm_eps, err));
  TRY(get_bool(obj, origin, "tie_word_embeddings", &cfg->tie_word_embeddings, err));
  TRY(get_bool(obj, origin, "qkv_bias", &cfg->qkv_bias, err));
  TRY(get_bool(obj, origin, "attention_bias", &cfg->o_bias, err));
  if (cfg->o_bias) cfg->qkv_bias = 1; /* Llama's attention_bias: q, k, v and o */
  TRY(get_int(obj, origin, "max_position_embeddings", 1, INT_MAX, &cfg->max_position_embeddings, err));
  TRY(check_sliding_window(obj, origin, cfg->max_position_embeddings, err));
  TRY(get_float(obj, origin, "initializer_range", 0.0, 1, 1e3, &cfg->init_std, err));

  /* MoE sizes */
  int local_experts = -1, experts = -1;
  TRY(get_int(obj, origin, "num_local_experts", 0, 1L << 16, &local_experts, err));
  TRY(get_int(obj, origin, "num_experts", 0, 1L << 16, &experts, err));
  if (local_experts >= 0 && experts >= 0 && local_experts != experts)
    return error_set(err, ERR_CONFIG,
                     "%s: fields \"num_local_experts\" (%d) and \"num_experts\" (%d) disagree; give one of them",
                     origin, local_experts, experts);
  cfg->num_experts = experts >= 0 ? experts : (local_experts >= 0 ? local_experts : 0);
  TRY(get_int(obj, origin, "num_experts_per_tok", 1, 1L << 16, &cfg->top_k, err));
  /* 0 is allowed (and written by the canonical form) for dense models. */
  cfg->moe_intermediate_size = cfg->intermediate_size;
  TRY(get_int(obj, origin, "moe_intermediate_size", 0, 1L << 24, &cfg->moe_intermediate_size, err));
  TRY(get_int(obj, origin, "shared_expert_intermediate_size", 0, 1L << 24, &cfg->shared_expert_intermediate_size, err));
  if (is_qwen2_moe) cfg->norm_topk_prob = 0;
  TRY(get_bool(obj, origin, "norm_topk_prob", &cfg->norm_topk_prob, err));
  /* Mixtral renormalises the kept probabilities: the default already does. */

  int score = 0, order = 0, policy = 0;
  TRY(get_enum(obj, origin, "moe_router_score_function", SCORE_NAMES, COUNT(SCORE_NAMES), &score, err));
  TRY(get_enum(obj, origin, "moe_router_order", ORDER_NAMES, COUNT(ORDER_NAMES), &order, err));
  TRY(get_enum(obj, origin, "moe_token_drop_policy", POLICY_NAMES, COUNT(POLICY_NAMES), &policy, err));
  cfg->router_score = (RouterScore)score;
  cfg->router_order = (RouterOrder)order;
  cfg->drop_policy = (DropPolicy)policy;
  TRY(get_float(obj, origin, "moe_router_topk_scaling_factor", 0.0, 1, FLT_MAX, &cfg->topk_scaling_factor, err));
  float hf_aux = -1.0f, ff_aux = -1.0f;
  TRY(get_float(obj, origin, "router_aux_loss_coef", 0.0, 0, FLT_MAX, &hf_aux, err));
  TRY(get_float(obj, origin, "moe_aux_loss_coeff", 0.0, 0, FLT_MAX, &ff_aux, err));
  if (hf_aux >= 0 && ff_aux >= 0 && hf_aux != ff_aux)
    return error_set(err, ERR_CONFIG,
                     "%s: fields \"router_aux_loss_coef\" (%g) and \"moe_aux_loss_coeff\" (%g) disagree; give one "
                     "of them",
                     origin, hf_aux, ff_aux);
  cfg->aux_loss_coeff = ff_aux >= 0 ? ff_aux : (hf_aux >= 0 ? hf_aux : 0.0f);
  TRY(get_float(obj, origin, "moe_z_loss_coeff", 0.0, 0, FLT_MAX, &cfg->z_loss_coeff, err));
  cfg->capacity_factor = 0.0f;
  const cJSON *cf = field(obj, "moe_expert_capacity_factor");
  if (cf && cJSON_IsNumber(cf) && !(cf->valuedouble > 0))
    return error_set(err, ERR_CONFIG,
                     "%s: field \"moe_expert_capacity_factor\": %g is out of range, expected a value > 0 "
                     "(null or absent for dropless routing)",
                     origin, cf->valuedouble);
  TRY(get_float(obj, origin, "moe_expert_capacity_factor", 0.0, 1, FLT_MAX, &cfg->capacity_factor, err));
  TRY(get_bool(obj, origin, "moe_pad_expert_input_to_capacity", &cfg->pad_to_capacity, err));

  /* Which layers are MoE */
  const cJSON *pattern = field(obj, "moe_layer_pattern");
  int freq = 0, sparse_step = 1;
  TRY(get_int(obj, origin, "moe_layer_freq", 1, MODEL_MAX_LAYERS, &freq, err));
  TRY(get_int(obj, origin, "decoder_sparse_step", 1, MODEL_MAX_LAYERS, &sparse_step, err));
  unsigned char mlp_only[MODEL_MAX_LAYERS] = {0};
  const cJSON *only = field(obj, "mlp_only_layers");
  if (only) TRY(parse_mlp_only_layers(only, origin, cfg->num_layers, mlp_only, err));
  if (pattern) {
    TRY(parse_layer_pattern(cfg, pattern, origin, err));
    if (cfg->num_experts == 0) {
      for (int i = 0; i < cfg->num_layers; i++)
        if (cfg->is_moe_layer[i])
          return error_set(err, ERR_CONFIG,
                           "%s: field \"moe_layer_pattern\" marks layer %d as MoE but the model has no experts "
                           "(set \"num_experts\")",
                           origin, i);
    }
  } else if (freq > 0 && cfg->num_experts == 0) {
    return error_set(err, ERR_CONFIG,
                     "%s: field \"moe_layer_freq\" is given but the model has no experts (set "
                     "\"num_experts\")",
                     origin);
  } else if (cfg->num_experts > 0) {
    for (int i = 0; i < cfg->num_layers; i++) {
      if (freq > 0)
        cfg->is_moe_layer[i] = (i % freq == 0);
      else
        cfg->is_moe_layer[i] = !mlp_only[i] && ((i + 1) % sparse_step == 0);
    }
  }

  if (cfg->num_experts > 0) {
    if (!field(obj, "moe_intermediate_size") && !field(obj, "intermediate_size"))
      return error_set(err, ERR_CONFIG,
                       "%s: missing required field \"moe_intermediate_size\" (or \"intermediate_size\")", origin);
    if (cfg->top_k > cfg->num_experts)
      return error_set(err, ERR_CONFIG,
                       "%s: field \"num_experts_per_tok\" (%d) must not exceed the number of experts (%d)", origin,
                       cfg->top_k, cfg->num_experts);
  }
  int dense_layers = cfg->num_layers - model_config_num_moe_layers(cfg);
  if (dense_layers > 0 && !field(obj, "intermediate_size"))
    return error_set(err, ERR_CONFIG, "%s: missing required field \"intermediate_size\" (%d dense layers)", origin,
                     dense_layers);
  return model_config_validate(cfg, origin, err);
}

#define MODEL_CONFIG_MAX_BYTES (16 << 20)

int model_config_load(ModelConfig *cfg, const char *path, Error *err) {
  char *text = NULL;
  size_t len = 0;
  int read_rc = file_read_text(path, "model config", MODEL_CONFIG_MAX_BYTES, &text, &len, err);
  if (read_rc) return read_rc;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    int line = 1, col = 1;
    for (const char *p = text; end && p < end && *p; p++) {
      if (*p == '\n')
        line++, col = 1;
      else
        col++;
    }
    free(text);
    return error_set(err, ERR_FORMAT, "%s: invalid JSON near line %d, column %d", path, line, col);
  }
  free(text);
  int rc = model_config_from_json(cfg, root, path, err);
  cJSON_Delete(root);
  return rc;
}

/* ------------------------------------------------------------- validation */

int model_config_validate(const ModelConfig *cfg, const char *origin, Error *err) {
  if (!origin) origin = "<config>";
#define FAIL(...) return error_set(err, ERR_CONFIG, __VA_ARGS__)
  if (cfg->vocab_size < 1) FAIL("%s: vocab_size must be positive (got %d)", origin, cfg->vocab_size);
  if (cfg->hidden_size < 1) FAIL("%s: hidden_size must be positive (got %d)", origin, cfg->hidden_size);
  if (cfg->num_layers < 1 || cfg->num_layers > MODEL_MAX_LAYERS)
    FAIL("%s: num_hidden_layers must be in 1..%d (got %d)", origin, MODEL_MAX_LAYERS, cfg->num_layers);
  if (cfg->num_heads < 1) FAIL("%s: num_attention_heads must be positive (got %d)", origin, cfg->num_heads);
  int kv = model_config_kv_heads(cfg);
  if (kv < 1 || cfg->num_heads % kv != 0)
    FAIL("%s: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", origin, cfg->num_heads, kv);
  if (cfg->head_dim <= 0 && cfg->hidden_size % cfg->num_heads != 0)
    FAIL("%s: hidden_size (%d) must be divisible by num_attention_heads (%d) unless head_dim is given", origin,
         cfg->hidden_size, cfg->num_heads);
  int D = model_config_head_dim(cfg);
  if (!cfg->gpt2 && (D < 2 || D % 2 != 0)) FAIL("%s: head_dim must be even for RoPE (got %d)", origin, D);
  if (cfg->gpt2 && cfg->num_experts > 0) FAIL("%s: the GPT-2 family is dense here (num_experts must be 0)", origin);
  if (cfg->gpt2 && kv != cfg->num_heads)
    FAIL("%s: GPT-2 has one key/value head per query head (num_key_value_heads %d != %d)", origin, kv, cfg->num_heads);
  if (!(cfg->rope_theta > 0)) FAIL("%s: rope_theta must be positive (got %g)", origin, cfg->rope_theta);
  if (!(cfg->rms_norm_eps > 0)) FAIL("%s: rms_norm_eps must be positive (got %g)", origin, cfg->rms_norm_eps);
  if (!(cfg->init_std >= 0)) FAIL("%s: initializer_range must be >= 0 (got %g)", origin, cfg->init_std);
  if (cfg->max_position_embeddings < 1)
    FAIL("%s: max_position_embeddings must be positive (got %d)", origin, cfg->max_position_embeddings);
  int moe_layers = model_config_num_moe_layers(cfg);
  if (cfg->num_layers - moe_layers > 0 && cfg->intermediate_size < 1)
    FAIL("%s: intermediate_size must be positive: the model has dense layers", origin);
  if (cfg->num_experts < 0) FAIL("%s: num_experts must be >= 0 (got %d)", origin, cfg->num_experts);
  if (cfg->num_experts == 0) {
    for (int i = 0; i < cfg->num_layers; i++)
      if (cfg->is_moe_layer[i]) FAIL("%s: layer %d is marked MoE but num_experts is 0", origin, i);
    return 0;
  }
  if (moe_layers == 0)
    FAIL("%s: num_experts is %d but no layer is MoE (check moe_layer_pattern / moe_layer_freq)", origin,
         cfg->num_experts);
  if (cfg->top_k < 1 || cfg->top_k > cfg->num_experts)
    FAIL("%s: num_experts_per_tok must be in 1..num_experts (%d), got %d", origin, cfg->num_experts, cfg->top_k);
  if (cfg->moe_intermediate_size < 1)
    FAIL("%s: moe_intermediate_size must be positive (got %d)", origin, cfg->moe_intermediate_size);
  if (cfg->shared_expert_intermediate_size < 0)
    FAIL("%s: shared_expert_intermediate_size must be >= 0 (got %d)", origin, cfg->shared_expert_intermediate_size);
  if ((unsigned)cfg->router_score > ROUTER_SCORE_SIGMOID) FAIL("%s: moe_router_score_function is invalid", origin);
  if ((unsigned)cfg->router_order > ROUTER_TOPK_THEN_SOFTMAX) FAIL("%s: moe_router_order is invalid", origin);
  if ((unsigned)cfg->drop_policy > DROP_POLICY_POSITION) FAIL("%s: moe_token_drop_policy is invalid", origin);
  if (!(cfg->topk_scaling_factor > 0))
    FAIL("%s: moe_router_topk_scaling_factor must be positive (got %g)", origin, cfg->topk_scaling_factor);
  if (!(cfg->aux_loss_coeff >= 0) || !(cfg->z_loss_coeff >= 0))
    FAIL("%s: moe_aux_loss_coeff and moe_z_loss_coeff must be >= 0", origin);
  if (cfg->pad_to_capacity && !(cfg->capacity_factor > 0))
    FAIL(
        "%s: moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor (dropless routing has no "
        "capacity)",
        origin);
  return 0;
#undef FAIL
}

/* --------------------------------------------------------- canonical form */

cJSON *model_config_to_json(const ModelConfig *cfg) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  if (cfg->gpt2) {
    cJSON_AddStringToObject(o, "model_type", "gpt2");
    cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size);
    cJSON_AddNumberToObject(o, "n_embd", cfg->hidden_size);
    cJSON_AddNumberToObject(o, "n_layer", cfg->num_layers);
    cJSON_AddNumberToObject(o, "n_head", cfg->num_heads);
    cJSON_AddNumberToObject(o, "n_positions", cfg->max_position_embeddings);
    cJSON_AddNumberToObject(o, "n_inner", cfg->intermediate_size);
    cJSON_AddNumberToObject(o, "layer_norm_epsilon", cfg->rms_norm_eps);
    cJSON_AddStringToObject(o, "activation_function", "gelu_new");
    cJSON_AddBoolToObject(o, "tie_word_embeddings", cfg->tie_word_embeddings != 0);
    cJSON_AddNumberToObject(o, "initializer_range", cfg->init_std);
    return o;
  }
  cJSON_AddStringToObject(o, "model_type", cfg->model_type);
  cJSON_AddNumberToObject(o, "vocab_size", cfg->vocab_size);
  cJSON_AddNumberToObject(o, "hidden_size", cfg->hidden_size);
  cJSON_AddNumberToObject(o, "num_hidden_layers", cfg->num_layers);
  cJSON_AddNumberToObject(o, "num_attention_heads", cfg->num_heads);
  cJSON_AddNumberToObject(o, "num_key_value_heads", model_config_kv_heads(cfg));
  cJSON_AddNumberToObject(o, "head_dim", model_config_head_dim(cfg));
  if (cfg->intermediate_size > 0) cJSON_AddNumberToObject(o, "intermediate_size", cfg->intermediate_size);
  cJSON_AddNumberToObject(o, "rope_theta", cfg->rope_theta);
  cJSON_AddNumberToObject(o, "rms_norm_eps", cfg->rms_norm_eps);
  cJSON_AddBoolToObject(o, "tie_word_embeddings", cfg->tie_word_embeddings != 0);
  /* Written only when set, so that configs without biases keep their form. */
  if (cfg->o_bias) cJSON_AddBoolToObject(o, "attention_bias", 1);
  else if (cfg->qkv_bias) cJSON_AddBoolToObject(o, "qkv_bias", 1);
  cJSON_AddNumberToObject(o, "max_position_embeddings", cfg->max_position_embeddings);
  cJSON_AddNumberToObject(o, "initializer_range", cfg->init_std);
  /* MoE fields are written for dense models too, so every field round-trips. */
  cJSON_AddNumberToObject(o, "num_experts", cfg->num_experts);
  {
    cJSON_AddNumberToObject(o, "num_experts_per_tok", cfg->top_k);
    cJSON_AddNumberToObject(o, "moe_intermediate_size", cfg->moe_intermediate_size);
    cJSON_AddNumberToObject(o, "shared_expert_intermediate_size", cfg->shared_expert_intermediate_size);
    cJSON_AddBoolToObject(o, "norm_topk_prob", cfg->norm_topk_prob != 0);
    cJSON_AddStringToObject(o, "moe_router_score_function", SCORE_NAMES[cfg->router_score]);
    cJSON_AddStringToObject(o, "moe_router_order", ORDER_NAMES[cfg->router_order]);
    cJSON_AddNumberToObject(o, "moe_router_topk_scaling_factor", cfg->topk_scaling_factor);
    cJSON_AddNumberToObject(o, "moe_aux_loss_coeff", cfg->aux_loss_coeff);
    cJSON_AddNumberToObject(o, "moe_z_loss_coeff", cfg->z_loss_coeff);
    if (cfg->capacity_factor > 0)
      cJSON_AddNumberToObject(o, "moe_expert_capacity_factor", cfg->capacity_factor);
    else
      cJSON_AddNullToObject(o, "moe_expert_capacity_factor");
    cJSON_AddStringToObject(o, "moe_token_drop_policy", POLICY_NAMES[cfg->drop_policy]);
    cJSON_AddBoolToObject(o, "moe_pad_expert_input_to_capacity", cfg->pad_to_capacity != 0);
    cJSON *pattern = cJSON_AddArrayToObject(o, "moe_layer_pattern");
    for (int i = 0; pattern && i < cfg->num_layers; i++)
      cJSON_AddItemToArray(pattern, cJSON_CreateNumber(cfg->is_moe_layer[i] ? 1 : 0));
  }
  return o;
}
