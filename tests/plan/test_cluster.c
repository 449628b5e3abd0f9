/* Inputs of the planner: the shipped cluster specs parse with the published
 * hardware numbers, malformed specs are refused with the file and field
 * named, calibrated collectives and link matrices are read, and every
 * shipped model config loads with its published sizes (the fine-grained
 * variant keeps Mixtral-8x7B's parameters and FLOPs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "model/flops.h"
#include "plan/cluster.h"
#include "plan/parallel.h"
#include "plan_test_util.h"

#define GIB 1073741824.0

static void test_shipped_clusters(void **state) {
  (void)state;
  ClusterSpec h100, a100, h200;
  assert_int_equal(plan_test_load_cluster(&h100, "dgx-h100"), 0);
  assert_int_equal(plan_test_load_cluster(&a100, "dgx-a100"), 0);
  assert_int_equal(plan_test_load_cluster(&h200, "dgx-h200"), 0);
  assert_int_equal(h100.devices_per_node, 8);
  assert_true(fabs(h100.peak_flops[PLAN_DTYPE_BF16] - 989.5e12) < 1e6);
  assert_true(fabs(h100.memory_capacity - 80 * GIB) < 1);
  assert_true(fabs(h100.memory_bandwidth - 3.35e12) < 1);
  assert_true(fabs(h100.link[PLAN_LEVEL_INTRA].bandwidth - 450e9) < 1);
  assert_true(fabs(h100.link[PLAN_LEVEL_INTER].bandwidth - 50e9) < 1); /* 400 Gb/s */
  assert_true(fabs(a100.peak_flops[PLAN_DTYPE_BF16] - 312e12) < 1e6);
  assert_true(fabs(a100.link[PLAN_LEVEL_INTRA].bandwidth - 300e9) < 1);
  assert_true(fabs(a100.link[PLAN_LEVEL_INTER].bandwidth - 25e9) < 1); /* 200 Gb/s */
  assert_true(fabs(h200.peak_flops[PLAN_DTYPE_BF16] - h100.peak_flops[PLAN_DTYPE_BF16]) < 1);
  assert_true(h200.memory_capacity > 139 * GIB && fabs(h200.memory_bandwidth - 4.8e12) < 1);
  /* No spec gives a curve: the defaults apply and are sane. */
  assert_true(h100.gemm_efficiency.n > 1);
  for (int i = 1; i < h100.gemm_efficiency.n; i++) assert_true(h100.gemm_efficiency.y[i] >= h100.gemm_efficiency.y[i - 1]);
  cluster_spec_free(&h100);
  cluster_spec_free(&a100);
  cluster_spec_free(&h200);
}

static const char *kBase =
    "{\"name\": \"t\", \"nodes\": 2, \"devices_per_node\": 2, \"peak_tflops\": {\"bf16\": 100},"
    " \"memory\": {\"capacity_GiB\": 10, \"bandwidth_GBps\": 1000},"
    " \"intra_node\": {\"bandwidth_GBps\": 100, \"latency_us\": 2},"
    " \"inter_node\": {\"bandwidth_Gbps\": 80, \"latency_us\": 5}%s}";

/* Parses kBase with `extra` spliced in; returns the code and the message. */
static int parse_with(const char *extra, ClusterSpec *out, Error *err) {
  char text[4096];
  snprintf(text, sizeof text, kBase, extra);
  cJSON *j = cJSON_Parse(text);
  assert_non_null(j);
  int rc = cluster_spec_from_json(out, j, "spec.json", err);
  cJSON_Delete(j);
  return rc;
}

static void expect_error(const char *extra, const char *needle) {
  ClusterSpec c;
  Error err = {0, ""};
  int rc = parse_with(extra, &c, &err);
  if (rc == 0 || !strstr(err.msg, needle) || !strstr(err.msg, "spec.json"))
    print_error("extra '%s': rc %d, message '%s', expected to mention '%s'\n", extra, rc, err.msg, needle);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(err.msg, "spec.json"));
  assert_non_null(strstr(err.msg, needle));
}

static void test_spec_errors(void **state) {
  (void)state;
  ClusterSpec c;
  Error err = {0, ""};
  assert_int_equal(parse_with("", &c, &err), 0);
  assert_true(fabs(c.link[PLAN_LEVEL_INTER].bandwidth - 10e9) < 1);
  assert_true(fabs(c.link[PLAN_LEVEL_INTRA].latency - 2e-6) < 1e-12);
  cluster_spec_free(&c);
  expect_error(", \"gpus_per_node\": 8", "gpus_per_node");
  expect_error(", \"compute\": {\"gemm_eff\": []}", "compute.gemm_eff");
  expect_error(", \"compute\": {\"gemm_efficiency\": [[1e9, 0.5], [1e8, 0.6]]}", "compute.gemm_efficiency");
  expect_error(", \"compute\": {\"gemm_efficiency\": [[1e9, 1.5]]}", "compute.gemm_efficiency");
  expect_error(", \"collectives\": {\"all_reduce\": {\"intra_node\": {\"latency_us\": 1}}}",
               "collectives.all_reduce.intra_node");
  expect_error(", \"collectives\": {\"allreduce\": {}}", "allreduce");
  expect_error(", \"links\": {\"bandwidth_GBps\": [[0, 1], [1, 0]], \"latency_us\": [[0, 1], [1, 0]]}", "links");

  /* Each required field named when missing or wrong. */
  cJSON *j = cJSON_Parse("{\"nodes\": 1, \"devices_per_node\": 8, \"memory\": {\"capacity_GB\": 1, \"bandwidth_GBps\": 1},"
                         " \"intra_node\": {\"bandwidth_GBps\": 1, \"latency_us\": 1},"
                         " \"inter_node\": {\"bandwidth_GBps\": 1, \"latency_us\": 1}}");
  assert_int_not_equal(cluster_spec_from_json(&c, j, "spec.json", &err), 0);
  assert_non_null(strstr(err.msg, "peak_tflops"));
  cJSON_Delete(j);
  j = cJSON_Parse("{\"nodes\": 1, \"devices_per_node\": 8, \"peak_tflops\": {\"bf16\": 1},"
                  " \"memory\": {\"capacity_GB\": 1, \"capacity_GiB\": 1, \"bandwidth_GBps\": 1},"
                  " \"intra_node\": {\"bandwidth_GBps\": 1, \"latency_us\": 1},"
                  " \"inter_node\": {\"bandwidth_GBps\": 1, \"latency_us\": 1}}");
  assert_int_not_equal(cluster_spec_from_json(&c, j, "spec.json", &err), 0);
  assert_non_null(strstr(err.msg, "capacity_GiB"));
  cJSON_Delete(j);
  j = cJSON_Parse("{\"nodes\": 1.5, \"devices_per_node\": 8, \"peak_tflops\": {\"bf16\": 1},"
                  " \"memory\": {\"capacity_GB\": 1, \"bandwidth_GBps\": 1},"
                  " \"intra_node\": {\"bandwidth_GBps\": 1, \"latency_us\": 1},"
                  " \"inter_node\": {\"bandwidth_GBps\": 1, \"latency_us\": -1}}");
  assert_int_not_equal(cluster_spec_from_json(&c, j, "spec.json", &err), 0);
  cJSON_Delete(j);

  /* A missing file names itself. */
  assert_int_not_equal(cluster_spec_load(&c, "/nonexistent/spec.json", &err), 0);
  assert_non_null(strstr(err.msg, "/nonexistent/spec.json"));
}

static void test_calibrated_collectives_and_curve(void **state) {
  (void)state;
  ClusterSpec c;
  Error err = {0, ""};
  int rc = parse_with(", \"compute\": {\"gemm_efficiency\": [[1e9, 0.2], [1e11, 0.6]], \"kernel_floor_us\": 1},"
                      " \"collectives\": {\"all_to_all\": {\"inter_node\": {\"bandwidth_GBps\": 7, \"latency_us\": 30}}}",
                      &c, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  PlanLink l = cluster_spec_collective_link(&c, PLAN_COLL_ALL_TO_ALL, PLAN_LEVEL_INTER);
  assert_true(fabs(l.bandwidth - 7e9) < 1 && fabs(l.latency - 30e-6) < 1e-12);
  /* Not calibrated: the link times its efficiency (default 1 here). */
  l = cluster_spec_collective_link(&c, PLAN_COLL_ALL_REDUCE, PLAN_LEVEL_INTER);
  assert_true(fabs(l.bandwidth - 10e9) < 1);
  /* log-linear interpolation, clamped at the ends */
  assert_true(fabs(plan_curve_eval(&c.gemm_efficiency, 1e10) - 0.4) < 1e-12);
  assert_true(fabs(plan_curve_eval(&c.gemm_efficiency, 1e5) - 0.2) < 1e-12);
  assert_true(fabs(plan_curve_eval(&c.gemm_efficiency, 1e15) - 0.6) < 1e-12);
  assert_true(fabs(c.kernel_floor - 1e-6) < 1e-15);
  cluster_spec_free(&c);
}

/* An explicit link matrix: device 3's links are slow, and the groups that
 * use them see it. */
static void test_link_matrix(void **state) {
  (void)state;
  ClusterSpec c;
  Error err = {0, ""};
  int rc = parse_with(", \"links\": {\"bandwidth_GBps\": [[0, 100, 10, 10], [100, 0, 10, 10], [10, 10, 0, 1],"
                      " [10, 10, 1, 0]], \"latency_us\": [[0, 1, 5, 5], [1, 0, 5, 5], [5, 5, 0, 9], [5, 5, 9, 0]]}",
                      &c, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(c.link_devices, 4);
  PlanConfig cfg;
  plan_config_init(&cfg, 128, 4, 1);
  cfg.par.tp = 2;
  cfg.par.dp = 2;
  PlanGroupTopo tp, dp;
  assert_int_equal(plan_group_topology(&c, &cfg, PLAN_GROUP_TP, &tp), 0);
  assert_int_equal(plan_group_topology(&c, &cfg, PLAN_GROUP_DP, &dp), 0);
  /* TP pairs (0,1) and (2,3) are on one node each; the slower pair wins. */
  assert_int_equal(tp.nodes, 1);
  assert_true(fabs(tp.intra.bandwidth - 1e9) < 1 && fabs(tp.intra.latency - 9e-6) < 1e-12);
  assert_int_equal(dp.nodes, 2);
  assert_int_equal(dp.per_node, 1);
  assert_true(fabs(dp.inter.bandwidth - 10e9) < 1);
  PlanLink d = cluster_spec_device_link(&c, 0, 1);
  assert_true(fabs(d.bandwidth - 100e9) < 1);
  cluster_spec_free(&c);
}

typedef struct ModelExpect {
  const char *name;
  int layers, hidden, heads, kv, experts, top_k, moe_ffn, shared, vocab;
} ModelExpect;

static void test_shipped_models(void **state) {
  (void)state;
  static const ModelExpect expect[] = {
      {"mixtral-8x7b", 32, 4096, 32, 8, 8, 2, 14336, 0, 32000},
      {"mixtral-8x22b", 56, 6144, 48, 8, 8, 2, 16384, 0, 32768},
      {"qwen2-57b-a14b", 28, 3584, 28, 4, 64, 8, 2560, 20480, 151936},
      {"llama-3-8b", 32, 4096, 32, 8, 0, 0, 0, 0, 128256},
      {"llama-3-70b", 80, 8192, 64, 8, 0, 0, 0, 0, 128256},
      {"mixtral-8x7b-fine64", 32, 4096, 32, 8, 64, 8, 1792, 0, 32000},
  };
  for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
    const ModelExpect *e = &expect[i];
    ModelConfig m;
    assert_int_equal(plan_test_load_model(&m, e->name), 0);
    assert_int_equal(m.num_layers, e->layers);
    assert_int_equal(m.hidden_size, e->hidden);
    assert_int_equal(m.num_heads, e->heads);
    assert_int_equal(model_config_kv_heads(&m), e->kv);
    assert_int_equal(m.num_experts, e->experts);
    assert_int_equal(m.vocab_size, e->vocab);
    if (e->experts) {
      assert_int_equal(m.top_k, e->top_k);
      assert_int_equal(m.moe_intermediate_size, e->moe_ffn);
      assert_int_equal(m.shared_expert_intermediate_size, e->shared);
      assert_int_equal(model_config_num_moe_layers(&m), e->layers);
    }
  }
  /* The fine-grained variant splits each Mixtral-8x7B expert in eight and
   * routes to eight of the 64: Mixtral's parameters, and per token the FLOPs
   * of one full-width expert (as Mixtral with top-1). */
  ModelConfig coarse, fine;
  assert_int_equal(plan_test_load_model(&coarse, "mixtral-8x7b"), 0);
  assert_int_equal(plan_test_load_model(&fine, "mixtral-8x7b-fine64"), 0);
  coarse.top_k = 1;
  assert_true(fabs(model_flops_per_sequence(&coarse, 4096) - model_flops_per_sequence(&fine, 4096)) <
              1e-9 * model_flops_per_sequence(&coarse, 4096));
  assert_int_equal(coarse.num_experts * coarse.moe_intermediate_size, fine.num_experts * fine.moe_intermediate_size);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shipped_clusters),
      cmocka_unit_test(test_spec_errors),
      cmocka_unit_test(test_calibrated_collectives_and_curve),
      cmocka_unit_test(test_link_matrix),
      cmocka_unit_test(test_shipped_models),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
