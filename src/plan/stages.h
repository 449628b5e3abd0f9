/* Choosing the pipeline partition for a configuration: how many blocks each
 * virtual stage holds so that the slowest stage is as fast as possible.
 *
 * Costs are the priced forward + backward time of each block for one
 * micro-batch (dense and MoE blocks differ), plus the embedding on stage 0
 * and the LM head with its loss on the last stage, so a large vocabulary
 * pulls blocks off the last stage. Uneven stages are allowed; every stage
 * keeps at least one block. When all blocks cost the same the balanced split
 * of sched/partition.h is exact; otherwise a dynamic program over layers
 * minimises the heaviest stage, ties broken by the smallest sum of squared
 * stage costs. A partition given in the config is used as is (validated).
 * The result is a SchedPartition, the sched module's own description. */
#ifndef FIVEFOLD_PLAN_STAGES_H
#define FIVEFOLD_PLAN_STAGES_H

#include "base/error.h"
#include "plan/cost.h"
#include "sched/partition.h"

int plan_stages_choose(const PlanCostModel *cm, SchedPartition *out, Error *err);

/* The dynamic program on explicit costs (exposed for tests): layer_cost[L],
 * extra cost of the first and last stage; fills layers[stages]. */
int plan_stages_dp(const double *layer_cost, int num_layers, int stages, double first_extra, double last_extra,
                   int *layers, Error *err);

#endif
