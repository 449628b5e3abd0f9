/* The training loop and the run's reporting (banner, log lines, progress,
 * run files). Saving and resuming checkpoints are in trainer_ckpt.c,
 * building the run and one step in trainer_step.c. See trainer.h. */
#include "train/trainer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/log.h"
#include "base/timer.h"
#include "kern/bf16_weights.h"
#include "kern/gemm.h"
#include "kern/peak.h"
#include "kern/precision.h"
#include "sched/partition.h"
#include "ckpt/checkpoint_dist.h"
#include "comm/waits.h"
#include "train/nonfinite.h"
#include "train/stop_request.h"
#include "train/trace_session.h"
#include "train/trainer_net.h"

/* Seconds the FMA (or bf16 dot-product) loop runs when no peak is configured. */
#define PEAK_MEASURE_SECONDS 0.3

void trainer_param_counts(const Model *m, double *total, double *active) {
  /* The whole model's, also on a rank that holds a shard of it. */
  ParamTensor *all = NULL;
  int n = 0;
  double expert = 0, sum = 0;
  if (model_global_tensors(&m->cfg, &all, &n, NULL) == 0) {
    for (int i = 0; i < n; i++) {
      sum += (double)all[i].numel;
      if (all[i].is_expert) expert += (double)all[i].numel;
    }
    free(all);
  } else {
    for (int i = 0; i < m->num_tensors; i++) {
      sum += (double)m->tensors[i].numel;
      if (m->tensors[i].is_expert) expert += (double)m->tensors[i].numel;
    }
  }
  *total = sum;
  double frac = m->cfg.num_experts > 0 ? (double)m->cfg.top_k / m->cfg.num_experts : 1.0;
  *active = *total - expert + expert * frac;
}

/* ---- checkpoints ---- */

/* Rank 0's result code, on every rank: what rank 0 alone did (write a
 * checkpoint, check a directory) either succeeded everywhere or fails
 * everywhere, instead of leaving the other ranks waiting in the next
 * collective. */
static int agree_with_root(Trainer *tr, int rc, const char *what, Error *err) {
  if (tr->world <= 1) return rc;
  int code = rc;
  int brc = comm_bcast_bytes(comm_world(), 0, &code, sizeof code, NULL, err);
  if (brc) return brc;
  if (code && tr->world_rank != 0) return error_set(err, code, "rank 0 failed %s (see its message)", what);
  return rc;
}

/* ---- reporting ---- */

void trainer_options_default(TrainerOptions *o) {
  memset(o, 0, sizeof *o);
  o->progress = -1;
  o->write_run_files = 1;
  o->eval_at_start = 1;
}


/* The model, data and batch lines of the banner (a transformer's). */
static void print_model(const Trainer *tr, FILE *out) {
  const TrainConfig *cfg = tr->cfg;
  const ModelConfig *mc = &cfg->model;
  char a[32], b[32], c[32];
  double total, active;
  trainer_param_counts(&tr->model, &total, &active);
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
    fprintf(out, "  mlp      dense %s, ffn %d\n", mc->gpt2 ? "GeLU (LayerNorm, biases, learned positions)" : "SwiGLU",
            mc->intermediate_size);
  }
  fprintf(out, "  params   %s total, %s active per token\n", fmt_si(a, sizeof a, total), fmt_si(b, sizeof b, active));
  const TokenWindows *tw = &tr->train.windows;
  long per_step = train_config_tokens_per_step(cfg);
  double epochs = (double)per_step * cfg->steps / ((double)tw->num_windows * cfg->seq_len);
  fprintf(out, "  data     train %s tokens in %d shard(s), %s windows of %d (%.2f epochs over %d steps)\n",
          fmt_thousands(a, sizeof a, (double)tw->num_tokens), tw->num_shards,
          fmt_thousands(b, sizeof b, (double)tw->num_windows), cfg->seq_len + 1, epochs, cfg->steps);
  if (tr->has_val)
    fprintf(out, "           val %s tokens in %d shard(s); %s windows per evaluation (%d batch%s per replica)\n",
            fmt_thousands(a, sizeof a, (double)tr->val.windows.num_tokens), tr->val.windows.num_shards,
            fmt_thousands(c, sizeof c, (double)tr->val.num_used), tr->val.num_batches,
            tr->val.num_batches == 1 ? "" : "es");
  else
    fprintf(out, "           no validation data\n");
  fprintf(out, "  tokens   %s%s\n", cfg->tokenizer,
          strcmp(cfg->tokenizer, TRAIN_TOKENIZER_BYTE_LEVEL) ? "" : " (one token per byte)");
  fprintf(out, "  batch    %d x %d tokens x %d accumulation x %d dp = %s tokens per step\n",
          cfg->micro_batch_size, cfg->seq_len, cfg->grad_accum_steps, cfg->world_size,
          fmt_thousands(a, sizeof a, (double)per_step));
}

static void print_banner(const Trainer *tr, FILE *out, double peak, int peak_measured, int job_cores) {
  const TrainConfig *cfg = tr->cfg;
  char d[32];
  fprintf(out, "fivefold train: %s\n", cfg->config_path);
  if (cfg->family == TRAIN_FAMILY_TRANSFORMER) print_model(tr, out);
  else trainer_net_print_model(tr, out);
  fprintf(out, "  optim    AdamW lr %.2e -> %.2e %s, warmup %d, wd %g, betas (%g, %g), eps %g, clip %g\n",
          (double)cfg->lr, (double)cfg->min_lr, lr_decay_name(cfg->decay), cfg->warmup_steps,
          (double)cfg->weight_decay, (double)cfg->beta1, (double)cfg->beta2, (double)cfg->eps,
          (double)cfg->grad_clip);
  const int bf16 = kern_precision() == KERN_PRECISION_BF16;
  /* What bf16 covers, in the words of the network at hand. */
  const char *bf16_scope = cfg->family == TRAIN_FAMILY_TRANSFORMER
                               ? "bf16 (bf16 GEMM and attention inputs, fp32 accumulation; fp32 weights, gradients, "
                                 "optimizer, norms, softmax, router, loss; bf16 GEMMs on oneDNN)"
                               : "bf16 (bf16 inputs to the convolutions and dense layers, fp32 accumulation; fp32 "
                                 "weights, gradients, optimizer and every other layer; on oneDNN)";
  fprintf(out, "  gemm     %s (oneDNN ISA %s), precision %s\n", kern_gemm_backend_name(kern_gemm_backend()),
          kern_gemm_isa_name(), bf16 ? bf16_scope : "fp32");
  if (bf16) {
    Bf16WeightStats ws;
    bf16_weights_stats(&ws);
    if (bf16_weights_enabled())
      fprintf(out, "  bf16     weight cache on: %ld matrices, up to %.1f MB of bf16 copies (half their fp32 size), "
                   "converted once per optimizer step\n", ws.tensors, (double)ws.registered_bytes / 1e6);
    else
      fprintf(out, "  bf16     weight cache off (FIVEFOLD_BF16_WEIGHT_CACHE=off): weights converted at every GEMM\n");
    const GemmFixedShapes fs = kern_gemm_fixed_shapes_mode();
    const char *why = fs == GEMM_FIXED_SHAPES_ON    ? "FIVEFOLD_GEMM_FIXED_SHAPES=on"
                      : fs == GEMM_FIXED_SHAPES_OFF ? "FIVEFOLD_GEMM_FIXED_SHAPES=off"
                      : kern_gemm_fixed_shapes_active() ? "auto: oneDNN's ISA has AMX"
                                                        : "auto: no AMX, where they do not pay";
    if (kern_gemm_fixed_shapes_active())
      fprintf(out, "  bf16     GEMM primitives per shape (%s): a shape seen twice gets its own, run on the tile unit "
                   "where there is one\n", why);
    else
      fprintf(out, "  bf16     GEMM primitives with run-time shapes (%s)\n", why);
  }
  fprintf(out, "  compute  %s FLOP per %s (fwd+bwd), %d thread%s per rank, %s peak %.0f GFLOP/s (%s%s%s",
          fmt_si(d, sizeof d, tr->net.flops_per_unit), tr->net.ops->unit.one, tr->threads, tr->threads == 1 ? "" : "s", bf16 ? "bf16" : "fp32",
          peak, !peak_measured ? "stated: training.peak_gflops" : "measured: ",
          !peak_measured ? "" : bf16 ? peak_bf16_source() : "FMA",
          !peak_measured ? "" : " loop on every thread");
  if (tr->cfg->world_ranks > 1)
    fprintf(out, "; per thread, times the %d core%s the job's ranks can use", job_cores, job_cores == 1 ? "" : "s");
  fprintf(out, ")\n");
  fflush(out);
}

/* Recomputation and the activation memory it leaves this rank (model.h:
 * every slot's arena and the shared scratch, allocated once). */
static void print_recompute(const Trainer *tr, FILE *out) {
  const TrainConfig *cfg = tr->cfg;
  const Model *m = &tr->model;
  fprintf(out, "  memory   activations %.2f MiB on this rank", m->activation_bytes / 1048576.0);
  if (!strcmp(cfg->recompute, "selective"))
    fprintf(out, "; recompute selective %s (a %.2f MiB shared buffer holds what the blocks rebuild in backward)\n",
            cfg->recompute_modules, m->recompute_workspace_bytes / 1048576.0);
  else if (strcmp(cfg->recompute, "full"))
    fprintf(out, "; recompute none\n");
  else
    fprintf(out, "; recompute full, %s %d (a %.2f MiB workspace rebuilds a group in backward)\n",
            cfg->recompute_method, cfg->recompute_num_layers, m->recompute_workspace_bytes / 1048576.0);
}

/* The layout: sizes, schedule and which blocks each stage holds. */
static void print_parallel(const Trainer *tr, FILE *out) {
  const TrainConfig *cfg = tr->cfg;
  fprintf(out, "  parallel tp %d x pp %d x dp %d = %d mpi ranks%s; schedule %s", tr->tp, tr->pp, tr->dp, tr->world,
          tr->tp > 1 ? " (tp with sequence parallelism)" : "", sched_schedule_name(train_config_schedule(cfg)));
  if (tr->vpp > 1) fprintf(out, ", %d chunks per pipeline rank", tr->vpp);
  if (tr->pp * tr->vpp > 1) {
    SchedPartitionSpec spec = {.num_layers = cfg->model.num_layers, .pp = tr->pp, .vpp = tr->vpp,
                               .layers_per_stage = cfg->num_layers_per_stage ? cfg->layers_per_stage : NULL,
                               .num_given = cfg->num_layers_per_stage, .allow_empty = 1};
    SchedPartition part;
    if (sched_partition_make(&spec, &part, NULL) == 0) {
      fprintf(out, "; blocks per stage");
      for (int s = 0; s < part.num_stages; s++) fprintf(out, "%s%d", s ? "," : " ", part.layers[s]);
      sched_partition_free(&part);
    }
  }
  fprintf(out, "; %d activation slot(s) per chunk\n", tr->model.shard.num_slots);
  if (tr->repl.on) {
    fprintf(out, "  stages   replicated: widths");
    for (int s = 0; s < tr->repl.r.stages; s++) fprintf(out, "%s%d", s ? "," : " ", tr->repl.r.width[s]);
    fprintf(out, " on consecutive ranks; each micro-batch's %d sequences split over a stage's replicas\n",
            tr->repl.r.sequences);
  }
  if (tr->folded)
    fprintf(out, "  folding  attention tp %d x cp %d x dp %d x pp %d; MoE etp %d x ep %d x edp %d x pp %d; dispatcher %s\n",
            tr->tp, tr->cp, tr->dp, tr->pp, tr->etp, tr->ep, tr->edp, tr->pp,
            train_config_moe_dispatcher(cfg) == MODEL_MOE_ALLGATHER ? "allgather" : "alltoall");
}

/* Validation over windows of tokens (the transformer) in bits per token
 * too; other networks' in their own unit. */
static void print_eval(FILE *out, FILE *jsonl, int step, int total, const EvalResult *ev, const NetUnit *unit) {
  char tok[32];
  char win[32];
  if (ev->windows > 0)
    fprintf(out, "eval step %d/%d | val loss %.3f | %.3f bits/token | %s windows, %s tokens | %.1f s\n", step, total,
            ev->loss, ev->loss / log(2.0), fmt_thousands(win, sizeof win, (double)ev->windows),
            fmt_thousands(tok, sizeof tok, (double)ev->tokens), ev->seconds);
  else if (ev->has_accuracy) /* a classifier of nets/ */
    fprintf(out, "eval step %d/%d | val loss %.3f | val accuracy %.2f%% | %s %s | %.1f s\n", step, total, ev->loss,
            100.0 * ev->accuracy, fmt_thousands(tok, sizeof tok, (double)ev->tokens), unit->many, ev->seconds);
  else
    fprintf(out, "eval step %d/%d | val loss %.3f | %s %s | %.1f s\n", step, total, ev->loss,
            fmt_thousands(tok, sizeof tok, (double)ev->tokens), unit->many, ev->seconds);
  if (ev->num_extra) { /* the network's own figures, a second line */
    fprintf(out, "eval step %d/%d", step, total);
    for (int i = 0; i < ev->num_extra; i++)
      fprintf(out, " | %s %.*f", ev->extra[i].name, ev->extra[i].decimals, ev->extra[i].value);
    fputc('\n', out);
  }
  fflush(out);
  if (jsonl) {
    char acc[512] = "";
    if (ev->has_accuracy) snprintf(acc, sizeof acc, ",\"val_accuracy\":%.9g", ev->accuracy);
    for (int i = 0; i < ev->num_extra; i++)
      snprintf(acc + strlen(acc), sizeof acc - strlen(acc), ",\"%s\":%.9g", ev->extra[i].name, ev->extra[i].value);
    fprintf(jsonl, "{\"type\":\"eval\",\"step\":%d,\"val_loss\":%.9g%s,\"windows\":%ld,\"%s\":%ld,\"seconds\":%.6g}\n",
            step, ev->loss, acc, ev->windows, unit->many, ev->tokens, ev->seconds);
    fflush(jsonl);
  }
}

/* A resumed run continues the metrics of the run it resumes: records past
 * its start step (steps whose state died with the old process, and that
 * process's summary) are dropped, and so is a line torn by a kill, so the
 * file reads as one run. */
static int keep_metrics_up_to(const char *path, int step, Error *err) {
  FILE *f = fopen(path, "r");
  if (!f) return errno == ENOENT ? 0 : error_set(err, ERR_IO, "cannot read %s: %s", path, error_errno_text(errno));
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
  if (!rc) rc = fs_write_atomic(path, kept ? kept : "", kept ? strlen(kept) : 0, err);
  free(kept);
  return rc;
}

static int open_run_files(const Trainer *tr, FILE **jsonl, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  int rc = fs_mkdir_p(cfg->out_dir, err);
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
  rc = fs_write_atomic(path, with_nl, len + 1, err);
  free(with_nl);
  if (rc) return rc;
  snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->out_dir);
  if (tr->step > 0 && (rc = keep_metrics_up_to(path, tr->step, err))) return rc;
  *jsonl = fopen(path, tr->step > 0 ? "a" : "w");
  if (!*jsonl) return error_set(err, ERR_IO, "cannot create %s: %s", path, error_errno_text(errno));
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

/* Collective: the trace session of cfg->trace_path, attached to the
 * executor and the pipeline. Tracing off: a probes-only session (not
 * collective), so that the run's actions still reach their USDT probes
 * for `fivefold trace record --ebpf`. */
static int start_trace(Trainer *tr, FILE *out, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  /* Both grids as the run built them, so the trace's rank coordinates are
   * the folded layout's. */
  GridSizes sizes = {.world = tr->world, .tp = tr->tp, .cp = tr->cp > 0 ? tr->cp : 1, .dp = tr->dp, .pp = tr->pp,
                     .etp = tr->etp > 0 ? tr->etp : 1, .ep = tr->ep > 0 ? tr->ep : 1, .edp = 0};
  if (tr->grid) sizes = tr->grid->sizes;
  /* Stage replication: the program has a list per rank (sched/replicated.h). */
  if (tr->repl.on) sizes = (GridSizes){.world = tr->world, .tp = 1, .cp = 1, .dp = 1, .pp = tr->world, .etp = 1,
                                       .ep = 1, .edp = 0};
  if (!cfg->trace_path[0]) {
    tr->trace = trace_session_create_probes(tr->prog, &sizes);
    tr->exec.trace = tr->trace;
    tr->pipe.trace = tr->trace;
    return 0;
  }
  TraceSessionOptions topt = trace_session_options_default();
  topt.path = cfg->trace_path;
  topt.num_steps = cfg->steps;
  int rc = trace_session_parse_steps(cfg->trace_steps[0] ? cfg->trace_steps : ":", cfg->steps, &topt, err);
  if (!rc) rc = trace_session_create(&topt, tr->prog, &sizes, &tr->trace, err);
  if (rc) return error_wrap(err, "--trace %s", cfg->trace_path);
  tr->exec.trace = tr->trace;
  tr->pipe.trace = tr->trace;
  fprintf(out, "  trace    %s (iterations %s, 0-based)\n", cfg->trace_path, cfg->trace_steps[0] ? cfg->trace_steps : "all");
  return 0;
}

/* Collective: gathers and writes the trace with the run and model
 * configurations and the plan (NULL: none) as metadata (what `trace
 * compare` prices), then detaches. */
static int finish_trace(Trainer *tr, const cJSON *plan, FILE *out, Error *err) {
  if (!tr->trace) return 0;
  if (!trace_session_records(tr->trace)) { /* probes only */
    tr->exec.trace = NULL;
    tr->pipe.trace = NULL;
    trace_session_free(tr->trace);
    tr->trace = NULL;
    return 0;
  }
  cJSON *config = train_config_to_json(tr->cfg);
  cJSON *model = model_config_to_json(&tr->cfg->model);
  trace_session_set_plan(tr->trace, plan);
  int rc = trace_session_finish(tr->trace, config, model, err);
  cJSON_Delete(config);
  cJSON_Delete(model);
  tr->exec.trace = NULL;
  tr->pipe.trace = NULL;
  trace_session_free(tr->trace);
  tr->trace = NULL;
  if (rc) return error_wrap(err, "writing the trace %s", tr->cfg->trace_path);
  fprintf(out, "trace: %s\n", tr->cfg->trace_path);
  fflush(out);
  return 0;
}

/* Cores the whole job computes on: per host, the threads of its ranks,
 * but at most the host's online processors. Collective over the world (one
 * rank without MPI: just its threads). A failed exchange falls back to this
 * rank's threads: it only scales the MFU denominator. */
static int job_core_count(int threads) {
  int world = comm_world_size();
  if (world <= 1) return threads;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  uint64_t h = 1469598103934665603ULL; /* FNV-1a of the host name */
  for (const char *c = host; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t mine[3] = {(int64_t)(h >> 1), threads, cpus > 0 ? cpus : threads};
  int64_t *all = malloc((size_t)world * 3 * sizeof *all);
  Error e = {0};
  if (!all || comm_allgather_i64(comm_world(), mine, all, 3, NULL, &e)) {
    free(all);
    return threads;
  }
  long total = 0;
  for (int r = 0; r < world; r++) {
    int first = 1;
    for (int q = 0; q < r && first; q++) first = all[3 * q] != all[3 * r];
    if (!first) continue; /* this host was counted with its first rank */
    long used = 0;
    for (int q = r; q < world; q++)
      if (all[3 * q] == all[3 * r]) used += all[3 * q + 1];
    total += used < all[3 * r + 2] ? used : all[3 * r + 2];
  }
  free(all);
  return total > 0 ? (int)total : threads;
}

/* What trainer_run carries from phase to phase. */
typedef struct RunState {
  const TrainerOptions *opts;
  int root;             /* world rank 0: the one that reports */
  FILE *out, *devnull;  /* where the report goes (/dev/null on other ranks) */
  FILE *jsonl;          /* metrics.jsonl, or NULL */
  ProgressLine progress;
  TrainSummary sum;
  double peak; /* GFLOP/s of the job, the MFU denominator */
  int peak_measured, job_cores;
  int mfu_warned; /* the stated peak is below what the run reached (said once) */
  int is_moe;
  IntervalStats iv; /* the steps since the last log line */
  double exposed_sum, dispatch_sum, last_interval_loss;
  double last_save_clock; /* run_clock at the start or the last checkpoint */
} RunState;

/* The clock of checkpoint.interval_minutes. Test hook: with
 * FIVEFOLD_TEST_CLOCK_STEP_SECONDS=X it reads X seconds per step run, so
 * that a test of the interval does not depend on the machine's speed. */
static double run_clock(const Trainer *tr) {
  const char *fake = getenv("FIVEFOLD_TEST_CLOCK_STEP_SECONDS");
  return fake ? (tr->step - tr->start_step) * atof(fake) : timer_now();
}

/* The peak the MFU is stated against, and where the report goes. */
static int run_open(Trainer *tr, const TrainerOptions *opts, RunState *rs, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  memset(rs, 0, sizeof *rs);
  rs->opts = opts;
  rs->sum.first_val_loss = rs->sum.final_val_loss = rs->sum.final_val_accuracy = NAN;
  rs->last_interval_loss = NAN;
  rs->is_moe = model_config_num_moe_layers(&cfg->model) > 0;
  /* Only rank 0 reports; the others run the same collective steps. */
  rs->root = tr->world_rank == 0;
  rs->devnull = rs->root ? NULL : fopen("/dev/null", "w");
  if (!rs->root && !rs->devnull) return error_set(err, ERR_IO, "cannot open /dev/null: %s", error_errno_text(errno));
  rs->out = !rs->root ? rs->devnull : opts->out ? opts->out : stdout;

  double peak = cfg->peak_gflops;
  if (!(peak > 0) && rs->root) {
    /* MFU is stated against the peak of the precision the GEMMs run in. */
    peak = kern_precision() == KERN_PRECISION_BF16 ? peak_bf16_gflops(tr->threads, PEAK_MEASURE_SECONDS)
                                                   : peak_fma_gflops(tr->threads, PEAK_MEASURE_SECONDS);
    rs->peak_measured = 1;
  }
  /* The peak above is one rank's threads; the job's is that per thread
   * times the cores all ranks can really use (ranks sharing a host's cores
   * do not add peak), so MFU stays a fraction of the machine. */
  rs->job_cores = job_core_count(tr->threads);
  if (peak > 0 && tr->threads > 0) peak = peak / tr->threads * rs->job_cores;
  rs->sum.peak_gflops = rs->peak = peak;

  int rc = 0;
  if (opts->save_checkpoints) {
    rc = rs->root ? checkpoint_check_run_dir(cfg->out_dir, tr->step, err) : 0;
    if ((rc = agree_with_root(tr, rc, "to check the run directory", err))) return rc;
  }
  if (opts->write_run_files && rs->root) rc = open_run_files(tr, &rs->jsonl, err);
  rs->last_save_clock = run_clock(tr);
  return rc;
}

/* The banner and the lines that say how this run is laid out. */
static void run_print_header(const Trainer *tr, const RunState *rs) {
  const TrainConfig *cfg = tr->cfg;
  FILE *out = rs->out;
  print_banner(tr, out, rs->peak, rs->peak_measured, rs->job_cores);
  if (tr->world > 1 && cfg->family == TRAIN_FAMILY_TRANSFORMER) print_parallel(tr, out);
  if (cfg->family == TRAIN_FAMILY_TRANSFORMER) print_recompute(tr, out);
  if (tr->dp > 1) {
    const DpGrads *g = &tr->dp_grads;
    fprintf(out,
            "  parallel dp %d (mpi ranks), %d gradient bucket(s) of <= %.2f MB, %s, %s (%s); blocking reduction "
            "%.2f ms\n",
            tr->dp, g->num_buckets, (double)(g->buckets[0].end - g->buckets[0].begin) * sizeof(float) / 1e6,
            !tr->zero     ? "all-reduce"
            : tr->folded ? "reduce-scatter + distributed optimizer (ZeRO-1: dense state over DP x CP, experts' over EDP)"
                         : "reduce-scatter + distributed optimizer (ZeRO-1)",
            g->overlap ? "overlapped with backward" : "blocking where the program reduces", g->overlap_reason,
            1e3 * g->calibrated_seconds);
  }
  if (tr->world > 1) fprintf(out, "  waits    %s between MPI tests\n", comm_waits_reason());
  if (rs->opts->write_run_files) fprintf(out, "  output   %s (config.json, metrics.jsonl)\n", cfg->out_dir);
  if (rs->opts->save_checkpoints) {
    char every[64] = "";
    int n = cfg->checkpoint_interval > 0 ? snprintf(every, sizeof every, "every %d steps and ", cfg->checkpoint_interval) : 0;
    if (cfg->checkpoint_interval_minutes > 0)
      snprintf(every + n, sizeof every - (size_t)n, "every %g min and ", cfg->checkpoint_interval_minutes);
    char keep[64] = ", keeping all";
    if (cfg->keep_last > 0) snprintf(keep, sizeof keep, ", keeping the last %d", cfg->keep_last);
    fprintf(out, "  ckpt     %sat the end%s, in %s/%s\n", every, keep, cfg->out_dir, CHECKPOINT_SUBDIR);
  }
  if (tr->resumed_from[0])
    fprintf(out, "  resumed  from %s at step %d of %d\n", tr->resumed_from, tr->start_step, cfg->steps);
}

static int run_evaluate(Trainer *tr, RunState *rs, int step, Error *err) {
  EvalResult ev;
  progress_clear(&rs->progress);
  int rc = trainer_evaluate(tr, &ev, err);
  if (rc) return rc;
  print_eval(rs->out, rs->jsonl, step, tr->cfg->steps, &ev, &tr->net.ops->unit);
  if (step == 0) rs->sum.first_val_loss = ev.loss;
  else rs->sum.final_val_loss = ev.loss;
  if (step > 0 && ev.has_accuracy) rs->sum.final_val_accuracy = ev.accuracy;
  rs->sum.eval_seconds += ev.seconds;
  return 0;
}

/* One step's results into the log interval and the run's totals. */
static void run_account_step(const Trainer *tr, RunState *rs, const TrainStepResult *r) {
  IntervalStats *iv = &rs->iv;
  TrainSummary *sum = &rs->sum;
  if (r->step == 1) sum->first_loss = r->loss;
  iv->steps++;
  interval_add_metrics(iv, r->metrics, r->num_metrics);
  iv->grad_norm += r->grad_norm;
  iv->imbalance += r->imbalance;
  iv->seconds += r->seconds;
  iv->tokens += (double)r->tokens;
  iv->flops += tr->net.flops_per_unit * (double)r->tokens;
  iv->last_lr = r->lr;
  sum->train_seconds += r->seconds;
  sum->tokens += r->tokens;
  sum->steps = r->step;
  rs->exposed_sum += r->reduce_exposed_seconds;
}

/* MFU above 100% means the stated peak_gflops is below the machine's
 * real peak: every MFU figure of the run is then too high. Said once. */
static void run_check_mfu(RunState *rs, double mfu_pct) {
  if (rs->peak_measured || rs->mfu_warned || !(mfu_pct > 100.0)) return;
  rs->mfu_warned = 1;
  fprintf(rs->out,
          "warning: MFU %.0f%% exceeds 100%% of the stated peak (training.peak_gflops / --peak-gflops, %.0f "
          "GFLOP/s for the job): the peak is below this machine's; leave it out to have it measured\n",
          mfu_pct, rs->peak);
}

/* The log line (and its metrics.jsonl record) at the end of an interval,
 * else the progress line. */
static void run_report_step(const Trainer *tr, RunState *rs, const TrainStepResult *r, int last) {
  const TrainConfig *cfg = tr->cfg;
  char line[1024];
  if (r->step % cfg->log_interval == 0 || r->step == 1 || last) {
    LogLine l;
    interval_to_log_line(&rs->iv, r->step, cfg->steps, rs->peak, rs->is_moe, &l);
    l.unit = tr->net.ops->unit;
    l.has_flops = tr->net.flops_per_unit > 0;
    progress_clear(&rs->progress);
    format_log_line(line, sizeof line, &l);
    fprintf(rs->out, "%s\n", line);
    run_check_mfu(rs, l.mfu_pct);
    fflush(rs->out);
    if (rs->jsonl) {
      format_log_json(line, sizeof line, &l);
      fprintf(rs->jsonl, "%s\n", line);
      fflush(rs->jsonl);
    }
    rs->last_interval_loss = l.loss;
    memset(&rs->iv, 0, sizeof rs->iv);
  } else {
    double per_step = rs->sum.train_seconds / rs->sum.steps;
    progress_draw(&rs->progress, r->step, cfg->steps, 1e3 * per_step, per_step * (cfg->steps - r->step));
  }
}

/* A stop request reaches the ranks in different steps: they stop together,
 * on the largest request value (a signal number, see stop_request.h); and
 * they save together when rank 0's clock says a checkpoint is due. */
static int run_agree_on_stop(const Trainer *tr, int *stop, int *save_due, Error *err) {
  if (tr->world <= 1) return 0;
  int64_t flags[2] = {*stop, *save_due};
  int rc = comm_allreduce_i64(comm_world(), flags, 2, COMM_MAX, NULL, err);
  *stop = (int)flags[0];
  *save_due = flags[1] != 0;
  return rc;
}

/* One step with everything that follows it: the report, validation and
 * checkpoint when due. *finished when the run ends here. */
static int run_one_step(Trainer *tr, RunState *rs, int *finished, Error *err) {
  const TrainConfig *cfg = tr->cfg;
  TrainStepResult r;
  const double dispatch0 = tr->fold_ops.dispatch_seconds;
  int rc = trainer_step(tr, &r, err);
  if (rc) return rc;
  rs->dispatch_sum += tr->fold_ops.dispatch_seconds - dispatch0;
  if (rs->opts->on_step) rs->opts->on_step(rs->opts->ctx, &r);
  run_account_step(tr, rs, &r);
  stop_request_test_hold(r.step, tr->world_rank, rs->opts->stop);
  int stop = rs->opts->stop ? (int)*rs->opts->stop : 0;
  double now = run_clock(tr);
  int save_due = rs->root && cfg->checkpoint_interval_minutes > 0 &&
                 now - rs->last_save_clock >= cfg->checkpoint_interval_minutes * 60;
  if ((rc = run_agree_on_stop(tr, &stop, &save_due, err))) return rc;
  int last = r.step == cfg->steps || stop;
  run_report_step(tr, rs, &r, last);
  int eval_now = cfg->eval_interval > 0 && r.step % cfg->eval_interval == 0;
  int evaluate = tr->has_val && (eval_now || last);
  /* Stopped early, the checkpoint comes before the evaluation: a grace
   * period that ends during the evaluation then loses nothing. */
  if (evaluate && !stop && (rc = run_evaluate(tr, rs, r.step, err))) return rc;
  int save_now = save_due || (cfg->checkpoint_interval > 0 && r.step % cfg->checkpoint_interval == 0);
  if (rs->opts->save_checkpoints && (save_now || last)) {
    progress_clear(&rs->progress);
    if ((rc = save_and_report(tr, rs->out, rs->jsonl, err))) return rc;
    rs->last_save_clock = now;
  }
  if (stop) {
    rs->sum.stopped_early = 1;
    fprintf(rs->out, "stopped by %s after step %d of %d%s\n", stop_request_name(stop), r.step, cfg->steps,
            rs->opts->save_checkpoints ? "; its checkpoint is saved: --resume continues from it" : "");
    fflush(rs->out);
    if (evaluate && (rc = run_evaluate(tr, rs, r.step, err))) return rc;
  }
  *finished = stop != 0;
  return 0;
}

/* The closing lines: totals, the dispatcher's and the reduction's share. */
static void run_print_end(const Trainer *tr, RunState *rs) {
  const TrainConfig *cfg = tr->cfg;
  TrainSummary *sum = &rs->sum;
  FILE *out = rs->out;
  double peak = rs->peak;
  sum->final_loss = rs->last_interval_loss;
  sum->tokens_per_s = sum->train_seconds > 0 ? (double)sum->tokens / sum->train_seconds : 0;
  sum->mfu_pct = peak > 0 && sum->train_seconds > 0
                     ? 100.0 * tr->net.flops_per_unit * (double)sum->tokens / sum->train_seconds / 1e9 / peak
                     : 0;
  char tok[32], dur[32], val[96] = "", mfu[32] = "";
  int n = isnan(sum->final_val_loss) ? 0 : snprintf(val, sizeof val, " | val loss %.3f", sum->final_val_loss);
  if (!isnan(sum->final_val_accuracy) && n > 0)
    snprintf(val + n, sizeof val - (size_t)n, ", accuracy %.2f%%", 100.0 * sum->final_val_accuracy);
  if (tr->net.flops_per_unit > 0) snprintf(mfu, sizeof mfu, " | MFU %.1f%%", sum->mfu_pct);
  fprintf(out, "done: %d steps in %s (%.1f s training, %.1f s evaluation) | final train loss %.3f%s | %s %s%s%s%s\n",
          sum->steps, fmt_duration(dur, sizeof dur, sum->train_seconds + sum->eval_seconds), sum->train_seconds,
          sum->eval_seconds, sum->final_loss, val, fmt_thousands(tok, sizeof tok, sum->tokens_per_s),
          tr->net.ops->unit.rate, mfu, rs->opts->write_run_files ? " | output " : "",
          rs->opts->write_run_files ? cfg->out_dir : "");
  if (tr->nonfinite_skipped > 0)
    fprintf(out, "nonfinite: %d step(s) skipped for a non-finite loss or gradient (weights left as they were)\n",
            tr->nonfinite_skipped);
  run_check_mfu(rs, sum->mfu_pct);
  fflush(out);
  if (tr->ep * tr->etp > 1 && sum->train_seconds > 0) {
    fprintf(out, "moe: %.2f s of %.2f s training in the dispatcher's collectives on rank 0 (%.1f%%, waiting for "
                 "peers included)\n",
            rs->dispatch_sum, sum->train_seconds, 100.0 * rs->dispatch_sum / sum->train_seconds);
    fflush(out);
  }
  if (tr->dp > 1 && sum->steps > tr->start_step) {
    int n = sum->steps - tr->start_step;
    fprintf(out,
            "dp: reduce %s (%s); gradient reduction %.2f ms blocking, %.2f ms exposed per step on average: %.0f%% "
            "hidden behind backward\n",
            tr->dp_grads.overlap ? "overlapped" : "blocking", tr->dp_grads.overlap_reason,
            1e3 * tr->dp_grads.calibrated_seconds, 1e3 * rs->exposed_sum / n,
            tr->dp_grads.calibrated_seconds > 0
                ? 100.0 * fmax(0.0, 1.0 - rs->exposed_sum / n / tr->dp_grads.calibrated_seconds)
                : 0.0);
    fflush(out);
  }
}

/* The run's last metrics.jsonl record. */
static void run_write_summary(const Trainer *tr, const RunState *rs) {
  if (!rs->jsonl) return;
  const TrainSummary *sum = &rs->sum;
  /* The reduction mode the run chose (and why), for runs that reduce. */
  char grad_reduce_json[256] = "";
  if (tr->reduce_grads)
    snprintf(grad_reduce_json, sizeof grad_reduce_json, ",\"grad_reduce\":\"%s\",\"grad_reduce_reason\":\"%s\"",
             tr->dp_grads.overlap ? "overlapped" : "blocking", tr->dp_grads.overlap_reason);
  /* JSON has no NaN: runs without validation record null. */
  char first_val[32] = "null", final_val[32] = "null";
  if (!isnan(sum->first_val_loss)) snprintf(first_val, sizeof first_val, "%.6g", sum->first_val_loss);
  if (!isnan(sum->final_val_loss)) snprintf(final_val, sizeof final_val, "%.6g", sum->final_val_loss);
  if (!isnan(sum->final_val_accuracy)) /* a classifier of nets/: one more field */
    snprintf(grad_reduce_json + strlen(grad_reduce_json), sizeof grad_reduce_json - strlen(grad_reduce_json),
             ",\"final_val_accuracy\":%.6g", sum->final_val_accuracy);
  /* Throughput in the network's unit; MFU where it counts its FLOPs. */
  const char *unit = tr->net.ops->unit.many;
  char mfu_json[64] = "";
  if (tr->net.flops_per_unit > 0) snprintf(mfu_json, sizeof mfu_json, ",\"mfu_pct\":%.6g", sum->mfu_pct);
  fprintf(rs->jsonl,
          "{\"type\":\"summary\",\"steps\":%d,\"first_loss\":%.6g,\"final_loss\":%.6g,\"first_val_loss\":%s,"
          "\"final_val_loss\":%s,\"%s\":%ld,\"%s_per_s\":%.6g%s,\"peak_gflops\":%.6g,"
          "\"train_seconds\":%.6g,\"eval_seconds\":%.6g,\"threads\":%d,\"stopped_early\":%s%s",
          sum->steps, sum->first_loss, sum->final_loss, first_val, final_val, unit, sum->tokens, unit,
          sum->tokens_per_s, mfu_json, sum->peak_gflops, sum->train_seconds, sum->eval_seconds, tr->threads,
          sum->stopped_early ? "true" : "false", grad_reduce_json);
  /* Tokens per expert of each MoE layer over this run's steps, one row per
   * MoE layer: `simulate --expert-load` takes the rows as they are. */
  const ModelConfig *mc = &tr->cfg->model;
  if (tr->routed_tokens && mc->num_experts > 0 && tr->num_routed >= (size_t)mc->num_layers * mc->num_experts) {
    fputs(",\"expert_tokens\":[", rs->jsonl);
    int rows = 0;
    for (int l = 0; l < mc->num_layers; l++) {
      if (!mc->is_moe_layer[l]) continue;
      fputs(rows++ ? ",[" : "[", rs->jsonl);
      for (int e = 0; e < mc->num_experts; e++)
        fprintf(rs->jsonl, "%s%ld", e ? "," : "", tr->routed_tokens[(size_t)l * mc->num_experts + e]);
      fputs("]", rs->jsonl);
    }
    fputs("]", rs->jsonl);
  }
  fputs("}\n", rs->jsonl);
  fflush(rs->jsonl);
}

int trainer_run(Trainer *tr, const TrainerOptions *opts, TrainSummary *summary, Error *err) {
  TrainerOptions defaults;
  if (!opts) {
    trainer_options_default(&defaults);
    opts = &defaults;
  }
  RunState rs;
  int rc = run_open(tr, opts, &rs, err);
  if (!rc) {
    run_print_header(tr, &rs);
    rc = start_trace(tr, rs.out, err);
    fflush(rs.out);
  }
  if (!rc) {
    int draw = opts->progress >= 0                              ? opts->progress
               : tr->cfg->progress == TRAIN_PROGRESS_ALWAYS ? 1
               : tr->cfg->progress == TRAIN_PROGRESS_NEVER  ? 0
                                                             : progress_output_is_terminal(rs.out);
    progress_init(&rs.progress, rs.out, draw);
    if (tr->has_val && opts->eval_at_start && tr->step == 0) rc = run_evaluate(tr, &rs, 0, err);
  }
  for (int finished = 0; !rc && !finished && tr->step < tr->cfg->steps;) rc = run_one_step(tr, &rs, &finished, err);
  if (!rc) {
    progress_clear(&rs.progress);
    rc = trainer_net_test(tr, rs.out, rs.jsonl, err);
  }
  if (!rc) {
    run_print_end(tr, &rs);
    run_write_summary(tr, &rs);
    rc = finish_trace(tr, opts->trace_plan, rs.out, err);
  }
  if (rs.progress.f) progress_clear(&rs.progress);
  if (rs.jsonl) fclose(rs.jsonl);
  if (rs.devnull) fclose(rs.devnull);
  if (summary) *summary = rs.sum;
  return rc;
}
