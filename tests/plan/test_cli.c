/* `fivefold simulate` and `fivefold plan` as a user calls them: --help lists
 * every option the parser accepts, bad usage exits 2 with a message,
 * models and clusters are found by name or path, simulate writes a Chrome
 * trace, and plan writes a plan JSON whose "parallel" section has every
 * field `fivefold train --plan` reads. The command sources are compiled
 * into this test (they live in the binary, not in a library). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_plan.c"
#include "cli/cmd_plan_accuracy.c"
#include "cli/cmd_plan_args.c"
#include "cli/cmd_plan_print.c"
#include "plan/calibrate_fit.h"
#include "plan/plan_file.h"
#include "plan_test_util.h"

static int quiet_fd = -1;

/* Runs a command with its stdout (and stderr) sent to /dev/null. */
static int run_cmd(int (*cmd)(int, char **), int argc, char **argv) {
  fflush(stdout);
  fflush(stderr);
  int out = dup(1), err = dup(2);
  dup2(quiet_fd, 1);
  dup2(quiet_fd, 2);
  int rc = cmd(argc, argv);
  fflush(stdout);
  fflush(stderr);
  dup2(out, 1);
  dup2(err, 2);
  close(out);
  close(err);
  return rc;
}

/* Runs a command with its stdout and stderr written to `path`. */
static int run_to_file(int (*cmd)(int, char **), const char *path, int argc, char **argv) {
  fflush(stdout);
  fflush(stderr);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  int out = dup(1), err = dup(2);
  dup2(fd, 1);
  dup2(fd, 2);
  int rc = cmd(argc, argv);
  fflush(stdout);
  fflush(stderr);
  dup2(out, 1);
  dup2(err, 2);
  close(out);
  close(err);
  close(fd);
  return rc;
}

#define RUN(cmd, ...)                                           \
  ({                                                            \
    char *args_[] = {__VA_ARGS__};                              \
    run_cmd(cmd, (int)(sizeof args_ / sizeof args_[0]), args_); \
  })

static int setup(void **state) {
  (void)state;
  quiet_fd = open("/dev/null", O_WRONLY);
  char dir[4200];
  plan_test_path(dir, sizeof dir, "configs");
  setenv("FIVEFOLD_CONFIGS", dir, 1);
  return quiet_fd < 0;
}

static int teardown(void **state) {
  (void)state;
  close(quiet_fd);
  return 0;
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  static char buf[1 << 22];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static void test_help_lists_every_option(void **state) {
  (void)state;
  static const char *const common[] = {"--model", "--cluster", "--gpus", "--seq", "--global-batch", "--dtype",
                                       "--moe-imbalance", "--expert-load", "--tp-overlap", "--cp-overlap",
                                       "--ep-overlap", "--dp-overlap", "--param-gather-overlap", "--algo", "--help"};
  static const char *const sim[] = {"--plan", "--tp", "--cp", "--pp", "--vpp", "--ep", "--etp", "--mbs", "--recompute",
                                    "--distributed-optimizer", "--schedule", "--layers-per-stage", "--trace", "--quiet",
                                    "--dispatcher", "--moe-tp-replicated", "--pipeline-split", "--flops",
                                    "--recompute-modules", "--recompute-method", "--recompute-num-layers",
                                    "--attention-unfused"};
  static const char *const plan[] = {"--top", "--out", "--explain", "--mbs-list", "--recompute-list", "--max-tp",
                                     "--max-cp", "--max-pp", "--max-vpp", "--max-ep", "--max-etp", "--no-folding",
                                     "--no-distributed-optimizer", "--distributed-optimizer", "--runtime",
                                     "--moe-tp-replicated", "--no-moe-tp-replicated"};
  char path[] = "/tmp/fivefold_plan_help_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  plan_cli_simulate_usage(f);
  fclose(f);
  char *text = read_all(path);
  for (size_t i = 0; i < sizeof common / sizeof *common; i++) assert_non_null(strstr(text, common[i]));
  for (size_t i = 0; i < sizeof sim / sizeof *sim; i++) assert_non_null(strstr(text, sim[i]));
  f = fopen(path, "w");
  plan_cli_plan_usage(f);
  fclose(f);
  text = read_all(path);
  for (size_t i = 0; i < sizeof common / sizeof *common; i++) assert_non_null(strstr(text, common[i]));
  for (size_t i = 0; i < sizeof plan / sizeof *plan; i++) assert_non_null(strstr(text, plan[i]));
  remove(path);
  assert_int_equal(RUN(cmd_simulate, "simulate", "--help"), 0);
  assert_int_equal(RUN(cmd_plan, "plan", "-h"), 0);
}

static void test_bad_usage(void **state) {
  (void)state;
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "mixtral-8x7b"), 2);
  assert_int_equal(RUN(cmd_simulate, "simulate", "--bogus", "1"), 2);
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "x",
                       "--seq", "4096", "--global-batch", "64"),
                   2);
  /* Valid flags, impossible configuration: usage error with a reason. */
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16",
                       "--seq", "4096", "--global-batch", "64", "--tp", "3"),
                   2);
  /* Unknown model name: a runtime failure naming where it looked. */
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "no-such-model", "--cluster", "dgx-h100", "--gpus", "16",
                       "--seq", "4096", "--global-batch", "64"),
                   1);
  assert_int_equal(RUN(cmd_plan, "plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16", "--seq",
                       "4096", "--global-batch", "64", "--tp", "2"),
                   2);
  assert_int_equal(RUN(cmd_plan, "plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16", "--seq",
                       "4096", "--global-batch", "64", "--recompute-list", "some"),
                   2);
  /* The runtime descriptions: simulate only, known values only. */
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16",
                       "--seq", "4096", "--global-batch", "64", "--ep", "2", "--dispatcher", "broadcast"),
                   2);
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16",
                       "--seq", "4096", "--global-batch", "64", "--param-gather-overlap", "1.5"),
                   2);
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16",
                       "--seq", "4096", "--global-batch", "64", "--tp", "2", "--ep", "2", "--dispatcher", "allgather",
                       "--moe-tp-replicated", "--dp-overlap", "0", "--param-gather-overlap", "0", "--quiet"),
                   0);
}

/* --expert-load: E values for every MoE layer, or E per MoE layer (a run's
 * expert_tokens); any other count is refused. Mixtral-8x7B: 8 experts, 32
 * MoE layers. */
static void test_expert_load_rows(void **state) {
  (void)state;
  char rows2[256] = "", rows33[4096] = "";
  for (int i = 0; i < 16; i++)
    snprintf(rows2 + strlen(rows2), sizeof rows2 - strlen(rows2), "%s%d", i ? "," : "", 10 + i);
  for (int i = 0; i < 8 * 33; i++)
    snprintf(rows33 + strlen(rows33), sizeof rows33 - strlen(rows33), "%s1", i ? "," : "");
#define SIM_LOAD(list)                                                                                             \
  RUN(cmd_simulate, "simulate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16", "--seq", "4096", \
      "--global-batch", "64", "--ep", "8", "--quiet", "--expert-load", list)
  assert_int_equal(SIM_LOAD("1,2,3,4,5,6,7,8"), 0);
  assert_int_equal(SIM_LOAD(rows2), 0);
  assert_int_not_equal(SIM_LOAD("1,2,3,4,5,6,7,8,9,10,11,12"), 0); /* not a multiple of 8 */
  assert_int_not_equal(SIM_LOAD(rows33), 0);                       /* 33 rows, 32 MoE layers */
#undef SIM_LOAD
}

static void test_simulate_with_trace(void **state) {
  (void)state;
  char trace[] = "/tmp/fivefold_plan_cli_trace_XXXXXX";
  int fd = mkstemp(trace);
  assert_true(fd >= 0);
  close(fd);
  char model_path[4200];
  plan_test_path(model_path, sizeof model_path, "configs/models/mixtral-8x22b.json");
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", model_path, "--cluster", "DGX-H100", "--gpus", "128",
                       "--seq", "4096", "--global-batch", "256", "--tp", "2", "--pp", "8", "--vpp", "7", "--ep", "8",
                       "--etp", "1", "--mbs", "1", "--recompute", "none", "--distributed-optimizer", "--trace", trace),
                   0);
  char *text = read_all(trace);
  assert_non_null(text);
  cJSON *j = cJSON_Parse(text);
  assert_non_null(j);
  assert_true(cJSON_GetArraySize(cJSON_GetObjectItem(j, "traceEvents")) > 1000);
  cJSON_Delete(j);
  remove(trace);
  /* An explicit uneven partition and GPipe. */
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "llama-3-8b", "--cluster", "dgx-a100", "--gpus", "16",
                       "--seq", "2048", "--global-batch", "32", "--pp", "4", "--schedule", "gpipe",
                       "--layers-per-stage", "9,8,8,7", "--quiet"),
                   0);
}

/* --schedule is what simulates: every name is stored, and one that does not
 * fit pp / vpp is refused instead of replaced by the derived schedule. */
static void test_simulate_schedule_is_used(void **state) {
  (void)state;
  static const struct {
    const char *name;
    SchedScheduleKind kind;
  } cases[] = {{"none", SCHED_SCHEDULE_NONE},
               {"gpipe", SCHED_SCHEDULE_GPIPE},
               {"1f1b", SCHED_SCHEDULE_1F1B},
               {"interleaved", SCHED_SCHEDULE_INTERLEAVED}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    PlanCli *c = calloc(1, sizeof *c);
    assert_non_null(c);
    plan_cli_init(c, "simulate");
    char *argv[] = {"simulate", "--model", "m", "--cluster", "x", "--gpus", "2", "--seq", "8", "--global-batch", "2",
                    "--schedule", (char *)cases[i].name};
    assert_int_equal(plan_cli_parse_args((int)(sizeof argv / sizeof argv[0]), argv, c, 1), 0);
    assert_int_equal(c->cfg.schedule, cases[i].kind);
    assert_true(c->cfg.schedule_given);
    free(c);
  }
  /* Given schedules that do not fit are errors (exit 2), not silently 1F1B. */
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "llama-3-8b", "--cluster", "dgx-a100", "--gpus", "16",
                       "--seq", "2048", "--global-batch", "32", "--pp", "2", "--schedule", "none", "--quiet"),
                   2);
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "llama-3-8b", "--cluster", "dgx-a100", "--gpus", "16",
                       "--seq", "2048", "--global-batch", "32", "--pp", "2", "--vpp", "2", "--schedule", "1f1b",
                       "--quiet"),
                   2);
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "llama-3-8b", "--cluster", "dgx-a100", "--gpus", "16",
                       "--seq", "2048", "--global-batch", "32", "--pp", "2", "--schedule", "1f1b", "--quiet"),
                   0);
  /* The same through the library: a given schedule survives plan_config_finish. */
  ModelConfig model;
  ClusterSpec cluster;
  memset(&cluster, 0, sizeof cluster);
  char path[4200];
  Error err = {0, ""};
  assert_int_equal(plan_find_config("models", "llama-3-8b", path, sizeof path, &err), 0);
  assert_int_equal(model_config_load(&model, path, &err), 0);
  assert_int_equal(plan_find_config("clusters", "dgx-a100", path, sizeof path, &err), 0);
  assert_int_equal(cluster_spec_load(&cluster, path, &err), 0);
  PlanConfig cfg;
  plan_config_init(&cfg, 2048, 32, 1);
  cfg.par.dp = 0;
  cfg.par.pp = 2;
  cfg.schedule = SCHED_SCHEDULE_GPIPE;
  cfg.schedule_given = 1;
  assert_int_equal(plan_config_finish(&cfg, &model, &cluster, 16, &err), 0);
  assert_int_equal(cfg.schedule, SCHED_SCHEDULE_GPIPE);
  plan_config_init(&cfg, 2048, 32, 1);
  cfg.par.dp = 0;
  cfg.par.pp = 2;
  cfg.schedule = SCHED_SCHEDULE_NONE;
  cfg.schedule_given = 1;
  assert_int_not_equal(plan_config_finish(&cfg, &model, &cluster, 16, &err), 0);
  assert_non_null(strstr(err.msg, "schedule none"));
  cluster_spec_free(&cluster);
}

static void test_plan_writes_plan_json(void **state) {
  (void)state;
  char out[] = "/tmp/fivefold_plan_cli_plan_XXXXXX";
  int fd = mkstemp(out);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(RUN(cmd_plan, "plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "16", "--seq",
                       "4096", "--global-batch", "64", "--top", "3", "--out", out, "--explain", "--max-vpp", "2",
                       "--mbs-list", "1,2"),
                   0);
  char *text = read_all(out);
  assert_non_null(text);
  cJSON *j = cJSON_Parse(text);
  assert_non_null(j);
  assert_string_equal(cJSON_GetObjectItem(j, "format")->valuestring, "fivefold.plan");
  cJSON *par = cJSON_GetObjectItem(j, "parallel");
  assert_non_null(par);
  static const char *const fields[] = {"tp", "cp", "dp", "pp", "vpp", "ep", "etp", "micro_batch_size",
                                       "global_batch_size", "schedule", "recompute", "distributed_optimizer",
                                       "layers_per_stage"};
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
    if (!cJSON_GetObjectItem(par, fields[i])) print_error("missing parallel.%s\n", fields[i]);
    assert_non_null(cJSON_GetObjectItem(par, fields[i]));
  }
  int tp = cJSON_GetObjectItem(par, "tp")->valueint, cp = cJSON_GetObjectItem(par, "cp")->valueint;
  int dp = cJSON_GetObjectItem(par, "dp")->valueint, pp = cJSON_GetObjectItem(par, "pp")->valueint;
  assert_int_equal(tp * cp * dp * pp, 16);
  assert_int_equal(cJSON_GetObjectItem(par, "global_batch_size")->valueint, 64);
  cJSON *layers = cJSON_GetObjectItem(par, "layers_per_stage");
  int sum = 0, n = cJSON_GetArraySize(layers);
  assert_int_equal(n, pp * cJSON_GetObjectItem(par, "vpp")->valueint);
  for (int i = 0; i < n; i++) sum += cJSON_GetArrayItem(layers, i)->valueint;
  assert_int_equal(sum, 32);
  cJSON *pred = cJSON_GetObjectItem(j, "prediction");
  assert_true(cJSON_GetObjectItem(pred, "mfu")->valuedouble > 0.1);
  assert_true(cJSON_GetObjectItem(pred, "peak_memory_GiB")->valuedouble <= 80.0);
  /* The bucket search's size, which train --plan applies, and the
   * prediction made with it. */
  cJSON *buckets = cJSON_GetObjectItem(j, "buckets");
  if (dp * cp > 1) {
    assert_non_null(buckets);
    double mb = cJSON_GetObjectItem(buckets, "bucket_mb")->valuedouble;
    assert_true(mb > 0);
    assert_true(cJSON_GetObjectItem(buckets, "step_time_s")->valuedouble <=
                cJSON_GetObjectItem(buckets, "default_step_time_s")->valuedouble);
    assert_true(fabs(cJSON_GetObjectItem(buckets, "step_time_s")->valuedouble -
                     cJSON_GetObjectItem(pred, "step_time_s")->valuedouble) <=
                1e-9 * cJSON_GetObjectItem(pred, "step_time_s")->valuedouble);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(buckets, "buckets_per_stage")), n);
    PlanChoice pc;
    Error err = {0, ""};
    assert_int_equal(plan_file_read(out, &pc, &err), 0);
    assert_true(fabs(pc.bucket_mb - mb) <= 1e-9 * mb);
  }
  cJSON_Delete(j);
  remove(out);
}

/* The searches after the ranking: device mapping on a tiered cluster,
 * partition refinement (default) and stage replication, as plan runs them;
 * the written plan reads back (stage widths included). */
static void test_plan_mapping_refinement_replication(void **state) {
  (void)state;
  char out[] = "/tmp/fivefold_plan_cli_map_XXXXXX";
  int fd = mkstemp(out);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(RUN(cmd_plan, "plan", "--model", "llama-3-8b", "--cluster", "h100-two-tier", "--gpus", "12",
                       "--seq", "4096", "--global-batch", "48", "--top", "2", "--mbs-list", "2", "--max-vpp", "1",
                       "--map-devices", "--replicate-stages", "--explain", "--out", out),
                   0);
  PlanChoice pc;
  Error err = {0, ""};
  int rc = plan_file_read(out, &pc, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  remove(out);
  /* The flags belong to plan only. */
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "8",
                       "--seq", "4096", "--global-batch", "8", "--map-devices"),
                   2);
}

static void assert_has(const char *text, const char *needle) {
  if (!strstr(text, needle)) fail_msg("expected \"%s\" in:\n%s", needle, text);
}

/* What a newcomer tried: `plan --model` on a run config (its model
 * section, inline or a path relative to the run config), the simulate
 * line plan prints (which runs as printed), and an unknown model name that
 * lists the names there are. */
static void test_run_config_and_names(void **state) {
  (void)state;
  char dir[] = "/tmp/fivefold_plan_cli_run_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char run_inline[4200], run_path[4200], model[4200], log[4200];
  snprintf(run_inline, sizeof run_inline, "%s/inline.json", dir);
  snprintf(run_path, sizeof run_path, "%s/by-path.json", dir);
  snprintf(model, sizeof model, "%s/tiny.json", dir);
  snprintf(log, sizeof log, "%s/out.txt", dir);
  static const char MODEL[] =
      "{\"model_type\": \"fivefold\", \"vocab_size\": 4096, \"hidden_size\": 256, \"num_hidden_layers\": 4, "
      "\"num_attention_heads\": 4, \"intermediate_size\": 512, \"num_experts\": 4, \"num_experts_per_tok\": 2, "
      "\"moe_intermediate_size\": 256}";
  FILE *f = fopen(run_inline, "w");
  assert_non_null(f);
  fprintf(f, "{\"description\": \"a run\", \"model\": %s, \"training\": {\"steps\": 3}, \"data\": {}}", MODEL);
  fclose(f);
  f = fopen(model, "w");
  assert_non_null(f);
  fputs(MODEL, f);
  fclose(f);
  f = fopen(run_path, "w");
  assert_non_null(f);
  fputs("{\"description\": \"a run\", \"model\": \"tiny.json\", \"training\": {}}", f);
  fclose(f);

  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", run_path, "--cluster", "dgx-h100", "--gpus", "8", "--seq",
                       "1024", "--global-batch", "64", "--quiet"),
                   0);
  char plan_json[4200];
  snprintf(plan_json, sizeof plan_json, "%s/plan.json", dir);
  char *argv[] = {"plan", "--model", run_inline, "--cluster", "dgx-h100", "--gpus", "8", "--seq", "1024",
                  "--global-batch", "64", "--top", "2", "--mbs-list", "1,2", "--max-pp", "2", "--out", plan_json};
  assert_int_equal(run_to_file(cmd_plan, log, (int)(sizeof argv / sizeof *argv), argv), 0);
  char *text = read_all(log);
  assert_non_null(text);
  const char *line = strstr(text, "simulate the best: fivefold simulate ");
  if (!line) fail_msg("plan printed no simulate line:\n%s", text);
  /* The line runs as printed. */
  char copy[2048];
  snprintf(copy, sizeof copy, "%s", line + strlen("simulate the best: fivefold "));
  char *nl = strchr(copy, '\n');
  if (nl) *nl = '\0';
  char *words[64];
  int n = 0;
  for (char *w = strtok(copy, " "); w && n < 63; w = strtok(NULL, " ")) words[n++] = w;
  assert_has(line, "--model ");
  assert_has(line, "--mbs ");
  words[n++] = "--quiet";
  char by_flags[4200], by_plan[4200];
  snprintf(by_flags, sizeof by_flags, "%s/by-flags.txt", dir);
  snprintf(by_plan, sizeof by_plan, "%s/by-plan.txt", dir);
  assert_int_equal(run_to_file(cmd_simulate, by_flags, n, words), 0);
  /* simulate --plan prices the plan file the same as the printed flags. */
  assert_has(text, "fivefold simulate --plan ");
  assert_int_equal(RUN(cmd_simulate, "simulate", "--plan", plan_json, "--quiet"), 0);
  char *plan_args[] = {"simulate", "--plan", plan_json, "--quiet"};
  assert_int_equal(run_to_file(cmd_simulate, by_plan, 4, plan_args), 0);
  char *a = strdup(read_all(by_flags)), *b = strdup(read_all(by_plan)); /* read_all's buffer is shared */
  assert_non_null(a);
  assert_non_null(b);
  if (strcmp(a, b) != 0) fail_msg("simulate --plan printed\n%s\nbut the printed flags give\n%s", b, a);
  assert_has(b, "predicted: step ");
  /* Options given with --plan override it. */
  char *more[] = {"simulate", "--plan", plan_json, "--global-batch", "128", "--quiet"};
  assert_int_equal(run_to_file(cmd_simulate, by_plan, 6, more), 0);
  char *c = strdup(read_all(by_plan));
  assert_non_null(c);
  if (!strcmp(a, c)) fail_msg("--global-batch 128 after --plan changed nothing:\n%s", c);
  free(a);
  free(b);
  free(c);
  char missing[4300];
  snprintf(missing, sizeof missing, "%s/none.json", dir);
  char *bad_plan[] = {"simulate", "--plan", missing};
  assert_int_equal(run_to_file(cmd_simulate, by_plan, 3, bad_plan), 1);
  assert_has(read_all(by_plan), "none.json");
  remove(by_flags);
  remove(by_plan);
  remove(plan_json);

  char *bad[] = {"simulate", "--model", "mixtrl-8x7b", "--cluster", "dgx-h100", "--gpus", "8", "--seq", "1024",
                 "--global-batch", "64"};
  assert_int_equal(run_to_file(cmd_simulate, log, (int)(sizeof bad / sizeof *bad), bad), 1);
  text = read_all(log);
  assert_has(text, "did you mean 'mixtral-8x7b'");
  assert_has(text, "known: ");
  assert_has(text, "llama-3-8b");
  remove(run_inline);
  remove(run_path);
  remove(model);
  remove(log);
  rmdir(dir);
}

/* A spec from calibrate carries the runtime's facts: plan and simulate say
 * so and price fp32 with the MoE replicated over TP unless told otherwise;
 * plan takes --moe-tp-replicated and its negation. */
static void test_calibrated_spec_defaults(void **state) {
  (void)state;
  char dir[] = "/tmp/fivefold_plan_cli_facts_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char spec_path[4200], model[4200], log[4200];
  snprintf(spec_path, sizeof spec_path, "%s/local.json", dir);
  snprintf(model, sizeof model, "%s/tiny.json", dir);
  snprintf(log, sizeof log, "%s/out.txt", dir);
  ClusterSpec spec;
  calib_spec_local_default(&spec, 2);
  calib_runtime_facts_cpu(&spec.runtime, "testhost");
  Error err = {0, ""};
  assert_int_equal(calib_spec_write(&spec, "test", spec_path, &err), 0);
  FILE *f = fopen(model, "w");
  assert_non_null(f);
  fputs("{\"model_type\": \"fivefold\", \"vocab_size\": 512, \"hidden_size\": 256, \"num_hidden_layers\": 4, "
        "\"num_attention_heads\": 4, \"intermediate_size\": 512, \"num_experts\": 4, \"num_experts_per_tok\": 2, "
        "\"moe_intermediate_size\": 512}",
        f);
  fclose(f);
  char *plan_argv[] = {"plan", "--model", model, "--cluster", spec_path, "--gpus", "2", "--seq", "128",
                       "--global-batch", "8", "--top", "3", "--mbs-list", "4"};
  assert_int_equal(run_to_file(cmd_plan, log, (int)(sizeof plan_argv / sizeof *plan_argv), plan_argv), 0);
  char *text = read_all(log);
  assert_has(text, "runtime (from local,");
  assert_has(text, "cpu runtime on testhost: fp32, MoE replicated on every TP rank, no asynchronous progress");
  assert_has(text, "global batch 8, fp32, for the fivefold runtime");
  assert_has(text, "--dtype fp32");
  char *sim_argv[] = {"simulate", "--model", model, "--cluster", spec_path, "--gpus", "2", "--seq", "128",
                      "--global-batch", "8", "--mbs", "4", "--tp", "2"};
  assert_int_equal(run_to_file(cmd_simulate, log, (int)(sizeof sim_argv / sizeof *sim_argv), sim_argv), 0);
  text = read_all(log);
  assert_has(text, "runtime (from local,");
  assert_has(text, "global batch 8, fp32");
  /* Flags win over the facts. */
  char *flag_argv[] = {"plan", "--model", model, "--cluster", spec_path, "--gpus", "2", "--seq", "128",
                       "--global-batch", "8", "--top", "3", "--mbs-list", "4", "--dtype", "bf16",
                       "--no-moe-tp-replicated"};
  assert_int_equal(run_to_file(cmd_plan, log, (int)(sizeof flag_argv / sizeof *flag_argv), flag_argv), 0);
  text = read_all(log);
  assert_has(text, "global batch 8, bf16, for the fivefold runtime");
  /* The shipped GPU spec has no facts: no runtime line; plan takes the flag. */
  char *gpu_argv[] = {"plan", "--model", model, "--cluster", "dgx-h100", "--gpus", "2", "--seq", "128",
                      "--global-batch", "8", "--top", "3", "--mbs-list", "4", "--moe-tp-replicated"};
  assert_int_equal(run_to_file(cmd_plan, log, (int)(sizeof gpu_argv / sizeof *gpu_argv), gpu_argv), 0);
  text = read_all(log);
  assert_null(strstr(text, "runtime (from"));
  assert_has(text, "global batch 8, bf16, for the fivefold runtime");
  remove(spec_path);
  remove(model);
  remove(log);
  rmdir(dir);
}

/* simulate's options for matching a published run reach the simulation:
 * Megatron's first/last-stage layout, block recomputation, a second FLOPs
 * convention; bad values are usage errors. */
static void test_simulate_accuracy_options(void **state) {
  (void)state;
  char log[] = "/tmp/fivefold_accuracy_XXXXXX";
  int fd = mkstemp(log);
  assert_true(fd >= 0);
  close(fd);
  char *argv[] = {"simulate", "--model", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--seq", "2048",
                  "--global-batch", "16", "--pp", "4", "--pipeline-split", "first=4,last=4", "--recompute", "full",
                  "--recompute-method", "block", "--recompute-num-layers", "2", "--flops", "causal"};
  assert_int_equal(run_to_file(cmd_simulate, log, (int)(sizeof argv / sizeof *argv), argv), 0);
  char *text = read_all(log);
  assert_has(text, "layers per stage: 4,12,12,4");
  assert_has(text, "recompute full (block, 2 layers)");
  assert_has(text, "MFU with causal FLOPs: ");
  remove(log);
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "8",
                       "--seq", "2048", "--global-batch", "16", "--pp", "4", "--pipeline-split", "first=5,last=4"),
                   2);
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "8",
                       "--seq", "2048", "--global-batch", "16", "--flops", "hardware"),
                   2);
  assert_int_equal(RUN(cmd_simulate, "simulate", "--model", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", "8",
                       "--seq", "2048", "--global-batch", "16", "--recompute-modules", "mla_up_proj"),
                   2);
}

/* simulate --stage-widths refuses, with the flag and the reason, widths
 * that do not sum to --gpus, a list it cannot read, and an order the
 * replicated program does not run. */
static void test_simulate_stage_widths_refused(void **state) {
  (void)state;
  char log[] = "/tmp/fivefold_widths_XXXXXX";
  int fd = mkstemp(log);
  assert_true(fd >= 0);
  close(fd);
  static const struct {
    const char *gpus, *widths, *schedule, *needle;
    int rc;
  } cases[] = {
      {"3", "2,1", "1f1b", "predicted: step", 0},
      {"4", "2,1", "1f1b", "--stage-widths sum to 3 devices but --gpus is 4", 2},
      {"3", "2,x", "1f1b", "--stage-widths", 2},
      {"3", "2,1", "zb-h1", "schedule zb-h1: a replicated pipeline runs the gpipe or 1f1b order", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *argv[] = {"simulate", "--model", "llama-3-8b", "--cluster", "dgx-h100", "--gpus", (char *)cases[i].gpus,
                    "--seq", "1024", "--global-batch", "8", "--mbs", "2", "--stage-widths", (char *)cases[i].widths,
                    "--schedule", (char *)cases[i].schedule, "--quiet"};
    assert_int_equal(run_to_file(cmd_simulate, log, (int)(sizeof argv / sizeof *argv), argv), cases[i].rc);
    assert_has(read_all(log), cases[i].needle);
  }
  remove(log);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_simulate_accuracy_options),
      cmocka_unit_test(test_simulate_stage_widths_refused),
      cmocka_unit_test(test_help_lists_every_option),
      cmocka_unit_test(test_bad_usage),
      cmocka_unit_test(test_expert_load_rows),
      cmocka_unit_test(test_simulate_with_trace),
      cmocka_unit_test(test_simulate_schedule_is_used),
      cmocka_unit_test(test_plan_writes_plan_json),
      cmocka_unit_test(test_plan_mapping_refinement_replication),
      cmocka_unit_test(test_run_config_and_names),
      cmocka_unit_test(test_calibrated_spec_defaults),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
