/* The zero-bubble H1 order and per-rank warm-up depths (sched/builders.h,
 * schedule_zb.c):
 *  - zb-h1 programs for several (pp, m) pass the program checker
 *    (deadlock-free under blocking sends, every W once after its B), keep
 *    at most 1F1B's micro-batches in flight on every rank, and at unit costs
 *    (F = B = W = 1, free transfers) take 3m + 2(p-1) against 1F1B's
 *    3m + 3(p-1); with p - 1 more warm-up forwards on every rank they reach
 *    the published ZB-H1 figure 3m + (p-1);
 *  - a program that skips one W, or runs it before its B, or reduces the
 *    chunk's gradient before its last W, is refused;
 *  - warm-up depths: the 1F1B order's depth follows SchedConfig.warmup and
 *    sets the in-flight peak, bad depths (too few, negative, growing along
 *    the pipeline, on gpipe) are refused, and the JSON form keeps depths and
 *    the split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "sched/builders.h"
#include "sched/check.h"
#include "sched/evaluate.h"

static SchedConfig cfg_of(SchedScheduleKind kind, int p, int m) {
  SchedConfig c;
  memset(&c, 0, sizeof c);
  c.schedule = kind;
  c.pp = p;
  c.vpp = 1;
  c.microbatches = m;
  return c;
}

static SchedProgram *build_ok(const SchedConfig *c) {
  SchedProgram *prog = NULL;
  Error err = {0, ""};
  int rc = sched_build(c, &prog, &err);
  if (rc) fail_msg("build: %s", err.msg);
  return prog;
}

static double unit_makespan(const SchedProgram *prog) {
  SchedUnitCosts costs = sched_unit_costs_default();
  costs.split_backward = prog->config.split_backward;
  SchedEvalOptions o = sched_unit_eval_options(&costs, SCHED_SEND_EAGER);
  SchedEval ev;
  Error err = {0, ""};
  assert_int_equal(sched_evaluate(prog, &o, &ev, &err), ERR_OK);
  double t = ev.makespan;
  sched_eval_free(&ev);
  return t;
}

static void test_zb_programs(void **state) {
  (void)state;
  static const int cases[][2] = {{2, 4}, {2, 8}, {3, 6}, {4, 4}, {4, 8}, {4, 2}, {1, 3}, {5, 12}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int p = cases[k][0], m = cases[k][1];
    SchedConfig zc = cfg_of(SCHED_SCHEDULE_ZB_H1, p, m), fc = cfg_of(SCHED_SCHEDULE_1F1B, p, m);
    SchedProgram *zb = build_ok(&zc), *one = build_ok(&fc);
    Error err = {0, ""};
    if (sched_check(zb, &err)) fail_msg("zb-h1 pp %d m %d: %s", p, m, err.msg);
    assert_true(zb->config.split_backward);
    int weights = 0;
    for (int i = 0; i < zb->num_actions; i++) weights += zb->actions[i].kind == SCHED_BWD_WEIGHT;
    assert_int_equal(weights, p * m);
    for (int r = 0; r < p; r++) {
      int bound = p - r < m ? p - r : m;
      assert_int_equal(sched_rank_peak_in_flight(one, r), bound);
      assert_true(sched_rank_peak_in_flight(zb, r) <= bound);
    }
    if (m >= p && p > 1) {
      assert_true(unit_makespan(one) == 3.0 * m + 3.0 * (p - 1));
      assert_true(unit_makespan(zb) == 3.0 * m + 2.0 * (p - 1));
      /* p - 1 more warm-up forwards per rank buy back the rest. */
      SchedConfig deep = zc;
      deep.warmup_set = p;
      for (int r = 0; r < p; r++) deep.warmup[r] = 2 * (p - 1) - r;
      SchedProgram *dz = build_ok(&deep);
      if (sched_check(dz, &err)) fail_msg("zb-h1 deep pp %d m %d: %s", p, m, err.msg);
      assert_true(unit_makespan(dz) == 3.0 * m + (p - 1));
      sched_program_free(dz);
    }
    sched_program_free(zb);
    sched_program_free(one);
  }
}

static void expect_refused(const char *text, const char *needle) {
  SchedConfig c = cfg_of(SCHED_SCHEDULE_CUSTOM, 2, 2);
  SchedProgram *prog = NULL;
  Error err = {0, ""};
  assert_int_equal(sched_program_parse_text(&c, text, &prog, &err), ERR_OK);
  assert_true(prog->config.split_backward);
  int rc = sched_check(prog, &err);
  if (rc != ERR_CONFIG || !strstr(err.msg, needle)) fail_msg("expected '%s' in: %s", needle, rc ? err.msg : "(passed)");
  sched_program_free(prog);
}

static void test_broken_splits_refused(void **state) {
  (void)state;
  const char *good = "F0 SA0>1 RG0<1 F1 SA1>1 B0 W0 RG1<1 B1 W1 AR0 OPT\n"
                     "RA0<0 F0 B0 SG0>0 RA1<0 F1 B1 SG1>0 W0 W1 AR0 OPT";
  SchedConfig c = cfg_of(SCHED_SCHEDULE_CUSTOM, 2, 2);
  SchedProgram *prog = NULL;
  Error err = {0, ""};
  assert_int_equal(sched_program_parse_text(&c, good, &prog, &err), ERR_OK);
  if (sched_check(prog, &err)) fail_msg("the good split program: %s", err.msg);
  sched_program_free(prog);
  expect_refused("F0 SA0>1 RG0<1 F1 SA1>1 B0 RG1<1 B1 W1 AR0 OPT\n"
                 "RA0<0 F0 B0 SG0>0 RA1<0 F1 B1 SG1>0 W0 W1 AR0 OPT",
                 "never runs the weight gradient (BWD_WEIGHT) of mb 0");
  expect_refused("F0 SA0>1 RG0<1 F1 SA1>1 W0 B0 RG1<1 B1 W1 AR0 OPT\n"
                 "RA0<0 F0 B0 SG0>0 RA1<0 F1 B1 SG1>0 W0 W1 AR0 OPT",
                 "does not follow its backward");
  expect_refused("F0 SA0>1 RG0<1 F1 SA1>1 B0 W0 RG1<1 B1 AR0 W1 OPT\n"
                 "RA0<0 F0 B0 SG0>0 RA1<0 F1 B1 SG1>0 W0 W1 AR0 OPT",
                 "does not follow the chunk's last backward");
  /* The same order built by the real builder, then one W dropped. */
  SchedConfig zc = cfg_of(SCHED_SCHEDULE_ZB_H1, 3, 4);
  SchedProgram *zb = build_ok(&zc);
  SchedAction *lists[3];
  int counts[3];
  for (int r = 0; r < 3; r++) {
    int n;
    const SchedAction *l = sched_program_rank_actions(zb, r, &n);
    lists[r] = malloc((size_t)n * sizeof *lists[r]);
    counts[r] = 0;
    int dropped = 0;
    for (int i = 0; i < n; i++) {
      if (r == 1 && !dropped && l[i].kind == SCHED_BWD_WEIGHT && l[i].microbatch == 2) {
        dropped = 1;
        continue;
      }
      lists[r][counts[r]] = l[i];
      lists[r][counts[r]].deps = NULL;
      lists[r][counts[r]++].num_deps = 0;
    }
  }
  SchedProgram *broken = NULL;
  assert_int_equal(sched_program_assemble(&zb->config, lists, counts, &broken, &err), ERR_OK);
  assert_int_equal(sched_check(broken, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "rank 1 never runs the weight gradient (BWD_WEIGHT) of mb 2"));
  for (int r = 0; r < 3; r++) free(lists[r]);
  sched_program_free(broken);
  sched_program_free(zb);
}

static void test_warmup_depths(void **state) {
  (void)state;
  SchedConfig c = cfg_of(SCHED_SCHEDULE_1F1B, 3, 6);
  c.warmup_set = 3;
  c.warmup[0] = 9;
  c.warmup[1] = 1;
  c.warmup[2] = 0;
  assert_int_equal(sched_warmup_forwards(&c, 0), 6);
  assert_int_equal(sched_warmup_forwards(&c, 1), 1);
  assert_int_equal(sched_warmup_forwards(&c, 2), 0);
  SchedProgram *prog = build_ok(&c);
  Error err = {0, ""};
  if (sched_check(prog, &err)) fail_msg("1f1b with warm-up depths: %s", err.msg);
  assert_int_equal(sched_rank_peak_in_flight(prog, 0), 6);
  assert_int_equal(sched_rank_peak_in_flight(prog, 1), 2);
  assert_int_equal(sched_rank_peak_in_flight(prog, 2), 1);
  /* JSON keeps the depths; a zb-h1 program keeps its split. */
  cJSON *json = sched_program_to_json(prog);
  SchedProgram *back = NULL;
  assert_int_equal(sched_program_from_json(json, &back, &err), ERR_OK);
  assert_int_equal(back->config.warmup_set, 3);
  assert_int_equal(back->config.warmup[0], 9);
  assert_int_equal(back->config.warmup[1], 1);
  cJSON_Delete(json);
  sched_program_free(back);
  sched_program_free(prog);
  SchedConfig zc = cfg_of(SCHED_SCHEDULE_ZB_H1, 2, 3);
  prog = build_ok(&zc);
  json = sched_program_to_json(prog);
  assert_int_equal(sched_program_from_json(json, &back, &err), ERR_OK);
  assert_true(back->config.split_backward);
  if (sched_check(back, &err)) fail_msg("zb-h1 from JSON: %s", err.msg);
  cJSON_Delete(json);
  sched_program_free(back);
  sched_program_free(prog);
  /* Refusals. */
  SchedConfig bad = cfg_of(SCHED_SCHEDULE_1F1B, 3, 6);
  bad.warmup_set = 2;
  assert_int_equal(sched_config_validate(&bad, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "2 warm-up depths given for pp 3"));
  bad.warmup_set = 3;
  bad.warmup[0] = 4;
  bad.warmup[1] = 0;
  bad.warmup[2] = 9; /* rank 1's first backward would wait for forwards it never sent */
  assert_int_equal(sched_config_validate(&bad, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "must not grow along the pipeline (rank 1 runs 0"));
  bad.warmup[2] = 0;
  bad.warmup[1] = -1;
  assert_int_equal(sched_config_validate(&bad, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "warm-up depth of rank 1 must be >= 0"));
  bad = cfg_of(SCHED_SCHEDULE_GPIPE, 2, 4);
  bad.warmup_set = 2;
  assert_int_equal(sched_config_validate(&bad, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "gpipe has no warm-up depth"));
  bad = cfg_of(SCHED_SCHEDULE_ZB_H1, 2, 4);
  bad.vpp = 2;
  assert_int_equal(sched_config_validate(&bad, &err), ERR_CONFIG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zb_programs),
      cmocka_unit_test(test_broken_splits_refused),
      cmocka_unit_test(test_warmup_depths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
