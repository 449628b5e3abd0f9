/* The single-process trainer: model, AdamW, training and validation data,
 * and the loop that ties them together.
 *
 * One optimizer step = grad_accum_steps micro-batches of [B, T] tokens, each
 * forward + backward with grad_scale = 1 / grad_accum_steps (so the summed
 * gradient is that of the mean loss), then one AdamW update at the scheduled
 * learning rate. trainer_run adds the reporting: a startup banner, a log line
 * every log_interval steps, validation every eval_interval steps and at the
 * end, a progress line with ETA on terminals, and optional run files in the
 * output directory (config.json, metrics.jsonl).
 *
 * The pieces (trainer_create / trainer_step / trainer_evaluate) are public so
 * tests and later drivers (multi-rank) can run the same steps without the
 * reporting.
 *
 * Parallel runs (cfg->world_ranks = tp x pp x dp > 1, started under mpirun
 * with comm_init done by the caller; docs/parallelism.md): one step runs
 * this rank's list of the sched program (schedule none, gpipe, 1f1b or
 * interleaved over the pipeline ranks) through the executor; the handlers
 * are the pipeline's (train/pipeline.h: chunk forwards and backwards,
 * activations and gradients sent between stages) plus the gradient
 * reduction and the optimizer here. The model is this rank's shard
 * (model.h): the chunks of its pipeline stages, split over the TP group
 * (train/tp_ops.h binds the model's collectives). Every rank reads the
 * whole micro-batch list of its data-parallel replica (dp x micro_batch x
 * accum sequences per step; the TP and PP ranks of a replica read the same
 * ones), scales its loss by 1 / (accum dp), and gradient buckets are summed
 * over the dp group as each chunk's last backward produces them
 * (train/dp_grads.h); with parallel.distributed_optimizer the buckets are
 * reduce-scattered and AdamW state is sharded (train/dist_optimizer.h).
 * Tied embeddings split over the pipeline sum the embedding's and the LM
 * head copy's gradients after the reduction. The gradient norm is global
 * (each logical element once), so every rank clips alike. Step results are
 * global (losses averaged over all tokens, aux and z summed over the stages);
 * validation runs a forward-only pipeline over each replica's share of the
 * fixed windows. Only world rank 0 prints and writes run files; checkpoints
 * are written by every rank (ckpt/checkpoint_dist.h) and hold full
 * logical tensors; every trainer_* call is collective.
 *
 * Checkpoints (ckpt/checkpoint.h): trainer_run saves one every
 * checkpoint.interval steps, at the end and when stopped, when asked to
 * (TrainerOptions.save_checkpoints). trainer_resume restores weights, AdamW
 * state, step and data order from one, so that the steps that follow are
 * bit for bit those of a run that never stopped (same config and thread
 * count). Only the reporting differs: a resumed run's first log line
 * averages the steps since the resume, not since the last log line. */
#ifndef FIVEFOLD_TRAIN_TRAINER_H
#define FIVEFOLD_TRAIN_TRAINER_H

#include <signal.h>
#include <stdio.h>

#include "base/error.h"
#include "model/model.h"
#include "ckpt/checkpoint.h"
#include "data/data_loader.h"
#include "train/pipeline.h"
#include "train/tp_ops.h"
#include "train/fold_ops.h"
#include "train/dist_optimizer.h"
#include "train/dp_grads.h"
#include "train/executor.h"
#include "train/metrics.h"
#include "nets/network.h"
#include "train/optimizer.h"
#include "train/train_config.h"
#include "train/stage_replication.h"

typedef struct Trainer {
  const TrainConfig *cfg; /* finalized; must outlive the trainer */
  Model model;
  Network net; /* the model as the runtime sees it (nets/network.h); for a network of nets/ the
                  network itself, and `model` only a view of its table (train/trainer_net.h) */
  float *net_x;  /* a network of nets/: the step's micro-batches of features and classes */
  int *net_y;
  double net_metric_sums[NET_MAX_METRICS]; /* the running step's micro-batch metrics, summed */
  int phase; /* the phase that runs (train/phases.h, SchedAction.phase); -1 outside a phase */
  struct ImageSet *images; /* a vision network's data (data/image_set.h) */
  struct GanData *pairs;   /* a gan's sharp images, blurred on the fly (train/gan_data.h) */
  Optimizer opt;
  DataLoader train;
  ValLoader val;
  int has_val;
  int *inputs, *targets; /* [B, T] (validation) */
  int *step_inputs, *step_targets; /* [accum][B, T]: the micro-batches of one step */
  long *step_counts;     /* expert counts summed over a step's micro-batches */
  int step;              /* optimizer steps done */
  int start_step;        /* step this process started from (0, or the resumed checkpoint's) */
  char resumed_from[CHECKPOINT_PATH_MAX]; /* checkpoint directory, "" for a fresh run */
  int threads;
  /* the program of one step, its executor and the pipeline handlers */
  struct SchedProgram *prog;
  Executor exec;
  Pipeline pipe;
  float grad_scale; /* 1 / (accum x dp) */
  /* the parallel layout: world = tp x pp x dp ranks (1 without MPI) */
  int world, world_rank;
  int tp, pp, vpp, dp;
  int tp_rank, pp_rank, dp_rank;
  CommGrid *grid;            /* world > 1 */
  const CommGroup *dp_group; /* dp-cp group: dense gradients reduce over it */
  const CommGroup *tp_group, *pp_group, *mp_group; /* mp: tp-pp, one copy of the model */
  TpOps tp_ops;
  /* MoE parallel folding (train/fold_ops.h): cp in the attention grid,
   * etp x ep x edp x pp the MoE grid; reduce_grads: some gradient sums
   * over more than one rank (dp x cp > 1, or expert tensors with edp > 1) */
  int cp, ep, etp, edp;
  int cp_rank, ep_rank, etp_rank, edp_rank;
  int folded; /* cp, ep or etp above 1 */
  int reduce_grads;
  const CommGroup *edp_group;
  FoldOps fold_ops;
  DpGrads dp_grads; /* dp > 1 */
  int zero; /* distributed optimizer in use (dp > 1); then opt holds no moments */
  DistOptimizer dist_opt;
  /* tied embeddings over the pipeline: this rank's embed.weight or its LM
   * head copy, summed with the other one's on pipeline rank tied_peer */
  int tied_peer; /* -1: nothing to sum */
  size_t tied_offset, tied_numel;
  float *tied_send, *tied_recv;
  /* the trace session of trainer_run with cfg->trace_path (NULL: tracing
   * off); the executor and the pipeline stamp into it */
  struct TraceSession *trace;
  /* the non-finite guard (train/nonfinite.h): steps skipped in a row and
   * in all, and whether the running step was skipped */
  int nonfinite_consecutive, nonfinite_skipped, step_skipped;
  /* what the running step's optimizer did */
  struct {
    OptimizerStepInfo info;
  } acc;
  /* stage replication (train/stage_replication.h); repl.on 0: off */
  TrainerReplication repl;
  /* tokens routed to each expert of each layer ([num_layers x num_experts],
   * summed over the replicas and over the steps of this run): the measured
   * load `simulate --expert-load` prices EP with (metrics.jsonl summary
   * "expert_tokens"); NULL for dense models */
  long *routed_tokens;
  size_t num_routed;
} Trainer;

/* What one optimizer step did. Losses are means over its micro-batches. */
typedef struct TrainStepResult {
  int step; /* 1-based number of this step */
  double loss; /* metrics[0] */
  int num_metrics;
  NetMetric metrics[NET_MAX_METRICS]; /* the network's, by name (nets/network.h): the transformer's
                                         loss, lm, aux, z; the MLP's loss, accuracy */
  float lr;
  double grad_norm;
  int skipped;      /* a non-finite loss or gradient: no update (training.nonfinite skip) */
  double imbalance; /* MoE layers; 0 for dense models */
  long tokens; /* units of the network's throughput (NetworkOps.unit): tokens, samples */
  double seconds;
  /* data parallel (0 when dp = 1): seconds the host spent in the
   * gradient reduction (MPI calls during backward and the wait after it;
   * the minimum over ranks: the others also wait
   * for the slowest rank's backward), and the fraction of the reduction's
   * blocking time (measured at start-up) that the overlap hid */
  double reduce_exposed_seconds, reduce_hidden_fraction;
} TrainStepResult;

typedef struct EvalResult {
  double loss; /* mean LM loss per validation token */
  int has_accuracy; /* a classifier of nets/ */
  double accuracy;
  long tokens; /* in the network's unit (tokens, samples) */
  int batches;  /* micro-batches over all replicas, padding included */
  long windows; /* validation windows: training.eval_windows (or all there are), whatever the layout */
  int num_extra; /* more named figures of the eval line and record (a gan's "val_psnr", ...) */
  NetMetric extra[8];
  double seconds;
} EvalResult;

/* Builds everything from a finalized config: sets the OpenMP / OpenBLAS
 * thread count, creates and initialises the model (seed = training.seed),
 * opens the data (checking vocabulary fit) and allocates AdamW state. */
int trainer_create(Trainer *tr, const TrainConfig *cfg, Error *err);
void trainer_free(Trainer *tr);

int trainer_step(Trainer *tr, TrainStepResult *res, Error *err);

/* Continues from a checkpoint directory (resolve it first with
 * checkpoint_resolve): its model config must equal the run's (ERR_CONFIG
 * naming the field otherwise); weights, AdamW moments, step and data-loader
 * state are restored. Differences between the checkpoint's run config and
 * this one (say a larger training.steps) are reported as warnings. */
int trainer_resume(Trainer *tr, const char *ckpt_dir, Error *err);

/* Saves the current state to cfg->out_dir/checkpoints/step-<step>, keeping
 * the newest cfg->keep_last. info may be NULL. */
int trainer_save_checkpoint(Trainer *tr, CheckpointSaveInfo *info, Error *err);
/* Validation LM loss over the fixed windows; ERR_CONFIG when no val data. */
int trainer_evaluate(Trainer *tr, EvalResult *res, Error *err);

typedef struct TrainerOptions {
  FILE *out;              /* banner, log lines, progress (NULL: stdout) */
  int progress;           /* -1: as the run config's training.progress says; 0 never; 1 always */
  int write_run_files;    /* config.json and metrics.jsonl under cfg->out_dir; a resumed run
                             keeps the records up to its start step and appends */
  int save_checkpoints;   /* every checkpoint.interval steps, at the end and when stopped
                             (default 0; `fivefold train` turns it on) */
  int eval_at_start;      /* validation before the first step too */
  volatile sig_atomic_t *stop; /* non-zero (a signal number, train/stop_request.h): finish the step,
                                  save, evaluate, return */
  /* The plan the run was laid out and placed by, as `train --plan` read it
   * ({"file", "cluster", "gpus", "mapping": {"device_of_rank"}}): the trace
   * records it as otherData.plan, so that `trace compare` prices the ranks
   * on the devices they ran on. Opaque here; NULL: no plan. */
  const struct cJSON *trace_plan;
  /* Called after every step (tests use it to watch lr, losses). */
  void (*on_step)(void *ctx, const TrainStepResult *res);
  void *ctx;
} TrainerOptions;

typedef struct TrainSummary {
  int steps;
  double first_loss;     /* loss of step 1 */
  double final_loss;     /* mean loss over the last log interval */
  double first_val_loss; /* NAN without val data or start evaluation */
  double final_val_loss; /* NAN without val data */
  double final_val_accuracy; /* NAN without val data or for a transformer */
  double tokens_per_s;   /* training units (the network's: tokens, samples) / training time (evaluation excluded) */
  double mfu_pct, peak_gflops;
  double train_seconds, eval_seconds;
  long tokens;
  int stopped_early;
} TrainSummary;

void trainer_options_default(TrainerOptions *o);
/* The full run with reporting. */
int trainer_run(Trainer *tr, const TrainerOptions *opts, TrainSummary *summary, Error *err);

/* Total and per-token-active parameter counts (routed experts count top_k /
 * num_experts). */
void trainer_param_counts(const Model *m, double *total, double *active);

#endif
