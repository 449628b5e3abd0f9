/* The parallel part of the run configuration: the layout against the MPI
 * world, the schedule's default, and the checks of schedule and pipeline
 * partition that train_config_finalize runs, and of the trace window. See
 * train_config.h. */
#include <stdio.h>
#include <string.h>

#include "sched/builders.h"
#include "sched/partition.h"
#include "train/stage_replication.h"
#include "train/trace_session.h"
#include "train/train_config.h"

int train_config_set_world(TrainConfig *cfg, int world_ranks, Error *err) {
  const char *origin = cfg->config_path[0] ? cfg->config_path : "config";
  if (world_ranks < 1) return error_set(err, ERR_ARG, "train_config_set_world: %d ranks", world_ranks);
  if (cfg->num_stage_widths > 0) return train_config_set_world_replicated(cfg, world_ranks, err);
  if (cfg->cp > 1 || cfg->ep > 1 || cfg->etp > 1) return train_config_set_world_fold(cfg, world_ranks, err);
  long long model_ranks = (long long)cfg->tp * cfg->pp;
  if (cfg->dp > 0) {
    long long need = model_ranks * cfg->dp;
    if (need != world_ranks) {
      char fit[160] = "";
      if (world_ranks % model_ranks == 0)
        snprintf(fit, sizeof fit, ", or give --dp %lld", world_ranks / model_ranks);
      return error_set(err, ERR_CONFIG,
                       "%s: parallel.dp (--dp) is %d but the job has %d rank(s): tp %d x pp %d x dp %d = %lld ranks "
                       "(launch with mpirun -np %lld%s)",
                       origin, cfg->dp, world_ranks, cfg->tp, cfg->pp, cfg->dp, need, need, fit);
    }
  } else if (world_ranks % model_ranks != 0) {
    return error_set(err, ERR_CONFIG,
                     "%s: parallel.tp %d x pp %d = %lld model-parallel ranks do not divide the job's %d rank(s) "
                     "(launch a multiple of %lld ranks, e.g. mpirun -np %lld)",
                     origin, cfg->tp, cfg->pp, model_ranks, world_ranks, model_ranks, model_ranks);
  }
  cfg->world_size = (int)(world_ranks / model_ranks);
  cfg->world_ranks = world_ranks;
  return 0;
}

SchedScheduleKind train_config_schedule(const TrainConfig *cfg) {
  if (cfg->schedule >= 0) return (SchedScheduleKind)cfg->schedule;
  if (cfg->pp <= 1) return SCHED_SCHEDULE_NONE;
  return cfg->vpp > 1 ? SCHED_SCHEDULE_INTERLEAVED : SCHED_SCHEDULE_1F1B;
}

int train_config_sched(const TrainConfig *cfg, int pp, int vpp, SchedConfig *sc, Error *err) {
  memset(sc, 0, sizeof *sc);
  sc->schedule = train_config_schedule(cfg);
  sc->pp = pp;
  sc->vpp = vpp;
  sc->microbatches = cfg->grad_accum_steps;
  /* The order costs place the sends: a plan's make this the program it priced. */
  sc->order_fwd_cost = cfg->order_fwd_cost;
  sc->order_bwd_cost = cfg->order_bwd_cost;
  if (cfg->num_warmup == 0) return 0;
  if (cfg->num_warmup != pp || cfg->num_warmup > SCHED_MAX_WARMUP_RANKS)
    return error_set(err, ERR_CONFIG, "parallel.warmup: %d warm-up depths for pp %d: give one per pipeline rank",
                     cfg->num_warmup, pp);
  sc->warmup_set = cfg->num_warmup;
  memcpy(sc->warmup, cfg->warmup, (size_t)cfg->num_warmup * sizeof *cfg->warmup);
  return 0;
}

int train_config_check_pipeline(const TrainConfig *cfg, const char *origin, Error *err) {
  if (cfg->vpp > 1 && cfg->pp < 2)
    return error_set(err, ERR_CONFIG, "%s: parallel.vpp %d needs pp >= 2 (model chunks interleave over pipeline ranks)",
                     origin, cfg->vpp);
  SchedConfig sc;
  if (train_config_sched(cfg, cfg->pp, cfg->vpp, &sc, err)) return error_wrap(err, "%s", origin);
  int rc = sched_config_validate(&sc, err);
  if (rc)
    return error_wrap(err, "%s: parallel.schedule %s with pp %d, vpp %d and %d micro-batches per step", origin,
                      sched_schedule_name(sc.schedule), cfg->pp, cfg->vpp, cfg->grad_accum_steps);
  int stages = cfg->pp * cfg->vpp;
  if (cfg->num_layers_per_stage == 0 && stages == 1) return 0;
  SchedPartitionSpec spec = {.num_layers = cfg->model.num_layers, .pp = cfg->pp, .vpp = cfg->vpp,
                             .layers_per_stage = cfg->num_layers_per_stage ? cfg->layers_per_stage : NULL,
                             .num_given = cfg->num_layers_per_stage, .allow_empty = 1};
  SchedPartition part;
  if ((rc = sched_partition_make(&spec, &part, err)))
    return error_wrap(err, "%s: parallel.layers_per_stage (pp %d x vpp %d = %d stages, %d blocks)", origin, cfg->pp,
                      cfg->vpp, stages, cfg->model.num_layers);
  for (int s = 1; s + 1 < part.num_stages && !rc; s++)
    if (part.layers[s] == 0)
      rc = error_set(err, ERR_CONFIG,
                     "%s: parallel.layers_per_stage gives stage %d no blocks (only the first stage, which holds the "
                     "embedding, and the last, which holds the head, may have none)",
                     origin, s);
  if (!rc && part.num_stages == 1 && part.layers[0] == 0)
    rc = error_set(err, ERR_CONFIG, "%s: parallel.layers_per_stage: the model has no blocks", origin);
  sched_partition_free(&part);
  return rc;
}

int train_config_check_trace(const TrainConfig *cfg, const char *origin, Error *err) {
  if (!cfg->trace_steps[0]) return 0;
  if (!cfg->trace_path[0])
    return error_set(err, ERR_CONFIG, "%s: trace.steps '%s' without trace.path (give --trace FILE too)", origin,
                     cfg->trace_steps);
  TraceSessionOptions opt = trace_session_options_default();
  if (trace_session_parse_steps(cfg->trace_steps, cfg->steps, &opt, err))
    return error_wrap(err, "%s: trace.steps", origin);
  return 0;
}
