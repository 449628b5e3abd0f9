/* Run configuration: the field table (shared by the JSON parser, the flag
 * overrides and `fivefold train --help`), parsing with precise errors, path
 * resolution against the config file. The final cross-field checks and the
 * JSON writer are in train_config_check.c. */
#include "train/train_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file_text.h"
#include "base/json_util.h"
#include "base/near_miss.h"
#include "sched/partition.h"
#include "tok/tokenizer.h"

#include "train/train_config_fields.h"

#define OFF(m) offsetof(TrainConfig, m)
#define BIG 1e18

static const FieldSpec FIELDS[] = {
    {"training", "micro_batch_size", "--micro-batch-size", "N", FIELD_INT, OFF(micro_batch_size), 1, 1 << 20, 0, 0,
     "sequences per micro-batch (B)"},
    {"training", "seq_len", "--seq-len", "T", FIELD_INT, OFF(seq_len), 1, 1 << 24, 0, 0,
     "tokens per sequence (T)"},
    {"training", "grad_accum_steps", "--grad-accum", "N", FIELD_INT, OFF(grad_accum_steps), 1, 1 << 20, 0, 0,
     "micro-batches accumulated per optimizer step"},
    {"training", "global_batch_size", "--global-batch-size", "N", FIELD_INT, OFF(global_batch_size), 1, 1 << 30, 0, 0,
     "sequences per optimizer step; sets grad_accum_steps = N / micro_batch_size"},
    {"training", "steps", "--steps", "N", FIELD_INT, OFF(steps), 1, 1 << 30, 0, 0, "optimizer steps to run"},
    {"training", "lr", "--lr", "X", FIELD_FLOAT, OFF(lr), 0, 10, 1, 0, "peak learning rate (after warm-up)"},
    {"training", "min_lr", "--min-lr", "X", FIELD_FLOAT, OFF(min_lr), 0, 10, 0, 0,
     "learning rate at the end of the decay (default lr / 10)"},
    {"training", "warmup_steps", "--warmup-steps", "N", FIELD_INT, OFF(warmup_steps), 0, 1 << 30, 0, 0,
     "linear warm-up steps from 0 to lr"},
    {"training", "decay", NULL, "NAME", FIELD_DECAY, OFF(decay), 0, 0, 0, 0,
     "learning-rate decay after warm-up: cosine | linear | constant"},
    {"training", "weight_decay", NULL, "X", FIELD_FLOAT, OFF(weight_decay), 0, 10, 0, 0,
     "AdamW decoupled weight decay (not applied to norm weights)"},
    {"training", "beta1", NULL, "X", FIELD_FLOAT, OFF(beta1), 0, 1, 0, 1, "AdamW first-moment decay, in [0, 1)"},
    {"training", "beta2", NULL, "X", FIELD_FLOAT, OFF(beta2), 0, 1, 0, 1, "AdamW second-moment decay, in [0, 1)"},
    {"training", "eps", NULL, "X", FIELD_FLOAT, OFF(eps), 0, 1, 1, 0, "AdamW epsilon"},
    {"training", "grad_clip", NULL, "X", FIELD_FLOAT, OFF(grad_clip), 0, BIG, 0, 0,
     "clip the global gradient norm to X (0: no clipping)"},
    {"training", "seed", "--seed", "N", FIELD_SEED, OFF(seed), 0, 0, 0, 0,
     "seed of weight init and data order"},
    {"training", "log_interval", "--log-interval", "N", FIELD_INT, OFF(log_interval), 1, 1 << 30, 0, 0,
     "a log line every N steps"},
    {"training", "eval_interval", "--eval-interval", "N", FIELD_INT, OFF(eval_interval), 0, 1 << 30, 0, 0,
     "validation every N steps (0: at the end only)"},
    {"training", "eval_batches", NULL, "N", FIELD_INT, OFF(eval_batches), 1, 1 << 20, 0, 0,
     "sets eval_windows when that is not given: eval_batches x the config's micro_batch_size"},
    {"training", "eval_windows", "--eval-windows", "N", FIELD_INT, OFF(eval_windows), 0, 1 << 30, 0, 0,
     "fixed validation windows per evaluation, the same under every layout (default: eval_batches x "
     "micro_batch_size as the config file sets them)"},
    {"training", "threads", "--threads", "N", FIELD_INT, OFF(threads), 0, 4096, 0, 0,
     "OpenMP and OpenBLAS threads (0: all cores)"},
    {"training", "peak_gflops", "--peak-gflops", "X", FIELD_DOUBLE, OFF(peak_gflops), 0, BIG, 1, 0,
     "peak MFU is stated against (default: measured, of the precision used)"},
    {"training", "gemm_backend", "--gemm-backend", "NAME", FIELD_TEXT, OFF(gemm_backend), 0, 0, 0, 0,
     "matrix-product library: onednn (default) | openblas"},
    {"training", "precision", "--precision", "NAME", FIELD_TEXT, OFF(precision), 0, 0, 0, 0,
     "fp32 (default) | bf16: bf16 GEMM inputs with fp32 accumulation, fp32 master weights (needs avx512_bf16)"},
    {"training", "recompute", "--recompute", "NAME", FIELD_TEXT, OFF(recompute), 0, 0, 0, 0,
     "activation recomputation: none (default) | full: a recomputed block keeps only its input and reruns its "
     "forward in backward | selective: only the parts recompute_modules names (both bit-identical, less "
     "activation memory)"},
    {"training", "recompute_modules", "--recompute-modules", "LIST", FIELD_NAMES, OFF(recompute_modules), 0, 0, 0,
     0,
     "what selective recomputation rebuilds, Megatron's names: layernorm (the two pre-norm outputs), mlp (a dense "
     "MLP's first product), core_attn and moe_act (accepted: never kept here); default core_attn"},
    {"training", "recompute_method", "--recompute-method", "NAME", FIELD_TEXT, OFF(recompute_method), 0, 0, 0, 0,
     "full recomputation as Megatron: uniform (default; every block, in groups of recompute_num_layers whose "
     "input is kept) | block (only the first recompute_num_layers blocks of each virtual stage)"},
    {"training", "recompute_num_layers", "--recompute-num-layers", "N", FIELD_INT, OFF(recompute_num_layers), 0,
     512 /* MODEL_MAX_LAYERS */, 0, 0, "blocks per recomputed group (uniform) or recomputed per stage (block); default 1"},
    {"training", "fuse_swiglu", "--fuse-swiglu", "0|1", FIELD_INT, OFF(fuse_swiglu), 0, 1, 0, 0,
     "1 (default): SwiGLU's silu(gate) * up as one kernel; 0: separate kernels with the intermediate written to "
     "memory (bit-identical results; the planner prices the extra traffic)"},
    {"training", "fuse_bias_gelu", "--fuse-bias-gelu", "0|1", FIELD_INT, OFF(fuse_bias_gelu), 0, 1, 0, 0,
     "1 (default): GPT-2's fc bias add and GeLU (and their gradients) as one kernel; 0: separate kernels "
     "(bit-identical results)"},
    {"training", "fuse_norm_residual", "--fuse-norm-residual", "0|1", FIELD_INT, OFF(fuse_norm_residual), 0, 1, 0, 0,
     "1 (default): each residual add and the norm after it (and in backward the residual gradient and the "
     "norm's input gradient) as one kernel; 0: separate kernels (bit-identical results)"},
    {"training", "nonfinite", NULL, "NAME", FIELD_TEXT, OFF(nonfinite), 0, 0, 0, 0,
     "a non-finite loss or gradient: skip (the step, weights untouched) | stop (the run, with an error)"},
    {"training", "max_nonfinite_skips", NULL, "N", FIELD_INT, OFF(max_nonfinite_skips), 0, 1 << 30, 0, 0,
     "consecutive skipped steps after which the run stops with an error"},
    {"training", "collective_timeout_s", NULL, "X", FIELD_DOUBLE, OFF(collective_timeout_s), 0, BIG, 0, 0,
     "seconds a rank waits in a collective for a rank that does not arrive before the job ends naming it "
     "(default 600; 0: wait forever)"},
    {"training", "progress", "--progress", "auto|always|never", FIELD_PROGRESS, OFF(progress), 0, 0, 0, 0,
     "in-place progress line between log lines; auto (default): only when the output really is a terminal "
     "(under mpirun: when mpirun's own output is)"},
    {"data", "train", "--train-data", "PATHS", FIELD_PATHS, OFF(train_paths), 0, 0, 0, 0,
     "training shard(s), comma-separated"},
    {"data", "val", "--val-data", "PATHS", FIELD_PATHS, OFF(val_paths), 0, 0, 0, 0,
     "validation shard(s), comma-separated"},
    {"data", "tokenizer", "--tokenizer", "PATH", FIELD_TOKENIZER, OFF(tokenizer), 0, 0, 0, 0,
     "tokenizer.json, or byte-level (default)"},
    {"checkpoint", "interval", "--save-interval", "N", FIELD_INT, OFF(checkpoint_interval), 0, 1 << 30, 0, 0,
     "checkpoint every N steps (0: at the end only)"},
    {"checkpoint", "interval_minutes", NULL, "X", FIELD_DOUBLE, OFF(checkpoint_interval_minutes), 0, BIG, 0, 0,
     "also checkpoint when X minutes have passed since the last one (default 30; 0: off)"},
    {"checkpoint", "keep_last", "--keep-last", "K", FIELD_INT, OFF(keep_last), 0, 1 << 30, 0, 0,
     "checkpoints kept in the run directory (0: all)"},
    {"parallel", "tp", "--tp", "N", FIELD_INT, OFF(tp), 1, 1 << 16, 0, 0,
     "tensor-parallel ranks (with sequence parallelism)"},
    {"parallel", "pp", "--pp", "N", FIELD_INT, OFF(pp), 1, 1 << 16, 0, 0, "pipeline-parallel ranks"},
    {"parallel", "vpp", "--vpp", "N", FIELD_INT, OFF(vpp), 1, 16 /* MODEL_MAX_CHUNKS */, 0, 0,
     "model chunks per pipeline rank (> 1: interleaved schedule)"},
    {"parallel", "dp", "--dp", "N", FIELD_INT, OFF(dp), 0, 1 << 20, 0, 0,
     "data-parallel ranks (0: world / (tp x pp); tp x pp x dp must equal the world)"},
    {"parallel", "cp", "--cp", "N", FIELD_INT, OFF(cp), 1, 1 << 16, 0, 0,
     "context-parallel ranks (ring attention; tp x cp x dp x pp must equal the world)"},
    {"parallel", "ep", "--ep", "N", FIELD_INT, OFF(ep), 1, 1 << 16, 0, 0,
     "expert-parallel ranks of the MoE grid (etp x ep x edp x pp = world)"},
    {"parallel", "etp", "--etp", "N", FIELD_INT, OFF(etp), 1, 1 << 16, 0, 0,
     "expert-tensor-parallel ranks (each expert's FFN split over them)"},
    {"parallel", "dispatcher", "--dispatcher", "NAME", FIELD_TEXT, OFF(moe_dispatcher), 0, 0, 0, 0,
     "MoE token dispatcher under expert parallelism: alltoall (default) | allgather"},
    {"parallel", "schedule", "--schedule", "NAME", FIELD_SCHEDULE, OFF(schedule), 0, 0, 0, 0,
     "pipeline schedule: none | gpipe | 1f1b | zb-h1 | interleaved (default: 1f1b when pp > 1, interleaved when vpp > 1)"},
    {"parallel", "layers_per_stage", "--layers-per-stage", "N,N,..", FIELD_STAGES, OFF(layers_per_stage), 0, 0, 0,
     0, "transformer blocks per virtual stage, in stage order (default: an even split)"},
    {"parallel", "stage_widths", "--stage-widths", "N,N,..", FIELD_STAGES, OFF(stage_widths), 0, 0, 0, 0,
     "stage replication: data-parallel replicas of each pipeline stage, on consecutive ranks (their sum is the "
     "world; tp, cp, ep 1, vpp 1; each divides the micro-batch)"},
    {"parallel", "warmup", "--warmup", "N,N,..", FIELD_STAGES, OFF(warmup), 0, 0, 0, 0,
     "1f1b / zb-h1 / interleaved: forwards each pipeline rank runs before its first backward (default: pp - rank - 1; "
     "interleaved 2(pp-rank-1) + (vpp-1)pp)"},
    {"parallel", "order_fwd_cost", "--order-fwd-cost", "X", FIELD_DOUBLE, OFF(order_fwd_cost), 0, BIG, 1, 0,
     "pipeline: the forward's relative duration the program places its sends by (default 1; a plan sets its own)"},
    {"parallel", "order_bwd_cost", "--order-bwd-cost", "X", FIELD_DOUBLE, OFF(order_bwd_cost), 0, BIG, 1, 0,
     "pipeline: the backward's relative duration the program places its sends by (default 2; a plan sets its own)"},
    {"parallel", "bucket_mb", "--bucket-mb", "X", FIELD_DOUBLE, OFF(bucket_mb), 0, BIG, 1, 0,
     "gradient bucket size in MB for the DP reduction (default: 25, at most 1/4 of the gradient)"},
    {"parallel", "distributed_optimizer", "--distributed-optimizer", "0|1", FIELD_INT, OFF(distributed_optimizer), 0,
     1, 0, 0, "ZeRO-1: shard the AdamW state, dense over DP x CP and experts over EDP (flag alone: 1)"},
    {"parallel", "overlap_grad_reduce", "--overlap-grad-reduce", "auto|0|1", FIELD_AUTO_SWITCH,
     OFF(overlap_grad_reduce), 0, 1, 0, 0,
     "1: start each gradient bucket's reduction as backward completes it; 0: blocking reductions where the "
     "program places them (faster where MPI cannot progress in the background); auto (default): 0 when the DP "
     "ranks share a host with no spare core per rank, else 1"},
    {"trace", "path", "--trace", "FILE", FIELD_PATH, OFF(trace_path), 0, 0, 0, 0,
     "record a Chrome trace of the run to FILE (docs/tracing.md)"},
    {"trace", "steps", "--trace-steps", "A:B", FIELD_TEXT, OFF(trace_steps), 0, 0, 0, 0,
     "iterations traced, 0-based inclusive: a:b, a:, a or : (default all)"},
    {"", "out", "--out", "DIR", FIELD_PATH, OFF(out_dir), 0, 0, 0, 0,
     "run directory (default runs/<config name>)"},
};
#define NUM_FIELDS ((int)(sizeof FIELDS / sizeof FIELDS[0]))
const FieldSpec *const train_config_fields = FIELDS;
const int train_config_num_fields = NUM_FIELDS;

static const char *const SECTIONS[] = {"model",    "training", "data", "checkpoint",
                                       "parallel", "trace",    "out",  "description"};
#define NUM_SECTIONS ((int)(sizeof SECTIONS / sizeof SECTIONS[0]))

int train_progress_parse(const char *name) {
  if (!strcmp(name, "auto")) return TRAIN_PROGRESS_AUTO;
  if (!strcmp(name, "always")) return TRAIN_PROGRESS_ALWAYS;
  if (!strcmp(name, "never")) return TRAIN_PROGRESS_NEVER;
  return -1;
}

const char *train_progress_name(int progress) {
  return progress == TRAIN_PROGRESS_ALWAYS ? "always" : progress == TRAIN_PROGRESS_NEVER ? "never" : "auto";
}

const char *lr_decay_name(LrDecay decay) {
  switch (decay) {
    case LR_DECAY_COSINE: return "cosine";
    case LR_DECAY_LINEAR: return "linear";
    case LR_DECAY_CONSTANT: return "constant";
  }
  return "?";
}

void train_config_defaults(TrainConfig *cfg) {
  memset(cfg, 0, sizeof *cfg);
  model_config_defaults(&cfg->model);
  image_set_config_defaults(&cfg->images);
  gan_data_config_defaults(&cfg->gan_data);
  cfg->micro_batch_size = 8;
  cfg->seq_len = 256;
  cfg->steps = 1000;
  cfg->lr = 3e-4f;
  cfg->min_lr = -1.0f;
  cfg->warmup_steps = 100;
  cfg->decay = LR_DECAY_COSINE;
  cfg->weight_decay = 0.1f;
  cfg->beta1 = 0.9f;
  cfg->beta2 = 0.95f;
  cfg->eps = 1e-8f;
  cfg->grad_clip = 1.0f;
  cfg->seed = 1337;
  cfg->log_interval = 10;
  cfg->eval_interval = 100;
  cfg->eval_batches = 20;
  snprintf(cfg->gemm_backend, sizeof cfg->gemm_backend, "onednn");
  snprintf(cfg->precision, sizeof cfg->precision, "fp32");
  cfg->fuse_swiglu = cfg->fuse_bias_gelu = cfg->fuse_norm_residual = 1;
  snprintf(cfg->nonfinite, sizeof cfg->nonfinite, "skip");
  snprintf(cfg->recompute, sizeof cfg->recompute, "none");
  snprintf(cfg->recompute_method, sizeof cfg->recompute_method, "uniform");
  cfg->recompute_num_layers = 1;
  snprintf(cfg->recompute_modules, sizeof cfg->recompute_modules, "core_attn");
  cfg->max_nonfinite_skips = 5;
  cfg->collective_timeout_s = 600;
  cfg->world_size = 1;
  cfg->world_ranks = 1;
  cfg->tp = cfg->pp = cfg->vpp = 1;
  cfg->cp = cfg->ep = cfg->etp = 1;
  cfg->overlap_grad_reduce = TRAIN_AUTO;
  cfg->schedule = -1;
  snprintf(cfg->tokenizer, sizeof cfg->tokenizer, "%s", TRAIN_TOKENIZER_BYTE_LEVEL);
  cfg->checkpoint_interval = 0;
  cfg->checkpoint_interval_minutes = 30;
  cfg->keep_last = 3;
}

static void free_paths(char ***paths, int *n) {
  for (int i = 0; i < *n; i++) free((*paths)[i]);
  free(*paths);
  *paths = NULL;
  *n = 0;
}

void train_config_free(TrainConfig *cfg) {
  free_paths(&cfg->train_paths, &cfg->num_train);
  free_paths(&cfg->val_paths, &cfg->num_val);
}

/* ---- helpers ---- */

/* " (did you mean 'x'?)" for the closest candidate within a few edits. */
static void suggest(char *out, size_t cap, const char *name, const char *const *candidates, int n) {
  const char *best = near_miss(name, candidates, n);
  if (best) snprintf(out, cap, " (did you mean '%s'?)", best);
  else out[0] = '\0';
}

/* `dir_of` + path unless path is absolute or dir_of has no directory part. */
static char *resolve_path(const char *path, const char *dir_of) {
  const char *slash = dir_of ? strrchr(dir_of, '/') : NULL;
  if (path[0] == '/' || !slash) return strdup(path);
  size_t dir_len = (size_t)(slash - dir_of);
  size_t len = dir_len + 1 + strlen(path) + 1;
  char *out = malloc(len);
  if (out) snprintf(out, len, "%.*s/%s", (int)dir_len, dir_of, path);
  return out;
}

static void range_text(char *out, size_t cap, const FieldSpec *f) {
  char lo[64] = "", hi[64] = "";
  if (f->kind == FIELD_INT) {
    snprintf(lo, sizeof lo, "%s %.0f", f->min_open ? ">" : ">=", f->min);
    snprintf(hi, sizeof hi, "%s %.0f", f->max_open ? "<" : "<=", f->max);
  } else {
    snprintf(lo, sizeof lo, "%s %g", f->min_open ? ">" : ">=", f->min);
    snprintf(hi, sizeof hi, "%s %g", f->max_open ? "<" : "<=", f->max);
  }
  if (f->max >= BIG) snprintf(out, cap, "%s", lo);
  else snprintf(out, cap, "%s and %s", lo, hi);
}

static int in_range(const FieldSpec *f, double x) {
  if (!isfinite(x)) return 0;
  if (f->min_open ? !(x > f->min) : !(x >= f->min)) return 0;
  if (f->max_open ? !(x < f->max) : !(x <= f->max)) return 0;
  return 1;
}

/* Stores a numeric value after checking integrality and range. `where` is
 * the name used in messages ("cfg.json: training.steps" or "--steps"). */
static int store_number(TrainConfig *cfg, const FieldSpec *f, double x, const char *where, const char *shown,
                        Error *err) {
  char range[160];
  char *base = (char *)cfg + f->offset;
  switch (f->kind) {
    case FIELD_INT:
      range_text(range, sizeof range, f);
      if (x != floor(x) || !in_range(f, x))
        return error_set(err, ERR_CONFIG, "%s must be an integer %s, got %s", where, range, shown);
      *(int *)base = (int)x;
      return 0;
    case FIELD_SEED:
      if (x != floor(x) || x < 0 || x > 18446744073709549568.0)
        return error_set(err, ERR_CONFIG, "%s must be a non-negative integer, got %s", where, shown);
      *(uint64_t *)base = (uint64_t)x;
      return 0;
    case FIELD_FLOAT:
    case FIELD_DOUBLE:
      range_text(range, sizeof range, f);
      if (!in_range(f, x)) return error_set(err, ERR_CONFIG, "%s must be a number %s, got %s", where, range, shown);
      if (f->kind == FIELD_FLOAT) *(float *)base = (float)x;
      else *(double *)base = x;
      return 0;
    default: return error_set(err, ERR_INTERNAL, "%s: not a numeric field", where);
  }
}

static int store_decay(TrainConfig *cfg, const FieldSpec *f, const char *name, const char *where, Error *err) {
  int d = lr_decay_parse(name);
  if (d < 0) return error_set(err, ERR_CONFIG, "%s must be \"cosine\", \"linear\" or \"constant\", got \"%s\"", where, name);
  *(LrDecay *)((char *)cfg + f->offset) = (LrDecay)d;
  return 0;
}

static int store_path(TrainConfig *cfg, const FieldSpec *f, const char *path, const char *dir_of, const char *where,
                      Error *err) {
  if (!path[0]) return error_set(err, ERR_CONFIG, "%s must be a non-empty path", where);
  char *full = resolve_path(path, dir_of);
  if (!full) return error_set(err, ERR_NOMEM, "%s: out of memory", where);
  int ok = strlen(full) < TRAIN_PATH_MAX;
  if (ok) snprintf((char *)cfg + f->offset, TRAIN_PATH_MAX, "%s", full);
  free(full);
  if (!ok) return error_set(err, ERR_CONFIG, "%s: path longer than %d characters", where, TRAIN_PATH_MAX - 1);
  return 0;
}

static int store_text(TrainConfig *cfg, const FieldSpec *f, const char *text, const char *where, Error *err) {
  if (strlen(text) >= sizeof cfg->trace_steps)
    return error_set(err, ERR_CONFIG, "%s: '%s' is too long (at most %zu characters)", where, text,
                     sizeof cfg->trace_steps - 1);
  snprintf((char *)cfg + f->offset, sizeof cfg->trace_steps, "%s", text);
  return 0;
}

/* "byte-level" stays as it is; anything else is a path to a tokenizer.json. */
static int store_tokenizer(TrainConfig *cfg, const FieldSpec *f, const char *value, const char *dir_of,
                           const char *where, Error *err) {
  if (!strcmp(value, TRAIN_TOKENIZER_BYTE_LEVEL)) {
    snprintf(cfg->tokenizer, sizeof cfg->tokenizer, "%s", TRAIN_TOKENIZER_BYTE_LEVEL);
    return 0;
  }
  if (!value[0])
    return error_set(err, ERR_CONFIG, "%s must be \"%s\" or a path to a tokenizer.json, got an empty string", where,
                     TRAIN_TOKENIZER_BYTE_LEVEL);
  return store_path(cfg, f, value, dir_of, where, err);
}

static int store_schedule(TrainConfig *cfg, const char *name, const char *where, Error *err) {
  SchedScheduleKind k;
  if (sched_schedule_from_name(name, &k) || k == SCHED_SCHEDULE_CUSTOM)
    return error_set(err, ERR_CONFIG, "%s must be \"none\", \"gpipe\", \"1f1b\", \"zb-h1\" or \"interleaved\", got \"%s\"", where,
                     name);
  cfg->schedule = (int)k;
  return 0;
}

static int store_auto_switch(TrainConfig *cfg, const FieldSpec *f, const char *text, const char *where, Error *err) {
  int *dst = (int *)((char *)cfg + f->offset);
  if (!strcmp(text, "auto")) *dst = TRAIN_AUTO;
  else if (!strcmp(text, "0") || !strcmp(text, "1")) *dst = text[0] - '0';
  else return error_set(err, ERR_CONFIG, "%s must be \"auto\", 0 or 1, got \"%s\"", where, text);
  return 0;
}

static int store_progress(TrainConfig *cfg, const FieldSpec *f, const char *text, const char *where, Error *err) {
  int p = train_progress_parse(text);
  if (p < 0) return error_set(err, ERR_CONFIG, "%s must be \"auto\", \"always\" or \"never\", got \"%s\"", where, text);
  *(int *)((char *)cfg + f->offset) = p;
  return 0;
}

/* A list of counts per stage (layers_per_stage: block counts >= 0;
 * stage_widths: replica counts >= 1) or per pipeline rank (warmup:
 * forwards >= 0). */
static int store_stages(TrainConfig *cfg, const FieldSpec *f, const int *values, int n, const char *where,
                        Error *err) {
  const int widths = f->offset == OFF(stage_widths), warmup = f->offset == OFF(warmup);
  if (n < 1 || n > TRAIN_MAX_STAGES)
    return error_set(err, ERR_CONFIG, "%s must list between 1 and %d %s, got %d", where, TRAIN_MAX_STAGES,
                     warmup ? "pipeline ranks" : "stages", n);
  for (int i = 0; i < n; i++)
    if (values[i] < widths || values[i] > (1 << 20))
      return error_set(err, ERR_CONFIG, "%s[%d] must be a %s, got %d", where, i,
                       widths ? "replica count >= 1" : warmup ? "number of forwards >= 0" : "block count >= 0",
                       values[i]);
  int *dst = widths ? cfg->stage_widths : warmup ? cfg->warmup : cfg->layers_per_stage;
  memcpy(dst, values, (size_t)n * sizeof(int));
  *(widths ? &cfg->num_stage_widths : warmup ? &cfg->num_warmup : &cfg->num_layers_per_stage) = n;
  return 0;
}

static char ***paths_member(TrainConfig *cfg, const FieldSpec *f) { return (char ***)((char *)cfg + f->offset); }
static int *paths_count(TrainConfig *cfg, const FieldSpec *f) {
  return f->offset == OFF(train_paths) ? &cfg->num_train : &cfg->num_val;
}

static int append_path(TrainConfig *cfg, const FieldSpec *f, const char *path, const char *dir_of,
                       const char *where, Error *err) {
  if (!path[0]) return error_set(err, ERR_CONFIG, "%s: empty path (expected a token shard file)", where);
  char ***list = paths_member(cfg, f);
  int *n = paths_count(cfg, f);
  char **grown = realloc(*list, sizeof(char *) * (size_t)(*n + 1));
  if (!grown) return error_set(err, ERR_NOMEM, "%s: out of memory", where);
  *list = grown;
  if (!(grown[*n] = resolve_path(path, dir_of))) return error_set(err, ERR_NOMEM, "%s: out of memory", where);
  (*n)++;
  return 0;
}

/* ---- the JSON file ---- */

static const FieldSpec *find_field(const char *section, const char *name) {
  for (int i = 0; i < NUM_FIELDS; i++)
    if (!strcmp(FIELDS[i].section, section) && !strcmp(FIELDS[i].name, name)) return &FIELDS[i];
  return NULL;
}

static int parse_field(TrainConfig *cfg, const FieldSpec *f, const cJSON *v, const char *origin, Error *err) {
  char where[TRAIN_PATH_MAX + 64];
  if (f->section[0]) snprintf(where, sizeof where, "%s: %s.%s", origin, f->section, f->name);
  else snprintf(where, sizeof where, "%s: %s", origin, f->name);
  switch (f->kind) {
    case FIELD_INT:
    case FIELD_FLOAT:
    case FIELD_DOUBLE:
    case FIELD_SEED: {
      if (!cJSON_IsNumber(v)) {
        const char *expect = f->kind == FIELD_INT || f->kind == FIELD_SEED ? "an integer" : "a number";
        if (cJSON_IsString(v))
          return error_set(err, ERR_CONFIG, "%s must be %s, got a string (\"%s\"; write it without quotes)", where,
                           expect, v->valuestring);
        return error_set(err, ERR_CONFIG, "%s must be %s, got %s", where, expect, json_type_name(v));
      }
      char shown[64];
      snprintf(shown, sizeof shown, "%.17g", v->valuedouble);
      return store_number(cfg, f, v->valuedouble, where, shown, err);
    }
    case FIELD_DECAY:
      if (!cJSON_IsString(v))
        return error_set(err, ERR_CONFIG, "%s must be a string (\"cosine\", \"linear\" or \"constant\"), got %s",
                         where, json_type_name(v));
      return store_decay(cfg, f, v->valuestring, where, err);
    case FIELD_PATH:
      if (!cJSON_IsString(v))
        return error_set(err, ERR_CONFIG, "%s must be a string (a path), got %s", where, json_type_name(v));
      return store_path(cfg, f, v->valuestring, origin, where, err);
    case FIELD_TEXT:
      if (!cJSON_IsString(v)) return error_set(err, ERR_CONFIG, "%s must be a string, got %s", where, json_type_name(v));
      return store_text(cfg, f, v->valuestring, where, err);
    case FIELD_NAMES: {
      if (cJSON_IsString(v)) return store_text(cfg, f, v->valuestring, where, err);
      if (!cJSON_IsArray(v))
        return error_set(err, ERR_CONFIG, "%s must be a list of names, got %s", where, json_type_name(v));
      char joined[sizeof cfg->trace_steps * 2] = "";
      int i = 0;
      for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e))
          return error_set(err, ERR_CONFIG, "%s[%d] must be a string, got %s", where, i, json_type_name(e));
        if (strlen(joined) + strlen(e->valuestring) + 2 >= sizeof joined)
          return error_set(err, ERR_CONFIG, "%s: the list is too long", where);
        if (i) strcat(joined, ",");
        strcat(joined, e->valuestring);
      }
      return store_text(cfg, f, joined, where, err);
    }
    case FIELD_TOKENIZER:
      if (!cJSON_IsString(v))
        return error_set(err, ERR_CONFIG, "%s must be a string (\"%s\" or a path to a tokenizer.json), got %s",
                         where, TRAIN_TOKENIZER_BYTE_LEVEL, json_type_name(v));
      return store_tokenizer(cfg, f, v->valuestring, origin, where, err);
    case FIELD_SCHEDULE:
      if (!cJSON_IsString(v))
        return error_set(err, ERR_CONFIG, "%s must be a string (\"none\", \"gpipe\", \"1f1b\" or \"interleaved\"), got %s",
                         where, json_type_name(v));
      return store_schedule(cfg, v->valuestring, where, err);
    case FIELD_AUTO_SWITCH:
      if (cJSON_IsString(v)) return store_auto_switch(cfg, f, v->valuestring, where, err);
      if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1))
        return store_auto_switch(cfg, f, v->valuedouble == 0 ? "0" : "1", where, err);
      if (cJSON_IsBool(v)) return store_auto_switch(cfg, f, cJSON_IsTrue(v) ? "1" : "0", where, err);
      return error_set(err, ERR_CONFIG, "%s must be \"auto\", 0 or 1, got %s", where, json_type_name(v));
    case FIELD_PROGRESS:
      if (!cJSON_IsString(v))
        return error_set(err, ERR_CONFIG, "%s must be \"auto\", \"always\" or \"never\", got %s", where,
                         json_type_name(v));
      return store_progress(cfg, f, v->valuestring, where, err);
    case FIELD_STAGES: {
      int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
      if (n < 1 || n > TRAIN_MAX_STAGES)
        return error_set(err, ERR_CONFIG, "%s must be a non-empty list of block counts (one per virtual stage), got %s",
                         where, json_type_name(v));
      int values[TRAIN_MAX_STAGES];
      int i = 0;
      for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble))
          return error_set(err, ERR_CONFIG, "%s[%d] must be an integer, got %s", where, i, json_type_name(e));
        values[i] = e->valuedouble < 0 ? -1 : e->valuedouble > (1 << 20) ? (1 << 21) : (int)e->valuedouble;
      }
      return store_stages(cfg, f, values, n, where, err);
    }
    case FIELD_PATHS: {
      free_paths(paths_member(cfg, f), paths_count(cfg, f));
      if (cJSON_IsString(v)) return append_path(cfg, f, v->valuestring, origin, where, err);
      if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return error_set(err, ERR_CONFIG, "%s must be a path or a non-empty list of paths to token shards, got %s",
                         where, json_type_name(v));
      int i = 0;
      for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e))
          return error_set(err, ERR_CONFIG, "%s[%d] must be a string (a token shard path), got %s", where, i,
                           json_type_name(e));
        int rc = append_path(cfg, f, e->valuestring, origin, where, err);
        if (rc) return rc;
      }
      return 0;
    }
  }
  return error_set(err, ERR_INTERNAL, "%s: unhandled field kind", where);
}

/* Parses the members of one section object against the field table. */
static int parse_section(TrainConfig *cfg, const cJSON *obj, const char *section, const char *origin, Error *err) {
  if (!cJSON_IsObject(obj))
    return error_set(err, ERR_CONFIG, "%s: \"%s\" must be an object, got %s", origin, section, json_type_name(obj));
  const char *names[NUM_FIELDS];
  int n = 0;
  for (int i = 0; i < NUM_FIELDS; i++)
    if (!strcmp(FIELDS[i].section, section)) names[n++] = FIELDS[i].name;
  for (const cJSON *v = obj->child; v; v = v->next) {
    const FieldSpec *f = find_field(section, v->string);
    if (!f) {
      char hint[128];
      suggest(hint, sizeof hint, v->string, names, n);
      return error_set(err, ERR_CONFIG, "%s: unknown field %s.%s%s", origin, section, v->string, hint);
    }
    int rc = parse_field(cfg, f, v, origin, err);
    if (rc) return rc;
  }
  return 0;
}

static int parse_model(TrainConfig *cfg, const cJSON *v, const char *origin, Error *err) {
  if (cJSON_IsString(v)) {
    if (!v->valuestring[0]) return error_set(err, ERR_CONFIG, "%s: model must be a non-empty path", origin);
    char *path = resolve_path(v->valuestring, origin);
    if (!path) return error_set(err, ERR_NOMEM, "out of memory");
    snprintf(cfg->model_source, sizeof cfg->model_source, "%s", path);
    struct stat st;
    if (stat(path, &st) != 0) {
      error_set(err, ERR_CONFIG,
                "%s: model: model config %s not found (%s; relative paths are resolved against the config "
                "file's directory)",
                origin, path, error_errno_text(errno));
      free(path);
      return ERR_CONFIG;
    }
    int rc = model_config_load(&cfg->model, path, err);
    free(path);
    if (rc) return error_wrap(err, "%s: model", origin);
  } else if (cJSON_IsObject(v) && cJSON_GetObjectItemCaseSensitive(v, "family")) {
    const cJSON *family = cJSON_GetObjectItemCaseSensitive(v, "family");
    int vision = cJSON_IsString(family) && !strcmp(family->valuestring, "vision");
    int gan = cJSON_IsString(family) && !strcmp(family->valuestring, "gan");
    if (!cJSON_IsString(family) || (strcmp(family->valuestring, "mlp") && !vision && !gan))
      return error_set(err, ERR_CONFIG,
                       "%s: model.family: expected \"mlp\", \"vision\" or \"gan\" (or no family: a transformer), "
                       "got %s", origin, cJSON_IsString(family) ? family->valuestring : json_type_name(family));
    cfg->model_source[0] = '\0';
    int rc = vision ? vision_config_from_json(&cfg->vision, v, origin, err)
             : gan  ? gan_config_from_json(&cfg->gan, v, origin, err)
                    : mlp_config_from_json(&cfg->mlp, v, origin, err);
    if (rc) return rc;
    cfg->family = vision ? TRAIN_FAMILY_VISION : gan ? TRAIN_FAMILY_GAN : TRAIN_FAMILY_MLP;
  } else if (cJSON_IsObject(v)) {
    cfg->model_source[0] = '\0';
    /* The model parser prefixes its messages with this origin. */
    char where[TRAIN_PATH_MAX + 16];
    snprintf(where, sizeof where, "%s: model", origin);
    int rc = model_config_from_json(&cfg->model, v, where, err);
    if (rc) return rc;
  } else {
    return error_set(err, ERR_CONFIG,
                     "%s: model must be an object (a model config) or a string (path to a config.json), got %s",
                     origin, json_type_name(v));
  }
  cfg->has_model = 1;
  return 0;
}

int train_config_parse(TrainConfig *cfg, const char *json_text, const char *origin, Error *err) {
  train_config_defaults(cfg);
  snprintf(cfg->config_path, sizeof cfg->config_path, "%s", origin);
  cJSON *root = cJSON_Parse(json_text);
  if (!root) {
    int line, column;
    json_error_position(json_text, cJSON_GetErrorPtr(), &line, &column);
    return error_set(err, ERR_CONFIG, "%s: invalid JSON at line %d, column %d", origin, line, column);
  }
  int rc = 0;
  if (!cJSON_IsObject(root)) {
    rc = error_set(err, ERR_CONFIG, "%s: the top level must be an object of sections, got %s", origin,
                   json_type_name(root));
    goto done;
  }
  /* The model first: its family decides what the data section holds. */
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (model) rc = parse_model(cfg, model, origin, err);
  for (const cJSON *v = root->child; v && !rc; v = v->next) {
    if (!strcmp(v->string, "model")) continue;
    if (!strcmp(v->string, "data") && cfg->family == TRAIN_FAMILY_VISION)
      rc = image_set_config_from_json(&cfg->images, v, origin, err);
    else if (!strcmp(v->string, "data") && cfg->family == TRAIN_FAMILY_GAN)
      rc = gan_data_config_from_json(&cfg->gan_data, v, origin, err);
    else if (!strcmp(v->string, "training") || !strcmp(v->string, "data") || !strcmp(v->string, "checkpoint") ||
             !strcmp(v->string, "parallel") || !strcmp(v->string, "trace"))
      rc = parse_section(cfg, v, v->string, origin, err);
    else if (!strcmp(v->string, "out")) rc = parse_field(cfg, find_field("", "out"), v, origin, err);
    else if (!strcmp(v->string, "description")) {
      if (!cJSON_IsString(v))
        rc = error_set(err, ERR_CONFIG, "%s: description must be a string, got %s", origin, json_type_name(v));
    } else {
      char hint[128], expected[160] = "";
      suggest(hint, sizeof hint, v->string, SECTIONS, NUM_SECTIONS);
      for (int i = 0, at = 0; i < NUM_SECTIONS; i++)
        at += snprintf(expected + at, sizeof expected - (size_t)at, "%s%s", i ? ", " : "", SECTIONS[i]);
      rc = error_set(err, ERR_CONFIG, "%s: unknown section \"%s\"%s (expected %s)", origin, v->string, hint,
                     expected);
    }
  }
  if (!rc && !cfg->has_model)
    rc = error_set(err, ERR_CONFIG,
                   "%s: no \"model\" section (expected a model config object or a path to a config.json)", origin);
  /* Fixed here, before flags and plans change the micro-batch: the
   * validation set belongs to the config, not to the layout. */
  if (!rc) train_config_default_eval_windows(cfg);
done:
  cJSON_Delete(root);
  if (rc) train_config_free(cfg);
  return rc;
}

int train_config_load(TrainConfig *cfg, const char *path, Error *err) {
  train_config_defaults(cfg);
  char *text = NULL;
  int rc = file_read_text(path, "config", (size_t)64 << 20, &text, NULL, err);
  if (rc) return rc;
  rc = train_config_parse(cfg, text, path, err);
  free(text);
  return rc;
}

/* ---- flags ---- */

static const FieldSpec *find_flag(const char *flag) {
  for (int i = 0; i < NUM_FIELDS; i++)
    if (FIELDS[i].flag && !strcmp(FIELDS[i].flag, flag)) return &FIELDS[i];
  return NULL;
}

int train_config_is_flag(const char *flag) { return find_flag(flag) != NULL; }

int train_config_flag_names(const char **names, int cap) {
  int n = 0;
  for (int i = 0; i < NUM_FIELDS; i++)
    if (FIELDS[i].flag) {
      if (n < cap) names[n] = FIELDS[i].flag;
      n++;
    }
  return n;
}

int train_config_override(TrainConfig *cfg, const char *flag, const char *value, Error *err) {
  const FieldSpec *f = find_flag(flag);
  if (!f) {
    const char *flags[NUM_FIELDS];
    int n = 0;
    for (int i = 0; i < NUM_FIELDS; i++)
      if (FIELDS[i].flag) flags[n++] = FIELDS[i].flag;
    char hint[128];
    suggest(hint, sizeof hint, flag, flags, n);
    return error_set(err, ERR_ARG, "unknown option '%s'%s (see 'fivefold train --help')", flag, hint);
  }
  if (!value) return error_set(err, ERR_ARG, "%s needs a value (%s)", flag, f->arg);
  char shown[256];
  snprintf(shown, sizeof shown, "'%s'", value);
  int rc;
  switch (f->kind) {
    case FIELD_INT:
    case FIELD_FLOAT:
    case FIELD_DOUBLE:
    case FIELD_SEED: {
      char *end;
      errno = 0;
      double x = strtod(value, &end);
      if (end == value || *end || errno == ERANGE) {
        const char *expect = f->kind == FIELD_INT || f->kind == FIELD_SEED ? "an integer" : "a number";
        return error_set(err, ERR_ARG, "%s must be %s, got %s", flag, expect, shown);
      }
      rc = store_number(cfg, f, x, flag, shown, err);
      break;
    }
    case FIELD_DECAY: rc = store_decay(cfg, f, value, flag, err); break;
    case FIELD_PATH: rc = store_path(cfg, f, value, NULL, flag, err); break;
    case FIELD_TEXT:
    case FIELD_NAMES: rc = store_text(cfg, f, value, flag, err); break;
    case FIELD_TOKENIZER: rc = store_tokenizer(cfg, f, value, NULL, flag, err); break;
    case FIELD_SCHEDULE: rc = store_schedule(cfg, value, flag, err); break;
    case FIELD_AUTO_SWITCH: rc = store_auto_switch(cfg, f, value, flag, err); break;
    case FIELD_PROGRESS: rc = store_progress(cfg, f, value, flag, err); break;
    case FIELD_STAGES: {
      int *values = NULL, n = 0;
      Error perr = {0};
      if (sched_partition_parse_list(value, &values, &n, &perr)) {
        free(values);
        return error_set(err, ERR_ARG, "%s must be a comma-separated list of block counts, got %s (%s)", flag, shown,
                         perr.msg);
      }
      rc = store_stages(cfg, f, values, n, flag, err);
      free(values);
      break;
    }
    case FIELD_PATHS: {
      free_paths(paths_member(cfg, f), paths_count(cfg, f));
      rc = 0;
      const char *p = value;
      for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char one[TRAIN_PATH_MAX];
        if (len >= sizeof one) return error_set(err, ERR_ARG, "%s: path too long", flag);
        memcpy(one, p, len);
        one[len] = '\0';
        if ((rc = append_path(cfg, f, one, NULL, flag, err))) break;
        if (!comma) break;
        p = comma + 1;
      }
      break;
    }
    default: rc = error_set(err, ERR_INTERNAL, "%s: unhandled field kind", flag);
  }
  if (rc == ERR_CONFIG) {
    if (err) err->code = ERR_ARG; /* a bad flag is a usage error */
    return ERR_ARG;
  }
  if (rc) return rc;
  /* A flag picking the accumulation replaces a global batch size from the
   * file (they would otherwise contradict each other). */
  if (f->offset == OFF(grad_accum_steps)) cfg->global_batch_size = 0;
  if (f->offset == OFF(global_batch_size)) cfg->grad_accum_steps = 0;
  return 0;
}

void train_config_print_flags(FILE *f) {
  for (int i = 0; i < NUM_FIELDS; i++) {
    const FieldSpec *s = &FIELDS[i];
    if (!s->flag) continue;
    char left[64];
    snprintf(left, sizeof left, "%s %s", s->flag, s->arg);
    char field[64];
    if (s->section[0]) snprintf(field, sizeof field, "%s.%s", s->section, s->name);
    else snprintf(field, sizeof field, "%s", s->name);
    fprintf(f, "  %-22s %-46s [%s]\n", left, s->help, field);
  }
}

void train_config_default_eval_windows(TrainConfig *cfg) {
  if (cfg->eval_windows > 0) return;
  long long n = (long long)cfg->eval_batches * cfg->micro_batch_size;
  cfg->eval_windows = n > (1 << 30) ? 1 << 30 : n < 1 ? 1 : (int)n;
}
