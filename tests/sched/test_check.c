/* The checker rejects broken programs with messages that name the actions:
 * a missing receive, a send/receive order that deadlocks only when sends
 * block, one that deadlocks whatever the semantics, a forward that does not
 * wait for its input, a backward before its forward, missing reductions and
 * optimizer steps, and a send to the wrong stage. Each broken program is a
 * small edit of a correct one that passes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "sched/builders.h"
#include "sched/check.h"
#include "sched/evaluate.h"

static SchedConfig cfg_2x(int m) {
  SchedConfig c;
  memset(&c, 0, sizeof c);
  c.schedule = SCHED_SCHEDULE_CUSTOM;
  c.pp = 2;
  c.vpp = 1;
  c.microbatches = m;
  return c;
}

static SchedProgram *parse(const SchedConfig *cfg, const char *text) {
  SchedProgram *prog = NULL;
  Error err = {0, ""};
  int rc = sched_program_parse_text(cfg, text, &prog, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, ERR_OK);
  return prog;
}

/* Checks `text` and expects failure with every needle in the message. */
static void expect_rejected(const SchedConfig *cfg, const char *text, const char *const *needles) {
  SchedProgram *prog = parse(cfg, text);
  Error err = {0, ""};
  assert_int_equal(sched_check(prog, &err), ERR_CONFIG);
  for (const char *const *n = needles; *n; n++) {
    if (!strstr(err.msg, *n)) print_error("missing '%s' in: %s\n", *n, err.msg);
    assert_non_null(strstr(err.msg, *n));
  }
  sched_program_free(prog);
}

static void expect_accepted(const SchedConfig *cfg, const char *text) {
  SchedProgram *prog = parse(cfg, text);
  Error err = {0, ""};
  int rc = sched_check(prog, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, ERR_OK);
  sched_program_free(prog);
}

/* The correct two-stage, one micro-batch program the edits start from. */
static const char *kGood1 = "F0 SA0 RG0 B0 AR0 OPT\nRA0 F0 B0 SG0 AR0 OPT";

static void test_good_program_passes(void **state) {
  (void)state;
  SchedConfig c = cfg_2x(1);
  expect_accepted(&c, kGood1);
  /* A hand-written 1F1B for two micro-batches, in the order the builder
   * would choose. */
  SchedConfig c2 = cfg_2x(2);
  expect_accepted(&c2, "F0 SA0 F1 SA1 RG0 B0 RG1 B1 AR0 OPT\nRA0 F0 RA1 B0 SG0 F1 B1 SG1 AR0 OPT");
}

static void test_missing_recv(void **state) {
  (void)state;
  SchedConfig c = cfg_2x(1);
  const char *needles[] = {"rank 0 #1 SEND_ACT mb 0 stage 0->1 (peer rank 1) (id 1) has no matching RECV_ACT on rank 1",
                           "rank 1 #0 FWD mb 0 stage 1", "has no RECV_ACT for its input", "deadlock", NULL};
  expect_rejected(&c, "F0 SA0 RG0 B0 AR0 OPT\nF0 B0 SG0 AR0 OPT", needles);
}

static void test_missing_send(void **state) {
  (void)state;
  SchedConfig c = cfg_2x(1);
  const char *needles[] = {"RECV_GRAD mb 0 stage 0<-1 (peer rank 1)", "has no matching SEND_GRAD on rank 1",
                           "never sends its input gradient to rank 0", NULL};
  expect_rejected(&c, "F0 SA0 RG0 B0 AR0 OPT\nRA0 F0 B0 AR0 OPT", needles);
}

/* The classic: rank 0 sends mb 1's activation before taking mb 0's gradient,
 * while rank 1 sends that gradient before taking mb 1's activation. Buffered
 * sends complete it; blocking sends wait for each other forever. */
static void test_blocking_only_deadlock(void **state) {
  (void)state;
  SchedConfig c = cfg_2x(2);
  const char *text = "F0 SA0 F1 SA1 RG0 B0 RG1 B1 AR0 OPT\nRA0 F0 B0 SG0 RA1 F1 B1 SG1 AR0 OPT";
  SchedProgram *prog = parse(&c, text);
  SchedUnitCosts costs = sched_unit_costs_default();
  SchedEvalOptions eager = sched_unit_eval_options(&costs, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate(prog, &eager, &ev, NULL), ERR_OK);
  sched_eval_free(&ev);
  sched_program_free(prog);
  const char *needles[] = {"blocking send/receive: deadlock",
                           "rank 0 #3 SEND_ACT mb 1 stage 0->1 (peer rank 1) (id 3) is stuck",
                           "rank 1 #3 SEND_GRAD mb 0 stage 1->0 (peer rank 0)", NULL};
  expect_rejected(&c, text, needles);
}

/* Rank 0 waits for the gradient before sending the activation that would
 * produce it: a cycle under any semantics. */
static void test_cycle_deadlock(void **state) {
  (void)state;
  SchedConfig c = cfg_2x(1);
  const char *text = "F0 RG0 B0 SA0 AR0 OPT\nRA0 F0 B0 SG0 AR0 OPT";
  SchedProgram *prog = parse(&c, text);
  SchedUnitCosts costs = sched_unit_costs_default();
  SchedEvalOptions eager = sched_unit_eval_options(&costs, SCHED_SEND_EAGER);
  SchedEval ev;
  Error err = {0, ""};
  assert_int_equal(sched_evaluate(prog, &eager, &ev, &err), ERR_CONFIG);
  assert_true(ev.deadlocked);
  /* Only rank 0's first forward ever runs. */
  assert_int_equal(ev.num_stuck, 11);
  assert_false(isnan(ev.finish[0]));
  assert_non_null(strstr(err.msg, "rank 0 #1 RECV_GRAD mb 0 stage 0<-1 (peer rank 1) (id 1) is stuck: it waits for its "
                                  "partner rank 1 #3 SEND_GRAD"));
  assert_non_null(strstr(err.msg, "rank 1 #0 RECV_ACT mb 0 stage 1<-0 (peer rank 0) (id 6) is stuck: it waits for its "
                                  "partner rank 0 #3 SEND_ACT"));
  sched_eval_free(&ev);
  sched_program_free(prog);
  const char *needles[] = {"deadlock", "rank 0 #1 RECV_GRAD mb 0", NULL};
  expect_rejected(&c, text, needles);
}

static void test_bad_compute_coverage(void **state) {
  (void)state;
  SchedConfig c = cfg_2x(2);
  /* mb 1 never runs backward on rank 0; mb 0's forward runs twice on rank 1. */
  const char *n1[] = {"rank 0 never runs the backward of mb 1 chunk 0", NULL};
  expect_rejected(&c, "F0 SA0 F1 SA1 RG0 B0 RG1 AR0 OPT\nRA0 F0 RA1 B0 SG0 F1 B1 SG1 AR0 OPT", n1);
  const char *n2[] = {"repeats", "rank 1 #1 FWD mb 0", NULL};
  expect_rejected(&c, "F0 SA0 F1 SA1 RG0 B0 RG1 B1 AR0 OPT\nRA0 F0 RA1 B0 SG0 F0 F1 B1 SG1 AR0 OPT", n2);
  /* Backward before forward on a single rank. */
  SchedConfig one = cfg_2x(1);
  one.pp = 1;
  const char *n3[] = {"BWD mb 0 stage 0", "runs before its forward", "which is not earlier on its rank", NULL};
  expect_rejected(&one, "B0 F0 AR0 OPT", n3);
}

static void test_data_flow_order(void **state) {
  (void)state;
  SchedConfig c = cfg_2x(1);
  /* The activation is sent before the forward that produces it. */
  const char *n1[] = {"SEND_ACT mb 0 stage 0->1", "does not follow its forward", NULL};
  expect_rejected(&c, "SA0 F0 RG0 B0 AR0 OPT\nRA0 F0 B0 SG0 AR0 OPT", n1);
  /* Rank 1 receives after the forward that needs the activation. */
  const char *n2[] = {"rank 1 #0 FWD mb 0 stage 1 (id 6) does not wait for rank 1 #1 RECV_ACT", NULL};
  expect_rejected(&c, "F0 SA0 RG0 B0 AR0 OPT\nF0 RA0 B0 SG0 AR0 OPT", n2);
}

static void test_reductions_and_optim(void **state) {
  (void)state;
  SchedConfig c = cfg_2x(1);
  const char *n1[] = {"rank 1 has 0 OPTIM actions, expected 1", NULL};
  expect_rejected(&c, "F0 SA0 RG0 B0 AR0 OPT\nRA0 F0 B0 SG0 AR0", n1);
  const char *n2[] = {"rank 0 never reduces the gradients of chunk 0", NULL};
  expect_rejected(&c, "F0 SA0 RG0 B0 OPT\nRA0 F0 B0 SG0 AR0 OPT", n2);
  const char *n3[] = {"GRAD_REDUCE", "does not follow the chunk's last backward", NULL};
  expect_rejected(&c, "F0 SA0 RG0 AR0 B0 OPT\nRA0 F0 B0 SG0 AR0 OPT", n3);
  const char *n4[] = {"OPTIM", "does not wait for", NULL};
  expect_rejected(&c, "F0 SA0 RG0 B0 OPT AR0\nRA0 F0 B0 SG0 AR0 OPT", n4);
}

/* Field-level damage the text format cannot express: edit a built program. */
static void test_damaged_fields(void **state) {
  (void)state;
  SchedConfig c;
  memset(&c, 0, sizeof c);
  c.schedule = SCHED_SCHEDULE_1F1B;
  c.pp = 3;
  c.vpp = 1;
  c.microbatches = 2;
  SchedProgram *prog = NULL;
  assert_int_equal(sched_build(&c, &prog, NULL), ERR_OK);
  assert_int_equal(sched_check(prog, NULL), ERR_OK);
  int sid = sched_program_find(prog, 0, SCHED_SEND_ACT, 1, 0);
  SchedAction saved = prog->actions[sid];
  prog->actions[sid].peer = 2; /* skips a stage */
  prog->actions[sid].peer_stage = 2;
  Error err = {0, ""};
  assert_int_equal(sched_check(prog, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "is not the next stage of stage 0"));
  prog->actions[sid] = saved;
  prog->actions[sid].match = -1;
  assert_int_equal(sched_check(prog, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "match fields say -1"));
  prog->actions[sid] = saved;
  prog->actions[sid].stage = 5;
  assert_int_equal(sched_check(prog, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "stage 5, but chunk 0 of rank 0 is stage 0"));
  prog->actions[sid] = saved;
  prog->config.pp = 4;
  assert_int_equal(sched_check(prog, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "3 ranks but config.pp is 4"));
  prog->config.pp = 3;
  assert_int_equal(sched_check(prog, NULL), ERR_OK);
  sched_program_free(prog);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_good_program_passes), cmocka_unit_test(test_missing_recv),
      cmocka_unit_test(test_missing_send),        cmocka_unit_test(test_blocking_only_deadlock),
      cmocka_unit_test(test_cycle_deadlock),      cmocka_unit_test(test_bad_compute_coverage),
      cmocka_unit_test(test_data_flow_order),     cmocka_unit_test(test_reductions_and_optim),
      cmocka_unit_test(test_damaged_fields),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
