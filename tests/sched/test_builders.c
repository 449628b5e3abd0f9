/* Builders: every schedule over a grid of (pp, vpp, micro-batches) passes the
 * checker; warm-up counts follow the published formulas; with unit costs
 * (forward 1, backward 2, free transfers) 1F1B and GPipe have exactly the
 * textbook bubble (p-1)/(m+p-1) and interleaving with v chunks cuts the
 * bubble time by exactly v; invalid configurations and compute orders are
 * rejected with messages that say what to change. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/builders.h"
#include "sched/check.h"
#include "sched/evaluate.h"

static SchedConfig make_cfg(SchedScheduleKind kind, int p, int v, int m) {
  SchedConfig c;
  memset(&c, 0, sizeof c);
  c.schedule = kind;
  c.pp = p;
  c.vpp = v;
  c.microbatches = m;
  return c;
}

static SchedProgram *build_ok(const SchedConfig *c) {
  SchedProgram *prog = NULL;
  Error err = {0, ""};
  int rc = sched_build(c, &prog, &err);
  if (rc) print_error("build %s p%d v%d m%d: %s\n", sched_schedule_name(c->schedule), c->pp, c->vpp, c->microbatches, err.msg);
  assert_int_equal(rc, ERR_OK);
  return prog;
}

/* Evaluates with forward f and backward b per chunk, free transfers. */
static void eval_unit(const SchedProgram *prog, double f, double b, SchedSendMode mode, SchedEval *ev) {
  SchedUnitCosts costs = sched_unit_costs_default();
  costs.fwd = f;
  costs.bwd = b;
  SchedEvalOptions o = sched_unit_eval_options(&costs, mode);
  Error err = {0, ""};
  int rc = sched_evaluate(prog, &o, ev, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, ERR_OK);
}

static void test_grid_passes_checker(void **state) {
  (void)state;
  static const SchedScheduleKind kinds[] = {SCHED_SCHEDULE_NONE, SCHED_SCHEDULE_GPIPE, SCHED_SCHEDULE_1F1B,
                                            SCHED_SCHEDULE_INTERLEAVED};
  static const int ps[] = {1, 2, 3, 4, 5, 8}, vs[] = {1, 2, 3, 4}, ms[] = {1, 2, 3, 4, 5, 8, 12, 16};
  int built = 0;
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (size_t a = 0; a < sizeof ps / sizeof ps[0]; a++)
      for (size_t b = 0; b < sizeof vs / sizeof vs[0]; b++)
        for (size_t c = 0; c < sizeof ms / sizeof ms[0]; c++) {
          SchedConfig cfg = make_cfg(kinds[k], ps[a], vs[b], ms[c]);
          if (sched_config_validate(&cfg, NULL)) continue;
          SchedProgram *prog = build_ok(&cfg);
          Error err = {0, ""};
          int rc = sched_check(prog, &err);
          if (rc) print_error("%s\n", err.msg);
          assert_int_equal(rc, ERR_OK);
          /* Every cross-rank stage boundary carries one activation and one
           * gradient per micro-batch. */
          int S = cfg.pp * cfg.vpp, sends = 0, recvs = 0, reduces = 0, optims = 0;
          for (int i = 0; i < prog->num_actions; i++) {
            sends += sched_kind_is_send(prog->actions[i].kind);
            recvs += sched_kind_is_recv(prog->actions[i].kind);
            reduces += prog->actions[i].kind == SCHED_GRAD_REDUCE;
            optims += prog->actions[i].kind == SCHED_OPTIM;
          }
          int crossings = cfg.pp > 1 ? S - 1 : 0;
          assert_int_equal(sends, 2 * cfg.microbatches * crossings);
          assert_int_equal(recvs, sends);
          assert_int_equal(reduces, cfg.pp * cfg.vpp);
          assert_int_equal(optims, cfg.pp);
          /* The streams-aware runs complete too, buffered and blocking. */
          SchedEval ev;
          eval_unit(prog, 1, 2, SCHED_SEND_EAGER, &ev);
          sched_eval_free(&ev);
          eval_unit(prog, 1, 2, SCHED_SEND_RENDEZVOUS, &ev);
          sched_eval_free(&ev);
          sched_program_free(prog);
          built++;
        }
  assert_true(built > 150);
}

/* The placement is safe whatever costs it was timed with. */
static void test_other_order_costs_pass_checker(void **state) {
  (void)state;
  static const double costs[][2] = {{1, 1}, {1, 3}, {2, 1}, {0.7, 1.9}};
  for (size_t i = 0; i < sizeof costs / sizeof costs[0]; i++) {
    SchedConfig cfgs[] = {make_cfg(SCHED_SCHEDULE_1F1B, 4, 1, 7), make_cfg(SCHED_SCHEDULE_GPIPE, 3, 1, 5),
                          make_cfg(SCHED_SCHEDULE_INTERLEAVED, 4, 3, 8), make_cfg(SCHED_SCHEDULE_INTERLEAVED, 2, 2, 6)};
    for (size_t j = 0; j < sizeof cfgs / sizeof cfgs[0]; j++) {
      cfgs[j].order_fwd_cost = costs[i][0];
      cfgs[j].order_bwd_cost = costs[i][1];
      SchedProgram *prog = build_ok(&cfgs[j]);
      Error err = {0, ""};
      int rc = sched_check(prog, &err);
      if (rc) print_error("%s\n", err.msg);
      assert_int_equal(rc, ERR_OK);
      SchedEval ev;
      eval_unit(prog, costs[i][0], costs[i][1], SCHED_SEND_EAGER, &ev);
      sched_eval_free(&ev);
      sched_program_free(prog);
    }
  }
}

/* Forward passes before a rank's first backward. */
static int forwards_before_first_backward(const SchedProgram *prog, int rank) {
  int n, count = 0;
  const SchedAction *list = sched_program_rank_actions(prog, rank, &n);
  for (int i = 0; i < n && list[i].kind != SCHED_BWD; i++) count += list[i].kind == SCHED_FWD;
  return count;
}

static void test_1f1b_warmup(void **state) {
  (void)state;
  for (int p = 1; p <= 8; p++)
    for (int m = 1; m <= 12; m++) {
      SchedConfig cfg = make_cfg(SCHED_SCHEDULE_1F1B, p, 1, m);
      SchedProgram *prog = build_ok(&cfg);
      for (int r = 0; r < p; r++) {
        int w = p - r - 1 < m ? p - r - 1 : m;
        assert_int_equal(sched_warmup_forwards(&cfg, r), w);
        /* Warm-up forwards, then the steady phase opens with one more forward. */
        assert_int_equal(forwards_before_first_backward(prog, r), w < m ? w + 1 : m);
      }
      sched_program_free(prog);
    }
}

static void test_interleaved_warmup(void **state) {
  (void)state;
  for (int p = 1; p <= 6; p++)
    for (int v = 2; v <= 4; v++)
      for (int m = p; m <= 3 * p; m += p) {
        SchedConfig cfg = make_cfg(SCHED_SCHEDULE_INTERLEAVED, p, v, m);
        SchedProgram *prog = build_ok(&cfg);
        for (int r = 0; r < p; r++) {
          int w = 2 * (p - r - 1) + (v - 1) * p, total = m * v;
          if (w > total) w = total;
          assert_int_equal(sched_warmup_forwards(&cfg, r), w);
          assert_int_equal(forwards_before_first_backward(prog, r), w < total ? w + 1 : total);
        }
        sched_program_free(prog);
      }
  /* A capped case: rank 0 of pp 4, vpp 2, m 4 would warm up 10 > 8 chunks. */
  SchedConfig cfg = make_cfg(SCHED_SCHEDULE_INTERLEAVED, 4, 2, 4);
  assert_int_equal(sched_warmup_forwards(&cfg, 0), 8);
  assert_int_equal(sched_warmup_forwards(&cfg, 3), 4);
}

/* Megatron's interleaved order: groups of pp micro-batches, chunk 0 then 1
 * forward; backward visits the chunks in reverse. */
static void test_interleaved_chunk_order(void **state) {
  (void)state;
  SchedConfig cfg = make_cfg(SCHED_SCHEDULE_INTERLEAVED, 2, 2, 4);
  SchedComputeOrder order;
  assert_int_equal(sched_compute_order(&cfg, &order, NULL), ERR_OK);
  /* Rank 1: warm-up (v-1)p = 2 forwards, then 1F1B. */
  static const int expect[][3] = {{SCHED_FWD, 0, 0}, {SCHED_FWD, 1, 0}, {SCHED_FWD, 0, 1}, {SCHED_BWD, 0, 1},
                                  {SCHED_FWD, 1, 1}, {SCHED_BWD, 1, 1}, {SCHED_FWD, 2, 0}, {SCHED_BWD, 0, 0},
                                  {SCHED_FWD, 3, 0}, {SCHED_BWD, 1, 0}, {SCHED_FWD, 2, 1}, {SCHED_BWD, 2, 1},
                                  {SCHED_FWD, 3, 1}, {SCHED_BWD, 3, 1}, {SCHED_BWD, 2, 0}, {SCHED_BWD, 3, 0}};
  assert_int_equal(order.counts[1], 16);
  for (int i = 0; i < 16; i++) {
    assert_int_equal(order.items[1][i].kind, expect[i][0]);
    assert_int_equal(order.items[1][i].microbatch, expect[i][1]);
    assert_int_equal(order.items[1][i].chunk, expect[i][2]);
  }
  sched_compute_order_free(&order);
}

static double total_busy(const SchedEval *ev) {
  double b = 0;
  for (int r = 0; r < ev->num_ranks; r++) b += ev->busy[r];
  return b;
}

static void test_textbook_bubble(void **state) {
  (void)state;
  for (int p = 1; p <= 8; p++)
    for (int m = 1; m <= 16; m++) {
      SchedScheduleKind kinds[] = {SCHED_SCHEDULE_1F1B, SCHED_SCHEDULE_GPIPE};
      for (int k = 0; k < 2; k++) {
        SchedConfig cfg = make_cfg(kinds[k], p, 1, m);
        SchedProgram *prog = build_ok(&cfg);
        SchedEval ev;
        eval_unit(prog, 1, 2, SCHED_SEND_EAGER, &ev);
        /* Integer costs: the max-plus arithmetic is exact. */
        assert_true(ev.makespan == 3.0 * (m + p - 1));
        assert_true(total_busy(&ev) == 3.0 * m * p);
        assert_true(fabs(ev.bubble_fraction - (double)(p - 1) / (m + p - 1)) < 1e-12);
        for (int r = 0; r < p; r++) assert_true(sched_eval_rank_idle(&ev, r) == 3.0 * (p - 1));
        sched_eval_free(&ev);
        sched_program_free(prog);
      }
    }
  /* No pipelining: no bubble at all. */
  SchedConfig none = make_cfg(SCHED_SCHEDULE_NONE, 1, 1, 5);
  SchedProgram *prog = build_ok(&none);
  SchedEval ev;
  eval_unit(prog, 1, 2, SCHED_SEND_EAGER, &ev);
  assert_true(ev.makespan == 15.0);
  assert_true(ev.bubble_fraction == 0.0);
  sched_eval_free(&ev);
  sched_program_free(prog);
}

/* Same model, same work: v chunks of cost (1, 2) against one stage of cost
 * (v, 2v). Interleaving leaves 1/v of the idle time. */
static void test_interleaving_divides_bubble_by_v(void **state) {
  (void)state;
  for (int p = 2; p <= 8; p += 2)
    for (int v = 2; v <= 4; v++)
      for (int m = p; m <= 4 * p; m += p) {
        SchedConfig ci = make_cfg(SCHED_SCHEDULE_INTERLEAVED, p, v, m), c1 = make_cfg(SCHED_SCHEDULE_1F1B, p, 1, m);
        SchedProgram *pi = build_ok(&ci), *p1 = build_ok(&c1);
        SchedEval ei, e1;
        eval_unit(pi, 1, 2, SCHED_SEND_EAGER, &ei);
        eval_unit(p1, v, 2 * v, SCHED_SEND_EAGER, &e1);
        assert_true(total_busy(&ei) == total_busy(&e1));
        for (int r = 0; r < p; r++) {
          assert_true(sched_eval_rank_idle(&ei, r) == 3.0 * (p - 1));
          assert_true(sched_eval_rank_idle(&e1, r) == v * sched_eval_rank_idle(&ei, r));
        }
        assert_true(fabs(ei.bubble_fraction - (double)(p - 1) / ((double)v * m + p - 1)) < 1e-12);
        assert_true(ei.bubble_fraction < e1.bubble_fraction);
        sched_eval_free(&ei);
        sched_eval_free(&e1);
        sched_program_free(pi);
        sched_program_free(p1);
      }
}

static void expect_config_error(SchedConfig cfg, const char *needle1, const char *needle2) {
  Error err = {0, ""};
  SchedProgram *prog = NULL;
  assert_int_equal(sched_build(&cfg, &prog, &err), ERR_CONFIG);
  assert_null(prog);
  if (!strstr(err.msg, needle1) || (needle2 && !strstr(err.msg, needle2))) print_error("message: %s\n", err.msg);
  assert_non_null(strstr(err.msg, needle1));
  if (needle2) assert_non_null(strstr(err.msg, needle2));
}

static void test_invalid_configs(void **state) {
  (void)state;
  expect_config_error(make_cfg(SCHED_SCHEDULE_INTERLEAVED, 4, 2, 6), "multiple of pp", "6 is not a multiple of 4");
  expect_config_error(make_cfg(SCHED_SCHEDULE_INTERLEAVED, 4, 2, 3), "use 4", NULL);
  expect_config_error(make_cfg(SCHED_SCHEDULE_INTERLEAVED, 4, 1, 8), "vpp >= 2", NULL);
  expect_config_error(make_cfg(SCHED_SCHEDULE_1F1B, 4, 2, 8), "vpp must be 1", "interleaved");
  expect_config_error(make_cfg(SCHED_SCHEDULE_GPIPE, 2, 3, 8), "vpp must be 1", NULL);
  expect_config_error(make_cfg(SCHED_SCHEDULE_NONE, 2, 1, 8), "pp = 1", NULL);
  expect_config_error(make_cfg(SCHED_SCHEDULE_1F1B, 4, 1, 0), "microbatches must be >= 1", NULL);
  expect_config_error(make_cfg(SCHED_SCHEDULE_1F1B, 0, 1, 4), "pp", NULL);
  expect_config_error(make_cfg(SCHED_SCHEDULE_CUSTOM, 2, 1, 4), "cannot be built", NULL);
  SchedConfig bad = make_cfg(SCHED_SCHEDULE_1F1B, 4, 1, 8);
  assert_int_equal(sched_warmup_forwards(&bad, 4), -1);
}

/* Orders that are not a training iteration, or cannot run, are refused. */
static void test_lower_rejects_bad_orders(void **state) {
  (void)state;
  SchedConfig cfg = make_cfg(SCHED_SCHEDULE_CUSTOM, 2, 1, 2);
  SchedComputeItem r0[] = {{SCHED_FWD, 0, 0}, {SCHED_BWD, 0, 0}, {SCHED_FWD, 1, 0}, {SCHED_BWD, 1, 0}};
  SchedComputeItem r1[] = {{SCHED_FWD, 1, 0}, {SCHED_BWD, 1, 0}, {SCHED_FWD, 0, 0}, {SCHED_BWD, 0, 0}};
  SchedComputeItem *items[] = {r0, r1};
  int counts[] = {4, 4};
  SchedComputeOrder order = {2, items, counts};
  SchedProgram *prog = NULL;
  Error err = {0, ""};
  /* Rank 0 needs mb 0's gradient before it forwards mb 1; rank 1 wants mb 1 first. */
  assert_int_equal(sched_lower(&cfg, &order, &prog, &err), ERR_CONFIG);
  assert_null(prog);
  assert_non_null(strstr(err.msg, "can never run"));
  assert_non_null(strstr(err.msg, "rank 0 #2 FWD mb 1"));
  assert_non_null(strstr(err.msg, "rank 1 #0 FWD mb 1"));

  counts[1] = 3; /* rank 1 never runs mb 0's backward */
  assert_int_equal(sched_lower(&cfg, &order, &prog, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "rank 1 never runs the backward of mb 0 chunk 0"));

  counts[1] = 4;
  r1[2].microbatch = 1; /* mb 1 forward twice */
  assert_int_equal(sched_lower(&cfg, &order, &prog, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "twice"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grid_passes_checker),
      cmocka_unit_test(test_other_order_costs_pass_checker),
      cmocka_unit_test(test_1f1b_warmup),
      cmocka_unit_test(test_interleaved_warmup),
      cmocka_unit_test(test_interleaved_chunk_order),
      cmocka_unit_test(test_textbook_bubble),
      cmocka_unit_test(test_interleaving_divides_bubble_by_v),
      cmocka_unit_test(test_invalid_configs),
      cmocka_unit_test(test_lower_rejects_bad_orders),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
