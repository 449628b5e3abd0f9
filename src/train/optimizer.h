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

/* One AdamW update of every parameter from model->grads (which it leaves as
 * they are; zero them before the next accumulation). */
int optimizer_step(Optimizer *opt, Model *model, OptimizerStepInfo *info, Error *err);

#endif
