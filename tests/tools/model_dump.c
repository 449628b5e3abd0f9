/* model_dump: runs fivefold's model on a deterministic random batch and
 * writes everything the PyTorch reference (tests/torch_ref/compare.py)
 * checks:
 *   DIR/init.safetensors     every parameter under its model.h name, plus
 *                            "tokens" and "targets" (I32 [B, T], -1 = ignored)
 *   DIR/results.safetensors  "logits" [B*T, V] of the initial model,
 *                            "loss.lm" / "loss.aux" / "loss.z" (F64 scalars)
 *                            and "grad.<name>" of the first training forward
 *                            and backward, "moe.expert_counts" I64 [L, E] and
 *                            "moe.dropped_assignments" of that forward,
 *                            "steps.loss_lm" / "steps.loss_aux" /
 *                            "steps.loss_z" / "steps.grad_norm" / "steps.lr"
 *                            (F64 [N]) of N optimizer steps on the same batch,
 *                            and "final.<name>" after them.
 * The steps are the trainer's own (train/optimizer.h: optimizer_step with
 * the learning-rate schedule and clipping as trainer_step applies them), so
 * a bug in bias correction, the schedule's step offset, the weight-decay
 * mask or clipping shows against torch.optim.AdamW: peak lr 1e-3, linear
 * warm-up over 3 steps, cosine decay to 1e-4 at step N, betas (0.9, 0.95),
 * eps 1e-8, weight decay 0.1 except on tensors marked no_weight_decay,
 * gradients clipped to a global norm of 1.6 (the compare.py constants: the
 * tiny models start above it and end below, so both sides of the clip run).
 *
 * usage: model_dump --config MODEL.json --out DIR [--steps N] [--seed S]
 *                   [--batch B] [--seq T] */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/rng.h"
#include "base/safetensors.h"
#include "model/config.h"
#include "model/model.h"
#include "train/net_transformer.h"
#include "train/optimizer.h"

#define LR 1e-3f
#define MIN_LR 1e-4f
#define WARMUP_STEPS 3
#define BETA1 0.9f
#define BETA2 0.95f
#define ADAM_EPS 1e-8f
#define WEIGHT_DECAY 0.1f
#define MAX_GRAD_NORM 1.6f

typedef struct Args {
  const char *config, *out;
  int steps, batch, seq;
  unsigned long long seed;
} Args;

static void usage(FILE *f) {
  fprintf(f,
          "usage: model_dump --config MODEL.json --out DIR [--steps N] [--seed S] [--batch B] [--seq T]\n"
          "Writes DIR/init.safetensors and DIR/results.safetensors for tests/torch_ref/compare.py.\n");
}

static int parse_int_arg(const char *flag, const char *s, long lo, long hi, long *out, Error *err) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || end == s || v < lo || v > hi)
    return error_set(err, ERR_ARG, "%s: expected an integer in %ld..%ld, got \"%s\"", flag, lo, hi, s);
  *out = v;
  return 0;
}

static int parse_args(int argc, char **argv, Args *a, Error *err) {
  *a = (Args){NULL, NULL, 10, 2, 16, 1234};
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
      usage(stdout);
      exit(0);
    }
    if (i + 1 >= argc) return error_set(err, ERR_ARG, "%s: missing value", f);
    const char *v = argv[++i];
    long n = 0;
    if (strcmp(f, "--config") == 0) a->config = v;
    else if (strcmp(f, "--out") == 0) a->out = v;
    else if (strcmp(f, "--steps") == 0) {
      if (parse_int_arg(f, v, 0, 100000, &n, err)) return err->code;
      a->steps = (int)n;
    } else if (strcmp(f, "--batch") == 0) {
      if (parse_int_arg(f, v, 1, 1 << 20, &n, err)) return err->code;
      a->batch = (int)n;
    } else if (strcmp(f, "--seq") == 0) {
      if (parse_int_arg(f, v, 1, 1 << 20, &n, err)) return err->code;
      a->seq = (int)n;
    } else if (strcmp(f, "--seed") == 0) {
      if (parse_int_arg(f, v, 0, 2147483647L, &n, err)) return err->code;
      a->seed = (unsigned long long)n;
    } else {
      return error_set(err, ERR_ARG, "unknown flag %s (try --help)", f);
    }
  }
  if (!a->config || !a->out) return error_set(err, ERR_ARG, "--config and --out are required (try --help)");
  return 0;
}

/* Tokens uniform in [0, V); targets uniform too, with about one in eight
 * ignored (-1) and the first target of every sequence ignored so there are
 * always some. */
static void make_batch(int *tokens, int *targets, int B, int T, int V, unsigned long long seed) {
  Rng tok = rng_make(seed, rng_stream_id("model_dump.tokens"));
  Rng tgt = rng_make(seed, rng_stream_id("model_dump.targets"));
  for (int i = 0; i < B * T; i++) {
    tokens[i] = (int)rng_next_below(&tok, (uint64_t)V);
    int target = (int)rng_next_below(&tgt, (uint64_t)V);
    int ignore = rng_next_uniform(&tgt) < 0.125 || i % T == 0;
    targets[i] = ignore ? -1 : target;
  }
}

static int add_params(SafetensorsWriter *w, const Model *m, const float *base, const char *prefix, Error *err) {
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *t = &m->tensors[i];
    char name[SAFETENSORS_MAX_NAME];
    snprintf(name, sizeof name, "%s%s", prefix, t->name);
    if (safetensors_writer_add_f32(w, name, t->ndim, t->shape, base + t->offset, err)) return err->code;
  }
  return 0;
}

static int add_f64(SafetensorsWriter *w, const char *name, int ndim, int64_t n, const double *data, Error *err) {
  int64_t shape[1] = {n};
  return safetensors_writer_add(w, name, ST_F64, ndim, shape, data, err);
}

static int run(const Args *a, Error *err) {
  ModelConfig cfg;
  if (model_config_load(&cfg, a->config, err)) return err->code;
  if (mkdir(a->out, 0755) != 0 && errno != EEXIST)
    return error_set(err, ERR_IO, "cannot create output directory %s: %s", a->out, strerror(errno));

  const int B = a->batch, T = a->seq, V = cfg.vocab_size, N = B * T;
  Model m;
  if (model_create(&m, &cfg, B, T, err)) return error_wrap(err, "building the model of %s", a->config);
  model_init_weights(&m, a->seed);

  int rc = ERR_NOMEM;
  int *tokens = malloc((size_t)N * sizeof *tokens), *targets = malloc((size_t)N * sizeof *targets);
  float *logits = malloc((size_t)N * V * sizeof *logits);
  float *grads0 = malloc(m.num_params * sizeof *grads0);
  Optimizer opt;
  OptimizerConfig oc = {.schedule = {LR, MIN_LR, WARMUP_STEPS, a->steps, LR_DECAY_COSINE},
                        .beta1 = BETA1,
                        .beta2 = BETA2,
                        .eps = ADAM_EPS,
                        .weight_decay = WEIGHT_DECAY,
                        .grad_clip = MAX_GRAD_NORM};
  Network net = {0};
  if (optimizer_create(&opt, m.num_params, &oc, err) || net_transformer_bind(&net, &m, err)) {
    optimizer_free(&opt);
    network_free(&net);
    model_free(&m);
    return err->code;
  }
  int steps_alloc = a->steps > 0 ? a->steps : 1;
  double *step_lm = calloc((size_t)steps_alloc, sizeof(double)), *step_aux = calloc((size_t)steps_alloc, sizeof(double));
  double *step_z = calloc((size_t)steps_alloc, sizeof(double)), *step_norm = calloc((size_t)steps_alloc, sizeof(double));
  double *step_lr = calloc((size_t)steps_alloc, sizeof(double));
  int L = cfg.num_layers, E = cfg.num_experts > 0 ? cfg.num_experts : 1;
  int64_t *counts = calloc((size_t)L * E, sizeof *counts);
  char path[4096];
  SafetensorsWriter *w = NULL;
  if (!tokens || !targets || !logits || !grads0 || !step_lm || !step_aux || !step_z || !step_norm || !step_lr ||
      !counts) {
    error_set(err, ERR_NOMEM, "out of memory for a %d x %d batch", B, T);
    goto done;
  }
  make_batch(tokens, targets, B, T, V, a->seed);

  /* init.safetensors: the weights and the batch, before anything changes them. */
  w = safetensors_writer_new();
  if (!w) {
    error_set(err, ERR_NOMEM, "out of memory");
    goto done;
  }
  if ((rc = add_params(w, &m, m.params, "", err))) goto done;
  int64_t bt[2] = {B, T};
  if ((rc = safetensors_writer_add(w, "tokens", ST_I32, 2, bt, tokens, err))) goto done;
  if ((rc = safetensors_writer_add(w, "targets", ST_I32, 2, bt, targets, err))) goto done;
  char seed_str[32];
  snprintf(seed_str, sizeof seed_str, "%llu", a->seed);
  if ((rc = safetensors_writer_set_metadata(w, "config", a->config, err))) goto done;
  if ((rc = safetensors_writer_set_metadata(w, "seed", seed_str, err))) goto done;
  snprintf(path, sizeof path, "%s/init.safetensors", a->out);
  if ((rc = safetensors_writer_write(w, path, err))) goto done;
  safetensors_writer_free(w);
  w = NULL;

  /* Logits, then one training forward/backward for losses and gradients. */
  if ((rc = model_logits(&m, tokens, B, T, logits, err))) goto done;
  ModelLoss loss0;
  model_zero_grad(&m);
  if ((rc = model_forward(&m, tokens, targets, B, T, 1, 1.0f, &loss0, err))) goto done;
  if ((rc = model_backward(&m, err))) goto done;
  memcpy(grads0, m.grads, m.num_params * sizeof *grads0);
  int64_t dropped0 = m.dropped_assignments;
  if (cfg.num_experts > 0)
    for (int i = 0; i < L * cfg.num_experts; i++) counts[i] = m.expert_counts[i];

  /* The trainer's optimizer on the same batch: one-rank trainer_step does
   * exactly this after the backward (optimizer_step: global norm, clipping,
   * the scheduled lr of step opt.step, AdamW with the decay mask). */
  for (int step = 1; step <= a->steps; step++) {
    ModelLoss loss;
    model_zero_grad(&m);
    if ((rc = model_forward(&m, tokens, targets, B, T, 1, 1.0f, &loss, err))) goto done;
    if ((rc = model_backward(&m, err))) goto done;
    OptimizerStepInfo info;
    if ((rc = optimizer_step(&opt, &net, &info, err))) goto done;
    step_lm[step - 1] = loss.lm;
    step_aux[step - 1] = loss.aux;
    step_z[step - 1] = loss.z;
    step_norm[step - 1] = info.grad_norm;
    step_lr[step - 1] = info.lr;
    fprintf(stderr, "step %2d  lm %.6f  aux %.6g  z %.6g  grad norm %.6g  lr %.3g  clip %.3g\n", step, loss.lm,
            loss.aux, loss.z, info.grad_norm, (double)info.lr, (double)info.clip_scale);
  }

  w = safetensors_writer_new();
  if (!w) {
    rc = error_set(err, ERR_NOMEM, "out of memory");
    goto done;
  }
  int logits_shape[2] = {N, V};
  if ((rc = safetensors_writer_add_f32(w, "logits", 2, logits_shape, logits, err))) goto done;
  if ((rc = add_f64(w, "loss.lm", 0, 0, &loss0.lm, err))) goto done;
  if ((rc = add_f64(w, "loss.aux", 0, 0, &loss0.aux, err))) goto done;
  if ((rc = add_f64(w, "loss.z", 0, 0, &loss0.z, err))) goto done;
  int64_t tokens_counted = loss0.tokens;
  if ((rc = safetensors_writer_add(w, "loss.tokens", ST_I64, 0, NULL, &tokens_counted, err))) goto done;
  if ((rc = add_params(w, &m, grads0, "grad.", err))) goto done;
  if (cfg.num_experts > 0) {
    int64_t cshape[2] = {L, cfg.num_experts};
    if ((rc = safetensors_writer_add(w, "moe.expert_counts", ST_I64, 2, cshape, counts, err))) goto done;
    if ((rc = safetensors_writer_add(w, "moe.dropped_assignments", ST_I64, 0, NULL, &dropped0, err))) goto done;
  }
  if ((rc = add_f64(w, "steps.loss_lm", 1, a->steps, step_lm, err))) goto done;
  if ((rc = add_f64(w, "steps.loss_aux", 1, a->steps, step_aux, err))) goto done;
  if ((rc = add_f64(w, "steps.loss_z", 1, a->steps, step_z, err))) goto done;
  if ((rc = add_f64(w, "steps.grad_norm", 1, a->steps, step_norm, err))) goto done;
  if ((rc = add_f64(w, "steps.lr", 1, a->steps, step_lr, err))) goto done;
  if ((rc = add_params(w, &m, m.params, "final.", err))) goto done;
  char hyper[200];
  snprintf(hyper, sizeof hyper,
           "lr=%g min_lr=%g warmup=%d decay=cosine beta1=%g beta2=%g eps=%g weight_decay=%g max_grad_norm=%g",
           (double)LR, (double)MIN_LR, WARMUP_STEPS, (double)BETA1, (double)BETA2, (double)ADAM_EPS,
           (double)WEIGHT_DECAY, (double)MAX_GRAD_NORM);
  if ((rc = safetensors_writer_set_metadata(w, "adamw", hyper, err))) goto done;
  snprintf(path, sizeof path, "%s/results.safetensors", a->out);
  rc = safetensors_writer_write(w, path, err);

done:
  safetensors_writer_free(w);
  free(tokens);
  free(targets);
  free(logits);
  free(grads0);
  optimizer_free(&opt);
  free(step_lm);
  free(step_aux);
  free(step_z);
  free(step_norm);
  free(step_lr);
  free(counts);
  network_free(&net);
  model_free(&m);
  return rc;
}

int main(int argc, char **argv) {
  Error err = {0};
  Args a;
  if (parse_args(argc, argv, &a, &err) || run(&a, &err)) {
    fprintf(stderr, "model_dump: %s\n", err.msg);
    return 1;
  }
  return 0;
}
