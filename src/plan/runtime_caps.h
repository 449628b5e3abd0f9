/* What the runtime the plan is for can run. The planner prices layouts any
 * Megatron-style runtime could run; a plan for `fivefold train --plan` must
 * hold only what fivefold's own runtime runs, or the best plan is one the
 * trainer refuses. plan_runtime_check is that filter: the search drops the
 * variants it refuses (PlanSearchStats.pruned_runtime) and `fivefold plan`
 * plans for fivefold unless told `--runtime any`.
 *
 * fivefold's runtime (src/train/) runs every TP / CP / DP / PP / VPP / EP /
 * ETP layout the divisibility rules allow, both schedules and ZeRO-1 with
 * any of them, and full activation recomputation (uniform or block, as
 * Megatron), selective recomputation of PLAN_RECOMPUTE_FIVEFOLD_MODULES in
 * every block (not core_attn, moe, shared_experts, nor per-layer), and sequence
 * parallelism needs the rows of a micro-batch on a CP rank (B x S / CP) to
 * split over TP. */
#ifndef FIVEFOLD_PLAN_RUNTIME_CAPS_H
#define FIVEFOLD_PLAN_RUNTIME_CAPS_H

#include "base/error.h"
#include "model/config.h"
#include "plan/parallel.h"

typedef enum PlanRuntime {
  PLAN_RUNTIME_ANY = 0, /* no restriction beyond the layout rules (the library default) */
  PLAN_RUNTIME_FIVEFOLD /* what `fivefold train` runs (the default of `fivefold plan`) */
} PlanRuntime;

/* The selective recomputation modules `fivefold train` runs as the planner
 * prices them: layernorm and mlp (dropped and rebuilt), moe_act (the
 * experts' SwiGLU output, never kept there). */
#define PLAN_RECOMPUTE_FIVEFOLD_MODULES (PLAN_RECOMPUTE_LAYERNORM | PLAN_RECOMPUTE_MLP | PLAN_RECOMPUTE_MOE_ACT)

/* "any" or "fivefold"; nonzero for anything else. */
int plan_runtime_from_name(const char *name, PlanRuntime *out);
const char *plan_runtime_name(PlanRuntime rt);

/* 0 when the runtime runs cfg (a finished config) for the model; otherwise
 * ERR_CONFIG with what it does not run (err may be NULL). */
int plan_runtime_check(PlanRuntime rt, const ModelConfig *model, const PlanConfig *cfg, Error *err);

#endif
