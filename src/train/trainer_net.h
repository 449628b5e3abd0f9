/* The trainer's steps for a network of nets/ (cfg->family other than the
 * transformer): the same Trainer, loop, log line, metrics.jsonl,
 * checkpoints and Ctrl-C handling as the transformer's (trainer.c), with the
 * network driven only through nets/network.h, by the executor of the
 * step's sched/ program (schedule none: FWD and BWD per micro-batch,
 * GRAD_REDUCE, OPTIM) with handlers of its own. Such a network trains
 * data-parallel over every rank (one chunk, whole tensors): gradients are
 * summed over the replicas in buckets (dp_grads.h), and AdamW runs whole on
 * every rank or sharded (ZeRO-1, dist_optimizer.h). The optimizer and the
 * checkpoints take the network's parameter table itself. */
#ifndef FIVEFOLD_TRAIN_TRAINER_NET_H
#define FIVEFOLD_TRAIN_TRAINER_NET_H

#include "train/trainer.h"

int trainer_net_create(Trainer *tr, const TrainConfig *cfg, Error *err);
void trainer_net_free(Trainer *tr);
int trainer_net_step(Trainer *tr, TrainStepResult *res, Error *err);
int trainer_net_evaluate(Trainer *tr, EvalResult *res, Error *err);
/* The test part's loss and accuracy after training (a vision network with
 * data.test_at_end): a "test step" line on out and a {"type": "test"}
 * record on jsonl (either may be NULL). Nothing for other families. */
int trainer_net_test(Trainer *tr, FILE *out, FILE *jsonl, Error *err);
/* The size of the training order a checkpoint records: a vision network's
 * training images, 1 for the MLP (its samples follow from the step). */
uint64_t trainer_net_data_windows(const Trainer *tr);
/* The banner lines that describe the network, its data and batch. */
void trainer_net_print_model(const Trainer *tr, FILE *out);

/* Shared with the transformer's step (trainer_step.c). */
/* Sums x over g, identically on every rank (values gathered and added in
 * rank order); nothing to do for a missing or one-rank group. */
int trainer_sum_over_group(const CommGroup *g, double *x, Error *err);
/* The optimizer step with the global gradient norm sumsq, after the
 * non-finite guard (which may skip the step or stop the run). */
int trainer_apply_update(Trainer *tr, double sumsq, Error *err);
/* The same for one parameter group's phase (-1: all groups). */
int trainer_apply_group_update(Trainer *tr, int group, double sumsq, Error *err);
/* AdamW's settings and learning-rate schedule from the run's config. */
OptimizerConfig trainer_optimizer_config(const TrainConfig *cfg);

#endif
