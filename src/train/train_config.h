/* The run configuration: one JSON file with a "model", a "training" and a
 * "data" section, plus command-line flags that override its fields.
 *
 *   {
 *     "description": "free text, ignored",
 *     "model": "models/ref-moe.json",      // or an inline model config object
 *     "training": { "micro_batch_size": 8, "seq_len": 256, "steps": 2000, ... },
 *     "data": { "train": "data/train.bin", "val": ["a.bin", "b.bin"],
 *               "tokenizer": "tok/tokenizer.json" },  // or "byte-level" (default)
 *     "checkpoint": { "interval": 500, "keep_last": 3 },
 *     "parallel": { "tp": 2, "pp": 2, "vpp": 1, "dp": 2, "schedule": "1f1b",
 *                   "layers_per_stage": [2, 2], "bucket_mb": 25, "distributed_optimizer": 1 },
 *     "trace": { "path": "run.trace.json", "steps": "2:4" },  // optional; not part of config.json
 *     "out": "runs/my-run"
 *   }
 *
 * Paths in the file are resolved against the file's directory; paths given
 * as flags against the current directory. Unknown fields are errors (with a
 * suggestion for a near miss), as are wrong types and out-of-range values;
 * every message names the file and the section.field.
 *
 * Use: train_config_load, then train_config_override for each flag, then
 * train_config_finalize (cross-field checks, defaults that depend on other
 * fields, existence of data files). The field table that drives parsing also
 * drives `fivefold train --help`. */
#ifndef FIVEFOLD_TRAIN_TRAIN_CONFIG_H
#define FIVEFOLD_TRAIN_TRAIN_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "kern/lr_schedule.h"
#include "model/config.h"
#include "data/image_set.h"
#include "nets/gan.h"
#include "nets/mlp.h"
#include "nets/vision.h"
#include "sched/program.h"
#include "train/gan_data.h"

#define TRAIN_PATH_MAX 4096
#define TRAIN_TOKENIZER_BYTE_LEVEL "byte-level"
#define TRAIN_MAX_STAGES 256 /* pp x vpp */
#define TRAIN_AUTO (-1)      /* a switch left to the runtime ("auto") */

/* training.progress / --progress: the in-place progress line. Auto draws it
 * only where the output really is a terminal (trainer.c: progress_wanted). */
typedef enum TrainProgress {
  TRAIN_PROGRESS_AUTO = 0,
  TRAIN_PROGRESS_ALWAYS,
  TRAIN_PROGRESS_NEVER
} TrainProgress;

/* The network family of a run: the model section's "family" ("mlp",
 * "vision", "gan"), or a transformer (a model config without "family"). */
typedef enum TrainFamily {
  TRAIN_FAMILY_TRANSFORMER = 0,
  TRAIN_FAMILY_MLP,
  TRAIN_FAMILY_VISION,
  TRAIN_FAMILY_GAN
} TrainFamily;

typedef struct TrainConfig {
  char config_path[TRAIN_PATH_MAX];  /* file it was read from */
  char model_source[TRAIN_PATH_MAX]; /* model config file, or "" when inline */
  int has_model;
  TrainFamily family;
  ModelConfig model; /* the transformer's (TRAIN_FAMILY_TRANSFORMER) */
  MlpConfig mlp;     /* TRAIN_FAMILY_MLP: trained on its synthetic task, no data files */
  VisionConfig vision;   /* TRAIN_FAMILY_VISION: an image classifier (nets/vision.h) */
  ImageSetConfig images; /* TRAIN_FAMILY_VISION: its "data" section (data/image_set.h) */
  GanConfig gan;         /* TRAIN_FAMILY_GAN: a deblurring GAN (nets/gan.h) */
  GanDataConfig gan_data; /* TRAIN_FAMILY_GAN: its "data" section (train/gan_data.h) */

  /* training */
  int micro_batch_size;  /* B */
  int seq_len;           /* T */
  int grad_accum_steps;  /* 0 until finalize when global_batch_size decides it */
  int global_batch_size; /* sequences per optimizer step over all ranks; 0 = unset */
  int steps;
  float lr, min_lr; /* min_lr < 0: unset, finalize makes it lr / 10 */
  int warmup_steps;
  int progress; /* TrainProgress */
  LrDecay decay;
  float weight_decay, beta1, beta2, eps, grad_clip; /* grad_clip 0: off */
  uint64_t seed;
  int log_interval;
  int eval_interval; /* 0: evaluate only at the end */
  int eval_batches;
  int eval_windows;   /* validation windows per evaluation, whatever the layout (0 until parsed) */
  int threads;        /* 0: every core OpenMP offers */
  double peak_gflops; /* 0: measure at startup */
  /* compute (train_config_compute.c): checked at finalize */
  char gemm_backend[64]; /* "onednn" (default) | "openblas" */
  char precision[64];    /* "fp32" (default) | "bf16": GEMM inputs, fp32 accumulation */
  /* activation recomputation (train_config_recompute.c): checked at finalize */
  char recompute[64];        /* "none" (default) | "full" | "selective" */
  char recompute_modules[64]; /* selective: Megatron's module names, comma-joined; default "core_attn" */
  char recompute_method[64]; /* "uniform" (default) | "block" (Megatron's --recompute-method) */
  int recompute_num_layers;  /* group size (uniform) or blocks per virtual stage (block); default 1 */
  int fuse_swiglu;       /* 1 (default): SwiGLU's silu(gate) * up in one kernel; 0: separate passes (kern/fusion.h) */
  int fuse_bias_gelu;    /* 1 (default): GPT-2's fc bias and GeLU in one kernel; 0: separate passes */
  int fuse_norm_residual; /* 1 (default): the residual add and the next norm in one kernel; 0: separate passes */
  /* a non-finite loss or gradient (train/nonfinite.h) */
  char nonfinite[64];      /* "skip" (default) | "stop" */
  int max_nonfinite_skips; /* consecutive skipped steps before the run stops */
  double collective_timeout_s; /* a rank that does not arrive ends the job after this long (comm/timeout.h); 0: off */

  /* data */
  char **train_paths;
  int num_train;
  char **val_paths; /* may be empty: no validation */
  int num_val;
  /* The tokenizer the shards were made with, recorded in checkpoints so that
   * sampling decodes with it: a tokenizer.json path or "byte-level". */
  char tokenizer[TRAIN_PATH_MAX];

  /* checkpoint */
  int checkpoint_interval; /* save every N steps; 0: only at the end (and when stopped) */
  double checkpoint_interval_minutes; /* also save when this long has passed since the last save; 0: off */
  int keep_last;           /* checkpoints kept in the run directory; 0: all */

  char out_dir[TRAIN_PATH_MAX]; /* "" until finalize: runs/<config name> */
  int world_size;               /* data-parallel ranks (the batch is split over them): set from
                                   parallel.dp and the MPI world before finalize (1 without MPI) */
  int world_ranks;              /* every rank of the job: tp x pp x dp (1 without MPI) */

  /* parallel */
  int tp, pp, vpp;           /* tensor (with sequence) parallel, pipeline ranks, chunks per pipeline rank */
  int dp;                    /* as configured; 0: world / (tp x pp) */
  int schedule;              /* SchedScheduleKind; -1: 1f1b when pp > 1 (interleaved when vpp > 1), else none */
  int layers_per_stage[TRAIN_MAX_STAGES]; /* explicit partition by virtual stage; num 0: even split */
  int num_layers_per_stage;
  /* Stage replication (sched/replicated.h): stage s runs on stage_widths[s]
   * consecutive ranks that split every micro-batch; num 0: off. */
  int stage_widths[TRAIN_MAX_STAGES];
  int num_stage_widths;
  int warmup[TRAIN_MAX_STAGES]; /* forwards each pipeline rank runs before its first backward (1f1b,
                                   zb-h1, interleaved; SchedConfig.warmup); num 0: the schedule's own */
  int num_warmup;
  /* The relative forward/backward durations the pipeline program places
   * its sends by (SchedConfig.order_fwd_cost/order_bwd_cost); 0: the
   * scheduler's 1 and 2. A plan sets the ones it priced (train --plan). */
  double order_fwd_cost, order_bwd_cost;
  double bucket_mb;          /* gradient bucket size; 0: default (trainer) */
  int overlap_grad_reduce;   /* 1: non-blocking buckets started during backward; 0: blocking at GRAD_REDUCE;
                                TRAIN_AUTO: chosen at startup (dp_grads_choose_overlap) */
  int distributed_optimizer; /* 1: ZeRO-1 over the DP ranks */
  /* MoE parallel folding (train_config_fold.c): context-parallel ranks of the
   * attention grid (tp x cp x dp x pp = world), expert-parallel and
   * expert-tensor-parallel ranks of the MoE grid (etp x ep x edp x pp = world) */
  int cp, ep, etp;
  char moe_dispatcher[64]; /* "alltoall" (also ""), "allgather" */

  /* trace (docs/tracing.md): not recorded in config.json or checkpoints,
   * since tracing changes nothing the run computes */
  char trace_path[TRAIN_PATH_MAX]; /* Chrome trace rank 0 writes; "": tracing off */
  char trace_steps[64];            /* iterations recorded, "a:b" (trace_session_parse_steps); "": all */
} TrainConfig;

void train_config_defaults(TrainConfig *cfg);
/* Reads and checks the file (types, ranges, unknown fields, model section). */
int train_config_load(TrainConfig *cfg, const char *path, Error *err);
/* Parses a JSON text as if it were the file `origin` (paths resolve against
 * origin's directory). */
int train_config_parse(TrainConfig *cfg, const char *json_text, const char *origin, Error *err);
/* Applies one command-line flag ("--steps", "100"). Returns ERR_ARG for an
 * unknown flag or a bad value, naming the flag. */
int train_config_override(TrainConfig *cfg, const char *flag, const char *value, Error *err);
/* 1 if `flag` is one train_config_override accepts. */
int train_config_is_flag(const char *flag);
/* The flags train_config_override accepts (for near-miss hints of a
 * command-line parser): fills names[0, cap) and returns how many there are. */
int train_config_flag_names(const char **names, int cap);
/* Resolves the parallel sizes against the number of ranks the job runs on:
 * tp x pp x dp must equal it (dp 0 is derived), else an ERR_CONFIG that says
 * which product fails and what would fit; sets world_size (= dp) and
 * world_ranks. Call before train_config_finalize (which derives the
 * accumulation from the global batch over the dp ranks and checks the
 * schedule and the partition). */
int train_config_set_world(TrainConfig *cfg, int world_ranks, Error *err);
/* set_world when cp, ep or etp is above 1 (train_config_fold.c). */
int train_config_set_world_fold(TrainConfig *cfg, int world_ranks, Error *err);
/* Cross-field checks and derived defaults; data files must exist. */
int train_config_finalize(TrainConfig *cfg, Error *err);
void train_config_free(TrainConfig *cfg);
/* training.gemm_backend and training.precision are known names
 * (train_config_compute.c; called by finalize). */
int train_config_check_compute(const TrainConfig *cfg, const char *origin, Error *err);
/* training.recompute, recompute_method, recompute_num_layers and
 * recompute_modules are known names that fit the run
 * (train_config_recompute.c; called by finalize): modules the runtime does
 * not run and recomputation of a network other than the transformer are
 * refused, naming the field. */
int train_config_check_recompute(const TrainConfig *cfg, const char *origin, Error *err);
/* The model shard's recompute_method (MODEL_RECOMPUTE_*),
 * recompute_num_layers and recompute_modules (MODEL_RECOMPUTE_*_BIT) of a
 * checked config. */
void train_config_recompute_shard(const TrainConfig *cfg, int *method, int *num_layers, unsigned *modules);
/* Selects the GEMM backend, precision and fused kernels process-wide (kern); ERR_CONFIG
 * naming the missing CPU feature when bf16 cannot run here. */
int train_config_apply_compute(const TrainConfig *cfg, Error *err);

/* Lines "  --flag ARG   explanation" for every override flag. */
void train_config_print_flags(FILE *f);

/* Tokens per optimizer step (all ranks): B * T * accum * dp. */
long train_config_tokens_per_step(const TrainConfig *cfg);

/* The resolved configuration as a JSON document (caller frees with
 * cJSON_Delete): what a run directory records. */
struct cJSON *train_config_to_json(const TrainConfig *cfg);

const char *lr_decay_name(LrDecay decay);
/* "auto" | "always" | "never" -> TrainProgress, -1 for anything else; and back. */
int train_progress_parse(const char *name);
const char *train_progress_name(int progress);
/* The schedule a finalized config runs (its default resolved). */
SchedScheduleKind train_config_schedule(const TrainConfig *cfg);
/* Part of finalize (train_config_parallel.c): the schedule fits pp, vpp and
 * the micro-batches, the partition fits the model, and every stage that
 * holds neither the embedding nor the head has blocks. origin names the
 * file in messages. */
int train_config_check_pipeline(const TrainConfig *cfg, const char *origin, Error *err);
/* The schedule config the trainer builds its program from, for pp pipeline
 * ranks with vpp chunks each: the schedule, the micro-batches of a step,
 * parallel.warmup (one depth per pipeline rank, or none) and the order
 * costs. `fivefold train` and the tests build from this one place. */
int train_config_sched(const TrainConfig *cfg, int pp, int vpp, SchedConfig *sc, Error *err);
/* Part of finalize: trace.steps parses and lies inside the run, and only
 * comes with trace.path. */
int train_config_check_trace(const TrainConfig *cfg, const char *origin, Error *err);
/* Part of set_world and finalize (train_config_fold.c): the folding sizes
 * against the world (with_world) or against the model, sequence and
 * dispatcher name (!with_world). */
int train_config_check_fold(const TrainConfig *cfg, const char *origin, int with_world, Error *err);
/* The tokenizer against the shards' headers (train_config_data.c): a BPE
 * tokenizer must have exactly the vocabulary every shard records, a
 * byte-level one at most 256 ids in every shard; ERR_CONFIG naming the
 * shard, the tokenizer and both sizes. Run by train_config_finalize. */
int train_config_check_tokenizer_shards(const TrainConfig *cfg, const char *origin, Error *err);
/* eval_windows when unset: eval_batches x micro_batch_size (parse and
 * finalize call it; parse comes first, so flags that change the
 * micro-batch later leave the validation set as the file defines it). */
void train_config_default_eval_windows(TrainConfig *cfg);
/* MODEL_MOE_ALLTOALL or MODEL_MOE_ALLGATHER from parallel.moe_dispatcher. */
int train_config_moe_dispatcher(const TrainConfig *cfg);
/* Ranks of the expert-data-parallel group: world / (etp x ep x pp). */
int train_config_edp(const TrainConfig *cfg);

#endif
