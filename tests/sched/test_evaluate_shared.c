/* The processor-sharing evaluator: two ranks on one core run at full speed
 * while the other waits and at half speed when both compute; a
 * hand-computed timeline with an action re-timed in mid-run; the split of
 * a cost into CPU work and waiting; a rank over two nodes at its slower
 * node's speed; the max-plus result whenever the speed never changes; a
 * waiting rank that keeps part of its core; the deadlock report; and bad
 * options refused. */
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
#include "sched/evaluate_shared.h"

static SchedProgram *parse(int p, int m, const char *text) {
  SchedConfig c;
  memset(&c, 0, sizeof c);
  c.schedule = SCHED_SCHEDULE_CUSTOM;
  c.pp = p;
  c.vpp = 1;
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

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * (1 + fabs(b)); }

/* Every compute-stream cost is CPU work. */
static double work_all(const SchedAction *a, void *ctx) { return sched_unit_cost(a, ctx); }

/* Half of every forward and backward is CPU work, the rest waiting. */
static double work_half(const SchedAction *a, void *ctx) {
  return a->kind == SCHED_FWD || a->kind == SCHED_BWD ? 0.5 * sched_unit_cost(a, ctx) : 0.0;
}

/* R ranks, each one device on node 0 of `cores` cores, costs priced at
 * share cores / R. */
typedef struct OneNode {
  double capacity, load[16];
  SchedShareOptions o;
} OneNode;

static void one_node(OneNode *n, int ranks, double cores, SchedUnitCosts *costs, SchedWorkFn work) {
  memset(n, 0, sizeof *n);
  n->capacity = cores;
  for (int r = 0; r < ranks; r++) n->load[r] = 1;
  n->o.work = work;
  n->o.work_ctx = costs;
  n->o.priced_share = cores / ranks < 1 ? cores / ranks : 1;
  n->o.num_nodes = 1;
  n->o.capacity = &n->capacity;
  n->o.load = n->load;
}

static SchedUnitCosts forward_costs(double fwd) {
  SchedUnitCosts c = sched_unit_costs_default();
  c.fwd = fwd;
  return c;
}

/* Rank 1 waits for rank 0's forward: alone on the core, each runs its
 * priced 2 s (half a core) in 1 s. */
static void test_alone_full_speed(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 1, "F0 SA0\nRA0 F0");
  SchedUnitCosts c = forward_costs(2);
  OneNode n;
  one_node(&n, 2, 1, &c, work_all);
  SchedEvalOptions eo = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &n.o, &ev, NULL), ERR_OK);
  assert_true(near(at(prog, &ev, 0, 0, 1), 1.0));
  assert_true(near(at(prog, &ev, 1, 1, 0), 1.0) && near(at(prog, &ev, 1, 1, 1), 2.0));
  assert_true(near(ev.makespan, 2.0));
  assert_true(near(ev.busy[0], 1.0) && near(ev.busy[1], 1.0));
  sched_eval_free(&ev);
  /* The max-plus evaluator keeps the fixed share: 4 s. */
  assert_int_equal(sched_evaluate(prog, &eo, &ev, NULL), ERR_OK);
  assert_true(ev.makespan == 4.0);
  sched_eval_free(&ev);
  sched_program_free(prog);
}

/* Two independent forwards at once: half a core each, the priced 2 s. */
static void test_both_half_speed(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 1, "F0\nF0");
  SchedUnitCosts c = forward_costs(2);
  OneNode n;
  one_node(&n, 2, 1, &c, work_all);
  SchedEvalOptions eo = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &n.o, &ev, NULL), ERR_OK);
  assert_true(near(at(prog, &ev, 0, 0, 1), 2.0) && near(at(prog, &ev, 1, 0, 1), 2.0));
  assert_true(near(ev.makespan, 2.0));
  sched_eval_free(&ev);
  sched_program_free(prog);
}

/* Hand-computed: two ranks on one core, rank 0's forward priced 2 s (1 s
 * of a core), rank 1's 4 s (2 s of a core: stage scale 2).
 *   0-1  rank 0 F0 alone                       (rank 1 waits for it)
 *   1-3  rank 0 F1 and rank 1 F0 at half speed (F1 done; F0 has 1 s left)
 *   3-4  rank 1 F0 alone, re-timed at full speed
 *   4-6  rank 1 F1 alone (its input arrived at 3, its receive posted at 4)
 * Max-plus at the fixed share: rank 1 runs 2-6 and 6-10. */
static void test_hand_timeline(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 2, "F0 SA0 F1 SA1\nRA0 F0 RA1 F1");
  SchedUnitCosts c = forward_costs(2);
  double scale[2] = {1, 2};
  c.stage_scale = scale;
  c.num_stages = 2;
  OneNode n;
  one_node(&n, 2, 1, &c, work_all);
  SchedEvalOptions eo = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &n.o, &ev, NULL), ERR_OK);
  assert_true(near(at(prog, &ev, 0, 0, 0), 0.0) && near(at(prog, &ev, 0, 0, 1), 1.0));
  assert_true(near(at(prog, &ev, 0, 2, 0), 1.0) && near(at(prog, &ev, 0, 2, 1), 3.0));
  assert_true(near(at(prog, &ev, 1, 1, 0), 1.0) && near(at(prog, &ev, 1, 1, 1), 4.0));
  assert_true(near(at(prog, &ev, 1, 2, 1), 4.0)); /* RA1: posted after F0; its data was there at 3 */
  assert_true(near(at(prog, &ev, 1, 3, 0), 4.0) && near(at(prog, &ev, 1, 3, 1), 6.0));
  assert_true(near(ev.makespan, 6.0));
  assert_true(near(ev.rank_finish[0], 3.0));
  assert_true(near(ev.busy[0], 3.0) && near(ev.busy[1], 5.0));
  assert_true(near(ev.bubble_fraction, 1.0 - 8.0 / 12.0));
  sched_eval_free(&ev);
  assert_int_equal(sched_evaluate(prog, &eo, &ev, NULL), ERR_OK);
  assert_true(ev.makespan == 10.0);
  sched_eval_free(&ev);
  sched_program_free(prog);
}

/* Half of each forward waits (communication inside it): the CPU half runs
 * first and shares the core, the waiting half takes its own time and frees
 * the core. Forwards priced 4 s: 2 s CPU at half a core (1 s of a core),
 * then 2 s waiting.
 *   0-2    both CPU parts at half speed   (1 s of a core each)
 *   2-4    both wait
 * Then a second forward on rank 0 only: CPU 4-5 alone, waiting 5-7. */
static void test_work_and_wait(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 2, "F0 F1\nF0");
  SchedUnitCosts c = forward_costs(4);
  OneNode n;
  one_node(&n, 2, 1, &c, work_half);
  SchedEvalOptions eo = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &n.o, &ev, NULL), ERR_OK);
  assert_true(near(at(prog, &ev, 0, 0, 1), 4.0) && near(at(prog, &ev, 1, 0, 1), 4.0));
  assert_true(near(at(prog, &ev, 0, 1, 0), 4.0) && near(at(prog, &ev, 0, 1, 1), 7.0));
  sched_eval_free(&ev);
  sched_program_free(prog);
}

/* A rank over two nodes (its TP group, say) runs at its slower node's
 * speed: rank 0 on nodes 0 and 1, rank 1 on node 1, one core per node, all
 * priced at full speed. Both compute: node 1 has two, so rank 0 (and rank
 * 1) run at half speed although node 0 is free. */
static void test_spread_rank(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 1, "F0\nF0");
  SchedUnitCosts c = forward_costs(1);
  double capacity[2] = {1, 1}, load[4] = {1, 1, 0, 1};
  SchedShareOptions o = {work_all, &c, 1.0, 2, capacity, load, 0};
  SchedEvalOptions eo = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &o, &ev, NULL), ERR_OK);
  assert_true(near(at(prog, &ev, 0, 0, 1), 2.0) && near(at(prog, &ev, 1, 0, 1), 2.0));
  sched_eval_free(&ev);
  /* Rank 1 moved to node 0 with rank 0: node 0 has two of one core, node
   * 1 only rank 0: still half speed for both, now through node 0. */
  double load2[4] = {1, 1, 1, 0};
  o.load = load2;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &o, &ev, NULL), ERR_OK);
  assert_true(near(at(prog, &ev, 0, 0, 1), 2.0) && near(at(prog, &ev, 1, 0, 1), 2.0));
  sched_eval_free(&ev);
  /* Back on node 1, which now has two cores: no node is crowded, full
   * speed for both. */
  capacity[1] = 2;
  o.load = load;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &o, &ev, NULL), ERR_OK);
  assert_true(near(ev.makespan, 1.0));
  sched_eval_free(&ev);
  sched_program_free(prog);
}

static void expect_same(const SchedProgram *prog, const SchedEval *a, const SchedEval *b) {
  for (int i = 0; i < prog->num_actions; i++) {
    assert_true(near(a->start[i], b->start[i]));
    assert_true(near(a->finish[i], b->finish[i]));
  }
  assert_true(near(a->makespan, b->makespan));
  assert_true(near(a->bubble_fraction, b->bubble_fraction));
}

/* Where the speed never changes the result is the max-plus one: every rank
 * on a core of its own (interleaved 1F1B, uneven stages, transfers,
 * reductions), and one rank standing for four devices on two cores (a DP4
 * group: always all four computing, always the priced half core). */
static void test_constant_speed_is_max_plus(void **state) {
  (void)state;
  SchedConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.schedule = SCHED_SCHEDULE_INTERLEAVED;
  cfg.pp = 4;
  cfg.vpp = 2;
  cfg.microbatches = 8;
  SchedProgram *prog = NULL;
  assert_int_equal(sched_build(&cfg, &prog, NULL), ERR_OK);
  SchedUnitCosts c = sched_unit_costs_default();
  double scale[8] = {1.0, 1.5, 0.7, 1.2, 0.9, 1.1, 1.3, 0.8};
  c.stage_scale = scale;
  c.num_stages = 8;
  c.transfer = 0.3;
  c.send = 0.05;
  c.grad_reduce = 2;
  c.optim = 0.5;
  SchedEvalOptions eo = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval ref, ev;
  assert_int_equal(sched_evaluate(prog, &eo, &ref, NULL), ERR_OK);
  OneNode n;
  one_node(&n, 4, 4, &c, work_all);
  assert_int_equal(sched_evaluate_shared(prog, &eo, &n.o, &ev, NULL), ERR_OK);
  expect_same(prog, &ev, &ref);
  sched_eval_free(&ev);
  sched_eval_free(&ref);
  sched_program_free(prog);

  SchedProgram *one = parse(1, 2, "F0 F1 B0 B1 AR0 OPT");
  c = sched_unit_costs_default();
  c.grad_reduce = 1;
  c.optim = 0.5;
  eo = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  double capacity = 2, load = 4;
  SchedShareOptions o = {work_all, &c, 0.5, 1, &capacity, &load, 0};
  assert_int_equal(sched_evaluate(one, &eo, &ref, NULL), ERR_OK);
  assert_int_equal(sched_evaluate_shared(one, &eo, &o, &ev, NULL), ERR_OK);
  expect_same(one, &ev, &ref);
  sched_eval_free(&ev);
  sched_eval_free(&ref);
  sched_program_free(one);
}

/* Sharing never makes a step slower than at the fixed share, nor faster
 * than with a core per rank (1F1B on 4 ranks and 2 cores, 8 micro-batches). */
static void test_between_bounds(void **state) {
  (void)state;
  SchedConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.schedule = SCHED_SCHEDULE_1F1B;
  cfg.pp = 4;
  cfg.vpp = 1;
  cfg.microbatches = 8;
  SchedProgram *prog = NULL;
  assert_int_equal(sched_build(&cfg, &prog, NULL), ERR_OK);
  SchedUnitCosts c = sched_unit_costs_default();
  c.transfer = 0.1;
  c.optim = 0.5;
  SchedEvalOptions eo = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval fixed, shared;
  assert_int_equal(sched_evaluate(prog, &eo, &fixed, NULL), ERR_OK);
  OneNode n;
  one_node(&n, 4, 2, &c, work_all);
  assert_int_equal(sched_evaluate_shared(prog, &eo, &n.o, &shared, NULL), ERR_OK);
  /* A core per rank: the max-plus evaluation at half the CPU costs. */
  SchedUnitCosts half = c;
  half.fwd *= 0.5, half.bwd *= 0.5, half.optim *= 0.5;
  SchedEvalOptions eh = sched_unit_eval_options(&half, SCHED_SEND_EAGER);
  SchedEval dedicated;
  assert_int_equal(sched_evaluate(prog, &eh, &dedicated, NULL), ERR_OK);
  assert_true(shared.makespan < fixed.makespan);
  assert_true(shared.makespan > dedicated.makespan);
  for (int i = 0; i < prog->num_actions; i++) assert_true(shared.finish[i] <= fixed.finish[i] + 1e-9);
  sched_eval_free(&fixed);
  sched_eval_free(&shared);
  sched_eval_free(&dedicated);
  sched_program_free(prog);
}

/* A waiting rank that still takes half of its share (a polling wait):
 * rank 0's forward shares the core with half of rank 1, speed 1 / 1.5, so
 * its 1 s of a core takes 1.5 s; then rank 1's, with rank 0 (done, waiting
 * for the next step) at half: 1.5 s more. A waiting load of 1 is the fixed
 * share (4 s), 0 the ideal (2 s). */
static void test_waiting_load(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 1, "F0 SA0\nRA0 F0");
  SchedUnitCosts c = forward_costs(2);
  OneNode n;
  one_node(&n, 2, 1, &c, work_all);
  SchedEvalOptions eo = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  SchedEval ev;
  n.o.waiting_load = 0.5;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &n.o, &ev, NULL), ERR_OK);
  assert_true(near(at(prog, &ev, 0, 0, 1), 1.5));
  assert_true(near(at(prog, &ev, 1, 1, 0), 1.5) && near(at(prog, &ev, 1, 1, 1), 3.0));
  sched_eval_free(&ev);
  n.o.waiting_load = 1;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &n.o, &ev, NULL), ERR_OK);
  assert_true(near(ev.makespan, 4.0));
  sched_eval_free(&ev);
  n.o.waiting_load = 1.5;
  Error err = {0, ""};
  assert_int_equal(sched_evaluate_shared(prog, &eo, &n.o, &ev, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "waiting_load"));
  sched_eval_free(&ev);
  sched_program_free(prog);
}

/* A deadlock is reported as the max-plus evaluator reports it. */
static void test_deadlock(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 1, "RG0 F0 SA0\nRA0 F0 B0 SG0");
  SchedUnitCosts c = sched_unit_costs_default();
  OneNode n;
  one_node(&n, 2, 1, &c, work_all);
  SchedEvalOptions eo = sched_unit_eval_options(&c, SCHED_SEND_RENDEZVOUS);
  eo.serial = 1;
  SchedEval a, b;
  Error ea = {0, ""}, eb = {0, ""};
  int ra = sched_evaluate(prog, &eo, &a, &ea), rb = sched_evaluate_shared(prog, &eo, &n.o, &b, &eb);
  assert_int_equal(ra, ERR_CONFIG);
  assert_int_equal(rb, ERR_CONFIG);
  assert_string_equal(ea.msg, eb.msg);
  assert_true(b.deadlocked && b.num_stuck == a.num_stuck);
  sched_eval_free(&a);
  sched_eval_free(&b);
  sched_program_free(prog);
}

static void test_bad_options(void **state) {
  (void)state;
  SchedProgram *prog = parse(2, 1, "F0\nF0");
  SchedUnitCosts c = sched_unit_costs_default();
  SchedEvalOptions eo = sched_unit_eval_options(&c, SCHED_SEND_EAGER);
  double capacity = 1, load[2] = {1, 1};
  SchedShareOptions o = {work_all, &c, 0.5, 1, &capacity, load, 0};
  SchedEval ev;
  Error err = {0, ""};
  o.priced_share = 0;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &o, &ev, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "priced_share"));
  sched_eval_free(&ev);
  o.priced_share = 0.5;
  capacity = 0;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &o, &ev, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "capacity"));
  sched_eval_free(&ev);
  capacity = 1;
  load[1] = -1;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &o, &ev, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "rank 1's load"));
  sched_eval_free(&ev);
  o.work = NULL;
  assert_int_equal(sched_evaluate_shared(prog, &eo, &o, &ev, &err), ERR_ARG);
  sched_eval_free(&ev);
  sched_program_free(prog);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alone_full_speed),     cmocka_unit_test(test_both_half_speed),
      cmocka_unit_test(test_hand_timeline),        cmocka_unit_test(test_work_and_wait),
      cmocka_unit_test(test_spread_rank),          cmocka_unit_test(test_constant_speed_is_max_plus),
      cmocka_unit_test(test_between_bounds),       cmocka_unit_test(test_waiting_load),
      cmocka_unit_test(test_deadlock),
      cmocka_unit_test(test_bad_options),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
