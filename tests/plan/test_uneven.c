/* Megatron's uneven pipeline layouts in the planner (plan/stages.h):
 * first/last pipeline-rank layer counts, the embedding and the loss counted
 * as layers (94 layers on 96 virtual stages, the first holding only the
 * embedding and the last only the loss), the automatic partition when
 * there are fewer layers than stages, and the refusals Megatron makes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "plan/simulate.h"
#include "plan/stages.h"
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

static void test_layout_counts(void **state) {
  (void)state;
  int layers[96];
  Error err = {0, ""};
  assert_int_equal(plan_megatron_layout(94, 8, 12, -1, -1, 1, 1, layers, &err), 0);
  assert_int_equal(layers[0], 0);
  assert_int_equal(layers[95], 0);
  for (int s = 1; s < 95; s++) assert_int_equal(layers[s], 1);
  /* 30 layers, first and last rank 6 each, the middle two 9, over 3 chunks:
   * stage = chunk x pp + rank. */
  assert_int_equal(plan_megatron_layout(30, 4, 3, 6, 6, 0, 0, layers, &err), 0);
  for (int c = 0; c < 3; c++) {
    assert_int_equal(layers[c * 4 + 0], 2);
    assert_int_equal(layers[c * 4 + 1], 3);
    assert_int_equal(layers[c * 4 + 2], 3);
    assert_int_equal(layers[c * 4 + 3], 2);
  }
  /* Only the first given: the other ranks share the rest. */
  assert_int_equal(plan_megatron_layout(31, 4, 1, 4, -1, 0, 0, layers, &err), 0);
  assert_int_equal(layers[0], 4);
  assert_int_equal(layers[3], 9);
  /* Embedding only: 31 + 1 over 8 stages, the first builds one fewer. */
  assert_int_equal(plan_megatron_layout(31, 8, 1, -1, -1, 1, 0, layers, &err), 0);
  assert_int_equal(layers[0], 3);
  assert_int_equal(layers[7], 4);
  /* Refused as Megatron refuses them. */
  assert_int_not_equal(plan_megatron_layout(94, 8, 12, -1, -1, 1, 0, layers, &err), 0);
  assert_non_null(strstr(err.msg, "do not split evenly"));
  assert_int_not_equal(plan_megatron_layout(30, 4, 1, 5, 6, 0, 0, layers, &err), 0);
  assert_int_not_equal(plan_megatron_layout(30, 4, 1, 6, -1, 1, 0, layers, &err), 0);
  assert_non_null(strstr(err.msg, "cannot be combined"));
  PlanConfig c;
  plan_config_init(&c, 4096, 64, 1);
  c.par.pp = 8, c.par.vpp = 12;
  assert_int_equal(plan_pipeline_split_layers("embedding,loss", 94, &c, &err), 0);
  assert_int_equal(c.num_given_layers, 96);
  assert_int_not_equal(plan_pipeline_split_layers("first=x", 94, &c, &err), 0);
  assert_int_not_equal(plan_pipeline_split_layers("middle=3", 94, &c, &err), 0);
}

static ModelConfig model_94(void) {
  ModelConfig m;
  assert_int_equal(plan_test_load_model(&m, "llama-3-8b"), 0);
  m.num_layers = 94;
  return m;
}

/* 94 layers on pp 8 x vpp 12: simulated, with the embedding alone on the
 * first virtual stage and the LM head alone on the last. */
static void test_simulate_94_on_96(void **state) {
  (void)state;
  ModelConfig m = model_94();
  PlanOptions o;
  plan_options_default(&o);
  PlanConfig c;
  plan_config_init(&c, 4096, 64, 1);
  c.par.tp = 8, c.par.pp = 8, c.par.vpp = 12, c.par.dp = 0;
  Error err = {0, ""};
  assert_int_equal(plan_pipeline_split_layers("embedding,loss", m.num_layers, &c, &err), 0);
  int rc = plan_config_finish(&c, &m, &h100, 64, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  PlanResult r;
  rc = plan_simulate(&m, &h100, &o, &c, NULL, NULL, &r, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_true(r.step_time > 0 && r.mfu > 0 && r.mfu < 1);
  assert_true(fabs(r.stage[0].fwd_total - r.embedding.fwd_total) <= 1e-12);
  assert_true(fabs(r.stage[95].fwd_total - r.head.fwd_total) <= 1e-12);
  assert_true(fabs(r.stage[1].fwd_total - r.dense_layer.fwd_total) <= 1e-9 * r.dense_layer.fwd_total);
  print_message("94 layers on 96 virtual stages (embedding and loss as layers): %.0f ms, %.1f%% MFU\n",
                1e3 * r.step_time, 100 * r.mfu);
  plan_result_free(&r);

  /* Without a layout the planner's own partition also fills 96 stages, no
   * stage with more than one layer. */
  PlanConfig a;
  plan_config_init(&a, 4096, 64, 1);
  a.par.tp = 8, a.par.pp = 8, a.par.vpp = 12, a.par.dp = 0;
  assert_int_equal(plan_config_finish(&a, &m, &h100, 64, &err), 0);
  rc = plan_simulate(&m, &h100, &o, &a, NULL, NULL, &r, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  int sum = 0, empty = 0;
  for (int s = 0; s < 96; s++) {
    assert_true(r.cfg.layers_per_stage[s] <= 1);
    sum += r.cfg.layers_per_stage[s];
    empty += r.cfg.layers_per_stage[s] == 0;
  }
  assert_int_equal(sum, 94);
  assert_int_equal(empty, 2);
  assert_int_equal(r.cfg.layers_per_stage[95], 0); /* the LM head is the heaviest extra */
  plan_result_free(&r);

  /* More than two missing layers is still refused. */
  m.num_layers = 93;
  plan_config_init(&a, 4096, 64, 1);
  a.par.tp = 8, a.par.pp = 8, a.par.vpp = 12, a.par.dp = 0;
  assert_int_not_equal(plan_config_finish(&a, &m, &h100, 64, &err), 0);
  assert_non_null(strstr(err.msg, "only 93 layers"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout_counts),
      cmocka_unit_test(test_simulate_94_on_96),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
