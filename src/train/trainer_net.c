/* Training a network of nets/ with the trainer (see trainer_net.h): its
 * creation, one optimizer step, validation and the banner. */
#include "train/trainer_net.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "kern/vecops.h"
#include "sched/builders.h"
#include "train/nonfinite.h"
#include "train/phases.h"

/* Every rank a data-parallel replica; the gradient summed over all of them. */
static int create_data_parallel(Trainer *tr, const OptimizerConfig *oc, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  tr->world_rank = comm_world_rank();
  tr->dp_rank = tr->world_rank;
  tr->dp_group = tr->world > 1 ? comm_world() : NULL;
  tr->reduce_grads = tr->dp > 1;
  tr->zero = tr->dp > 1 && cfg->distributed_optimizer != 0;
  int rc = 0;
  if (tr->reduce_grads) {
    double bucket_bytes = cfg->bucket_mb > 0 ? cfg->bucket_mb * 1e6 : (double)tr->net.num_values;
    /* Buckets never mix parameter groups that step in phases of their own. */
    size_t cuts[128];
    int num_cuts = phases_group_cuts(&tr->net, cuts, 128);
    if (num_cuts > 128) return error_set(err, ERR_CONFIG, "%d parameter group boundaries, at most 128", num_cuts);
    rc = dp_grads_create(&tr->dp_grads, tr->dp_group, tr->net.grads, tr->net.num_values, num_cuts ? cuts : NULL,
                         num_cuts, bucket_bytes, tr->zero, err);
    if (!rc) rc = phases_tag_buckets(&tr->dp_grads, &tr->net, err);
    if (!rc) dp_grads_set_overlap(&tr->dp_grads, 0); /* one chunk: the whole gradient is ready at once */
    if (!rc) rc = dp_grads_calibrate(&tr->dp_grads, err);
  }
  if (!rc && tr->zero) {
    rc = dist_optimizer_create(&tr->dist_opt, &tr->dp_grads, &tr->net, oc, err);
    tr->opt.cfg = *oc;
    tr->opt.num_params = tr->net.num_values;
  } else if (!rc) {
    rc = optimizer_create(&tr->opt, tr->net.num_values, oc, err);
  }
  return rc;
}

/* The sum over the replicas in rank order, so that every rank gets the same bits. */
static int sum_over_replicas(const Trainer *tr, double *x, Error *err) {
  return tr->dp > 1 ? trainer_sum_over_group(comm_world(), x, err) : 0;
}

/* Micro-batch mb of this replica's share of the step: samples are numbered
 * so that the replicas' micro-batches of one step tile the global batch, as
 * a one-rank run's micro-batches do. */
static MlpBatch step_batch(const Trainer *tr, int mb) {
  const TrainConfig *cfg = tr->cfg;
  size_t at = (size_t)mb * (size_t)cfg->micro_batch_size;
  MlpBatch b = {.n = cfg->micro_batch_size, .x = tr->net_x + at * cfg->mlp.inputs, .y = tr->net_y + at};
  return b;
}

/* AdamW of `group` (-1: all) after the reduction, with that gradient's global norm. */
static int update(Trainer *tr, int group, Error *err) {
  double sumsq = phases_local_sumsq(tr, group);
  int rc = tr->zero ? sum_over_replicas(tr, &sumsq, err) : 0;
  if (rc) return error_wrap(err, "global gradient norm");
  return trainer_apply_group_update(tr, group, sumsq, err);
}

/* ---- the program's actions (executor handlers) ---- */

static int net_forward(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  const TrainConfig *cfg = tr->cfg;
  MlpBatch b = step_batch(tr, a->microbatch);
  uint64_t step_first = (uint64_t)tr->step * (uint64_t)cfg->global_batch_size;
  uint64_t first = step_first + ((uint64_t)tr->dp_rank * (uint64_t)cfg->grad_accum_steps + (uint64_t)a->microbatch) *
                                    (uint64_t)cfg->micro_batch_size;
  mlp_synthetic_batch(&cfg->mlp, cfg->seed, first, cfg->micro_batch_size, &b);
  phases_enter(tr, a->group);
  int rc = tr->net.ops->forward(&tr->net, a->chunk, &b, err);
  NetMetric m[NET_MAX_METRICS];
  int n = rc ? 0 : tr->net.ops->metrics(&tr->net, m, NET_MAX_METRICS);
  for (int i = 0; i < n && i < NET_MAX_METRICS; i++) tr->net_metric_sums[i] += m[i].value;
  return rc;
}

static int net_backward(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  MlpBatch b = step_batch(tr, a->microbatch);
  return tr->net.ops->backward(&tr->net, a->chunk, &b, tr->grad_scale, err);
}

/* One chunk: the whole gradient (of the phase's group) is ready; its buckets start here. */
static int net_grad_reduce(void *ctx, const SchedAction *a, Error *err) {
  return phases_start_reduce(ctx, a->group, err);
}

static int net_prepare_optim(void *ctx, const SchedAction *a, Error *err) {
  return phases_finish_reduce(ctx, a->group, err);
}

static int net_optim(void *ctx, const SchedAction *a, Error *err) { return update(ctx, a->group, err); }

/* The program of one step (schedule none: F, B per micro-batch, the
 * reduction, the update) and the executor that runs it with the handlers
 * above, as the transformer's step does with its own. */
static int create_program(Trainer *tr, Error *err) {
  SchedConfig sc = {.schedule = SCHED_SCHEDULE_NONE, .pp = 1, .vpp = 1, .microbatches = tr->cfg->grad_accum_steps,
                    .param_groups = tr->net.num_param_groups};
  int rc = sched_build(&sc, &tr->prog, err);
  if (!rc) rc = executor_create(&tr->exec, tr->prog, 0, tr, err);
  if (rc) return rc;
  executor_set_handler(&tr->exec, SCHED_FWD, net_forward);
  executor_set_handler(&tr->exec, SCHED_BWD, net_backward);
  executor_set_handler(&tr->exec, SCHED_GRAD_REDUCE, net_grad_reduce);
  executor_set_prepare(&tr->exec, SCHED_OPTIM, net_prepare_optim);
  executor_set_handler(&tr->exec, SCHED_OPTIM, net_optim);
  return 0;
}

int trainer_net_create(Trainer *tr, const TrainConfig *cfg, Error *err) {
  tr->threads = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
  omp_set_num_threads(tr->threads);
  openblas_set_num_threads(tr->threads);
  tr->tp = tr->pp = tr->vpp = tr->cp = tr->ep = tr->etp = tr->edp = 1;
  tr->dp = cfg->world_size > 0 ? cfg->world_size : 1;
  tr->world = tr->dp;
  tr->grad_scale = 1.0f / ((float)cfg->grad_accum_steps * (float)tr->dp);
  int B = cfg->micro_batch_size;
  int rc = mlp_create(&tr->net, &cfg->mlp, B, err);
  if (rc) return error_wrap(err, "creating the mlp");
  mlp_init_weights(&tr->net, cfg->seed);
  size_t samples = (size_t)B * (size_t)cfg->grad_accum_steps;
  tr->net_x = malloc(samples * cfg->mlp.inputs * sizeof(float));
  tr->net_y = malloc(samples * sizeof(int));
  if (!tr->net_x || !tr->net_y) return error_set(err, ERR_NOMEM, "out of memory for the mlp's batch");
  tr->has_val = cfg->eval_batches > 0;
  OptimizerConfig oc = trainer_optimizer_config(cfg);
  if ((rc = create_data_parallel(tr, &oc, err))) return rc;
  if ((rc = create_program(tr, err))) return rc;
  return 0;
}

void trainer_net_free(Trainer *tr) {
  network_free(&tr->net);
  free(tr->net_x);
  free(tr->net_y);
  tr->net_x = NULL;
  tr->net_y = NULL;
}

int trainer_net_step(Trainer *tr, TrainStepResult *res, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  double t0 = timer_now();
  memset(tr->net.grads, 0, tr->net.num_values * sizeof(float));
  tr->step_skipped = 0;
  nonfinite_test_poison(tr, "grad");
  if (tr->reduce_grads) dp_grads_begin(&tr->dp_grads);
  memset(tr->net_metric_sums, 0, sizeof tr->net_metric_sums);
  tr->phase = -1;
  int rc = executor_run(&tr->exec, err);
  if (rc) return rc;
  /* The step's metrics: means over the micro-batches of every replica. */
  memset(res, 0, sizeof *res);
  res->num_metrics = tr->net.ops->metrics(&tr->net, res->metrics, NET_MAX_METRICS);
  if (res->num_metrics > NET_MAX_METRICS) res->num_metrics = NET_MAX_METRICS;
  for (int i = 0; i < res->num_metrics && !rc; i++) {
    double sum = tr->net_metric_sums[i];
    rc = sum_over_replicas(tr, &sum, err);
    /* every phase ran the step's forwards */
    res->metrics[i].value = sum / (cfg->grad_accum_steps * tr->dp * tr->net.num_param_groups);
  }
  if (rc) return rc;
  tr->step++;
  nonfinite_test_poison(tr, "weight");
  res->step = tr->step;
  res->skipped = tr->step_skipped;
  res->loss = res->num_metrics > 0 ? res->metrics[0].value : NAN;
  res->lr = tr->acc.info.lr;
  res->grad_norm = tr->acc.info.grad_norm;
  res->tokens = (long)cfg->global_batch_size;
  res->seconds = timer_now() - t0;
  if (tr->reduce_grads) res->reduce_exposed_seconds = tr->dp_grads.exposed_seconds;
  return 0;
}

/* The same eval_batches micro-batches of validation samples every time,
 * shared out over the replicas. */
int trainer_net_evaluate(Trainer *tr, EvalResult *res, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  double t0 = timer_now();
  int B = cfg->micro_batch_size;
  double loss = 0;
  int rc = 0;
  MlpBatch batch = {.x = tr->net_x, .y = tr->net_y};
  for (int k = tr->dp_rank; k < cfg->eval_batches && !rc; k += tr->dp) {
    mlp_synthetic_batch(&cfg->mlp, cfg->seed, MLP_VAL_FIRST_SAMPLE + (uint64_t)k * (uint64_t)B, B, &batch);
    rc = tr->net.ops->forward(&tr->net, 0, &batch, err);
    NetMetric m[NET_MAX_METRICS];
    if (!rc && tr->net.ops->metrics(&tr->net, m, NET_MAX_METRICS) > 0) loss += m[0].value;
  }
  if (!rc) rc = sum_over_replicas(tr, &loss, err);
  if (rc) return rc;
  memset(res, 0, sizeof *res);
  res->batches = cfg->eval_batches;
  res->loss = cfg->eval_batches > 0 ? loss / cfg->eval_batches : NAN;
  res->tokens = (long)cfg->eval_batches * B;
  res->seconds = timer_now() - t0;
  return 0;
}

void trainer_net_print_model(const Trainer *tr, FILE *out) {
  const TrainConfig *cfg = tr->cfg;
  const MlpConfig *m = &cfg->mlp;
  fprintf(out, "  model    mlp: %d inputs, hidden [", m->inputs);
  for (int i = 0; i < m->num_hidden; i++) fprintf(out, "%s%d", i ? ", " : "", m->hidden[i]);
  fprintf(out, "] (tanh), %d classes; %zu parameters", m->classes, tr->net.num_values);
  if (tr->net.num_param_groups > 1)
    fprintf(out, " in %d parameter groups stepped in turn (one phase each)", tr->net.num_param_groups);
  fputc('\n', out);
  fprintf(out, "  data     synthetic classification from seed %llu (a random linear teacher); %d validation "
               "batches\n", (unsigned long long)cfg->seed, cfg->eval_batches);
  fprintf(out, "  batch    %d x %d accumulation x %d replica(s) = %d samples per step\n", cfg->micro_batch_size,
          cfg->grad_accum_steps, tr->dp, cfg->global_batch_size);
}
