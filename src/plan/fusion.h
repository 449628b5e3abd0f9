/* Operator fusion as a priced choice (after DisCo, arXiv 2209.12769): which
 * of the runtime's fused elementwise kernels to run (kern/fusion.h:
 * SwiGLU's silu(gate) * up, GPT-2's bias + GeLU, the residual add and the
 * norm after it). The unfused variant runs
 * each operation as a kernel of its own with the intermediate written to
 * memory; the cost model prices that as extra bytes at the calibrated
 * memory bandwidth (PlanOptions.fuse_swiglu / fuse_bias_gelu /
 * fuse_norm_residual, cost_layer.c). The search simulates every
 * combination of the switches the model has (a SwiGLU model: fuse_swiglu;
 * a GPT-2: fuse_bias_gelu; every model: fuse_norm_residual), exhaustively
 * (two variants each, four simulations), and keeps the fastest; ties
 * go to the fused kernel (fewer launches). Both variants give
 * bit-identical results, so the choice is about time alone. */
#ifndef FIVEFOLD_PLAN_FUSION_H
#define FIVEFOLD_PLAN_FUSION_H

#include <stdio.h>

#include "base/error.h"
#include "plan/simulate.h"

typedef struct PlanFusionChoice {
  int has_swiglu, has_bias_gelu, has_norm_residual; /* the model runs the chain at all */
  int swiglu, bias_gelu, norm_residual;             /* chosen: 1 fused */
  double step_time;              /* s, with the chosen kernels */
  double unfused_step_time;      /* s, every chain the model has unfused */
  double step_time_of[2][2][2];  /* s, [swiglu][bias_gelu][norm_residual] (only the model's combinations) */
  int simulations;
} PlanFusionChoice;

/* Searches the fusion switches of cfg; opt_out = opt with the chosen ones. */
int plan_fusion_search(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                       const PlanConfig *cfg, PlanFusionChoice *out, PlanOptions *opt_out, Error *err);

/* What the choice bought, for plan's output and --explain. */
void plan_fusion_explain(const PlanFusionChoice *c, FILE *f);

#endif
