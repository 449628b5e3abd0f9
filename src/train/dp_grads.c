/* Bucketed asynchronous gradient reduction over the data-parallel group:
 * the bucket layout, the backward hook that starts buckets as they
 * complete, and the wait before the optimizer. See dp_grads.h. */
#include "train/dp_grads.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/timer.h"

#define DEFAULT_BUCKET_BYTES (25.0 * 1024 * 1024)
#define CALIBRATION_ROUNDS 3

int dp_grads_create(DpGrads *g, const CommGroup *group, float *grads, size_t num_params, double bucket_bytes,
                    int scatter, Error *err) {
  memset(g, 0, sizeof *g);
  if (!group || group->size < 1 || num_params == 0)
    return error_set(err, ERR_ARG, "dp_grads_create: needs a process group and a non-empty gradient");
  g->group = group;
  g->dp = group->size;
  g->rank = group->rank;
  g->scatter = scatter;
  g->grads = grads;
  g->num_params = num_params;
  if (!(bucket_bytes > 0)) {
    bucket_bytes = DEFAULT_BUCKET_BYTES;
    if (bucket_bytes > (double)num_params) bucket_bytes = (double)num_params; /* a quarter of 4-byte floats */
  }
  size_t dp = (size_t)g->dp;
  size_t S = (size_t)(bucket_bytes / sizeof(float));
  if (S < dp) S = dp;
  S = (S + dp - 1) / dp * dp; /* every bucket but the last splits evenly into blocks */
  if (S > (size_t)1 << 30) S = ((size_t)1 << 30) / dp * dp; /* MPI int counts */
  int n = (int)((num_params + S - 1) / S);
  g->buckets = calloc((size_t)n, sizeof *g->buckets);
  if (!g->buckets) return error_set(err, ERR_NOMEM, "dp_grads: out of memory for %d buckets", n);
  g->num_buckets = n;
  size_t shard = 0, stage = 0;
  for (int b = 0; b < n; b++) {
    DpBucket *k = &g->buckets[b];
    k->end = num_params - (size_t)b * S;
    k->begin = k->end > S ? k->end - S : 0;
    size_t len = k->end - k->begin;
    k->block = (len + dp - 1) / dp;
    k->shard_offset = shard;
    shard += k->block;
    k->staged = scatter && len != k->block * dp;
    if (k->staged) stage = k->block * dp;
    comm_request_init(&k->req);
  }
  if (scatter) {
    g->shard_len = shard;
    g->shard = alloc_big(shard * sizeof(float));
    if (stage) g->stage = alloc_big(stage * sizeof(float));
    if (!g->shard || (stage && !g->stage)) {
      dp_grads_free(g);
      return error_set(err, ERR_NOMEM, "dp_grads: out of memory for the %.1f MB gradient shard",
                       shard * sizeof(float) / 1e6);
    }
  }
  return 0;
}

void dp_grads_free(DpGrads *g) {
  free(g->buckets);
  alloc_big_free(g->shard);
  alloc_big_free(g->stage);
  memset(g, 0, sizeof *g);
}

void dp_grads_rank_range(const DpGrads *g, int b, int r, size_t *begin, size_t *end) {
  const DpBucket *k = &g->buckets[b];
  size_t lo = k->begin + (size_t)r * k->block, hi = lo + k->block;
  if (lo > k->end) lo = k->end;
  if (hi > k->end) hi = k->end;
  *begin = lo;
  *end = hi;
}

void dp_grads_begin(DpGrads *g) {
  g->next = 0;
  g->started_in_backward = 0;
  g->exposed_seconds = 0;
}

static int start_bucket(DpGrads *g, int b, Error *err) {
  DpBucket *k = &g->buckets[b];
  size_t len = k->end - k->begin;
  k->started = 1;
  if (!g->scatter) return comm_allreduce_f32(g->group, g->grads + k->begin, len, COMM_SUM, &k->req, err);
  const float *send = g->grads + k->begin;
  if (k->staged) {
    memcpy(g->stage, send, len * sizeof(float));
    memset(g->stage + len, 0, (k->block * (size_t)g->dp - len) * sizeof(float));
    send = g->stage;
  }
  return comm_reduce_scatter_sum_f32(g->group, send, g->shard + k->shard_offset, k->block, &k->req, err);
}

void dp_grads_on_ready(void *ctx, size_t offset, size_t count) {
  DpGrads *g = ctx;
  (void)count;
  Error err = {0};
  double t0 = timer_now();
  /* Ranges arrive top down, so a bucket is complete once the lowest
   * finished offset reaches its beginning. */
  while (g->next < g->num_buckets && g->buckets[g->next].begin >= offset) {
    if (start_bucket(g, g->next, &err)) comm_abort(1, "gradient bucket %d: %s", g->next, err.msg);
    g->next++;
    g->started_in_backward++;
  }
  /* Asynchronous collectives advance mostly inside MPI calls. */
  for (int b = 0; b < g->next; b++) {
    int done;
    if (g->buckets[b].req.active && comm_test(&g->buckets[b].req, &done, &err))
      comm_abort(1, "gradient bucket %d: %s", b, err.msg);
  }
  /* Time inside MPI here is not hidden: with shared-memory transports much
   * of the copying happens in these calls, on the backward's thread. */
  g->exposed_seconds += timer_now() - t0;
}

int dp_grads_finish(DpGrads *g, Error *err) {
  double t0 = timer_now();
  int rc = 0;
  while (!rc && g->next < g->num_buckets) rc = start_bucket(g, g->next++, err);
  for (int b = 0; b < g->num_buckets && !rc; b++) {
    rc = comm_wait(&g->buckets[b].req, err);
    g->buckets[b].started = 0;
  }
  g->exposed_seconds += timer_now() - t0;
  return rc ? error_wrap(err, "data-parallel gradient reduction") : 0;
}

int dp_grads_calibrate(DpGrads *g, Error *err) {
  double best = 0;
  for (int round = 0; round < CALIBRATION_ROUNDS; round++) {
    int rc = comm_barrier(g->group, NULL, err);
    if (rc) return rc;
    double t0 = timer_now();
    for (int b = 0; b < g->num_buckets && !rc; b++) {
      rc = start_bucket(g, b, err);
      if (!rc) rc = comm_wait(&g->buckets[b].req, err);
      g->buckets[b].started = 0;
    }
    if (rc) return rc;
    double t = timer_now() - t0;
    if (round == 0 || t < best) best = t;
  }
  g->calibrated_seconds = best;
  dp_grads_begin(g);
  return 0;
}
