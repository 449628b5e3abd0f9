/* The simulator end to end: with equal stages and free communication the
 * pipeline bubble it reports is the textbook (p-1)/(m+p-1) for 1F1B and
 * GPipe and (p-1)/(vm+p-1) interleaved; MFU is the model-FLOPs formula; the
 * breakdown adds up to the step; transfers, unhidden gradient reductions
 * and recomputation cost what they should; the trace is written; and the
 * partition dynamic program is optimal against brute force. */
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

#include "model/flops.h"
#include "plan/simulate.h"
#include "plan/stages.h"
#include "plan_test_util.h"

/* A dense model whose embedding and LM head are negligible (vocabulary 2),
 * so equal block counts make equal stages. */
static void dense_model(ModelConfig *m, int layers) {
  model_config_defaults(m);
  m->vocab_size = 2;
  m->hidden_size = 512;
  m->num_layers = layers;
  m->num_heads = 8;
  m->num_kv_heads = 8;
  m->intermediate_size = 2048;
}

static PlanResult run(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o, PlanConfig *c, int gpus,
                      const PlanSimOptions *sim) {
  Error err = {0, ""};
  int rc = plan_config_finish(c, m, cl, gpus, &err);
  PlanResult r;
  if (!rc) rc = plan_simulate(m, cl, o, c, sim, NULL, &r, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  return r;
}

static void pipeline_config(PlanConfig *c, int pp, int vpp, int m, SchedScheduleKind schedule) {
  plan_config_init(c, 256, m, 1);
  c->par.pp = pp;
  c->par.vpp = vpp;
  c->par.dp = 0;
  c->schedule = schedule;
}

static void test_bubble_matches_formula(void **state) {
  (void)state;
  ModelConfig m;
  dense_model(&m, 8);
  ClusterSpec cl;
  plan_test_free_cluster(&cl, 1, 8);
  PlanOptions o;
  plan_test_free_options(&o);
  static const int cases[][2] = {{2, 1}, {2, 4}, {4, 4}, {4, 8}, {8, 3}, {8, 16}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int p = cases[i][0], mb = cases[i][1];
    double want = (p - 1.0) / (mb + p - 1.0);
    for (int gpipe = 0; gpipe < 2; gpipe++) {
      PlanConfig c;
      pipeline_config(&c, p, 1, mb, gpipe ? SCHED_SCHEDULE_GPIPE : SCHED_SCHEDULE_1F1B);
      PlanResult r = run(&m, &cl, &o, &c, p, NULL);
      if (fabs(r.bubble_fraction - want) > 1e-4)
        print_error("p %d m %d %s: bubble %.6f, formula %.6f\n", p, mb, gpipe ? "gpipe" : "1f1b", r.bubble_fraction,
                    want);
      assert_true(fabs(r.bubble_fraction - want) <= 1e-4);
      /* The critical rank's idle share is the same bubble. */
      assert_true(fabs(r.breakdown.t[PLAN_COMP_BUBBLE] / r.step_time - want) <= 1e-3);
      plan_result_free(&r);
    }
  }
  /* Interleaved: the bubble shrinks by the number of chunks. */
  static const int icases[][3] = {{2, 2, 2}, {4, 2, 4}, {4, 2, 8}, {2, 4, 6}};
  for (size_t i = 0; i < sizeof icases / sizeof icases[0]; i++) {
    int p = icases[i][0], v = icases[i][1], mb = icases[i][2];
    PlanConfig c;
    pipeline_config(&c, p, v, mb, SCHED_SCHEDULE_INTERLEAVED);
    PlanResult r = run(&m, &cl, &o, &c, p, NULL);
    double want = (p - 1.0) / (v * mb + p - 1.0);
    if (fabs(r.bubble_fraction - want) > 1e-4)
      print_error("interleaved p %d v %d m %d: bubble %.6f, formula %.6f\n", p, v, mb, r.bubble_fraction, want);
    assert_true(fabs(r.bubble_fraction - want) <= 1e-4);
    plan_result_free(&r);
  }
}

static void test_mfu_and_breakdown(void **state) {
  (void)state;
  ModelConfig m;
  ClusterSpec cl;
  assert_int_equal(plan_test_load_model(&m, "mixtral-8x7b"), 0);
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  PlanOptions o;
  plan_options_default(&o);
  PlanConfig c;
  plan_config_init(&c, 4096, 64, 1);
  c.par.tp = 2, c.par.pp = 4, c.par.ep = 4, c.par.etp = 1, c.par.dp = 0;
  c.distributed_optimizer = 1;
  PlanSimOptions sim = {.exposed_p2p = 1};
  PlanResult r = run(&m, &cl, &o, &c, 32, &sim);
  double flops = model_flops_per_sequence(&m, 4096) * 64;
  assert_true(fabs(r.model_flops - flops) <= 1e-9 * flops);
  assert_true(fabs(r.mfu - flops / (r.step_time * 32 * 989.5e12)) <= 1e-9);
  assert_true(r.mfu > 0.05 && r.mfu < 0.8);
  assert_true(fabs(plan_breakdown_total(&r.breakdown) - r.step_time) <= 1e-9 * r.step_time);
  for (int k = 0; k < PLAN_NUM_COMPONENTS; k++) assert_true(r.breakdown.t[k] >= 0);
  assert_true(r.breakdown.t[PLAN_COMP_EXPERT_GEMM] > 0);
  assert_true(r.breakdown.t[PLAN_COMP_EP_COMM] > 0);
  assert_true(r.breakdown.t[PLAN_COMP_TP_COMM] > 0);
  assert_true(r.breakdown.t[PLAN_COMP_CP_COMM] == 0);
  assert_true(fabs(r.tokens_per_s - 64.0 * 4096 / r.step_time) < 1e-6 * r.tokens_per_s);
  assert_int_equal(r.pp, 4);
  int sum = 0;
  for (int s = 0; s < r.cfg.num_given_layers; s++) sum += r.cfg.layers_per_stage[s];
  assert_int_equal(sum, 32);
  assert_true(r.fits);
  for (int p = 0; p < r.pp; p++) assert_true(r.memory[p].total <= r.peak_memory);
  char buf[64];
  assert_string_equal(plan_result_bottleneck(&r, buf, sizeof buf), r.bottleneck);
  plan_result_free(&r);
  cluster_spec_free(&cl);
}

/* Slower pipeline links, unhidden gradient reductions and recomputation
 * each make the step longer; free ones change nothing. */
static void test_costs_move_the_step(void **state) {
  (void)state;
  ModelConfig m;
  dense_model(&m, 8);
  m.vocab_size = 32000;
  ClusterSpec cl;
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  PlanOptions o;
  plan_options_default(&o);
  o.bucket_params = 1e5; /* a small model: many buckets, so some reduce behind the backward */
  PlanConfig c;
  pipeline_config(&c, 4, 1, 8, SCHED_SCHEDULE_1F1B);
  c.global_batch_size = 64; /* dp 8 x 8 micro-batches over 32 GPUs: pipeline groups cross nodes */
  PlanSimOptions sim = {.exposed_p2p = 1};
  PlanResult base = run(&m, &cl, &o, &c, 32, &sim);
  assert_true(base.breakdown.t[PLAN_COMP_PP_COMM] > 0);

  ClusterSpec slow = cl;
  slow.link[PLAN_LEVEL_INTER].latency *= 100;
  PlanResult r = run(&m, &slow, &o, &c, 32, &sim);
  assert_true(r.step_time > base.step_time);
  assert_true(r.breakdown.t[PLAN_COMP_PP_COMM] > base.breakdown.t[PLAN_COMP_PP_COMM]);
  plan_result_free(&r);

  PlanOptions no_overlap = o;
  no_overlap.dp_overlap = 0;
  r = run(&m, &cl, &no_overlap, &c, 32, &sim);
  assert_true(r.step_time > base.step_time);
  assert_true(r.breakdown.t[PLAN_COMP_DP_COMM] > base.breakdown.t[PLAN_COMP_DP_COMM]);
  plan_result_free(&r);

  /* Recomputation: slower, and fewer stored activations (summed over ranks:
   * the partition may move, so one rank's peak can rise). */
  double last = base.step_time, last_acts = 0;
  for (int p = 0; p < base.pp; p++) last_acts += base.memory[p].activations;
  for (int rc = PLAN_RECOMPUTE_SELECTIVE; rc <= PLAN_RECOMPUTE_FULL; rc++) {
    PlanConfig cr = c;
    cr.recompute = (PlanRecompute)rc;
    r = run(&m, &cl, &o, &cr, 32, &sim);
    assert_true(r.step_time > last);
    assert_true(r.breakdown.t[PLAN_COMP_RECOMPUTE] > 0);
    double acts = 0;
    for (int p = 0; p < r.pp; p++) acts += r.memory[p].activations;
    assert_true(acts < last_acts);
    last = r.step_time;
    last_acts = acts;
    plan_result_free(&r);
  }
  /* The distributed optimizer shrinks memory and, with buckets large
   * enough that their latencies do not add up (the default), does not slow
   * the step. (With 1e5-element buckets the step is a chain of bucket
   * latencies, and a reduce-scatter has no tree to shorten it.) */
  PlanOptions large = o;
  plan_options_default(&large);
  PlanResult plain = run(&m, &cl, &large, &c, 32, &sim);
  PlanConfig cd = c;
  cd.distributed_optimizer = 1;
  r = run(&m, &cl, &large, &cd, 32, &sim);
  assert_true(r.peak_memory < plain.peak_memory);
  assert_true(r.step_time <= plain.step_time);
  plan_result_free(&r);
  plan_result_free(&plain);
  plan_result_free(&base);
  cluster_spec_free(&cl);
}

static void test_trace_written(void **state) {
  (void)state;
  ModelConfig m;
  dense_model(&m, 4);
  ClusterSpec cl;
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  PlanOptions o;
  plan_options_default(&o);
  PlanConfig c;
  pipeline_config(&c, 2, 1, 4, SCHED_SCHEDULE_1F1B);
  char path[] = "/tmp/fivefold_plan_trace_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  PlanSimOptions sim = {.trace_path = path};
  PlanResult r = run(&m, &cl, &o, &c, 2, &sim);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  cJSON *j = cJSON_Parse(text);
  assert_non_null(j);
  cJSON *events = cJSON_GetObjectItem(j, "traceEvents");
  assert_true(cJSON_IsArray(events) && cJSON_GetArraySize(events) > 2 * 4 * 2);
  /* The last event ends at the predicted step (microseconds). */
  double end = 0;
  cJSON *e;
  cJSON_ArrayForEach(e, events) {
    cJSON *ts = cJSON_GetObjectItem(e, "ts"), *dur = cJSON_GetObjectItem(e, "dur");
    if (ts && dur) end = fmax(end, ts->valuedouble + dur->valuedouble);
  }
  assert_true(fabs(end - 1e6 * r.step_time) <= 1e-6 * end + 1e-3);
  cJSON_Delete(j);
  remove(path);
  plan_result_free(&r);
  cluster_spec_free(&cl);
}

/* Min-max partition against brute force over all compositions. */
static double brute(const double *cost, int L, int S, double first, double last, int stage, int start, double worst) {
  if (stage == S) return start == L ? worst : INFINITY;
  double best = INFINITY;
  for (int end = start + 1; end <= L - (S - stage - 1); end++) {
    double w = 0;
    for (int i = start; i < end; i++) w += cost[i];
    if (stage == 0) w += first;
    if (stage == S - 1) w += last;
    double v = brute(cost, L, S, first, last, stage + 1, end, fmax(worst, w));
    if (v < best) best = v;
  }
  return best;
}

static void test_partition_dp(void **state) {
  (void)state;
  unsigned seed = 12345;
  for (int trial = 0; trial < 200; trial++) {
    seed = seed * 1103515245u + 12345u;
    int L = 2 + (int)(seed >> 16) % 9;
    seed = seed * 1103515245u + 12345u;
    int S = 1 + (int)(seed >> 16) % (L < 5 ? L : 5);
    double cost[16];
    for (int i = 0; i < L; i++) {
      seed = seed * 1103515245u + 12345u;
      cost[i] = 1 + (seed >> 16) % 7;
    }
    seed = seed * 1103515245u + 12345u;
    double first = (seed >> 16) % 3, last = (seed >> 20) % 5;
    int layers[16];
    assert_int_equal(plan_stages_dp(cost, L, S, first, last, layers, NULL), 0);
    double worst = 0;
    int at = 0;
    for (int s = 0; s < S; s++) {
      assert_true(layers[s] >= 1);
      double w = (s == 0 ? first : 0) + (s == S - 1 ? last : 0);
      for (int i = 0; i < layers[s]; i++) w += cost[at + i];
      at += layers[s];
      worst = fmax(worst, w);
    }
    assert_int_equal(at, L);
    assert_true(fabs(worst - brute(cost, L, S, first, last, 0, 0, 0)) < 1e-9);
  }
  /* A heavy head pulls blocks off the last stage: 10 blocks, 4 stages, head
   * worth 2 blocks -> 3,3,3,1. */
  double unit[10];
  for (int i = 0; i < 10; i++) unit[i] = 1;
  int layers[4];
  assert_int_equal(plan_stages_dp(unit, 10, 4, 0, 2, layers, NULL), 0);
  assert_int_equal(layers[3], 1);
  assert_int_equal(layers[0] + layers[1] + layers[2], 9);
}

/* Mixed dense and MoE blocks get an uneven partition that balances time. */
static void test_mixed_layers_partition(void **state) {
  (void)state;
  ModelConfig m;
  assert_int_equal(plan_test_load_model(&m, "mixtral-8x7b"), 0);
  /* First 8 blocks dense (a 14336 FFN), the rest MoE. */
  for (int i = 0; i < m.num_layers; i++) m.is_moe_layer[i] = i >= 8;
  ClusterSpec cl;
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  PlanOptions o;
  plan_options_default(&o);
  PlanConfig c;
  plan_config_init(&c, 4096, 32, 1);
  c.par.pp = 4, c.par.ep = 8, c.par.dp = 0;
  c.distributed_optimizer = 1;
  PlanResult r = run(&m, &cl, &o, &c, 32, NULL);
  /* Dense blocks are cheaper than MoE blocks: the first stage takes more. */
  assert_true(r.dense_layer.fwd_total + r.dense_layer.bwd_total < r.moe_layer.fwd_total + r.moe_layer.bwd_total);
  assert_true(r.cfg.layers_per_stage[0] > r.cfg.layers_per_stage[2]);
  double worst = 0, mean = 0;
  for (int s = 0; s < 4; s++) {
    double w = r.stage[s].fwd_total + r.stage[s].bwd_total;
    worst = fmax(worst, w);
    mean += w / 4;
  }
  assert_true(worst < 1.1 * mean);
  plan_result_free(&r);
  cluster_spec_free(&cl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bubble_matches_formula), cmocka_unit_test(test_mfu_and_breakdown),
      cmocka_unit_test(test_costs_move_the_step),    cmocka_unit_test(test_trace_written),
      cmocka_unit_test(test_partition_dp),           cmocka_unit_test(test_mixed_layers_partition),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
