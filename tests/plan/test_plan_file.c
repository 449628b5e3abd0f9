/* Plan files (src/plan/plan_file.c): what `fivefold plan --out` writes
 * (search_output.c) reads back as the configuration that was simulated,
 * and every bad or inconsistent field is refused with the file and the
 * field named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan/plan_file.h"
#include "plan/search.h"
#include "plan_test_util.h"

static char g_path[64];

/* Simulates Mixtral-8x7B on 64 H100s (TP2 PP4 VPP2 EP8, distributed
 * optimizer, selective recomputation) and writes its plan file. */
static PlanConfig write_plan(void) {
  ModelConfig m;
  ClusterSpec cl;
  assert_int_equal(plan_test_load_model(&m, "mixtral-8x7b"), 0);
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  PlanConfig cfg;
  plan_config_init(&cfg, 4096, 256, 2);
  cfg.par.tp = 2, cfg.par.pp = 4, cfg.par.vpp = 2, cfg.par.ep = 8, cfg.par.dp = 0;
  cfg.distributed_optimizer = 1;
  cfg.recompute = PLAN_RECOMPUTE_SELECTIVE;
  cfg.recompute_modules = PLAN_RECOMPUTE_LAYERNORM | PLAN_RECOMPUTE_MOE_ACT;
  Error err = {0, ""};
  assert_int_equal(plan_config_finish(&cfg, &m, &cl, 64, &err), 0);
  PlanOptions opt;
  plan_options_default(&opt);
  PlanResult r;
  assert_int_equal(plan_simulate(&m, &cl, &opt, &cfg, NULL, NULL, &r, &err), 0);
  assert_int_equal(plan_write_json(&r, NULL, "mixtral-8x7b", cl.name, g_path, &err), 0);
  PlanConfig simulated = r.cfg;
  plan_result_free(&r);
  cluster_spec_free(&cl);
  return simulated;
}

static void test_reads_what_the_planner_writes(void **state) {
  (void)state;
  PlanConfig c = write_plan();
  PlanChoice p;
  Error err = {0, ""};
  int rc = plan_file_read(g_path, &p, &err);
  if (rc) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_string_equal(p.model, "mixtral-8x7b");
  assert_int_equal(p.gpus, 64);
  assert_int_equal(p.seq_len, 4096);
  assert_int_equal(p.dtype, PLAN_DTYPE_BF16);
  assert_int_equal(p.tp, 2);
  assert_int_equal(p.cp, 1);
  assert_int_equal(p.dp, c.par.dp);
  assert_int_equal(p.dp, 8);
  assert_int_equal(p.pp, 4);
  assert_int_equal(p.vpp, 2);
  assert_int_equal(p.ep, 8);
  assert_int_equal(p.etp, c.par.etp);
  assert_int_equal(p.edp, c.par.edp);
  assert_int_equal(p.micro_batch_size, 2);
  assert_int_equal(p.global_batch_size, 256);
  assert_int_equal(p.microbatches, 16);
  assert_int_equal(p.schedule, SCHED_SCHEDULE_INTERLEAVED);
  assert_string_equal(p.schedule_name, "interleaved");
  assert_int_equal(p.recompute, PLAN_RECOMPUTE_SELECTIVE);
  /* selective recomputation's modules, read back as written */
  assert_int_equal(p.recompute_modules, PLAN_RECOMPUTE_LAYERNORM | PLAN_RECOMPUTE_MOE_ACT);
  assert_int_equal(p.distributed_optimizer, 1);
  assert_int_equal(p.num_stages, 8);
  int total = 0;
  for (int s = 0; s < 8; s++) {
    assert_int_equal(p.layers_per_stage[s], c.layers_per_stage[s]);
    total += p.layers_per_stage[s];
  }
  assert_int_equal(total, 32);
  assert_true(p.predicted_step_time > 0);
  /* The order costs the search priced the program with (1 and the stages'
   * backward/forward time), recorded in the result and read back exactly:
   * `train --plan` builds its program with them. */
  assert_int_equal(c.order_given, 0);
  assert_true(c.order_fwd_cost == 1.0);
  assert_true(c.order_bwd_cost > 1.0 && c.order_bwd_cost != 2.0);
  assert_true(p.order_fwd_cost == c.order_fwd_cost);
  assert_true(p.order_bwd_cost == c.order_bwd_cost);
  unlink(g_path);
}

/* Interleaved warm-up depths the order search chose (other than
 * Megatron-Core's 10 8 6 4) written and read back, and the simulation of
 * the plan read back is the one written. */
static void test_interleaved_warmup_round_trip(void **state) {
  (void)state;
  ModelConfig m;
  ClusterSpec cl;
  assert_int_equal(plan_test_load_model(&m, "mixtral-8x7b"), 0);
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  PlanConfig cfg;
  plan_config_init(&cfg, 4096, 256, 2);
  cfg.par.tp = 2, cfg.par.pp = 4, cfg.par.vpp = 2, cfg.par.ep = 8, cfg.par.dp = 0;
  cfg.schedule = SCHED_SCHEDULE_INTERLEAVED;
  cfg.schedule_given = 1;
  static const int depths[4] = {13, 10, 8, 6};
  cfg.warmup_set = 4;
  memcpy(cfg.warmup, depths, sizeof depths);
  Error err = {0, ""};
  assert_int_equal(plan_config_finish(&cfg, &m, &cl, 64, &err), 0);
  PlanOptions opt;
  plan_options_default(&opt);
  PlanResult r;
  int rc = plan_simulate(&m, &cl, &opt, &cfg, NULL, NULL, &r, &err);
  if (rc) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(r.memory[0].peak_inflight, 14);
  assert_int_equal(plan_write_json(&r, NULL, "mixtral-8x7b", cl.name, g_path, &err), 0);
  PlanChoice p;
  rc = plan_file_read(g_path, &p, &err);
  if (rc) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(p.schedule, SCHED_SCHEDULE_INTERLEAVED);
  assert_int_equal(p.num_warmup, 4);
  assert_memory_equal(p.warmup, depths, sizeof depths);
  unlink(g_path);
  plan_result_free(&r);
  cluster_spec_free(&cl);
}

/* Reads the written plan, applies edit to its JSON, and expects an error
 * whose message holds the file name and `field`. */
static void expect_error(void (*edit)(cJSON *), const char *field) {
  char *text = NULL;
  FILE *f = fopen(g_path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  text = calloc((size_t)n + 1, 1);
  assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  cJSON *root = cJSON_Parse(text);
  free(text);
  assert_non_null(root);
  edit(root);
  PlanChoice p;
  Error err = {0, ""};
  assert_int_not_equal(plan_file_from_json(root, "bad-plan.json", &p, &err), 0);
  cJSON_Delete(root);
  if (!strstr(err.msg, "bad-plan.json") || !strstr(err.msg, field)) fprintf(stderr, "message: %s\n", err.msg);
  assert_non_null(strstr(err.msg, "bad-plan.json"));
  assert_non_null(strstr(err.msg, field));
}

static cJSON *par(cJSON *root) {
  return cJSON_GetObjectItemCaseSensitive(root, "parallel");
}
static void set_num(cJSON *o, const char *key, double v) {
  cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateNumber(v));
}
static void set_str(cJSON *o, const char *key, const char *v) {
  cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateString(v));
}
static void bad_format(cJSON *r) { set_str(r, "format", "fivefold.trace"); }
static void bad_version(cJSON *r) { set_num(r, "version", 2); }
static void no_parallel(cJSON *r) { cJSON_DeleteItemFromObjectCaseSensitive(r, "parallel"); }
static void tp_string(cJSON *r) { set_str(par(r), "tp", "2"); }
static void tp_zero(cJSON *r) { set_num(par(r), "tp", 0); }
static void pp_fraction(cJSON *r) { set_num(par(r), "pp", 2.5); }
static void no_mbs(cJSON *r) { cJSON_DeleteItemFromObjectCaseSensitive(par(r), "micro_batch_size"); }
static void bad_schedule(cJSON *r) { set_str(par(r), "schedule", "zigzag"); }
static void schedule_misfit(cJSON *r) { set_str(par(r), "schedule", "none"); }
static void bad_recompute(cJSON *r) { set_str(par(r), "recompute", "some"); }
/* Fields the written (selective) plan lacks: added. */
static void bad_recompute_method(cJSON *r) { cJSON_AddStringToObject(par(r), "recompute_method", "blocks"); }
static void bad_recompute_layers(cJSON *r) { cJSON_AddNumberToObject(par(r), "recompute_num_layers", -1); }
static void bad_recompute_modules(cJSON *r) { set_str(par(r), "recompute_modules", "layernorm,attn"); }
static void distopt_number(cJSON *r) { set_num(par(r), "distributed_optimizer", 1); }
static void short_stages(cJSON *r) { cJSON_DeleteItemFromArray(cJSON_GetObjectItemCaseSensitive(par(r), "layers_per_stage"), 0); }
static void zero_stage(cJSON *r) {
  cJSON_ReplaceItemInArray(cJSON_GetObjectItemCaseSensitive(par(r), "layers_per_stage"), 1, cJSON_CreateNumber(0));
}
static void batch_misfit(cJSON *r) { set_num(par(r), "global_batch_size", 100); }
static void microbatch_misfit(cJSON *r) { set_num(par(r), "microbatches", 3); }
static void gpus_misfit(cJSON *r) { set_num(r, "gpus", 32); }
static void moe_misfit(cJSON *r) { set_num(par(r), "edp", 4); }
static void bad_dtype(cJSON *r) { set_str(r, "dtype", "int4"); }
static void no_seq(cJSON *r) { cJSON_DeleteItemFromObjectCaseSensitive(r, "seq_length"); }
static void order_bwd_string(cJSON *r) { set_str(par(r), "order_bwd_cost", "2"); }
static void order_bwd_zero(cJSON *r) { set_num(par(r), "order_bwd_cost", 0); }
static void order_fwd_negative(cJSON *r) { set_num(par(r), "order_fwd_cost", -1); }
static void order_fwd_alone(cJSON *r) { cJSON_DeleteItemFromObjectCaseSensitive(par(r), "order_bwd_cost"); }
static void order_bwd_alone(cJSON *r) { cJSON_DeleteItemFromObjectCaseSensitive(par(r), "order_fwd_cost"); }

static cJSON *warmup_array(const int *w, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(w[i]));
  return a;
}
/* Interleaved PP4 x VPP2, 16 micro-batches: the last rank's depth below
 * (vpp-1)*pp = 4. */
static void warmup_vpp_low(cJSON *r) {
  cJSON_AddItemToObject(par(r), "warmup", warmup_array((const int[]){9, 8, 6, 3}, 4));
}
static void warmup_vpp_deep(cJSON *r) {
  cJSON_AddItemToObject(par(r), "warmup", warmup_array((const int[]){15, 8, 6, 4}, 4));
}

static void test_bad_fields(void **state) {
  (void)state;
  write_plan();
  expect_error(warmup_vpp_low, "parallel.warmup\": schedule interleaved: warm-up depth of rank 3 (the last) is 3");
  expect_error(warmup_vpp_deep, "warm-up depth of rank 0 is 15, above the bound 12");
  expect_error(bad_format, "\"format\"");
  expect_error(bad_version, "\"version\"");
  expect_error(no_parallel, "\"parallel\"");
  expect_error(tp_string, "parallel.tp");
  expect_error(tp_zero, "parallel.tp");
  expect_error(pp_fraction, "parallel.pp");
  expect_error(no_mbs, "parallel.micro_batch_size");
  expect_error(bad_schedule, "parallel.schedule");
  expect_error(schedule_misfit, "parallel.schedule");
  expect_error(bad_recompute, "parallel.recompute");
  expect_error(bad_recompute_method, "parallel.recompute_method");
  expect_error(bad_recompute_layers, "parallel.recompute_num_layers");
  expect_error(bad_recompute_modules, "parallel.recompute_modules");
  expect_error(distopt_number, "parallel.distributed_optimizer");
  expect_error(short_stages, "parallel.layers_per_stage");
  expect_error(zero_stage, "parallel.layers_per_stage");
  expect_error(batch_misfit, "parallel.global_batch_size");
  expect_error(microbatch_misfit, "parallel.microbatches");
  expect_error(gpus_misfit, "\"gpus\"");
  expect_error(moe_misfit, "parallel.etp x ep x edp x pp");
  expect_error(bad_dtype, "\"dtype\"");
  expect_error(no_seq, "\"seq_length\"");
  expect_error(order_bwd_string, "\"parallel.order_bwd_cost\": expected a number > 0");
  expect_error(order_bwd_zero, "\"parallel.order_bwd_cost\": expected a number > 0");
  expect_error(order_fwd_negative, "\"parallel.order_fwd_cost\": expected a number > 0");
  expect_error(order_fwd_alone, "\"parallel.order_bwd_cost\": missing");
  expect_error(order_bwd_alone, "\"parallel.order_fwd_cost\": missing");

  /* Not JSON, and no file at all. */
  FILE *f = fopen(g_path, "w");
  assert_non_null(f);
  fputs("{\"format\": \"fivefold.plan\",\n \"version\": 1,\n oops}\n", f);
  fclose(f);
  PlanChoice p;
  Error err = {0, ""};
  assert_int_not_equal(plan_file_read(g_path, &p, &err), 0);
  assert_non_null(strstr(err.msg, "invalid JSON near line 3"));
  unlink(g_path);
  assert_int_not_equal(plan_file_read(g_path, &p, &err), 0);
  assert_non_null(strstr(err.msg, g_path));
}

/* The plan's model identity: written by plan_write_json_for_model, read
 * back, equal for two loads of one model and different for a model that
 * differs in one field (the layer count included or not). */
/* Full recomputation: the writer records Megatron's method and count
 * (uniform 1 for the default), the reader takes them back; a plan without
 * them reads as uniform 1. */
static void test_full_recompute(void **state) {
  (void)state;
  ModelConfig m;
  ClusterSpec cl;
  assert_int_equal(plan_test_load_model(&m, "mixtral-8x7b"), 0);
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  for (int k = 0; k < 2; k++) {
    PlanConfig cfg;
    plan_config_init(&cfg, 4096, 256, 2);
    cfg.par.tp = 2, cfg.par.pp = 4, cfg.par.vpp = 1, cfg.par.ep = 8, cfg.par.dp = 0;
    cfg.recompute = PLAN_RECOMPUTE_FULL;
    cfg.recompute_num_layers = k ? 3 : 0; /* uniform: groups of 3, or every block */
    Error err = {0, ""};
    assert_int_equal(plan_config_finish(&cfg, &m, &cl, 64, &err), 0);
    PlanOptions opt;
    plan_options_default(&opt);
    PlanResult r;
    assert_int_equal(plan_simulate(&m, &cl, &opt, &cfg, NULL, NULL, &r, &err), 0);
    assert_int_equal(plan_write_json(&r, NULL, "mixtral-8x7b", cl.name, g_path, &err), 0);
    plan_result_free(&r);
    PlanChoice p;
    assert_int_equal(plan_file_read(g_path, &p, &err), 0);
    assert_int_equal(p.recompute, PLAN_RECOMPUTE_FULL);
    assert_int_equal(p.recompute_method, 0);
    assert_int_equal(p.recompute_num_layers, k ? 3 : 1);
  }
  /* Without the two fields: uniform, 1. */
  FILE *f = fopen(g_path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = calloc((size_t)n + 1, 1);
  assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  cJSON *root = cJSON_Parse(text);
  free(text);
  cJSON_DeleteItemFromObjectCaseSensitive(par(root), "recompute_method");
  cJSON_DeleteItemFromObjectCaseSensitive(par(root), "recompute_num_layers");
  PlanChoice p;
  Error err = {0, ""};
  assert_int_equal(plan_file_from_json(root, "old-plan.json", &p, &err), 0);
  assert_int_equal(p.recompute_method, 0);
  assert_int_equal(p.recompute_num_layers, 1);
  /* A plan without order costs (written before they were) reads as 0, 0:
   * the scheduler's defaults. */
  assert_non_null(cJSON_GetObjectItemCaseSensitive(par(root), "order_bwd_cost"));
  cJSON_DeleteItemFromObjectCaseSensitive(par(root), "order_fwd_cost");
  cJSON_DeleteItemFromObjectCaseSensitive(par(root), "order_bwd_cost");
  assert_int_equal(plan_file_from_json(root, "old-plan.json", &p, &err), 0);
  assert_true(p.order_fwd_cost == 0 && p.order_bwd_cost == 0);
  cJSON_AddStringToObject(par(root), "recompute_method", "block");
  assert_int_equal(plan_file_from_json(root, "old-plan.json", &p, &err), 0);
  assert_int_equal(p.recompute_method, 1);
  cJSON_Delete(root);
  cluster_spec_free(&cl);
  unlink(g_path);
}

static void test_model_identity(void **state) {
  (void)state;
  ModelConfig m, again, wider;
  ClusterSpec cl;
  assert_int_equal(plan_test_load_model(&m, "mixtral-8x7b"), 0);
  assert_int_equal(plan_test_load_model(&again, "mixtral-8x7b"), 0);
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  wider = m;
  wider.intermediate_size += 128; /* same layers, heads and experts */
  char a[PLAN_FINGERPRINT_MAX], b[PLAN_FINGERPRINT_MAX], c[PLAN_FINGERPRINT_MAX];
  plan_model_fingerprint(&m, a);
  plan_model_fingerprint(&again, b);
  plan_model_fingerprint(&wider, c);
  assert_string_equal(a, b);
  assert_string_not_equal(a, c);
  assert_int_equal(strncmp(a, "crc32:", 6), 0);
  PlanConfig cfg;
  plan_config_init(&cfg, 4096, 256, 2);
  cfg.par.tp = 2, cfg.par.pp = 4, cfg.par.ep = 8, cfg.par.dp = 0;
  Error err = {0, ""};
  assert_int_equal(plan_config_finish(&cfg, &m, &cl, 64, &err), 0);
  PlanOptions opt;
  plan_options_default(&opt);
  PlanResult r;
  assert_int_equal(plan_simulate(&m, &cl, &opt, &cfg, NULL, NULL, &r, &err), 0);
  assert_int_equal(plan_write_json_for_model(&r, NULL, "mixtral-8x7b", &m, cl.name, g_path, &err), 0);
  plan_result_free(&r);
  cluster_spec_free(&cl);
  PlanChoice p;
  assert_int_equal(plan_file_read(g_path, &p, &err), 0);
  assert_true(p.has_identity);
  assert_string_equal(p.model_fingerprint, a);
  assert_non_null(strstr(p.model_summary, "32 layers"));
  assert_non_null(strstr(p.model_summary, "8 experts top-2"));
  /* A plain plan_write_json has none (the trainer refuses such a plan). */
  write_plan();
  assert_int_equal(plan_file_read(g_path, &p, &err), 0);
  assert_false(p.has_identity);
  unlink(g_path);
}

static void identity_string(cJSON *r) { cJSON_AddStringToObject(r, "model_identity", "mixtral"); }
static void identity_no_fingerprint(cJSON *r) { cJSON_AddObjectToObject(r, "model_identity"); }

static void test_bad_identity(void **state) {
  (void)state;
  write_plan();
  expect_error(identity_string, "\"model_identity\"");
  expect_error(identity_no_fingerprint, "model_identity.fingerprint");
  unlink(g_path);
}

int main(void) {
  snprintf(g_path, sizeof g_path, "/tmp/fivefold-plan-file-%d.json", (int)getpid());
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reads_what_the_planner_writes),
      cmocka_unit_test(test_interleaved_warmup_round_trip),
      cmocka_unit_test(test_bad_fields),
      cmocka_unit_test(test_full_recompute),
      cmocka_unit_test(test_model_identity),
      cmocka_unit_test(test_bad_identity),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
