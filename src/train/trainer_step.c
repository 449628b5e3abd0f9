/* The trainer's step machinery: building this rank's part of a (possibly
 * parallel) run — rank grid, sched program, model shard, pipeline, gradient
 * buckets, optimizer — and running one step and one validation pass. The
 * loop, checkpoints and reporting live in trainer.c. See trainer.h. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "comm/timeout.h"
#include "comm/waits.h"
#include "kern/precision.h"
#include "kern/vecops.h"
#include "model/flops.h"
#include "sched/builders.h"
#include "sched/partition.h"
#include "train/net_transformer.h"
#include "train/nonfinite.h"
#include "train/trace_session.h"
#include "train/trainer.h"
#include "train/trainer_fold.h"
#include "train/trainer_net.h"
#include "train/pipeline_replicated.h"

/* ---- the step's actions (executor handlers) ---- */

/* FWD and BWD run the network's chunk passes, SEND and RECV its transfers
 * between pipeline stages, through the network interface. */
static int run_forward(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  return tr->net.ops->forward(&tr->net, a->chunk, a, err);
}

static int run_backward(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  return tr->net.ops->backward(&tr->net, a->chunk, a, tr->grad_scale, err);
}

/* The weight-gradient half of a split backward (zb-h1): the transformer's
 * own pipeline, as no other network splits its backward. */
static int run_backward_weights(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  return pipeline_backward_weights(&tr->pipe, a, err);
}

static int run_send(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  return tr->net.ops->send(&tr->net, a, err);
}

static int run_recv(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  return tr->net.ops->recv(&tr->net, a, err);
}

/* Before FWD and BWD: the received tensor they consume. */
static int prepare_compute(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  return tr->net.ops->prepare ? tr->net.ops->prepare(&tr->net, a, err) : 0;
}

/* One GRAD_REDUCE per model chunk (bucket id = chunk); the dp_grads
 * buckets are finer and most started inside the chunk's last backward: this
 * starts the rest. The waiting happens before the optimizer. */
static int run_grad_reduce(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  if (!tr->reduce_grads) return 0;
  size_t off, count;
  model_chunk_params(&tr->model, a->bucket >= 0 ? a->bucket : a->chunk, &off, &count);
  return dp_grads_start_range(&tr->dp_grads, off, off + count, err);
}

/* Sums x over g, identically on every rank: every value is gathered and
 * added in rank order (an all-reduce may round differently per rank, and
 * the clipping factor must not). */
int trainer_sum_over_group(const CommGroup *g, double *x, Error *err) {
  if (!g || g->size <= 1) return 0;
  int64_t mine, *all = malloc((size_t)g->size * sizeof *all);
  if (!all) return error_set(err, ERR_NOMEM, "out of memory");
  memcpy(&mine, x, sizeof mine);
  int rc = comm_allgather_i64(g, &mine, all, 1, NULL, err);
  if (!rc) {
    double s = 0;
    for (int i = 0; i < g->size; i++) {
      double v;
      memcpy(&v, &all[i], sizeof v);
      s += v;
    }
    *x = s;
  }
  free(all);
  return rc;
}

/* Tied embeddings over the pipeline: the first stage's embed.weight and the
 * last stage's LM-head copy get the sum of both gradients (after the DP
 * reduction; with ZeRO-1 on this rank's blocks, which cover the same
 * elements on both sides because the tensor is a bucket segment of its own
 * with the same bucket size). */
static int sum_tied_gradients(Trainer *tr, Error *err) {
  if (tr->tied_peer < 0) return 0;
  if (tr->repl.on) return trainer_replication_sum_tied(tr, err);
  size_t n = 0;
  if (!tr->zero) {
    n = tr->tied_numel;
    memcpy(tr->tied_send, tr->model.grads + tr->tied_offset, n * sizeof(float));
  } else {
    const DpGrads *g = &tr->dp_grads;
    for (int b = 0; b < g->num_buckets; b++) {
      const DpBucket *k = &g->buckets[b];
      if (k->begin < tr->tied_offset || k->end > tr->tied_offset + tr->tied_numel) continue;
      size_t lo, hi;
      dp_grads_own_range(g, b, &lo, &hi);
      memcpy(tr->tied_send + n, g->shard + k->shard_offset, (hi - lo) * sizeof(float));
      n += hi - lo;
    }
  }
  CommRequest reqs[2];
  comm_request_init(&reqs[0]);
  comm_request_init(&reqs[1]);
  const int tag = 1; /* the only message of its kind between the two ranks in a step */
  int rc = comm_recv_f32(tr->pp_group, tr->tied_peer, tag, tr->tied_recv, n, &reqs[0], err);
  if (!rc) rc = comm_send_f32(tr->pp_group, tr->tied_peer, tag, tr->tied_send, n, &reqs[1], err);
  if (!rc) rc = comm_wait_all(reqs, 2, err);
  if (rc) return error_wrap(err, "summing the tied embedding gradients over the pipeline");
  if (!tr->zero) {
    float *gr = tr->model.grads + tr->tied_offset;
    for (size_t i = 0; i < n; i++) gr[i] += tr->tied_recv[i];
    return 0;
  }
  const DpGrads *g = &tr->dp_grads;
  size_t at = 0;
  for (int b = 0; b < g->num_buckets; b++) {
    const DpBucket *k = &g->buckets[b];
    if (k->begin < tr->tied_offset || k->end > tr->tied_offset + tr->tied_numel) continue;
    size_t lo, hi;
    dp_grads_own_range(g, b, &lo, &hi);
    float *gr = g->shard + k->shard_offset;
    for (size_t i = 0; i < hi - lo; i++) gr[i] += tr->tied_recv[at + i];
    at += hi - lo;
  }
  return 0;
}

/* Before OPTIM: the gradient reductions the GRAD_REDUCE actions posted
 * (waited for here, outside the optimizer's span, and stamped complete). */
static int prepare_optim(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  (void)a;
  if (!tr->reduce_grads) return 0;
  int rc = dp_grads_finish(&tr->dp_grads, err);
  if (!rc && tr->trace)
    for (int i = 0; i < tr->exec.num_actions; i++)
      if (tr->exec.actions[i].kind == SCHED_GRAD_REDUCE) trace_session_complete(tr->trace, &tr->exec.actions[i]);
  return rc;
}

static int run_optim(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  (void)a;
  int rc = sum_tied_gradients(tr, err);
  if (rc) return rc;
  /* The global norm counts each logical element once: TP-replicated tensors
   * on TP rank 0, tied copies never; ZeRO-1 shards add up over the DP group
   * too. */
  double sumsq = 0;
  if (tr->world == 1) {
    sumsq = vec_sumsq(tr->net.grads, tr->net.num_values);
  } else if (tr->repl.on) {
    rc = trainer_replication_sumsq(tr, &sumsq, err);
  } else if (tr->folded && !tr->zero) {
    rc = trainer_fold_sumsq(tr, &sumsq, err);
  } else {
    sumsq = tr->zero ? dist_optimizer_local_sumsq(&tr->dist_opt, &tr->net, tr->tp_rank)
                     : optimizer_local_sumsq(&tr->net, tr->tp_rank);
    rc = trainer_sum_over_group(tr->zero ? comm_world() : tr->mp_group, &sumsq, err);
  }
  if (rc) return error_wrap(err, "global gradient norm");
  return trainer_apply_update(tr, sumsq, err);
}

int trainer_apply_update(Trainer *tr, double sumsq, Error *err) {
  return trainer_apply_group_update(tr, -1, sumsq, err);
}

int trainer_apply_group_update(Trainer *tr, int group, double sumsq, Error *err) {
  /* Nothing touches the weights before every rank knows the step is finite. */
  int skip, rc;
  if ((rc = nonfinite_guard_step(tr, sumsq, &skip, err)) || skip) return rc;
  if (tr->zero) return dist_optimizer_apply_group(&tr->dist_opt, &tr->net, group, sumsq, &tr->acc.info, err);
  return optimizer_apply_group(&tr->opt, &tr->net, group, sumsq, &tr->acc.info, err);
}

/* ---- building ---- */

/* This rank's chunks from the pipeline partition: chunk c is virtual stage
 * c * pp + pp_rank. */
static int make_shard(const Trainer *tr, ModelShard *shard, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  model_shard_default(&cfg->model, shard);
  shard->tp_size = tr->tp;
  shard->tp_rank = tr->tp_rank;
  shard->num_slots = pipeline_slots_needed(tr->prog, tr->pp_rank);
  shard->split_backward = tr->prog->config.split_backward;
  train_config_recompute_shard(cfg, &shard->recompute_method, &shard->recompute_num_layers,
                               &shard->recompute_modules);
  trainer_fold_shard(tr, shard);
  if (tr->pp * tr->vpp == 1) return 0;
  SchedPartitionSpec spec = {.num_layers = cfg->model.num_layers, .pp = tr->pp, .vpp = tr->vpp,
                             .layers_per_stage = cfg->num_layers_per_stage ? cfg->layers_per_stage : NULL,
                             .num_given = cfg->num_layers_per_stage, .allow_empty = 1};
  SchedPartition part;
  int rc = sched_partition_make(&spec, &part, err);
  if (rc) return error_wrap(err, "pipeline partition");
  shard->num_chunks = tr->vpp;
  for (int c = 0; c < tr->vpp; c++) {
    int s = tr->repl.on ? tr->repl.stage : c * tr->pp + tr->pp_rank;
    shard->layer_begin[c] = part.first_layer[s];
    shard->layer_end[c] = part.first_layer[s] + part.layers[s];
    shard->has_embedding[c] = s == 0;
    shard->has_head[c] = s == part.num_stages - 1;
  }
  sched_partition_free(&part);
  return 0;
}

/* The tensor whose gradient is summed with the other end of the pipeline. */
static int find_tied(Trainer *tr, Error *err) {
  tr->tied_peer = -1;
  if (!tr->cfg->model.tie_word_embeddings || tr->pp <= 1) return 0;
  /* Replicated stages: the program's rank is the world rank, the stage is
   * what says first or last (the peers are the other end's replicas,
   * trainer_replication_sum_tied). */
  const int stage = tr->repl.on ? tr->repl.stage : tr->pp_rank;
  const ParamTensor *t = NULL;
  for (int i = 0; i < tr->model.num_tensors && !t; i++) {
    const ParamTensor *p = &tr->model.tensors[i];
    if (p->tied_copy || (stage == 0 && !strcmp(p->name, "embed.weight"))) t = p;
  }
  if (stage != 0 && stage != tr->pp - 1) return 0;
  if (!t)
    return error_set(err, ERR_INTERNAL, "tied embeddings: pipeline stage %d holds neither embed.weight nor its copy",
                     stage);
  tr->tied_peer = tr->repl.on ? sched_replication_first_rank(&tr->repl.r, stage == 0 ? tr->pp - 1 : 0)
                              : stage == 0 ? tr->pp - 1 : 0;
  tr->tied_offset = t->offset;
  tr->tied_numel = t->numel;
  tr->tied_send = malloc(t->numel * sizeof(float));
  tr->tied_recv = malloc(t->numel * sizeof(float));
  if (!tr->tied_send || !tr->tied_recv) return error_set(err, ERR_NOMEM, "out of memory for the tied gradient");
  return 0;
}

/* The rank grid and its groups. */
static int setup_grid(Trainer *tr, Error *err) {
  if (!comm_initialized() || comm_world_size() != tr->world)
    return error_set(err, ERR_CONFIG,
                     "parallel: tp %d x cp %d x pp %d x dp %d = %d ranks but this process runs in a world of %d "
                     "rank(s) (start it with mpirun -np %d)",
                     tr->tp, tr->cp, tr->pp, tr->dp, tr->world, comm_initialized() ? comm_world_size() : 1, tr->world);
  tr->grid = calloc(1, sizeof *tr->grid);
  if (!tr->grid) return error_set(err, ERR_NOMEM, "trainer: out of memory for the rank grid");
  GridSizes sizes = {.world = tr->world, .tp = tr->tp, .cp = tr->cp, .dp = tr->dp, .pp = tr->pp, .etp = tr->etp,
                     .ep = tr->ep, .edp = 0};
  int rc = comm_grid_create(&sizes, tr->grid, err);
  if (rc) {
    free(tr->grid);
    tr->grid = NULL;
    return rc;
  }
  tr->world_rank = comm_world_rank();
  tr->tp_rank = tr->grid->coords.tp;
  tr->pp_rank = tr->grid->coords.pp;
  tr->dp_rank = tr->grid->coords.dp;
  tr->dp_group = comm_grid_group(tr->grid, GRID_GROUP_DP_CP);
  tr->tp_group = comm_grid_group(tr->grid, GRID_GROUP_TP);
  tr->pp_group = comm_grid_group(tr->grid, GRID_GROUP_PP);
  tr->mp_group = comm_grid_group(tr->grid, GRID_GROUP_TP_PP);
  trainer_fold_coords(tr);
  return 0;
}

/* Data parallelism: the buckets (cut at chunk boundaries and around a tied
 * embedding) and the sharded optimizer. */
static int setup_data_parallel(Trainer *tr, const OptimizerConfig *oc, const CommHostLayout *host, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  tr->zero = cfg->distributed_optimizer != 0;
  size_t cuts[2 * MODEL_MAX_CHUNKS + 2];
  int n = 0;
  for (int c = 0; c < tr->model.shard.num_chunks; c++) {
    size_t off, count;
    model_chunk_params(&tr->model, c, &off, &count);
    cuts[n++] = off;
    cuts[n++] = off + count;
  }
  if (tr->tied_peer >= 0) {
    cuts[n++] = tr->tied_offset;
    cuts[n++] = tr->tied_offset + tr->tied_numel;
  }
  /* Every pipeline stage buckets with the same size, so that a tied
   * embedding splits alike on both of its stages. */
  double bucket_bytes = cfg->bucket_mb * 1e6;
  if (!(bucket_bytes > 0)) {
    bucket_bytes = 25.0 * 1024 * 1024;
    if (bucket_bytes > (double)tr->model.num_params) bucket_bytes = (double)tr->model.num_params;
    if (tr->pp > 1 && !tr->repl.on) { /* (replicated stages tie only without ZeRO-1) */
      int rc = comm_allreduce_f64(tr->pp_group, &bucket_bytes, 1, COMM_MIN, NULL, err);
      if (rc) return rc;
    }
  }
  int rc = tr->folded ? trainer_fold_grads_create(tr, cuts, n, bucket_bytes, err)
                      : dp_grads_create(&tr->dp_grads, tr->dp_group, tr->model.grads, tr->model.num_params, cuts, n,
                                        bucket_bytes, tr->zero, err);
  if (!rc && tr->zero) {
    rc = dist_optimizer_create(&tr->dist_opt, &tr->dp_grads, &tr->net, oc, err);
    tr->opt.cfg = *oc;
    tr->opt.num_params = tr->model.num_params;
  }
  if (!rc) rc = dp_grads_choose_overlap(&tr->dp_grads, cfg->overlap_grad_reduce, host, err);
  if (!rc) rc = dp_grads_calibrate(&tr->dp_grads, err);
  return rc;
}

/* Threads, GEMM library and precision, for every family before anything
 * runs: a CPU without bf16 stops here, before any rank builds a network. */
static int set_up_compute(Trainer *tr, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  /* One pool: our OpenMP loops and OpenBLAS (its OpenMP build) use the same
   * thread count, so they never oversubscribe the cores. */
  tr->threads = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
  omp_set_num_threads(tr->threads);
  openblas_set_num_threads(tr->threads);
  return train_config_apply_compute(cfg, err);
}

/* The parallel layout and the program of one step. */
static int create_layout(Trainer *tr, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  int rc = 0;
  int accum = cfg->grad_accum_steps;
  tr->tp = cfg->tp > 0 ? cfg->tp : 1;
  tr->pp = cfg->pp > 0 ? cfg->pp : 1;
  tr->vpp = cfg->vpp > 0 ? cfg->vpp : 1;
  tr->dp = cfg->world_size > 0 ? cfg->world_size : 1;
  trainer_fold_sizes(tr);
  if (cfg->num_stage_widths > 0) return trainer_replication_layout(tr, err);
  tr->world = tr->tp * tr->cp * tr->pp * tr->dp;
  tr->grad_scale = 1.0f / ((float)accum * (float)tr->dp);
  /* Armed before the first collective of the run; every rank reads the same value. */
  if (tr->world > 1 && (rc = comm_set_collective_timeout(cfg->collective_timeout_s, err))) return rc;
  if (tr->world > 1 && (rc = setup_grid(tr, err))) return rc;
  SchedConfig sc;
  if ((rc = train_config_sched(cfg, tr->pp, tr->vpp, &sc, err))) return rc;
  return sched_build(&sc, &tr->prog, err);
}

/* This rank's shard of the model, initialised from the seed. */
static int create_model(Trainer *tr, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  ModelShard shard;
  int rc = make_shard(tr, &shard, err);
  if (rc) return rc;
  if (tr->tp > 1) tp_ops_init(&tr->tp_ops, tr->tp_group);
  const ModelParallelOps *model_ops = trainer_fold_ops(tr, err);
  if (tr->folded && !model_ops) return err->code ? err->code : ERR_INTERNAL;
  int batch = tr->repl.on ? tr->repl.local_batch : cfg->micro_batch_size;
  rc = model_create_shard(&tr->model, &cfg->model, &shard, model_ops, batch, cfg->seq_len, err);
  if (rc) return error_wrap(err, "creating the model (tp %d, pipeline rank %d of %d)", tr->tp, tr->pp_rank, tr->pp);
  model_init_weights(&tr->model, cfg->seed);
  if ((rc = net_transformer_bind(&tr->net, &tr->model, err))) return rc;
  return find_tied(tr, err);
}

/* The training and validation loaders of this rank's data-parallel replica. */
static int open_data(Trainer *tr, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  int B = cfg->micro_batch_size, T = cfg->seq_len;
  int rc = data_loader_open(&tr->train, (const char *const *)cfg->train_paths, cfg->num_train, B, T, tr->dp_rank,
                            tr->dp, cfg->seed, (uint32_t)cfg->model.vocab_size, "data.train", err);
  if (rc || cfg->num_val == 0) return rc;
  rc = val_loader_open_windows(&tr->val, (const char *const *)cfg->val_paths, cfg->num_val, B, T, tr->dp_rank,
                               tr->dp, (uint64_t)cfg->eval_windows, (uint32_t)cfg->model.vocab_size, "data.val",
                               err);
  if (!rc) tr->has_val = 1;
  return rc;
}

OptimizerConfig trainer_optimizer_config(const TrainConfig *cfg) {
  OptimizerConfig oc = {
      .schedule = {cfg->lr, cfg->min_lr, cfg->warmup_steps, cfg->steps, cfg->decay},
      .beta1 = cfg->beta1,
      .beta2 = cfg->beta2,
      .eps = cfg->eps,
      .weight_decay = cfg->weight_decay,
      .grad_clip = cfg->grad_clip,
  };
  return oc;
}

/* AdamW, whole or sharded (ZeRO-1), and the gradient reduction it needs. */
static int create_optimizer(Trainer *tr, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  OptimizerConfig oc = trainer_optimizer_config(cfg);
  trainer_fold_need_reduction(tr);
  /* Where the reducing peers run (for overlap_grad_reduce auto): the dp-cp
   * group, or the expert-data group when folding makes it the larger.
   * Collective over the world, so before the per-stage decision below. */
  const CommGroup *peers = tr->dp_group ? tr->dp_group : comm_world();
  if (tr->folded && tr->edp_group && tr->edp_group->size > peers->size) peers = tr->edp_group;
  CommHostLayout host;
  int rc = comm_host_layout(peers, tr->threads, &host, err);
  if (rc) return rc;
  /* Ranks whose threads outnumber their host's cores sleep while they wait
   * (FIVEFOLD_WAIT_SLEEP=auto), so a waiting rank hands its core to one
   * that computes. */
  if ((rc = comm_waits_decide(host.host_threads, host.host_cores, err))) return rc;
  if (tr->reduce_grads && (rc = setup_data_parallel(tr, &oc, &host, err))) return rc;
  if (!tr->zero) rc = optimizer_create(&tr->opt, tr->net.num_values, &oc, err);
  return rc;
}

/* The executor of the step's program with this trainer's handlers, and the
 * pipeline they drive. */
static int create_executor(Trainer *tr, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  int rc = executor_create(&tr->exec, tr->prog, tr->pp_rank, tr, err);
  if (rc) return rc;
  executor_set_handler(&tr->exec, SCHED_FWD, run_forward);
  executor_set_handler(&tr->exec, SCHED_BWD, run_backward);
  executor_set_handler(&tr->exec, SCHED_BWD_WEIGHT, run_backward_weights);
  /* A network without transfers leaves a program with sends unrunnable
   * (the executor names the action), never silently skipped. */
  if (tr->net.ops->send && tr->net.ops->recv) {
    executor_set_handler(&tr->exec, SCHED_SEND_ACT, run_send);
    executor_set_handler(&tr->exec, SCHED_SEND_GRAD, run_send);
    executor_set_handler(&tr->exec, SCHED_RECV_ACT, run_recv);
    executor_set_handler(&tr->exec, SCHED_RECV_GRAD, run_recv);
  }
  executor_set_handler(&tr->exec, SCHED_GRAD_REDUCE, run_grad_reduce);
  executor_set_handler(&tr->exec, SCHED_OPTIM, run_optim);
  executor_set_prepare(&tr->exec, SCHED_FWD, prepare_compute);
  executor_set_prepare(&tr->exec, SCHED_BWD, prepare_compute);
  executor_set_prepare(&tr->exec, SCHED_OPTIM, prepare_optim);
  /* Receives and (with dp > 1) the reductions are posted and waited for
   * later; without data parallelism GRAD_REDUCE does nothing and is a span. */
  executor_set_posts(&tr->exec, SCHED_RECV_ACT, 1);
  executor_set_posts(&tr->exec, SCHED_RECV_GRAD, 1);
  executor_set_posts(&tr->exec, SCHED_GRAD_REDUCE, tr->reduce_grads);
  int batch = tr->repl.on ? tr->repl.local_batch : cfg->micro_batch_size;
  rc = pipeline_create(&tr->pipe, &tr->model, tr->prog, tr->pp_rank, tr->pp > 1 ? tr->pp_group : NULL, batch,
                       cfg->seq_len, err);
  if (!rc && tr->repl.on) rc = pipeline_replicated_attach(&tr->pipe, &tr->repl.r, err);
  if (rc) return rc;
  tr->pipe.dp_grads = tr->reduce_grads ? &tr->dp_grads : NULL;
  tr->pipe.last_backward = tr->exec.last_backward;
  net_transformer_set_pipeline(&tr->net, &tr->pipe);
  return 0;
}

static int alloc_batches(Trainer *tr, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  size_t n = (size_t)cfg->micro_batch_size * cfg->seq_len;
  tr->inputs = malloc(n * sizeof(int));
  tr->targets = malloc(n * sizeof(int));
  tr->step_inputs = malloc(n * (size_t)cfg->grad_accum_steps * sizeof(int));
  tr->step_targets = malloc(n * (size_t)cfg->grad_accum_steps * sizeof(int));
  if (!tr->inputs || !tr->targets || !tr->step_inputs || !tr->step_targets)
    return error_set(err, ERR_NOMEM, "trainer: out of memory for batch buffers");
  return 0;
}

/* Under bf16 the GEMMs read the weight matrices from the bf16 weight cache
 * (kern/bf16_weights.h), converted once after each optimizer update (or
 * load) instead of at every GEMM of every micro-batch. */
static void cache_bf16_weights(Trainer *tr) {
  if (kern_precision() == KERN_PRECISION_BF16) network_cache_bf16_weights(&tr->net);
}

int trainer_create(Trainer *tr, const TrainConfig *cfg, Error *err) {
  memset(tr, 0, sizeof *tr);
  tr->cfg = cfg;
  tr->tied_peer = -1;
  int rc = set_up_compute(tr, err);
  if (!rc && cfg->family != TRAIN_FAMILY_TRANSFORMER) {
    rc = trainer_net_create(tr, cfg, err);
    if (rc) trainer_free(tr);
    else cache_bf16_weights(tr);
    return rc;
  }
  if (!rc) rc = create_layout(tr, err);
  if (!rc) rc = create_model(tr, err);
  if (!rc) rc = open_data(tr, err);
  if (!rc) rc = create_optimizer(tr, err);
  if (!rc) rc = create_executor(tr, err);
  if (!rc) rc = alloc_batches(tr, err);
  if (!rc && tr->pipe.num_counts) { /* the run's routing, summed over its steps (trainer.h) */
    tr->routed_tokens = calloc(tr->pipe.num_counts, sizeof *tr->routed_tokens);
    if (!tr->routed_tokens) rc = error_set(err, ERR_NOMEM, "out of memory for the routing counts");
    else tr->num_routed = tr->pipe.num_counts;
  }
  if (rc) {
    trainer_free(tr);
    return rc;
  }
  tr->net.flops_per_unit = model_flops_per_sequence(&cfg->model, cfg->seq_len) / cfg->seq_len;
  cache_bf16_weights(tr);
  return 0;
}

void trainer_free(Trainer *tr) {
  free(tr->routed_tokens);
  tr->routed_tokens = NULL;
  tr->num_routed = 0;
  if (tr->net.values) network_forget_bf16_weights(&tr->net);
  trace_session_free(tr->trace);
  pipeline_free(&tr->pipe);
  executor_free(&tr->exec);
  sched_program_free(tr->prog);
  dist_optimizer_free(&tr->dist_opt);
  dp_grads_free(&tr->dp_grads);
  optimizer_free(&tr->opt);
  if (tr->cfg && tr->cfg->family != TRAIN_FAMILY_TRANSFORMER) trainer_net_free(tr);
  network_free(&tr->net);
  model_free(&tr->model);
  tp_ops_free(&tr->tp_ops);
  fold_ops_free(&tr->fold_ops);
  if (tr->grid) {
    comm_grid_destroy(tr->grid);
    free(tr->grid);
  }
  data_loader_close(&tr->train);
  val_loader_close(&tr->val);
  free(tr->inputs);
  free(tr->targets);
  free(tr->step_inputs);
  free(tr->step_targets);
  free(tr->tied_send);
  free(tr->tied_recv);
  trainer_replication_free(tr);
  memset(tr, 0, sizeof *tr);
}

/* In place over the DP group, then the pipeline group (each value lives on
 * one stage or is a per-stage part). */
static int sum_over_replicas_and_stages(Trainer *tr, double *x, int n, int64_t *counts, size_t n_counts, Error *err) {
  int rc = 0;
  const CommGroup *groups[2] = {tr->dp_group && tr->dp_group->size > 1 ? tr->dp_group : NULL,
                                tr->pp > 1 ? tr->pp_group : NULL};
  for (int i = 0; i < 2 && !rc; i++) {
    if (!groups[i]) continue;
    rc = comm_allreduce_f64(groups[i], x, (size_t)n, COMM_SUM, NULL, err);
    if (!rc && n_counts) rc = comm_allreduce_i64(groups[i], counts, n_counts, COMM_SUM, NULL, err);
  }
  return rc;
}

int trainer_step(Trainer *tr, TrainStepResult *res, Error *err) {
  if (tr->cfg->family != TRAIN_FAMILY_TRANSFORMER) return trainer_net_step(tr, res, err);
  const TrainConfig *cfg = tr->cfg;
  const ModelConfig *mc = &cfg->model;
  int B = cfg->micro_batch_size, T = cfg->seq_len, accum = cfg->grad_accum_steps;
  size_t bt = (size_t)B * T;
  double t0 = timer_now();
  memset(res, 0, sizeof *res);
  memset(&tr->acc, 0, sizeof tr->acc);
  /* Every rank of a replica reads the step's micro-batches in order: the
   * loader's state stays the same on all of them. */
  for (int i = 0; i < accum; i++) {
    int rc = data_loader_next(&tr->train, tr->step_inputs + (size_t)i * bt, tr->step_targets + (size_t)i * bt, NULL,
                              err);
    if (rc) return error_wrap(err, "step %d: data.train", tr->step + 1);
  }
  if (tr->repl.on) trainer_replication_select(tr, tr->step_inputs, tr->step_targets, accum);
  model_zero_grad(&tr->model);
  tr->step_skipped = 0;
  nonfinite_test_poison(tr, "grad");
  if (tr->reduce_grads) dp_grads_begin(&tr->dp_grads);
  pipeline_begin_step(&tr->pipe, tr->step_inputs, tr->step_targets, tr->grad_scale);
  trace_session_begin_iteration(tr->trace, tr->step);
  int rc = executor_run(&tr->exec, err);
  if (!rc) rc = pipeline_end_step(&tr->pipe, err);
  if (rc) return error_wrap(err, "step %d", tr->step + 1);
  /* Losses over every replica's tokens (lm from the last stage); aux and z
   * are per-micro-batch sums over the stages' MoE layers, averaged over
   * the replicas. */
  const Pipeline *p = &tr->pipe;
  double sums[4] = {p->lm_sum, (double)p->tokens_counted, p->aux_sum, p->z_sum};
  rc = tr->repl.on ? trainer_replication_sum_losses(tr, sums, 4, (int64_t *)p->expert_counts, p->num_counts, err)
                   : sum_over_replicas_and_stages(tr, sums, 4, (int64_t *)p->expert_counts, p->num_counts, err);
  if (rc) return error_wrap(err, "step %d: summing the losses over the ranks", tr->step + 1);
  /* Every CP rank of a replica reports the whole micro-batch: the DP x CP
   * sum holds cp copies (lm over tokens is a ratio and needs no care). */
  sums[2] /= (double)tr->dp * trainer_fold_loss_copies(tr);
  sums[3] /= (double)tr->dp * trainer_fold_loss_copies(tr);
  tr->step++;
  nonfinite_test_poison(tr, "weight");
  res->step = tr->step;
  res->skipped = tr->step_skipped;
  net_transformer_set_step_losses(&tr->net, sums[1] > 0 ? sums[0] / sums[1] : 0, sums[2] / accum, sums[3] / accum);
  res->num_metrics = tr->net.ops->metrics(&tr->net, res->metrics, NET_MAX_METRICS);
  res->loss = res->metrics[0].value;
  res->lr = tr->acc.info.lr;
  res->grad_norm = tr->acc.info.grad_norm;
  res->imbalance = p->num_counts ? moe_imbalance(p->expert_counts, mc) : 0;
  for (size_t i = 0; i < tr->num_routed; i++) tr->routed_tokens[i] += p->expert_counts[i];
  res->tokens = (long)bt * accum * tr->dp;
  res->seconds = timer_now() - t0;
  if (tr->reduce_grads) {
    /* A rank that finished its backward early waits in the reduction for
     * the slowest one; the slowest rank's wait is the reduction's own
     * exposed time, so the minimum over ranks is what is reported. */
    double cal = tr->dp_grads.calibrated_seconds, exposed = tr->dp_grads.exposed_seconds;
    rc = comm_allreduce_f64(tr->dp_group, &exposed, 1, COMM_MIN, NULL, err);
    if (rc) return rc;
    res->reduce_exposed_seconds = exposed;
    res->reduce_hidden_fraction = cal > 0 ? fmax(0.0, fmin(1.0, 1.0 - exposed / cal)) : 0;
  }
  return 0;
}

int trainer_evaluate(Trainer *tr, EvalResult *res, Error *err) {
  memset(res, 0, sizeof *res);
  if (tr->has_val && tr->cfg->family != TRAIN_FAMILY_TRANSFORMER) return trainer_net_evaluate(tr, res, err);
  if (!tr->has_val) return error_set(err, ERR_CONFIG, "no validation data (set data.val or --val-data)");
  double t0 = timer_now();
  /* Counted once per replica: on the rank that holds the loss. */
  int holds_head = tr->repl.on ? tr->repl.stage == tr->pp - 1 : tr->pp_rank == tr->pp - 1;
  double sums[3] = {0, 0, 0};
  val_loader_reset(&tr->val);
  for (;;) {
    int has_batch = 0;
    int rc = val_loader_next(&tr->val, tr->inputs, tr->targets, NULL, &has_batch, err);
    if (rc) return error_wrap(err, "validation: data.val");
    if (!has_batch) break;
    ModelLoss loss;
    rc = pipeline_eval_forward(&tr->pipe, tr->inputs, tr->targets, &loss, err);
    if (rc) return error_wrap(err, "validation batch %d", res->batches + 1);
    sums[0] += loss.lm * (double)loss.tokens;
    sums[1] += (double)loss.tokens;
    sums[2] += holds_head;
    res->batches++;
  }
  int rc = tr->repl.on ? trainer_replication_sum_losses(tr, sums, 3, NULL, 0, err)
                      : sum_over_replicas_and_stages(tr, sums, 3, NULL, 0, err);
  if (rc) return error_wrap(err, "validation: summing over the ranks");
  res->tokens = (long)(sums[1] / trainer_fold_loss_copies(tr));
  res->batches = (int)(sums[2] / trainer_fold_loss_copies(tr));
  res->windows = (long)tr->val.num_used;
  res->loss = res->tokens > 0 ? sums[0] / (double)res->tokens : NAN;
  res->seconds = timer_now() - t0;
  return 0;
}
