/* The distributed optimizer (ZeRO-1): AdamW whose fp32 moments are sharded
 * over the data-parallel ranks.
 *
 * The shard of a rank is its block of every gradient bucket (dp_grads.h, in
 * reduce-scatter mode), so the reduce-scatter that ends the backward leaves
 * each rank exactly the reduced gradient of the parameters it updates. Each
 * bucket is sharded over the group it reduces over, as Megatron-Core does
 * with expert parallelism or CP: dense buckets over DP x CP, expert buckets
 * (dp_grads_route_ranges) over EDP — two sharded instances in one step,
 * sharing one norm and one learning rate. A step then
 *   1. sums the squares of its shard (dist_optimizer_local_sumsq) and
 *      all-reduces them over every rank holding a part of the model: the
 *      global gradient norm, hence the same clipping factor on every rank;
 *   2. runs AdamW on its shard (weight decay per tensor as in optimizer.h:
 *      a block may straddle tensors, so it is cut at tensor boundaries);
 *   3. all-gathers the updated parameters bucket by bucket over the
 *      bucket's group, so every rank holds its full shard of the model
 *      again for the next forward.
 * The arithmetic per element is that of optimizer_step, so a ZeRO-1 run
 * trains the same model as a plain data-parallel one.
 *
 * Checkpoints hold full logical tensors: dist_optimizer_gather assembles the
 * full moments (collective), dist_optimizer_scatter takes this rank's shard
 * out of full ones, so a checkpoint moves freely between ZeRO-1 and plain
 * runs of any data-parallel size. Like optimizer.h it reads only the
 * network's parameter table and buffers. */
#ifndef FIVEFOLD_TRAIN_DIST_OPTIMIZER_H
#define FIVEFOLD_TRAIN_DIST_OPTIMIZER_H

#include "base/error.h"
#include "nets/network.h"
#include "train/dp_grads.h"
#include "train/optimizer.h"

typedef struct DistOptimizer {
  OptimizerConfig cfg;
  DpGrads *grads; /* reduce-scatter mode; owned by the caller */
  float *m, *v;   /* [grads->shard_len], same layout as grads->shard */
  int step;
} DistOptimizer;

int dist_optimizer_create(DistOptimizer *opt, DpGrads *grads, const Network *net, const OptimizerConfig *cfg,
                          Error *err);
void dist_optimizer_free(DistOptimizer *opt);

/* Collective over the group. Uses grads->shard (after dp_grads_finish). The
 * norm is summed over the DP group only (a model without TP or PP). */
/* The first tensor (table index) with a non-finite value in this rank's
 * gradient shard; -1 when all are finite. */
int dist_optimizer_first_nonfinite(const DistOptimizer *opt, const Network *net);
int dist_optimizer_step(DistOptimizer *opt, Network *net, OptimizerStepInfo *info, Error *err);
/* Sum of squares of this rank's shard, by the counting rule of
 * optimizer_tensor_in_norm. */
double dist_optimizer_local_sumsq(const DistOptimizer *opt, const Network *net, int tp_rank);
/* The step given the global sum of squares (collective: the all-gather). */
int dist_optimizer_apply(DistOptimizer *opt, Network *net, double sumsq, OptimizerStepInfo *info, Error *err);

/* Parameter groups that step in phases of their own, as optimizer_apply_group:
 * the sum of squares of this rank's blocks of group `group`'s buckets
 * (DpBucket.param_group; -1: all), and the step of that group alone (its
 * blocks updated, its buckets all-gathered). */
double dist_optimizer_local_sumsq_group(const DistOptimizer *opt, const Network *net, int tp_rank, int group);
int dist_optimizer_apply_group(DistOptimizer *opt, Network *net, int group, double sumsq, OptimizerStepInfo *info,
                               Error *err);

/* Collective: full->m and full->v (num_params floats each) receive every
 * rank's moments and full->step the step count. */
int dist_optimizer_gather(const DistOptimizer *opt, Optimizer *full, Error *err);
/* Local: this rank's shard from full moments (and the step). */
void dist_optimizer_scatter(DistOptimizer *opt, const Optimizer *full);

#endif
