/* AdamW over a Model's tensors: per-tensor weight decay, global-norm
 * clipping and the scheduled learning rate (kern/adamw.h, lr_schedule.h). */
#include "train/optimizer.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "kern/vecops.h"

int optimizer_create(Optimizer *opt, const Model *model, const OptimizerConfig *cfg, Error *err) {
  memset(opt, 0, sizeof *opt);
  opt->cfg = *cfg;
  opt->num_params = model->num_params;
  size_t bytes = model->num_params * sizeof(float);
  opt->m = alloc_big(bytes);
  opt->v = alloc_big(bytes);
  if (!opt->m || !opt->v) {
    optimizer_free(opt);
    return error_set(err, ERR_NOMEM, "optimizer: cannot allocate 2 x %.1f MB of AdamW state", bytes / 1e6);
  }
  return 0;
}

void optimizer_free(Optimizer *opt) {
  alloc_big_free(opt->m);
  alloc_big_free(opt->v);
  opt->m = opt->v = NULL;
}

double optimizer_grad_norm(const Model *model) { return sqrt(vec_sumsq(model->grads, model->num_params)); }

double optimizer_local_sumsq(const Model *model, int tp_rank) {
  double sumsq = 0;
  for (int i = 0; i < model->num_tensors; i++) {
    const ParamTensor *p = &model->tensors[i];
    if (optimizer_tensor_in_norm(p, tp_rank)) sumsq += vec_sumsq(model->grads + p->offset, p->numel);
  }
  return sumsq;
}

double optimizer_local_sumsq_world(const Model *model, int dp_cp_size, int edp_size) {
  double sumsq = 0;
  for (int i = 0; i < model->num_tensors; i++) {
    const ParamTensor *p = &model->tensors[i];
    if (p->tied_copy) continue;
    double holders;
    if (p->reduce_over_edp) {
      holders = edp_size;
    } else {
      int tp_holders = p->tp_ranks > 0 ? p->tp_ranks : p->tp_replicated ? model->shard.tp_size : 1;
      holders = (double)dp_cp_size * (tp_holders > 0 ? tp_holders : 1);
    }
    sumsq += vec_sumsq(model->grads + p->offset, p->numel) / holders;
  }
  return sumsq;
}

int optimizer_step(Optimizer *opt, Model *model, OptimizerStepInfo *info, Error *err) {
  return optimizer_apply(opt, model, vec_sumsq(model->grads, model->num_params), info, err);
}

int optimizer_apply(Optimizer *opt, Model *model, double sumsq, OptimizerStepInfo *info, Error *err) {
  if (model->num_params != opt->num_params)
    return error_set(err, ERR_INTERNAL, "optimizer: built for %zu parameters, model has %zu", opt->num_params,
                     model->num_params);
  if (!isfinite(sumsq))
    return error_set(err, ERR_INTERNAL,
                     "optimizer: the gradient is not finite at step %d (loss diverged; try a lower lr or "
                     "grad_clip)",
                     opt->step + 1);
  float clip = clip_grad_scale(sumsq, opt->cfg.grad_clip);
  float lr = lr_schedule_at(&opt->cfg.schedule, opt->step);
  int t = ++opt->step;
  AdamWHyper decayed = {lr, opt->cfg.beta1, opt->cfg.beta2, opt->cfg.eps, opt->cfg.weight_decay};
  AdamWHyper plain = decayed;
  plain.weight_decay = 0.0f;
  for (int i = 0; i < model->num_tensors; i++) {
    const ParamTensor *p = &model->tensors[i];
    const AdamWHyper *h = p->no_weight_decay ? &plain : &decayed;
    adamw_update(model->params + p->offset, model->grads + p->offset, opt->m + p->offset, opt->v + p->offset,
                 p->numel, t, h, clip);
  }
  if (info) {
    info->lr = lr;
    info->grad_norm = sqrt(sumsq);
    info->clip_scale = clip;
  }
  return 0;
}
