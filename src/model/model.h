/* The transformer: parameters in one flat buffer (gradients in a twin
 * buffer), activations sized once for (B, T), and explicit forward and
 * backward passes, llm.c style.
 *
 * Block i:  x += attn(rmsnorm(x));  x += mlp_or_moe(rmsnorm(x))
 * Head:     loss = xent(rmsnorm(x) * lm_head^T, targets)
 *
 * Parameter tensors, by name (layouts are [out, in] like PyTorch):
 *   embed.weight                         [V, C]
 *   layers.{i}.attn_norm.weight          [C]
 *   layers.{i}.attn.wq                   [Hq*D, C]
 *   layers.{i}.attn.wk / attn.wv         [Hkv*D, C]
 *   layers.{i}.attn.wo                   [C, Hq*D]
 *   layers.{i}.mlp_norm.weight           [C]
 *   dense layer:
 *   layers.{i}.mlp.w_gate_up             [2F, C]   rows [0,F) gate, [F,2F) up
 *   layers.{i}.mlp.w_down                [C, F]
 *   MoE layer:
 *   layers.{i}.moe.router                [E, C]
 *   layers.{i}.moe.experts.w_gate_up     [E, 2Fe, C]
 *   layers.{i}.moe.experts.w_down        [E, C, Fe]
 *   layers.{i}.moe.shared.w_gate_up      [2Fs, C]  (if a shared expert)
 *   layers.{i}.moe.shared.w_down         [C, Fs]
 *   final_norm.weight                    [C]
 *   lm_head.weight                       [V, C]    (absent when tied)
 *
 * Loss: lm = mean cross-entropy over tokens with target >= 0;
 * aux = sum over MoE layers of aux_loss_coeff * E * sum_e f_e * P_e;
 * z = sum over MoE layers of z_loss_coeff * mean_t logsumexp(z_t)^2.
 * The objective is lm + aux + z. The MoE layer is defined exactly in
 * docs/moe-semantics.md (implementation: model/moe.h and moe*.c). RoPE
 * positions restart at 0 in every sequence of the batch.
 * Implementation files: model.c (table, init, buffers), model_pass.c
 * (forward/backward), mlp_layer.c, moe*.c, model_internal.h (private). */
#ifndef FIVEFOLD_MODEL_MODEL_H
#define FIVEFOLD_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/config.h"

typedef struct ParamTensor {
  char name[96];
  int ndim;
  int shape[4];
  size_t offset; /* in floats, into Model.params / Model.grads */
  size_t numel;
  int no_weight_decay; /* norms */
  int is_expert;       /* routed-expert weights (reduced over EDP later) */
} ParamTensor;

typedef struct ModelLoss {
  double lm;  /* mean over counted tokens */
  double aux; /* load-balancing loss (coefficient applied) */
  double z;   /* router z-loss (coefficient applied) */
  long tokens; /* tokens with a target */
} ModelLoss;

typedef struct ModelActs ModelActs; /* private: activations and scratch */

typedef struct Model {
  ModelConfig cfg;
  int max_B, max_T; /* activation buffers are sized for these */
  size_t num_params;
  float *params;
  float *grads;
  ParamTensor *tensors;
  int num_tensors;
  ModelActs *acts;
  /* MoE statistics of the last forward: tokens routed to each expert
   * (before dropping) [num_layers * num_experts] (zeros on dense layers),
   * and assignments dropped by the capacity rule in the whole pass. */
  long *expert_counts;
  long dropped_assignments;
  /* Optional: called by model_backward each time a contiguous range of
   * m->grads has received its last contribution of this backward (the
   * final norm and LM head, then each block from the last to the first,
   * then the embedding: ranges arrive in decreasing offset order and cover
   * the buffer once). Data parallelism starts reducing a gradient bucket as
   * soon as it is complete. NULL (the default) calls nothing. */
  void (*on_grads_ready)(void *ctx, size_t offset, size_t count);
  void *on_grads_ready_ctx;
} Model;

int model_create(Model *m, const ModelConfig *cfg, int max_B, int max_T, Error *err);
void model_free(Model *m);

/* Every element is a pure function of (seed, tensor name, index) so a rank
 * holding a slice can initialise just that slice: element j of tensor `name`
 * is std * rng_normal(seed, rng_stream_id(name), j) (base/rng.h), with
 * std = init_std, times 1/sqrt(2 * num_layers) for the output projections
 * (attn.wo and every w_down); norm weights = 1. */
void model_init_weights(Model *m, uint64_t seed);

const ParamTensor *model_find_tensor(const Model *m, const char *name);

/* Forward over tokens [B, T] (B <= max_B, T <= max_T).
 * targets [B, T] (negative = ignore) or NULL for no loss.
 * training != 0 keeps what backward needs and, since the loss is the last op,
 * already computes the LM head's gradient scaled by grad_scale (typically
 * 1 / number of micro-batches); call model_backward next with the same scale.
 * Losses of this micro-batch go to *loss (may be NULL). */
int model_forward(Model *m, const int *tokens, const int *targets, int B, int T, int training,
                  float grad_scale, ModelLoss *loss, Error *err);

/* Backward of grad_scale * (lm + aux + z) for the last training forward;
 * accumulates (+=) into m->grads. */
int model_backward(Model *m, Error *err);

void model_zero_grad(Model *m);

/* Logits [B*T, V] of the last position-wise forward (inference helper for
 * sampling and reference tests): runs a forward without targets. */
int model_logits(Model *m, const int *tokens, int B, int T, float *logits, Error *err);

#endif
