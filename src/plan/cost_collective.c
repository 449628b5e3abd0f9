/* Collective and point-to-point times by the alpha-beta model.
 *
 * A group has n ranks spread over N nodes with k of them (at least) on each
 * node; alpha/beta are the effective latency and bandwidth per device and
 * direction inside a node (i) and across nodes (e). Times for a buffer of S
 * bytes (see cost.h for what S means per collective):
 *   ring all-reduce      2(n-1) alpha + 2(n-1)/n S / beta_ring
 *   tree all-reduce      2(k-1) alpha_i + 2 ceil(log2 N) alpha_e + 2 S / beta_ring
 *                        (within one node: 2 ceil(log2 n) alpha_i + 2 S / beta_i)
 *   hierarchical         reduce-scatter in the node, all-reduce of S/k across
 *                        nodes (each rank on its own NIC), all-gather in the node:
 *                        2(k-1) alpha_i + 2(k-1)/k S / beta_i
 *                        + 2(N-1) alpha_e + 2(N-1)/N (S/k) / beta_e
 *   reduce-scatter, all-gather: half of the ring or hierarchical all-reduce
 *   all-to-all           (n-1) alpha + max(on-node bytes / beta_i,
 *                        off-node bytes / beta_e), with S (k-1)/n bytes staying
 *                        on the node and S (n-k)/n leaving it
 * beta_ring = min(beta_i, k beta_e): a ring that crosses nodes runs one
 * channel per NIC, so a node's k members together push k times one NIC's
 * bandwidth across the boundary (what NCCL's multi-ring layout achieves). */
#include <math.h>

#include "plan/cost.h"

typedef struct Levels {
  double ai, bi, ae, be; /* alpha/beta inside and across nodes */
} Levels;

static Levels levels_for(const ClusterSpec *cl, const PlanGroupTopo *g, PlanCollective kind) {
  Levels L;
  for (int level = 0; level < PLAN_NUM_LEVELS; level++) {
    PlanLink l;
    if (cl->has_collective[kind][level]) {
      l = cl->collective[kind][level];
    } else {
      l = level == PLAN_LEVEL_INTRA ? g->intra : g->inter;
      l.bandwidth *= cl->link_efficiency[level];
    }
    if (level == PLAN_LEVEL_INTRA)
      L.ai = l.latency, L.bi = l.bandwidth;
    else
      L.ae = l.latency, L.be = l.bandwidth;
  }
  return L;
}

static double log2_ceil(int n) {
  int r = 0;
  while ((1 << r) < n) r++;
  return r;
}

/* All-reduce (twice == 1) or its reduce-scatter / all-gather half. */
static double reduce_like(const Levels *L, int n, int N, int k, double S, PlanCollAlgo algo, int twice,
                          PlanCollAlgo *chosen) {
  double f = twice ? 2.0 : 1.0;
  double ring, tree = INFINITY, hier;
  if (N <= 1) {
    ring = f * (n - 1) * L->ai + f * (n - 1) / (double)n * S / L->bi;
    if (twice) tree = 2.0 * log2_ceil(n) * L->ai + 2.0 * S / L->bi;
    hier = ring;
  } else {
    double bring = fmin(L->bi, k * L->be);
    ring = f * (n - 1) * L->ae + f * (n - 1) / (double)n * S / bring;
    if (twice) tree = 2.0 * (k - 1) * L->ai + 2.0 * log2_ceil(N) * L->ae + 2.0 * S / bring;
    hier = f * (k - 1) * L->ai + f * (k - 1) / (double)k * S / L->bi + f * (N - 1) * L->ae +
           f * (N - 1) / (double)N * (S / k) / L->be;
  }
  PlanCollAlgo pick = algo;
  double t;
  switch (algo) {
    case PLAN_ALGO_RING: t = ring; break;
    case PLAN_ALGO_TREE: t = isinf(tree) ? ring : tree, pick = isinf(tree) ? PLAN_ALGO_RING : algo; break;
    case PLAN_ALGO_HIERARCHICAL: t = hier; break;
    default:
      t = ring, pick = PLAN_ALGO_RING;
      if (tree < t) t = tree, pick = PLAN_ALGO_TREE;
      if (hier < t) t = hier, pick = PLAN_ALGO_HIERARCHICAL;
      break;
  }
  if (chosen) *chosen = pick;
  return t;
}

double plan_collective_time(const ClusterSpec *cl, const PlanGroupTopo *g, PlanCollective kind, double bytes,
                            PlanCollAlgo algo, PlanCollAlgo *chosen) {
  if (chosen) *chosen = algo == PLAN_ALGO_AUTO ? PLAN_ALGO_RING : algo;
  int n = g->size, N = g->nodes > 0 ? g->nodes : 1;
  int k = g->per_node > 0 ? g->per_node : 1;
  if (n <= 1 || !(bytes > 0)) return 0.0;
  Levels L = levels_for(cl, g, kind);
  switch (kind) {
    case PLAN_COLL_ALL_REDUCE: return reduce_like(&L, n, N, k, bytes, algo, 1, chosen);
    case PLAN_COLL_REDUCE_SCATTER:
    case PLAN_COLL_ALL_GATHER: return reduce_like(&L, n, N, k, bytes, algo, 0, chosen);
    case PLAN_COLL_ALL_TO_ALL: {
      if (N <= 1) return (n - 1) * L.ai + bytes * (n - 1) / n / L.bi;
      double on = bytes * (k - 1) / n, off = bytes * (double)(n - k) / n;
      return (n - 1) * L.ae + fmax(on / L.bi, off / L.be);
    }
    case PLAN_COLL_P2P:
      if (N <= 1) return L.ai + bytes / L.bi;
      return L.ae + bytes / L.be;
    default: return 0.0;
  }
}

double plan_bucket_reduce_time(const ClusterSpec *cl, const PlanOptions *o, const PlanGroupTopo *g, PlanCollective kind,
                               double bytes) {
  if (g->size <= 1 || !(bytes > 0)) return 0.0;
  return plan_collective_time(cl, g, kind, bytes, o->algo, NULL) * plan_curve_eval(&o->grad_reduce_factor, bytes) +
         o->bucket_overhead;
}

double plan_p2p_time(const ClusterSpec *cl, int a, int b, double bytes) {
  if (a == b || !(bytes > 0)) return 0.0;
  int level = cluster_spec_node_of(cl, a) == cluster_spec_node_of(cl, b) ? PLAN_LEVEL_INTRA : PLAN_LEVEL_INTER;
  PlanLink l;
  if (cl->has_collective[PLAN_COLL_P2P][level]) {
    l = cl->collective[PLAN_COLL_P2P][level];
  } else {
    l = cluster_spec_device_link(cl, a, b);
    l.bandwidth *= cl->link_efficiency[level];
  }
  return l.latency + bytes / l.bandwidth;
}
