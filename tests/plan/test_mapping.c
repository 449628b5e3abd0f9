/* Tiered topologies and the device-mapping search: tiers expand to the
 * right link between any two devices and bad tiers are refused with the
 * file and field named; a mapping moves groups onto the devices it names;
 * on worlds small enough to enumerate the search (exhaustive, and the
 * heuristic used for large worlds) finds the brute-force optimum; and on a
 * two-tier cluster with a slow uplink the mapped plan beats rank order; the
 * plan file records the mapping and its reader checks it. */
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

#include <unistd.h>

#include "plan/mapping.h"
#include "plan/plan_file.h"
#include "plan/search.h"
#include "plan_test_util.h"

/* H100-like devices; `nodes` x `per_node`, with `topology` spliced in. */
static int parse_cluster(ClusterSpec *cl, int nodes, int per_node, const char *topology, Error *err) {
  char text[4096];
  snprintf(text, sizeof text,
           "{\"name\": \"tiers\", \"nodes\": %d, \"devices_per_node\": %d, \"peak_tflops\": {\"bf16\": 989.5},"
           " \"memory\": {\"capacity_GiB\": 80, \"bandwidth_GBps\": 3350},"
           " \"intra_node\": {\"bandwidth_GBps\": 450, \"latency_us\": 3, \"efficiency\": 0.8},"
           " \"inter_node\": {\"bandwidth_Gbps\": 400, \"latency_us\": 6, \"efficiency\": 0.9}%s%s}",
           nodes, per_node, topology ? ", \"topology\": " : "", topology ? topology : "");
  cJSON *j = cJSON_Parse(text);
  assert_non_null(j);
  int rc = cluster_spec_from_json(cl, j, "tiers.json", err);
  cJSON_Delete(j);
  return rc;
}

static void load_cluster(ClusterSpec *cl, int nodes, int per_node, const char *topology) {
  Error err = {0, ""};
  int rc = parse_cluster(cl, nodes, per_node, topology, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
}

static void test_tiers_expand_to_links(void **state) {
  (void)state;
  ClusterSpec cl;
  /* 4 nodes of 4 devices in islands of 2; 2 nodes per switch, 4:1
   * oversubscribed; node 3's network link is slow. */
  load_cluster(&cl, 4, 4,
               "{\"nodes_per_switch\": 2, \"oversubscription\": 4, \"switch_latency_us\": 2,"
               " \"devices_per_island\": 2, \"cross_island\": {\"bandwidth_GBps\": 25, \"latency_us\": 5},"
               " \"slow_nodes\": [{\"node\": 3, \"bandwidth_GBps\": 5, \"latency_us\": 20}]}");
  assert_true(cluster_spec_is_irregular(&cl));
  PlanLink l = cluster_spec_device_link(&cl, 0, 1); /* same island */
  assert_true(fabs(l.bandwidth - 450e9) < 1 && fabs(l.latency - 3e-6) < 1e-12);
  l = cluster_spec_device_link(&cl, 1, 2); /* other island, same node */
  assert_true(fabs(l.bandwidth - 25e9) < 1 && fabs(l.latency - 5e-6) < 1e-12);
  l = cluster_spec_device_link(&cl, 0, 4); /* same switch */
  assert_true(fabs(l.bandwidth - 50e9) < 1 && fabs(l.latency - 6e-6) < 1e-12);
  l = cluster_spec_device_link(&cl, 0, 8); /* across switches */
  assert_true(fabs(l.bandwidth - 12.5e9) < 1 && fabs(l.latency - 8e-6) < 1e-12);
  l = cluster_spec_device_link(&cl, 8, 12); /* to the slow node */
  assert_true(fabs(l.bandwidth - 5e9) < 1 && fabs(l.latency - 20e-6) < 1e-12);
  l = cluster_spec_device_link(&cl, 12, 13); /* inside the slow node: not capped */
  assert_true(fabs(l.bandwidth - 450e9) < 1);
  /* A mapping moves ranks: rank 0 on device 8, rank 1 on device 0. */
  int map[16];
  for (int r = 0; r < 16; r++) map[r] = r;
  map[0] = 8, map[8] = 0;
  cl.device_of_rank = map;
  cl.num_mapped = 16;
  l = cluster_spec_device_link(&cl, 0, 1); /* devices 8 and 1: across switches */
  assert_true(fabs(l.bandwidth - 12.5e9) < 1);
  assert_int_equal(cluster_spec_node_of(&cl, 0), 2);
  /* The TP group {0, 1} now spans two nodes. */
  PlanConfig c;
  plan_config_init(&c, 1024, 8, 1);
  c.par.tp = 2;
  c.par.dp = 8;
  PlanGroupTopo g;
  assert_int_equal(plan_group_topology(&cl, &c, PLAN_GROUP_TP, &g), 0);
  assert_int_equal(g.nodes, 2);
  assert_int_equal(g.per_node, 1);
  assert_true(fabs(g.inter.bandwidth - 12.5e9) < 1);
  cl.device_of_rank = NULL;
  assert_int_equal(plan_group_topology(&cl, &c, PLAN_GROUP_TP, &g), 0);
  assert_int_equal(g.nodes, 1);
  cluster_spec_free(&cl);
}

static void expect_error(const char *topology, const char *field) {
  ClusterSpec cl;
  Error err = {0, ""};
  int rc = parse_cluster(&cl, 4, 4, topology, &err);
  if (rc == 0 || !strstr(err.msg, field) || !strstr(err.msg, "tiers.json"))
    print_error("topology %s: rc %d, message \"%s\" (wanted the file and %s)\n", topology, rc, err.msg, field);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(err.msg, field));
  assert_non_null(strstr(err.msg, "tiers.json"));
}

static void test_bad_tiers_name_the_field(void **state) {
  (void)state;
  expect_error("{\"nodes_per_switch\": 2, \"oversubscriptoin\": 4}", "topology.oversubscriptoin");
  expect_error("{\"nodes_per_switch\": 2}", "topology.oversubscription");
  expect_error("{\"oversubscription\": 2}", "topology.nodes_per_switch");
  expect_error("{\"nodes_per_switch\": 9, \"oversubscription\": 2}", "topology.nodes_per_switch");
  expect_error("{\"nodes_per_switch\": 2, \"oversubscription\": 0.5}", "topology.oversubscription");
  expect_error("{\"devices_per_island\": 3, \"cross_island\": {\"bandwidth_GBps\": 1, \"latency_us\": 1}}",
               "topology.devices_per_island");
  expect_error("{\"devices_per_island\": 2}", "topology.cross_island");
  expect_error("{\"slow_nodes\": [{\"node\": 4, \"bandwidth_GBps\": 1, \"latency_us\": 1}]}",
               "topology.slow_nodes[0].node");
  expect_error("{\"slow_nodes\": [{\"node\": 1, \"latency_us\": 1}]}", "topology.slow_nodes[0].bandwidth_GBps");
  /* A matrix and tiers at once. */
  ClusterSpec cl;
  Error err = {0, ""};
  char text[2048];
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"devices_per_node\": 2, \"peak_tflops\": {\"bf16\": 1},"
           " \"memory\": {\"capacity_GiB\": 8, \"bandwidth_GBps\": 100},"
           " \"intra_node\": {\"bandwidth_GBps\": 10, \"latency_us\": 1},"
           " \"inter_node\": {\"bandwidth_GBps\": 1, \"latency_us\": 1},"
           " \"links\": {\"bandwidth_GBps\": [[0, 1], [1, 0]], \"latency_us\": [[0, 1], [1, 0]]},"
           " \"topology\": {\"nodes_per_switch\": 1, \"oversubscription\": 2}}");
  cJSON *j = cJSON_Parse(text);
  assert_int_not_equal(cluster_spec_from_json(&cl, j, "both.json", &err), 0);
  assert_non_null(strstr(err.msg, "both.json"));
  assert_non_null(strstr(err.msg, "topology"));
  cJSON_Delete(j);
}

/* A dense model big enough that gradient reductions and pipeline transfers
 * matter on these links. */
static void model_for_mapping(ModelConfig *m) {
  model_config_defaults(m);
  m->vocab_size = 32000;
  m->hidden_size = 2048;
  m->num_layers = 8;
  m->num_heads = 16;
  m->num_kv_heads = 16;
  m->intermediate_size = 8192;
}

static void finish(PlanConfig *c, const ModelConfig *m, const ClusterSpec *cl, int gpus) {
  Error err = {0, ""};
  int rc = plan_config_finish(c, m, cl, gpus, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
}

/* The lexicographically next permutation; 0 after the last. */
static int next_permutation(int *a, int n) {
  int i = n - 2;
  while (i >= 0 && a[i] >= a[i + 1]) i--;
  if (i < 0) return 0;
  int j = n - 1;
  while (a[j] <= a[i]) j--;
  int t = a[i];
  a[i] = a[j], a[j] = t;
  for (int l = i + 1, r = n - 1; l < r; l++, r--) t = a[l], a[l] = a[r], a[r] = t;
  return 1;
}

static double brute_force(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o, const PlanConfig *c) {
  int n = plan_config_world(c), perm[16];
  for (int i = 0; i < n; i++) perm[i] = i;
  double best = INFINITY;
  do {
    double t;
    Error err = {0, ""};
    assert_int_equal(plan_mapping_step_time(m, cl, o, c, perm, &t, &err), 0);
    if (t < best) best = t;
  } while (next_permutation(perm, n));
  return best;
}

typedef struct Case {
  const char *name;
  int nodes, per_node;
  const char *topology;
  int tp, dp, pp;
  int gains; /* 1: the optimum beats rank order here */
} Case;

static void test_search_finds_brute_force_optimum(void **state) {
  (void)state;
  static const Case cases[] = {
      {"two tiers, 2 nodes x 3", 2, 3, "{\"nodes_per_switch\": 1, \"oversubscription\": 16}", 1, 2, 3, 1},
      {"two tiers, 3 nodes x 2", 3, 2, "{\"nodes_per_switch\": 2, \"oversubscription\": 16}", 1, 3, 2, 1},
      {"two tiers, 3 nodes x 2 b", 3, 2, "{\"nodes_per_switch\": 2, \"oversubscription\": 16}", 2, 1, 3, 0},
      {"two tiers, 4 nodes x 2", 4, 2, "{\"nodes_per_switch\": 3, \"oversubscription\": 16}", 2, 2, 2, 0},
      {"one slow node", 3, 2, "{\"slow_nodes\": [{\"node\": 0, \"bandwidth_GBps\": 2, \"latency_us\": 30}]}", 2, 1,
       3, 1},
      {"PCIe islands", 1, 6,
       "{\"devices_per_island\": 2, \"cross_island\": {\"bandwidth_GBps\": 12, \"latency_us\": 8}}", 2, 3, 1, 0},
      {"islands and switches", 2, 3,
       "{\"nodes_per_switch\": 1, \"oversubscription\": 8, \"devices_per_island\": 1,"
       " \"cross_island\": {\"bandwidth_GBps\": 32, \"latency_us\": 5}}", 1, 2, 3, 1},
  };
  ModelConfig m;
  model_for_mapping(&m);
  PlanOptions o;
  plan_options_default(&o);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const Case *cs = &cases[k];
    ClusterSpec cl;
    load_cluster(&cl, cs->nodes, cs->per_node, cs->topology);
    PlanConfig c;
    plan_config_init(&c, 2048, 12, 1);
    c.par.tp = cs->tp;
    c.par.dp = cs->dp;
    c.par.pp = cs->pp;
    finish(&c, &m, &cl, cs->tp * cs->dp * cs->pp);
    double best = brute_force(&m, &cl, &o, &c);
    PlanMapping ex, heur;
    Error err = {0, ""};
    PlanMappingOptions mo;
    plan_mapping_options_default(&mo);
    assert_int_equal(plan_mapping_search(&m, &cl, &o, &c, &mo, &ex, &err), 0);
    mo.exhaustive_max_devices = 0; /* the large-world heuristic on the same case */
    assert_int_equal(plan_mapping_search(&m, &cl, &o, &c, &mo, &heur, &err), 0);
    print_message("%-26s tp%d dp%d pp%d: rank order %.4f s, brute force %.4f s, exhaustive %.4f s (%ld sims), "
                  "heuristic %.4f s (%s, %ld sims)\n",
                  cs->name, cs->tp, cs->dp, cs->pp, ex.rank_order_step_time, best, ex.step_time, ex.evaluated,
                  heur.step_time, heur.method, heur.evaluated);
    assert_true(ex.exhaustive && !heur.exhaustive);
    assert_true(fabs(ex.step_time - best) <= 1e-9 * best);
    assert_true(fabs(heur.step_time - best) <= 1e-9 * best);
    /* Where the optimum is a real improvement, finding it is not trivial. */
    if (cs->gains) assert_true(best < ex.rank_order_step_time * (1 - 1e-6));
    /* The recorded mapping is a permutation and prices as reported. */
    int seen[16] = {0};
    for (int r = 0; r < ex.devices; r++) seen[ex.device_of_rank[r]]++;
    for (int r = 0; r < ex.devices; r++) assert_int_equal(seen[r], 1);
    double t;
    assert_int_equal(plan_mapping_step_time(&m, &cl, &o, &c, heur.device_of_rank, &t, &err), 0);
    assert_true(fabs(t - heur.step_time) <= 1e-12 * t);
    plan_mapping_free(&ex);
    plan_mapping_free(&heur);
    cluster_spec_free(&cl);
  }
}

/* Two switches of 3 nodes x 2 devices, 16:1 oversubscribed uplink, 3
 * pipeline stages of 4 ranks: in rank order the middle stage straddles the
 * uplink, so its pipeline transfers and its DP ring both cross it; the
 * search (12 devices: the heuristic) finds a better arrangement. */
static void test_two_tier_mapping_beats_rank_order(void **state) {
  (void)state;
  ModelConfig m;
  model_for_mapping(&m);
  PlanOptions o;
  plan_options_default(&o);
  ClusterSpec cl;
  load_cluster(&cl, 6, 2, "{\"nodes_per_switch\": 3, \"oversubscription\": 16}");
  PlanConfig c;
  plan_config_init(&c, 2048, 16, 1);
  c.par.tp = 2;
  c.par.dp = 2;
  c.par.pp = 3;
  finish(&c, &m, &cl, 12);
  PlanMapping map;
  Error err = {0, ""};
  assert_int_equal(plan_mapping_search(&m, &cl, &o, &c, NULL, &map, &err), 0);
  double gain = map.rank_order_step_time / map.step_time - 1;
  print_message("two switches of 3 nodes x 2, 16:1 uplink, tp2 dp2 pp3: rank order %.4f s, mapped %.4f s (%s, %ld sims): %.1f%% faster\n",
                map.rank_order_step_time, map.step_time, map.method, map.evaluated, 100 * gain);
  print_message("  device of rank 0..11:");
  for (int r = 0; r < map.devices; r++) print_message(" %d", map.device_of_rank[r]);
  print_message("\n");
  assert_false(map.exhaustive);
  assert_true(gain > 0.05);
  plan_mapping_free(&map);
  cluster_spec_free(&cl);
}

/* The plan file records the mapping and the reader checks it. */
static void test_plan_file_records_the_mapping(void **state) {
  (void)state;
  ModelConfig m;
  model_for_mapping(&m);
  PlanOptions o;
  plan_options_default(&o);
  ClusterSpec cl;
  load_cluster(&cl, 6, 2, "{\"nodes_per_switch\": 3, \"oversubscription\": 16}");
  PlanConfig c;
  plan_config_init(&c, 2048, 16, 1);
  c.par.tp = 2;
  c.par.dp = 2;
  c.par.pp = 3;
  finish(&c, &m, &cl, 12);
  PlanResult r;
  Error err = {0, ""};
  assert_int_equal(plan_simulate(&m, &cl, &o, &c, NULL, NULL, &r, &err), 0);
  assert_int_equal(plan_result_map_devices(&r, &m, &cl, &o, NULL, &err), 0);
  assert_non_null(r.device_of_rank);
  assert_true(r.step_time < r.rank_order_step_time);
  char path[] = "/tmp/fivefold-test-mapping-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(plan_write_json_for_model(&r, NULL, "m", &m, "tiers", path, &err), 0);
  PlanChoice pc;
  assert_int_equal(plan_file_read(path, &pc, &err), 0);
  assert_true(pc.has_mapping && !pc.mapping_is_identity);
  /* A mapping that is not a permutation is refused with the field named. */
  FILE *f = fopen(path, "r");
  char text[1 << 16];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  cJSON *j = cJSON_Parse(text);
  cJSON *perm = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "mapping"), "device_of_rank");
  cJSON_ReplaceItemInArray(perm, 1, cJSON_CreateNumber(cJSON_GetArrayItem(perm, 0)->valuedouble));
  assert_int_not_equal(plan_file_from_json(j, "dup.json", &pc, &err), 0);
  assert_non_null(strstr(err.msg, "dup.json"));
  assert_non_null(strstr(err.msg, "mapping.device_of_rank"));
  cJSON_Delete(j);
  remove(path);
  plan_result_free(&r);
  cluster_spec_free(&cl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tiers_expand_to_links),
      cmocka_unit_test(test_bad_tiers_name_the_field),
      cmocka_unit_test(test_search_finds_brute_force_optimum),
      cmocka_unit_test(test_two_tier_mapping_beats_rank_order),
      cmocka_unit_test(test_plan_file_records_the_mapping),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
