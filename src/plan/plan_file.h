/* Reading a plan file: the configuration `fivefold plan --out` chose
 * (search_output.c writes it), as `fivefold train --plan FILE` needs it.
 *
 * The file (docs/planner.md):
 *   {"format": "fivefold.plan", "version": 1, "model", "cluster", "gpus",
 *    "seq_length", "dtype",
 *    "parallel": {tp, cp, dp, pp, vpp, ep, etp, edp, micro_batch_size,
 *                 global_batch_size, microbatches, schedule, recompute,
 *                 distributed_optimizer, layers_per_stage}, "prediction": {...}}
 * The reader checks what a trainer relies on: every size >= 1, the grids
 * multiply to gpus (tp cp dp pp = etp ep edp pp), the global batch splits
 * into dp x micro-batch x microbatches, the schedule is one the scheduler
 * knows and fits pp/vpp, layers_per_stage has pp x vpp entries >= 1.
 * Fields it does not know are ignored (prediction and search are for
 * people); missing or wrong ones are errors naming the file and the field. */
#ifndef FIVEFOLD_PLAN_PLAN_FILE_H
#define FIVEFOLD_PLAN_PLAN_FILE_H

#include "base/error.h"
#include "plan/parallel.h"
#include "sched/program.h"

typedef struct cJSON cJSON;

typedef struct PlanChoice {
  char model[256];   /* as given to `fivefold plan` ("" when absent) */
  char cluster[64];
  int gpus;          /* world size the plan was made for */
  int seq_len;
  PlanDtype dtype;
  int tp, cp, dp, pp, vpp;
  int ep, etp, edp;
  int micro_batch_size, global_batch_size;
  int microbatches;  /* per optimizer step and data-parallel replica: global / (dp x micro) */
  SchedScheduleKind schedule;
  char schedule_name[16]; /* "none", "gpipe", "1f1b", "interleaved" */
  PlanRecompute recompute;
  int distributed_optimizer;
  int num_stages;    /* pp x vpp */
  int layers_per_stage[PLAN_MAX_STAGES]; /* by virtual stage (chunk x pp + rank) */
  double predicted_step_time; /* s; 0 when the file has no prediction */
} PlanChoice;

int plan_file_read(const char *path, PlanChoice *out, Error *err);
/* The same from parsed JSON; origin names the file in messages. */
int plan_file_from_json(const cJSON *root, const char *origin, PlanChoice *out, Error *err);

#endif
