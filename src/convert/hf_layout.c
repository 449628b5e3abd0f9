/* The fivefold <-> Hugging Face tensor table of hf_layout.h: which family a
 * model is written as (and why not, when none fits), the pieces of every
 * family, and the copy / transpose of one piece.
 *
 * Qwen2-MoE gates its shared expert with sigmoid(shared_expert_gate . x);
 * fivefold's shared expert is ungated. A zero gate gives the factor 1/2
 * exactly, so export writes a zero gate and the shared down projection
 * times 2, and import requires a zero gate and halves it: powers of two,
 * so both directions are exact. */
#include "convert/hf_layout.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ARCHITECTURES[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "MixtralForCausalLM",
                                            "Qwen2MoeForCausalLM", "GPT2LMHeadModel"};
static const char *const MODEL_TYPES[] = {"llama", "qwen2", "mixtral", "qwen2_moe", "gpt2"};

const char *hf_family_architecture(HfFamily f) { return ARCHITECTURES[f]; }
const char *hf_family_model_type(HfFamily f) { return MODEL_TYPES[f]; }

/* ---- which family ---- */

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

/* What neither routed family expresses: the router's arithmetic. */
static void router_reasons(const ModelConfig *cfg, Reasons *r, int renorm_required, const char *family) {
  if (cfg->router_score != ROUTER_SCORE_SOFTMAX)
    add_reason(r, "sigmoid router scores (moe_router_score_function; %s routes with a softmax)", family);
  else if (renorm_required && cfg->router_order == ROUTER_SOFTMAX_THEN_TOPK && !cfg->norm_topk_prob)
    add_reason(r, "top-k routing weights that are not renormalised (norm_topk_prob false; %s renormalises)", family);
  if (cfg->capacity_factor > 0)
    add_reason(r, "an expert capacity factor of %g (token dropping; %s is dropless)", (double)cfg->capacity_factor,
               family);
  if (cfg->topk_scaling_factor != 1.0f)
    add_reason(r, "routing weights scaled by %g (moe_router_topk_scaling_factor; %s uses 1)",
               (double)cfg->topk_scaling_factor, family);
}

static int mixtral_check(const ModelConfig *cfg, int n_moe, Error *err) {
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
  router_reasons(cfg, &r, 1, "Mixtral");
  if (cfg->shared_expert_intermediate_size > 0)
    add_reason(&r, "a shared expert (shared_expert_intermediate_size %d; Mixtral has none)",
               cfg->shared_expert_intermediate_size);
  if (cfg->o_bias) add_reason(&r, "attention biases (Mixtral has none)");
  if (!r.n) return 0;
  return error_set(err, ERR_CONFIG,
                   "this MoE model cannot be represented as a Hugging Face Mixtral model "
                   "(MixtralForCausalLM): it has %s. See docs/export.md",
                   r.buf);
}

int hf_family_for_model(const ModelConfig *cfg, HfFamily *family, Error *err) {
  if (cfg->gpt2) {
    *family = HF_GPT2;
    return 0;
  }
  const int n_moe = model_config_num_moe_layers(cfg);
  if (n_moe == 0) {
    /* Llama's attention_bias is q, k, v and o; Qwen2 has q, k, v only. */
    *family = cfg->qkv_bias && !cfg->o_bias ? HF_QWEN2 : HF_LLAMA;
    return 0;
  }
  if (!cfg->qkv_bias || cfg->o_bias) {
    *family = HF_MIXTRAL;
    return mixtral_check(cfg, n_moe, err);
  }
  *family = HF_QWEN2_MOE;
  Reasons r = {.used = 0, .n = 0};
  router_reasons(cfg, &r, 0, "Qwen2-MoE");
  if (!r.n) return 0;
  return error_set(err, ERR_CONFIG,
                   "this MoE model (with q/k/v biases) cannot be represented as a Hugging Face Qwen2-MoE model "
                   "(Qwen2MoeForCausalLM): it has %s. See docs/export.md",
                   r.buf);
}

/* ---- the table ---- */

typedef struct Builder {
  HfLayout *lay;
  Error *err;
  int rc;
} Builder;

/* A new zeroed entry of *v naming the HF tensor hf0 x hf1 (hf1 0: a
 * vector of hf0); NULL once building has failed. */
static HfPiece *push(Builder *b, HfPiece **v, int *n, int *cap, const char *hf, int64_t hf0, int64_t hf1) {
  if (b->rc) return NULL;
  if (*n == *cap) {
    int ncap = *cap ? 2 * *cap : 64;
    HfPiece *nv = realloc(*v, (size_t)ncap * sizeof *nv);
    if (!nv) {
      b->rc = error_set(b->err, ERR_NOMEM, "out of memory building the Hugging Face tensor table");
      return NULL;
    }
    *v = nv;
    *cap = ncap;
  }
  HfPiece *p = &(*v)[(*n)++];
  memset(p, 0, sizeof *p);
  snprintf(p->hf, sizeof p->hf, "%s", hf);
  p->hf_ndim = hf1 > 0 ? 2 : 1;
  p->hf_shape[0] = hf0;
  p->hf_shape[1] = hf1;
  return p;
}

/* A piece copied element for element: ours [rows, cols] at `off` is HF
 * elements [first, first + rows*cols) of the HF tensor hf0 x hf1. */
static void piece(Builder *b, const char *hf, int64_t hf0, int64_t hf1, const char *ours, size_t off, int rows,
                  int cols, uint64_t first, float scale) {
  HfPiece *p = push(b, &b->lay->pieces, &b->lay->n, &b->lay->cap, hf, hf0, hf1);
  if (!p) return;
  snprintf(p->ours, sizeof p->ours, "%s", ours);
  p->ours_offset = off;
  p->rows = rows;
  p->cols = cols;
  p->hf_first = first;
  p->scale = scale;
}

/* Ours [out, in] is columns [col0, col0 + out) of the HF tensor [in, width]. */
static void transposed(Builder *b, const char *hf, int in, int width, const char *ours, int out, int col0) {
  piece(b, hf, in, width, ours, 0, out, in, 0, 1.0f);
  if (!b->rc) {
    HfPiece *p = &b->lay->pieces[b->lay->n - 1];
    p->transposed = 1;
    p->hf_col0 = col0;
  }
}

static void zero_tensor(Builder *b, const char *hf, int64_t hf0, int64_t hf1) {
  HfPiece *p = push(b, &b->lay->zeros, &b->lay->n_zeros, &b->lay->cap_zeros, hf, hf0, hf1);
  if (!p) return;
  p->rows = (int)hf0;
  p->cols = (int)hf1;
}

#define NAME(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), buf)

static void gpt2_layer(Builder *b, const ModelConfig *c, const char *pre, int i) {
  const int C = c->hidden_size, F = c->intermediate_size;
  char hf[SAFETENSORS_MAX_NAME], o[96];
  static const char *const norms[2][2] = {{"ln_1", "attn_norm"}, {"ln_2", "mlp_norm"}};
  for (int k = 0; k < 2; k++) {
    piece(b, NAME(hf, "%sh.%d.%s.weight", pre, i, norms[k][0]), C, 0, NAME(o, "layers.%d.%s.weight", i, norms[k][1]),
          0, C, 0, 0, 1.0f);
    piece(b, NAME(hf, "%sh.%d.%s.bias", pre, i, norms[k][0]), C, 0, NAME(o, "layers.%d.%s.bias", i, norms[k][1]), 0,
          C, 0, 0, 1.0f);
  }
  static const char *const qkv[3][2] = {{"wq", "bq"}, {"wk", "bk"}, {"wv", "bv"}};
  for (int k = 0; k < 3; k++)
    transposed(b, NAME(hf, "%sh.%d.attn.c_attn.weight", pre, i), C, 3 * C, NAME(o, "layers.%d.attn.%s", i, qkv[k][0]),
               C, k * C);
  for (int k = 0; k < 3; k++)
    piece(b, NAME(hf, "%sh.%d.attn.c_attn.bias", pre, i), 3 * C, 0, NAME(o, "layers.%d.attn.%s", i, qkv[k][1]), 0, C,
          0, (uint64_t)k * C, 1.0f);
  transposed(b, NAME(hf, "%sh.%d.attn.c_proj.weight", pre, i), C, C, NAME(o, "layers.%d.attn.wo", i), C, 0);
  piece(b, NAME(hf, "%sh.%d.attn.c_proj.bias", pre, i), C, 0, NAME(o, "layers.%d.attn.bo", i), 0, C, 0, 0, 1.0f);
  transposed(b, NAME(hf, "%sh.%d.mlp.c_fc.weight", pre, i), C, F, NAME(o, "layers.%d.mlp.w_fc", i), F, 0);
  piece(b, NAME(hf, "%sh.%d.mlp.c_fc.bias", pre, i), F, 0, NAME(o, "layers.%d.mlp.b_fc", i), 0, F, 0, 0, 1.0f);
  transposed(b, NAME(hf, "%sh.%d.mlp.c_proj.weight", pre, i), F, C, NAME(o, "layers.%d.mlp.w_proj", i), C, 0);
  piece(b, NAME(hf, "%sh.%d.mlp.c_proj.bias", pre, i), C, 0, NAME(o, "layers.%d.mlp.b_proj", i), 0, C, 0, 0, 1.0f);
}

static void gpt2_table(Builder *b, const ModelConfig *c, const char *pre) {
  const int C = c->hidden_size;
  char hf[SAFETENSORS_MAX_NAME];
  piece(b, NAME(hf, "%swte.weight", pre), c->vocab_size, C, "embed.weight", 0, c->vocab_size, C, 0, 1.0f);
  piece(b, NAME(hf, "%swpe.weight", pre), c->max_position_embeddings, C, "pos_embed.weight", 0,
        c->max_position_embeddings, C, 0, 1.0f);
  for (int i = 0; i < c->num_layers && !b->rc; i++) gpt2_layer(b, c, pre, i);
  piece(b, NAME(hf, "%sln_f.weight", pre), C, 0, "final_norm.weight", 0, C, 0, 0, 1.0f);
  piece(b, NAME(hf, "%sln_f.bias", pre), C, 0, "final_norm.bias", 0, C, 0, 0, 1.0f);
  if (!c->tie_word_embeddings)
    piece(b, "lm_head.weight", c->vocab_size, C, "lm_head.weight", 0, c->vocab_size, C, 0, 1.0f);
}

/* gate_proj / up_proj / down_proj of one SwiGLU MLP stored as fivefold's
 * [2F, C] w_gate_up (gate rows first) and [C, F] w_down at the offsets. */
static void swiglu(Builder *b, const char *hf_prefix, const char *const names[3], const char *gu, size_t gu_at,
                   const char *down, size_t down_at, int F, int C, float down_scale) {
  char hf[SAFETENSORS_MAX_NAME];
  piece(b, NAME(hf, "%s.%s.weight", hf_prefix, names[0]), F, C, gu, gu_at, F, C, 0, 1.0f);
  piece(b, NAME(hf, "%s.%s.weight", hf_prefix, names[1]), F, C, gu, gu_at + (size_t)F * C, F, C, 0, 1.0f);
  piece(b, NAME(hf, "%s.%s.weight", hf_prefix, names[2]), C, F, down, down_at, C, F, 0, down_scale);
}

static const char *const LLAMA_MLP[3] = {"gate_proj", "up_proj", "down_proj"};
static const char *const MIXTRAL_EXPERT[3] = {"w1", "w3", "w2"};

static void decoder_layer(Builder *b, const ModelConfig *c, HfFamily fam, int i) {
  const int C = c->hidden_size, D = model_config_head_dim(c), QD = c->num_heads * D,
            KVD = model_config_kv_heads(c) * D;
  char hf[SAFETENSORS_MAX_NAME], o[96], pre[64], gu[96], down[96];
  snprintf(pre, sizeof pre, "model.layers.%d", i);
  piece(b, NAME(hf, "%s.input_layernorm.weight", pre), C, 0, NAME(o, "layers.%d.attn_norm.weight", i), 0, C, 0, 0,
        1.0f);
  static const char *const proj[4][3] = {{"wq", "q_proj", "bq"}, {"wk", "k_proj", "bk"}, {"wv", "v_proj", "bv"},
                                         {"wo", "o_proj", "bo"}};
  for (int p = 0; p < 4; p++) {
    const int rows = p == 3 ? C : (p == 0 ? QD : KVD), cols = p == 3 ? QD : C;
    piece(b, NAME(hf, "%s.self_attn.%s.weight", pre, proj[p][1]), rows, cols, NAME(o, "layers.%d.attn.%s", i, proj[p][0]),
          0, rows, cols, 0, 1.0f);
    if (p < 3 ? c->qkv_bias : c->o_bias)
      piece(b, NAME(hf, "%s.self_attn.%s.bias", pre, proj[p][1]), rows, 0, NAME(o, "layers.%d.attn.%s", i, proj[p][2]),
            0, rows, 0, 0, 1.0f);
  }
  piece(b, NAME(hf, "%s.post_attention_layernorm.weight", pre), C, 0, NAME(o, "layers.%d.mlp_norm.weight", i), 0, C,
        0, 0, 1.0f);
  if (!c->is_moe_layer[i]) {
    NAME(hf, "%s.mlp", pre);
    swiglu(b, hf, LLAMA_MLP, NAME(gu, "layers.%d.mlp.w_gate_up", i), 0, NAME(down, "layers.%d.mlp.w_down", i), 0,
           c->intermediate_size, C, 1.0f);
    return;
  }
  const int E = c->num_experts, F = c->moe_intermediate_size, Fs = c->shared_expert_intermediate_size;
  const int mixtral = fam == HF_MIXTRAL;
  const char *block = mixtral ? "block_sparse_moe" : "mlp";
  piece(b, NAME(hf, "%s.%s.gate.weight", pre, block), E, C, NAME(o, "layers.%d.moe.router", i), 0, E, C, 0, 1.0f);
  NAME(gu, "layers.%d.moe.experts.w_gate_up", i);
  NAME(down, "layers.%d.moe.experts.w_down", i);
  for (int e = 0; e < E && !b->rc; e++) {
    char ep[SAFETENSORS_MAX_NAME];
    NAME(ep, "%s.%s.experts.%d", pre, block, e);
    swiglu(b, ep, mixtral ? MIXTRAL_EXPERT : LLAMA_MLP, gu, (size_t)e * 2 * F * C, down, (size_t)e * C * F, F, C,
           1.0f);
  }
  if (Fs > 0) {
    char sp[SAFETENSORS_MAX_NAME];
    NAME(sp, "%s.mlp.shared_expert", pre);
    swiglu(b, sp, LLAMA_MLP, NAME(gu, "layers.%d.moe.shared.w_gate_up", i), 0,
           NAME(down, "layers.%d.moe.shared.w_down", i), 0, Fs, C, 2.0f);
    zero_tensor(b, NAME(hf, "%s.mlp.shared_expert_gate.weight", pre), 1, C);
  }
}

int hf_layout_build(HfLayout *lay, const ModelConfig *cfg, HfFamily family, const char *gpt2_prefix, Error *err) {
  memset(lay, 0, sizeof *lay);
  Builder b = {.lay = lay, .err = err, .rc = 0};
  if (family == HF_GPT2) {
    gpt2_table(&b, cfg, gpt2_prefix ? gpt2_prefix : "");
  } else {
    const int C = cfg->hidden_size, V = cfg->vocab_size;
    piece(&b, "model.embed_tokens.weight", V, C, "embed.weight", 0, V, C, 0, 1.0f);
    for (int i = 0; i < cfg->num_layers && !b.rc; i++) decoder_layer(&b, cfg, family, i);
    piece(&b, "model.norm.weight", C, 0, "final_norm.weight", 0, C, 0, 0, 1.0f);
    if (!cfg->tie_word_embeddings) piece(&b, "lm_head.weight", V, C, "lm_head.weight", 0, V, C, 0, 1.0f);
  }
  if (b.rc) hf_layout_free(lay);
  return b.rc;
}

void hf_layout_free(HfLayout *lay) {
  free(lay->pieces);
  free(lay->zeros);
  memset(lay, 0, sizeof *lay);
}

size_t hf_piece_numel(const HfPiece *p) { return (size_t)p->rows * (size_t)(p->cols > 0 ? p->cols : 1); }

void hf_piece_to_hf(const HfPiece *p, const float *ours, float *hf) {
  const float *src = ours + p->ours_offset;
  if (!p->transposed) {
    float *dst = hf + p->hf_first;
    const size_t n = hf_piece_numel(p);
    for (size_t j = 0; j < n; j++) dst[j] = src[j] * p->scale;
    return;
  }
  const size_t width = (size_t)p->hf_shape[1];
  for (int r = 0; r < p->rows; r++)
    for (int c = 0; c < p->cols; c++) hf[(size_t)c * width + (size_t)(p->hf_col0 + r)] = src[(size_t)r * p->cols + c];
}

void hf_piece_from_hf(const HfPiece *p, const float *hf, float *ours) {
  float *dst = ours + p->ours_offset;
  if (!p->transposed) {
    const float *src = hf + p->hf_first;
    const size_t n = hf_piece_numel(p);
    const float inv = 1.0f / p->scale;
    for (size_t j = 0; j < n; j++) dst[j] = src[j] * inv;
    return;
  }
  const size_t width = (size_t)p->hf_shape[1];
  for (int r = 0; r < p->rows; r++)
    for (int c = 0; c < p->cols; c++) dst[(size_t)r * p->cols + c] = hf[(size_t)c * width + (size_t)(p->hf_col0 + r)];
}

int hf_table_model_create(Model *m, const ModelConfig *cfg, Error *err) {
  memset(m, 0, sizeof *m);
  m->cfg = *cfg;
  int rc = model_global_tensors(cfg, &m->tensors, &m->num_tensors, err);
  if (rc) return rc;
  for (int i = 0; i < m->num_tensors; i++)
    if (m->tensors[i].offset + m->tensors[i].numel > m->num_params)
      m->num_params = m->tensors[i].offset + m->tensors[i].numel;
  m->params = calloc(m->num_params + 16, sizeof *m->params);
  if (!m->params) {
    free(m->tensors);
    m->tensors = NULL;
    return error_set(err, ERR_NOMEM, "out of memory for %zu parameters", m->num_params);
  }
  return 0;
}

void hf_table_model_free(Model *m) {
  free(m->tensors);
  free(m->params);
  memset(m, 0, sizeof *m);
}
