/* The MoE all-to-all across nodes as DeepEP-style dispatchers run it
 * (PlanOptions.moe_node_dedup, simulate --dispatcher deepep): one network
 * copy of a token per remote node that holds one of its experts, NVLink
 * inside the node. Checked by hand on Mixtral-8x7B's fine-grained variant
 * (64 experts, top-8) on DGX-H100. */
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

static double a2a(const char *model, int ep, int gpus, int dedup, PlanCostModel *out) {
  ModelConfig m;
  assert_int_equal(plan_test_load_model(&m, model), 0);
  PlanOptions o;
  plan_options_default(&o);
  o.moe_node_dedup = dedup;
  static PlanConfig c; /* the cost model keeps a pointer to it */
  plan_config_init(&c, 4096, gpus, 1);
  c.par.ep = ep, c.par.dp = 0;
  Error err = {0, ""};
  assert_int_equal(plan_config_finish(&c, &m, &h100, gpus, &err), 0);
  static ModelConfig keep;
  keep = m;
  assert_int_equal(plan_cost_model_init(out, &keep, &h100, &o, &c, NULL, &err), 0);
  return out->moe_layer.fwd.t[PLAN_COMP_EP_COMM];
}

static void test_inside_a_node_unchanged(void **state) {
  (void)state;
  PlanCostModel cm;
  double plain = a2a("mixtral-8x7b", 8, 8, 0, &cm), dedup = a2a("mixtral-8x7b", 8, 8, 1, &cm);
  assert_true(plain > 0 && dedup == plain);
}

static void test_two_nodes_by_hand(void **state) {
  (void)state;
  PlanCostModel cm;
  double plain = a2a("mixtral-8x7b-fine64", 16, 16, 0, &cm);
  double dedup = a2a("mixtral-8x7b-fine64", 16, 16, 1, &cm);
  /* 4096 tokens, top-8, h 4096 bf16, the busiest rank's load; N = 2 nodes
   * of 8: a token reaches 1 - (1/2)^8 remote nodes. */
  double row = 4096.0 * 2 * cm.expert_load, tokens = 4096;
  double off = tokens * (1 - pow(0.5, 8)) * row, on = tokens * 8 * row * 7 / 16 + off * 7 / 8;
  PlanGroupTopo g = cm.group[PLAN_GROUP_EP];
  assert_int_equal(g.nodes, 2);
  double t_off = plan_collective_time(&h100, &g, PLAN_COLL_P2P, off, PLAN_ALGO_AUTO, NULL);
  g.nodes = 1;
  double t_on = plan_collective_time(&h100, &g, PLAN_COLL_P2P, on, PLAN_ALGO_AUTO, NULL);
  double want = 2 * fmax(t_off, t_on);
  assert_true(fabs(dedup - want) <= 1e-12 + 1e-9 * want);
  assert_true(dedup < plain);
  /* Fine-grained top-8 over 4 nodes: 8 pairs but 3 (1 - (3/4)^8) = 2.7
   * remote nodes per token, so the network carries about a third of it. */
  double fine_plain = a2a("mixtral-8x7b-fine64", 32, 32, 0, &cm), fine = a2a("mixtral-8x7b-fine64", 32, 32, 1, &cm);
  print_message("EP16 top-8: %.2f -> %.2f ms; EP32 top-8: %.2f -> %.2f ms per layer forward\n", 1e3 * plain,
                1e3 * dedup, 1e3 * fine_plain, 1e3 * fine);
  assert_true(fine < 0.6 * fine_plain);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_inside_a_node_unchanged),
      cmocka_unit_test(test_two_nodes_by_hand),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
