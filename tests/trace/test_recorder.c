/* The recorder: the step window (--trace-steps) and the global flag, what a
 * span stores, stamps converted to CLOCK_MONOTONIC ns, drops when the
 * buffer is full, threads without a recorder, and names. Prints (never
 * asserts) what recording costs: ns per event recorded, per span while
 * tracing is off, and per read of each clock. Registered twice by
 * tests.cmake: with the clock picked for this CPU and with
 * FIVEFOLD_TRACE_CLOCK=monotonic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "trace/recorder.h"

static void sleep_ms(double ms) {
  struct timespec ts = {0, (long)(ms * 1e6)};
  nanosleep(&ts, NULL);
}

static void test_steps_parse(void **state) {
  (void)state;
  int a, b;
  Error err = {0};
  assert_int_equal(trace_steps_parse("1:2", &a, &b, &err), ERR_OK);
  assert_int_equal(a, 1), assert_int_equal(b, 2);
  assert_int_equal(trace_steps_parse("3:", &a, &b, &err), ERR_OK);
  assert_int_equal(a, 3), assert_int_equal(b, -1);
  assert_int_equal(trace_steps_parse("5", &a, &b, &err), ERR_OK);
  assert_int_equal(a, 5), assert_int_equal(b, 5);
  assert_int_equal(trace_steps_parse(":", &a, &b, &err), ERR_OK);
  assert_int_equal(a, 0), assert_int_equal(b, -1);
  const char *bad[] = {"2:1", "x", "", "-1:3", "1:2:3", "1:y"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(trace_steps_parse(bad[i], &a, &b, &err), ERR_ARG);
    assert_non_null(strstr(err.msg, "--trace-steps"));
  }
}

static void test_names_round_trip(void **state) {
  (void)state;
  for (int k = 0; k < TRACE_NUM_OP_KINDS; k++) {
    TraceOpKind back;
    assert_int_equal(trace_op_kind_from_name(trace_op_kind_name((TraceOpKind)k), &back), 0);
    assert_int_equal(back, k);
  }
  for (int g = 0; g < TRACE_NUM_GROUPS; g++) assert_int_equal(trace_group_from_name(trace_group_name(g)), g);
  assert_null(trace_group_name(TRACE_NUM_GROUPS));
  assert_int_equal(trace_group_from_name("nope"), -1);
  assert_true(trace_op_kind_is_comm(TRACE_OP_MOE_A2A) && !trace_op_kind_is_comm(TRACE_OP_GEMM));
}

static void test_window_fields_and_stamps(void **state) {
  (void)state;
  TraceRecorderConfig cfg = {.capacity = 64, .first_step = 1, .last_step = 1};
  TraceRecorder *rec = trace_recorder_new(&cfg, NULL);
  assert_non_null(rec);
  trace_bind(rec, 3, 1, 4);
  assert_false(trace_on());
  int64_t before = 0, after = 0;
  for (int it = 0; it < 3; it++) {
    trace_begin_iteration(it);
    assert_int_equal(trace_on(), it == 1);
    if (it == 1) before = trace_clock_monotonic_ns();
    TraceEvent a = trace_action_begin(17, 2, -1);
    TRACE_OP_BEGIN(g, TRACE_OP_GEMM, 5, 2);
    sleep_ms(2);
    TRACE_OP_END_GEMM(g, 64, 128, 32);
    TRACE_OP_BEGIN(c, TRACE_OP_MOE_A2A, 5, 2);
    TRACE_OP_END_COMM(c, TRACE_GROUP_EP, 4096, 7);
    a.peer = 2;
    a.bytes = 1000;
    trace_action_end(&a);
    if (it == 1) after = trace_clock_monotonic_ns();
  }
  trace_begin_iteration(-1);
  assert_false(trace_on());
  trace_recorder_stop(rec);
  size_t n;
  const TraceEvent *ev = trace_recorder_events(rec, &n);
  assert_int_equal(n, 3); /* only iteration 1 */
  assert_int_equal(rec->world_rank, 3);
  assert_int_equal(rec->pipeline_rank, 1);
  const TraceEvent *gemm = &ev[0], *a2a = &ev[1], *act = &ev[2];
  assert_int_equal(gemm->type, TRACE_EVENT_OP);
  assert_int_equal(gemm->id, TRACE_OP_GEMM);
  assert_int_equal(gemm->iteration, 1);
  assert_int_equal(gemm->layer, 5), assert_int_equal(gemm->microbatch, 2);
  assert_int_equal(gemm->m, 64), assert_int_equal(gemm->n, 128), assert_int_equal(gemm->k, 32);
  assert_int_equal(gemm->bytes, -1), assert_int_equal(gemm->peer, -1), assert_int_equal(gemm->group, -1);
  assert_int_equal(a2a->id, TRACE_OP_MOE_A2A);
  assert_int_equal(a2a->group, TRACE_GROUP_EP), assert_int_equal(a2a->bytes, 4096), assert_int_equal(a2a->peer, 7);
  assert_int_equal(act->type, TRACE_EVENT_ACTION);
  assert_int_equal(act->id, 17), assert_int_equal(act->microbatch, 2), assert_int_equal(act->peer, 2);
  assert_int_equal(act->bytes, 1000);
  /* Stamps are CLOCK_MONOTONIC ns whatever the clock underneath. */
  int64_t slack = 200000; /* TSC fit error and the reads around the span */
  assert_true((int64_t)act->begin >= before - slack && (int64_t)act->end <= after + slack);
  assert_true(act->begin <= gemm->begin && gemm->end <= a2a->begin && a2a->end <= act->end);
  assert_true((int64_t)(gemm->end - gemm->begin) >= 2000000 - slack);
  assert_int_equal(trace_recorder_dropped(rec), 0);
  trace_recorder_free(rec);
  assert_null(trace_bound_recorder());
}

static void test_full_buffer_counts_drops(void **state) {
  (void)state;
  TraceRecorderConfig cfg = {.capacity = 10, .first_step = 0, .last_step = -1};
  TraceRecorder *rec = trace_recorder_new(&cfg, NULL);
  trace_bind(rec, 0, 0, 1);
  trace_begin_iteration(0);
  for (int i = 0; i < 15; i++) {
    TRACE_OP_BEGIN(op, TRACE_OP_NORM, i, 0);
    TRACE_OP_END(op);
  }
  trace_recorder_stop(rec);
  size_t n;
  const TraceEvent *ev = trace_recorder_events(rec, &n);
  assert_int_equal(n, 10);
  assert_int_equal(trace_recorder_dropped(rec), 5);
  assert_int_equal(ev[9].layer, 9); /* the first ones are kept */
  /* Stopped: nothing more is recorded, and the flag is off. */
  assert_false(trace_on());
  trace_begin_iteration(1);
  TRACE_OP_BEGIN(late, TRACE_OP_NORM, 0, 0);
  TRACE_OP_END(late);
  trace_recorder_events(rec, &n);
  assert_int_equal(n, 10);
  trace_recorder_free(rec);
}

static void *unbound_thread(void *arg) {
  (void)arg;
  trace_begin_iteration(0);
  for (int i = 0; i < 100; i++) {
    TRACE_OP_BEGIN(op, TRACE_OP_GEMM, 0, 0);
    TRACE_OP_END(op);
  }
  return NULL;
}

/* Another thread's spans while this thread records land nowhere. */
static void test_thread_without_recorder(void **state) {
  (void)state;
  TraceRecorder *rec = trace_recorder_new(NULL, NULL);
  trace_bind(rec, 0, 0, 1);
  trace_begin_iteration(0);
  assert_true(trace_on());
  pthread_t t;
  pthread_create(&t, NULL, unbound_thread, NULL);
  pthread_join(t, NULL);
  trace_recorder_stop(rec);
  size_t n;
  trace_recorder_events(rec, &n);
  assert_int_equal(n, 0);
  trace_recorder_free(rec);
}

static void test_bad_config(void **state) {
  (void)state;
  Error err = {0};
  TraceRecorderConfig cfg = {.capacity = 8, .first_step = 3, .last_step = 1};
  assert_null(trace_recorder_new(&cfg, &err));
  assert_int_equal(err.code, ERR_ARG);
}

static double now_ns(void) { return (double)trace_clock_monotonic_ns(); }

/* (f) what recording costs; printed, not asserted. */
static void test_overhead(void **state) {
  (void)state;
  enum { N = 200000 };
  TraceRecorderConfig cfg = {.capacity = N, .first_step = 0, .last_step = -1};
  TraceRecorder *rec = trace_recorder_new(&cfg, NULL);
  trace_bind(rec, 0, 0, 1);
  /* Tracing off: the flag check only. */
  trace_begin_iteration(-1);
  double t0 = now_ns();
  for (int i = 0; i < N; i++) {
    TRACE_OP_BEGIN(op, TRACE_OP_GEMM, i, 0);
    TRACE_OP_END_GEMM(op, 1, 2, 3);
  }
  double off = (now_ns() - t0) / N;
  /* Recording: the first pass writes the buffer for the first time (cache
   * misses on a large buffer), later ones run over memory already seen. */
  trace_begin_iteration(0);
  double on[3];
  for (int pass = 0; pass < 3; pass++) {
    rec->count = 0;
    t0 = now_ns();
    for (int i = 0; i < N; i++) {
      TRACE_OP_BEGIN(op, TRACE_OP_GEMM, i, 0);
      TRACE_OP_END_GEMM(op, 1, 2, 3);
    }
    on[pass] = (now_ns() - t0) / N;
  }
  size_t n;
  trace_recorder_events(rec, &n);
  assert_int_equal(n, N);
  trace_recorder_stop(rec);
  trace_recorder_free(rec);
  volatile uint64_t sink = 0;
  t0 = now_ns();
  for (int i = 0; i < N; i++) sink += (uint64_t)trace_clock_monotonic_ns();
  double mono = (now_ns() - t0) / N;
  double tsc = -1;
#if TRACE_HAVE_TSC
  t0 = now_ns();
  for (int i = 0; i < N; i++) sink += __rdtsc();
  tsc = (now_ns() - t0) / N;
#endif
  (void)sink;
  printf("recorder overhead (clock %s, %d events of %zu bytes): %.1f ns per event recorded on the first pass, "
         "%.1f and %.1f on the next; %.1f ns per span with tracing off\n",
         trace_clock_source_name(trace_clock_source()), N, sizeof(TraceEvent), on[0], on[1], on[2], off);
  printf("clock reads: clock_gettime(CLOCK_MONOTONIC) %.1f ns, rdtsc %.1f ns\n", mono, tsc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_steps_parse),         cmocka_unit_test(test_names_round_trip),
      cmocka_unit_test(test_window_fields_and_stamps), cmocka_unit_test(test_full_buffer_counts_drops),
      cmocka_unit_test(test_thread_without_recorder), cmocka_unit_test(test_bad_config),
      cmocka_unit_test(test_overhead),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
