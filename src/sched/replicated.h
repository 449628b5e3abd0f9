/* The program of a pipeline whose stages are replicated (DAPPLE stage
 * replication, arXiv 2007.01045): stage s runs on width[s] consecutive
 * ranks, each replica taking its own range of every micro-batch's
 * sequences, so one iteration still consumes the batch of one rank.
 *
 * The program has one list per rank (sum of the widths): every replica of
 * stage s runs the computes of stage s in the order of the unreplicated
 * pipeline program (sched_build with pp = the stage count), and each of
 * that program's transfers becomes one SEND/RECV per piece: the part of
 * the micro-batch that a replica of one stage and a replica of the next
 * both hold (the intersection of their sequence ranges), sent from the one
 * to the other. SchedAction.seq_begin/seq_count name the piece, peer the
 * other rank, stage and peer_stage the two stages. GRAD_REDUCE (over the
 * stage's own replicas) and OPTIM carry their stage too, so the simulator
 * prices them per stage.
 *
 * config.pp in such a program is the stage count; num_ranks the rank
 * count. sched_check (which expects one rank per stage) does not apply;
 * sched_replicated_check proves what the executor needs. */
#ifndef FIVEFOLD_SCHED_REPLICATED_H
#define FIVEFOLD_SCHED_REPLICATED_H

#include "base/error.h"
#include "sched/program.h"

#define SCHED_MAX_REPLICATED_STAGES 64

typedef struct SchedReplication {
  int stages;
  int width[SCHED_MAX_REPLICATED_STAGES];
  int sequences; /* of one micro-batch; every width divides it */
} SchedReplication;

/* Widths >= 1, at most SCHED_MAX_REPLICATED_STAGES stages, each width
 * dividing the micro-batch's sequences. The message names the stage. */
int sched_replication_validate(const SchedReplication *r, Error *err);
int sched_replication_ranks(const SchedReplication *r); /* sum of the widths */
int sched_replication_first_rank(const SchedReplication *r, int stage);
/* The stage of rank (and its replica index there); -1 when out of range. */
int sched_replication_stage_of(const SchedReplication *r, int rank, int *replica);
/* The sequences replica `replica` of `stage` holds of every micro-batch. */
void sched_replication_range(const SchedReplication *r, int stage, int replica, int *begin, int *count);

/* The program for stage_config (pp = r->stages, vpp 1, one parameter
 * group; its schedule and micro-batches) on sum(width) ranks, checked with
 * sched_replicated_check. */
int sched_build_replicated(const SchedConfig *stage_config, const SchedReplication *r, SchedProgram **out,
                           Error *err);

/* Every piece is matched with its partner (same micro-batch, sequences and
 * stages, opposite direction), each replica's pieces of a transfer cover
 * its range exactly once, and the program runs to completion when every
 * rank runs its list in order with blocking rendezvous sends. */
int sched_replicated_check(const SchedProgram *prog, const SchedReplication *r, Error *err);

#endif
