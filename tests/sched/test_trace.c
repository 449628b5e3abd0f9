/* Chrome trace of an evaluated program: parses back with cJSON, has one
 * process per rank with named stream threads, one complete event per action
 * with the evaluated times in µs, and one flow arrow per send/receive pair
 * with matching ids, bound to the enclosing slices. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "sched/builders.h"
#include "sched/trace_json.h"

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static const char *str_field(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}
static double num_field(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  assert_true(cJSON_IsNumber(v));
  return v->valuedouble;
}

static void test_trace_round_trip(void **state) {
  (void)state;
  SchedConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.schedule = SCHED_SCHEDULE_INTERLEAVED;
  cfg.pp = 2;
  cfg.vpp = 2;
  cfg.microbatches = 4;
  SchedProgram *prog = NULL;
  assert_int_equal(sched_build(&cfg, &prog, NULL), ERR_OK);
  SchedUnitCosts costs = sched_unit_costs_default();
  costs.transfer = 0.25;
  SchedEvalOptions o = sched_unit_eval_options(&costs, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate(prog, &o, &ev, NULL), ERR_OK);

  char path[] = "/tmp/fivefold_sched_trace_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  Error err = {0, ""};
  assert_int_equal(sched_trace_write(prog, &ev, 1e6, path, &err), ERR_OK);
  char *text = read_all(path);
  unlink(path);
  cJSON *root = cJSON_Parse(text);
  free(text);
  assert_non_null(root);
  const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
  assert_true(cJSON_IsArray(events));

  int complete = 0, process_names = 0, thread_names = 0, starts = 0, finishes = 0;
  int *flow_start = calloc((size_t)prog->num_actions, sizeof *flow_start);
  int *flow_finish = calloc((size_t)prog->num_actions, sizeof *flow_finish);
  const cJSON *e;
  cJSON_ArrayForEach(e, events) {
    const char *ph = str_field(e, "ph");
    int pid = (int)num_field(e, "pid"), tid = (int)num_field(e, "tid");
    assert_true(pid >= 0 && pid < prog->num_ranks);
    assert_true(tid >= 0 && tid < SCHED_NUM_STREAMS);
    if (!strcmp(ph, "M")) {
      const char *name = str_field(e, "name");
      const char *value = str_field(cJSON_GetObjectItemCaseSensitive(e, "args"), "name");
      if (!strcmp(name, "process_name")) {
        char expect[32];
        snprintf(expect, sizeof expect, "pipeline rank %d", pid);
        assert_string_equal(value, expect);
        process_names++;
      } else {
        assert_string_equal(name, "thread_name");
        assert_string_equal(value, sched_stream_name((SchedStream)tid));
        thread_names++;
      }
    } else if (!strcmp(ph, "X")) {
      int id = (int)num_field(cJSON_GetObjectItemCaseSensitive(e, "args"), "id");
      const SchedAction *a = sched_program_action(prog, id);
      assert_non_null(a);
      assert_int_equal(pid, a->rank);
      assert_int_equal(tid, a->stream);
      assert_string_equal(str_field(e, "cat"), sched_action_kind_name(a->kind));
      assert_true(num_field(e, "ts") == ev.start[id] * 1e6);
      assert_true(num_field(e, "dur") == (ev.finish[id] - ev.start[id]) * 1e6);
      complete++;
    } else if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
      int id = (int)num_field(e, "id");
      const SchedAction *send = sched_program_action(prog, id);
      assert_non_null(send);
      assert_true(sched_kind_is_send(send->kind));
      if (!strcmp(ph, "s")) {
        assert_int_equal(pid, send->rank);
        assert_true(num_field(e, "ts") == ev.start[id] * 1e6);
        flow_start[id]++;
        starts++;
      } else {
        const SchedAction *recv = sched_program_action(prog, send->match);
        assert_int_equal(pid, recv->rank);
        assert_int_equal(tid, recv->stream);
        assert_string_equal(str_field(e, "bp"), "e");
        assert_true(num_field(e, "ts") == ev.start[recv->id] * 1e6);
        flow_finish[id]++;
        finishes++;
      }
    } else {
      fail_msg("unexpected phase '%s'", ph);
    }
  }
  assert_int_equal(complete, prog->num_actions);
  assert_int_equal(process_names, prog->num_ranks);
  assert_int_equal(thread_names, prog->num_ranks * SCHED_NUM_STREAMS);
  int sends = 0;
  for (int i = 0; i < prog->num_actions; i++)
    if (sched_kind_is_send(prog->actions[i].kind)) {
      sends++;
      assert_int_equal(flow_start[i], 1);
      assert_int_equal(flow_finish[i], 1);
    }
  assert_int_equal(starts, sends);
  assert_int_equal(finishes, sends);
  assert_true(sends > 0);
  free(flow_start);
  free(flow_finish);
  cJSON_Delete(root);
  sched_eval_free(&ev);
  sched_program_free(prog);
}

/* Slices on one track must not overlap (Perfetto does not nest them). */
static void test_tracks_do_not_overlap(void **state) {
  (void)state;
  SchedConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.schedule = SCHED_SCHEDULE_1F1B;
  cfg.pp = 4;
  cfg.vpp = 1;
  cfg.microbatches = 8;
  SchedProgram *prog = NULL;
  assert_int_equal(sched_build(&cfg, &prog, NULL), ERR_OK);
  SchedUnitCosts costs = sched_unit_costs_default();
  costs.transfer = 0.5;
  costs.send = costs.recv = 0.1;
  costs.grad_reduce = 4;
  SchedEvalOptions o = sched_unit_eval_options(&costs, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate(prog, &o, &ev, NULL), ERR_OK);
  for (int r = 0; r < prog->num_ranks; r++)
    for (int s = 0; s < SCHED_NUM_STREAMS; s++) {
      double last_end = 0;
      int n;
      const SchedAction *list = sched_program_rank_actions(prog, r, &n);
      for (int i = 0; i < n; i++) {
        if (list[i].stream != (SchedStream)s) continue;
        assert_true(ev.start[list[i].id] >= last_end);
        last_end = ev.finish[list[i].id];
      }
    }
  sched_eval_free(&ev);
  sched_program_free(prog);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_trace_round_trip),
      cmocka_unit_test(test_tracks_do_not_overlap),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
