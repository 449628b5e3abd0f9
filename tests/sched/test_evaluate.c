/* The max-plus evaluator: hand-computed timelines for buffered and blocking
 * sends with transfer time, the collective stream overlapping backward work
 * (and not overlapping when run serially), the defining equation checked
 * action by action on built programs with uneven costs, and cost errors. */
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
#include "sched/evaluate.h"

static SchedProgram *parse(int p, int v, int m, const char *text) {
  SchedConfig c;
  memset(&c, 0, sizeof c);
  c.schedule = SCHED_SCHEDULE_CUSTOM;
  c.pp = p;
  c.vpp = v;
  c.microbatches = m;
  SchedProgram *prog = NULL;
  Error err = {0, ""};
  int rc = sched_program_parse_text(&c, text, &prog, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, ERR_OK);
  return prog;
}

static double at(const SchedProgram *prog, const SchedEval *ev, int rank, int index, int finish) {
  int id = sched_action_id(prog, rank, index);
  return finish ? ev->finish[id] : ev->start[id];
}

static const char *kTwoStages = "F0 SA0 RG0 B0 AR0 OPT\nRA0 F0 B0 SG0 AR0 OPT";

static SchedUnitCosts costs_a(void) {
  SchedUnitCosts c = sched_unit_costs_default();
  c.transfer = 0.5;
  c.grad_reduce = 3;
  c.optim = 1;
  return c;
}

static void test_buffered_timeline(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 1, 1, kTwoStages);
  SchedUnitCosts c = costs_a();
  SchedEvalOptions o = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate(prog, &o, &ev, NULL), ERR_OK);
  /* rank 1 */
  assert_true(at(prog, &ev, 1, 0, 0) == 1.5); /* RA0: SA0 at 1 + transfer */
  assert_true(at(prog, &ev, 1, 1, 0) == 1.5 && at(prog, &ev, 1, 1, 1) == 2.5);
  assert_true(at(prog, &ev, 1, 2, 1) == 4.5);
  assert_true(at(prog, &ev, 1, 3, 1) == 4.5); /* SG0, buffered */
  assert_true(at(prog, &ev, 1, 4, 0) == 4.5 && at(prog, &ev, 1, 4, 1) == 7.5);
  assert_true(at(prog, &ev, 1, 5, 0) == 7.5 && at(prog, &ev, 1, 5, 1) == 8.5);
  /* rank 0 */
  assert_true(at(prog, &ev, 0, 1, 1) == 1.0); /* SA0 does not wait */
  assert_true(at(prog, &ev, 0, 2, 0) == 5.0); /* RG0: 4.5 + 0.5 */
  assert_true(at(prog, &ev, 0, 3, 0) == 5.0 && at(prog, &ev, 0, 3, 1) == 7.0);
  assert_true(at(prog, &ev, 0, 5, 1) == 11.0);
  assert_true(ev.makespan == 11.0);
  assert_true(ev.busy[0] == 4.0 && ev.busy[1] == 4.0);
  assert_true(ev.comm[0] == 3.0 && ev.comm[1] == 3.0);
  assert_true(ev.rank_finish[1] == 8.5);
  assert_true(fabs(ev.bubble_fraction - (1.0 - 8.0 / 22.0)) < 1e-15);
  assert_false(ev.deadlocked);
  sched_eval_free(&ev);
  sched_program_free(prog);
}

static void test_blocking_timeline(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 1, 1, kTwoStages);
  SchedUnitCosts c = costs_a();
  SchedEvalOptions o = sched_unit_eval_options(&c, SCHED_SEND_RENDEZVOUS);
  SchedEval ev;
  assert_int_equal(sched_evaluate(prog, &o, &ev, NULL), ERR_OK);
  /* SA0 and RA0 meet at 1 (rank 1 posted its receive at 0) and finish
   * together after the transfer. */
  assert_true(at(prog, &ev, 0, 1, 0) == 1.0 && at(prog, &ev, 0, 1, 1) == 1.5);
  assert_true(at(prog, &ev, 1, 0, 0) == 1.0 && at(prog, &ev, 1, 0, 1) == 1.5);
  /* SG0 blocks rank 1 until its transfer is done. */
  assert_true(at(prog, &ev, 1, 3, 0) == 4.5 && at(prog, &ev, 1, 3, 1) == 5.0);
  assert_true(at(prog, &ev, 0, 2, 1) == 5.0);
  /* Rank 1's reduction is issued once the blocking SG0 returns. */
  assert_true(at(prog, &ev, 1, 4, 0) == 5.0 && at(prog, &ev, 1, 5, 0) == 8.0);
  assert_true(ev.makespan == 11.0);
  sched_eval_free(&ev);
  sched_program_free(prog);
}

/* One rank, two chunks: the reduction of chunk 1 overlaps the backward of
 * chunk 0 on the collective stream; run serially it cannot. */
static void test_collective_overlap(void **state) {
  (void)state;
  SchedConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.schedule = SCHED_SCHEDULE_INTERLEAVED;
  cfg.pp = 1;
  cfg.vpp = 2;
  cfg.microbatches = 1;
  SchedProgram *prog = NULL;
  assert_int_equal(sched_build(&cfg, &prog, NULL), ERR_OK);
  SchedProgram *expect = parse(1, 2, 1, "F0.0 F0.1 B0.1 AR1 B0.0 AR0 OPT");
  assert_int_equal(prog->num_actions, expect->num_actions);
  for (int i = 0; i < prog->num_actions; i++) assert_int_equal(prog->actions[i].kind, expect->actions[i].kind);
  sched_program_free(expect);
  SchedUnitCosts c = costs_a();
  SchedEvalOptions o = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate(prog, &o, &ev, NULL), ERR_OK);
  assert_true(at(prog, &ev, 0, 3, 0) == 4.0 && at(prog, &ev, 0, 3, 1) == 7.0); /* AR1 */
  assert_true(at(prog, &ev, 0, 4, 0) == 4.0 && at(prog, &ev, 0, 4, 1) == 6.0); /* B0.0 alongside */
  assert_true(at(prog, &ev, 0, 5, 0) == 7.0);                                  /* AR0 after AR1 */
  assert_true(ev.makespan == 11.0);
  sched_eval_free(&ev);
  o.serial = 1;
  assert_int_equal(sched_evaluate(prog, &o, &ev, NULL), ERR_OK);
  assert_true(ev.makespan == 13.0);
  sched_eval_free(&ev);
  sched_program_free(prog);
}

/* Deterministic uneven costs so every max in the equation matters. */
static double uneven_cost(const SchedAction *a, void *ctx) {
  (void)ctx;
  double base = a->kind == SCHED_FWD ? 1.0 : a->kind == SCHED_BWD ? 2.0 : a->kind == SCHED_GRAD_REDUCE ? 1.5 : 0.25;
  return base + 0.125 * ((a->id * 7 + a->rank) % 5);
}
static double uneven_transfer(const SchedAction *send, const SchedAction *recv, void *ctx) {
  (void)ctx;
  assert_true(sched_kind_is_send(send->kind));
  assert_true(sched_kind_is_recv(recv->kind));
  assert_int_equal(send->match, recv->id);
  return 0.375 + 0.25 * (send->microbatch % 3);
}

/* Recomputes each start from the definition in evaluate.h (buffered sends). */
static void verify_equation(const SchedProgram *prog, const SchedEval *ev) {
  for (int r = 0; r < prog->num_ranks; r++) {
    int n;
    const SchedAction *list = sched_program_rank_actions(prog, r, &n);
    for (int i = 0; i < n; i++) {
      const SchedAction *a = &list[i];
      double want = 0;
      for (int j = i - 1; j >= 0; j--)
        if (list[j].stream == a->stream) {
          want = fmax(want, ev->finish[list[j].id]);
          break;
        }
      if (a->stream != SCHED_STREAM_COMPUTE)
        for (int j = i - 1; j >= 0; j--)
          if (list[j].stream == SCHED_STREAM_COMPUTE) {
            want = fmax(want, ev->finish[list[j].id]);
            break;
          }
      for (int d = 0; d < a->num_deps; d++) {
        double t = ev->finish[a->deps[d]];
        if (a->deps[d] == a->match) t += uneven_transfer(&prog->actions[a->match], a, NULL);
        want = fmax(want, t);
      }
      assert_true(ev->start[a->id] == want);
      assert_true(ev->finish[a->id] == want + uneven_cost(a, NULL));
    }
  }
}

static void test_equation_on_built_programs(void **state) {
  (void)state;
  const int cases[][4] = {{SCHED_SCHEDULE_1F1B, 4, 1, 7}, {SCHED_SCHEDULE_GPIPE, 3, 1, 4},
                          {SCHED_SCHEDULE_INTERLEAVED, 4, 2, 8}, {SCHED_SCHEDULE_INTERLEAVED, 3, 3, 6}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    SchedConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.schedule = (SchedScheduleKind)cases[k][0];
    cfg.pp = cases[k][1];
    cfg.vpp = cases[k][2];
    cfg.microbatches = cases[k][3];
    SchedProgram *prog = NULL;
    assert_int_equal(sched_build(&cfg, &prog, NULL), ERR_OK);
    SchedEvalOptions o;
    memset(&o, 0, sizeof o);
    o.cost = uneven_cost;
    o.transfer = uneven_transfer;
    SchedEval ev;
    assert_int_equal(sched_evaluate(prog, &o, &ev, NULL), ERR_OK);
    verify_equation(prog, &ev);
    double busy = 0, latest = 0;
    for (int r = 0; r < prog->num_ranks; r++) {
      busy += ev.busy[r];
      latest = fmax(latest, ev.rank_finish[r]);
    }
    assert_true(latest == ev.makespan);
    assert_true(fabs(ev.bubble_fraction - (1 - busy / (prog->num_ranks * ev.makespan))) < 1e-12);
    /* Blocking sends can only be slower. */
    SchedEval evb;
    o.send_mode = SCHED_SEND_RENDEZVOUS;
    assert_int_equal(sched_evaluate(prog, &o, &evb, NULL), ERR_OK);
    assert_true(evb.makespan >= ev.makespan);
    sched_eval_free(&evb);
    sched_eval_free(&ev);
    sched_program_free(prog);
  }
}

static double negative_cost(const SchedAction *a, void *ctx) {
  (void)ctx;
  return a->kind == SCHED_BWD ? -1.0 : 1.0;
}

static void test_cost_errors(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 1, 1, kTwoStages);
  SchedEvalOptions o;
  memset(&o, 0, sizeof o);
  SchedEval ev;
  Error err = {0, ""};
  assert_int_equal(sched_evaluate(prog, &o, &ev, &err), ERR_ARG);
  sched_eval_free(&ev);
  o.cost = negative_cost;
  assert_int_equal(sched_evaluate(prog, &o, &ev, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "cost of rank 0 #3 BWD mb 0 stage 0 (id 3) is -1"));
  sched_eval_free(&ev);
  sched_program_free(prog);
}

static void test_stage_scale(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 1, 1, kTwoStages);
  double scale[] = {1.0, 3.0};
  SchedUnitCosts c = sched_unit_costs_default();
  c.stage_scale = scale;
  c.num_stages = 2;
  SchedEvalOptions o = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate(prog, &o, &ev, NULL), ERR_OK);
  /* Stage 1 forward 3, backward 6: 1 + 3 + 6 + 2. */
  assert_true(ev.makespan == 12.0);
  assert_true(ev.busy[1] == 9.0);
  sched_eval_free(&ev);
  sched_program_free(prog);
}

/* The chart of 1F1B on two ranks, two micro-batches: 9 unit slots, rank 1
 * idle in the first and rank 0 in the middle. */
static void test_timeline(void **state) {
  (void)state;
  SchedConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.schedule = SCHED_SCHEDULE_1F1B;
  cfg.pp = 2;
  cfg.vpp = 1;
  cfg.microbatches = 2;
  SchedProgram *prog = NULL;
  assert_int_equal(sched_build(&cfg, &prog, NULL), ERR_OK);
  SchedUnitCosts c = sched_unit_costs_default();
  SchedEvalOptions o = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate(prog, &o, &ev, NULL), ERR_OK);
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  sched_eval_print_timeline(prog, &ev, f);
  fclose(f);
  const char *expect =
      "    time | rank 0     | rank 1    \n"
      "    0.00 | F0         |           \n"
      "    1.00 | F1         | F0        \n"
      "    2.00 |            | B0        \n"
      "    3.00 |            | B0        \n"
      "    4.00 | B0         | F1        \n"
      "    5.00 | B0         | B1        \n"
      "    6.00 |            | B1        \n"
      "    7.00 | B1         |           \n"
      "    8.00 | B1         |           \n";
  if (strcmp(buf, expect)) print_error("got:\n%s", buf);
  assert_string_equal(buf, expect);
  free(buf);
  sched_eval_free(&ev);
  sched_program_free(prog);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buffered_timeline),   cmocka_unit_test(test_blocking_timeline),
      cmocka_unit_test(test_collective_overlap),  cmocka_unit_test(test_equation_on_built_programs),
      cmocka_unit_test(test_cost_errors),         cmocka_unit_test(test_stage_scale),
      cmocka_unit_test(test_timeline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
