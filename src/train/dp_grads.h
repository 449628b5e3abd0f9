/* Data-parallel gradient reduction in buckets, started while backward still
 * runs.
 *
 * The flat gradient buffer is cut into contiguous buckets of about
 * bucket_bytes, laid out from the top of the buffer down, because backward
 * finishes the LM head first and the embedding last (model.h,
 * on_grads_ready): bucket 0 holds the highest offsets and is the first to be
 * complete. Every bucket but the last (the one holding offset 0) has a
 * length that is a multiple of the group size, so a reduce-scatter can take
 * it in place; the last is staged through a padded copy.
 *
 * Modes:
 *   all-reduce      every rank ends with the sum of everyone's gradient
 *                   (ranks scale their loss by 1/dp, so the sum is the mean)
 *   reduce-scatter  (ZeRO-1, dist_optimizer.h) rank r ends with the sum of
 *                   block r of every bucket, in `shard` (its part of the
 *                   gradient, bucket by bucket); the rest is not reduced.
 *
 * Use per step: dp_grads_begin, then set dp_grads_on_ready as the model's
 * on_grads_ready hook for the backward that completes the gradient (the
 * last micro-batch) — it starts each bucket as soon as its range is final
 * and polls the ones in flight so MPI moves them on — then dp_grads_finish
 * waits for all (starting any not yet started).
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
  int staged;          /* length is not block * dp: goes through the padded stage */
  CommRequest req;
  int started;
} DpBucket;

typedef struct DpGrads {
  const CommGroup *group;
  int dp, rank;
  int scatter; /* 1: reduce-scatter (ZeRO-1); 0: all-reduce */
  float *grads;
  size_t num_params;
  int num_buckets;
  DpBucket *buckets; /* bucket 0 = highest offsets (first complete) */
  int next;          /* next bucket to start this step */
  float *stage;      /* [block * dp] of the staged bucket, or NULL */
  float *shard;      /* reduce-scatter: [shard_len] this rank's reduced blocks */
  size_t shard_len;
  /* statistics */
  double exposed_seconds;    /* last step: in MPI calls from the hook, and waiting in finish */
  double calibrated_seconds; /* blocking reduction of all buckets; 0 until calibrated */
  int started_in_backward;   /* last step: buckets started from the hook */
} DpGrads;

/* bucket_bytes <= 0 picks the default: 25 MB, but at most a quarter of the
 * gradient (so small models still get several buckets to overlap). */
int dp_grads_create(DpGrads *g, const CommGroup *group, float *grads, size_t num_params, double bucket_bytes,
                    int scatter, Error *err);
void dp_grads_free(DpGrads *g);

void dp_grads_begin(DpGrads *g);
/* Model.on_grads_ready hook (ctx = the DpGrads). Never fails: a failing MPI
 * call aborts the job (comm/world.h). */
void dp_grads_on_ready(void *ctx, size_t offset, size_t count);
int dp_grads_finish(DpGrads *g, Error *err);

/* Times the blocking reduction of every bucket (collective; destroys the
 * gradient's contents: call where it is about to be zeroed). */
int dp_grads_calibrate(DpGrads *g, Error *err);

/* Rank r's part of bucket b in the flat buffer: [*begin, *end) (may be empty). */
void dp_grads_rank_range(const DpGrads *g, int b, int r, size_t *begin, size_t *end);

#endif
