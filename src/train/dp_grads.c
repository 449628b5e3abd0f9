/* Bucketed asynchronous gradient reduction over the data-parallel group:
 * the bucket layout (segments between cuts, buckets top down), the backward
 * hook that starts buckets as they complete, and the wait before the
 * optimizer. See dp_grads.h. */
#include "train/dp_grads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/timer.h"

#define DEFAULT_BUCKET_BYTES (25.0 * 1024 * 1024)
#define CALIBRATION_ROUNDS 3

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

/* Sorted, unique segment boundaries 0 = b[0] < ... < b[n] = num_params. */
static size_t *segment_bounds(size_t num_params, const size_t *cuts, int num_cuts, int *n_segments) {
  size_t *b = malloc(((size_t)num_cuts + 2) * sizeof *b);
  if (!b) return NULL;
  int n = 0;
  b[n++] = 0;
  for (int i = 0; i < num_cuts; i++)
    if (cuts[i] > 0 && cuts[i] < num_params) b[n++] = cuts[i];
  b[n++] = num_params;
  qsort(b, (size_t)n, sizeof *b, cmp_size);
  int u = 1;
  for (int i = 1; i < n; i++)
    if (b[i] != b[u - 1]) b[u++] = b[i];
  *n_segments = u - 1;
  return b;
}

int dp_grads_create(DpGrads *g, const CommGroup *group, float *grads, size_t num_params, const size_t *cuts,
                    int num_cuts, double bucket_bytes, int scatter, Error *err) {
  memset(g, 0, sizeof *g);
  if (!group || group->size < 1 || num_params == 0)
    return error_set(err, ERR_ARG, "dp_grads_create: needs a process group and a non-empty gradient");
  g->group = group;
  g->dp = group->size;
  g->rank = group->rank;
  g->scatter = scatter;
  g->overlap = 1;
  g->grads = grads;
  g->num_params = num_params;
  g->window_end = num_params;
  if (!(bucket_bytes > 0)) {
    bucket_bytes = DEFAULT_BUCKET_BYTES;
    if (bucket_bytes > (double)num_params) bucket_bytes = (double)num_params; /* a quarter of 4-byte floats */
  }
  size_t dp = (size_t)g->dp;
  size_t S = (size_t)(bucket_bytes / sizeof(float));
  if (S < dp) S = dp;
  S = (S + dp - 1) / dp * dp; /* full buckets split evenly into blocks */
  if (S > (size_t)1 << 30) S = ((size_t)1 << 30) / dp * dp; /* MPI int counts */
  int n_seg;
  size_t *bounds = segment_bounds(num_params, cuts, num_cuts, &n_seg);
  if (!bounds) return error_set(err, ERR_NOMEM, "dp_grads: out of memory");
  size_t n = 0;
  for (int s = 0; s < n_seg; s++) n += (bounds[s + 1] - bounds[s] + S - 1) / S;
  g->buckets = calloc(n, sizeof *g->buckets);
  if (!g->buckets) {
    free(bounds);
    return error_set(err, ERR_NOMEM, "dp_grads: out of memory for %zu buckets", n);
  }
  g->num_buckets = (int)n;
  size_t shard = 0, stage = 0;
  int b = 0;
  for (int s = n_seg - 1; s >= 0; s--) {
    for (size_t end = bounds[s + 1]; end > bounds[s]; b++) {
      DpBucket *k = &g->buckets[b];
      k->end = end;
      k->begin = end - bounds[s] > S ? end - S : bounds[s];
      end = k->begin;
      size_t len = k->end - k->begin;
      k->block = (len + dp - 1) / dp;
      k->shard_offset = shard;
      shard += k->block;
      k->staged = scatter && len != k->block * dp;
      if (k->staged) stage += k->block * dp;
      comm_request_init(&k->req);
      k->group = group;
    }
  }
  free(bounds);
  if (scatter) {
    g->shard_len = shard;
    g->shard = alloc_big(shard * sizeof(float));
    if (stage) g->stage = alloc_big(stage * sizeof(float));
    if (!g->shard || (stage && !g->stage)) {
      dp_grads_free(g);
      return error_set(err, ERR_NOMEM, "dp_grads: out of memory for the %.1f MB gradient shard",
                       shard * sizeof(float) / 1e6);
    }
    size_t at = 0;
    for (int i = 0; i < g->num_buckets; i++) {
      DpBucket *k = &g->buckets[i];
      if (!k->staged) continue;
      k->stage = g->stage + at;
      at += k->block * dp;
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

void dp_grads_own_range(const DpGrads *g, int b, size_t *begin, size_t *end) {
  dp_grads_rank_range(g, b, g->buckets[b].group->rank, begin, end);
}

/* Reduce-scatter mode: blocks, shard offsets and staging from each
 * bucket's group (its size sets the block), allocated anew. */
static int layout_shard(DpGrads *g, Error *err) {
  alloc_big_free(g->shard);
  alloc_big_free(g->stage);
  g->shard = g->stage = NULL;
  size_t shard = 0, stage = 0;
  for (int b = 0; b < g->num_buckets; b++) {
    DpBucket *k = &g->buckets[b];
    size_t len = k->end - k->begin, n = (size_t)k->group->size;
    k->block = (len + n - 1) / n;
    k->shard_offset = shard;
    shard += k->block;
    k->staged = len != k->block * n;
    if (k->staged) stage += k->block * n;
    k->stage = NULL;
  }
  g->shard_len = shard;
  g->shard = alloc_big(shard * sizeof(float));
  if (stage) g->stage = alloc_big(stage * sizeof(float));
  if (!g->shard || (stage && !g->stage))
    return error_set(err, ERR_NOMEM, "dp_grads: out of memory for the %.1f MB gradient shard",
                     shard * sizeof(float) / 1e6);
  size_t at = 0;
  for (int b = 0; b < g->num_buckets; b++) {
    DpBucket *k = &g->buckets[b];
    if (!k->staged) continue;
    k->stage = g->stage + at;
    at += k->block * (size_t)k->group->size;
  }
  return 0;
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
  g->num_started = 0;
  g->started_in_backward = 0;
  g->exposed_seconds = 0;
  g->window_begin = 0;
  g->window_end = g->num_params;
  for (int b = 0; b < g->num_buckets; b++) g->buckets[b].started = 0;
}

void dp_grads_set_overlap(DpGrads *g, int overlap) {
  g->overlap = overlap != 0;
  g->overlap_reason[0] = '\0';
}

int dp_grads_choose_overlap(DpGrads *g, int setting, const CommHostLayout *host, Error *err) {
  if (setting == 0 || setting == 1) {
    dp_grads_set_overlap(g, setting);
    snprintf(g->overlap_reason, sizeof g->overlap_reason, "parallel.overlap_grad_reduce %d", setting);
    return 0;
  }
  if (setting != -1 || !host)
    return error_set(err, ERR_ARG, "overlap_grad_reduce is %d, expected auto (-1), 0 or 1 and a host layout",
                     setting);
  char facts[96];
  int ranks = host->host_ranks > 0 ? host->host_ranks : 1;
  if (host->host_threads % ranks == 0)
    snprintf(facts, sizeof facts, "%d rank%s x %d thread%s on %d core%s", ranks, ranks == 1 ? "" : "s",
             host->host_threads / ranks, host->host_threads / ranks == 1 ? "" : "s", host->host_cores,
             host->host_cores == 1 ? "" : "s");
  else
    snprintf(facts, sizeof facts, "%d ranks, %d threads in all, on %d core%s", ranks, host->host_threads,
             host->host_cores, host->host_cores == 1 ? "" : "s");
  if (host->max_peers_per_host <= 1) {
    g->overlap = 1;
    snprintf(g->overlap_reason, sizeof g->overlap_reason, "auto: no two DP ranks share a host");
  } else if (host->spare_cores >= 0) {
    g->overlap = 1;
    snprintf(g->overlap_reason, sizeof g->overlap_reason, "auto: %d ranks share one host with a spare core each (%s)",
             host->max_peers_per_host, facts);
  } else {
    g->overlap = 0;
    snprintf(g->overlap_reason, sizeof g->overlap_reason, "auto: %d ranks share one host, no spare core (%s)",
             host->max_peers_per_host, facts);
  }
  return 0;
}

void dp_grads_set_window(DpGrads *g, size_t begin, size_t end) {
  g->window_begin = begin;
  g->window_end = end;
}

static int start_bucket(DpGrads *g, int b, Error *err) {
  DpBucket *k = &g->buckets[b];
  size_t len = k->end - k->begin;
  k->started = 1;
  g->num_started++;
  if (!g->scatter && k->group->size <= 1) return 0; /* nothing to sum; the idle request waits at once */
  /* A NULL request makes the collective blocking (overlap off). */
  CommRequest *req = g->overlap ? &k->req : NULL;
  if (!g->scatter) return comm_allreduce_f32(k->group, g->grads + k->begin, len, COMM_SUM, req, err);
  const float *send = g->grads + k->begin;
  if (k->staged) {
    memcpy(k->stage, send, len * sizeof(float));
    memset(k->stage + len, 0, (k->block * (size_t)k->group->size - len) * sizeof(float));
    send = k->stage;
  }
  if (k->group->size <= 1) {
    memcpy(g->shard + k->shard_offset, send, k->block * sizeof(float));
    return 0;
  }
  return comm_reduce_scatter_sum_f32(k->group, send, g->shard + k->shard_offset, k->block, req, err);
}

void dp_grads_on_ready(void *ctx, size_t offset, size_t count) {
  DpGrads *g = ctx;
  (void)count;
  if (!g->overlap) return;
  Error err = {0};
  double t0 = timer_now();
  /* Ranges of one chunk arrive top down, so a bucket of the window is
   * complete once the lowest finished offset reaches its beginning. */
  size_t lo = offset > g->window_begin ? offset : g->window_begin;
  for (int b = 0; b < g->num_buckets; b++) {
    DpBucket *k = &g->buckets[b];
    if (k->started || k->begin < lo || k->end > g->window_end) continue;
    if (start_bucket(g, b, &err)) comm_abort(1, "gradient bucket %d: %s", b, err.msg);
    g->started_in_backward++;
  }
  /* Asynchronous collectives advance mostly inside MPI calls. */
  for (int b = 0; b < g->num_buckets; b++) {
    int done;
    if (g->buckets[b].req.active && comm_test(&g->buckets[b].req, &done, &err))
      comm_abort(1, "gradient bucket %d: %s", b, err.msg);
  }
  /* Time inside MPI here is not hidden: with shared-memory transports much
   * of the copying happens in these calls, on the backward's thread. */
  g->exposed_seconds += timer_now() - t0;
}

int dp_grads_start_range(DpGrads *g, size_t begin, size_t end, Error *err) {
  double t0 = timer_now();
  int rc = 0;
  for (int b = 0; b < g->num_buckets && !rc; b++) {
    DpBucket *k = &g->buckets[b];
    if (!k->started && k->begin >= begin && k->end <= end) rc = start_bucket(g, b, err);
  }
  g->exposed_seconds += timer_now() - t0;
  return rc ? error_wrap(err, "data-parallel gradient reduction") : 0;
}

int dp_grads_finish(DpGrads *g, Error *err) {
  double t0 = timer_now();
  int rc = 0;
  for (int b = 0; b < g->num_buckets && !rc; b++)
    if (!g->buckets[b].started) rc = start_bucket(g, b, err);
  for (int b = 0; b < g->num_buckets && !rc; b++) rc = comm_wait(&g->buckets[b].req, err);
  for (int b = 0; b < g->num_buckets; b++) g->buckets[b].started = 0;
  g->num_started = 0;
  g->exposed_seconds += timer_now() - t0;
  return rc ? error_wrap(err, "data-parallel gradient reduction") : 0;
}

int dp_grads_finish_group(DpGrads *g, int param_group, Error *err) {
  double t0 = timer_now();
  int rc = 0;
  for (int b = 0; b < g->num_buckets && !rc; b++)
    if (g->buckets[b].param_group == param_group && !g->buckets[b].started) rc = start_bucket(g, b, err);
  for (int b = 0; b < g->num_buckets && !rc; b++)
    if (g->buckets[b].param_group == param_group) rc = comm_wait(&g->buckets[b].req, err);
  for (int b = 0; b < g->num_buckets; b++)
    if (g->buckets[b].param_group == param_group && g->buckets[b].started) {
      g->buckets[b].started = 0;
      g->num_started--;
    }
  g->exposed_seconds += timer_now() - t0;
  return rc ? error_wrap(err, "data-parallel gradient reduction of parameter group %d", param_group) : 0;
}

int dp_grads_set_param_group(DpGrads *g, size_t begin, size_t end, int param_group, Error *err) {
  for (int b = 0; b < g->num_buckets; b++) {
    DpBucket *k = &g->buckets[b];
    if (k->end <= begin || k->begin >= end) continue;
    if (k->begin < begin || k->end > end)
      return error_set(err, ERR_ARG,
                       "dp_grads: bucket %d [%zu, %zu) straddles parameter group %d's range [%zu, %zu) (it must be "
                       "among the cuts)",
                       b, k->begin, k->end, param_group, begin, end);
    k->param_group = param_group;
  }
  return 0;
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
    }
    if (rc) return rc;
    double t = timer_now() - t0;
    if (round == 0 || t < best) best = t;
  }
  g->calibrated_seconds = best;
  dp_grads_begin(g);
  return 0;
}

int dp_grads_route_ranges(DpGrads *g, const CommGroup *group, const size_t *begin, const size_t *end, int n,
                          Error *err) {
  if (n <= 0) return 0;
  if (!group || group->size < 1) return error_set(err, ERR_ARG, "dp_grads_route_ranges: needs a process group");
  for (int b = 0; b < g->num_buckets; b++) {
    DpBucket *k = &g->buckets[b];
    for (int i = 0; i < n; i++) {
      if (k->begin >= begin[i] && k->end <= end[i]) {
        k->group = group;
        break;
      }
      if (k->begin < end[i] && begin[i] < k->end)
        return error_set(err, ERR_INTERNAL, "dp_grads_route_ranges: bucket [%zu, %zu) straddles range [%zu, %zu)",
                         k->begin, k->end, begin[i], end[i]);
    }
  }
  /* ZeRO-1: a routed bucket's blocks split over its own group. */
  return g->scatter ? layout_shard(g, err) : 0;
}
