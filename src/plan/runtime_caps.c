/* The runtime-capabilities filter of the planner: what fivefold's runtime
 * refuses, stated once for the search and for `fivefold plan`. See
 * runtime_caps.h. */
#include "plan/runtime_caps.h"

#include <stdio.h>
#include <string.h>

int plan_runtime_from_name(const char *name, PlanRuntime *out) {
  if (!strcmp(name, "any")) *out = PLAN_RUNTIME_ANY;
  else if (!strcmp(name, "fivefold")) *out = PLAN_RUNTIME_FIVEFOLD;
  else return -1;
  return 0;
}

const char *plan_runtime_name(PlanRuntime rt) { return rt == PLAN_RUNTIME_FIVEFOLD ? "fivefold" : "any"; }

int plan_runtime_check(PlanRuntime rt, const ModelConfig *model, const PlanConfig *cfg, Error *err) {
  (void)model;
  if (rt == PLAN_RUNTIME_ANY) return 0;
  /* Full recomputation runs (uniform groups, or the first blocks of each
   * virtual stage: the block method's per-layer choices), and selective
   * recomputation of every block with PLAN_RECOMPUTE_FIVEFOLD_MODULES
   * (runtime_caps.h); not core_attn (train accepts it, but it drops and
   * reruns nothing there, so the plan's price would not be what runs), moe
   * or shared_experts, nor selective blocks among others, nor a per-layer
   * mix neither full method describes. */
  int selective = cfg->recompute == PLAN_RECOMPUTE_SELECTIVE && cfg->num_layer_recompute == 0;
  int layer_selective = 0, mixed = 0;
  for (int l = 0; l < cfg->num_layer_recompute; l++) {
    layer_selective |= cfg->layer_recompute[l] == PLAN_RECOMPUTE_SELECTIVE;
    mixed |= cfg->layer_recompute[l] != cfg->layer_recompute[0];
  }
  if (layer_selective)
    return error_set(err, ERR_CONFIG,
                     "per-layer selective recomputation: fivefold train recomputes the same modules in every block");
  if (selective && (plan_config_recompute_modules(cfg) & ~PLAN_RECOMPUTE_FIVEFOLD_MODULES)) {
    char buf[96];
    return error_set(err, ERR_CONFIG,
                     "recompute selective (%s): fivefold train recomputes layernorm, mlp and moe_act; core_attn "
                     "drops nothing there (its attention keeps only the output and log-sum-exp, so the rerun "
                     "priced here would not happen), moe and shared_experts are not run",
                     plan_recompute_modules_describe(plan_config_recompute_modules(cfg), buf, sizeof buf));
  }
  if (mixed && cfg->recompute_method != 1)
    return error_set(err, ERR_CONFIG,
                     "per-layer recomputation: fivefold train runs full recomputation by Megatron's uniform or block "
                     "method only");
  const PlanParallel *p = &cfg->par;
  long long rows = (long long)cfg->micro_batch_size * cfg->seq_len / (p->cp > 0 ? p->cp : 1);
  if (p->tp > 1 && rows % p->tp)
    return error_set(err, ERR_CONFIG,
                     "micro-batch %d x sequence %d / cp %d = %lld rows do not split over tp %d (fivefold's sequence "
                     "parallelism splits the rows)",
                     cfg->micro_batch_size, cfg->seq_len, p->cp, rows, p->tp);
  return 0;
}
