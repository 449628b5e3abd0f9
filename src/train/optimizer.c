/* AdamW over a network's parameter table: per-tensor weight decay, global-norm
 * clipping and the scheduled learning rate (kern/adamw.h, lr_schedule.h). */
#include "train/optimizer.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "kern/vecops.h"

int optimizer_create(Optimizer *opt, size_t num_values, const OptimizerConfig *cfg, Error *err) {
  memset(opt, 0, sizeof *opt);
  opt->cfg = *cfg;
  opt->num_params = num_values;
  size_t bytes = num_values * sizeof(float);
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

double optimizer_grad_norm(const Network *net) { return sqrt(vec_sumsq(net->grads, net->num_values)); }

double optimizer_local_sumsq(const Network *net, int tp_rank) { return optimizer_local_sumsq_group(net, tp_rank, -1); }

double optimizer_local_sumsq_group(const Network *net, int tp_rank, int group) {
  double sumsq = 0;
  for (int i = 0; i < net->num_tensors; i++) {
    const NetParam *p = &net->params[i];
    if ((group < 0 || p->param_group == group) && optimizer_tensor_in_norm(p, tp_rank))
      sumsq += vec_sumsq(net->grads + p->offset, p->numel);
  }
  return sumsq;
}

double optimizer_local_sumsq_world(const Network *net, int dp_cp_size, int edp_size) {
  double sumsq = 0;
  for (int i = 0; i < net->num_tensors; i++) {
    const NetParam *p = &net->params[i];
    if (p->copy_of) continue;
    double holders;
    if (p->reduce == NET_REDUCE_EXPERT) holders = edp_size;
    else holders = (double)dp_cp_size * (p->tp_copies > 0 ? p->tp_copies : 1);
    sumsq += vec_sumsq(net->grads + p->offset, p->numel) / holders;
  }
  return sumsq;
}

int optimizer_step(Optimizer *opt, Network *net, OptimizerStepInfo *info, Error *err) {
  return optimizer_apply(opt, net, vec_sumsq(net->grads, net->num_values), info, err);
}

int optimizer_apply(Optimizer *opt, Network *net, double sumsq, OptimizerStepInfo *info, Error *err) {
  return optimizer_apply_group(opt, net, -1, sumsq, info, err);
}

int optimizer_apply_group(Optimizer *opt, Network *net, int group, double sumsq, OptimizerStepInfo *info,
                          Error *err) {
  if (net->num_values != opt->num_params)
    return error_set(err, ERR_INTERNAL, "optimizer: built for %zu parameters, the network has %zu", opt->num_params,
                     net->num_values);
  if (!isfinite(sumsq))
    return error_set(err, ERR_INTERNAL,
                     "optimizer: the gradient is not finite at step %d (loss diverged; try a lower lr or "
                     "grad_clip)",
                     opt->step + 1);
  float clip = clip_grad_scale(sumsq, opt->cfg.grad_clip);
  float lr = lr_schedule_at(&opt->cfg.schedule, opt->step);
  int t = opt->step + 1;
  if (group < 0 || group >= net->num_param_groups - 1) opt->step = t;
  AdamWHyper decayed = {lr, opt->cfg.beta1, opt->cfg.beta2, opt->cfg.eps, opt->cfg.weight_decay};
  AdamWHyper plain = decayed;
  plain.weight_decay = 0.0f;
  for (int i = 0; i < net->num_tensors; i++) {
    const NetParam *p = &net->params[i];
    if (group >= 0 && p->param_group != group) continue;
    const AdamWHyper *h = p->no_weight_decay ? &plain : &decayed;
    adamw_update(net->values + p->offset, net->grads + p->offset, opt->m + p->offset, opt->v + p->offset,
                 p->numel, t, h, clip);
  }
  network_weights_changed(net, group); /* the bf16 copies of these weights are stale now */
  if (info) {
    info->lr = lr;
    info->grad_norm = sqrt(sumsq);
    info->clip_scale = clip;
  }
  return 0;
}
