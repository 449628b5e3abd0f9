/* `fivefold trace` in process (the command's source is compiled into this
 * test): usage errors exit 2, `record --ebpf --from-raw` turns the recorded
 * bpftrace sample into a trace file, `analyze` reports on it and writes
 * DOT, and `compare-ready` accepts a complete trace, checks a predicted
 * trace of the same program side by side, and refuses a prediction of
 * another program and a trace without a program. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_trace.c"
#include "sched/builders.h"
#include "sched/evaluate.h"
#include "sched/trace_json.h"

static char sample_path[4096], program_path[4096], tmp[64];

static int setup(void **state) {
  (void)state;
  char here[4096];
  snprintf(here, sizeof here, "%s", __FILE__);
  const char *dir = dirname(here);
  snprintf(sample_path, sizeof sample_path, "%s/data/bpftrace_pp2_m4.txt", dir);
  snprintf(program_path, sizeof program_path, "%s/data/program_pp2_m4.json", dir);
  snprintf(tmp, sizeof tmp, "/tmp/fivefold_cmd_trace_%d", (int)getpid());
  return access(sample_path, R_OK);
}

/* Runs the command with a space-separated argument line (%s is replaced by
 * the temporary prefix), output captured into *out. Returns the exit code. */
static int run(const char *line, char **out) {
  char expanded[9000];
  snprintf(expanded, sizeof expanded, line, tmp, tmp, tmp, tmp);
  char *copy = strdup(expanded);
  char *argv[64];
  int argc = 0;
  argv[argc++] = "trace";
  for (char *save = NULL, *tok = strtok_r(copy, " ", &save); tok && argc < 63; tok = strtok_r(NULL, " ", &save))
    argv[argc++] = tok;
  argv[argc] = NULL;
  char path[] = "/tmp/fivefold_cmd_trace_out_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stdout);
  fflush(stderr);
  int saved_out = dup(1), saved_err = dup(2);
  dup2(fd, 1);
  dup2(fd, 2);
  int rc = cmd_trace(argc, argv);
  fflush(stdout);
  fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  lseek(fd, 0, SEEK_SET);
  off_t n = lseek(fd, 0, SEEK_END);
  lseek(fd, 0, SEEK_SET);
  *out = malloc((size_t)n + 1);
  ssize_t got = read(fd, *out, (size_t)n);
  (*out)[got > 0 ? got : 0] = '\0';
  close(fd);
  remove(path);
  free(copy);
  return rc;
}

static void expect(const char *line, int code, const char *needle) {
  char *out;
  int rc = run(line, &out);
  if (rc != code || (needle && !strstr(out, needle)))
    fail_msg("trace %s: exit %d (expected %d), output:\n%s\n(expected to contain: %s)", line, rc, code, out,
             needle ? needle : "");
  free(out);
}

static void test_usage(void **state) {
  (void)state;
  expect("--help", 0, "compare-ready FILE");
  expect("frobnicate", 2, "unknown subcommand");
  expect("record -- true", 2, "fivefold train --trace-steps");
  expect("record --ebpf", 2, "no command given");
  expect("record --ebpf --steps 3:1 -- true", 2, "--trace-steps");
  expect("analyze", 2, "no trace file");
  expect("analyze a b", 2, "one trace file");
  expect("analyze --critical-only x.json", 2, "--critical-only applies to --dot");
  expect("analyze /nonexistent/trace.json", 1, "cannot open trace");
  expect("compare-ready", 2, "no trace file");
}

static void test_record_from_raw_then_analyze(void **state) {
  (void)state;
  char line[8400];
  snprintf(line, sizeof line, "record --ebpf --from-raw %s --program %s -o %%s.json", sample_path, program_path);
  expect(line, 0, "with on-CPU times");
  expect("analyze %s.json --dot %s.dot", 0, "critical path");
  expect("analyze %s.json --iteration 1 --dot %s.dot --critical-only", 0, "wrote the critical path of iteration 1");
  expect("analyze %s.json --iteration 7", 1, "not in the trace");
  char *out;
  assert_int_equal(run("analyze %s.json --all-path", &out), 0);
  assert_non_null(strstr(out, "on-CPU mean"));
  assert_non_null(strstr(out, "bubble:"));
  assert_non_null(strstr(out, "straggler:"));
  assert_non_null(strstr(out, "exposed communication:"));
  free(out);
  char dot[128];
  snprintf(dot, sizeof dot, "%s.dot", tmp);
  FILE *f = fopen(dot, "r");
  assert_non_null(f);
  char head[32] = {0};
  assert_true(fread(head, 1, sizeof head - 1, f) > 0);
  fclose(f);
  assert_non_null(strstr(head, "digraph"));
  remove(dot);
}

static void test_compare_ready(void **state) {
  (void)state;
  char line[8400];
  snprintf(line, sizeof line, "record --ebpf --from-raw %s --program %s -o %%s.json", sample_path, program_path);
  expect(line, 0, NULL);
  expect("compare-ready %s.json", 0, "ready: every action");
  /* A prediction of the same program, priced with unit costs. */
  Error err = {0};
  SchedProgram *prog;
  assert_int_equal(sched_program_read_json(program_path, &prog, &err), ERR_OK);
  SchedUnitCosts costs = sched_unit_costs_default();
  SchedEvalOptions opts = sched_unit_eval_options(&costs, SCHED_SEND_EAGER);
  SchedEval ev;
  assert_int_equal(sched_evaluate(prog, &opts, &ev, &err), ERR_OK);
  char pred[128];
  snprintf(pred, sizeof pred, "%s_pred.json", tmp);
  assert_int_equal(sched_trace_write(prog, &ev, 1000.0, pred, &err), ERR_OK);
  sched_eval_free(&ev);
  sched_program_free(prog);
  expect("compare-ready %s.json --predicted %s_pred.json", 0, "predicted ms");
  /* A prediction of another program. */
  SchedConfig other = {.schedule = SCHED_SCHEDULE_GPIPE, .pp = 2, .vpp = 1, .microbatches = 3};
  assert_int_equal(sched_build(&other, &prog, &err), ERR_OK);
  assert_int_equal(sched_evaluate(prog, &opts, &ev, &err), ERR_OK);
  assert_int_equal(sched_trace_write(prog, &ev, 1000.0, pred, &err), ERR_OK);
  sched_eval_free(&ev);
  sched_program_free(prog);
  expect("compare-ready %s.json --predicted %s_pred.json", 1, "another program");
  remove(pred);
  /* Without the program the trace can be neither analyzed nor compared. */
  snprintf(line, sizeof line, "record --ebpf --from-raw %s -o %%s.json", sample_path);
  expect(line, 0, "cannot be analyzed until it has one");
  expect("compare-ready %s.json", 1, "no schedule program");
  expect("analyze %s.json", 1, "no schedule program");
  char json[128];
  snprintf(json, sizeof json, "%s.json", tmp);
  remove(json);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_usage),
      cmocka_unit_test(test_record_from_raw_then_analyze),
      cmocka_unit_test(test_compare_ready),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
