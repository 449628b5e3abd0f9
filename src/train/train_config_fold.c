/* The MoE-parallel-folding part of the run configuration: context
 * parallelism (cp) in the attention grid, expert and expert-tensor
 * parallelism (ep, etp) in the MoE grid, and the token dispatcher. Both
 * grids cover the same ranks: tp x cp x dp x pp = world = etp x ep x edp x pp.
 * See train_config.h and docs/parallelism.md. */
#include <string.h>

#include "model/model.h"
#include "train/train_config.h"

static int size_or_one(int v) { return v > 0 ? v : 1; }

int train_config_moe_dispatcher(const TrainConfig *cfg) {
  return !strcmp(cfg->moe_dispatcher, "allgather") ? MODEL_MOE_ALLGATHER : MODEL_MOE_ALLTOALL;
}

int train_config_edp(const TrainConfig *cfg) {
  long long moe_ranks = (long long)size_or_one(cfg->etp) * size_or_one(cfg->ep) * size_or_one(cfg->pp);
  int world = cfg->world_ranks > 0 ? cfg->world_ranks : 1;
  return (int)(world / moe_ranks);
}

int train_config_set_world_fold(TrainConfig *cfg, int world_ranks, Error *err) {
  const char *origin = cfg->config_path[0] ? cfg->config_path : "config";
  if (world_ranks < 1) return error_set(err, ERR_ARG, "train_config_set_world: %d ranks", world_ranks);
  int tp = size_or_one(cfg->tp), cp = size_or_one(cfg->cp), pp = size_or_one(cfg->pp);
  int ep = size_or_one(cfg->ep), etp = size_or_one(cfg->etp);
  long long model_ranks = (long long)tp * cp * pp;
  if (cfg->dp > 0) {
    long long need = model_ranks * cfg->dp;
    if (need != world_ranks)
      return error_set(err, ERR_CONFIG,
                       "%s: tp %d x cp %d x dp %d x pp %d = %lld ranks but the job has %d rank(s) (launch with mpirun "
                       "-np %lld, or change parallel.dp)",
                       origin, tp, cp, cfg->dp, pp, need, world_ranks, need);
  } else if (world_ranks % model_ranks != 0) {
    return error_set(err, ERR_CONFIG,
                     "%s: tp %d x cp %d x pp %d = %lld ranks do not divide the job's %d rank(s) (expected tp x cp x "
                     "dp x pp = world)",
                     origin, tp, cp, pp, model_ranks, world_ranks);
  }
  long long moe_ranks = (long long)etp * ep * pp;
  if (world_ranks % moe_ranks != 0)
    return error_set(err, ERR_CONFIG,
                     "%s: the MoE grid etp %d x ep %d x pp %d = %lld ranks does not divide the job's %d rank(s) "
                     "(expected etp x ep x edp x pp = world = tp x cp x dp x pp)",
                     origin, etp, ep, pp, moe_ranks, world_ranks);
  cfg->world_size = (int)(world_ranks / model_ranks);
  cfg->world_ranks = world_ranks;
  return train_config_check_fold(cfg, origin, 1, err);
}

int train_config_check_fold(const TrainConfig *cfg, const char *origin, int with_world, Error *err) {
  int tp = size_or_one(cfg->tp), cp = size_or_one(cfg->cp);
  int ep = size_or_one(cfg->ep), etp = size_or_one(cfg->etp);
  if (cfg->moe_dispatcher[0] && strcmp(cfg->moe_dispatcher, "alltoall") && strcmp(cfg->moe_dispatcher, "allgather"))
    return error_set(err, ERR_CONFIG, "%s: parallel.dispatcher must be \"alltoall\" or \"allgather\", got \"%s\"",
                     origin, cfg->moe_dispatcher);
  if (with_world) return 0;
  const ModelConfig *m = &cfg->model;
  if (ep * etp > 1 && m->num_experts <= 0)
    return error_set(err, ERR_CONFIG,
                     "%s: parallel.ep %d x etp %d needs a MoE model (the model has no experts; expected ep = etp = 1)",
                     origin, ep, etp);
  if (m->num_experts > 0 && m->num_experts % ep)
    return error_set(err, ERR_CONFIG, "%s: parallel.ep %d does not divide the model's %d experts", origin, ep,
                     m->num_experts);
  if (m->num_experts > 0 && m->moe_intermediate_size % etp)
    return error_set(err, ERR_CONFIG, "%s: parallel.etp %d does not divide the model's moe_intermediate_size %d",
                     origin, etp, m->moe_intermediate_size);
  if (cp > 1 && cfg->seq_len % (2 * cp))
    return error_set(err, ERR_CONFIG,
                     "%s: training.seq_len %d is not divisible by 2 x cp = %d (context parallelism splits every "
                     "sequence into 2 x cp chunks)",
                     origin, cfg->seq_len, 2 * cp);
  long long rows = (long long)cfg->micro_batch_size * cfg->seq_len / cp;
  if (tp > 1 && rows % tp)
    return error_set(err, ERR_CONFIG,
                     "%s: micro_batch_size %d x seq_len %d / cp %d = %lld rows per context-parallel rank are not "
                     "divisible by tp %d",
                     origin, cfg->micro_batch_size, cfg->seq_len, cp, rows, tp);
  return 0;
}
