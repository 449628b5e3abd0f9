/* Ranks sharing cores in the simulator (plan/core_share.h): the spec's
 * "cores" object read, defaulted, refused and written back; on 3 ranks of
 * 2 cores (a stage-replicated pipeline, PP3 under 1F1B and zero-bubble,
 * TP2 x PP2 on 4 ranks) processor sharing predicts a step between a core
 * per rank and the fixed share, with its breakdown summing to the step and
 * the search's lower bound below it; a layout that always computes on every
 * rank (DP) keeps the fixed-share step; a waiting load of 1 is the fixed
 * share and one of a half lies between; and a spec whose cores run every
 * device at once gives the max-plus prediction bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/calibrate_fit.h"
#include "plan/cluster.h"
#include "plan/simulate.h"

/* A spec shaped like `mpirun -np N fivefold calibrate` on a 2-core CPU:
 * peak and bandwidth at the share of a core (cores_json "" for none). */
static void cpu_spec(ClusterSpec *s, int devices, double share, const char *cores_json) {
  char text[2048];
  snprintf(text, sizeof text,
           "{\"name\": \"cpu\", \"nodes\": 1, \"devices_per_node\": %d,"
           " \"peak_tflops\": {\"bf16\": %.17g, \"fp32\": %.17g},"
           " \"memory\": {\"capacity_GiB\": 16, \"bandwidth_GBps\": %.17g, \"efficiency\": 0.6},"
           " \"intra_node\": {\"bandwidth_GBps\": 5, \"latency_us\": 3},"
           " \"inter_node\": {\"bandwidth_GBps\": 1, \"latency_us\": 30},"
           " \"compute\": {\"gemm_efficiency\": [[1e6, 0.3], [1e8, 0.6], [1e10, 0.7]], \"kernel_floor_us\": 2}%s%s}",
           devices, 0.1 * share, 0.1 * share, 10 * share, cores_json[0] ? ", " : "", cores_json);
  cJSON *j = cJSON_Parse(text);
  assert_non_null(j);
  Error err = {0, ""};
  int rc = cluster_spec_from_json(s, j, "<cpu>", &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  cJSON_Delete(j);
}

static int parse_error(const char *cores_json, const char *expect) {
  char text[1024];
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"devices_per_node\": 3, \"peak_tflops\": {\"bf16\": 0.1},"
           " \"memory\": {\"capacity_GiB\": 16, \"bandwidth_GBps\": 10},"
           " \"intra_node\": {\"bandwidth_GBps\": 5, \"latency_us\": 3},"
           " \"inter_node\": {\"bandwidth_GBps\": 1, \"latency_us\": 30}, \"cores\": %s}",
           cores_json);
  cJSON *j = cJSON_Parse(text);
  assert_non_null(j);
  ClusterSpec s;
  Error err = {0, ""};
  int rc = cluster_spec_from_json(&s, j, "spec.json", &err);
  cJSON_Delete(j);
  if (!rc) return 0;
  if (!strstr(err.msg, expect) || !strstr(err.msg, "spec.json")) print_error("unexpected message: %s\n", err.msg);
  return strstr(err.msg, expect) && strstr(err.msg, "spec.json");
}

static void test_spec_field(void **state) {
  (void)state;
  ClusterSpec s;
  cpu_spec(&s, 3, 2.0 / 3, "\"cores\": {\"per_node\": 2}");
  assert_int_equal(s.cores_per_node, 2);
  assert_int_equal(s.threads_per_device, 1);
  assert_true(fabs(s.core_share - 2.0 / 3) < 1e-15); /* 2 cores / (3 devices x 1 thread) */
  assert_true(cluster_spec_node_capacity(&s) == 2.0);
  cpu_spec(&s, 2, 0.5, "\"cores\": {\"per_node\": 2, \"threads_per_device\": 2, \"share\": 0.5}");
  assert_true(s.core_share == 0.5 && cluster_spec_node_capacity(&s) == 1.0);
  /* Written back as calibrate writes it, and read again. */
  cJSON *j = calib_spec_to_json(&s, "round trip");
  ClusterSpec t;
  Error err = {0, ""};
  assert_int_equal(cluster_spec_from_json(&t, j, "<round trip>", &err), 0);
  cJSON_Delete(j);
  assert_int_equal(t.cores_per_node, 2);
  assert_int_equal(t.threads_per_device, 2);
  assert_true(t.core_share == 0.5);
  cpu_spec(&s, 2, 1, "");
  assert_int_equal(s.cores_per_node, 0);
  assert_true(cluster_spec_node_capacity(&s) == 0.0);
  j = calib_spec_to_json(&s, NULL);
  assert_null(cJSON_GetObjectItemCaseSensitive(j, "cores"));
  cJSON_Delete(j);

  assert_true(parse_error("{\"per_node\": 0}", "cores.per_node"));
  assert_true(parse_error("{\"threads_per_device\": 1}", "cores.per_node"));
  assert_true(parse_error("{\"per_node\": 1.5}", "integers"));
  assert_true(parse_error("{\"per_node\": 2, \"share\": 1.5}", "cores.share"));
  assert_true(parse_error("{\"per_node\": 2, \"cpus\": 4}", "cores.cpus"));
  assert_true(parse_error("4", "cores"));
}

static ModelConfig dense(void) {
  ModelConfig m;
  model_config_defaults(&m);
  m.vocab_size = 512;
  m.hidden_size = 256;
  m.num_layers = 4;
  m.num_heads = m.num_kv_heads = 4;
  m.intermediate_size = 512;
  m.tie_word_embeddings = 0;
  return m;
}

typedef struct Layout {
  const char *name;
  int tp, dp, pp, widths[4], devices;
  SchedScheduleKind schedule;
  int global_batch; /* 0: 16 */
} Layout;

static PlanResult simulate(const ModelConfig *m, const ClusterSpec *cl, const Layout *l) {
  PlanOptions o;
  plan_options_default(&o);
  o.dp_overlap = 0;
  o.param_gather_overlap = 0;
  PlanConfig c;
  plan_config_init(&c, 128, l->global_batch ? l->global_batch : 16, 4);
  c.dtype = PLAN_DTYPE_FP32;
  c.par.tp = l->tp;
  c.par.dp = l->dp;
  c.par.pp = l->pp;
  c.schedule = l->schedule;
  c.schedule_given = 1;
  if (l->widths[0]) { /* as bench/stagerep.sh: blocks 2,2 (the GPU count checked is the stages') */
    c.num_stage_widths = c.num_given_layers = l->pp;
    for (int s = 0; s < l->pp; s++) c.stage_width[s] = l->widths[s], c.layers_per_stage[s] = 2;
  }
  Error err = {0, ""};
  int rc = plan_config_finish(&c, m, cl, l->widths[0] ? l->pp : l->devices, &err);
  PlanResult r;
  if (!rc) rc = plan_simulate(m, cl, &o, &c, NULL, NULL, &r, &err);
  if (rc) print_error("%s: %s\n", l->name, err.msg);
  assert_int_equal(rc, 0);
  return r;
}

static double lower_bound(const ModelConfig *m, const ClusterSpec *cl, const PlanResult *r) {
  PlanOptions o;
  plan_options_default(&o);
  o.dp_overlap = 0;
  o.param_gather_overlap = 0;
  PlanCostModel cm;
  PlanStageCosts sc;
  Error err = {0, ""};
  assert_int_equal(plan_cost_model_init(&cm, m, cl, &o, &r->cfg, NULL, &err), 0);
  assert_int_equal(plan_stage_costs_build(&cm, &sc, &err), 0);
  double b = plan_stage_costs_lower_bound(&sc, r->cfg.microbatches);
  plan_stage_costs_free(&sc);
  return b;
}

/* 3 (or 4) ranks on 2 cores: fixed share >= processor sharing >= a core
 * each, strictly where pipeline bubbles leave a core free. */
static void test_between_fixed_and_dedicated(void **state) {
  (void)state;
  ModelConfig m = dense();
  static const Layout layouts[] = {
      {"widths 2,1", 1, 1, 2, {2, 1}, 3, SCHED_SCHEDULE_1F1B, 0},
      {"widths 1,2", 1, 1, 2, {1, 2}, 3, SCHED_SCHEDULE_1F1B, 0},
      {"PP3 1f1b", 1, 1, 3, {0}, 3, SCHED_SCHEDULE_1F1B, 0},
      {"PP3 zb-h1", 1, 1, 3, {0}, 3, SCHED_SCHEDULE_ZB_H1, 0},
      {"PP3 gpipe", 1, 1, 3, {0}, 3, SCHED_SCHEDULE_GPIPE, 0},
      {"TP2 x PP2", 2, 1, 2, {0}, 4, SCHED_SCHEDULE_1F1B, 0},
  };
  for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
    const Layout *l = &layouts[k];
    double share = 2.0 / l->devices;
    ClusterSpec shared, fixed, dedicated;
    cpu_spec(&shared, l->devices, share, "\"cores\": {\"per_node\": 2}");
    cpu_spec(&fixed, l->devices, share, "");
    cpu_spec(&dedicated, l->devices, 1.0, "");
    PlanResult rs = simulate(&m, &shared, l), rf = simulate(&m, &fixed, l), rd = simulate(&m, &dedicated, l);
    /* The search's bound (for layouts without replication, which it prunes). */
    double bound = l->widths[0] ? 0 : lower_bound(&m, &shared, &rs), total = plan_breakdown_total(&rs.breakdown);
    print_message("%-10s  a core each %7.2f ms, processor sharing %7.2f ms, fixed share %7.2f ms; bound %.2f ms\n",
                  l->name, 1e3 * rd.step_time, 1e3 * rs.step_time, 1e3 * rf.step_time, 1e3 * bound);
    assert_true(rs.step_time < rf.step_time * (1 - 1e-3));
    assert_true(rs.step_time > rd.step_time * (1 + 1e-3));
    assert_true(fabs(total - rs.step_time) < 1e-9 * rs.step_time);
    assert_true(rs.breakdown.t[PLAN_COMP_BUBBLE] >= 0);
    assert_true(bound <= rs.step_time * (1 + 1e-12));
    plan_result_free(&rs);
    plan_result_free(&rf);
    plan_result_free(&rd);
  }
}

/* DP3 on 2 cores: the one pipeline rank stands for all three devices, which
 * compute together and wait together: always the fixed share. */
static void test_always_busy_keeps_share(void **state) {
  (void)state;
  ModelConfig m = dense();
  Layout l = {"DP3", 1, 3, 1, {0}, 3, SCHED_SCHEDULE_NONE, 24};
  ClusterSpec shared, fixed;
  cpu_spec(&shared, 3, 2.0 / 3, "\"cores\": {\"per_node\": 2}");
  cpu_spec(&fixed, 3, 2.0 / 3, "");
  PlanResult rs = simulate(&m, &shared, &l), rf = simulate(&m, &fixed, &l);
  print_message("DP3: processor sharing %.4f ms, fixed share %.4f ms\n", 1e3 * rs.step_time, 1e3 * rf.step_time);
  assert_true(fabs(rs.step_time - rf.step_time) < 1e-9 * rf.step_time);
  plan_result_free(&rs);
  plan_result_free(&rf);
}

/* A waiting load of 1 (every wait keeps its rank's share) is the fixed
 * share; one of a half lies between it and processor sharing. */
static void test_waiting_load(void **state) {
  (void)state;
  ModelConfig m = dense();
  Layout l = {"widths 2,1", 1, 1, 2, {2, 1}, 3, SCHED_SCHEDULE_1F1B, 0};
  ClusterSpec full, half, ideal, fixed;
  cpu_spec(&full, 3, 2.0 / 3, "\"cores\": {\"per_node\": 2, \"waiting_load\": 1}");
  cpu_spec(&half, 3, 2.0 / 3, "\"cores\": {\"per_node\": 2, \"waiting_load\": 0.5}");
  cpu_spec(&ideal, 3, 2.0 / 3, "\"cores\": {\"per_node\": 2}");
  cpu_spec(&fixed, 3, 2.0 / 3, "");
  assert_true(half.core_waiting_load == 0.5 && ideal.core_waiting_load == 0);
  PlanResult a = simulate(&m, &full, &l), b = simulate(&m, &half, &l), c = simulate(&m, &ideal, &l);
  PlanResult d = simulate(&m, &fixed, &l);
  print_message("widths 2,1: waiting load 0 %.2f ms, 0.5 %.2f ms, 1 %.2f ms; fixed share %.2f ms\n", 1e3 * c.step_time,
                1e3 * b.step_time, 1e3 * a.step_time, 1e3 * d.step_time);
  assert_true(fabs(a.step_time - d.step_time) < 1e-9 * d.step_time);
  assert_true(b.step_time > c.step_time * (1 + 1e-3) && b.step_time < d.step_time * (1 - 1e-3));
  cJSON *j = calib_spec_to_json(&half, NULL);
  ClusterSpec back;
  Error err = {0, ""};
  assert_int_equal(cluster_spec_from_json(&back, j, "<round trip>", &err), 0);
  cJSON_Delete(j);
  assert_true(back.core_waiting_load == 0.5);
  assert_true(parse_error("{\"per_node\": 2, \"waiting_load\": 2}", "cores.waiting_load"));
  plan_result_free(&a);
  plan_result_free(&b);
  plan_result_free(&c);
  plan_result_free(&d);
}

/* Enough cores for every device (4 cores, 3 devices, share 1): the
 * max-plus evaluation, bit for bit. */
static void test_enough_cores_identical(void **state) {
  (void)state;
  ModelConfig m = dense();
  Layout l = {"widths 2,1", 1, 1, 2, {2, 1}, 3, SCHED_SCHEDULE_1F1B, 0};
  ClusterSpec roomy, none;
  cpu_spec(&roomy, 3, 1.0, "\"cores\": {\"per_node\": 4}");
  cpu_spec(&none, 3, 1.0, "");
  PlanResult a = simulate(&m, &roomy, &l), b = simulate(&m, &none, &l);
  assert_true(a.step_time == b.step_time);
  assert_memory_equal(&a.breakdown, &b.breakdown, sizeof a.breakdown);
  assert_true(a.bubble_fraction == b.bubble_fraction);
  plan_result_free(&a);
  plan_result_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spec_field),
      cmocka_unit_test(test_between_fixed_and_dedicated),
      cmocka_unit_test(test_always_busy_keeps_share),
      cmocka_unit_test(test_waiting_load),
      cmocka_unit_test(test_enough_cores_identical),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
