/* Run config: a complete file parses to the expected values with paths
 * resolved against the file's directory; every kind of mistake (unknown
 * field or section with a suggestion, wrong type, out-of-range value, bad
 * relative path, inconsistent batch sizes) gives a message naming the file
 * and the section.field; command-line overrides replace fields and are
 * checked the same way; the resolved config reads back identically; the
 * parallel layout is checked against the world (which product fails, what
 * fits) and the schedule and pipeline partition against the model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>

#include "train/train_config.h"
#include "train_test_util.h"

#define MODEL_JSON                                                                                           \
  "{\"model_type\": \"fivefold\", \"vocab_size\": 256, \"hidden_size\": 32, \"num_hidden_layers\": 2,"     \
  " \"num_attention_heads\": 4, \"intermediate_size\": 64, \"num_experts\": 4, \"num_experts_per_tok\": 2," \
  " \"moe_intermediate_size\": 32, \"max_position_embeddings\": 512}"

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle)) fail_msg("expected \"%s\" in message: %s", needle, haystack);
}

static int setup(void **state) {
  (void)state;
  write_text_file(scratch_path("train.bin"), "x");
  write_text_file(scratch_path("val.bin"), "x");
  write_text_file(scratch_path("more.bin"), "x");
  write_text_file(scratch_path("model.json"), MODEL_JSON);
  return 0;
}

/* Writes `text` as scratch/<name> and loads it. */
static int load_text(TrainConfig *cfg, const char *name, const char *text, Error *err) {
  const char *path = scratch_path(name);
  write_text_file(path, text);
  memset(err, 0, sizeof *err);
  return train_config_load(cfg, path, err);
}

static void test_full_config(void **state) {
  (void)state;
  TrainConfig cfg;
  Error err;
  int rc = load_text(&cfg, "full.json",
                     "{\"description\": \"a test\", \"model\": " MODEL_JSON ",\n"
                     " \"training\": {\"micro_batch_size\": 4, \"seq_len\": 64, \"grad_accum_steps\": 3,\n"
                     "   \"steps\": 500, \"lr\": 0.002, \"min_lr\": 0.0001, \"warmup_steps\": 20, \"decay\": \"linear\",\n"
                     "   \"weight_decay\": 0.05, \"beta1\": 0.8, \"beta2\": 0.99, \"eps\": 1e-6, \"grad_clip\": 0.5,\n"
                     "   \"seed\": 7, \"log_interval\": 5, \"eval_interval\": 50, \"eval_batches\": 3, \"threads\": 1,\n"
                     "   \"peak_gflops\": 123.5},\n"
                     " \"data\": {\"train\": [\"train.bin\", \"more.bin\"], \"val\": \"val.bin\"},\n"
                     " \"out\": \"runs/x\"}",
                     &err);
  if (rc) fail_msg("%s", err.msg);
  assert_int_equal(train_config_finalize(&cfg, &err), 0);
  assert_int_equal(cfg.model.vocab_size, 256);
  assert_int_equal(cfg.model.num_experts, 4);
  assert_int_equal(cfg.micro_batch_size, 4);
  assert_int_equal(cfg.seq_len, 64);
  assert_int_equal(cfg.grad_accum_steps, 3);
  assert_int_equal(cfg.global_batch_size, 12);
  assert_int_equal(cfg.steps, 500);
  assert_float_equal(cfg.lr, 0.002f, 0);
  assert_float_equal(cfg.min_lr, 0.0001f, 0);
  assert_int_equal(cfg.warmup_steps, 20);
  assert_int_equal(cfg.decay, LR_DECAY_LINEAR);
  assert_float_equal(cfg.weight_decay, 0.05f, 0);
  assert_float_equal(cfg.beta1, 0.8f, 0);
  assert_float_equal(cfg.beta2, 0.99f, 0);
  assert_float_equal(cfg.eps, 1e-6f, 0);
  assert_float_equal(cfg.grad_clip, 0.5f, 0);
  assert_int_equal(cfg.seed, 7);
  assert_int_equal(cfg.log_interval, 5);
  assert_int_equal(cfg.eval_interval, 50);
  assert_int_equal(cfg.eval_batches, 3);
  assert_int_equal(cfg.threads, 1);
  assert_float_equal(cfg.peak_gflops, 123.5, 0);
  assert_int_equal(cfg.num_train, 2);
  assert_string_equal(cfg.train_paths[0], scratch_path("train.bin"));
  assert_string_equal(cfg.train_paths[1], scratch_path("more.bin"));
  assert_int_equal(cfg.num_val, 1);
  assert_string_equal(cfg.val_paths[0], scratch_path("val.bin"));
  assert_string_equal(cfg.out_dir, scratch_path("runs/x"));
  assert_int_equal(train_config_tokens_per_step(&cfg), 4 * 64 * 3);
  train_config_free(&cfg);
}

static void test_defaults_and_model_path(void **state) {
  (void)state;
  TrainConfig cfg;
  Error err;
  int rc = load_text(&cfg, "minimal.json", "{\"model\": \"model.json\", \"data\": {\"train\": \"train.bin\"}}", &err);
  if (rc) fail_msg("%s", err.msg);
  assert_string_equal(cfg.model_source, scratch_path("model.json"));
  assert_int_equal(train_config_finalize(&cfg, &err), 0);
  assert_int_equal(cfg.grad_accum_steps, 1);
  assert_float_equal(cfg.min_lr, cfg.lr * 0.1f, 1e-12);
  assert_int_equal(cfg.num_val, 0);
  assert_string_equal(cfg.out_dir, "runs/minimal");
  assert_int_equal(cfg.decay, LR_DECAY_COSINE);
  train_config_free(&cfg);
}

/* Each case: config text -> substrings the error must contain. */
typedef struct BadCase {
  const char *text;
  const char *expect1, *expect2;
  int at_finalize; /* the mistake is found by train_config_finalize */
} BadCase;

#define DATA ", \"data\": {\"train\": \"train.bin\"}"

static void test_errors_name_file_and_field(void **state) {
  (void)state;
  static const BadCase cases[] = {
      {"{\"model\": \"model.json\", \"training\": {\"micro_batch_sise\": 4}" DATA "}", "training.micro_batch_sise",
       "did you mean 'micro_batch_size'", 0},
      {"{\"model\": \"model.json\", \"trainig\": {}" DATA "}", "\"trainig\"", "did you mean 'training'", 0},
      {"{\"model\": \"model.json\", \"data\": {\"trian\": \"train.bin\"}}", "data.trian", "did you mean 'train'", 0},
      {"{\"model\": \"model.json\", \"training\": {\"lr\": \"3e-4\"}" DATA "}", "training.lr",
       "must be a number, got a string", 0},
      {"{\"model\": \"model.json\", \"training\": {\"steps\": true}" DATA "}", "training.steps",
       "must be an integer, got a boolean", 0},
      {"{\"model\": \"model.json\", \"training\": {\"steps\": 1.5}" DATA "}", "training.steps", "integer >= 1", 0},
      {"{\"model\": \"model.json\", \"training\": {\"seq_len\": -3}" DATA "}", "training.seq_len", "got -3", 0},
      {"{\"model\": \"model.json\", \"training\": {\"beta2\": 1}" DATA "}", "training.beta2", "< 1", 0},
      {"{\"model\": \"model.json\", \"training\": {\"lr\": 0}" DATA "}", "training.lr", "> 0", 0},
      {"{\"model\": \"model.json\", \"training\": {\"seed\": -1}" DATA "}", "training.seed", "non-negative", 0},
      {"{\"model\": \"model.json\", \"training\": {\"decay\": \"cosin\"}" DATA "}", "training.decay", "\"cosin\"", 0},
      {"{\"model\": \"model.json\", \"data\": {\"train\": [\"train.bin\", 3]}}", "data.train[1]", "must be a string",
       0},
      {"{\"model\": \"model.json\", \"data\": {\"train\": []}}", "data.train", "non-empty list", 0},
      {"{\"model\": \"model.json\", \"data\": {\"train\": \"nope.bin\"}}", "data.train", "nope.bin not found", 1},
      {"{\"model\": \"model.json\", \"data\": {\"train\": \"train.bin\", \"val\": \"../no/val.bin\"}}", "data.val",
       "resolved against", 1},
      {"{\"model\": \"missing-model.json\"" DATA "}", "missing-model.json", "not found", 0},
      {"{\"model\": 3" DATA "}", "model must be an object", "got a number", 0},
      {"{\"training\": {}" DATA "}", "no \"model\" section", "", 0},
      {"{\"model\": \"model.json\",\n\"training\": {\"steps\": 3,}}", "invalid JSON", "line 2, column 26", 0},
      {"[1, 2]", "top level must be an object of sections", "got an array", 0},
      {"{\"model\": \"model.json\", \"traces\": {}" DATA "}", "did you mean 'trace'", "checkpoint, parallel, trace",
       0},
      {"{\"model\": \"model.json\", \"data\": {}}", "no training data", "--train-data", 1},
      {"{\"model\": \"model.json\", \"training\": {\"micro_batch_size\": 4, \"global_batch_size\": 10}" DATA "}",
       "global_batch_size 10", "multiple of 4", 1},
      {"{\"model\": \"model.json\", \"training\": {\"micro_batch_size\": 4, \"global_batch_size\": 8, "
       "\"grad_accum_steps\": 3}" DATA "}",
       "grad_accum_steps 3 contradicts", "", 1},
      {"{\"model\": \"model.json\", \"training\": {\"lr\": 0.001, \"min_lr\": 0.01}" DATA "}", "training.min_lr",
       "above lr", 1},
      {"{\"model\": \"model.json\", \"training\": {\"lr\": 0.001, \"min_lr\": 0.01}" DATA "}", "--min-lr", "", 1},
      {"{\"model\": \"model.json\", \"training\": {\"progress\": \"sometimes\"}" DATA "}", "training.progress",
       "\"auto\", \"always\" or \"never\"", 0},
      {"{\"model\": \"model.json\", \"training\": {\"seq_len\": 1024}" DATA "}", "training.seq_len 1024",
       "max_position_embeddings 512", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    TrainConfig cfg;
    Error err;
    char name[32];
    snprintf(name, sizeof name, "bad%zu.json", i);
    int rc = load_text(&cfg, name, cases[i].text, &err);
    if (cases[i].at_finalize) {
      if (rc) fail_msg("case %zu: load failed early: %s", i, err.msg);
      rc = train_config_finalize(&cfg, &err);
      train_config_free(&cfg);
    }
    if (rc != ERR_CONFIG) fail_msg("case %zu: expected ERR_CONFIG, got %d: %s", i, rc, err.msg);
    assert_contains(err.msg, scratch_path(name));
    assert_contains(err.msg, cases[i].expect1);
    assert_contains(err.msg, cases[i].expect2);
  }
}

/* A mistake inside an inline model section names the config file and the
 * model field. */
static void test_inline_model_error(void **state) {
  (void)state;
  TrainConfig cfg;
  Error err;
  int rc = load_text(&cfg, "bad-model.json",
                     "{\"model\": {\"vocab_size\": 256, \"hiden_size\": 32, \"num_hidden_layers\": 2, "
                     "\"num_attention_heads\": 4}" DATA "}",
                     &err);
  assert_int_equal(rc, ERR_CONFIG);
  assert_contains(err.msg, scratch_path("bad-model.json"));
  assert_contains(err.msg, "hiden_size");
}

static void test_overrides(void **state) {
  (void)state;
  TrainConfig cfg;
  Error err;
  int rc = load_text(&cfg, "ov.json",
                     "{\"model\": \"model.json\", \"training\": {\"micro_batch_size\": 2, \"global_batch_size\": 8}" DATA
                     "}",
                     &err);
  if (rc) fail_msg("%s", err.msg);
  static const char *flags[][2] = {
      {"--steps", "42"},        {"--lr", "1e-3"},           {"--micro-batch-size", "4"}, {"--seq-len", "32"},
      {"--grad-accum", "5"},    {"--seed", "99"},           {"--log-interval", "3"},     {"--eval-interval", "0"},
      {"--threads", "2"},       {"--peak-gflops", "77.5"},  {"--out", "somewhere/run"},
      {"--train-data", "x.bin,y.bin"}, {"--val-data", "z.bin"},
  };
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    assert_true(train_config_is_flag(flags[i][0]));
    if (train_config_override(&cfg, flags[i][0], flags[i][1], &err)) fail_msg("%s: %s", flags[i][0], err.msg);
  }
  assert_int_equal(cfg.steps, 42);
  assert_float_equal(cfg.lr, 1e-3f, 0);
  assert_int_equal(cfg.micro_batch_size, 4);
  assert_int_equal(cfg.seq_len, 32);
  assert_int_equal(cfg.grad_accum_steps, 5);
  assert_int_equal(cfg.global_batch_size, 0); /* --grad-accum replaced it */
  assert_int_equal(cfg.seed, 99);
  assert_int_equal(cfg.log_interval, 3);
  assert_int_equal(cfg.eval_interval, 0);
  assert_int_equal(cfg.threads, 2);
  assert_float_equal(cfg.peak_gflops, 77.5, 0);
  assert_string_equal(cfg.out_dir, "somewhere/run"); /* flags: relative to the current directory */
  assert_int_equal(cfg.num_train, 2);
  assert_string_equal(cfg.train_paths[0], "x.bin");
  assert_string_equal(cfg.train_paths[1], "y.bin");
  assert_int_equal(cfg.num_val, 1);
  assert_string_equal(cfg.val_paths[0], "z.bin");

  /* Bad flag values and unknown flags are usage errors naming the flag. */
  assert_int_equal(train_config_override(&cfg, "--steps", "abc", &err), ERR_ARG);
  assert_contains(err.msg, "--steps");
  assert_contains(err.msg, "'abc'");
  assert_int_equal(train_config_override(&cfg, "--steps", "0", &err), ERR_ARG);
  assert_contains(err.msg, ">= 1");
  assert_int_equal(train_config_override(&cfg, "--lr", "-1", &err), ERR_ARG);
  assert_int_equal(train_config_override(&cfg, "--stpes", "5", &err), ERR_ARG);
  assert_contains(err.msg, "did you mean '--steps'");
  assert_false(train_config_is_flag("--stpes"));
  assert_int_equal(cfg.steps, 42); /* failed overrides leave the field alone */

  /* A relative data path given as a flag that does not exist: finalize says so. */
  assert_int_equal(train_config_finalize(&cfg, &err), ERR_CONFIG);
  assert_contains(err.msg, "data.train");
  assert_contains(err.msg, "x.bin");
  train_config_free(&cfg);
}

/* The resolved config parses back to the same values. */
static void test_resolved_round_trip(void **state) {
  (void)state;
  TrainConfig a, b;
  Error err;
  int rc = load_text(&a, "rt.json",
                     "{\"model\": \"model.json\", \"training\": {\"steps\": 77, \"lr\": 0.003, \"decay\": \"constant\", "
                     "\"peak_gflops\": 50}, \"data\": {\"train\": \"train.bin\", \"val\": [\"val.bin\"]}}",
                     &err);
  if (rc) fail_msg("%s", err.msg);
  assert_int_equal(train_config_finalize(&a, &err), 0);
  cJSON *json = train_config_to_json(&a);
  char *text = cJSON_Print(json);
  cJSON_Delete(json);
  rc = load_text(&b, "rt-resolved.json", text, &err);
  free(text);
  if (rc) fail_msg("%s", err.msg);
  assert_int_equal(train_config_finalize(&b, &err), 0);
  assert_int_equal(b.steps, 77);
  assert_float_equal(b.lr, a.lr, 0);
  assert_float_equal(b.min_lr, a.min_lr, 0);
  assert_int_equal(b.decay, LR_DECAY_CONSTANT);
  assert_int_equal(b.grad_accum_steps, a.grad_accum_steps);
  assert_int_equal(b.model.num_experts, 4);
  assert_int_equal(b.model.hidden_size, 32);
  assert_int_equal(b.num_val, 1);
  char *ra = realpath(a.train_paths[0], NULL), *rb = realpath(b.train_paths[0], NULL);
  assert_non_null(ra);
  assert_non_null(rb);
  assert_string_equal(ra, rb);
  free(ra);
  free(rb);
  train_config_free(&a);
  train_config_free(&b);
}

/* What a newcomer tripped over: no flag for min_lr or warm-up (so
 * `--lr 1e-4` on a config with min_lr 3e-4 could not be fixed from the
 * command line), float fields written as long doubles, a syntax error
 * blamed on the document's shape, and the progress switch. */
static void test_newcomer_fixes(void **state) {
  (void)state;
  TrainConfig cfg;
  Error err;
  int rc = load_text(&cfg, "nc.json",
                     "{\"model\": \"model.json\", \"training\": {\"lr\": 0.003, \"min_lr\": 0.0003, "
                     "\"weight_decay\": 0.1}" DATA "}",
                     &err);
  if (rc) fail_msg("%s", err.msg);
  assert_int_equal(cfg.progress, TRAIN_PROGRESS_AUTO);
  if (train_config_override(&cfg, "--lr", "1e-4", &err)) fail_msg("%s", err.msg);
  assert_int_equal(train_config_override(&cfg, "--min-lr", "1e-5", &err), 0);
  assert_int_equal(train_config_override(&cfg, "--warmup-steps", "7", &err), 0);
  assert_int_equal(train_config_override(&cfg, "--progress", "never", &err), 0);
  assert_int_equal(train_config_override(&cfg, "--progress", "maybe", &err), ERR_ARG);
  assert_contains(err.msg, "--progress");
  assert_float_equal(cfg.min_lr, 1e-5f, 0);
  assert_int_equal(cfg.warmup_steps, 7);
  assert_int_equal(cfg.progress, TRAIN_PROGRESS_NEVER);
  if (train_config_finalize(&cfg, &err)) fail_msg("%s", err.msg);
  cJSON *json = train_config_to_json(&cfg);
  char *text = cJSON_PrintUnformatted(json);
  cJSON_Delete(json);
  assert_contains(text, "\"lr\":0.0001,");
  assert_contains(text, "\"min_lr\":1e-05,");
  assert_contains(text, "\"weight_decay\":0.1,");
  assert_contains(text, "\"beta2\":0.95,");
  assert_contains(text, "\"progress\":\"never\"");
  assert_contains(text, "\"rms_norm_eps\":1e-05,"); /* the model section's floats too */
  free(text);
  train_config_free(&cfg);

  /* A syntax error is not "expected an object": it says where. */
  assert_int_equal(load_text(&cfg, "syntax.json", "{\"model\": \"model.json\" \"data\": {}}", &err), ERR_CONFIG);
  assert_contains(err.msg, "line 1, column 24");
  if (strstr(err.msg, "object of sections")) fail_msg("a syntax error blamed on the shape: %s", err.msg);
}

static void test_help_lists_every_flag(void **state) {
  (void)state;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  train_config_print_flags(f);
  fclose(f);
  static const char *flags[] = {"--steps",        "--lr",          "--micro-batch-size", "--seq-len",  "--grad-accum",
                                "--seed",         "--log-interval", "--eval-interval",   "--threads",  "--peak-gflops",
                                "--train-data",   "--val-data",    "--out",            "--min-lr",   "--warmup-steps",
                                "--progress"};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    assert_contains(buf, flags[i]);
    assert_true(train_config_is_flag(flags[i]));
  }
  free(buf);
}

/* A config with the parallel section `par` (JSON members), resolved against
 * a world of `world` ranks and finalized; returns the first error code. */
static int parallel_config(TrainConfig *cfg, const char *par, int world, Error *err) {
  char text[2048];
  snprintf(text, sizeof text,
           "{\"model\": \"model.json\", \"training\": {\"micro_batch_size\": 2, \"seq_len\": 16,"
           " \"grad_accum_steps\": 4}, \"data\": {\"train\": \"train.bin\"}, \"parallel\": {%s}}",
           par);
  int rc = load_text(cfg, "par.json", text, err);
  if (rc) return rc;
  rc = train_config_set_world(cfg, world, err);
  if (!rc) rc = train_config_finalize(cfg, err);
  return rc;
}

static void test_parallel_layout(void **state) {
  (void)state;
  TrainConfig cfg;
  Error err;
  /* dp derived from the world; the schedule defaults follow pp and vpp. */
  if (parallel_config(&cfg, "\"tp\": 2, \"pp\": 2", 8, &err)) fail_msg("%s", err.msg);
  assert_int_equal(cfg.world_size, 2);
  assert_int_equal(cfg.world_ranks, 8);
  assert_int_equal(train_config_schedule(&cfg), SCHED_SCHEDULE_1F1B);
  assert_int_equal(cfg.global_batch_size, 2 * 4 * 2);
  train_config_free(&cfg);
  if (parallel_config(&cfg, "\"pp\": 2, \"vpp\": 2, \"layers_per_stage\": [0, 1, 1, 0]", 2, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(train_config_schedule(&cfg), SCHED_SCHEDULE_INTERLEAVED);
  train_config_free(&cfg);
  if (parallel_config(&cfg, "\"schedule\": \"gpipe\", \"pp\": 2, \"layers_per_stage\": [0, 2]", 2, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(train_config_schedule(&cfg), SCHED_SCHEDULE_GPIPE);
  assert_int_equal(cfg.num_layers_per_stage, 2);
  cJSON *json = train_config_to_json(&cfg);
  const cJSON *par = cJSON_GetObjectItemCaseSensitive(json, "parallel");
  assert_string_equal(cJSON_GetObjectItemCaseSensitive(par, "schedule")->valuestring, "gpipe");
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(par, "layers_per_stage")), 2);
  cJSON_Delete(json);
  train_config_free(&cfg);
  if (parallel_config(&cfg, "", 4, &err)) fail_msg("%s", err.msg);
  assert_int_equal(train_config_schedule(&cfg), SCHED_SCHEDULE_NONE);
  assert_int_equal(cfg.world_size, 4);
  train_config_free(&cfg);

  /* Mistakes name the product and what would fit. */
  assert_int_equal(parallel_config(&cfg, "\"tp\": 2, \"pp\": 2, \"dp\": 2", 4, &err), ERR_CONFIG);
  assert_contains(err.msg, "tp 2 x pp 2 x dp 2 = 8 ranks");
  assert_contains(err.msg, "--dp 1");
  train_config_free(&cfg);
  assert_int_equal(parallel_config(&cfg, "\"pp\": 2", 3, &err), ERR_CONFIG);
  assert_contains(err.msg, "do not divide the job's 3 rank");
  train_config_free(&cfg);
  assert_int_equal(parallel_config(&cfg, "\"pp\": 2, \"schedule\": \"none\"", 2, &err), ERR_CONFIG);
  assert_contains(err.msg, "parallel.schedule none");
  train_config_free(&cfg);
  assert_int_equal(parallel_config(&cfg, "\"pp\": 3, \"vpp\": 2", 3, &err), ERR_CONFIG);
  assert_contains(err.msg, "multiple");
  train_config_free(&cfg);
  assert_int_equal(parallel_config(&cfg, "\"pp\": 2, \"layers_per_stage\": [1, 2]", 2, &err), ERR_CONFIG);
  assert_contains(err.msg, "parallel.layers_per_stage");
  train_config_free(&cfg);
  assert_int_equal(parallel_config(&cfg, "\"pp\": 3, \"layers_per_stage\": [1, 0, 1]", 3, &err), ERR_CONFIG);
  assert_contains(err.msg, "stage 1 no blocks");
  train_config_free(&cfg);
  assert_int_equal(parallel_config(&cfg, "\"vpp\": 2", 1, &err), ERR_CONFIG);
  assert_contains(err.msg, "needs pp >= 2");
  train_config_free(&cfg);
  assert_int_equal(parallel_config(&cfg, "\"schedule\": \"zigzag\"", 1, &err), ERR_CONFIG);
  assert_contains(err.msg, "parallel.schedule must be");
  train_config_free(&cfg);

  /* A pinned global batch on more ranks (an upcycled run resumed under EP2)
   * says which micro-batch keeps it, or which global batch would fit. */
  assert_int_equal(load_text(&cfg, "gbs.json",
                             "{\"model\": \"model.json\", \"training\": {\"micro_batch_size\": 4,"
                             " \"global_batch_size\": 4}, \"data\": {\"train\": \"train.bin\"}}",
                             &err),
                   0);
  assert_int_equal(train_config_set_world(&cfg, 2, &err), 0);
  assert_int_equal(train_config_finalize(&cfg, &err), ERR_CONFIG);
  assert_contains(err.msg, "give --micro-batch-size 2 to keep the global batch of 4 on 2 rank(s)");
  train_config_free(&cfg);
  assert_int_equal(load_text(&cfg, "gbs3.json",
                             "{\"model\": \"model.json\", \"training\": {\"micro_batch_size\": 4,"
                             " \"global_batch_size\": 3}, \"data\": {\"train\": \"train.bin\"}}",
                             &err),
                   0);
  assert_int_equal(train_config_set_world(&cfg, 2, &err), 0);
  assert_int_equal(train_config_finalize(&cfg, &err), ERR_CONFIG);
  assert_contains(err.msg, "give --global-batch-size 8 (or another multiple of 8)");
  train_config_free(&cfg);

  /* Flags: a list, a schedule, and a global batch replacing the file's accumulation. */
  if (parallel_config(&cfg, "", 2, &err)) fail_msg("%s", err.msg);
  train_config_free(&cfg);
  assert_int_equal(load_text(&cfg, "par2.json",
                             "{\"model\": \"model.json\", \"training\": {\"micro_batch_size\": 2,"
                             " \"grad_accum_steps\": 4}, \"data\": {\"train\": \"train.bin\"}}",
                             &err),
                   0);
  assert_int_equal(train_config_override(&cfg, "--pp", "2", &err), 0);
  assert_int_equal(train_config_override(&cfg, "--layers-per-stage", "2,0", &err), 0);
  assert_int_equal(train_config_override(&cfg, "--schedule", "1f1b", &err), 0);
  assert_int_equal(train_config_override(&cfg, "--global-batch-size", "12", &err), 0);
  assert_int_equal(train_config_override(&cfg, "--layers-per-stage", "2,x", &err), ERR_ARG);
  assert_contains(err.msg, "--layers-per-stage");
  assert_int_equal(train_config_set_world(&cfg, 2, &err), 0);
  if (train_config_finalize(&cfg, &err)) fail_msg("%s", err.msg);
  assert_int_equal(cfg.grad_accum_steps, 6);
  assert_int_equal(cfg.layers_per_stage[0], 2);
  assert_int_equal(cfg.layers_per_stage[1], 0);
  train_config_free(&cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_config),         cmocka_unit_test(test_defaults_and_model_path),
      cmocka_unit_test(test_errors_name_file_and_field), cmocka_unit_test(test_inline_model_error),
      cmocka_unit_test(test_overrides),           cmocka_unit_test(test_resolved_round_trip),
      cmocka_unit_test(test_help_lists_every_flag), cmocka_unit_test(test_parallel_layout),
      cmocka_unit_test(test_newcomer_fixes),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
