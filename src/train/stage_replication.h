/* Stage replication in the runtime (DAPPLE, arXiv 2007.01045;
 * sched/replicated.h): `parallel.stage_widths` gives pipeline stage s
 * width[s] replicas on consecutive ranks. Every rank reads the whole batch
 * of one rank and keeps its range of each micro-batch's sequences (the
 * first stage its tokens, the last its labels); the program moves the
 * activations between the stages' replicas piece by piece; each stage sums
 * its gradients over its own replicas (its own communicator), the loss
 * gradient being scaled for the last stage's share of the micro-batch so
 * that the sums are the gradients of one rank's step; losses and the
 * gradient norm are summed over the world.
 *
 * What it runs: tp, cp, ep, etp 1, vpp 1, dp 1 (the widths are the data
 * parallelism), untied embeddings; AdamW whole or ZeRO-1 over each
 * stage's replicas. Anything else is refused by the config check with the
 * field and the reason. */
#ifndef FIVEFOLD_TRAIN_STAGE_REPLICATION_H
#define FIVEFOLD_TRAIN_STAGE_REPLICATION_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "comm/world.h"
#include "sched/replicated.h"
#include "train/train_config.h"

struct Trainer;

typedef struct TrainerReplication {
  int on;
  SchedReplication r;
  int stage, replica;
  int seq_begin, local_batch; /* this rank's sequences of every micro-batch */
  CommGroup group;            /* the stage's replicas */
} TrainerReplication;

/* train_config_set_world for a config with stage_widths: the checks above
 * against the job's ranks; pp becomes the stage count, dp 1. */
int train_config_set_world_replicated(TrainConfig *cfg, int world_ranks, Error *err);

/* The layout part of trainer_create: sizes, the stage's replica group
 * (collective over the world), the replicated program. */
int trainer_replication_layout(struct Trainer *tr, Error *err);
void trainer_replication_free(struct Trainer *tr);
/* Keeps this rank's sequences of each of the step's micro-batches
 * [accum][B, T] in place, as [accum][local_batch, T]. */
void trainer_replication_select(const struct Trainer *tr, int *tokens, int *targets, int accum);
/* In place: sums[n] and counts over the world (aux-like sums averaged over
 * each stage's replicas first). */
int trainer_replication_sum_losses(struct Trainer *tr, double *sums, int n, int64_t *counts, size_t n_counts,
                                   Error *err);
/* The squared gradient norm of the whole model: each stage's replica 0
 * counts its stage, summed over the world in rank order. */
int trainer_replication_sumsq(struct Trainer *tr, double *sumsq, Error *err);
/* Tied embeddings: the first stage's embed.weight and the last stage's
 * head copy each get the sum of both stages' gradients (after each stage's
 * own reduction; without the distributed optimizer). */
int trainer_replication_sum_tied(struct Trainer *tr, Error *err);

#endif
