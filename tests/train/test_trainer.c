/* Trainer and optimizer on a tiny MoE model: the learning rate each step
 * uses follows the configured schedule (warm-up, cosine / linear / constant),
 * gradient accumulation over micro-batches equals one big batch, weight
 * decay skips no_weight_decay tensors, clipping reports its factor,
 * evaluation is repeatable, a short run lowers the loss, and trainer_run
 * prints the documented log line and writes its run files (the summary
 * with the tokens each expert of each layer got). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "base/rng.h"
#include "train/trainer.h"
#include "train_test_util.h"

#define TINY_MOE                                                                                            \
  "{\"model_type\": \"fivefold\", \"vocab_size\": 64, \"hidden_size\": 32, \"num_hidden_layers\": 2,"     \
  " \"num_attention_heads\": 2, \"intermediate_size\": 64, \"num_experts\": 4, \"num_experts_per_tok\": 2," \
  " \"moe_intermediate_size\": 32, \"moe_aux_loss_coeff\": %s, \"moe_z_loss_coeff\": 0.001}"

static int setup(void **state) {
  (void)state;
  /* A learnable stream: mostly a fixed cycle through 64 symbols, with some
   * noise, so a few steps are enough to lower the loss. */
  enum { N = 20000 };
  static uint32_t tok[N];
  for (int i = 0; i < N; i++)
    tok[i] = rng_uniform(3, 1, (uint64_t)i) < 0.8 ? (uint32_t)(i * 5 % 64) : (uint32_t)(rng_u64(3, 2, (uint64_t)i) % 64);
  Error err = {0};
  if (token_shard_write(scratch_path("train.bin"), tok, N, 64, &err) ||
      token_shard_write(scratch_path("val.bin"), tok + N / 2, 4000, 64, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return -1;
  }
  return 0;
}

/* A finalized config: tiny MoE, `training` is spliced into the section.
 * One thread: ctest runs tests side by side on few cores, and OpenMP
 * barriers stall badly when their threads are descheduled. */
static void make_config(TrainConfig *cfg, const char *aux, const char *training) {
  char model[1024], text[4096];
  snprintf(model, sizeof model, TINY_MOE, aux);
  snprintf(text, sizeof text,
           "{\"model\": %s, \"training\": {\"threads\": 1, \"peak_gflops\": 100, %s},"
           " \"data\": {\"train\": \"train.bin\", \"val\": \"val.bin\"}, \"out\": \"run\"}",
           model, training);
  Error err = {0};
  if (train_config_parse(cfg, text, scratch_path("tiny.json"), &err) || train_config_finalize(cfg, &err))
    fail_msg("%s", err.msg);
}

static void create(Trainer *tr, const TrainConfig *cfg) {
  Error err = {0};
  if (trainer_create(tr, cfg, &err)) fail_msg("%s", err.msg);
}

/* The schedule, written out independently of kern/lr_schedule.c. */
static double expected_lr(int step, double max_lr, double min_lr, int warmup, int total, const char *decay) {
  if (step < warmup) return max_lr * (step + 1) / warmup;
  if (!strcmp(decay, "constant")) return max_lr;
  if (step >= total) return min_lr;
  double p = (double)(step - warmup) / (total - warmup);
  if (!strcmp(decay, "cosine")) return min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(M_PI * p));
  return max_lr - (max_lr - min_lr) * p;
}

static void test_lr_schedule_through_trainer(void **state) {
  (void)state;
  static const char *decays[] = {"cosine", "linear", "constant"};
  for (int d = 0; d < 3; d++) {
    char training[512];
    snprintf(training, sizeof training,
             "\"micro_batch_size\": 2, \"seq_len\": 16, \"steps\": 12, \"lr\": 0.01, \"min_lr\": 0.001, "
             "\"warmup_steps\": 3, \"decay\": \"%s\"",
             decays[d]);
    TrainConfig cfg;
    make_config(&cfg, "0.01", training);
    Trainer tr;
    create(&tr, &cfg);
    Error err = {0};
    for (int s = 0; s < 12; s++) {
      TrainStepResult r;
      if (trainer_step(&tr, &r, &err)) fail_msg("%s", err.msg);
      assert_int_equal(r.step, s + 1);
      double want = expected_lr(s, 0.01, 0.001, 3, 12, decays[d]);
      if (fabs(r.lr - want) > 1e-6 * want) fail_msg("%s step %d: lr %g, expected %g", decays[d], s, r.lr, want);
    }
    assert_int_equal(tr.opt.step, 12);
    trainer_free(&tr);
    train_config_free(&cfg);
  }
}

/* B = 4 in one micro-batch and B = 2 accumulated twice read the same four
 * windows; without the (batch-dependent) aux loss the update is the same. */
static void test_grad_accumulation_matches_big_batch(void **state) {
  (void)state;
  TrainConfig big_cfg, acc_cfg;
  make_config(&big_cfg, "0", "\"micro_batch_size\": 4, \"seq_len\": 16, \"steps\": 3, \"warmup_steps\": 0");
  make_config(&acc_cfg, "0",
              "\"micro_batch_size\": 2, \"grad_accum_steps\": 2, \"seq_len\": 16, \"steps\": 3, \"warmup_steps\": 0");
  Trainer big, acc;
  create(&big, &big_cfg);
  create(&acc, &acc_cfg);
  Error err = {0};
  for (int s = 0; s < 2; s++) {
    TrainStepResult rb, ra;
    if (trainer_step(&big, &rb, &err) || trainer_step(&acc, &ra, &err)) fail_msg("%s", err.msg);
    double lm_b = network_metric(rb.metrics, rb.num_metrics, "lm"), lm_a = network_metric(ra.metrics, ra.num_metrics, "lm");
    assert_true(fabs(lm_b - lm_a) < 1e-5 * lm_b);
    assert_true(fabs(rb.grad_norm - ra.grad_norm) < 1e-4 * rb.grad_norm);
    assert_int_equal(rb.tokens, ra.tokens);
  }
  double max_diff = 0;
  for (size_t i = 0; i < big.model.num_params; i++) {
    double d = fabs((double)big.model.params[i] - acc.model.params[i]);
    if (d > max_diff) max_diff = d;
  }
  if (max_diff > 1e-5) fail_msg("parameters differ by %g after two steps", max_diff);
  trainer_free(&big);
  trainer_free(&acc);
  train_config_free(&big_cfg);
  train_config_free(&acc_cfg);
}

/* With zero gradients AdamW moves nothing but the decay: matrices shrink by
 * (1 - lr * wd), norm weights (no_weight_decay) stay exactly 1. */
static void test_weight_decay_skips_norms(void **state) {
  (void)state;
  TrainConfig cfg;
  make_config(&cfg, "0.01", "\"micro_batch_size\": 2, \"seq_len\": 16, \"warmup_steps\": 0, \"decay\": \"constant\", "
                            "\"lr\": 0.1, \"weight_decay\": 0.5");
  Trainer tr;
  create(&tr, &cfg);
  Model *m = &tr.model;
  float *before = malloc(m->num_params * sizeof(float));
  memcpy(before, m->params, m->num_params * sizeof(float));
  model_zero_grad(m);
  OptimizerStepInfo info;
  Error err = {0};
  assert_int_equal(optimizer_step(&tr.opt, &tr.net, &info, &err), 0);
  assert_true(info.grad_norm == 0);
  int norms = 0;
  for (int t = 0; t < m->num_tensors; t++) {
    const ParamTensor *p = &m->tensors[t];
    float factor = p->no_weight_decay ? 1.0f : 1.0f - 0.1f * 0.5f;
    norms += p->no_weight_decay;
    for (size_t i = 0; i < p->numel; i++) {
      float want = before[p->offset + i] * factor, got = m->params[p->offset + i];
      if (fabsf(got - want) > 1e-6f * fabsf(want) + 1e-12f) fail_msg("%s[%zu]: %g, expected %g", p->name, i, got, want);
    }
  }
  assert_true(norms >= 5); /* 2 per layer + final norm */
  free(before);
  trainer_free(&tr);
  train_config_free(&cfg);
}

static void test_clipping_factor(void **state) {
  (void)state;
  TrainConfig cfg;
  make_config(&cfg, "0.01", "\"micro_batch_size\": 2, \"seq_len\": 16, \"grad_clip\": 0.5");
  Trainer tr;
  create(&tr, &cfg);
  Model *m = &tr.model;
  for (size_t i = 0; i < m->num_params; i++) m->grads[i] = (i % 2 ? 0.5f : -0.5f);
  double norm = 0.5 * sqrt((double)m->num_params);
  assert_true(fabs(optimizer_grad_norm(&tr.net) - norm) < 1e-6 * norm);
  OptimizerStepInfo info;
  Error err = {0};
  assert_int_equal(optimizer_step(&tr.opt, &tr.net, &info, &err), 0);
  assert_true(fabs(info.grad_norm - norm) < 1e-6 * norm);
  assert_true(fabs(info.clip_scale - 0.5 / norm) < 1e-4 * (0.5 / norm));
  /* A non-finite gradient is refused with a message, not applied. */
  m->grads[3] = NAN;
  assert_int_equal(optimizer_step(&tr.opt, &tr.net, &info, &err), ERR_INTERNAL);
  assert_non_null(strstr(err.msg, "not finite"));
  trainer_free(&tr);
  train_config_free(&cfg);
}

/* Evaluation repeats exactly; a short run lowers both losses. */
static void test_eval_and_learning(void **state) {
  (void)state;
  TrainConfig cfg;
  make_config(&cfg, "0.01",
              "\"micro_batch_size\": 4, \"seq_len\": 32, \"steps\": 40, \"lr\": 0.01, \"warmup_steps\": 5, "
              "\"eval_batches\": 4");
  Trainer tr;
  create(&tr, &cfg);
  EvalResult e1, e2, e3;
  Error err = {0};
  assert_int_equal(trainer_evaluate(&tr, &e1, &err), 0);
  assert_int_equal(trainer_evaluate(&tr, &e2, &err), 0);
  assert_true(e1.loss == e2.loss);
  assert_int_equal(e1.tokens, 4 * 4 * 32);
  assert_true(fabs(e1.loss - log(64.0)) < 0.5); /* near uniform at initialisation */
  TrainStepResult first, r;
  for (int s = 0; s < 40; s++)
    if (trainer_step(&tr, s ? &r : &first, &err)) fail_msg("%s", err.msg);
  assert_int_equal(trainer_evaluate(&tr, &e3, &err), 0);
  if (!(e3.loss < e1.loss - 0.5)) fail_msg("val loss %g -> %g: no learning", e1.loss, e3.loss);
  double lm_first = network_metric(first.metrics, first.num_metrics, "lm"), lm = network_metric(r.metrics, r.num_metrics, "lm");
  if (!(lm < lm_first - 0.5)) fail_msg("train loss %g -> %g: no learning", lm_first, lm);
  assert_true(r.imbalance >= 1.0 && r.imbalance <= 4.0); /* max/mean over 4 experts */
  trainer_free(&tr);
  train_config_free(&cfg);
}

typedef struct Seen {
  int steps;
  float lr[16];
} Seen;

static void on_step(void *ctx, const TrainStepResult *r) {
  Seen *s = ctx;
  if (s->steps < 16) s->lr[s->steps] = r->lr;
  s->steps++;
}

static int count_lines(const char *text, const char *prefix) {
  int n = 0;
  for (const char *p = text; p && *p;) {
    if (!strncmp(p, prefix, strlen(prefix))) n++;
    p = strchr(p, '\n');
    if (p) p++;
  }
  return n;
}

static void test_run_log_lines_and_files(void **state) {
  (void)state;
  TrainConfig cfg;
  make_config(&cfg, "0.01",
              "\"micro_batch_size\": 2, \"seq_len\": 16, \"steps\": 10, \"lr\": 0.005, \"warmup_steps\": 2, "
              "\"log_interval\": 4, \"eval_interval\": 5, \"eval_batches\": 2");
  Trainer tr;
  create(&tr, &cfg);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  TrainerOptions opts;
  trainer_options_default(&opts);
  opts.out = out;
  Seen seen = {0};
  opts.on_step = on_step;
  opts.ctx = &seen;
  TrainSummary sum;
  Error err = {0};
  int rc = trainer_run(&tr, &opts, &sum, &err);
  fclose(out);
  if (rc) fail_msg("%s", err.msg);
  assert_int_equal(seen.steps, 10);
  assert_true(fabs(seen.lr[0] - 0.0025) < 1e-9);
  assert_true(fabs(seen.lr[1] - 0.005) < 1e-9);
  /* Log lines at steps 1, 4, 8 and 10; evaluations at 0, 5 and 10. */
  assert_int_equal(count_lines(buf, "step "), 4);
  assert_non_null(strstr(buf, "\nstep 1/10 | loss "));
  assert_non_null(strstr(buf, "\nstep 4/10 | loss "));
  assert_non_null(strstr(buf, "\nstep 10/10 | loss "));
  assert_int_equal(count_lines(buf, "eval step "), 3);
  assert_non_null(strstr(buf, "eval step 5/10 | val loss "));
  /* The fields of the documented line, MoE included. */
  const char *fields[] = {"(lm ", " aux ", " z ", " | lr ", " | gnorm ", " ms/it | ", " tok/s | ", " GFLOP/s | MFU ",
                          "% of 100 GFLOP/s | moe imbalance ", "(max/mean tokens per expert)"};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (!strstr(buf, fields[i])) fail_msg("log lacks \"%s\":\n%s", fields[i], buf);
  assert_non_null(strstr(buf, "stated: training.peak_gflops"));
  assert_null(strstr(buf, "\r")); /* not a terminal: no progress line */
  assert_int_equal(sum.steps, 10);
  assert_false(isnan(sum.final_val_loss));
  assert_false(isnan(sum.first_val_loss));
  assert_int_equal(sum.tokens, 10 * 2 * 16);

  char path[TRAIN_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/config.json", cfg.out_dir);
  assert_true(file_size(path) > 0);
  snprintf(path, sizeof path, "%s/metrics.jsonl", cfg.out_dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[2048];
  int train_records = 0, eval_records = 0, summaries = 0, routed_layers = 0;
  while (fgets(line, sizeof line, f)) {
    train_records += strstr(line, "\"type\":\"train\"") != NULL;
    eval_records += strstr(line, "\"type\":\"eval\"") != NULL;
    if (!strstr(line, "\"type\":\"summary\",\"steps\":10,")) continue;
    summaries++;
    /* The tokens each expert of each MoE layer got over the run's steps:
     * every training token goes to top-k = 2 experts of every layer, so
     * each row sums to 10 steps x 2 x 16 tokens x 2 (evaluation routes
     * none of it). */
    const char *p = strstr(line, "\"expert_tokens\":[");
    assert_non_null(p);
    p += strlen("\"expert_tokens\":[");
    long c[4];
    int used = 0;
    while (sscanf(p, "[%ld,%ld,%ld,%ld]%n", &c[0], &c[1], &c[2], &c[3], &used) == 4) {
      assert_int_equal(c[0] + c[1] + c[2] + c[3], 10 * 2 * 16 * 2);
      routed_layers++;
      p += used;
      if (*p == ',') p++;
    }
    assert_true(*p == ']');
  }
  fclose(f);
  assert_int_equal(train_records, 4);
  assert_int_equal(eval_records, 3);
  assert_int_equal(summaries, 1);
  assert_int_equal(routed_layers, 2);
  unlink(path);
  snprintf(path, sizeof path, "%s/config.json", cfg.out_dir);
  unlink(path);
  rmdir(cfg.out_dir);
  free(buf);
  trainer_free(&tr);
  train_config_free(&cfg);
}

/* A dense model's log line has no MoE fields. */
static void test_dense_log_line(void **state) {
  (void)state;
  LogLine l = {.step = 3, .total_steps = 9, .loss = 2.5, .num_metrics = 4,
               .metrics = {{"loss", 2.5, 3}, {"lm", 2.5, 0}, {"aux", 0, 0}, {"z", 0, 0}},
               .lr = 1e-3f, .grad_norm = 0.5, .unit = {"token", "tokens", "tok/s"}, .has_flops = 1,
               .ms_per_step = 412, .tokens_per_s = 9950, .gflops = 58.2, .mfu_pct = 41.3, .peak_gflops = 141};
  char buf[512];
  format_log_line(buf, sizeof buf, &l);
  assert_string_equal(buf, "step 3/9 | loss 2.500 | lr 1.00e-03 | gnorm 0.50 | 412 ms/it | 9,950 tok/s | "
                           "58.2 GFLOP/s | MFU 41.3% of 141 GFLOP/s");
  format_log_json(buf, sizeof buf, &l);
  assert_string_equal(buf, "{\"type\":\"train\",\"step\":3,\"steps\":9,\"loss\":2.5,\"lm\":2.5,\"aux\":0,\"z\":0,"
                           "\"lr\":0.001,\"grad_norm\":0.5,\"ms_per_step\":412,\"tokens_per_s\":9950,\"gflops\":58.2,"
                           "\"mfu_pct\":41.3,\"peak_gflops\":141}");
  l.is_moe = 1;
  l.loss = l.metrics[0].value = 2.314;
  l.metrics[1] = (NetMetric){"lm", 2.301, 3};
  l.metrics[2] = (NetMetric){"aux", 0.0121, 4};
  l.metrics[3] = (NetMetric){"z", 0.0008, 4};
  l.imbalance = 1.234;
  format_log_line(buf, sizeof buf, &l);
  assert_string_equal(buf, "step 3/9 | loss 2.314 (lm 2.301 aux 0.0121 z 0.0008) | lr 1.00e-03 | gnorm 0.50 | "
                           "412 ms/it | 9,950 tok/s | 58.2 GFLOP/s | MFU 41.3% of 141 GFLOP/s | "
                           "moe imbalance 1.23 (max/mean tokens per expert)");
  /* Another network: its own metric names and unit; no FLOP count, no MFU. */
  LogLine c = {.step = 1, .total_steps = 2, .loss = 1.25, .num_metrics = 2,
               .metrics = {{"loss", 1.25, 3}, {"accuracy", 0.5, 3}}, .lr = 1e-3f, .grad_norm = 0.5,
               .unit = {"image", "images", "img/s"}, .ms_per_step = 412, .tokens_per_s = 1234};
  format_log_line(buf, sizeof buf, &c);
  assert_string_equal(buf, "step 1/2 | loss 1.250 (accuracy 0.500) | lr 1.00e-03 | gnorm 0.50 | 412 ms/it | "
                           "1,234 img/s");
  format_log_json(buf, sizeof buf, &c);
  assert_string_equal(buf, "{\"type\":\"train\",\"step\":1,\"steps\":2,\"loss\":1.25,\"accuracy\":0.5,\"lr\":0.001,"
                           "\"grad_norm\":0.5,\"ms_per_step\":412,\"images_per_s\":1234}");
  char n[32];
  assert_string_equal(fmt_thousands(n, sizeof n, 1234567), "1,234,567");
  assert_string_equal(fmt_thousands(n, sizeof n, 999), "999");
  assert_string_equal(fmt_si(n, sizeof n, 5.4e6), "5.4 M");
  assert_string_equal(fmt_duration(n, sizeof n, 773), "12m53s");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lr_schedule_through_trainer),
      cmocka_unit_test(test_grad_accumulation_matches_big_batch),
      cmocka_unit_test(test_weight_decay_skips_norms),
      cmocka_unit_test(test_clipping_factor),
      cmocka_unit_test(test_eval_and_learning),
      cmocka_unit_test(test_run_log_lines_and_files),
      cmocka_unit_test(test_dense_log_line),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
