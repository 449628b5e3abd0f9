/* `fivefold trace` in process (the command's source is compiled into this
 * test): usage errors exit 2, `record --ebpf --from-raw` turns the recorded
 * bpftrace sample into a trace file, `analyze` reports on it and writes
 * DOT, and `compare-ready` accepts a complete trace, checks a predicted
 * trace of the same program side by side, and refuses a prediction of
 * another program and a trace without a program; `compare` prices a trace
 * without a model with unit costs (and says so) and one with a model with
 * the planner on the cluster named. */
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
  expect("--help", 0, "compare FILE [--cluster");
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

/* Writes root as JSON to path. */
static void write_json(const char *path, const cJSON *root) {
  char *text = cJSON_Print(root);
  assert_non_null(text);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  cJSON_free(text);
}

/* Adds otherData.model (a tiny Llama) and a training section to the trace
 * at path, so `trace compare` takes the planner's path. */
static void add_model(const char *path) {
  char here[4096], model_path[4200];
  snprintf(here, sizeof here, "%s", __FILE__);
  snprintf(model_path, sizeof model_path, "%s/../../configs/models/tiny/llama.json", dirname(here));
  Error err = {0};
  ModelConfig model;
  assert_int_equal(model_config_load(&model, model_path, &err), ERR_OK);
  char *text = read_text(path);
  assert_non_null(text);
  cJSON *root = cJSON_Parse(text);
  free(text);
  cJSON *other = cJSON_GetObjectItem(root, "otherData");
  cJSON_AddItemToObject(other, "model", model_config_to_json(&model));
  cJSON *config = cJSON_AddObjectToObject(other, "config");
  cJSON *training = cJSON_AddObjectToObject(config, "training");
  cJSON_AddNumberToObject(training, "seq_len", 64);
  cJSON_AddNumberToObject(training, "micro_batch_size", 1);
  write_json(path, root);
  cJSON_Delete(root);
}

static void test_compare(void **state) {
  (void)state;
  expect("compare", 2, "no trace file");
  expect("compare a b", 2, "one trace file");
  expect("compare --frob x.json", 2, "unknown option");
  char line[8400];
  snprintf(line, sizeof line, "record --ebpf --from-raw %s --program %s -o %%s.json", sample_path, program_path);
  expect(line, 0, NULL);
  /* No model: unit costs scaled to the measured FWD, which therefore
   * agrees exactly, and the output says so. */
  char *out;
  assert_int_equal(run("compare %s.json", &out), 0);
  assert_non_null(strstr(out, "unit costs"));
  assert_non_null(strstr(out, "FWD agrees by construction"));
  const char *fwd = strstr(out, "\n  FWD ");
  assert_non_null(fwd);
  assert_non_null(strstr(fwd, " 0.0%"));
  assert_non_null(strstr(out, "\n  iteration "));
  assert_non_null(strstr(out, "\n  BWD "));
  free(out);
  /* A model: the planner prices it, on the cluster the user names. */
  char json[128];
  snprintf(json, sizeof json, "%s.json", tmp);
  add_model(json);
  expect("compare %s.json", 1, "names no cluster spec");
  expect("compare %s.json --cluster no-such-cluster", 1, "no-such-cluster");
  char here[4096], cluster[4200];
  snprintf(here, sizeof here, "%s", __FILE__);
  snprintf(cluster, sizeof cluster, "compare %%s.json --cluster %s/../../configs/clusters/dgx-h100.json", dirname(here));
  assert_int_equal(run(cluster, &out), 0);
  assert_non_null(strstr(out, "planner's simulator"));
  assert_non_null(strstr(out, "\n  FWD "));
  assert_non_null(strstr(out, "\n  RECV_ACT "));
  /* dgx-h100 was not calibrated where the trace ran: a warning, no errors. */
  assert_non_null(strstr(out, "warning: the trace was recorded by fivefold's CPU runtime"));
  assert_non_null(strstr(out, "was not calibrated on it"));
  const char *it = strstr(out, "\n  iteration ");
  assert_non_null(it);
  const char *eol = strchr(it + 1, '\n');
  assert_non_null(eol);
  assert_non_null(strstr(it, " n/a"));
  assert_true(strstr(it, " n/a") < eol);
  free(out);
  /* A recorded plan whose mapping is not a permutation is refused naming
   * the field; a --plan that cannot be read is refused naming the file. */
  {
    char *txt = read_text(json);
    assert_non_null(txt);
    cJSON *tr = cJSON_Parse(txt);
    free(txt);
    cJSON *plan = cJSON_AddObjectToObject(cJSON_GetObjectItem(tr, "otherData"), "plan");
    cJSON_AddStringToObject(plan, "file", "recorded-plan.json");
    cJSON *mp = cJSON_AddObjectToObject(plan, "mapping");
    int twice[2] = {0, 0};
    cJSON_AddItemToObject(mp, "device_of_rank", cJSON_CreateIntArray(twice, 2));
    char bad[160];
    snprintf(bad, sizeof bad, "%s_plan.json", tmp);
    write_json(bad, tr);
    cJSON_Delete(tr);
    snprintf(here, sizeof here, "%s", __FILE__);
    snprintf(cluster, sizeof cluster, "compare %%s_plan.json --cluster %s/../../configs/clusters/dgx-h100.json",
             dirname(here));
    expect(cluster, 1, "otherData.plan.mapping.device_of_rank");
    expect("compare %s.json --plan no-such-plan.json", 1, "no-such-plan.json");
    remove(bad);
  }
  /* The same spec with a calibrated machine's runtime facts: no warning,
   * errors in per cent, and the facts priced (fp32). */
  char spec_path[160], spec_src[4200];
  snprintf(spec_path, sizeof spec_path, "%s_spec.json", tmp);
  snprintf(here, sizeof here, "%s", __FILE__);
  snprintf(spec_src, sizeof spec_src, "%s/../../configs/clusters/dgx-h100.json", dirname(here));
  char *text = read_text(spec_src);
  assert_non_null(text);
  cJSON *spec = cJSON_Parse(text);
  free(text);
  cJSON *rt = cJSON_AddObjectToObject(spec, "runtime");
  cJSON_AddStringToObject(rt, "device", "cpu");
  write_json(spec_path, spec);
  snprintf(cluster, sizeof cluster, "compare %%s.json --cluster %s", spec_path);
  assert_int_equal(run(cluster, &out), 0);
  assert_null(strstr(out, "warning:"));
  assert_non_null(strstr(out, "fp32"));
  assert_non_null(strstr(out, "the spec's runtime facts: cpu runtime"));
  it = strstr(out, "\n  iteration ");
  assert_non_null(it);
  eol = strchr(it + 1, '\n');
  const char *pct = strchr(it, '%');
  assert_true(pct && pct < eol);
  free(out);
  /* Calibrated on another host than the trace's: a warning naming both. */
  cJSON_AddStringToObject(rt, "host", "calibrated-host");
  write_json(spec_path, spec);
  cJSON_Delete(spec);
  text = read_text(json);
  cJSON *root = cJSON_Parse(text);
  free(text);
  cJSON *ranks = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "otherData"), "ranks");
  cJSON *r0 = cJSON_GetArrayItem(ranks, 0);
  assert_non_null(r0);
  cJSON_DeleteItemFromObject(r0, "host");
  cJSON_AddStringToObject(r0, "host", "traced-host");
  write_json(json, root);
  cJSON_Delete(root);
  assert_int_equal(run(cluster, &out), 0);
  assert_non_null(strstr(out, "warning: the trace was recorded on host traced-host"));
  assert_non_null(strstr(out, "calibrated on host calibrated-host"));
  free(out);
  remove(spec_path);
  remove(json);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_usage),
      cmocka_unit_test(test_record_from_raw_then_analyze),
      cmocka_unit_test(test_compare_ready),
      cmocka_unit_test(test_compare),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
