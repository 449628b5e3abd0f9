/* AdamW over every tensor of a model: moment buffers allocated once, weight
 * decay skipped for tensors marked no_weight_decay (norm weights), global
 * gradient-norm clipping, and the learning rate from the schedule. */
#ifndef FIVEFOLD_TRAIN_OPTIMIZER_H
#define FIVEFOLD_TRAIN_OPTIMIZER_H

#include "base/error.h"
#include "kern/adamw.h"
#include "kern/lr_schedule.h"
#include "model/model.h"

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

int optimizer_create(Optimizer *opt, const Model *model, const OptimizerConfig *cfg, Error *err);
void optimizer_free(Optimizer *opt);

/* Global L2 norm of the model's gradient (double accumulation). */
double optimizer_grad_norm(const Model *model);

/* Whether a tensor's gradient counts in the global norm on TP rank tp_rank:
 * each logical element once over the model-parallel ranks. A slice held by
 * tp_ranks consecutive TP ranks (all of them for TP-replicated tensors, a
 * pair for a KV head two ranks share) counts on the first of them; a tied
 * copy never (its gradient is the embedding's). */
static inline int optimizer_tensor_in_norm(const ParamTensor *p, int tp_rank) {
  if (p->tied_copy) return 0;
  if (p->tp_replicated) return tp_rank == 0;
  return p->tp_ranks <= 1 || tp_rank % p->tp_ranks == 0;
}
/* This rank's part of the squared global norm, by that rule. */
double optimizer_local_sumsq(const Model *model, int tp_rank);
/* Under MoE parallel folding: this rank's share of the squared global norm
 * when summed over the whole world. Each tensor counts weight / holders
 * times, holders being the ranks with the same slice: expert tensors
 * (reduce_over_edp) edp_size of them, the others dp_cp_size x tp_ranks;
 * tied copies never. */
double optimizer_local_sumsq_world(const Model *model, int dp_cp_size, int edp_size);

/* One AdamW update of every parameter from model->grads (which it leaves as
 * they are; zero them before the next accumulation). */
int optimizer_step(Optimizer *opt, Model *model, OptimizerStepInfo *info, Error *err);
/* The same update given the squared global norm (summed over the ranks). */
int optimizer_apply(Optimizer *opt, Model *model, double sumsq, OptimizerStepInfo *info, Error *err);

#endif
