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
 *     "parallel": { "dp": 4, "bucket_mb": 25, "distributed_optimizer": 1 },
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

#define TRAIN_PATH_MAX 4096
#define TRAIN_TOKENIZER_BYTE_LEVEL "byte-level"

typedef struct TrainConfig {
  char config_path[TRAIN_PATH_MAX];  /* file it was read from */
  char model_source[TRAIN_PATH_MAX]; /* model config file, or "" when inline */
  int has_model;
  ModelConfig model;

  /* training */
  int micro_batch_size;  /* B */
  int seq_len;           /* T */
  int grad_accum_steps;  /* 0 until finalize when global_batch_size decides it */
  int global_batch_size; /* sequences per optimizer step over all ranks; 0 = unset */
  int steps;
  float lr, min_lr; /* min_lr < 0: unset, finalize makes it lr / 10 */
  int warmup_steps;
  LrDecay decay;
  float weight_decay, beta1, beta2, eps, grad_clip; /* grad_clip 0: off */
  uint64_t seed;
  int log_interval;
  int eval_interval; /* 0: evaluate only at the end */
  int eval_batches;
  int threads;        /* 0: every core OpenMP offers */
  double peak_gflops; /* 0: measure at startup */

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
  int keep_last;           /* checkpoints kept in the run directory; 0: all */

  char out_dir[TRAIN_PATH_MAX]; /* "" until finalize: runs/<config name> */
  int world_size;               /* data-parallel ranks: set from parallel.dp and the MPI world
                                   before finalize (1 without MPI) */

  /* parallel */
  int dp;                    /* as configured; 0: the MPI world size */
  double bucket_mb;          /* gradient bucket size; 0: default (trainer) */
  int distributed_optimizer; /* 1: ZeRO-1 over the DP ranks */
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
/* Resolves parallel.dp against the number of ranks the job runs on (0 means
 * all of them) and sets world_size; a dp that differs is an ERR_CONFIG that
 * says how to launch. Call before train_config_finalize (which derives the
 * accumulation from the global batch over world_size ranks). */
int train_config_set_world(TrainConfig *cfg, int world_ranks, Error *err);
/* Cross-field checks and derived defaults; data files must exist. */
int train_config_finalize(TrainConfig *cfg, Error *err);
void train_config_free(TrainConfig *cfg);

/* Lines "  --flag ARG   explanation" for every override flag. */
void train_config_print_flags(FILE *f);

/* Tokens per optimizer step (all ranks): B * T * accum * world. */
long train_config_tokens_per_step(const TrainConfig *cfg);

/* The resolved configuration as a JSON document (caller frees with
 * cJSON_Delete): what a run directory records. */
struct cJSON *train_config_to_json(const TrainConfig *cfg);

const char *lr_decay_name(LrDecay decay);

#endif
