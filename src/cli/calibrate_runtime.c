/* The runtime's per-step machinery timed by `fivefold calibrate`
 * (calibrate_runtime.h): the update, the per-bucket cost of the gradient
 * reduction and its pace by bucket size. The trainer reduces its gradient
 * in buckets through train/dp_grads.h, each bucket a collective of its
 * own, issued as training issues it (the caller arms the collective
 * timeout and decides the waits as a run does): a small one non-blocking
 * in a test loop, which costs several times the blocking collective the
 * link fit times. So the same reduction is timed here, one gradient in 1
 * bucket and in BUCKETS, and what the extra buckets cost beyond the
 * latencies the fit charges them is the spec's runtime.bucket_overhead_us. */
#include "cli/calibrate_runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "comm/collectives.h"
#include "comm/host.h"
#include "comm/world.h"
#include "kern/adamw.h"
#include "kern/vecops.h"
#include "plan/cost.h"
#include "train/dp_grads.h"
#include "train/train_config.h"

enum { BUCKETS = 64, REPS = 7 };

double calib_measure_update(int quick) {
  const size_t n = quick ? (size_t)1 << 20 : (size_t)1 << 22;
  float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v);
  double best = 0;
  if (p && g && m && v) {
    for (size_t i = 0; i < n; i++) p[i] = 1e-3f * (float)(i % 101);
    AdamWHyper h = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int r = 0; r < (quick ? 3 : REPS); r++) {
      double t0 = timer_now();
      memset(g, 0, n * sizeof *g);
      for (size_t i = 0; i < n; i += 4096) g[i] = 1e-3f; /* a gradient the step would have filled */
      float scale = clip_grad_scale(vec_sumsq(g, n), 1.0f);
      adamw_update(p, g, m, v, n, r + 1, &h, scale);
      double t = timer_now() - t0;
      if (r == 0 || t < best) best = t;
    }
  }
  free(p), free(g), free(m), free(v);
  return best / (double)n;
}

/* The slowest rank's time of one reduction of g's whole gradient, the
 * fastest of REPS (quick: 3) repetitions. */
static int time_reduction(DpGrads *g, int reps, double *best, Error *err) {
  *best = 0;
  for (int r = 0; r < reps; r++) {
    int rc = comm_barrier(g->group, NULL, err);
    double t0 = timer_now();
    dp_grads_begin(g);
    if (!rc) rc = dp_grads_start_range(g, 0, g->num_params, err);
    if (!rc) rc = dp_grads_finish(g, err);
    double t = timer_now() - t0;
    if (!rc) rc = comm_allreduce_f64(g->group, &t, 1, COMM_MAX, NULL, err);
    if (rc) return rc;
    if (r == 0 || t < *best) *best = t;
  }
  return 0;
}

/* The all-reduce latency the simulator charges each bucket on this world
 * (the calibrated fit at the level the world spans, else the link's). */
static double fitted_latency(const ClusterSpec *spec) {
  int level = spec->nodes > 1 ? PLAN_LEVEL_INTER : PLAN_LEVEL_INTRA;
  if (spec->has_collective[PLAN_COLL_ALL_REDUCE][level]) return spec->collective[PLAN_COLL_ALL_REDUCE][level].latency;
  return spec->link[level].latency;
}

int calib_measure_bucket_overhead(int quick, int threads, const ClusterSpec *spec, double *overhead, FILE *log,
                                  Error *err) {
  const CommGroup *world = comm_world();
  *overhead = 0;
  if (!world || world->size < 2) return 0;
  /* A gradient of 256 KB, in one bucket and in 64 of 4 KB: small buckets,
   * where the count of them matters (a small model's) and each costs
   * little more than its latency. With larger ones (32 KB) the difference
   * also holds their bandwidth below the fit's, which a run's small
   * buckets do not pay. */
  const size_t n = (size_t)1 << 16;
  float *grads = malloc(n * sizeof *grads);
  if (!grads) return error_set(err, ERR_NOMEM, "calibrate: out of memory for the bucket measurement");
  for (size_t i = 0; i < n; i++) grads[i] = 1e-3f * (float)(i % 97);
  CommHostLayout host;
  int rc = comm_host_layout(world, threads, &host, err);
  double t[2] = {0, 0};
  const int counts[2] = {1, BUCKETS};
  for (int k = 0; k < 2 && !rc; k++) {
    DpGrads g;
    rc = dp_grads_create(&g, world, grads, n, NULL, 0, (double)n * sizeof(float) / counts[k], 0, err);
    if (rc) break;
    rc = dp_grads_choose_overlap(&g, TRAIN_AUTO, &host, err);
    if (!rc) rc = time_reduction(&g, quick ? 3 : REPS, &t[k], err);
    dp_grads_free(&g);
  }
  free(grads);
  if (rc) return error_wrap(err, "calibrate: timing the gradient buckets");
  double extra = (t[1] - t[0]) / (BUCKETS - 1) - fitted_latency(spec);
  *overhead = extra > 0 ? extra : 0;
  if (log)
    fprintf(log, "  buckets         256 KB gradient: %.1f us in 1 bucket, %.1f us in %d; %.1f us per extra bucket "
            "beyond the all-reduce latency\n", t[0] * 1e6, t[1] * 1e6, BUCKETS, *overhead * 1e6);
  return 0;
}

int calib_measure_grad_reduce(int quick, int threads, const ClusterSpec *spec, double overhead, PlanCurve *factor,
                              FILE *log, Error *err) {
  const CommGroup *world = comm_world();
  memset(factor, 0, sizeof *factor);
  if (!world || world->size < 2) return 0;
  /* A gradient well past the caches (128 MB; 64 MB with quick), reduced
   * in buckets from 256 KB (1 MB with quick) to 64 MB. */
  static const double MB[] = {0.25, 1, 4, 16, 64};
  const int first = quick ? 1 : 0, last = 5;
  const size_t n = (quick ? (size_t)16 : (size_t)32) << 20;
  float *grads = malloc(n * sizeof *grads);
  if (!grads) return error_set(err, ERR_NOMEM, "calibrate: out of memory for the gradient reduction");
  for (size_t i = 0; i < n; i++) grads[i] = 1e-3f * (float)(i % 97);
  PlanConfig cfg;
  plan_config_init(&cfg, 1, world->size, 1);
  cfg.par.dp = world->size;
  PlanGroupTopo topo;
  CommHostLayout host;
  int rc = plan_group_topology(spec, &cfg, PLAN_GROUP_DP, &topo)
               ? error_set(err, ERR_INTERNAL, "calibrate: cannot place the world's group on the spec")
               : comm_host_layout(world, threads, &host, err);
  if (log && !rc) fprintf(log, "  grad reduce     %zu MB gradient, runtime / fit by bucket:", n * sizeof(float) >> 20);
  for (int i = first; i < last && !rc; i++) {
    double bytes = MB[i] * 1048576.0, t = 0;
    DpGrads g;
    if ((rc = dp_grads_create(&g, world, grads, n, NULL, 0, bytes, 0, err))) break;
    rc = dp_grads_choose_overlap(&g, TRAIN_AUTO, &host, err);
    if (!rc) rc = time_reduction(&g, 3, &t, err);
    int k = g.num_buckets;
    dp_grads_free(&g);
    if (rc) break;
    double fit = k * plan_collective_time(spec, &topo, PLAN_COLL_ALL_REDUCE, (double)n * sizeof(float) / k,
                                          PLAN_ALGO_AUTO, NULL);
    double f = fit > 0 ? (t - k * overhead) / fit : 1.0;
    if (f < 0.05) f = 0.05;
    factor->x[factor->n] = bytes;
    factor->y[factor->n++] = f;
    if (log) fprintf(log, " %g MB %.2f", MB[i], f);
  }
  if (log && !rc) fprintf(log, "\n");
  free(grads);
  if (rc) {
    memset(factor, 0, sizeof *factor);
    return error_wrap(err, "calibrate: timing the gradient reduction");
  }
  return 0;
}
