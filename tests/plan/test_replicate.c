/* Stage replication (DAPPLE) in the planner and simulator: the (layers,
 * devices) dynamic program equals brute force over every partition and
 * every split of the devices; the simulator's replicated 1F1B equals the
 * pivot-stage formula on equal stages over free links and stays close to it
 * on a real cluster; the search's replicated plan is never slower than the
 * unreplicated pipeline and beats it with a heavy LM head; a plan file
 * keeps per-stage widths (the trainer runs them) and refuses bad ones; and
 * the simulator refuses, with the reason, what the trainer refuses over
 * replicated stages. */
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

#include "plan/plan_file.h"
#include "plan/replicate.h"
#include "plan/search.h"
#include "plan_test_util.h"

/* Brute force of the DP's objective: every composition of L layers and of
 * G devices into S parts. */
static double brute(const double *cost, int L, double first, double last, int G, int S) {
  double best = INFINITY;
  int cut[16], wcut[16];
  /* Enumerate layer counts and widths as mixed-radix counters. */
  int lay[16], wid[16];
  for (int i = 0; i < S; i++) lay[i] = 1, wid[i] = 1;
  (void)cut, (void)wcut;
  for (;;) {
    int sl = 0, sw = 0;
    for (int i = 0; i < S; i++) sl += lay[i], sw += wid[i];
    if (sl == L && sw == G) {
      double worst = 0;
      int at = 0;
      for (int i = 0; i < S; i++) {
        double seg = 0;
        for (int l = at; l < at + lay[i]; l++) seg += cost[l];
        if (i == 0) seg += first;
        if (i == S - 1) seg += last;
        at += lay[i];
        worst = fmax(worst, seg / wid[i]);
      }
      best = fmin(best, worst);
    }
    int k = 0;
    while (k < 2 * S) {
      int *v = k < S ? &lay[k] : &wid[k - S];
      int cap = k < S ? L : G;
      if (++*v <= cap) break;
      *v = 1;
      k++;
    }
    if (k == 2 * S) break;
  }
  return best;
}

static void test_dp_matches_brute_force(void **state) {
  (void)state;
  static const double costs[][7] = {
      {1, 1, 1, 1, 1, 1, 1}, {3, 1, 4, 1, 5, 9, 2}, {1, 2, 1, 2, 1, 2, 1}, {0.5, 0.5, 8, 0.5, 0.5, 0.5, 0.5}};
  static const double extras[][2] = {{0, 0}, {0.2, 6}, {2, 0.3}, {1, 12}};
  int checked = 0, replicated = 0;
  for (int c = 0; c < 4; c++)
    for (int e = 0; e < 4; e++)
      for (int G = 1; G <= 5; G++)
        for (int S = 1; S <= 4; S++) {
          int layers[8], width[8];
          double dp = plan_replication_dp(costs[c], 7, extras[e][0], extras[e][1], G, S, 0, NULL, layers, width);
          double bf = brute(costs[c], 7, extras[e][0], extras[e][1], G, S);
          if (isinf(bf)) {
            assert_true(isinf(dp));
            continue;
          }
          if (fabs(dp - bf) > 1e-12 * bf) print_error("costs %d extras %d G %d S %d: dp %g, brute force %g\n", c, e, G, S, dp, bf);
          assert_true(fabs(dp - bf) <= 1e-12 * bf);
          /* The widths and layers it returns achieve the objective. */
          int sl = 0, sw = 0, at = 0;
          double worst = 0;
          for (int s = 0; s < S; s++) {
            double seg = (s == 0 ? extras[e][0] : 0) + (s == S - 1 ? extras[e][1] : 0);
            for (int l = at; l < at + layers[s]; l++) seg += costs[c][l];
            at += layers[s];
            sl += layers[s], sw += width[s];
            worst = fmax(worst, seg / width[s]);
            replicated |= width[s] != width[0];
          }
          assert_int_equal(sl, 7);
          assert_int_equal(sw, G);
          assert_true(fabs(worst - dp) <= 1e-12 * dp);
          checked++;
        }
  print_message("dynamic program = brute force on %d (costs, extras, devices, stages) cases\n", checked);
  assert_true(replicated); /* some optimum has stages of different widths */
}

/* DAPPLE's objective with transfers, the replicas' reduction and memory,
 * written out here independently of plan_replication_stage_cost. */
static double t_transfer(double bytes, void *ctx) {
  (void)ctx;
  return 0.05 + bytes * 0.001;
}
static double t_reduce(double bytes, int w, void *ctx) {
  (void)ctx;
  return 0.1 + bytes * 0.01 * (w - 1) / w;
}
static const double T_GRAD[7] = {2, 1, 3, 1, 4, 1, 2}, T_ACT[7] = {5, 1, 2, 8, 1, 1, 3};
enum { T_M = 4 };

static double brute_terms(const double *cost, int G, int S, double cap, int *lay_out, int *wid_out) {
  const int L = 7;
  double best = INFINITY;
  int lay[16], wid[16];
  for (int i = 0; i < S; i++) lay[i] = 1, wid[i] = 1;
  for (;;) {
    int sl = 0, sw = 0;
    for (int i = 0; i < S; i++) sl += lay[i], sw += wid[i];
    if (sl == L && sw == G) {
      double worst = 0;
      for (int i = 0, at = 0; i < S; i++) {
        double comp = 0, g = 0, a = 0;
        for (int l = at; l < at + lay[i]; l++) comp += cost[l], g += T_GRAD[l], a += T_ACT[l];
        at += lay[i];
        int w = wid[i], in_flight = S - i < T_M ? S - i : T_M;
        double c = comp / w + (i < S - 1 ? 2 * (0.05 + 10.0 / w * 0.001) : 0) +
                   (w > 1 ? (0.1 + g * 0.01 * (w - 1) / w) / T_M : 0);
        if (cap > 0 && 4 * g + a / w * in_flight > cap) c = INFINITY;
        worst = fmax(worst, c);
      }
      if (worst < best) {
        best = worst;
        for (int i = 0; i < S; i++) lay_out[i] = lay[i], wid_out[i] = wid[i];
      }
    }
    int k = 0;
    while (k < 2 * S) {
      int *v = k < S ? &lay[k] : &wid[k - S];
      if (++*v <= (k < S ? L : G)) break;
      *v = 1;
      k++;
    }
    if (k == 2 * S) break;
  }
  return best;
}

static void test_dp_terms_match_brute_force(void **state) {
  (void)state;
  static const double costs[][7] = {{1, 1, 1, 1, 1, 1, 1}, {3, 1, 4, 1, 5, 9, 2}, {0.5, 0.5, 8, 0.5, 0.5, 0.5, 0.5}};
  static const double caps[] = {0, 70, 45, 30};
  PlanReplicationTerms t = {.microbatches = T_M, .grad_bytes = T_GRAD, .act_bytes = T_ACT, .state_per_grad_byte = 4,
                            .boundary_bytes = 10, .transfer = t_transfer, .reduce = t_reduce};
  int checked = 0, infeasible = 0, moved_by_terms = 0, moved_by_memory = 0;
  for (int c = 0; c < 3; c++)
    for (int k = 0; k < 4; k++)
      for (int G = 1; G <= 5; G++)
        for (int S = 1; S <= 4; S++) {
          t.capacity = caps[k];
          int layers[8], width[8], bl[16], bw[16], pl[8], pw[8];
          double dp = plan_replication_dp(costs[c], 7, 0, 0, G, S, 0, &t, layers, width);
          double bf = brute_terms(costs[c], G, S, caps[k], bl, bw);
          if (isinf(bf)) {
            assert_true(isinf(dp));
            infeasible++;
            continue;
          }
          if (fabs(dp - bf) > 1e-12 * bf) print_error("costs %d cap %g G %d S %d: dp %g, brute force %g\n", c, caps[k], G, S, dp, bf);
          assert_true(fabs(dp - bf) <= 1e-12 * bf);
          /* The partition it returns costs what it says, stage by stage. */
          double worst = 0;
          for (int s = 0, at = 0; s < S; s++) {
            double comp = 0;
            for (int l = at; l < at + layers[s]; l++) comp += costs[c][l];
            worst = fmax(worst, plan_replication_stage_cost(&t, 7, s, S, width[s], at, at + layers[s], comp));
            at += layers[s];
          }
          assert_true(fabs(worst - dp) <= 1e-12 * dp);
          /* Against compute alone, and against no memory limit. */
          double plain = plan_replication_dp(costs[c], 7, 0, 0, G, S, 0, NULL, pl, pw);
          for (int s = 0; s < S; s++) moved_by_terms |= caps[k] == 0 && (pl[s] != layers[s] || pw[s] != width[s]);
          PlanReplicationTerms free_mem = t;
          free_mem.capacity = 0;
          double unlimited = plan_replication_dp(costs[c], 7, 0, 0, G, S, 0, &free_mem, pl, pw);
          moved_by_memory |= caps[k] > 0 && dp > unlimited * (1 + 1e-9);
          (void)plain;
          checked++;
        }
  print_message("dynamic program with transfers, reduction and memory = brute force on %d cases (%d with no "
                "partition that fits)\n", checked, infeasible);
  assert_true(infeasible > 0);     /* the tightest limits leave some cases without a plan */
  assert_true(moved_by_terms);     /* transfers and reduction change some optimum */
  assert_true(moved_by_memory);    /* and the memory limit another */
}

static void dense_model(ModelConfig *m, int layers, int vocab) {
  model_config_defaults(m);
  m->vocab_size = vocab;
  m->hidden_size = 1024;
  m->num_layers = layers;
  m->num_heads = 8;
  m->num_kv_heads = 8;
  m->intermediate_size = 4096;
}

static PlanResult simulate_widths(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o, int S,
                                  const int *layers, const int *widths, int mbs, int gbs, PlanConfig *out_cfg) {
  PlanConfig c;
  plan_config_init(&c, 1024, gbs, mbs);
  c.par.pp = S;
  c.num_given_layers = S;
  c.num_stage_widths = S;
  for (int s = 0; s < S; s++) c.layers_per_stage[s] = layers[s], c.stage_width[s] = widths[s];
  Error err = {0, ""};
  int rc = plan_config_finish(&c, m, cl, S, &err);
  PlanResult r;
  if (!rc) rc = plan_simulate(m, cl, o, &c, NULL, NULL, &r, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  if (out_cfg) *out_cfg = c;
  return r;
}

static double pivot_of(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o, const PlanConfig *c) {
  PlanCostModel cm;
  PlanStageCosts sc;
  Error err = {0, ""};
  assert_int_equal(plan_cost_model_init(&cm, m, cl, o, c, NULL, &err), 0);
  assert_int_equal(plan_stage_costs_build(&cm, &sc, &err), 0);
  assert_int_equal(plan_stage_costs_replicate(&cm, &sc, &err), 0);
  int q;
  double t = plan_stage_costs_pivot_latency(&sc, c->microbatches, &q);
  plan_stage_costs_free(&sc);
  return t;
}

static void test_simulator_against_pivot_formula(void **state) {
  (void)state;
  ModelConfig m;
  dense_model(&m, 8, 2);
  ClusterSpec free_cl;
  plan_test_free_cluster(&free_cl, 1, 8);
  PlanOptions o;
  plan_test_free_options(&o);
  /* Equal per-replica stages: 4 layers on 2 replicas, then 2 and 2 on one. */
  static const int layers[] = {4, 2, 2}, widths[] = {2, 1, 1};
  PlanConfig c;
  PlanResult r = simulate_widths(&m, &free_cl, &o, 3, layers, widths, 2, 16, &c);
  double pivot = pivot_of(&m, &free_cl, &o, &c);
  print_message("equal stages, free links: simulated %.6f s, pivot formula %.6f s\n", r.step_time, pivot);
  assert_true(fabs(r.step_time - pivot) <= 1e-6 * pivot);
  /* The replicated stage really is cheaper per micro-batch. */
  assert_true(fabs(r.stage[0].fwd_total - r.stage[1].fwd_total) <= 1e-9 * r.stage[1].fwd_total);
  plan_result_free(&r);
  /* The same widths removed: stage 0 is twice as slow and sets the pace. */
  static const int ones[] = {1, 1, 1};
  PlanResult u = simulate_widths(&m, &free_cl, &o, 3, layers, ones, 2, 16, NULL);
  assert_true(u.step_time > 1.5 * pivot);
  plan_result_free(&u);

  /* On DGX-H100 links with a heavy head: formula and simulator stay close. */
  ClusterSpec h100;
  assert_int_equal(plan_test_load_cluster(&h100, "dgx-h100"), 0);
  PlanOptions real;
  plan_options_default(&real);
  ModelConfig heavy;
  dense_model(&heavy, 8, 131072);
  static const int hl[] = {3, 3, 2}, hw[] = {1, 1, 2};
  r = simulate_widths(&heavy, &h100, &real, 3, hl, hw, 2, 32, &c);
  pivot = pivot_of(&heavy, &h100, &real, &c);
  double rel = fabs(r.step_time - pivot) / r.step_time;
  print_message("DGX-H100, vocab 128k, widths 1 1 2: simulated %.4f s, pivot formula %.4f s (%.1f%% apart)\n",
                r.step_time, pivot, 100 * rel);
  assert_true(rel < 0.05);
  plan_result_free(&r);
  cluster_spec_free(&h100);
}

static void test_search_replicates_the_heavy_stage(void **state) {
  (void)state;
  ClusterSpec h100;
  assert_int_equal(plan_test_load_cluster(&h100, "dgx-h100"), 0);
  PlanOptions o;
  plan_options_default(&o);
  /* 18 GiB devices: the whole model with its 256k vocabulary does not fit
   * on one (plain DP is out), so the pipeline must split it. */
  h100.memory_capacity = 18 * 1073741824.0;
  ModelConfig m;
  dense_model(&m, 6, 262144);
  PlanConfig base;
  plan_config_init(&base, 1024, 32, 4);
  PlanReplicationCandidate cand[6];
  int best;
  Error err = {0, ""};
  int rc = plan_replication_search(&m, &h100, &o, &base, 5, 0, cand, &best, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_true(best >= 0);
  for (int s = 0; s < 5; s++) {
    const PlanReplicationCandidate *c = &cand[s];
    if (isinf(c->step_time)) continue;
    char desc[128];
    int at = 0;
    for (int k = 0; k < c->cfg.par.pp; k++)
      at += snprintf(desc + at, sizeof desc - (size_t)at, "%s%dx%d", k ? " " : "", c->cfg.layers_per_stage[k],
                     c->cfg.stage_width[k]);
    print_message("%d stages [layers x width: %s]: simulated %.4f s%s, pivot %.4f s, dp objective %.2f ms%s\n",
                  s + 1, desc, c->step_time, c->fits ? "" : " (does not fit)", c->pivot_time, 1e3 * c->dp_objective,
                  s == best ? "  <- best" : "");
    /* The pivot formula stays near the simulator on every candidate. */
    assert_true(fabs(c->pivot_time - c->step_time) < 0.03 * c->step_time);
  }
  const PlanReplicationCandidate *b = &cand[best];
  int replicated = 0;
  for (int k = 0; k < b->cfg.par.pp; k++) replicated |= b->cfg.stage_width[k] != b->cfg.stage_width[0];
  assert_true(replicated);
  /* Against every unreplicated DP x PP layout on at most these 5 devices
   * (32 sequences do not split over DP5; the compute min-max partition of
   * each, as plan chooses it). */
  static const int layouts[][2] = {{4, 1}, {2, 2}, {1, 4}, {1, 5}, {2, 1}};
  double uniform_best = INFINITY;
  for (int k = 0; k < 5; k++) {
    PlanConfig c;
    plan_config_init(&c, 1024, 32, 4);
    c.par.dp = layouts[k][0];
    c.par.pp = layouts[k][1];
    assert_int_equal(plan_config_finish(&c, &m, &h100, layouts[k][0] * layouts[k][1], &err), 0);
    PlanResult r;
    assert_int_equal(plan_simulate(&m, &h100, &o, &c, NULL, NULL, &r, &err), 0);
    print_message("unreplicated DP%d PP%d: %.4f s, %.1f GiB%s\n", layouts[k][0], layouts[k][1], r.step_time,
                  r.peak_memory / 1073741824.0, r.fits ? "" : " (does not fit)");
    if (r.fits && r.step_time < uniform_best) uniform_best = r.step_time;
    plan_result_free(&r);
  }
  print_message("replicated best %.4f s vs best unreplicated %.4f s (%.1f%% faster)\n", b->step_time, uniform_best,
                100 * (uniform_best / b->step_time - 1));
  assert_true(b->step_time < uniform_best);
  cluster_spec_free(&h100);
}

/* The reader takes the widths (the trainer runs them) and refuses a list
 * that does not fit the plan, naming the file and the field. */
static void test_plan_file_with_widths(void **state) {
  (void)state;
  static const char *const fmt =
      "{\"format\": \"fivefold.plan\", \"version\": 1, \"model\": \"m\", \"gpus\": %d, \"seq_length\": 64,"
      " \"parallel\": {\"tp\": 1, \"cp\": 1, \"dp\": 1, \"pp\": 2, \"vpp\": 1, \"micro_batch_size\": 2,"
      " \"global_batch_size\": 8, \"schedule\": \"1f1b\", \"layers_per_stage\": [2, 2], \"stage_widths\": %s}}";
  static const struct {
    int gpus;
    const char *widths, *needle;
  } cases[] = {{3, "[2, 1]", NULL}, {4, "[2, 1]", "sum to 3"}, {3, "[2, 1, 1]", "expected 2 widths"},
               {3, "[3, 0]", "integer >= 1"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[600];
    snprintf(text, sizeof text, fmt, cases[i].gpus, cases[i].widths);
    cJSON *j = cJSON_Parse(text);
    PlanChoice pc;
    Error err = {0, ""};
    int rc = plan_file_from_json(j, "rep.json", &pc, &err);
    cJSON_Delete(j);
    if (!cases[i].needle) {
      if (rc) print_error("%s\n", err.msg);
      assert_int_equal(rc, 0);
      assert_int_equal(pc.num_stage_widths, 2);
      assert_int_equal(pc.stage_width[0], 2);
      assert_int_equal(pc.stage_width[1], 1);
      assert_int_equal(pc.gpus, 3);
      continue;
    }
    assert_int_not_equal(rc, 0);
    print_message("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "rep.json"));
    assert_non_null(strstr(err.msg, "parallel.stage_widths"));
    assert_non_null(strstr(err.msg, cases[i].needle));
  }
}

/* What the simulator refuses with stage widths, each with its reason: the
 * same configurations `train` refuses (trainer_replicated.c), so that no
 * priced plan is one the runtime will not run. */
static void test_simulator_refusals(void **state) {
  (void)state;
  ClusterSpec h100;
  assert_int_equal(plan_test_load_cluster(&h100, "dgx-h100"), 0);
  ModelConfig m;
  dense_model(&m, 4, 1024);
  PlanOptions o;
  plan_options_default(&o);
  static const struct {
    int tp, vpp, pp, width1, warmup, small_cluster;
    SchedScheduleKind schedule;
    const char *needle;
  } cases[] = {
      {1, 1, 2, 1, 0, 0, SCHED_SCHEDULE_1F1B, NULL},
      {1, 1, 2, 1, 0, 0, SCHED_SCHEDULE_GPIPE, NULL},
      {1, 1, 2, 1, 0, 0, SCHED_SCHEDULE_ZB_H1, "schedule zb-h1: a replicated pipeline runs the gpipe or 1f1b order"},
      {1, 1, 2, 1, 1, 0, SCHED_SCHEDULE_1F1B, "warm-up depths: a replicated pipeline runs its schedule's own"},
      {2, 1, 2, 1, 0, 0, SCHED_SCHEDULE_1F1B, "tp, cp, dp, ep, etp and vpp must be 1 (got tp 2"},
      {1, 2, 2, 1, 0, 0, SCHED_SCHEDULE_INTERLEAVED, "vpp must be 1"},
      {1, 1, 2, 0, 0, 0, SCHED_SCHEDULE_1F1B, "stage 1 has width 0"},
      {1, 1, 2, 1, 0, 1, SCHED_SCHEDULE_1F1B, "needs 3 devices, cluster"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    PlanConfig c;
    plan_config_init(&c, 1024, 8, 2);
    c.par.pp = cases[i].pp, c.par.tp = cases[i].tp, c.par.vpp = cases[i].vpp;
    c.schedule = cases[i].schedule;
    c.schedule_given = 1;
    c.num_stage_widths = 2;
    c.stage_width[0] = 2, c.stage_width[1] = cases[i].width1;
    if (cases[i].warmup) c.warmup_set = 2, c.warmup[0] = 1, c.warmup[1] = 0;
    ClusterSpec cl = h100;
    if (cases[i].small_cluster) cl.nodes = 1, cl.devices_per_node = 2;
    Error err = {0, ""};
    int grid = cases[i].tp * cases[i].pp;
    PlanResult r;
    int rc = plan_config_finish(&c, &m, &cl, grid, &err);
    if (!rc) rc = plan_simulate(&m, &cl, &o, &c, NULL, NULL, &r, &err);
    if (!cases[i].needle) {
      if (rc) print_error("%s\n", err.msg);
      assert_int_equal(rc, 0);
      plan_result_free(&r);
      continue;
    }
    print_message("%s\n", err.msg);
    assert_int_not_equal(rc, 0);
    if (!strstr(err.msg, cases[i].needle)) print_error("expected '%s'\n", cases[i].needle);
    assert_non_null(strstr(err.msg, cases[i].needle));
  }
  cluster_spec_free(&h100);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dp_matches_brute_force),
      cmocka_unit_test(test_simulator_against_pivot_formula),
      cmocka_unit_test(test_search_replicates_the_heavy_stage),
      cmocka_unit_test(test_dp_terms_match_brute_force),
      cmocka_unit_test(test_plan_file_with_widths),
      cmocka_unit_test(test_simulator_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
