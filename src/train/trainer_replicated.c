/* Stage replication in the trainer (stage_replication.h): the config
 * check, the layout (stage, sequences, replica group, program), the
 * batch each replica keeps, and the sums over the world. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/grid.h"
#include "comm/timeout.h"
#include "train/stage_replication.h"
#include "train/trainer.h"
#include "train/trainer_net.h"

static void widths_text(const TrainConfig *cfg, char *buf, size_t size) {
  size_t at = 0;
  buf[0] = 0;
  for (int s = 0; s < cfg->num_stage_widths && at < size; s++)
    at += (size_t)snprintf(buf + at, size - at, "%s%d", s ? ", " : "", cfg->stage_widths[s]);
}

int train_config_set_world_replicated(TrainConfig *cfg, int world_ranks, Error *err) {
  const char *origin = cfg->config_path[0] ? cfg->config_path : "config";
  int n = cfg->num_stage_widths, sum = 0;
  char list[160];
  widths_text(cfg, list, sizeof list);
  for (int s = 0; s < n; s++) sum += cfg->stage_widths[s];
  const char *field = "parallel.stage_widths";
  if (cfg->family != TRAIN_FAMILY_TRANSFORMER)
    return error_set(err, ERR_CONFIG, "%s: %s [%s]: stage replication runs transformer models only", origin, field,
                     list);
  if (n > SCHED_MAX_REPLICATED_STAGES)
    return error_set(err, ERR_CONFIG, "%s: %s lists %d stages; a replicated pipeline has at most %d", origin, field, n,
                     SCHED_MAX_REPLICATED_STAGES);
  if (cfg->tp > 1 || cfg->cp > 1 || cfg->ep > 1 || cfg->etp > 1 || cfg->vpp > 1)
    return error_set(err, ERR_CONFIG,
                     "%s: %s [%s]: stage replication runs pipeline x per-stage data parallelism only: parallel.tp, "
                     "cp, ep, etp and vpp must be 1 (got tp %d cp %d ep %d etp %d vpp %d)",
                     origin, field, list, cfg->tp, cfg->cp, cfg->ep, cfg->etp, cfg->vpp);
  /* The replicated program (sched/replicated.c) expands a gpipe or 1f1b
   * pipeline at its default warm-up into pieces per replica; a split
   * backward, chunks or other depths are not expanded (the planner's
   * replicated plans never carry them: plan/replicate.c). */
  if (cfg->schedule == SCHED_SCHEDULE_ZB_H1 || cfg->schedule == SCHED_SCHEDULE_INTERLEAVED)
    return error_set(err, ERR_CONFIG,
                     "%s: parallel.schedule \"%s\" with %s [%s]: a replicated pipeline runs the gpipe or 1f1b order "
                     "(%s); set parallel.schedule to gpipe or 1f1b, or leave it out",
                     origin, cfg->schedule == SCHED_SCHEDULE_ZB_H1 ? "zb-h1" : "interleaved", field, list,
                     cfg->schedule == SCHED_SCHEDULE_ZB_H1 ? "no split backward over replicas"
                                                           : "one model chunk per rank");
  if (cfg->num_warmup > 0)
    return error_set(err, ERR_CONFIG,
                     "%s: parallel.warmup with %s [%s]: a replicated pipeline runs its schedule's own warm-up "
                     "(pp - stage - 1 forwards on every replica); leave parallel.warmup out",
                     origin, field, list);
  if (cfg->dp > 1)
    return error_set(err, ERR_CONFIG,
                     "%s: parallel.dp %d with %s [%s]: the widths are the data parallelism of each stage; leave "
                     "parallel.dp out (or 1)",
                     origin, cfg->dp, field, list);
  if (cfg->pp > 1 && cfg->pp != n)
    return error_set(err, ERR_CONFIG, "%s: parallel.pp is %d but %s [%s] lists %d stages", origin, cfg->pp, field,
                     list, n);
  if (sum != world_ranks)
    return error_set(err, ERR_CONFIG, "%s: %s [%s] needs %d ranks but the job has %d (launch with mpirun -np %d)",
                     origin, field, list, sum, world_ranks, sum);
  if (sum < 2)
    return error_set(err, ERR_CONFIG, "%s: %s [%s] is one rank: leave the field out", origin, field, list);
  for (int s = 0; s < n; s++)
    if (cfg->micro_batch_size % cfg->stage_widths[s])
      return error_set(err, ERR_CONFIG,
                       "%s: %s [%s]: stage %d's width %d does not divide training.micro_batch_size %d (each replica "
                       "takes an equal share of every micro-batch's sequences)",
                       origin, field, list, s, cfg->stage_widths[s], cfg->micro_batch_size);
  if (n > 1 && cfg->model.tie_word_embeddings && cfg->distributed_optimizer)
    return error_set(err, ERR_CONFIG,
                     "%s: %s [%s]: tied embeddings (model.tie_word_embeddings) over replicated stages run without "
                     "the distributed optimizer only (the two ends' shards of the tied tensor differ when their "
                     "widths do); set training.distributed_optimizer to false, or untie the embeddings",
                     origin, field, list);
  cfg->pp = n;
  cfg->dp = 1;
  cfg->world_size = 1; /* one batch of one rank, split inside the stages */
  cfg->world_ranks = world_ranks;
  return 0;
}

int trainer_replication_layout(Trainer *tr, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  TrainerReplication *x = &tr->repl;
  x->group.comm = MPI_COMM_NULL;
  x->r.stages = cfg->num_stage_widths;
  x->r.sequences = cfg->micro_batch_size;
  for (int s = 0; s < x->r.stages; s++) x->r.width[s] = cfg->stage_widths[s];
  int rc = sched_replication_validate(&x->r, err);
  if (rc) return error_wrap(err, "parallel.stage_widths");
  x->on = 1;
  tr->pp = x->r.stages;
  tr->vpp = tr->tp = tr->dp = 1;
  tr->world = sched_replication_ranks(&x->r);
  tr->grad_scale = 1.0f / ((float)cfg->grad_accum_steps * (float)x->r.width[x->r.stages - 1]);
  if (!comm_initialized() || comm_world_size() != tr->world)
    return error_set(err, ERR_CONFIG,
                     "parallel.stage_widths: the stages need %d ranks but this process runs in a world of %d "
                     "rank(s) (start it with mpirun -np %d)",
                     tr->world, comm_initialized() ? comm_world_size() : 1, tr->world);
  if ((rc = comm_set_collective_timeout(cfg->collective_timeout_s, err))) return rc;
  tr->world_rank = comm_world_rank();
  x->stage = sched_replication_stage_of(&x->r, tr->world_rank, &x->replica);
  sched_replication_range(&x->r, x->stage, x->replica, &x->seq_begin, &x->local_batch);
  if ((rc = comm_group_split(comm_world(), x->stage, x->replica, "stage", &x->group, err))) return rc;
  /* The program's rank is the world rank; the loader of every rank reads
   * the one batch (dp 1), and the replicas reduce over their stage. */
  tr->pp_rank = tr->world_rank;
  tr->tp_rank = tr->dp_rank = 0;
  tr->dp_group = &x->group;
  tr->pp_group = comm_world();
  tr->tp_group = tr->mp_group = NULL;
  SchedConfig sc;
  if ((rc = train_config_sched(cfg, x->r.stages, 1, &sc, err))) return rc;
  rc = sched_build_replicated(&sc, &x->r, &tr->prog, err);
  return rc ? error_wrap(err, "parallel.stage_widths") : 0;
}

void trainer_replication_free(Trainer *tr) {
  if (tr->repl.on) comm_group_free(&tr->repl.group);
  memset(&tr->repl, 0, sizeof tr->repl);
}

void trainer_replication_select(const Trainer *tr, int *tokens, int *targets, int accum) {
  const TrainerReplication *x = &tr->repl;
  size_t T = (size_t)tr->cfg->seq_len, B = (size_t)x->r.sequences, n = (size_t)x->local_batch * T;
  for (int i = 0; i < accum; i++) {
    size_t from = ((size_t)i * B + (size_t)x->seq_begin) * T, to = (size_t)i * n;
    memmove(tokens + to, tokens + from, n * sizeof *tokens);
    memmove(targets + to, targets + from, n * sizeof *targets);
  }
}

int trainer_replication_sum_losses(Trainer *tr, double *sums, int n, int64_t *counts, size_t n_counts, Error *err) {
  const TrainerReplication *x = &tr->repl;
  /* sums[0..1] are the loss and its tokens (every replica its own); the
   * rest are per-micro-batch values each replica computes on its part. */
  for (int i = 2; i < n; i++) sums[i] /= x->r.width[x->stage];
  int rc = comm_allreduce_f64(comm_world(), sums, (size_t)n, COMM_SUM, NULL, err);
  if (!rc && n_counts) rc = comm_allreduce_i64(comm_world(), counts, n_counts, COMM_SUM, NULL, err);
  return rc;
}

int trainer_replication_sum_tied(Trainer *tr, Error *err) {
  /* After each stage's reduction every replica of the first stage holds
   * the embedding's gradient G_e summed over its replicas, and every
   * replica of the last stage the head copy's G_h. Each rank needs the
   * other end's sum: replica i receives from replica i mod (the other
   * width) there, and sends to each replica j there with j mod (its own
   * width) == i. Both ends then hold G_e + G_h (fp32 addition commutes, so
   * bit for bit the same on both). */
  const TrainerReplication *x = &tr->repl;
  const int last = x->r.stages - 1, other = x->stage == 0 ? last : 0;
  const int mine = x->r.width[x->stage], theirs = x->r.width[other];
  const int base = sched_replication_first_rank(&x->r, other);
  const size_t n = tr->tied_numel;
  float *g = tr->model.grads + tr->tied_offset;
  memcpy(tr->tied_send, g, n * sizeof(float));
  CommRequest *reqs = malloc((size_t)(1 + theirs) * sizeof *reqs);
  if (!reqs) return error_set(err, ERR_NOMEM, "out of memory summing the tied embedding gradients");
  int nreq = 0, rc = 0;
  const int tag = 1; /* the only message of its kind between two ranks in a step */
  comm_request_init(&reqs[nreq]);
  rc = comm_recv_f32(comm_world(), base + x->replica % theirs, tag, tr->tied_recv, n, &reqs[nreq++], err);
  for (int j = x->replica; !rc && j < theirs; j += mine) {
    comm_request_init(&reqs[nreq]);
    rc = comm_send_f32(comm_world(), base + j, tag, tr->tied_send, n, &reqs[nreq++], err);
  }
  if (!rc) rc = comm_wait_all(reqs, nreq, err);
  free(reqs);
  if (rc) return error_wrap(err, "summing the tied embedding gradients over the replicated pipeline");
  for (size_t i = 0; i < n; i++) g[i] += tr->tied_recv[i];
  return 0;
}

int trainer_replication_sumsq(Trainer *tr, double *sumsq, Error *err) {
  /* With the distributed optimizer (a stage of width > 1) each replica
   * holds its shard of the stage's gradient; a stage of width 1 the whole. */
  if (tr->zero) *sumsq = dist_optimizer_local_sumsq(&tr->dist_opt, &tr->net, 0);
  else *sumsq = tr->repl.replica == 0 ? optimizer_local_sumsq(&tr->net, 0) : 0.0;
  return trainer_sum_over_group(comm_world(), sumsq, err);
}
