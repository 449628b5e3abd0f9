/* The links `fivefold calibrate` measures under MPI (cmd_calibrate.c's
 * network part): collectives and send/recv over message sizes fitted to
 * the cost model's alpha-beta, on one node over the world, on several
 * among each node's ranks and across nodes, and there whether a node's
 * devices share one network port (topology.devices_per_nic). */
#include "cli/calibrate_network.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "cli/calibrate_timing.h"
#include "comm/collectives.h"
#include "comm/host.h"
#include "comm/world.h"
#include "plan/calibrate_fit.h"

static double now_s(void) { return timer_now(); }

/* One collective of `bytes` (cost.h's meaning per kind) on all ranks. A
 * failure aborts the job (comm/world.h), so there is nothing to return. */
static void run_collective(PlanCollective kind, const CommGroup *world, float *send, float *recv, size_t bytes) {
  int n = world->size, rank = world->rank;
  size_t count = bytes / sizeof(float);
  size_t part = count / (size_t)n > 0 ? count / (size_t)n : 1;
  Error err = {0};
  int rc = 0;
  switch (kind) {
    case PLAN_COLL_ALL_REDUCE: rc = comm_allreduce_f32(world, recv, count, COMM_SUM, NULL, &err); break;
    case PLAN_COLL_REDUCE_SCATTER: rc = comm_reduce_scatter_sum_f32(world, send, recv, part, NULL, &err); break;
    case PLAN_COLL_ALL_GATHER: rc = comm_allgather_f32(world, send, recv, part, NULL, &err); break;
    case PLAN_COLL_ALL_TO_ALL: rc = comm_alltoall_f32(world, send, recv, part, NULL, &err); break;
    default: {
      /* Ping-pong between even and odd neighbours; half the round trip. */
      int peer = rank ^ 1;
      if (peer >= n) break;
      if (rank % 2 == 0) {
        if (!(rc = comm_send_f32(world, peer, 7, send, count, NULL, &err)))
          rc = comm_recv_f32(world, peer, 7, recv, count, NULL, &err);
      } else {
        if (!(rc = comm_recv_f32(world, peer, 7, recv, count, NULL, &err)))
          rc = comm_send_f32(world, peer, 7, send, count, NULL, &err);
      }
      break;
    }
  }
  if (rc) comm_abort(rc, "calibrate: %s", err.msg);
}

/* Times every kind on group g over message sizes (the slowest rank's time
 * of each repetition over the whole world, the fastest repetition) and
 * fits alpha-beta for g's size at `level`. Every rank of the world runs its
 * own group's collective at the same time, so a node's groups share its
 * network as they do in a run. A kind whose timings do not fit (noise)
 * keeps the link model and is reported. */
static int measure_level(const CommGroup *g, int level, int quick, ClusterSpec *spec, FILE *log, double *p2p_largest,
                         Error *err) {
  static const double sizes_full[] = {4096, 32768, 262144, 1048576, 4194304, 16777216};
  static const double sizes_quick[] = {4096, 65536, 1048576};
  const double *sizes = quick ? sizes_quick : sizes_full;
  int ns = quick ? 3 : 6, reps = quick ? 3 : 9, n = g->size;
  size_t max_bytes = (size_t)sizes[ns - 1];
  float *send = malloc(max_bytes), *recv = malloc(max_bytes);
  if (!send || !recv) {
    free(send);
    free(recv);
    return error_set(err, ERR_NOMEM, "calibrate: out of memory for %zu-byte message buffers", max_bytes);
  }
  calib_fill(send, max_bytes / sizeof(float), 1.0f);
  calib_fill(recv, max_bytes / sizeof(float), 1.0f); /* the all-reduce runs in place on it */
  int rc = 0;
  if (log) fprintf(log, "  %s (groups of %d rank(s)):\n", level == PLAN_LEVEL_INTER ? "inter-node" : "intra-node", n);
  for (int kind = 0; kind < PLAN_NUM_COLLECTIVES && !rc; kind++) {
    double bytes[8], secs[8];
    for (int s = 0; s < ns; s++) {
      double t[16];
      run_collective((PlanCollective)kind, g, send, recv, (size_t)sizes[s]);
      for (int r = 0; r < reps; r++) {
        if ((rc = comm_barrier(comm_world(), NULL, err))) break;
        double t0 = now_s();
        run_collective((PlanCollective)kind, g, send, recv, (size_t)sizes[s]);
        double dt = now_s() - t0;
        if (kind == PLAN_COLL_P2P) dt *= 0.5;
        if ((rc = comm_allreduce_f64(comm_world(), &dt, 1, COMM_MAX, NULL, err))) break;
        t[r] = dt;
      }
      if (rc) break;
      bytes[s] = sizes[s];
      secs[s] = t[0];
      for (int r = 1; r < reps; r++) secs[s] = fmin(secs[s], t[r]);
    }
    if (rc) break;
    if (kind == PLAN_COLL_P2P && p2p_largest) *p2p_largest = secs[ns - 1];
    PlanLink l;
    Error ferr = {0, ""};
    if (calib_fit_collective((PlanCollective)kind, n, bytes, secs, ns, &l, &ferr)) {
      if (log) fprintf(log, "  %-15s not fitted, keeps the link model: %s\n", plan_collective_name((PlanCollective)kind),
                       ferr.msg);
      continue;
    }
    /* Across nodes a shaper's bucket (or a switch's buffer) lets small
     * messages through faster than the link's rate, and the fit on relative
     * error can then price the largest message faster than it went: the
     * bandwidth is capped there, so that no size is priced faster than it
     * was measured (the contention model takes the port's rate from it). */
    double ca, cb;
    calib_collective_terms((PlanCollective)kind, n, &ca, &cb);
    double big = bytes[ns - 1], fitted = ca * l.latency + cb * big / l.bandwidth;
    int capped = level == PLAN_LEVEL_INTER && fitted < secs[ns - 1];
    if (capped) {
      double wire = secs[ns - 1] - ca * l.latency;
      if (!(wire > 0.5 * secs[ns - 1])) l.latency = 0, wire = secs[ns - 1];
      l.bandwidth = cb * big / wire;
    }
    spec->collective[kind][level] = l;
    spec->has_collective[kind][level] = 1;
    if (log)
      fprintf(log, "  %-15s %8.2f us latency, %8.4f GB/s   (%s..%s: %.1f..%.1f us)\n",
              plan_collective_name((PlanCollective)kind), l.latency * 1e6, l.bandwidth / 1e9, "4 KB",
              quick ? "1 MB" : "16 MB", secs[0] * 1e6, secs[ns - 1] * 1e6);
    if (log && capped)
      fprintf(log, "  %-15s the fit priced %s at %.1f us: bandwidth capped to the measured time\n", "",
              quick ? "1 MB" : "16 MB", fitted * 1e6);
  }
  if (!rc && spec->has_collective[PLAN_COLL_P2P][level]) {
    /* The nominal link is what send/recv reaches; collectives have their own. */
    spec->link[level] = spec->collective[PLAN_COLL_P2P][level];
    spec->link_efficiency[level] = 1.0;
  }
  free(send);
  free(recv);
  return rc;
}

/* Whether a node's devices share one network port: the largest send/recv
 * across nodes timed with only the first device of each node on the
 * network (the others wait), against all of them at once (`shared`, from
 * measure_level). k devices on one port take about k times as long
 * together as one alone; with a port each, as long. The spec keeps the
 * shared figure as its per-device link (what each device gets when all
 * send) and devices_per_nic = the divisor of the node's devices nearest
 * that ratio, so the simulator can give a message that travels alone the
 * port's whole rate (plan/link_share.h). */
static int measure_port_share(const CommGroup *node, const CommGroup *cross, int quick, double shared, int devices,
                              ClusterSpec *spec, FILE *log, Error *err) {
  const double bytes = 1048576;
  int reps = quick ? 3 : 9, rc = 0;
  float *send = malloc((size_t)bytes), *recv = malloc((size_t)bytes);
  if (!send || !recv) {
    free(send);
    free(recv);
    return error_set(err, ERR_NOMEM, "calibrate: out of memory for %.0f-byte message buffers", bytes);
  }
  calib_fill(send, (size_t)bytes / sizeof(float), 1.0f);
  int mine = node->rank == 0;
  if (mine) run_collective(PLAN_COLL_P2P, cross, send, recv, (size_t)bytes);
  double alone = INFINITY;
  for (int r = 0; r < reps && !rc; r++) {
    if ((rc = comm_barrier(comm_world(), NULL, err))) break;
    double t0 = now_s();
    if (mine) run_collective(PLAN_COLL_P2P, cross, send, recv, (size_t)bytes);
    double dt = mine ? 0.5 * (now_s() - t0) : 0.0;
    if ((rc = comm_allreduce_f64(comm_world(), &dt, 1, COMM_MAX, NULL, err))) break;
    alone = fmin(alone, dt);
  }
  free(send);
  free(recv);
  if (rc) return rc;
  double ratio = alone > 0 ? shared / alone : 1.0;
  int best = 1;
  for (int k = 1; k <= devices; k++)
    if (devices % k == 0 && fabs(log2(ratio / k)) < fabs(log2(ratio / best))) best = k;
  spec->tiers.devices_per_nic = best;
  if (log)
    fprintf(log, "  network port    1 MB send/recv across nodes %.1f us alone, %.1f us with all %d device(s) of a node "
            "at once (x%.2f): devices_per_nic %d\n", alone * 1e6, shared * 1e6, devices, ratio, best);
  return 0;
}

int calib_measure_links(int nodes, int ranks_on_node, int quick, ClusterSpec *spec, FILE *log, Error *err) {
  if (nodes <= 1) return measure_level(comm_world(), PLAN_LEVEL_INTRA, quick, spec, log, NULL, err);
  CommGroup node, cross;
  int rc = comm_host_groups(&node, &cross, err);
  if (rc) return rc;
  int ret = 0;
  double shared = 0;
  if (ranks_on_node > 1) ret = measure_level(&node, PLAN_LEVEL_INTRA, quick, spec, log, NULL, err);
  else if (log) fprintf(log, "  intra-node      not measured (one rank per node)\n");
  if (!ret) ret = measure_level(&cross, PLAN_LEVEL_INTER, quick, spec, log, &shared, err);
  if (!ret && ranks_on_node > 1 && shared > 0)
    ret = measure_port_share(&node, &cross, quick, shared, ranks_on_node, spec, log, err);
  else if (!ret)
    spec->tiers.devices_per_nic = 1;
  comm_host_groups_free(&node, &cross);
  return ret;
}
