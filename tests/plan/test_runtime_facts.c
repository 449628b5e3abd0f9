/* The runtime as it is, by default: a spec written by calibrate carries
 * the CPU runtime's facts (precision, MoE replicated over TP, no
 * asynchronous progress, no device sync, its buckets and their measured
 * overhead), they load back
 * field for field, the planner's options default from them while explicit
 * flags win, a TP run priced from the facts alone equals one priced with
 * every flag spelled out, bf16 there rounds only the GEMM inputs (fp32
 * activations and messages), and the bottleneck names the largest part of the
 * step, GEMMs included. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/calibrate_fit.h"
#include "plan/memory.h"
#include "plan/simulate.h"
#include "plan_test_util.h"

/* A calibrated-looking spec: the local default with the CPU runtime's facts. */
static void calibrated_spec(ClusterSpec *s, int devices) {
  calib_spec_local_default(s, devices);
  calib_runtime_facts_cpu(&s->runtime, "testhost");
  /* GEMMs at a flat half of peak, as a CPU's are over these sizes. */
  s->gemm_efficiency.n = 1;
  s->gemm_efficiency.x[0] = 1e6;
  s->gemm_efficiency.y[0] = 0.5;
}

/* The tiny MoE on a calibrated 2-device spec, with the planner's options
 * (and dtype) defaulted from the spec's runtime facts. */
static void facts_setup(ModelConfig *m, ClusterSpec *s, PlanOptions *o, PlanDtype *dtype) {
  *m = plan_test_tiny_moe();
  calibrated_spec(s, 2);
  plan_options_default(o);
  *dtype = PLAN_DTYPE_BF16;
  plan_options_from_runtime(&s->runtime, 0, o, dtype);
}

static void test_facts_round_trip(void **state) {
  (void)state;
  ClusterSpec s, back;
  calibrated_spec(&s, 2);
  s.runtime.bucket_overhead = 3.25e-6;
  s.runtime.grad_reduce_factor.n = 2;
  s.runtime.grad_reduce_factor.x[0] = 1048576, s.runtime.grad_reduce_factor.y[0] = 1.25;
  s.runtime.grad_reduce_factor.x[1] = 67108864, s.runtime.grad_reduce_factor.y[1] = 3;
  cJSON *json = calib_spec_to_json(&s, "test");
  assert_non_null(json);
  Error err = {0, ""};
  assert_int_equal(cluster_spec_from_json(&back, json, "spec.json", &err), 0);
  const PlanRuntimeFacts *a = &s.runtime, *b = &back.runtime;
  assert_true(b->given);
  assert_string_equal(b->device, "cpu");
  assert_string_equal(b->host, "testhost");
  assert_int_equal(b->dtype, PLAN_DTYPE_FP32);
  assert_int_equal(b->moe_tp_replicated, 1);
  assert_int_equal(b->async_progress, 0);
  assert_int_equal(b->device_sync, 0);
  assert_true(fabs(b->dropless_sync - a->dropless_sync) < 1e-12);
  assert_true(fabs(b->bucket_bytes - 25.0 * 1024 * 1024) < 1);
  assert_true(fabs(b->bucket_max_share - 0.25) < 1e-12);
  assert_true(fabs(b->bucket_overhead - 3.25e-6) < 1e-15);
  assert_int_equal(b->grad_reduce_factor.n, 2);
  assert_true(fabs(b->grad_reduce_factor.x[1] - 67108864) < 1e-3);
  assert_true(fabs(b->grad_reduce_factor.y[0] - 1.25) < 1e-12);
  /* A wrong field is named with what was expected. */
  cJSON *rt = cJSON_GetObjectItem(json, "runtime");
  cJSON_ReplaceItemInObject(rt, "bucket_overhead_us", cJSON_CreateNumber(-1));
  assert_int_not_equal(cluster_spec_from_json(&back, json, "spec.json", &err), 0);
  assert_non_null(strstr(err.msg, "runtime.bucket_overhead_us"));
  cJSON_ReplaceItemInObject(rt, "bucket_overhead_us", cJSON_CreateNumber(3.25));
  cJSON_ReplaceItemInObject(rt, "grad_reduce_factor", cJSON_Parse("[[4, 1.5], [1, 2]]"));
  assert_int_not_equal(cluster_spec_from_json(&back, json, "spec.json", &err), 0);
  assert_non_null(strstr(err.msg, "runtime.grad_reduce_factor"));
  assert_non_null(strstr(err.msg, "bucket MB must increase"));
  cJSON_ReplaceItemInObject(rt, "grad_reduce_factor", cJSON_Parse("[[1, 1.25]]"));
  cJSON_ReplaceItemInObject(rt, "async_progress", cJSON_CreateNumber(3));
  assert_int_not_equal(cluster_spec_from_json(&back, json, "spec.json", &err), 0);
  assert_non_null(strstr(err.msg, "spec.json"));
  assert_non_null(strstr(err.msg, "runtime.async_progress"));
  assert_non_null(strstr(err.msg, "true or false"));
  cJSON_ReplaceItemInObject(rt, "async_progress", cJSON_CreateFalse());
  cJSON_AddNumberToObject(rt, "progress_thread", 1);
  assert_int_not_equal(cluster_spec_from_json(&back, json, "spec.json", &err), 0);
  assert_non_null(strstr(err.msg, "runtime.progress_thread"));
  cJSON_Delete(json);
  /* The shipped GPU specs have none. */
  ClusterSpec h100;
  assert_int_equal(plan_test_load_cluster(&h100, "dgx-h100"), 0);
  assert_false(h100.runtime.given);
  cluster_spec_free(&h100);
}

static void test_options_default_from_facts(void **state) {
  (void)state;
  ClusterSpec s;
  calibrated_spec(&s, 2);
  PlanOptions o;
  plan_options_default(&o);
  PlanDtype dtype = PLAN_DTYPE_BF16;
  plan_options_from_runtime(&s.runtime, 0, &o, &dtype);
  assert_int_equal(dtype, PLAN_DTYPE_FP32);
  assert_int_equal(o.moe_tp_replicated, 1);
  assert_true(o.dp_overlap == 0 && o.param_gather_overlap == 0 && o.cp_overlap == 0);
  assert_true(o.dropless_sync == 0);
  assert_true(fabs(o.bucket_params - 25.0 * 1024 * 1024 / 4) < 1);
  assert_true(o.bucket_max_share == 0.25);
  assert_true(o.bucket_overhead == 0);
  assert_int_equal(o.fp32_activations, 1); /* bf16 on the CPU runtime rounds only the GEMM inputs */
  s.runtime.bucket_overhead = 5e-6;
  plan_options_from_runtime(&s.runtime, 0, &o, &dtype);
  assert_true(o.bucket_overhead == 5e-6);
  /* Flags given on the command line win. */
  plan_options_default(&o);
  o.dp_overlap = 0.5;
  o.moe_tp_replicated = 0;
  dtype = PLAN_DTYPE_BF16;
  plan_options_from_runtime(&s.runtime, PLAN_GIVEN_DP_OVERLAP | PLAN_GIVEN_MOE_TP | PLAN_GIVEN_DTYPE, &o, &dtype);
  assert_int_equal(dtype, PLAN_DTYPE_BF16);
  assert_true(o.dp_overlap == 0.5);
  assert_int_equal(o.moe_tp_replicated, 0);
  assert_true(o.param_gather_overlap == 0);
  /* No facts: nothing changes. */
  PlanOptions d, e;
  plan_options_default(&d);
  e = d;
  PlanRuntimeFacts none;
  memset(&none, 0, sizeof none);
  plan_options_from_runtime(&none, 0, &e, &dtype);
  assert_memory_equal(&d, &e, sizeof d);
}

static double simulate_step(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o, PlanDtype dtype,
                            int tp, int dp) {
  PlanConfig cfg;
  plan_config_init(&cfg, 128, 4 * dp, 4);
  cfg.par.tp = tp;
  cfg.par.dp = dp;
  cfg.dtype = dtype;
  Error err = {0, ""};
  PlanResult r;
  int rc = plan_config_finish(&cfg, m, cl, tp * dp, &err);
  if (!rc) rc = plan_simulate(m, cl, o, &cfg, NULL, NULL, &r, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  double t = r.step_time;
  if (getenv("FACTS_DEBUG")) plan_result_explain(&r, m, stdout);
  plan_result_free(&r);
  return t;
}

/* TP2 on the calibrated spec: the facts alone price the run as the
 * replicated-MoE fp32 runtime, exactly as the flags spelled out do, and
 * unlike the GPU defaults (MoE split over TP ranks, bf16). */
static void test_tp_priced_as_the_runtime_runs(void **state) {
  (void)state;
  ModelConfig m;
  ClusterSpec s;
  PlanOptions facts, spelled, megatron;
  PlanDtype dtype;
  facts_setup(&m, &s, &facts, &dtype);
  plan_options_default(&spelled);
  spelled.moe_tp_replicated = 1;
  spelled.dp_overlap = spelled.param_gather_overlap = 0;
  spelled.dropless_sync = 0;
  spelled.bucket_params = 25.0 * 1024 * 1024 / 4;
  spelled.bucket_max_share = 0.25;
  plan_options_default(&megatron);
  double by_facts = simulate_step(&m, &s, &facts, dtype, 2, 1);
  double by_flags = simulate_step(&m, &s, &spelled, PLAN_DTYPE_FP32, 2, 1);
  double by_default = simulate_step(&m, &s, &megatron, PLAN_DTYPE_BF16, 2, 1);
  print_message("TP2: facts %.4f s, flags %.4f s, GPU defaults %.4f s\n", by_facts, by_flags, by_default);
  assert_true(fabs(by_facts - by_flags) <= 1e-12 * by_flags);
  assert_true(by_facts > 1.2 * by_default); /* the replicated MoE does the one-rank expert work */
  /* DP2: no asynchronous progress leaves the whole reduction exposed. */
  double dp_facts = simulate_step(&m, &s, &facts, dtype, 1, 2);
  PlanOptions overlapped = facts;
  overlapped.dp_overlap = 1;
  assert_true(dp_facts > simulate_step(&m, &s, &overlapped, dtype, 1, 2));
}

/* bf16 on the CPU runtime (the facts' fp32_activations): the GEMMs at the
 * bf16 rate, every byte at fp32, so the step lies between fp32's and
 * Megatron-style mixed precision's (2-byte activations, messages and
 * elementwise traffic). TP2 x DP1 moves activations over TP. */
static void test_bf16_keeps_fp32_activations(void **state) {
  (void)state;
  ModelConfig m = plan_test_tiny_moe();
  ClusterSpec s;
  calibrated_spec(&s, 2);
  s.peak_flops[PLAN_DTYPE_BF16] = 2 * s.peak_flops[PLAN_DTYPE_FP32];
  PlanOptions facts;
  plan_options_default(&facts);
  PlanDtype dtype = PLAN_DTYPE_FP32;
  plan_options_from_runtime(&s.runtime, 0, &facts, &dtype);
  PlanOptions mixed = facts;
  mixed.fp32_activations = 0;
  double fp32 = simulate_step(&m, &s, &facts, PLAN_DTYPE_FP32, 2, 1);
  double cpu_bf16 = simulate_step(&m, &s, &facts, PLAN_DTYPE_BF16, 2, 1);
  double mixed_bf16 = simulate_step(&m, &s, &mixed, PLAN_DTYPE_BF16, 2, 1);
  print_message("TP2: fp32 %.4f s, bf16 GEMMs %.4f s, mixed bf16 %.4f s\n", fp32, cpu_bf16, mixed_bf16);
  assert_true(cpu_bf16 < fp32);
  assert_true(mixed_bf16 < cpu_bf16);
}

/* The bottleneck is the largest component, GEMMs included: on a cluster
 * where only GEMMs and attention take time, Mixtral's expert GEMMs. */
static void test_bottleneck_names_the_largest_part(void **state) {
  (void)state;
  ModelConfig m;
  assert_int_equal(plan_test_load_model(&m, "mixtral-8x7b"), 0);
  ClusterSpec free_cl;
  plan_test_free_cluster(&free_cl, 1, 8);
  PlanOptions o;
  plan_options_default(&o);
  PlanConfig cfg;
  plan_config_init(&cfg, 4096, 8, 1);
  cfg.par.ep = 8;
  cfg.par.dp = 0;
  Error err = {0, ""};
  PlanResult r;
  assert_int_equal(plan_config_finish(&cfg, &m, &free_cl, 8, &err), 0);
  assert_int_equal(plan_simulate(&m, &free_cl, &o, &cfg, NULL, NULL, &r, &err), 0);
  int largest = 0;
  for (int c = 1; c < PLAN_NUM_COMPONENTS; c++)
    if (r.breakdown.t[c] > r.breakdown.t[largest]) largest = c;
  assert_int_equal(largest, PLAN_COMP_EXPERT_GEMM);
  char want[64];
  snprintf(want, sizeof want, "expert GEMM %.0f%%",
           100.0 * r.breakdown.t[largest] / plan_breakdown_total(&r.breakdown));
  assert_string_equal(r.bottleneck, want);
  plan_result_free(&r);
}

/* DP2 without asynchronous progress reduces every bucket after backward,
 * one after the other: each bucket's measured overhead adds to the step
 * once. Buckets of a quarter of the gradient (the runtime's cap): 4 per
 * stage at least. */
static void test_bucket_overhead_per_bucket(void **state) {
  (void)state;
  ModelConfig m;
  ClusterSpec s;
  PlanOptions o;
  PlanDtype dtype;
  facts_setup(&m, &s, &o, &dtype);
  PlanConfig cfg;
  plan_config_init(&cfg, 128, 8, 4);
  cfg.par.dp = 2;
  cfg.dtype = dtype;
  Error err = {0, ""};
  assert_int_equal(plan_config_finish(&cfg, &m, &s, 2, &err), 0);
  PlanResult a, b;
  assert_int_equal(plan_simulate(&m, &s, &o, &cfg, NULL, NULL, &a, &err), 0);
  o.bucket_overhead = 1e-3;
  assert_int_equal(plan_simulate(&m, &s, &o, &cfg, NULL, NULL, &b, &err), 0);
  /* The step grows by a whole number (the buckets) of milliseconds. */
  double k = (b.step_time - a.step_time) / 1e-3;
  print_message("DP2: step %.6f s -> %.6f s with 1 ms per bucket (%.6f buckets)\n", a.step_time, b.step_time, k);
  assert_true(k > 3.5);
  assert_true(fabs(k - round(k)) < 1e-6);
  plan_result_free(&a);
  plan_result_free(&b);
}

/* A spec with the runtime's measured update rate prices the update as
 * local parameters x rate: one rank of the tiny MoE, its step grows by
 * exactly its parameter count x the rate's increase, the same for each
 * nanosecond. */
static void test_measured_update_rate(void **state) {
  (void)state;
  ModelConfig m;
  ClusterSpec s;
  PlanOptions o;
  PlanDtype dtype;
  facts_setup(&m, &s, &o, &dtype);
  double t[3];
  for (int i = 0; i < 3; i++) {
    s.optimizer_per_param = (i + 1) * 1e-9;
    t[i] = simulate_step(&m, &s, &o, dtype, 1, 1);
  }
  PlanConfig cfg;
  plan_config_init(&cfg, 128, 4, 4);
  int first = 0, layers = m.num_layers;
  double weight = layers;
  SchedPartition one = {1, 1, 1, m.num_layers, &first, &layers, &weight, weight, weight};
  PlanParams p = plan_stage_params(&m, &cfg, &one, 0);
  print_message("update at 1, 2, 3 ns per parameter: %.6f %.6f %.6f s (%.0f parameters)\n", t[0], t[1], t[2],
                p.dense + p.expert);
  assert_true(fabs((t[1] - t[0]) - (p.dense + p.expert) * 1e-9) < 1e-12);
  assert_true(fabs((t[2] - t[1]) - (t[1] - t[0])) < 1e-12);
}

/* Attention in a bf16 run is priced at its own measured efficiency when
 * the spec has one (the CPU's bf16 tiles run no faster than its fp32
 * kernel, far below the bf16 GEMM peak), else at the fp32 kernel's; the
 * fields round-trip and a value above 1 is refused. */
static void test_bf16_attention_efficiency(void **state) {
  (void)state;
  ClusterSpec s, back;
  calibrated_spec(&s, 1);
  s.peak_flops[PLAN_DTYPE_FP32] = 2e11;
  s.peak_flops[PLAN_DTYPE_BF16] = 3e12;
  s.memory_bandwidth = 1e30;
  s.kernel_floor = 0;
  s.attention_ref_tokens = 0;
  double flops = 1e9;
  assert_true(fabs(plan_attention_time(&s, PLAN_DTYPE_BF16, flops, 0, 0, 0) - flops / (3e12 * s.attention_fwd_efficiency)) <
              1e-15);
  s.attention_bf16_fwd_efficiency = 0.015;
  s.attention_bf16_bwd_efficiency = 0.02;
  assert_true(fabs(plan_attention_time(&s, PLAN_DTYPE_BF16, flops, 0, 0, 0) - flops / (3e12 * 0.015)) < 1e-15);
  assert_true(fabs(plan_attention_time(&s, PLAN_DTYPE_BF16, flops, 0, 0, 1) - flops / (3e12 * 0.02)) < 1e-15);
  assert_true(fabs(plan_attention_time(&s, PLAN_DTYPE_FP32, flops, 0, 0, 0) - flops / (2e11 * s.attention_fwd_efficiency)) <
              1e-15);
  ClusterSpec w;
  calibrated_spec(&w, 1);
  w.attention_bf16_fwd_efficiency = 0.015;
  w.attention_bf16_bwd_efficiency = 0.02;
  cJSON *json = calib_spec_to_json(&w, "test");
  Error err = {0, ""};
  int rc = cluster_spec_from_json(&back, json, "spec.json", &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_true(fabs(back.attention_bf16_fwd_efficiency - 0.015) < 1e-12);
  assert_true(fabs(back.attention_bf16_bwd_efficiency - 0.02) < 1e-12);
  cJSON *att = cJSON_GetObjectItem(cJSON_GetObjectItem(json, "compute"), "attention_efficiency");
  cJSON_ReplaceItemInObject(att, "forward_bf16", cJSON_CreateNumber(2));
  assert_int_not_equal(cluster_spec_from_json(&back, json, "spec.json", &err), 0);
  assert_non_null(strstr(err.msg, "forward_bf16"));
  cJSON_Delete(json);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bf16_attention_efficiency),
      cmocka_unit_test(test_measured_update_rate),
      cmocka_unit_test(test_bucket_overhead_per_bucket),
      cmocka_unit_test(test_facts_round_trip),
      cmocka_unit_test(test_options_default_from_facts),
      cmocka_unit_test(test_tp_priced_as_the_runtime_runs),
      cmocka_unit_test(test_bf16_keeps_fp32_activations),
      cmocka_unit_test(test_bottleneck_names_the_largest_part),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
