/* `fivefold schedule` end to end, in process (the command's source is
 * compiled into this test so it runs without the fivefold binary): help
 * lists every option, bad usage exits 2, a run prints the table, the
 * makespan and the bubble beside the textbook value, and writes a program
 * JSON and a Chrome trace that parse back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/cmd_schedule.c"

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  buf[got] = '\0';
  fclose(f);
  return buf;
}

/* Runs the command with a space-separated argument line, stdout and stderr
 * captured into *out (malloc'd). Returns the exit code. */
static int run(const char *line, char **out) {
  char *copy = strdup(line);
  char *argv[64];
  int argc = 0;
  argv[argc++] = "schedule";
  for (char *save = NULL, *tok = strtok_r(copy, " ", &save); tok && argc < 63; tok = strtok_r(NULL, " ", &save))
    argv[argc++] = tok;
  argv[argc] = NULL;
  char path[] = "/tmp/fivefold_cmd_schedule_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  fflush(stdout);
  fflush(stderr);
  int saved_out = dup(1), saved_err = dup(2);
  dup2(fd, 1);
  dup2(fd, 2);
  int rc = cmd_schedule(argc, argv);
  fflush(stdout);
  fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  close(fd);
  *out = read_file(path);
  unlink(path);
  free(copy);
  return rc;
}

static void expect_output(const char *out, const char *needle) {
  if (!strstr(out, needle)) print_error("missing '%s' in output:\n%s\n", needle, out);
  assert_non_null(strstr(out, needle));
}

static void test_help(void **state) {
  (void)state;
  char *out;
  assert_int_equal(run("--help", &out), 0);
  static const char *opts[] = {"--pp", "--vpp", "--microbatches", "--schedule", "--layers ", "--layers-per-stage",
                               "--embedding-weight", "--head-weight", "--allow-empty-stages", "--layer-costs",
                               "--fwd-cost", "--bwd-cost", "--comm-cost", "--blocking", "--view", "--trace", "--json",
                               "--help"};
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) expect_output(out, opts[i]);
  free(out);
}

static void test_bad_usage(void **state) {
  (void)state;
  static const char *lines[][2] = {
      {"--pp 4 --microbatches 8 --frobnicate", "unknown option '--frobnicate'"},
      {"--pp 0", "--pp expects an integer >= 1"},
      {"--pp", "--pp needs a value"},
      {"--pp 4 --vpp 2 --microbatches 6", "6 is not a multiple of 4"},
      {"--pp 4 --microbatches 8 --schedule zigzag", "--schedule must be none, gpipe, 1f1b, zb-h1 or interleaved"},
      {"--pp 2 --microbatches 4 --layers-per-stage 3", "1 layer counts given for 2 stages"},
      {"--pp 2 --microbatches 4 --layers-per-stage 3,x", "--layers-per-stage"},
      {"--pp 4 --microbatches 8 --layers 3", "3 layers cannot fill 4 stages"},
      {"--pp 2 --layer-costs", "--layer-costs needs --layers"},
      {"--pp 2 --comm-cost -1", "--comm-cost expects a number >= 0"},
      {"--pp 2 --view pretty", "--view must be actions or time"},
      {"--pp 2 --blocking=1", "--blocking takes no value"},
  };
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    char *out;
    int rc = run(lines[i][0], &out);
    if (rc != 2) print_error("'%s' exited %d:\n%s\n", lines[i][0], rc, out);
    assert_int_equal(rc, 2);
    expect_output(out, lines[i][1]);
    free(out);
  }
}

static void test_run_writes_json_and_trace(void **state) {
  (void)state;
  char json[] = "/tmp/fivefold_cmd_prog_XXXXXX", trace[] = "/tmp/fivefold_cmd_trace_XXXXXX";
  close(mkstemp(json));
  close(mkstemp(trace));
  char line[256];
  snprintf(line, sizeof line, "--pp 4 --microbatches 8 --schedule 1f1b --trace %s --json %s", trace, json);
  char *out;
  assert_int_equal(run(line, &out), 0);
  expect_output(out, "schedule 1f1b: pp 4, vpp 1, 8 micro-batches");
  expect_output(out, "check passed");
  expect_output(out, "| rank 3");
  expect_output(out, "makespan 33.00 units");
  expect_output(out, "bubble 27.27% of rank time (textbook (p-1)/(m+p-1) = 27.27%)");
  expect_output(out, "rank 0: busy 24.00, idle 9.00 units (27.3%), warm-up 3 forwards");
  free(out);

  SchedProgram *prog = NULL;
  Error err = {0, ""};
  assert_int_equal(sched_program_read_json(json, &prog, &err), ERR_OK);
  assert_int_equal(prog->config.schedule, SCHED_SCHEDULE_1F1B);
  assert_int_equal(prog->num_ranks, 4);
  assert_int_equal(sched_check(prog, NULL), ERR_OK);
  sched_program_free(prog);

  char *text = read_file(trace);
  assert_non_null(text);
  cJSON *root = cJSON_Parse(text);
  assert_non_null(root);
  const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
  assert_true(cJSON_IsArray(events) && cJSON_GetArraySize(events) > 100);
  cJSON_Delete(root);
  free(text);
  unlink(json);
  unlink(trace);
}

static void test_interleaved_time_view(void **state) {
  (void)state;
  char *out;
  assert_int_equal(run("--pp=4 --vpp=2 --microbatches=8 --view time", &out), 0);
  expect_output(out, "schedule interleaved: pp 4, vpp 2");
  expect_output(out, "    0.00 | F0.0       |");
  expect_output(out, "makespan 57.00 units");
  expect_output(out, "interleaved (p-1)/(v*m+p-1) = 15.79%");
  free(out);
}

static void test_partition_and_costs(void **state) {
  (void)state;
  char *out;
  assert_int_equal(run("--pp 4 --microbatches 8 --layers 10 --head-weight 2 --layer-costs --comm-cost 0.5 --blocking", &out),
                   0);
  expect_output(out, "partition of 10 layers over 4 stages");
  expect_output(out, "+head/loss");
  expect_output(out, "check passed");
  expect_output(out, "transfer 0.5, blocking sends");
  free(out);
  assert_int_equal(run("--microbatches 3", &out), 0);
  expect_output(out, "schedule none: pp 1, vpp 1, 3 micro-batches");
  expect_output(out, "makespan 9.00 units");
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help),
      cmocka_unit_test(test_bad_usage),
      cmocka_unit_test(test_run_writes_json_and_trace),
      cmocka_unit_test(test_interleaved_time_view),
      cmocka_unit_test(test_partition_and_costs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
