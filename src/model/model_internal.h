/* Private to src/model: the layout of ModelActs (activations kept for
 * backward, and scratch shared by all layers), where each layer's
 * parameters live in the flat buffer, and the per-block passes. Tests may
 * include it to inspect routing decisions. */
#ifndef FIVEFOLD_MODEL_MODEL_INTERNAL_H
#define FIVEFOLD_MODEL_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "model/moe.h"

#define NO_TENSOR ((size_t)-1)

/* Offsets (in floats) of one block's parameters; NO_TENSOR when absent. */
typedef struct LayerTensors {
  size_t attn_norm, wq, wk, wv, wo, mlp_norm;
  size_t mlp_gate_up, mlp_down;                 /* dense */
  size_t router, experts_gate_up, experts_down; /* MoE */
  size_t shared_gate_up, shared_down;
} LayerTensors;

typedef struct LayerActs {
  float *res_attn; /* [N, C] block input (residual stream) */
  float *res_mlp;  /* [N, C] residual after attention */
  float *ln1, *rstd1;
  float *q, *k, *v; /* after RoPE */
  float *att, *lse;
  float *ln2, *rstd2;
  float *mlp_h; /* [N, 2F] dense layers */
  MoeLayerActs moe;
} LayerActs;

struct ModelActs {
  /* shapes */
  int C, V, L, Hq, Hkv, D, QD, KVD, F;
  int max_N;
  MoeSpec moe;
  size_t max_rows; /* MoE expert-major rows */
  /* parameters */
  size_t embed, final_norm, lm_head; /* lm_head == embed when tied */
  LayerTensors *lt;                  /* [L] */
  /* the last forward */
  int B, T, N;
  int training_pending; /* a training forward awaits its backward */
  float grad_scale;
  int *tokens, *pos;
  float *rope_cos, *rope_sin; /* [max_T, D/2] */
  LayerActs *layers;          /* [L] */
  float *final_in;            /* [N, C] = residual after the last block */
  float *lnf, *rstdf, *dlnf;
  float *xent_scratch;
  int xent_chunk;
  /* backward scratch */
  float *dres, *dln, *dq, *dk, *dv, *datt;
  MoeScratch scratch; /* a/da/dh also serve the dense MLPs */
  /* one allocation holds everything above */
  void *arena;
  size_t arena_bytes;
};

void block_forward(Model *m, int l, double *aux, double *z);
void block_backward(Model *m, int l);

/* Hash of every routing decision of the last forward (top-k choices and
 * kept/dropped rows), so a finite-difference test can tell whether a
 * perturbation changed the routing. */
uint64_t model_routing_fingerprint(const Model *m);

#endif
