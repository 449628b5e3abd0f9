/* AdamW over every tensor of a network's parameter table (nets/network.h):
 * moment buffers allocated once, weight decay skipped for tensors marked
 * no_weight_decay (norm weights, biases), global gradient-norm clipping,
 * and the learning rate from the schedule. It reads only the table and the
 * two flat buffers, so it steps the transformer (through its bound
 * network, train/net_transformer.h) and the networks of nets/ alike. */
#ifndef FIVEFOLD_TRAIN_OPTIMIZER_H
#define FIVEFOLD_TRAIN_OPTIMIZER_H

#include "base/error.h"
#include "kern/adamw.h"
#include "kern/lr_schedule.h"
#include "nets/network.h"

typedef struct OptimizerConfig {
  LrSchedule schedule;
  float beta1, beta2, eps, weight_decay;
  float grad_clip; /* max global norm; <= 0: no clipping */
} OptimizerConfig;

typedef struct Optimizer {
  OptimizerConfig cfg;
  float *m, *v; /* first and second moments, one float per parameter */
  size_t num_params;
  int step; /* optimizer steps taken so far (the next update is step + 1) */
} Optimizer;

/* What one update did. */
typedef struct OptimizerStepInfo {
  float lr;
  double grad_norm; /* before clipping */
  float clip_scale; /* multiplier applied to the gradient (1: not clipped) */
} OptimizerStepInfo;

/* Moments for a parameter buffer of num_values floats (Network.num_values). */
int optimizer_create(Optimizer *opt, size_t num_values, const OptimizerConfig *cfg, Error *err);
void optimizer_free(Optimizer *opt);

/* Global L2 norm of the network's gradient (double accumulation). */
double optimizer_grad_norm(const Network *net);

/* Whether a tensor's gradient counts in the global norm on TP rank tp_rank:
 * each logical element once over the model-parallel ranks. Data held by
 * tp_copies consecutive TP ranks (all of them for TP-replicated tensors, a
 * pair for a KV head two ranks share) counts on the first of them; a
 * duplicate never (its gradient is the other tensor's). */
static inline int optimizer_tensor_in_norm(const NetParam *p, int tp_rank) {
  if (p->copy_of) return 0;
  return p->tp_copies <= 1 || tp_rank % p->tp_copies == 0;
}
/* This rank's part of the squared global norm, by that rule. */
double optimizer_local_sumsq(const Network *net, int tp_rank);
/* Under MoE parallel folding: this rank's share of the squared global norm
 * when summed over the whole world. Each tensor counts weight / holders
 * times, holders being the ranks with the same slice: expert tensors
 * (NET_REDUCE_EXPERT) edp_size of them, the others dp_cp_size x tp_copies;
 * duplicates never. */
double optimizer_local_sumsq_world(const Network *net, int dp_cp_size, int edp_size);

/* One AdamW update of every parameter from net->grads (which it leaves as
 * they are; zero them before the next accumulation). */
int optimizer_step(Optimizer *opt, Network *net, OptimizerStepInfo *info, Error *err);
/* The same update given the squared global norm (summed over the ranks). */
int optimizer_apply(Optimizer *opt, Network *net, double sumsq, OptimizerStepInfo *info, Error *err);

/* Parameter groups that step in phases of their own (nets/network.h): the
 * update of group `group`'s tensors alone, given the squared norm of that
 * group's gradient (clipping is per group); group -1 is optimizer_apply.
 * The groups of one iteration share its step number (learning rate and
 * bias correction): opt->step advances with the update of the last group
 * (net->num_param_groups - 1). */
int optimizer_apply_group(Optimizer *opt, Network *net, int group, double sumsq, OptimizerStepInfo *info,
                          Error *err);
/* optimizer_local_sumsq over one group's tensors (-1: all). */
double optimizer_local_sumsq_group(const Network *net, int tp_rank, int group);

#endif
