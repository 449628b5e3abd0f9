/* ZeRO-1 AdamW: the sharded moments, the step with the global norm and the
 * parameter all-gather, and the gather/scatter of full moments for
 * checkpoints. See dist_optimizer.h. */
#include "train/dist_optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "kern/vecops.h"

int dist_optimizer_create(DistOptimizer *opt, DpGrads *grads, const Network *net, const OptimizerConfig *cfg,
                          Error *err) {
  memset(opt, 0, sizeof *opt);
  if (!grads->scatter || grads->num_params != net->num_values)
    return error_set(err, ERR_ARG, "dist_optimizer: needs reduce-scatter buckets over the network's %zu parameters",
                     net->num_values);
  opt->cfg = *cfg;
  opt->grads = grads;
  size_t bytes = grads->shard_len * sizeof(float);
  opt->m = alloc_big(bytes);
  opt->v = alloc_big(bytes);
  if (!opt->m || !opt->v) {
    dist_optimizer_free(opt);
    return error_set(err, ERR_NOMEM, "dist_optimizer: cannot allocate 2 x %.1f MB of AdamW state", bytes / 1e6);
  }
  return 0;
}

void dist_optimizer_free(DistOptimizer *opt) {
  alloc_big_free(opt->m);
  alloc_big_free(opt->v);
  opt->m = opt->v = NULL;
}

/* The tensor holding flat offset `at` (tensors are sorted by offset). */
static int tensor_at(const Network *net, size_t at) {
  int lo = 0, hi = net->num_tensors - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (net->params[mid].offset <= at) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

double dist_optimizer_local_sumsq(const DistOptimizer *opt, const Network *net, int tp_rank) {
  return dist_optimizer_local_sumsq_group(opt, net, tp_rank, -1);
}

double dist_optimizer_local_sumsq_group(const DistOptimizer *opt, const Network *net, int tp_rank, int group) {
  const DpGrads *g = opt->grads;
  double sumsq = 0;
  for (int b = 0; b < g->num_buckets; b++) {
    if (group >= 0 && g->buckets[b].param_group != group) continue;
    size_t lo, hi;
    dp_grads_own_range(g, b, &lo, &hi);
    const float *base = g->shard + g->buckets[b].shard_offset;
    for (size_t at = lo; at < hi;) {
      const NetParam *p = &net->params[tensor_at(net, at)];
      size_t stop = p->offset + p->numel < hi ? p->offset + p->numel : hi;
      if (optimizer_tensor_in_norm(p, tp_rank)) sumsq += vec_sumsq(base + (at - lo), stop - at);
      at = stop;
    }
  }
  return sumsq;
}

int dist_optimizer_first_nonfinite(const DistOptimizer *opt, const Network *net) {
  const DpGrads *g = opt->grads;
  int first = -1;
  for (int b = 0; b < g->num_buckets; b++) {
    size_t lo, hi;
    dp_grads_own_range(g, b, &lo, &hi);
    const float *base = g->shard + g->buckets[b].shard_offset;
    for (size_t at = lo; at < hi;) {
      int t = tensor_at(net, at);
      const NetParam *p = &net->params[t];
      size_t stop = p->offset + p->numel < hi ? p->offset + p->numel : hi;
      if ((first < 0 || t < first) && !isfinite(vec_sumsq(base + (at - lo), stop - at))) first = t;
      at = stop;
    }
  }
  return first;
}

int dist_optimizer_step(DistOptimizer *opt, Network *net, OptimizerStepInfo *info, Error *err) {
  double sumsq = dist_optimizer_local_sumsq(opt, net, 0);
  int rc = comm_allreduce_f64(opt->grads->group, &sumsq, 1, COMM_SUM, NULL, err);
  if (rc) return error_wrap(err, "distributed optimizer: gradient norm");
  return dist_optimizer_apply(opt, net, sumsq, info, err);
}

int dist_optimizer_apply(DistOptimizer *opt, Network *net, double sumsq, OptimizerStepInfo *info, Error *err) {
  return dist_optimizer_apply_group(opt, net, -1, sumsq, info, err);
}

int dist_optimizer_apply_group(DistOptimizer *opt, Network *net, int group, double sumsq, OptimizerStepInfo *info,
                               Error *err) {
  DpGrads *g = opt->grads;
  const float *shard = g->shard;
  int rc = 0;
  if (!isfinite(sumsq))
    return error_set(err, ERR_INTERNAL,
                     "optimizer: the gradient is not finite at step %d (loss diverged; try a lower lr or "
                     "grad_clip)",
                     opt->step + 1);
  float clip = clip_grad_scale(sumsq, opt->cfg.grad_clip);
  float lr = lr_schedule_at(&opt->cfg.schedule, opt->step);
  int t = opt->step + 1;
  if (group < 0 || group >= net->num_param_groups - 1) opt->step = t; /* the groups of a step share it */
  AdamWHyper decayed = {lr, opt->cfg.beta1, opt->cfg.beta2, opt->cfg.eps, opt->cfg.weight_decay};
  AdamWHyper plain = decayed;
  plain.weight_decay = 0.0f;
  for (int b = 0; b < g->num_buckets; b++) {
    if (group >= 0 && g->buckets[b].param_group != group) continue;
    size_t lo, hi;
    dp_grads_own_range(g, b, &lo, &hi);
    size_t base = g->buckets[b].shard_offset;
    /* A block may straddle tensors with different weight decay. */
    for (size_t at = lo; at < hi;) {
      const NetParam *p = &net->params[tensor_at(net, at)];
      size_t stop = p->offset + p->numel < hi ? p->offset + p->numel : hi;
      size_t k = base + (at - lo);
      adamw_update(net->values + at, shard + k, opt->m + k, opt->v + k, stop - at, t,
                   p->no_weight_decay ? &plain : &decayed, clip);
      at = stop;
    }
  }
  /* Every rank gets every rank's updated block back. Buckets whose length
   * is a multiple of the group size gather in place; the staged one goes
   * through the stage. */
  for (int b = 0; b < g->num_buckets && !rc; b++) {
    DpBucket *k = &g->buckets[b];
    if (group >= 0 && k->param_group != group) continue;
    if (k->group->size <= 1) continue; /* this rank updated the whole bucket */
    if (!k->staged) {
      rc = comm_allgather_f32(k->group, NULL, net->values + k->begin, k->block, NULL, err);
      continue;
    }
    size_t lo, hi;
    dp_grads_own_range(g, b, &lo, &hi);
    float *mine = k->stage + (size_t)k->group->rank * k->block;
    memset(mine, 0, k->block * sizeof(float));
    memcpy(mine, net->values + lo, (hi - lo) * sizeof(float));
    rc = comm_allgather_f32(k->group, NULL, k->stage, k->block, NULL, err);
    if (!rc) memcpy(net->values + k->begin, k->stage, (k->end - k->begin) * sizeof(float));
  }
  network_weights_changed(net, group); /* updated and gathered: the bf16 copies are stale */
  if (rc) return error_wrap(err, "distributed optimizer: parameter all-gather");
  if (info) {
    info->lr = lr;
    info->grad_norm = sqrt(sumsq);
    info->clip_scale = clip;
  }
  return 0;
}

/* Gathers one shard-layout buffer into a full flat one (collective). */
static int gather_state(const DpGrads *g, const float *shard, float *full, Error *err) {
  int rc = 0;
  for (int b = 0; b < g->num_buckets && !rc; b++) {
    const DpBucket *k = &g->buckets[b];
    size_t len = k->end - k->begin;
    if (k->group->size <= 1) {
      memcpy(full + k->begin, shard + k->shard_offset, len * sizeof(float));
      continue;
    }
    if (!k->staged) {
      rc = comm_allgather_f32(k->group, shard + k->shard_offset, full + k->begin, k->block, NULL, err);
      continue;
    }
    rc = comm_allgather_f32(k->group, shard + k->shard_offset, k->stage, k->block, NULL, err);
    if (!rc) memcpy(full + k->begin, k->stage, len * sizeof(float));
  }
  return rc;
}

int dist_optimizer_gather(const DistOptimizer *opt, Optimizer *full, Error *err) {
  const DpGrads *g = opt->grads;
  if (full->num_params != g->num_params || !full->m || !full->v)
    return error_set(err, ERR_ARG, "dist_optimizer_gather: needs full moments of %zu parameters", g->num_params);
  int rc = gather_state(g, opt->m, full->m, err);
  if (!rc) rc = gather_state(g, opt->v, full->v, err);
  if (rc) return error_wrap(err, "gathering the distributed optimizer state");
  full->step = opt->step;
  full->cfg = opt->cfg;
  return 0;
}

void dist_optimizer_scatter(DistOptimizer *opt, const Optimizer *full) {
  const DpGrads *g = opt->grads;
  for (int b = 0; b < g->num_buckets; b++) {
    size_t lo, hi;
    dp_grads_own_range(g, b, &lo, &hi);
    size_t k = g->buckets[b].shard_offset;
    memcpy(opt->m + k, full->m + lo, (hi - lo) * sizeof(float));
    memcpy(opt->v + k, full->v + lo, (hi - lo) * sizeof(float));
  }
  opt->step = full->step;
}
