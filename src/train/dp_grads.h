/* Data-parallel gradient reduction in buckets, started while backward still
 * runs.
 *
 * The flat gradient buffer (this rank's: with pipeline parallelism, its
 * chunks one after the other) is first cut at the given offsets into
 * segments (the model chunks, and tensors that need a bucket of their own,
 * like a tied embedding), then each segment into contiguous buckets of
 * about bucket_bytes, laid out from the top of the segment down, because
 * backward finishes the LM head first and the embedding last (model.h,
 * on_grads_ready): bucket 0 holds the highest offsets and is the first to be
 * complete. A bucket never straddles a cut. A bucket whose length is a
 * multiple of the group size reduce-scatters in place; the others (at most
 * one per segment) are staged through a padded copy of their own.
 *
 * Modes:
 *   all-reduce      every rank ends with the sum of everyone's gradient
 *                   (ranks scale their loss by 1/dp, so the sum is the mean)
 *   reduce-scatter  (ZeRO-1, dist_optimizer.h) rank r ends with the sum of
 *                   block r of every bucket, in `shard` (its part of the
 *                   gradient, bucket by bucket); the rest is not reduced.
 *
 * Use per step: dp_grads_begin, then, for the backward that completes a
 * chunk's gradient (its last micro-batch), dp_grads_set_window to the
 * chunk's range and dp_grads_on_ready as the model's on_grads_ready hook —
 * it starts each bucket of the window as soon as its range is final and
 * polls the ones in flight so MPI moves them on — dp_grads_start_range where
 * the program reduces the chunk (GRAD_REDUCE), then dp_grads_finish waits
 * for all (starting any not yet started). Buckets start in the same order on
 * every rank of the group because every rank runs the same program.
 *
 * Timing: the exposed part of the reduction is the time spent inside MPI on
 * the host thread: starting and polling buckets from the hook (shared-memory
 * transports copy data inside those calls) plus the wait in finish. dp_grads_calibrate measures the same reductions run blocking
 * with nothing to hide behind; hidden fraction = 1 - exposed / calibrated. */
#ifndef FIVEFOLD_TRAIN_DP_GRADS_H
#define FIVEFOLD_TRAIN_DP_GRADS_H

#include <stddef.h>

#include "base/error.h"
#include "comm/comm.h"

typedef struct DpBucket {
  size_t begin, end;   /* flat range [begin, end) */
  size_t block;        /* ceil((end - begin) / dp): one rank's block (reduce-scatter) */
  size_t shard_offset; /* where this rank's block lives in the shard buffer */
  int staged;          /* length is not block * dp: goes through its padded stage */
  float *stage;        /* staged: [block * dp] inside DpGrads.stage */
  CommRequest req;
  int started;
  const CommGroup *group; /* the group it reduces over: DpGrads.group, or the expert group */
  int param_group;        /* the parameter group its tensors belong to (dp_grads_set_param_group); 0 */
} DpBucket;

typedef struct DpGrads {
  const CommGroup *group;
  int dp, rank;
  int scatter; /* 1: reduce-scatter (ZeRO-1); 0: all-reduce */
  int overlap; /* 1 (default): non-blocking buckets started from the hook; 0: blocking, at
                  dp_grads_start_range / dp_grads_finish (dp_grads_set_overlap) */
  char overlap_reason[192]; /* why (dp_grads_choose_overlap); "" when set directly */
  float *grads;
  size_t num_params;
  int num_buckets;
  DpBucket *buckets; /* bucket 0 = highest offsets (first complete) */
  int num_started;   /* this step */
  size_t window_begin, window_end; /* range the hook may start buckets in */
  float *stage;      /* the staged buckets' padded copies, or NULL */
  float *shard;      /* reduce-scatter: [shard_len] this rank's reduced blocks */
  size_t shard_len;
  /* statistics */
  double exposed_seconds;    /* last step: in MPI calls from the hook, and waiting in finish */
  double calibrated_seconds; /* blocking reduction of all buckets; 0 until calibrated */
  int started_in_backward;   /* last step: buckets started from the hook */
} DpGrads;

/* bucket_bytes <= 0 picks the default: 25 MB, but at most a quarter of the
 * gradient (so small models still get several buckets to overlap). cuts
 * [num_cuts] (any order, duplicates and 0 / num_params allowed) are offsets
 * no bucket straddles. */
int dp_grads_create(DpGrads *g, const CommGroup *group, float *grads, size_t num_params, const size_t *cuts,
                    int num_cuts, double bucket_bytes, int scatter, Error *err);
void dp_grads_free(DpGrads *g);

/* overlap 0: the hook starts nothing and every bucket is reduced with a
 * blocking collective where the program reduces its chunk (GRAD_REDUCE) or
 * in finish. Where MPI advances non-blocking collectives only inside MPI
 * calls on the computing thread (shared-memory transports, no spare core),
 * nothing is hidden anyway and the blocking algorithms are faster. Call
 * before dp_grads_calibrate. */
void dp_grads_set_overlap(DpGrads *g, int overlap);

/* Sets overlap from the run's setting: 0 or 1 as given, or, for
 * TRAIN_AUTO (-1), blocking when DP ranks share a host that has no core to
 * spare per rank (Open MPI's shared-memory transport then moves a
 * non-blocking collective only inside MPI calls on the computing threads,
 * so nothing is hidden and the blocking algorithms win), overlapped
 * otherwise. Records the reason in g->overlap_reason, e.g. "auto: 2 ranks
 * share one host, no spare core (2 ranks x 1 thread on 2 cores)". ERR_ARG for
 * another setting. */
int dp_grads_choose_overlap(DpGrads *g, int setting, const CommHostLayout *host, Error *err);

/* MoE parallel folding: the buckets inside the ranges [begin[i], end[i])
 * (expert tensors, reduce_over_edp in model.h) reduce over `group` (the EDP
 * group) instead. The ranges must be among the cuts given to create, so no
 * bucket straddles one. In reduce-scatter mode (ZeRO-1 with expert
 * parallelism) a routed bucket is cut into blocks over its own group: the
 * shard then holds this rank's DP x CP block of every dense bucket and its
 * EDP block of every expert bucket (layout and shard buffer rebuilt). In
 * all-reduce mode a bucket whose group has one rank is left as it is. Every rank of both
 * groups must have the same bucket layout (same shard shapes: true for the
 * ranks of one pipeline stage). */
int dp_grads_route_ranges(DpGrads *g, const CommGroup *group, const size_t *begin, const size_t *end, int n,
                          Error *err);

/* Parameter groups that step in phases of their own (nets/network.h): the
 * buckets inside [begin, end) hold tensors of param_group. The range must
 * be cut at creation (its ends among the cuts), so that no bucket mixes
 * groups; ERR_ARG naming the bucket otherwise. */
int dp_grads_set_param_group(DpGrads *g, size_t begin, size_t end, int param_group, Error *err);

void dp_grads_begin(DpGrads *g);
/* The hook starts only buckets inside [begin, end) (a chunk's range). */
void dp_grads_set_window(DpGrads *g, size_t begin, size_t end);
/* Starts every bucket inside [begin, end) not started yet. */
int dp_grads_start_range(DpGrads *g, size_t begin, size_t end, Error *err);
/* Model.on_grads_ready hook (ctx = the DpGrads). Never fails: a failing MPI
 * call aborts the job (comm/world.h). */
void dp_grads_on_ready(void *ctx, size_t offset, size_t count);
int dp_grads_finish(DpGrads *g, Error *err);
/* dp_grads_finish for the buckets of one parameter group only (the phase
 * that steps it); the others are left as they are. */
int dp_grads_finish_group(DpGrads *g, int param_group, Error *err);

/* Times the blocking reduction of every bucket (collective; destroys the
 * gradient's contents: call where it is about to be zeroed). */
int dp_grads_calibrate(DpGrads *g, Error *err);

/* Rank r's part of bucket b in the flat buffer: [*begin, *end) (may be empty);
 * r is a rank of the bucket's group (DpBucket.group). */
void dp_grads_rank_range(const DpGrads *g, int b, int r, size_t *begin, size_t *end);
/* This rank's part of bucket b: its rank in the bucket's group. */
void dp_grads_own_range(const DpGrads *g, int b, size_t *begin, size_t *end);

#endif
