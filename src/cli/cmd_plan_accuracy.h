/* simulate's options for matching a published run: Megatron's uneven
 * pipeline layouts (--pipeline-split), recomputation at Megatron's
 * granularity (--recompute-modules, --recompute-method,
 * --recompute-num-layers) and the FLOPs convention MFU is also reported
 * under (--flops). Kept apart from cmd_plan.c, which parses the rest. */
#ifndef FIVEFOLD_CLI_CMD_PLAN_ACCURACY_H
#define FIVEFOLD_CLI_CMD_PLAN_ACCURACY_H

#include <stdio.h>

#include "plan/flops_convention.h"
#include "plan/simulate.h"

typedef struct PlanAccuracyOptions {
  const char *pipeline_split; /* "first=N,last=M" or "embedding,loss" */
  PlanFlopsConvention flops;  /* also report MFU under it (megatron: nothing extra) */
} PlanAccuracyOptions;

/* The option names, for the parser's list of known options. */
extern const char *const kPlanAccuracyOptions[];
extern const int kNumPlanAccuracyOptions;

void plan_accuracy_help(FILE *f);

/* 1 when name is one of the options (its value parsed into o or cfg; *rc
 * set to -1 with a message on a bad value), 0 otherwise. */
int plan_accuracy_option(PlanAccuracyOptions *o, PlanConfig *cfg, const char *cmd, const char *name,
                         const char *value, int *rc);

/* After the model is loaded, before plan_config_finish: the layout. */
int plan_accuracy_apply_split(const PlanAccuracyOptions *o, const ModelConfig *model, PlanConfig *cfg);
/* After plan_config_finish: block recomputation as per-layer choices. */
int plan_accuracy_apply_block(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                              PlanConfig *cfg);
void plan_accuracy_print_mfu(const PlanAccuracyOptions *o, const PlanResult *r, const ModelConfig *model,
                             const ClusterSpec *cluster, int gpus);

#endif
