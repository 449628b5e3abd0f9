/* Reading a plan file: the configuration `fivefold plan --out` chose
 * (search_output.c writes it), as `fivefold train --plan FILE` needs it.
 *
 * The file (docs/planner.md):
 *   {"format": "fivefold.plan", "version": 1, "model", "family", "cluster",
 *    "gpus", "seq_length", "dtype",
 *    "model_identity": {"name", "fingerprint", "summary"},
 *    "parallel": {tp, cp, dp, pp, vpp, ep, etp, edp, micro_batch_size,
 *                 global_batch_size, microbatches, schedule, recompute,
 *                 distributed_optimizer, layers_per_stage, stage_widths, warmup,
 *                 order_fwd_cost, order_bwd_cost}, "prediction": {...},
 *    "mapping": {device_of_rank: [...], method, rank_order_step_time_s,
 *                step_time_s, simulations} (optional),
 *    "buckets": {bucket_mb, ...} (optional: the bucket search's size),
 *    "fusion": {swiglu, bias_gelu, norm_residual} (optional booleans: the
 *               fused kernels priced, training.fuse_swiglu / fuse_bias_gelu /
 *               fuse_norm_residual)}
 * The reader checks what a trainer relies on: every size >= 1, the grids
 * multiply to gpus (tp cp dp pp = etp ep edp pp), the global batch splits
 * into dp x micro-batch x microbatches, the schedule is one the scheduler
 * knows and fits pp/vpp, layers_per_stage has pp x vpp entries >= 1.
 * model_identity says which model the plan was made for: the name given
 * to `fivefold plan` and a fingerprint of every field of its config
 * (plan_model_fingerprint), so that `train --plan` can refuse a plan made
 * for another model even when the layer counts agree. It is optional here
 * (has_identity 0); the trainer decides what a missing one means.
 * "family" (optional, "transformer" when absent) is "vision" for a plan of
 * `fivefold simulate --net ... --out` (data-parallel only: tp cp pp vpp ep
 * etp 1, schedule none, layers_per_stage the network's layer count; its
 * fingerprint is the vision config's, nets/vision.h).
 * Fields it does not know are ignored (prediction and search are for
 * people); missing or wrong ones are errors naming the file and the field. */
#ifndef FIVEFOLD_PLAN_PLAN_FILE_H
#define FIVEFOLD_PLAN_PLAN_FILE_H

#include "base/error.h"
#include "model/config.h"
#include "plan/parallel.h"
#include "sched/program.h"

typedef struct cJSON cJSON;

#define PLAN_FINGERPRINT_MAX 24

typedef struct PlanChoice {
  char model[256];   /* as given to `fivefold plan` ("" when absent) */
  char family[16];   /* "transformer" or "vision" */
  char cluster[64];
  int gpus;          /* world size the plan was made for */
  int seq_len;
  PlanDtype dtype;
  int tp, cp, dp, pp, vpp;
  int ep, etp, edp;
  int micro_batch_size, global_batch_size;
  int microbatches;  /* per optimizer step and data-parallel replica: global / (dp x micro) */
  SchedScheduleKind schedule;
  char schedule_name[16]; /* "none", "gpipe", "1f1b", "zb-h1", "interleaved" */
  PlanRecompute recompute;
  int recompute_method;     /* "parallel.recompute_method": 0 uniform (default), 1 block */
  int recompute_num_layers; /* "parallel.recompute_num_layers" (default 1) */
  unsigned recompute_modules; /* "parallel.recompute_modules" (PLAN_RECOMPUTE_* bits; absent: 0, the attention core) */
  int distributed_optimizer;
  int num_stages;    /* pp x vpp */
  int layers_per_stage[PLAN_MAX_STAGES]; /* by virtual stage (chunk x pp + rank) */
  int num_warmup;                        /* "parallel.warmup": 0 (absent) or pp depths */
  int warmup[SCHED_MAX_WARMUP_RANKS];    /* forwards per pipeline rank before its first backward */
  /* "parallel.order_fwd_cost", "parallel.order_bwd_cost" (optional, both
   * or neither; 0 when absent: the scheduler's defaults): the relative
   * durations the priced program placed its sends by (PlanConfig). */
  double order_fwd_cost, order_bwd_cost;
  double predicted_step_time; /* s; 0 when the file has no prediction */
  double bucket_mb;           /* "buckets.bucket_mb": the searched gradient bucket size; 0 when absent */
  /* "fusion.swiglu", "fusion.bias_gelu", "fusion.norm_residual": 1 fused, 0 unfused, -1 absent */
  int fuse_swiglu, fuse_bias_gelu, fuse_norm_residual;
  int has_identity;           /* model_identity present */
  char model_fingerprint[PLAN_FINGERPRINT_MAX];
  char model_summary[160];
  /* "mapping" (optional): rank r runs on device device_of_rank[r]. The
   * reader checks it is a permutation of the gpus; plan_file_read_mapping
   * returns it, and `fivefold train --plan` places its ranks by it
   * (comm_world_place). */
  int has_mapping;
  int mapping_is_identity;
  /* "parallel.stage_widths" (stage replication, plan/replicate.h): stage s
   * on stage_width[s] consecutive ranks; num 0: one width, dp */
  int num_stage_widths;
  int stage_width[PLAN_MAX_STAGES];
} PlanChoice;

/* "crc32:xxxxxxxx" of the model config's canonical JSON (every field,
 * defaults filled in): two configs that train the same model agree. */
void plan_model_fingerprint(const ModelConfig *model, char out[PLAN_FINGERPRINT_MAX]);
/* A short description for messages: layers, width, heads, experts, vocabulary. */
void plan_model_summary(const ModelConfig *model, char *out, size_t n);

int plan_file_read(const char *path, PlanChoice *out, Error *err);
/* The plan's "mapping.device_of_rank" (malloc'ed, *n entries; NULL and 0
 * when the plan has no mapping), after the checks of plan_file_read. */
int plan_file_read_mapping(const char *path, int **device_of_rank, int *n, Error *err);
/* A mapping object {"device_of_rank": [...]} (NULL: none; *out NULL, *n
 * 0): a permutation of 0 .. n - 1, of `expected` entries when expected > 0;
 * *out is malloc'ed. Refusals name origin and field. Plan files and the
 * plan record of a trace (otherData.plan.mapping) read it alike. */
int plan_mapping_from_json(const cJSON *mapping, const char *origin, const char *field, int expected,
                           int **out, int *n, Error *err);
/* The same from parsed JSON; origin names the file in messages. */
int plan_file_from_json(const cJSON *root, const char *origin, PlanChoice *out, Error *err);

#endif
