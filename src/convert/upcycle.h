/* Upcycling: a dense model's trained weights turned into an MoE model whose
 * output at initialisation equals the dense one's, and the checkpoint that
 * `fivefold train --resume` continues from. docs/upcycling.md derives the
 * scaling and lists which configurations reproduce the dense logits exactly.
 *
 * Layout (E routed experts, granularity G, top-k K, dense FFN F):
 *   expert e holds slice s = e mod G of the dense FFN (Fe = F / G hidden
 *   units: gate rows s*Fe.. of the gate half of w_gate_up, the same rows of
 *   the up half, the same columns of w_down), so each slice has E / G
 *   copies; expert e is copy r = e / G of its slice.
 *   Router row e = base row r (a "virtual group" is one copy of every slice:
 *   experts r*G .. r*G + G-1 share one router row), so the G experts of one
 *   copy always tie and top-k with K = m*G picks m whole copies of the MLP.
 *   Base rows are std * N(0,1) draws (base/rng.h stream of the router
 *   tensor's name, index r*C + j). By default each layer's std makes its
 *   router logits start with a spread of about UPCYCLE_ROUTER_LOGIT_STD:
 *   enough to break the ties between copies, small enough that routing
 *   starts nearly uniform; std 0 gives exactly uniform routing.
 *   Every expert's up rows and w_down are multiplied by sqrt(c), where c is
 *   the factor that undoes the routing weights (upcycle_expert_scale).
 * Attention, embeddings, norms, the LM head and the MLPs of layers that stay
 * dense are copied unchanged. */
#ifndef FIVEFOLD_CONVERT_UPCYCLE_H
#define FIVEFOLD_CONVERT_UPCYCLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "model/config.h"
#include "model/model.h"
#include "ckpt/checkpoint.h"

typedef struct UpcycleOptions {
  int num_experts; /* E: routed experts of every MoE layer */
  int top_k;       /* K: a multiple of granularity */
  int granularity; /* G: slices of the dense FFN; E and F must be multiples */
  RouterScore router_score;
  RouterOrder router_order;
  int norm_topk_prob;
  float aux_loss_coeff, z_loss_coeff;
  float router_init_std; /* < 0: per layer, logits of std UPCYCLE_ROUTER_LOGIT_STD */
  int moe_layer_freq;    /* layer i becomes MoE when i % freq == 0 (1: all) */
  uint64_t seed;         /* router draws */
  /* Keep the model dense (no MoE fields apply): the same fresh start as an
   * upcycled model, the control run of an upcycling experiment. */
  int dense_control;
} UpcycleOptions;

/* Router logits' standard deviation at the start when no std is given:
 * each layer's rows get std 0.01 / ||mlp_norm.weight||. */
#define UPCYCLE_ROUTER_LOGIT_STD 0.01

/* E 8, K 2, G 1, softmax_then_topk without renormalisation, aux 0.01, z 0,
 * the default router std, every layer MoE, seed 1337. */
void upcycle_options_default(UpcycleOptions *o);

/* The MoE model config for a dense one; ERR_CONFIG naming the option when
 * the options do not fit the model (a checkpoint that is already MoE, E or F
 * not divisible by G, K not a multiple of G, K > E, ...). */
int upcycle_model_config(const ModelConfig *dense, const UpcycleOptions *o, ModelConfig *moe, Error *err);

/* c: the factor every expert's output is multiplied by so that, with uniform
 * router scores, the routed sum equals the dense MLP: G / (K * w), w being
 * the weight one picked expert gets under uniform scores (1/E unnormalised
 * softmax, 1/2 for a single unnormalised sigmoid pick, 1/K when the weights
 * are renormalised) times topk_scaling_factor. */
double upcycle_expert_scale(const ModelConfig *moe, int granularity);

/* 1 when the upcycled model reproduces the dense logits for any router
 * weights (the routing weights of the picks sum to a constant); 0 when it
 * does so only for uniform scores, i.e. router_init_std = 0. */
int upcycle_exact_for_any_router(const ModelConfig *moe);

/* Fills `moe` (created with upcycle_model_config's config, or the dense
 * config for a dense control) from `dense`. */
int upcycle_weights(const Model *dense, Model *moe, const UpcycleOptions *o, Error *err);

/* What upcycle_checkpoint wrote. */
typedef struct UpcycleInfo {
  char dense_checkpoint[CHECKPOINT_PATH_MAX]; /* the resolved source */
  int dense_step;
  char checkpoint[CHECKPOINT_PATH_MAX]; /* out/checkpoints/step-00000000 */
  char run_config[CHECKPOINT_PATH_MAX]; /* out/run.json */
  ModelConfig model;
  double expert_scale; /* c (1 for a dense control) */
  int exact_for_any_router;
  size_t dense_params, params;
} UpcycleInfo;

/* The run configuration file written next to the checkpoints. */
#define UPCYCLE_RUN_CONFIG "run.json"

/* Reads the dense checkpoint (a step dir or a run dir: its newest valid
 * one), builds the MoE model and writes out_dir as a run directory:
 *   out_dir/checkpoints/step-00000000/  weights, zero AdamW moments, step 0,
 *                                       and the dense run's data-loader
 *                                       position (training continues on the
 *                                       data the dense run had not seen)
 *   out_dir/run.json                    the dense run's resolved config with
 *                                       the MoE model and "out": out_dir
 * so `fivefold train --config out_dir/run.json --resume` continues it.
 * out_dir must not hold checkpoints already. info may be NULL. */
int upcycle_checkpoint(const char *dense_path, const char *out_dir, const UpcycleOptions *o, UpcycleInfo *info,
                       Error *err);

#endif
