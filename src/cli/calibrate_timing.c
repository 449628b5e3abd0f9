/* The timing rule of `fivefold calibrate` (calibrate_timing.h): the
 * fastest of repetitions, optionally in windows every rank shares, and the
 * barrier oversubscribed ranks take turns at. */
#include "cli/calibrate_timing.h"

#include <math.h>
#include <unistd.h>

#include "base/timer.h"
#include "comm/collectives.h"
#include "comm/world.h"
#include "plan/calibrate_fit.h"

/* Fastest time of fn over repetitions for about `budget` seconds (at least
 * `min_reps`, at most 64) after one warm-up call. The fastest, because on a
 * shared machine other processes only ever add time: it is the rate of the
 * hardware, which the core share then divides (see the top of the file).
 *
 * With g_together (several ranks of a node, each on cores of its own) every
 * measurement is a window all ranks share: they start it at a barrier and
 * each keeps calling fn after its own repetitions until every rank has
 * finished its own, so each repetition (the fastest included) ran while the
 * other ranks computed the same kernel, contending for the shared cache and
 * memory bandwidth as the ranks of a run do. Measured apart, a repetition
 * can fall where a neighbour was between kernels and miss that contention. */
static int g_together;

void calib_set_together(int on) { g_together = on; }

/* A barrier of the world. While it waits, this rank calls fn (if any)
 * or, with `sleep`, sleeps in 2 ms pauses. */
static void world_barrier(CalibTimedFn fn, void *ctx, int sleep) {
  Error err = {0};
  CommRequest req;
  comm_request_init(&req);
  int done = 0, rc = comm_barrier(comm_world(), &req, &err);
  while (!rc && !done) {
    rc = comm_test(&req, &done, &err);
    if (rc || done) break;
    if (sleep) usleep(2000);
    else if (fn) fn(ctx);
  }
  if (rc) comm_abort(rc, "calibrate: %s", err.msg);
}

void calib_together_barrier(CalibTimedFn fn, void *ctx) {
  if (g_together) world_barrier(fn, ctx, 0);
}

double calib_fastest_time(CalibTimedFn fn, void *ctx, double budget, int min_reps) {
  double t[64];
  calib_together_barrier(NULL, NULL);
  fn(ctx);
  int n = 0;
  double start = timer_now();
  while (n < 64 && (n < min_reps || timer_now() - start < budget)) {
    double t0 = timer_now();
    fn(ctx);
    t[n++] = timer_now() - t0;
  }
  calib_together_barrier(fn, ctx); /* the others may still be timing */
  double best = t[0];
  for (int i = 1; i < n; i++) best = fmin(best, t[i]);
  return best;
}

/* Mean time of fn over a window of ten times `budget` (at least 40 ms: many
 * scheduler slices) that every
 * rank of the world runs at once, however many share a core: oversubscribed
 * ranks time-slice their cores here, so the mean holds the share and what
 * the slicing costs beyond it (the fastest repetition would hold neither:
 * one that ran between two slices of the neighbour is a dedicated core's).
 * Each rank keeps calling fn until every rank has finished its window. */
double calib_shared_mean_time(CalibTimedFn fn, void *ctx, double budget, int min_reps) {
  calib_sleeping_barrier();
  fn(ctx);
  const double window = fmax(10 * budget, 0.04);
  int n = 0;
  double start = timer_now(), elapsed = 0;
  while (n < min_reps || elapsed < window) {
    fn(ctx);
    n++;
    elapsed = timer_now() - start;
  }
  world_barrier(fn, ctx, 0);
  return elapsed / n;
}

double calib_typical_mean(double *v, int n) {
  if (n < 1) return 0.0;
  const double limit = 2 * calib_median(v, n); /* sorts v: the slow calls are last */
  double sum = 0;
  int kept = 0;
  for (int i = 0; i < n && v[i] <= limit; i++) sum += v[i], kept++;
  return sum / kept;
}

void calib_fill(float *p, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) p[i] = scale * (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f * scale;
}

/* A barrier that sleeps while it waits, so that the ranks taking turns
 * leave their cores to the one measuring. */
void calib_sleeping_barrier(void) { world_barrier(NULL, NULL, 1); }
