/* Searching the pipeline's micro-batch order by simulation: which schedule
 * (gpipe, 1f1b, zb-h1) and, in the 1F1B family, how many forwards each
 * pipeline rank runs before its first backward (SchedConfig.warmup).
 *
 * plan_order_search simulates the configuration under each schedule with
 * the default warm-up, then descends on the warm-up depths of the best
 * 1F1B-family schedule (one rank's depth, or those of ranks 0..q together,
 * up or down by one; steepest first; depths that would deadlock skipped)
 * while a neighbour is faster and fits in memory (a deeper
 * warm-up keeps one more micro-batch's activations on that rank; the
 * memory model's walk over the order prices it). Memory-aware as the
 * partition refinement: a candidate that fits beats one that does not.
 * An interleaved pipeline (vpp > 1, schedule interleaved) keeps its
 * schedule and descends the same way from Megatron-Core's depths
 * 2(p-r-1) + (v-1)p over the depths the scheduler accepts (builders.h),
 * keeping depths only when they simulate faster within memory (or fit where
 * the default does not). Not for stage replication, whose runtime runs the
 * schedule's own warm-up. */
#ifndef FIVEFOLD_PLAN_ORDER_H
#define FIVEFOLD_PLAN_ORDER_H

#include <stdio.h>

#include "base/error.h"
#include "plan/simulate.h"

enum { PLAN_ORDER_KINDS = 3 }; /* gpipe, 1f1b, zb-h1 */

typedef struct PlanOrderStats {
  SchedScheduleKind start_schedule;
  double start_step_time; /* s: the configuration as it came */
  int num_kinds; /* entries of kind[] simulated: 3, or 1 (interleaved alone) */
  SchedScheduleKind kind[PLAN_ORDER_KINDS];
  double kind_step_time[PLAN_ORDER_KINDS]; /* default warm-up */
  int kind_fits[PLAN_ORDER_KINDS];
  int moves;       /* warm-up depths changed by the descent */
  long simulated;  /* 0: nothing searched (pp 1, replicated stages, vpp > 1 not interleaved) */
} PlanOrderStats;

/* Searches r's order in place (r: a simulated result, r->cfg its
 * configuration); on return r is the simulation of the chosen order.
 * budget caps the simulations of the warm-up descent (0: 400). stats may be
 * NULL. */
int plan_order_search(PlanResult *r, const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                      int budget, PlanOrderStats *stats, Error *err);

/* "pipeline order by simulation: 1f1b 0.2260 s/step, gpipe ..., zb-h1 ...;
 * chosen zb-h1, warm-up 4 2 1 0 ... (4.9% faster than 1f1b, ...)"; for an
 * interleaved pipeline "interleaved 0.2 s/step; chosen interleaved with
 * warm-up 5 4 (Megatron-Core's is 6 4) ... faster than its default
 * warm-up". Nothing when stats->simulated is 0. */
void plan_order_explain(const PlanOrderStats *stats, const PlanResult *r, FILE *f);

/* plan_order_search on the devices r is mapped to (mapping.h), then a
 * blank line and plan_order_explain to f. */
int plan_order_search_explained(PlanResult *r, const ModelConfig *model, const ClusterSpec *cluster,
                                const PlanOptions *opt, FILE *f, Error *err);

/* " --warmup 4,2,1,0" for a simulate line, nothing without depths, then
 * the order costs of a pipeline (" --order-fwd-cost 1 --order-bwd-cost 2.07"). */
void plan_order_print_flags(const PlanConfig *cfg, FILE *f);

/* Parses "4,2,1,0" into cfg's warm-up depths; 0 or -1 with err set. */
int plan_order_parse_warmup(const char *text, PlanConfig *cfg, Error *err);

#endif
