/* The trainer's part of MoE parallel folding and context parallelism
 * (docs/parallelism.md, "Folding"): the grid coordinates a rank takes from
 * both grids, the model shard's cp/ep/etp fields, the MPI callbacks bound
 * into ModelParallelOps, the gradient buckets whose expert tensors reduce
 * over the EDP group, and the gradient norm that counts every distinct
 * slice once. Private to trainer_step.c. */
#ifndef FIVEFOLD_TRAIN_TRAINER_FOLD_H
#define FIVEFOLD_TRAIN_TRAINER_FOLD_H

#include "train/trainer.h"

/* Sizes from the config (before the grid exists): cp, ep, etp, edp, folded. */
void trainer_fold_sizes(Trainer *tr);
/* After comm_grid_create: this rank's coordinates and the EDP group. */
void trainer_fold_coords(Trainer *tr);
/* Fills the folding fields of the shard. */
void trainer_fold_shard(const Trainer *tr, ModelShard *shard);
/* The ModelParallelOps the model gets (NULL when it needs none); binds the
 * MoE and CP callbacks into tr->tp_ops.ops when folded. */
const ModelParallelOps *trainer_fold_ops(Trainer *tr, Error *err);
/* After the model exists: whether any gradient needs a reduction. */
void trainer_fold_need_reduction(Trainer *tr);
/* dp_grads_create over the DP x CP group with the expert tensors' ranges as
 * extra cuts, routed to the EDP group. */
int trainer_fold_grads_create(Trainer *tr, const size_t *cuts, int num_cuts, double bucket_bytes, Error *err);
/* The squared global gradient norm, identical on every rank. */
int trainer_fold_sumsq(Trainer *tr, double *sumsq, Error *err);
/* How many ranks report each micro-batch's losses (the DP x CP group's
 * members per DP replica: cp). */
static inline int trainer_fold_loss_copies(const Trainer *tr) { return tr->cp > 1 ? tr->cp : 1; }

#endif
