/* The runtime's side of a network whose parameter groups step in phases of
 * their own (nets/network.h; a GAN's generator and critic): the program of
 * a step is one phase per group (sched/program.h, SchedConfig.param_groups)
 * and these helpers are what the executor's handlers do with the group an
 * action names. Every one of them takes group -1 (the actions of a
 * one-group program) as "the whole network", which is what the runtime
 * did before groups existed, bit for bit.
 *
 * Per phase p of group g (a group may run several phases in a row,
 * SchedConfig.phase_repeats): phases_enter before its first forward (the
 * gradient is zeroed when a phase follows another, and the network is
 * told the group), the
 * backwards, phases_start_reduce at its GRAD_REDUCE (only group g's
 * buckets: the buckets were cut at the groups' boundaries and tagged, so
 * none mixes groups), phases_finish_reduce before its OPTIM, and the
 * update of group g with the norm of group g's gradient
 * (phases_local_sumsq, trainer_apply_group_update). */
#ifndef FIVEFOLD_TRAIN_PHASES_H
#define FIVEFOLD_TRAIN_PHASES_H

#include "train/trainer.h"

/* Where a parameter group's ranges begin or end, for dp_grads_create's
 * cuts (at most cap); returns how many (0 for a one-group network). */
int phases_group_cuts(const Network *net, size_t *cuts, int cap);
/* After dp_grads_create with those cuts: every bucket tagged with the
 * group of its tensors (DpBucket.param_group). */
int phases_tag_buckets(DpGrads *g, const Network *net, Error *err);

void phases_enter(Trainer *tr, int phase, int group);
int phases_start_reduce(Trainer *tr, int group, Error *err);
int phases_finish_reduce(Trainer *tr, int group, Error *err);
/* This rank's sum of squares of group's gradient (its ZeRO-1 blocks with
 * the distributed optimizer). */
double phases_local_sumsq(const Trainer *tr, int group);

#endif
