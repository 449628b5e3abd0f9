/* The alpha-beta collective model against hand-computed times on the
 * DGX-H100 spec (NVLink 450 GB/s x 0.8, 3 us; InfiniBand 50 GB/s x 0.9,
 * 6 us): ring all-reduce inside a node, the same group size across nodes
 * under each algorithm, reduce-scatter as half an all-reduce, all-to-all
 * split into on-node and off-node bytes, point-to-point, calibrated
 * overrides, and where each grid's groups land. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "plan/cost.h"
#include "plan_test_util.h"

static ClusterSpec h100;

static int setup(void **state) {
  (void)state;
  return plan_test_load_cluster(&h100, "dgx-h100");
}

static int teardown(void **state) {
  (void)state;
  cluster_spec_free(&h100);
  return 0;
}

static void assert_close(double got, double want) {
  if (fabs(got - want) > 1e-9 * fabs(want) + 1e-15) print_error("got %.12g, want %.12g\n", got, want);
  assert_true(fabs(got - want) <= 1e-9 * fabs(want) + 1e-15);
}

static PlanGroupTopo group_of(int tp, int cp, int dp, int pp, PlanGroupKind kind) {
  PlanConfig cfg;
  plan_config_init(&cfg, 4096, dp, 1);
  cfg.par.tp = tp, cfg.par.cp = cp, cfg.par.dp = dp, cfg.par.pp = pp;
  PlanGroupTopo g;
  assert_int_equal(plan_group_topology(&h100, &cfg, kind, &g), 0);
  return g;
}

static void test_ring_allreduce_in_node(void **state) {
  (void)state;
  PlanGroupTopo tp = group_of(8, 1, 1, 1, PLAN_GROUP_TP);
  assert_int_equal(tp.size, 8);
  assert_int_equal(tp.nodes, 1);
  assert_int_equal(tp.per_node, 8);
  double S = 1e9, ai = 3e-6, bi = 450e9 * 0.8;
  PlanCollAlgo chosen;
  double t = plan_collective_time(&h100, &tp, PLAN_COLL_ALL_REDUCE, S, PLAN_ALGO_RING, &chosen);
  assert_int_equal(chosen, PLAN_ALGO_RING);
  assert_close(t, 2 * 7 * ai + 2.0 * 7 / 8 * S / bi); /* 4.903 ms */
  /* Reduce-scatter and all-gather are each half of the ring all-reduce. */
  assert_close(plan_collective_time(&h100, &tp, PLAN_COLL_REDUCE_SCATTER, S, PLAN_ALGO_RING, NULL), 7 * ai + 7.0 / 8 * S / bi);
  assert_close(plan_collective_time(&h100, &tp, PLAN_COLL_ALL_GATHER, S, PLAN_ALGO_RING, NULL), 7 * ai + 7.0 / 8 * S / bi);
  /* A group of one costs nothing. */
  PlanGroupTopo one = group_of(1, 1, 1, 1, PLAN_GROUP_TP);
  assert_close(plan_collective_time(&h100, &one, PLAN_COLL_ALL_REDUCE, S, PLAN_ALGO_AUTO, NULL), 0.0);
}

static void test_allreduce_across_nodes(void **state) {
  (void)state;
  /* 16 data-parallel ranks, 8 on each of two nodes. */
  PlanGroupTopo dp = group_of(1, 1, 16, 1, PLAN_GROUP_DP);
  assert_int_equal(dp.nodes, 2);
  assert_int_equal(dp.per_node, 8);
  double S = 1e9, ai = 3e-6, bi = 360e9, ae = 6e-6, be = 45e9;
  double ring = 2 * 15 * ae + 2.0 * 15 / 16 * S / fmin(bi, 8 * be);
  double tree = 2 * 7 * ai + 2 * 1 * ae + 2 * S / fmin(bi, 8 * be);
  double hier = 2 * 7 * ai + 2.0 * 7 / 8 * S / bi + 2 * 1 * ae + 2.0 * 1 / 2 * (S / 8) / be;
  assert_close(plan_collective_time(&h100, &dp, PLAN_COLL_ALL_REDUCE, S, PLAN_ALGO_RING, NULL), ring);
  assert_close(plan_collective_time(&h100, &dp, PLAN_COLL_ALL_REDUCE, S, PLAN_ALGO_TREE, NULL), tree);
  assert_close(plan_collective_time(&h100, &dp, PLAN_COLL_ALL_REDUCE, S, PLAN_ALGO_HIERARCHICAL, NULL), hier);
  PlanCollAlgo chosen;
  double best = plan_collective_time(&h100, &dp, PLAN_COLL_ALL_REDUCE, S, PLAN_ALGO_AUTO, &chosen);
  assert_close(best, fmin(ring, fmin(tree, hier)));
  assert_int_equal(chosen, PLAN_ALGO_RING);
  /* Small messages are latency-bound: the tree wins there. */
  double small = 1e3;
  plan_collective_time(&h100, &dp, PLAN_COLL_ALL_REDUCE, small, PLAN_ALGO_AUTO, &chosen);
  assert_int_equal(chosen, PLAN_ALGO_TREE);
}

static void test_inside_vs_across(void **state) {
  (void)state;
  /* Four ranks in one node (TP) versus four ranks on four nodes (DP with
   * TP 8 in between): same size, same bytes, the network is ~8x slower. */
  PlanGroupTopo inside = group_of(4, 1, 2, 1, PLAN_GROUP_TP);
  PlanGroupTopo across = group_of(8, 1, 4, 1, PLAN_GROUP_DP);
  assert_int_equal(inside.size, 4);
  assert_int_equal(across.size, 4);
  assert_int_equal(inside.nodes, 1);
  assert_int_equal(across.nodes, 4);
  assert_int_equal(across.per_node, 1);
  double S = 1e9;
  double t_in = plan_collective_time(&h100, &inside, PLAN_COLL_ALL_REDUCE, S, PLAN_ALGO_AUTO, NULL);
  double t_out = plan_collective_time(&h100, &across, PLAN_COLL_ALL_REDUCE, S, PLAN_ALGO_AUTO, NULL);
  assert_close(t_in, 2 * 3 * 3e-6 + 1.5 * S / 360e9);
  assert_close(t_out, 2 * 3 * 6e-6 + 1.5 * S / 45e9);
  assert_true(t_out > 7 * t_in);
  /* Two of the four on each node: the hierarchical schedule moves a half. */
  PlanGroupTopo half = group_of(4, 1, 4, 1, PLAN_GROUP_DP); /* ranks 0, 4, 8, 12 */
  assert_int_equal(half.nodes, 2);
  assert_int_equal(half.per_node, 2);
  double hier = 2 * 1 * 3e-6 + 2.0 * 1 / 2 * S / 360e9 + 2 * 1 * 6e-6 + 2.0 * 1 / 2 * (S / 2) / 45e9;
  assert_close(plan_collective_time(&h100, &half, PLAN_COLL_ALL_REDUCE, S, PLAN_ALGO_HIERARCHICAL, NULL), hier);
}

static void test_all_to_all_and_p2p(void **state) {
  (void)state;
  double S = 64e6;
  PlanGroupTopo ep8 = group_of(8, 1, 1, 1, PLAN_GROUP_TP);
  assert_close(plan_collective_time(&h100, &ep8, PLAN_COLL_ALL_TO_ALL, S, PLAN_ALGO_AUTO, NULL),
               7 * 3e-6 + S * 7 / 8 / 360e9);
  /* Sixteen ranks on two nodes: half the bytes leave the node through each
   * rank's own NIC and set the pace. */
  PlanGroupTopo ep16 = group_of(1, 1, 16, 1, PLAN_GROUP_DP);
  assert_close(plan_collective_time(&h100, &ep16, PLAN_COLL_ALL_TO_ALL, S, PLAN_ALGO_AUTO, NULL),
               15 * 6e-6 + fmax(S * 7 / 16 / 360e9, S * 8 / 16 / 45e9));
  assert_close(plan_p2p_time(&h100, 0, 1, S), 3e-6 + S / 360e9);
  assert_close(plan_p2p_time(&h100, 7, 8, S), 6e-6 + S / 45e9);
  assert_close(plan_p2p_time(&h100, 3, 3, S), 0.0);
}

static void test_calibrated_override(void **state) {
  (void)state;
  ClusterSpec c = h100;
  c.link_devices = 0;
  c.link_bandwidth = c.link_latency = NULL;
  c.has_collective[PLAN_COLL_ALL_REDUCE][PLAN_LEVEL_INTRA] = 1;
  c.collective[PLAN_COLL_ALL_REDUCE][PLAN_LEVEL_INTRA].bandwidth = 100e9;
  c.collective[PLAN_COLL_ALL_REDUCE][PLAN_LEVEL_INTRA].latency = 10e-6;
  PlanGroupTopo tp = group_of(8, 1, 1, 1, PLAN_GROUP_TP);
  assert_close(plan_collective_time(&c, &tp, PLAN_COLL_ALL_REDUCE, 1e9, PLAN_ALGO_RING, NULL),
               2 * 7 * 10e-6 + 2.0 * 7 / 8 * 1e9 / 100e9);
  /* Other collectives keep the link values. */
  assert_close(plan_collective_time(&c, &tp, PLAN_COLL_ALL_GATHER, 1e9, PLAN_ALGO_RING, NULL),
               7 * 3e-6 + 7.0 / 8 * 1e9 / 360e9);
}

/* The grids of parallel.h: attention tp-cp-dp-pp, MoE etp-ep-edp-pp, and
 * the published folding example (8 ranks, TP2 CP2 DP2 / ETP1 EP8 EDP1). */
static void test_grids(void **state) {
  (void)state;
  PlanConfig cfg;
  plan_config_init(&cfg, 4096, 8, 1);
  cfg.par.tp = 2, cfg.par.cp = 2, cfg.par.dp = 0, cfg.par.pp = 1, cfg.par.ep = 8, cfg.par.etp = 1;
  Error err = {0, ""};
  int rc = plan_config_finish(&cfg, NULL, &h100, 8, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(cfg.par.dp, 2);
  assert_int_equal(cfg.par.edp, 1);
  assert_true(plan_config_is_folded(&cfg));
  PlanGroupTopo g;
  assert_int_equal(plan_group_topology(&h100, &cfg, PLAN_GROUP_CP, &g), 0);
  assert_int_equal(g.stride, 2);
  assert_int_equal(plan_group_topology(&h100, &cfg, PLAN_GROUP_DPCP, &g), 0);
  assert_int_equal(g.size, 4);
  assert_int_equal(g.stride, 2);
  assert_int_equal(plan_group_topology(&h100, &cfg, PLAN_GROUP_EP, &g), 0);
  assert_int_equal(g.size, 8);
  assert_int_equal(g.stride, 1);
  assert_int_equal(g.nodes, 1);
  assert_int_equal(plan_attention_rank(&cfg.par, 1, 0, 1, 0), 1 + 2 * 2);
  /* The coupled layout: expert TP = TP, EP inside DP. */
  cfg.par.cp = 1, cfg.par.dp = 0, cfg.par.ep = 4, cfg.par.etp = 2;
  rc = plan_config_finish(&cfg, NULL, &h100, 8, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_false(plan_config_is_folded(&cfg));
  /* Pipeline groups span nodes once a stage fills one. */
  PlanGroupTopo pp = group_of(8, 1, 1, 4, PLAN_GROUP_PP);
  assert_int_equal(pp.stride, 8);
  assert_int_equal(pp.nodes, 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ring_allreduce_in_node), cmocka_unit_test(test_allreduce_across_nodes),
      cmocka_unit_test(test_inside_vs_across),       cmocka_unit_test(test_all_to_all_and_p2p),
      cmocka_unit_test(test_calibrated_override),    cmocka_unit_test(test_grids),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
