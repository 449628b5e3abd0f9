/* The training loop: micro-batch accumulation, the optimizer step,
 * validation, saving and resuming checkpoints, and the run's reporting
 * (banner, log lines, progress, run files). See trainer.h. */
#include "train/trainer.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/timer.h"
#include "kern/peak.h"
#include "model/flops.h"
#include "sched/builders.h"

/* Seconds the FMA loop runs when no peak is configured. */
#define PEAK_MEASURE_SECONDS 0.3

void trainer_param_counts(const Model *m, double *total, double *active) {
  double expert = 0;
  for (int i = 0; i < m->num_tensors; i++)
    if (m->tensors[i].is_expert) expert += (double)m->tensors[i].numel;
  *total = (double)m->num_params;
  double frac = m->cfg.num_experts > 0 ? (double)m->cfg.top_k / m->cfg.num_experts : 1.0;
  *active = *total - expert + expert * frac;
}

/* ---- the step's actions (executor handlers) ---- */

static int run_forward(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  const TrainConfig *cfg = tr->cfg;
  data_loader_next(&tr->train, tr->inputs, tr->targets, NULL);
  ModelLoss loss = {0};
  int rc = model_forward(&tr->model, tr->inputs, tr->targets, cfg->micro_batch_size, cfg->seq_len, 1, tr->grad_scale,
                         &loss, err);
  if (rc) return rc;
  if (!isfinite(loss.lm))
    return error_set(err, ERR_INTERNAL,
                     "step %d: the loss is not finite (diverged; try a lower training.lr or a grad_clip)",
                     tr->step + 1);
  tr->acc.lm_sum += loss.lm * (double)loss.tokens;
  tr->acc.aux_sum += loss.aux;
  tr->acc.z_sum += loss.z;
  tr->acc.tokens += loss.tokens;
  size_t n_counts = cfg->model.num_experts > 0 ? (size_t)cfg->model.num_layers * cfg->model.num_experts : 0;
  for (size_t i = 0; i < n_counts; i++) tr->step_counts[i] += tr->model.expert_counts[i];
  (void)a;
  return 0;
}

static int run_backward(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  /* The backward that completes the gradient starts the bucket reductions
   * as its layers finish. */
  int hook = tr->dp > 1 && executor_is_last_backward(&tr->exec, a);
  if (hook) {
    tr->model.on_grads_ready = dp_grads_on_ready;
    tr->model.on_grads_ready_ctx = &tr->dp_grads;
  }
  int rc = model_backward(&tr->model, err);
  tr->model.on_grads_ready = NULL;
  tr->model.on_grads_ready_ctx = NULL;
  return rc;
}

/* The program has one GRAD_REDUCE per model chunk (one chunk here); the
 * dp_grads buckets are finer: they start inside the chunk's last backward,
 * and this action is where their completion is awaited. */
static int run_grad_reduce(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  (void)a;
  return tr->dp > 1 ? dp_grads_finish(&tr->dp_grads, err) : 0;
}

static int run_optim(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  (void)a;
  if (tr->zero) return dist_optimizer_step(&tr->dist_opt, &tr->model, &tr->acc.info, err);
  return optimizer_step(&tr->opt, &tr->model, &tr->acc.info, err);
}

/* Data parallelism: the dp group, the buckets, the sharded optimizer. */
static int setup_data_parallel(Trainer *tr, const OptimizerConfig *oc, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  if (!comm_initialized() || comm_world_size() != tr->dp)
    return error_set(err, ERR_CONFIG,
                     "parallel.dp is %d but this process runs in a world of %d rank(s) (start it with mpirun -np %d)",
                     tr->dp, comm_initialized() ? comm_world_size() : 1, tr->dp);
  tr->grid = calloc(1, sizeof *tr->grid);
  if (!tr->grid) return error_set(err, ERR_NOMEM, "trainer: out of memory for the rank grid");
  GridSizes sizes = {.world = tr->dp, .tp = 1, .cp = 1, .dp = tr->dp, .pp = 1, .etp = 1, .ep = 1, .edp = 0};
  int rc = comm_grid_create(&sizes, tr->grid, err);
  if (rc) {
    free(tr->grid);
    tr->grid = NULL;
    return rc;
  }
  tr->dp_group = comm_grid_group(tr->grid, GRID_GROUP_DP_CP);
  tr->dp_rank = tr->dp_group->rank;
  tr->zero = cfg->distributed_optimizer != 0;
  rc = dp_grads_create(&tr->dp_grads, tr->dp_group, tr->model.grads, tr->model.num_params, cfg->bucket_mb * 1e6,
                       tr->zero, err);
  if (!rc && tr->zero) {
    rc = dist_optimizer_create(&tr->dist_opt, &tr->dp_grads, &tr->model, oc, err);
    tr->opt.cfg = *oc;
    tr->opt.num_params = tr->model.num_params;
  }
  if (!rc) rc = dp_grads_calibrate(&tr->dp_grads, err);
  return rc;
}

int trainer_create(Trainer *tr, const TrainConfig *cfg, Error *err) {
  memset(tr, 0, sizeof *tr);
  tr->cfg = cfg;
  /* One pool: our OpenMP loops and OpenBLAS (its OpenMP build) use the same
   * thread count, so they never oversubscribe the cores. */
  tr->threads = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
  omp_set_num_threads(tr->threads);
  openblas_set_num_threads(tr->threads);

  int B = cfg->micro_batch_size, T = cfg->seq_len;
  tr->dp = cfg->world_size > 0 ? cfg->world_size : 1;
  tr->grad_scale = 1.0f / ((float)cfg->grad_accum_steps * (float)tr->dp);
  int rc = model_create(&tr->model, &cfg->model, B, T, err);
  if (rc) {
    error_wrap(err, "creating the model");
    goto fail;
  }
  model_init_weights(&tr->model, cfg->seed);
  if (tr->dp > 1 && comm_initialized() && comm_world_size() == tr->dp) tr->dp_rank = comm_world_rank();

  rc = data_loader_open(&tr->train, (const char *const *)cfg->train_paths, cfg->num_train, B, T, tr->dp_rank, tr->dp,
                        cfg->seed, (uint32_t)cfg->model.vocab_size, "data.train", err);
  if (rc) goto fail;
  if (cfg->num_val > 0) {
    rc = val_loader_open(&tr->val, (const char *const *)cfg->val_paths, cfg->num_val, B, T, tr->dp_rank, tr->dp,
                         cfg->eval_batches, (uint32_t)cfg->model.vocab_size, "data.val", err);
    if (rc) goto fail;
    tr->has_val = 1;
  }

  OptimizerConfig oc = {
      .schedule = {cfg->lr, cfg->min_lr, cfg->warmup_steps, cfg->steps, cfg->decay},
      .beta1 = cfg->beta1,
      .beta2 = cfg->beta2,
      .eps = cfg->eps,
      .weight_decay = cfg->weight_decay,
      .grad_clip = cfg->grad_clip,
  };
  if (tr->dp > 1) {
    if ((rc = setup_data_parallel(tr, &oc, err))) goto fail;
  }
  if (!tr->zero && (rc = optimizer_create(&tr->opt, &tr->model, &oc, err))) goto fail;

  /* One step is the program of the "none" schedule: one pipeline stage,
   * gradient accumulation over the micro-batches. */
  SchedConfig sc = {.schedule = SCHED_SCHEDULE_NONE, .pp = 1, .vpp = 1, .microbatches = cfg->grad_accum_steps};
  if ((rc = sched_build(&sc, &tr->prog, err))) goto fail;
  if ((rc = executor_create(&tr->exec, tr->prog, 0, tr, err))) goto fail;
  executor_set_handler(&tr->exec, SCHED_FWD, run_forward);
  executor_set_handler(&tr->exec, SCHED_BWD, run_backward);
  executor_set_handler(&tr->exec, SCHED_GRAD_REDUCE, run_grad_reduce);
  executor_set_handler(&tr->exec, SCHED_OPTIM, run_optim);

  size_t n = (size_t)B * T;
  size_t n_counts = (size_t)cfg->model.num_layers * (cfg->model.num_experts > 0 ? cfg->model.num_experts : 1);
  tr->inputs = malloc(n * sizeof(int));
  tr->targets = malloc(n * sizeof(int));
  tr->step_counts = calloc(n_counts, sizeof(long));
  if (!tr->inputs || !tr->targets || !tr->step_counts) {
    rc = error_set(err, ERR_NOMEM, "trainer: out of memory for batch buffers");
    goto fail;
  }
  tr->flops_per_token = model_flops_per_sequence(&cfg->model, T) / T;
  return 0;
fail:
  trainer_free(tr);
  return rc;
}

void trainer_free(Trainer *tr) {
  executor_free(&tr->exec);
  sched_program_free(tr->prog);
  dist_optimizer_free(&tr->dist_opt);
  dp_grads_free(&tr->dp_grads);
  if (tr->grid) {
    comm_grid_destroy(tr->grid);
    free(tr->grid);
  }
  optimizer_free(&tr->opt);
  model_free(&tr->model);
  data_loader_close(&tr->train);
  val_loader_close(&tr->val);
  free(tr->inputs);
  free(tr->targets);
  free(tr->step_counts);
  memset(tr, 0, sizeof *tr);
}

int trainer_step(Trainer *tr, TrainStepResult *res, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  const ModelConfig *mc = &cfg->model;
  int B = cfg->micro_batch_size, T = cfg->seq_len, accum = cfg->grad_accum_steps;
  size_t n_counts = mc->num_experts > 0 ? (size_t)mc->num_layers * mc->num_experts : 0;
  double t0 = timer_now();
  memset(res, 0, sizeof *res);
  memset(&tr->acc, 0, sizeof tr->acc);
  if (n_counts) memset(tr->step_counts, 0, n_counts * sizeof(long));
  model_zero_grad(&tr->model);
  if (tr->dp > 1) dp_grads_begin(&tr->dp_grads);
  int rc = executor_run(&tr->exec, err);
  if (rc) return error_wrap(err, "step %d", tr->step + 1);
  /* Losses over every rank's tokens; aux and z are per-micro-batch means,
   * so they average over ranks. */
  double sums[4] = {tr->acc.lm_sum, (double)tr->acc.tokens, tr->acc.aux_sum, tr->acc.z_sum};
  if (tr->dp > 1) {
    rc = comm_allreduce_f64(tr->dp_group, sums, 4, COMM_SUM, NULL, err);
    if (!rc && n_counts)
      rc = comm_allreduce_i64(tr->dp_group, (int64_t *)tr->step_counts, n_counts, COMM_SUM, NULL, err);
    if (rc) return error_wrap(err, "step %d: averaging the losses over the data-parallel ranks", tr->step + 1);
    sums[2] /= tr->dp;
    sums[3] /= tr->dp;
  }
  tr->step++;
  res->step = tr->step;
  res->lm = sums[1] > 0 ? sums[0] / sums[1] : 0;
  res->aux = sums[2] / accum;
  res->z = sums[3] / accum;
  res->loss = res->lm + res->aux + res->z;
  res->lr = tr->acc.info.lr;
  res->grad_norm = tr->acc.info.grad_norm;
  res->imbalance = n_counts ? moe_imbalance(tr->step_counts, mc) : 0;
  res->tokens = (long)B * T * accum * tr->dp;
  res->seconds = timer_now() - t0;
  if (tr->dp > 1) {
    /* A rank that finished its backward early waits in the reduction for
     * the slowest one; the slowest rank's wait is the reduction's own
     * exposed time, so the minimum over ranks is what is reported. */
    double cal = tr->dp_grads.calibrated_seconds, exposed = tr->dp_grads.exposed_seconds;
    rc = comm_allreduce_f64(tr->dp_group, &exposed, 1, COMM_MIN, NULL, err);
    if (rc) return rc;
    res->reduce_exposed_seconds = exposed;
    res->reduce_hidden_fraction = cal > 0 ? fmax(0.0, fmin(1.0, 1.0 - exposed / cal)) : 0;
  }
  return 0;
}

int trainer_evaluate(Trainer *tr, EvalResult *res, Error *err) {
  memset(res, 0, sizeof *res);
  if (!tr->has_val) return error_set(err, ERR_CONFIG, "no validation data (set data.val or --val-data)");
  double t0 = timer_now(), sum = 0;
  int B = tr->cfg->micro_batch_size, T = tr->cfg->seq_len;
  val_loader_reset(&tr->val);
  while (val_loader_next(&tr->val, tr->inputs, tr->targets, NULL)) {
    ModelLoss loss = {0};
    int rc = model_forward(&tr->model, tr->inputs, tr->targets, B, T, 0, 1.0f, &loss, err);
    if (rc) return error_wrap(err, "validation batch %d", res->batches + 1);
    sum += loss.lm * (double)loss.tokens;
    res->tokens += loss.tokens;
    res->batches++;
  }
  if (tr->dp > 1) {
    double sums[3] = {sum, (double)res->tokens, (double)res->batches};
    int rc = comm_allreduce_f64(tr->dp_group, sums, 3, COMM_SUM, NULL, err);
    if (rc) return error_wrap(err, "validation: summing over the data-parallel ranks");
    sum = sums[0];
    res->tokens = (long)sums[1];
    res->batches = (int)sums[2];
  }
  res->loss = res->tokens > 0 ? sum / (double)res->tokens : NAN;
  res->seconds = timer_now() - t0;
  return 0;
}

/* ---- checkpoints ---- */

/* Rank 0's result code, on every rank: what rank 0 alone did (write a
 * checkpoint, check a directory) either succeeded everywhere or fails
 * everywhere, instead of leaving the other ranks waiting in the next
 * collective. */
static int agree_with_root(Trainer *tr, int rc, const char *what, Error *err) {
  if (tr->dp <= 1) return rc;
  int code = rc;
  int brc = comm_bcast_bytes(tr->dp_group, 0, &code, sizeof code, NULL, err);
  if (brc) return brc;
  if (code && tr->dp_rank != 0) return error_set(err, code, "rank 0 failed %s (see its message)", what);
  return rc;
}

int trainer_save_checkpoint(Trainer *tr, CheckpointSaveInfo *info, Error *err) {
  /* Full logical tensors: the sharded AdamW state is gathered first (every
   * rank takes part), then rank 0 writes. */
  Optimizer full = tr->opt;
  int rc = 0;
  if (tr->zero) {
    if ((rc = optimizer_create(&full, &tr->model, &tr->opt.cfg, err))) return rc;
    rc = dist_optimizer_gather(&tr->dist_opt, &full, err);
  }
  if (!rc && tr->dp_rank == 0) {
    CheckpointSource src = {
        .step = tr->step,
        .model = &tr->model,
        .opt = &full,
        .data_loader = tr->train.state,
        .data_windows = tr->train.windows.num_windows,
        .train_config = tr->cfg,
    };
    rc = checkpoint_save(tr->cfg->out_dir, &src, tr->cfg->keep_last, info, err);
  }
  if (tr->zero) optimizer_free(&full);
  return agree_with_root(tr, rc, "to save the checkpoint", err);
}

/* Warns about each field of `section` whose value differs between the
 * checkpoint's run config and this run's. */
static void warn_config_changes(const cJSON *saved, const cJSON *now, const char *section) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(saved, section);
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(now, section);
  if (!cJSON_IsObject(a) || !cJSON_IsObject(b)) return;
  for (const cJSON *y = b->child; y; y = y->next) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, y->string);
    if (x && cJSON_Compare(x, y, 1)) continue;
    char *sx = x ? cJSON_PrintUnformatted(x) : NULL, *sy = cJSON_PrintUnformatted(y);
    log_warn("resuming with %s.%s = %.200s (the checkpoint's run had %.200s)", section, y->string, sy ? sy : "?",
             sx ? sx : "no such field");
    free(sx);
    free(sy);
  }
}

int trainer_resume(Trainer *tr, const char *ckpt_dir, Error *err) {
  CheckpointTrainState st;
  /* Every rank reads the full tensors; a ZeRO-1 rank keeps its shard of
   * the moments. */
  Optimizer full = tr->opt;
  int rc = tr->zero ? optimizer_create(&full, &tr->model, &tr->opt.cfg, err) : 0;
  if (!rc) rc = checkpoint_load_training(ckpt_dir, &tr->model, &full, &st, err);
  if (tr->zero) {
    if (!rc) dist_optimizer_scatter(&tr->dist_opt, &full);
    optimizer_free(&full);
  } else {
    tr->opt = full;
  }
  if (rc) {
    if (rc == ERR_CONFIG) error_wrap(err, "cannot resume with the model of %s", tr->cfg->config_path);
    return rc;
  }
  cJSON *saved = NULL;
  if (tr->dp_rank == 0 && checkpoint_read_train_config(ckpt_dir, &saved, err) == 0) {
    cJSON *now = train_config_to_json(tr->cfg);
    warn_config_changes(saved, now, "training");
    warn_config_changes(saved, now, "data");
    cJSON_Delete(now);
    cJSON_Delete(saved);
  }
  uint64_t windows = tr->train.windows.num_windows;
  tr->train.state = st.data_loader;
  if (st.data_windows != windows) {
    log_warn("the training data has %llu windows but the checkpoint was saved on %llu: the data changed, so the "
             "order from here on is not that of the original run",
             (unsigned long long)windows, (unsigned long long)st.data_windows);
    tr->train.state.position %= windows;
  }
  tr->step = tr->start_step = st.step;
  snprintf(tr->resumed_from, sizeof tr->resumed_from, "%s", ckpt_dir);
  return 0;
}

/* ---- reporting ---- */

void trainer_options_default(TrainerOptions *o) {
  memset(o, 0, sizeof *o);
  o->progress = -1;
  o->write_run_files = 1;
  o->eval_at_start = 1;
}

static int mkdir_p(const char *path, Error *err) {
  char buf[TRAIN_PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char saved = *p;
      *p = '\0';
      if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return error_set(err, ERR_IO, "cannot create output directory %s: %s", buf, strerror(errno));
      *p = saved;
      if (!saved) break;
    }
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return error_set(err, ERR_IO, "output path %s exists and is not a directory", path);
  return 0;
}

/* Writes text to path through a temporary file and a rename. */
static int write_file_atomic(const char *path, const char *text, Error *err) {
  char tmp[TRAIN_PATH_MAX + 64];
  int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  if (n < 0 || (size_t)n >= sizeof tmp) return error_set(err, ERR_IO, "%s: path too long", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) return error_set(err, ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
  int ok = fputs(text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok &= fclose(f) == 0;
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    return error_set(err, ERR_IO, "cannot write %s: %s", path, strerror(errno));
  }
  return 0;
}

static void print_banner(const Trainer *tr, FILE *out, double peak, int peak_measured) {
  const TrainConfig *cfg = tr->cfg;
  const ModelConfig *mc = &cfg->model;
  char a[32], b[32], c[32], d[32];
  double total, active;
  trainer_param_counts(&tr->model, &total, &active);
  fprintf(out, "fivefold train: %s\n", cfg->config_path);
  int moe_layers = model_config_num_moe_layers(mc);
  fprintf(out, "  model    %s: %d layers, hidden %d, %d heads (%d kv, head_dim %d), vocab %d%s\n", mc->model_type,
          mc->num_layers, mc->hidden_size, mc->num_heads, model_config_kv_heads(mc),
          model_config_head_dim(mc), mc->vocab_size,
          mc->tie_word_embeddings ? ", tied embeddings" : "");
  if (moe_layers > 0) {
    char cap[64];
    if (mc->capacity_factor > 0) snprintf(cap, sizeof cap, "capacity factor %.2f", (double)mc->capacity_factor);
    else snprintf(cap, sizeof cap, "dropless");
    char shared[64] = "";
    if (mc->shared_expert_intermediate_size > 0)
      snprintf(shared, sizeof shared, ", shared expert ffn %d", mc->shared_expert_intermediate_size);
    fprintf(out, "  moe      %d of %d layers: %d experts, top-%d, expert ffn %d%s, %s, aux %.3g, z %.3g", moe_layers,
            mc->num_layers, mc->num_experts, mc->top_k, mc->moe_intermediate_size, shared, cap,
            (double)mc->aux_loss_coeff, (double)mc->z_loss_coeff);
    if (moe_layers < mc->num_layers) fprintf(out, "; dense ffn %d", mc->intermediate_size);
    fputc('\n', out);
  } else {
    fprintf(out, "  mlp      dense SwiGLU, ffn %d\n", mc->intermediate_size);
  }
  fprintf(out, "  params   %s total, %s active per token\n", fmt_si(a, sizeof a, total), fmt_si(b, sizeof b, active));
  const TokenWindows *tw = &tr->train.windows;
  long per_step = train_config_tokens_per_step(cfg);
  double epochs = (double)per_step * cfg->steps / ((double)tw->num_windows * cfg->seq_len);
  fprintf(out, "  data     train %s tokens in %d shard(s), %s windows of %d (%.2f epochs over %d steps)\n",
          fmt_thousands(a, sizeof a, (double)tw->num_tokens), tw->num_shards,
          fmt_thousands(b, sizeof b, (double)tw->num_windows), cfg->seq_len + 1, epochs, cfg->steps);
  if (tr->has_val)
    fprintf(out, "           val %s tokens in %d shard(s); %d batches (%s windows) per evaluation\n",
            fmt_thousands(a, sizeof a, (double)tr->val.windows.num_tokens), tr->val.windows.num_shards,
            tr->val.num_batches, fmt_thousands(c, sizeof c, (double)tr->val.num_used));
  else
    fprintf(out, "           no validation data\n");
  fprintf(out, "  batch    %d x %d tokens x %d accumulation = %s tokens per step\n", cfg->micro_batch_size,
          cfg->seq_len, cfg->grad_accum_steps, fmt_thousands(a, sizeof a, (double)per_step));
  fprintf(out, "  optim    AdamW lr %.2e -> %.2e %s, warmup %d, wd %g, betas (%g, %g), eps %g, clip %g\n",
          (double)cfg->lr, (double)cfg->min_lr, lr_decay_name(cfg->decay), cfg->warmup_steps,
          (double)cfg->weight_decay, (double)cfg->beta1, (double)cfg->beta2, (double)cfg->eps,
          (double)cfg->grad_clip);
  fprintf(out, "  compute  %s FLOP per token (fwd+bwd), %d thread%s, peak %.0f GFLOP/s (%s)\n",
          fmt_si(d, sizeof d, tr->flops_per_token), tr->threads, tr->threads == 1 ? "" : "s", peak,
          peak_measured ? "measured: FMA loop on every thread" : "stated: training.peak_gflops");
  fflush(out);
}

static void print_eval(FILE *out, FILE *jsonl, int step, int total, const EvalResult *ev) {
  char tok[32];
  fprintf(out, "eval step %d/%d | val loss %.3f | %.3f bits/token | %d batches, %s tokens | %.1f s\n", step, total,
          ev->loss, ev->loss / log(2.0), ev->batches, fmt_thousands(tok, sizeof tok, (double)ev->tokens),
          ev->seconds);
  fflush(out);
  if (jsonl) {
    fprintf(jsonl, "{\"type\":\"eval\",\"step\":%d,\"val_loss\":%.6g,\"tokens\":%ld,\"seconds\":%.6g}\n", step,
            ev->loss, ev->tokens, ev->seconds);
    fflush(jsonl);
  }
}

/* A resumed run continues the metrics of the run it resumes: records past
 * its start step (steps whose state died with the old process, and that
 * process's summary) are dropped, and so is a line torn by a kill, so the
 * file reads as one run. */
static int keep_metrics_up_to(const char *path, int step, Error *err) {
  FILE *f = fopen(path, "r");
  if (!f) return errno == ENOENT ? 0 : error_set(err, ERR_IO, "cannot read %s: %s", path, strerror(errno));
  char *kept = NULL, *line = NULL;
  size_t kept_len = 0, line_cap = 0;
  FILE *out = open_memstream(&kept, &kept_len);
  if (!out) {
    fclose(f);
    return error_set(err, ERR_NOMEM, "out of memory reading %s", path);
  }
  ssize_t n;
  while ((n = getline(&line, &line_cap, f)) > 0) {
    cJSON *rec = cJSON_Parse(line);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rec, "type");
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(rec, "step");
    int keep = line[n - 1] == '\n' && cJSON_IsString(type) && strcmp(type->valuestring, "summary") &&
               cJSON_IsNumber(at) && at->valuedouble <= step;
    if (keep) fputs(line, out);
    cJSON_Delete(rec);
  }
  free(line);
  fclose(f);
  int rc = fclose(out) == 0 ? 0 : error_set(err, ERR_NOMEM, "out of memory filtering %s", path);
  if (!rc) rc = write_file_atomic(path, kept ? kept : "", err);
  free(kept);
  return rc;
}

static int open_run_files(const Trainer *tr, FILE **jsonl, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  int rc = mkdir_p(cfg->out_dir, err);
  if (rc) return rc;
  char path[TRAIN_PATH_MAX + 32]; /* out_dir + a file name */
  cJSON *json = train_config_to_json(cfg);
  char *text = json ? cJSON_Print(json) : NULL;
  cJSON_Delete(json);
  if (!text) return error_set(err, ERR_NOMEM, "cannot render the resolved config");
  snprintf(path, sizeof path, "%s/config.json", cfg->out_dir);
  size_t len = strlen(text);
  char *with_nl = malloc(len + 2);
  if (!with_nl) {
    free(text);
    return error_set(err, ERR_NOMEM, "out of memory");
  }
  memcpy(with_nl, text, len);
  memcpy(with_nl + len, "\n", 2);
  free(text);
  rc = write_file_atomic(path, with_nl, err);
  free(with_nl);
  if (rc) return rc;
  snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->out_dir);
  if (tr->step > 0 && (rc = keep_metrics_up_to(path, tr->step, err))) return rc;
  *jsonl = fopen(path, tr->step > 0 ? "a" : "w");
  if (!*jsonl) return error_set(err, ERR_IO, "cannot create %s: %s", path, strerror(errno));
  return 0;
}

static int save_and_report(Trainer *tr, FILE *out, FILE *jsonl, Error *err) {
  CheckpointSaveInfo info;
  double t0 = timer_now();
  int rc = trainer_save_checkpoint(tr, &info, err);
  if (rc) return rc;
  double seconds = timer_now() - t0;
  char removed[64] = "";
  if (info.removed > 0) snprintf(removed, sizeof removed, "; removed %d older", info.removed);
  fprintf(out, "checkpoint step %d saved to %s (%.2f MB, %.2f s%s)\n", tr->step, info.dir, (double)info.bytes / 1e6,
          seconds, removed);
  fflush(out);
  if (jsonl) {
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "type", "checkpoint");
    cJSON_AddNumberToObject(rec, "step", tr->step);
    cJSON_AddStringToObject(rec, "path", info.dir);
    cJSON_AddNumberToObject(rec, "bytes", (double)info.bytes);
    cJSON_AddNumberToObject(rec, "seconds", seconds);
    char *text = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    if (text) fprintf(jsonl, "%s\n", text);
    free(text);
    fflush(jsonl);
  }
  return 0;
}

int trainer_run(Trainer *tr, const TrainerOptions *opts, TrainSummary *summary, Error *err) {
  TrainerOptions defaults;
  if (!opts) {
    trainer_options_default(&defaults);
    opts = &defaults;
  }
  const TrainConfig *cfg = tr->cfg;
  /* Only rank 0 reports; the others run the same collective steps. */
  int root = tr->dp_rank == 0;
  FILE *devnull = root ? NULL : fopen("/dev/null", "w");
  if (!root && !devnull) return error_set(err, ERR_IO, "cannot open /dev/null: %s", strerror(errno));
  FILE *out = !root ? devnull : opts->out ? opts->out : stdout;
  ProgressLine progress;
  memset(&progress, 0, sizeof progress);
  TrainSummary sum;
  memset(&sum, 0, sizeof sum);
  sum.first_val_loss = sum.final_val_loss = NAN;

  double peak = cfg->peak_gflops;
  int peak_measured = 0;
  if (!(peak > 0) && root) {
    peak = peak_fma_gflops(tr->threads, PEAK_MEASURE_SECONDS);
    peak_measured = 1;
  }
  sum.peak_gflops = peak;

  FILE *jsonl = NULL;
  int rc = 0;
  if (opts->save_checkpoints) {
    rc = root ? checkpoint_check_run_dir(cfg->out_dir, tr->step, err) : 0;
    if ((rc = agree_with_root(tr, rc, "to check the run directory", err))) goto done;
  }
  if (opts->write_run_files && root && (rc = open_run_files(tr, &jsonl, err))) goto done;
  print_banner(tr, out, peak, peak_measured);
  if (tr->dp > 1) {
    const DpGrads *g = &tr->dp_grads;
    fprintf(out, "  parallel dp %d (mpi ranks), %d gradient bucket(s) of <= %.2f MB, %s; blocking reduction %.2f ms\n",
            tr->dp, g->num_buckets, (double)(g->buckets[0].end - g->buckets[0].begin) * sizeof(float) / 1e6,
            tr->zero ? "reduce-scatter + distributed optimizer (ZeRO-1)" : "all-reduce", 1e3 * g->calibrated_seconds);
  }
  if (opts->write_run_files) fprintf(out, "  output   %s (config.json, metrics.jsonl)\n", cfg->out_dir);
  if (opts->save_checkpoints) {
    char every[64] = "";
    if (cfg->checkpoint_interval > 0) snprintf(every, sizeof every, "every %d steps and ", cfg->checkpoint_interval);
    char keep[64] = ", keeping all";
    if (cfg->keep_last > 0) snprintf(keep, sizeof keep, ", keeping the last %d", cfg->keep_last);
    fprintf(out, "  ckpt     %sat the end%s, in %s/%s\n", every, keep, cfg->out_dir, CHECKPOINT_SUBDIR);
  }
  if (tr->resumed_from[0])
    fprintf(out, "  resumed  from %s at step %d of %d\n", tr->resumed_from, tr->start_step, cfg->steps);
  fflush(out);

  int tty = isatty(fileno(out));
  progress_init(&progress, out, opts->progress < 0 ? tty : opts->progress);

  EvalResult ev;
  if (tr->has_val && opts->eval_at_start && tr->step == 0) {
    if ((rc = trainer_evaluate(tr, &ev, err))) goto done;
    print_eval(out, jsonl, 0, cfg->steps, &ev);
    sum.first_val_loss = ev.loss;
    sum.eval_seconds += ev.seconds;
  }

  int is_moe = model_config_num_moe_layers(&cfg->model) > 0;
  IntervalStats iv;
  memset(&iv, 0, sizeof iv);
  double exposed_sum = 0;
  double last_interval_loss = NAN;
  char line[1024];
  while (tr->step < cfg->steps) {
    TrainStepResult r;
    if ((rc = trainer_step(tr, &r, err))) goto done;
    if (opts->on_step) opts->on_step(opts->ctx, &r);
    if (r.step == 1) sum.first_loss = r.loss;
    iv.steps++;
    iv.loss += r.loss;
    iv.lm += r.lm;
    iv.aux += r.aux;
    iv.z += r.z;
    iv.grad_norm += r.grad_norm;
    iv.imbalance += r.imbalance;
    iv.seconds += r.seconds;
    iv.tokens += (double)r.tokens;
    iv.flops += tr->flops_per_token * (double)r.tokens;
    iv.last_lr = r.lr;
    sum.train_seconds += r.seconds;
    sum.tokens += r.tokens;
    sum.steps = r.step;

    exposed_sum += r.reduce_exposed_seconds;
    int stop = opts->stop && *opts->stop;
    if (tr->dp > 1) { /* a signal may reach the ranks in different steps: stop together */
      int64_t flag = stop;
      if ((rc = comm_allreduce_i64(tr->dp_group, &flag, 1, COMM_MAX, NULL, err))) goto done;
      stop = flag != 0;
    }
    int last = r.step == cfg->steps || stop;
    if (r.step % cfg->log_interval == 0 || r.step == 1 || last) {
      LogLine l;
      interval_to_log_line(&iv, r.step, cfg->steps, peak, is_moe, &l);
      progress_clear(&progress);
      format_log_line(line, sizeof line, &l);
      fprintf(out, "%s\n", line);
      fflush(out);
      if (jsonl) {
        format_log_json(line, sizeof line, &l);
        fprintf(jsonl, "%s\n", line);
        fflush(jsonl);
      }
      last_interval_loss = l.loss;
      memset(&iv, 0, sizeof iv);
    } else {
      double per_step = sum.train_seconds / sum.steps;
      progress_draw(&progress, r.step, cfg->steps, 1e3 * per_step, per_step * (cfg->steps - r.step));
    }
    int eval_now = cfg->eval_interval > 0 && r.step % cfg->eval_interval == 0;
    if (tr->has_val && (eval_now || last)) {
      progress_clear(&progress);
      if ((rc = trainer_evaluate(tr, &ev, err))) goto done;
      print_eval(out, jsonl, r.step, cfg->steps, &ev);
      sum.final_val_loss = ev.loss;
      sum.eval_seconds += ev.seconds;
    }
    int save_now = cfg->checkpoint_interval > 0 && r.step % cfg->checkpoint_interval == 0;
    if (opts->save_checkpoints && (save_now || last)) {
      progress_clear(&progress);
      if ((rc = save_and_report(tr, out, jsonl, err))) goto done;
    }
    if (stop) {
      sum.stopped_early = 1;
      fprintf(out, "stopped by request after step %d of %d\n", r.step, cfg->steps);
      break;
    }
  }
  progress_clear(&progress);
  sum.final_loss = last_interval_loss;
  sum.tokens_per_s = sum.train_seconds > 0 ? (double)sum.tokens / sum.train_seconds : 0;
  sum.mfu_pct = peak > 0 && sum.train_seconds > 0
                    ? 100.0 * tr->flops_per_token * (double)sum.tokens / sum.train_seconds / 1e9 / peak
                    : 0;
  {
    char tok[32], dur[32], val[64] = "";
    if (!isnan(sum.final_val_loss)) snprintf(val, sizeof val, " | val loss %.3f", sum.final_val_loss);
    fprintf(out, "done: %d steps in %s (%.1f s training, %.1f s evaluation) | final train loss %.3f%s | %s tok/s | "
                 "MFU %.1f%%%s%s\n",
            sum.steps, fmt_duration(dur, sizeof dur, sum.train_seconds + sum.eval_seconds), sum.train_seconds,
            sum.eval_seconds, sum.final_loss, val, fmt_thousands(tok, sizeof tok, sum.tokens_per_s), sum.mfu_pct,
            opts->write_run_files ? " | output " : "", opts->write_run_files ? cfg->out_dir : "");
    fflush(out);
  }
  if (tr->dp > 1 && sum.steps > tr->start_step) {
    int n = sum.steps - tr->start_step;
    fprintf(out,
            "dp: gradient reduction %.2f ms blocking, %.2f ms exposed per step on average: %.0f%% hidden behind "
            "backward\n",
            1e3 * tr->dp_grads.calibrated_seconds, 1e3 * exposed_sum / n,
            tr->dp_grads.calibrated_seconds > 0
                ? 100.0 * fmax(0.0, 1.0 - exposed_sum / n / tr->dp_grads.calibrated_seconds)
                : 0.0);
    fflush(out);
  }
  if (jsonl) {
    /* JSON has no NaN: runs without validation record null. */
    char first_val[32] = "null", final_val[32] = "null";
    if (!isnan(sum.first_val_loss)) snprintf(first_val, sizeof first_val, "%.6g", sum.first_val_loss);
    if (!isnan(sum.final_val_loss)) snprintf(final_val, sizeof final_val, "%.6g", sum.final_val_loss);
    fprintf(jsonl,
            "{\"type\":\"summary\",\"steps\":%d,\"first_loss\":%.6g,\"final_loss\":%.6g,\"first_val_loss\":%s,"
            "\"final_val_loss\":%s,\"tokens\":%ld,\"tokens_per_s\":%.6g,\"mfu_pct\":%.6g,\"peak_gflops\":%.6g,"
            "\"train_seconds\":%.6g,\"eval_seconds\":%.6g,\"threads\":%d,\"stopped_early\":%s}\n",
            sum.steps, sum.first_loss, sum.final_loss, first_val, final_val, sum.tokens, sum.tokens_per_s, sum.mfu_pct,
            sum.peak_gflops, sum.train_seconds, sum.eval_seconds, tr->threads, sum.stopped_early ? "true" : "false");
    fflush(jsonl);
  }
done:
  if (progress.f) progress_clear(&progress);
  if (jsonl) fclose(jsonl);
  if (devnull) fclose(devnull);
  if (summary) *summary = sum;
  return rc;
}
