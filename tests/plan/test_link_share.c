/* Contention on a node's shared network port (plan/link_share.h): the
 * ports alone (two messages on one port take both their times, on two
 * ports one each; a later message of a pair waits for the earlier one,
 * while the port serves another pair's; a message held while its ranks
 * compute), the spec field topology.devices_per_nic read, refused and
 * written back, and the simulator: PP2 x DP2 on two nodes of two devices,
 * the pipeline across the nodes, is slower with the devices on one port
 * than with a port each, slower again without asynchronous progress, and
 * a one-node spec with the field prices bit for bit as without it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plan/calibrate_fit.h"
#include "plan/cluster.h"
#include "plan/link_share.h"
#include "plan/simulate.h"

static PlanLinkJob job(int nic, int pair, double ready, double service, int held) {
  PlanLinkJob j;
  memset(&j, 0, sizeof j);
  j.nic = nic;
  j.pair = pair;
  j.src = 0;
  j.dst = 1;
  j.ready = ready;
  j.service = service;
  j.latency = 0.25;
  j.held = held;
  return j;
}

static void run(PlanLinkJob *jobs, int n, const PlanLinkBusy *busy) {
  Error err = {0, ""};
  int rc = plan_link_share_run(jobs, n, busy, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
}

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-12)

/* Two messages ready together on one port: one after the other at its
 * full rate, the pair done when both bytes have left; on two ports, each
 * alone. */
static void test_two_flows_share(void **state) {
  (void)state;
  PlanLinkJob j[2] = {job(0, 0, 0.0, 1.0, 0), job(0, 1, 0.0, 1.0, 0)};
  run(j, 2, NULL);
  NEAR(j[0].done, 1.25);
  NEAR(j[1].done, 2.25);
  PlanLinkJob k[2] = {job(0, 0, 0.0, 1.0, 0), job(1, 1, 0.0, 1.0, 0)};
  run(k, 2, NULL);
  NEAR(k[0].done, 1.25);
  NEAR(k[1].done, 1.25);
  /* FIFO by readiness: a small message behind a large one leaves after it. */
  PlanLinkJob f[2] = {job(0, 0, 0.0, 3.0, 0), job(0, 1, 0.5, 0.01, 0)};
  run(f, 2, NULL);
  NEAR(f[0].done, 3.25);
  NEAR(f[1].done, 3.26);
}

/* Rank 0 computes in [0, 5): the first message of pair 7 (held) waits for
 * it; the pair's second (eager, so not held by compute) may not overtake
 * it; another pair's eager message uses the port meanwhile. */
static void test_in_order_per_pair(void **state) {
  (void)state;
  int begin[3] = {0, 1, 1};
  double start[1] = {0.0}, end[1] = {5.0};
  PlanLinkBusy busy = {2, begin, start, end};
  PlanLinkJob j[3] = {job(0, 7, 0.0, 1.0, 1), job(0, 7, 0.5, 0.1, 0), job(0, 8, 1.0, 1.0, 0)};
  run(j, 3, &busy);
  NEAR(j[2].done, 2.25);      /* served 1..2 while the held one waits */
  NEAR(j[0].done, 6.25);      /* 5..6 */
  NEAR(j[1].done, 6.35);      /* after the first of its pair: 6..6.1 */
  assert_true(j[1].done > j[0].done);
}

/* A held message moves only while neither of its ranks computes. */
static void test_no_progress_while_computing(void **state) {
  (void)state;
  int begin[3] = {0, 1, 2};
  double start[2] = {0.0, 0.5}, end[2] = {3.0, 1.5}; /* rank 0 in [0, 3), rank 1 in [0.5, 1.5) */
  PlanLinkBusy busy = {2, begin, start, end};
  PlanLinkJob j[1] = {job(0, 0, 0.0, 1.0, 1)};
  run(j, 1, &busy);
  NEAR(j[0].done, 4.25); /* from 3, when rank 0 stops */
  int begin2[3] = {0, 0, 1};
  double s2[1] = {0.5}, e2[1] = {1.5}; /* only the receiver computes, in [0.5, 1.5) */
  PlanLinkBusy busy2 = {2, begin2, s2, e2};
  PlanLinkJob k[1] = {job(0, 0, 0.0, 1.0, 1)};
  run(k, 1, &busy2);
  NEAR(k[0].done, 2.25); /* 0..0.5, then 1.5..2 */
  PlanLinkJob e[1] = {job(0, 0, 0.0, 1.0, 0)}; /* eager: the kernel carries it */
  run(e, 1, &busy);
  NEAR(e[0].done, 1.25);
}

/* Two nodes of two CPU devices (or one of four), the link a device's share
 * of the port (as calibrate measures it), topology as given. */
static void two_node_spec(ClusterSpec *s, int nodes, const char *topology, int async_progress) {
  int devices = 4 / nodes;
  char text[2048];
  snprintf(text, sizeof text,
           "{\"name\": \"two\", \"nodes\": %d, \"devices_per_node\": %d,"
           " \"peak_tflops\": {\"bf16\": 0.05, \"fp32\": 0.1},"
           " \"memory\": {\"capacity_GiB\": 16, \"bandwidth_GBps\": 5, \"efficiency\": 0.9},"
           " \"intra_node\": {\"bandwidth_GBps\": 4, \"latency_us\": 10},"
           " \"inter_node\": {\"bandwidth_GBps\": 0.0125, \"latency_us\": 500},"
           " \"compute\": {\"gemm_efficiency\": [[1e6, 0.3], [1e8, 0.6], [1e10, 0.7]], \"kernel_floor_us\": 2},"
           " \"runtime\": {\"device\": \"cpu\", \"dtype\": \"fp32\", \"moe_tp_replicated\": true,"
           " \"async_progress\": %s, \"device_sync\": false, \"dropless_sync_us\": 0}%s%s}",
           nodes, devices, async_progress ? "true" : "false", topology[0] ? ", " : "", topology);
  cJSON *j = cJSON_Parse(text);
  assert_non_null(j);
  Error err = {0, ""};
  int rc = cluster_spec_from_json(s, j, "<two>", &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  cJSON_Delete(j);
}

static int parse_error(const char *topology, const char *expect) {
  char text[1024];
  snprintf(text, sizeof text,
           "{\"nodes\": 2, \"devices_per_node\": 4, \"peak_tflops\": {\"bf16\": 0.1},"
           " \"memory\": {\"capacity_GiB\": 16, \"bandwidth_GBps\": 10},"
           " \"intra_node\": {\"bandwidth_GBps\": 5, \"latency_us\": 3},"
           " \"inter_node\": {\"bandwidth_GBps\": 1, \"latency_us\": 30}, \"topology\": %s}",
           topology);
  cJSON *j = cJSON_Parse(text);
  assert_non_null(j);
  ClusterSpec s;
  Error err = {0, ""};
  int rc = cluster_spec_from_json(&s, j, "spec.json", &err);
  cJSON_Delete(j);
  if (!rc) return 0;
  int ok = strstr(err.msg, expect) && strstr(err.msg, "spec.json") && strstr(err.msg, "devices_per_nic");
  if (!ok) print_error("unexpected message: %s\n", err.msg);
  return ok;
}

static void test_spec_field(void **state) {
  (void)state;
  ClusterSpec s;
  two_node_spec(&s, 2, "\"topology\": {\"devices_per_nic\": 2}", 0);
  assert_int_equal(s.tiers.devices_per_nic, 2);
  cJSON *j = calib_spec_to_json(&s, "round trip");
  const cJSON *topo = cJSON_GetObjectItemCaseSensitive(j, "topology");
  assert_non_null(topo);
  const cJSON *k = cJSON_GetObjectItemCaseSensitive(topo, "devices_per_nic");
  assert_true(cJSON_IsNumber(k) && k->valuedouble == 2);
  ClusterSpec t;
  Error err = {0, ""};
  assert_int_equal(cluster_spec_from_json(&t, j, "<round trip>", &err), 0);
  assert_int_equal(t.tiers.devices_per_nic, 2);
  cJSON_Delete(j);
  two_node_spec(&s, 2, "", 0);
  assert_int_equal(s.tiers.devices_per_nic, 0);
  assert_true(parse_error("{\"devices_per_nic\": 3}", "a divisor of devices_per_node"));
  assert_true(parse_error("{\"devices_per_nic\": 0}", "[1, 4]"));
  assert_true(parse_error("{\"devices_per_nic\": 1.5}", "an integer in [1, 4]"));
  assert_true(parse_error("{\"devices_per_nic\": \"two\"}", "[1, 4]"));
}

static ModelConfig dense(void) {
  ModelConfig m;
  model_config_defaults(&m);
  m.vocab_size = 256;
  m.hidden_size = 64;
  m.num_layers = 4;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.intermediate_size = 128;
  m.tie_word_embeddings = 0;
  return m;
}

/* PP2 x DP2 1F1B, micro-batch 4 x 128, 4 micro-batches: rank order puts
 * each stage's two replicas on one node, so the pipeline crosses. */
static PlanResult simulate(const ClusterSpec *cl, const char *trace) {
  ModelConfig m = dense();
  PlanOptions o;
  plan_options_default(&o);
  PlanDtype dtype = PLAN_DTYPE_FP32;
  plan_options_from_runtime(&cl->runtime, 0, &o, &dtype);
  PlanConfig c;
  plan_config_init(&c, 128, 32, 4);
  c.dtype = PLAN_DTYPE_FP32;
  c.par.dp = 2;
  c.par.pp = 2;
  c.schedule = SCHED_SCHEDULE_1F1B;
  c.schedule_given = 1;
  Error err = {0, ""};
  int rc = plan_config_finish(&c, &m, cl, 4, &err);
  PlanSimOptions sim;
  memset(&sim, 0, sizeof sim);
  sim.trace_path = trace;
  PlanResult r;
  if (!rc) rc = plan_simulate(&m, cl, &o, &c, &sim, NULL, &r, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  return r;
}

static void test_simulator(void **state) {
  (void)state;
  ClusterSpec idle, port, port_async, one_node, one_node_port;
  two_node_spec(&idle, 2, "\"topology\": {}", 0);
  two_node_spec(&port, 2, "\"topology\": {\"devices_per_nic\": 2}", 0);
  two_node_spec(&port_async, 2, "\"topology\": {\"devices_per_nic\": 2}", 1);
  two_node_spec(&one_node, 1, "", 0);
  two_node_spec(&one_node_port, 1, "\"topology\": {\"devices_per_nic\": 2}", 0);
  PlanResult ri = simulate(&idle, NULL), rp = simulate(&port, NULL), ra = simulate(&port_async, NULL);
  PlanResult r1 = simulate(&one_node, NULL), r1p = simulate(&one_node_port, NULL);
  print_message("PP2 x DP2 across 2 nodes: idle links %.2f ms, one port per node %.2f ms (async progress %.2f ms); "
                "one node %.2f ms\n", 1e3 * ri.step_time, 1e3 * rp.step_time, 1e3 * ra.step_time, 1e3 * r1.step_time);
  /* Held while their ranks compute, the transfers arrive later than on
   * idle links; with asynchronous progress a message alone gets the whole
   * port (twice a device's share) and two together take as long as each
   * at its share, so that is no slower than idle links. */
  assert_true(rp.step_time > ri.step_time * 1.05);
  assert_true(rp.step_time > ra.step_time * 1.05);
  assert_true(ra.step_time <= ri.step_time * (1 + 1e-9));
  assert_true(r1p.step_time == r1.step_time); /* one node: nothing crosses a port, bit for bit */
  double total = plan_breakdown_total(&rp.breakdown);
  assert_true(fabs(total - rp.step_time) < 1e-9 * rp.step_time);
  plan_result_free(&ri);
  plan_result_free(&rp);
  plan_result_free(&ra);
  plan_result_free(&r1);
  plan_result_free(&r1p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_flows_share),
      cmocka_unit_test(test_in_order_per_pair),
      cmocka_unit_test(test_no_progress_while_computing),
      cmocka_unit_test(test_spec_field),
      cmocka_unit_test(test_simulator),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
