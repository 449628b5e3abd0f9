/* The pipeline partition: which transformer blocks each (virtual) stage owns.
 *
 * Stages are virtual stages in pipeline order, stage = chunk * pp + rank, so
 * rank r holds stages r, r + pp, r + 2 pp, ... The embedding lives on stage 0
 * and the LM head with the loss on the last stage; both can be given a
 * weight in block units so that balancing accounts for them (the LM head of a
 * large vocabulary is a heavy layer). Blocks are contiguous: stage s owns
 * blocks [first_layer[s], first_layer[s] + num_layers[s]). */
#ifndef FIVEFOLD_SCHED_PARTITION_H
#define FIVEFOLD_SCHED_PARTITION_H

#include <stdio.h>

#include "base/error.h"

typedef struct SchedPartitionSpec {
  int num_layers;              /* transformer blocks; 0 = take the sum of the explicit list */
  int pp, vpp;                 /* the partition has pp * vpp stages */
  const int *layers_per_stage; /* NULL: balanced split; else one count per stage, in stage order */
  int num_given;               /* entries in layers_per_stage */
  double embedding_weight;     /* the embedding's cost in blocks (0 = not counted) */
  double head_weight;          /* the LM head + loss cost in blocks (0 = not counted) */
  int allow_empty;             /* permit stages with no blocks */
} SchedPartitionSpec;

typedef struct SchedPartition {
  int num_stages, pp, vpp, num_layers;
  int *first_layer; /* per stage */
  int *layers;      /* per stage: number of blocks */
  double *weight;   /* per stage: blocks + embedding/head weights it carries */
  double max_weight, mean_weight;
} SchedPartition;

/* Balanced split: the contiguous split whose heaviest stage is lightest
 * (embedding and head weights included), remaining slack taken from the
 * heaviest stages, later stages first on ties (so 10 blocks on 4 stages give
 * 3,3,2,2). Explicit lists are validated: one entry per stage, no negative
 * entries, no empty stage unless allowed, sum equal to num_layers. */
int sched_partition_make(const SchedPartitionSpec *spec, SchedPartition *out, Error *err);
void sched_partition_free(SchedPartition *part);

/* The stage that owns block `layer`, or -1. */
int sched_partition_stage_of_layer(const SchedPartition *part, int layer);

/* Parses "2,3,3" into a malloc'd array. */
int sched_partition_parse_list(const char *text, int **values, int *count, Error *err);

/* One line per stage: stage, rank, chunk, blocks, weight. */
void sched_partition_print(const SchedPartition *part, FILE *f);

#endif
