/* Choosing the pipeline partition for a configuration: how many blocks each
 * virtual stage holds so that the slowest stage is as fast as possible.
 *
 * Costs are the priced forward + backward time of each block for one
 * micro-batch (dense and MoE blocks differ), plus the embedding on stage 0
 * and the LM head with its loss on the last stage, so a large vocabulary
 * pulls blocks off the last stage. Uneven stages are allowed; every stage
 * keeps at least one block unless there are fewer blocks than stages (at
 * most two fewer: Megatron's layouts where the embedding and the loss fill
 * a stage of their own), when stages may be empty. When all blocks cost the same the balanced split
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

/* Megatron-Core's uneven layouts as blocks per virtual stage (stage = chunk
 * x pp + rank): first_layers / last_layers (-1: not given) are the blocks of
 * the first / last pipeline rank (--decoder-first-pipeline-num-layers,
 * --decoder-last-pipeline-num-layers), the rest split evenly over the other
 * ranks, every rank's blocks evenly over its vpp chunks; or, with
 * account_embedding / account_loss (--account-for-embedding-in-pipeline-split,
 * --account-for-loss-in-pipeline-split), the embedding and the loss count as
 * one block each, the blocks plus those split evenly over all virtual
 * stages, and the first / last virtual stage builds one block fewer (so 94
 * blocks fill 96 virtual stages with an embedding-only first and a loss-only
 * last stage). Refused, as Megatron refuses it, when a split is not even;
 * the two kinds cannot be mixed. Fills layers[pp x vpp]. */
int plan_megatron_layout(int num_layers, int pp, int vpp, int first_layers, int last_layers, int account_embedding,
                         int account_loss, int *layers, Error *err);

/* "first=N,last=M" (either part alone) or "embedding,loss" (either alone),
 * applied with plan_megatron_layout to cfg's pp and vpp: sets
 * layers_per_stage and num_given_layers. */
int plan_pipeline_split_layers(const char *spec, int num_layers, PlanConfig *cfg, Error *err);

/* Full recomputation by Megatron's block method: the first n blocks of
 * every virtual stage are recomputed, the others not. Fixes cfg's partition
 * (the given one, else the one the planner chooses for cfg as priced
 * without recomputation) and writes the choice per layer
 * (PlanConfig.layer_recompute). cfg must have passed plan_config_finish. */
int plan_recompute_block_apply(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                               PlanConfig *cfg, int n, Error *err);

#endif
