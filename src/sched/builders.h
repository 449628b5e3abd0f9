/* Builders: from a configuration (schedule, pp, vpp, micro-batches) to the
 * program every rank runs.
 *
 * A builder decides only the order of computes on each rank (which
 * micro-batch and chunk runs forward or backward next); sched_lower then
 * adds everything else the same way for every schedule:
 *  - sends and receives between neighbouring stages (activations forward,
 *    gradients backward; with interleaving the last rank sends chunk c's
 *    output to rank 0's chunk c+1), placed so the program cannot deadlock
 *    even when every rank runs its list in order with blocking (rendezvous)
 *    sends and receives: the computes are timed with the order costs
 *    (config.order_fwd_cost/order_bwd_cost, default 1 and 2) and free
 *    communication, each transfer is stamped with the time its tensor is
 *    ready, and on both ranks it goes before the first compute that starts at
 *    or after that time, ties broken by one global order. The timed run is
 *    then itself an execution in which every send meets its receive, so no
 *    cycle can form, and under those costs the placement costs no time.
 *    Receives sit on the p2p stream (program.h), so an executor that posts
 *    them early hides transfer time behind the computes in between.
 *  - one GRAD_REDUCE per gradient bucket (one bucket per model chunk, bucket
 *    id = chunk) on the collective stream right after the chunk's last
 *    backward, so it overlaps the remaining backward work,
 *  - OPTIM at the end of each rank's list, after all its reductions. */
#ifndef FIVEFOLD_SCHED_BUILDERS_H
#define FIVEFOLD_SCHED_BUILDERS_H

#include "base/error.h"
#include "sched/program.h"

/* Checks that the configuration names a schedule that can be built:
 * none needs pp = 1 and vpp = 1; gpipe, 1f1b and zb-h1 need vpp = 1;
 * warm-up depths (SchedConfig.warmup_set) only for 1f1b, zb-h1 and
 * interleaved; interleaved needs vpp >= 2 and microbatches a multiple of pp,
 * and its depths (builders.c) the last rank's >= (vpp-1)*pp, none growing
 * along the pipeline, rank 0's at most the last rank's + 2*pp; everything
 * needs microbatches >= 1. The message says what to change (for depths: the
 * rank, its depth and the bound). */
int sched_config_validate(const SchedConfig *config, Error *err);

/* Builds the program for config (validated first); with param_groups > 1
 * the phased program of sched_program_phases. */
int sched_build(const SchedConfig *config, SchedProgram **out, Error *err);

/* The phased program (program.h, SchedConfig.param_groups and
 * phase_repeats of `phased`) from the one-group program `one`: every rank's
 * list once per phase, the actions of copy p naming phase p and its group,
 * dependencies and matches kept inside each copy (phases.c). */
int sched_program_phases(const SchedProgram *one, const SchedConfig *phased, SchedProgram **out, Error *err);

/* Number of forward passes (micro-batch chunks) rank runs before its steady
 * phase: none 0, gpipe m, 1f1b and zb-h1 min(p-r-1, m) (min(warmup[r], m)
 * with SchedConfig.warmup_set), interleaved min(2(p-r-1) + (v-1)p, m v)
 * (Megatron-Core's; min(warmup[r], m v) with warmup_set).
 * -1 for an invalid configuration. */
int sched_warmup_forwards(const SchedConfig *config, int rank);

/* One entry of a rank's compute order. */
typedef struct SchedComputeItem {
  SchedActionKind kind; /* SCHED_FWD, SCHED_BWD or (split backward) SCHED_BWD_WEIGHT */
  int microbatch, chunk;
} SchedComputeItem;

/* The compute order a builder chose: items[r][0..counts[r]) per rank
 * (malloc'd; free with sched_compute_order_free). */
typedef struct SchedComputeOrder {
  int num_ranks;
  SchedComputeItem **items;
  int *counts;
} SchedComputeOrder;

int sched_compute_order(const SchedConfig *config, SchedComputeOrder *order, Error *err);
void sched_compute_order_free(SchedComputeOrder *order);

/* The zero-bubble H1 order (schedule_zb.c): each rank runs its warm-up
 * forwards as 1F1B does, then, at every free moment of a unit-cost run
 * (F = B = W = 1, free transfers), a backward (input gradient) whose
 * gradient has arrived, else the next forward while fewer than warm-up + 1
 * micro-batches await their weight gradient (1F1B's peak of activations),
 * else the oldest pending weight gradient: W fills what would be bubbles,
 * above all in the cool-down. vpp must be 1. */
int sched_zb_h1_order(const SchedConfig *config, SchedComputeOrder *order, Error *err);

/* The most (micro-batch, chunk) pairs of rank whose forward has run and
 * whose backward has not finished (with a split backward: whose BWD_WEIGHT
 * has not run) at any point of its list: the activation sets it keeps. */
int sched_rank_peak_in_flight(const SchedProgram *prog, int rank);

/* Turns any compute order into a full program as described above: every
 * (micro-batch, chunk) must appear exactly once forward and once backward on
 * its rank (and, when config.split_backward, once BWD_WEIGHT after it). Fails with the blocked computes named if the order itself can
 * never run. New schedules only need to produce an order. */
int sched_lower(const SchedConfig *config, const SchedComputeOrder *order, SchedProgram **out, Error *err);

#endif
