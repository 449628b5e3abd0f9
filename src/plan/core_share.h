/* Ranks that share cores, in the simulator: when a cluster spec says how
 * many cores a node's devices share (ClusterSpec.cores_per_node, written by
 * `fivefold calibrate`) and a configuration asks more of a node than its
 * cores run at once, the program is evaluated under processor sharing
 * (sched/evaluate_shared.h) instead of at the fixed share the spec's rates
 * are priced at. This file says when that applies and which devices each
 * program rank stands for on which node:
 *   - a pipeline program's rank r is pipeline rank r, i.e. every world rank
 *     with pipeline coordinate r (its TP x CP x DP group: the attention
 *     grid's order tp-cp-dp-pp, pipeline slowest);
 *   - a stage-replicated program (sched/replicated.h) has one rank per
 *     device, rank r on world rank r;
 * each world rank on the node of the device it is mapped to. */
#ifndef FIVEFOLD_PLAN_CORE_SHARE_H
#define FIVEFOLD_PLAN_CORE_SHARE_H

#include "base/error.h"
#include "plan/cluster.h"
#include "plan/parallel.h"
#include "sched/evaluate_shared.h"

typedef struct PlanCoreShare {
  int active;             /* 1: evaluate with processor sharing */
  SchedShareOptions opts; /* work callback, priced share, capacities and loads (owned arrays) */
} PlanCoreShare;

/* The share of a core the spec's rates are priced at, when processor
 * sharing can make work faster than priced (1 otherwise): every action
 * takes at least this share of its price, which keeps lower bounds valid. */
double plan_core_share_floor(const ClusterSpec *cl);

/* Sets cs->active (0 leaves the max-plus evaluation, bit for bit) and, when
 * active, the options for prog (the program plan_simulate built for cfg),
 * with work/ctx as the CPU part of each action's price. */
int plan_core_share_init(PlanCoreShare *cs, const ClusterSpec *cl, const PlanConfig *cfg, const SchedProgram *prog,
                         SchedWorkFn work, void *ctx, Error *err);
void plan_core_share_free(PlanCoreShare *cs);

#endif
