/* Refining a configuration's pipeline partition by simulation.
 *
 * The partition of stages.h balances compute only (the heaviest stage's
 * forward + backward, embedding and LM head weighted in). The iteration
 * also pays pipeline transfers, the gradient-reduction tail of each stage
 * and the bubbles of uneven stages, and a partition must fit in memory.
 * plan_partition_refine starts from that compute min-max partition and
 * simulates its neighbours — one layer moved across one boundary between
 * consecutive virtual stages, either way, every stage keeping a layer —
 * moves to the best neighbour that fits in memory (the memory model's peak
 * over the schedule, simulate.h) and is faster, and repeats until none is
 * (steepest descent on the simulated iteration time). From a start that
 * does not fit, it first descends on the peak memory until one fits. */
#ifndef FIVEFOLD_PLAN_REFINE_H
#define FIVEFOLD_PLAN_REFINE_H

#include "base/error.h"
#include "plan/simulate.h"

typedef struct PlanRefineStats {
  double start_step_time; /* s: the compute min-max partition, simulated */
  int start_fits;
  int start_layers[PLAN_MAX_STAGES];
  int num_stages;
  int moves;              /* layers moved */
  long simulated;
} PlanRefineStats;

/* Refines r (a simulated result; r->cfg holds its partition) in place:
 * on return r is the simulation of the refined partition. cluster may carry
 * a device mapping. stats may be NULL. */
int plan_partition_refine(PlanResult *r, const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                          PlanRefineStats *stats, Error *err);

/* "partition: 3 4 4 ... -> ..., min-max 0.912 s/step, refined 0.871 s/step
 * (4.7% faster, 2 moves, 31 simulations)"; nothing when stats->simulated 0. */
void plan_refine_explain(const PlanRefineStats *stats, const PlanResult *r, FILE *f);

#endif
