/* Model configuration. Read from JSON with the Hugging Face config.json
 * field names of Llama, Mixtral and Qwen2-MoE, plus fivefold's MoE options
 * (named like Megatron-Core's arguments). Dense and MoE layers may be mixed.
 *
 * Accepted fields (HF):   vocab_size hidden_size num_hidden_layers
 *   num_attention_heads num_key_value_heads head_dim intermediate_size
 *   rope_theta rms_norm_eps tie_word_embeddings max_position_embeddings
 *   initializer_range model_type architectures
 *   num_local_experts | num_experts, num_experts_per_tok, moe_intermediate_size,
 *   shared_expert_intermediate_size, decoder_sparse_step, mlp_only_layers,
 *   norm_topk_prob, router_aux_loss_coef, plus HF bookkeeping fields that are
 *   accepted and ignored (torch_dtype, bos_token_id, ...).
 * fivefold's own:
 *   moe_router_score_function  "softmax" | "sigmoid"
 *   moe_router_order           "softmax_then_topk" | "topk_then_softmax"
 *   moe_router_topk_scaling_factor  number (default 1)
 *   moe_aux_loss_coeff, moe_z_loss_coeff
 *   moe_expert_capacity_factor number; absent or null = dropless
 *   moe_token_drop_policy      "probs" | "position"
 *   moe_pad_expert_input_to_capacity  bool
 *   moe_layer_freq             int k: layer i is MoE when i % k == 0 (Megatron)
 *   moe_layer_pattern          [0/1 per layer], overrides the frequency
 * Without either, Qwen2-MoE's decoder_sparse_step / mlp_only_layers decide
 * (layer i is MoE when (i+1) % step == 0 and i is not listed), else every
 * layer is MoE when there are experts. Mixtral: intermediate_size is the
 * expert FFN when moe_intermediate_size is absent; norm_topk_prob defaults
 * to true (false for model_type qwen2_moe, as in HF).
 * Accepted but not modelled: Qwen2-MoE's sigmoid gate on the shared expert
 * (fivefold's shared expert is ungated) and Qwen2's built-in q/k/v biases
 * (give "qkv_bias": true for them); sliding-window attention
 * (use_sliding_window: true is refused); router jitter noise.
 * Biases: "qkv_bias": true gives q/k/v biases, "attention_bias": true (Llama)
 * q/k/v and o biases; neither works with KV heads that several TP ranks
 * share (refused by the shard).
 * Refused: hidden_act other than "silu", mlp_bias true, rope_scaling other
 * than null.
 * GPT-2 (model_type "gpt2", HF GPT2Config fields): vocab_size n_embd n_layer
 *   n_head n_positions n_ctx n_inner (null: 4 n_embd) layer_norm_epsilon
 *   activation_function ("gelu_new" / "gelu_pytorch_tanh": GeLU, tanh
 *   approximation) tie_word_embeddings (default true) initializer_range;
 *   dropout and summary fields are accepted and ignored (fivefold trains
 *   without dropout); scale_attn_by_inverse_layer_idx true is refused. A
 *   GPT-2 model has LayerNorm with bias, learned absolute position
 *   embeddings, biases in q/k/v/o and in the MLP (fc, proj), a GeLU MLP and
 *   no RoPE; rms_norm_eps holds its layer_norm_epsilon.
 * Unknown fields are errors naming the file and the field, with a suggestion
 * for near misses.
 *
 * Programmatic use: model_config_defaults, then set the sizes; head_dim and
 * num_kv_heads may stay 0 (= hidden_size / num_heads and num_heads), and
 * is_moe_layer must be set for MoE models (model_config_set_moe_layer_freq).
 * The aux-loss coefficient multiplies fivefold's formula (f_e sums to 1 over
 * experts, see docs/moe-semantics.md), whichever field name supplies it. */
#ifndef FIVEFOLD_MODEL_CONFIG_H
#define FIVEFOLD_MODEL_CONFIG_H

#include "base/error.h"

#define MODEL_MAX_LAYERS 512

typedef struct cJSON cJSON;

typedef enum { ROUTER_SCORE_SOFTMAX = 0, ROUTER_SCORE_SIGMOID } RouterScore;
typedef enum { ROUTER_SOFTMAX_THEN_TOPK = 0, ROUTER_TOPK_THEN_SOFTMAX } RouterOrder;
typedef enum { DROP_POLICY_PROBS = 0, DROP_POLICY_POSITION } DropPolicy;

typedef struct ModelConfig {
  char model_type[32]; /* "llama", "mixtral", "qwen2_moe", "gpt2", "fivefold" */
  int gpt2;            /* the GPT-2 family: LayerNorm, GeLU MLP, biases, learned positions, no RoPE */
  int qkv_bias;        /* q/k/v projections have biases (GPT-2 always) */
  int o_bias;          /* the output projection has a bias (GPT-2 always) */
  int vocab_size;
  int hidden_size;
  int num_layers;
  int num_heads;
  int num_kv_heads;
  int head_dim; /* default hidden_size / num_heads */
  int intermediate_size; /* FFN of dense layers */
  float rope_theta;
  float rms_norm_eps; /* the norm's epsilon (GPT-2: layer_norm_epsilon) */
  int tie_word_embeddings;
  int max_position_embeddings;
  float init_std;

  /* MoE (num_experts == 0: dense model) */
  int num_experts;
  int top_k;
  int moe_intermediate_size;           /* FFN of one expert */
  int shared_expert_intermediate_size; /* 0: no shared expert */
  unsigned char is_moe_layer[MODEL_MAX_LAYERS];
  RouterScore router_score;
  RouterOrder router_order;
  int norm_topk_prob;        /* renormalise the kept top-k probabilities to sum 1 */
  float topk_scaling_factor; /* routing weights are multiplied by this */
  float aux_loss_coeff;
  float z_loss_coeff;
  float capacity_factor; /* <= 0: dropless */
  DropPolicy drop_policy;
  int pad_to_capacity;
} ModelConfig;

void model_config_defaults(ModelConfig *cfg);

/* Parses a JSON object; `origin` (a file name) is used in error messages. */
int model_config_from_json(ModelConfig *cfg, const cJSON *obj, const char *origin, Error *err);
int model_config_load(ModelConfig *cfg, const char *path, Error *err);
int model_config_validate(const ModelConfig *cfg, const char *origin, Error *err);

/* fivefold's canonical JSON form (round-trips through model_config_from_json). */
cJSON *model_config_to_json(const ModelConfig *cfg);

int model_config_num_moe_layers(const ModelConfig *cfg);

/* head_dim and num_kv_heads with their defaults resolved. */
int model_config_head_dim(const ModelConfig *cfg);
int model_config_kv_heads(const ModelConfig *cfg);

/* Marks layer i as MoE when i % k == 0 (k <= 0: no MoE layer). */
void model_config_set_moe_layer_freq(ModelConfig *cfg, int k);

#endif
