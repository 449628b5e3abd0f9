/* simulate's options for matching a published run (cmd_plan_accuracy.h). */
#include "cli/cmd_plan_accuracy.h"

#include <stdlib.h>
#include <string.h>

#include "plan/stages.h"

const char *const kPlanAccuracyOptions[] = {"--pipeline-split", "--flops", "--recompute-modules", "--recompute-method",
                                            "--recompute-num-layers"};
const int kNumPlanAccuracyOptions = (int)(sizeof kPlanAccuracyOptions / sizeof kPlanAccuracyOptions[0]);

void plan_accuracy_help(FILE *f) {
  fprintf(f,
          "matching a published run:\n"
          "  --pipeline-split SPEC    Megatron's uneven layouts: first=N,last=M (blocks of the first/last\n"
          "                           pipeline rank) or embedding,loss (each counted as a block)\n"
          "  --recompute-modules L    what selective recomputes: core_attn, layernorm, mlp, moe_act, moe,\n"
          "                           shared_experts (Megatron's --recompute-modules)\n"
          "  --recompute-method M     full recomputation: uniform (groups of N blocks) or block (only the\n"
          "  --recompute-num-layers N first N blocks of every virtual stage)\n"
          "  --flops C                also report MFU under megatron, causal, recompute or 6n FLOPs\n");
}

int plan_accuracy_option(PlanAccuracyOptions *o, PlanConfig *cfg, const char *cmd, const char *name,
                         const char *value, int *rc) {
  Error err = {0, ""};
  if (!strcmp(name, "--pipeline-split")) {
    o->pipeline_split = value;
  } else if (!strcmp(name, "--flops")) {
    if (plan_flops_convention_from_name(value, &o->flops))
      *rc = -1, fprintf(stderr, "fivefold %s: --flops must be megatron, causal, recompute or 6n, got '%s'\n", cmd, value);
  } else if (!strcmp(name, "--recompute-modules")) {
    if (plan_recompute_modules_parse(value, &cfg->recompute_modules, &err))
      *rc = -1, fprintf(stderr, "fivefold %s: --recompute-modules: %s\n", cmd, err.msg);
  } else if (!strcmp(name, "--recompute-method")) {
    cfg->recompute_method = !strcmp(value, "block");
    if (strcmp(value, "block") && strcmp(value, "uniform"))
      *rc = -1, fprintf(stderr, "fivefold %s: --recompute-method must be uniform or block, got '%s'\n", cmd, value);
  } else if (!strcmp(name, "--recompute-num-layers")) {
    char *end;
    long n = strtol(value, &end, 10);
    if (*end || end == value || n < 0 || n > PLAN_MAX_STAGES)
      *rc = -1, fprintf(stderr, "fivefold %s: --recompute-num-layers must be a count >= 0, got '%s'\n", cmd, value);
    else
      cfg->recompute_num_layers = (int)n;
  } else {
    return 0;
  }
  return 1;
}

int plan_accuracy_apply_split(const PlanAccuracyOptions *o, const ModelConfig *model, PlanConfig *cfg) {
  Error err = {0, ""};
  if (!o->pipeline_split || !plan_pipeline_split_layers(o->pipeline_split, model->num_layers, cfg, &err)) return 0;
  fprintf(stderr, "fivefold simulate: --pipeline-split %s: %s\n", o->pipeline_split, err.msg);
  return -1;
}

int plan_accuracy_apply_block(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                              PlanConfig *cfg) {
  Error err = {0, ""};
  if (cfg->recompute != PLAN_RECOMPUTE_FULL || cfg->recompute_method != 1) return 0;
  if (!plan_recompute_block_apply(model, cluster, opt, cfg, cfg->recompute_num_layers, &err)) return 0;
  fprintf(stderr, "fivefold simulate: --recompute-method block: %s\n", err.msg);
  return -1;
}

void plan_accuracy_print_mfu(const PlanAccuracyOptions *o, const PlanResult *r, const ModelConfig *model,
                             const ClusterSpec *cluster, int gpus) {
  if (o->flops == PLAN_FLOPS_MEGATRON) return;
  printf("MFU with %s FLOPs: %.1f%%\n", plan_flops_convention_name(o->flops),
         100.0 * plan_result_mfu(r, model, cluster, gpus, o->flops));
}
