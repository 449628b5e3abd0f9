/* The run configuration after loading: the final checks (files, tokenizer,
 * the derived sizes) and the resolved config as JSON, which config.json and
 * every checkpoint record. */
#include "train/train_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/json_util.h"
#include "sched/partition.h"
#include "tok/tokenizer.h"
#include "train/train_config_fields.h"

#define FIELDS train_config_fields
#define NUM_FIELDS train_config_num_fields

/* ---- final checks ---- */

static int check_files(char **paths, int n, const char *field, const char *origin, Error *err) {
  for (int i = 0; i < n; i++) {
    struct stat st;
    if (stat(paths[i], &st) != 0)
      return error_set(err, ERR_CONFIG,
                       "%s: %s: token shard %s not found (%s; relative paths in a config file are resolved against "
                       "its directory, on the command line against the current directory)",
                       origin, field, paths[i], error_errno_text(errno));
    if (!S_ISREG(st.st_mode))
      return error_set(err, ERR_CONFIG, "%s: %s: %s is not a regular file (expected a token shard)", origin, field,
                       paths[i]);
  }
  return 0;
}

/* A tokenizer.json must load and fit the model's vocabulary: a checkpoint
 * records it, and sampling would otherwise fail only after training. */
static int check_tokenizer(const TrainConfig *cfg, const char *origin, Error *err) {
  if (!strcmp(cfg->tokenizer, TRAIN_TOKENIZER_BYTE_LEVEL)) return 0;
  struct stat st;
  if (stat(cfg->tokenizer, &st) != 0)
    return error_set(err, ERR_CONFIG,
                     "%s: data.tokenizer: %s not found (%s; expected a tokenizer.json, or \"%s\"; relative paths in "
                     "a config file are resolved against its directory)",
                     origin, cfg->tokenizer, error_errno_text(errno), TRAIN_TOKENIZER_BYTE_LEVEL);
  Tokenizer *tok = NULL;
  if (tok_load_json(&tok, cfg->tokenizer, err)) return error_wrap(err, "%s: data.tokenizer", origin);
  int vocab = tok_vocab_size(tok);
  tok_free(tok);
  if (vocab > cfg->model.vocab_size)
    return error_set(err, ERR_CONFIG,
                     "%s: data.tokenizer: %s has %d token ids but the model's vocab_size is %d (expected the "
                     "tokenizer's vocabulary to fit the model)",
                     origin, cfg->tokenizer, vocab, cfg->model.vocab_size);
  return 0;
}

/* runs/<config name> unless the run names its directory. */
static int finish_out_dir(TrainConfig *cfg, const char *origin) {
  if (!cfg->out_dir[0]) {
    const char *base = strrchr(origin, '/');
    base = base ? base + 1 : origin;
    size_t len = strlen(base);
    if (len > 5 && !strcmp(base + len - 5, ".json")) len -= 5;
    snprintf(cfg->out_dir, sizeof cfg->out_dir, "runs/%.*s", (int)len, base);
  }
  return 0;
}

/* A network of nets/ trains data-parallel only (one chunk, whole tensors);
 * the MLP on its own synthetic data, a vision network on its image set. */
static int check_network_layout(const TrainConfig *cfg, const char *origin, Error *err) {
  const char *what = cfg->family == TRAIN_FAMILY_VISION ? "a vision network"
                     : cfg->family == TRAIN_FAMILY_GAN  ? "a gan"
                                                        : "an mlp";
  if (cfg->tp > 1 || cfg->pp > 1 || cfg->vpp > 1 || cfg->cp > 1 || cfg->ep > 1 || cfg->etp > 1)
    return error_set(err, ERR_CONFIG,
                     "%s: %s trains data-parallel only (expected tp, pp, vpp, cp, ep and etp of 1; the ranks "
                     "become data-parallel replicas)",
                     origin, what);
  if (cfg->family == TRAIN_FAMILY_GAN && !cfg->gan_data.dir[0])
    return error_set(err, ERR_CONFIG, "%s: data.dir: expected the image-set directory of a gan's sharp images "
                     "(fivefold images --out DIR), got nothing (the field is required)", origin);
  if (cfg->num_train || cfg->num_val)
    return error_set(err, ERR_CONFIG, "%s: data: %s (expected no data.train / data.val)", origin,
                     cfg->family == TRAIN_FAMILY_VISION ? "a vision network reads its images from data.dir"
                     : cfg->family == TRAIN_FAMILY_GAN  ? "a gan reads its sharp images from data.dir"
                                                        : "an mlp trains on its synthetic task");
  return 0;
}

int train_config_finalize(TrainConfig *cfg, Error *err) {
  const char *origin = cfg->config_path[0] ? cfg->config_path : "config";
  train_config_default_eval_windows(cfg);
  if (!cfg->has_model) return error_set(err, ERR_CONFIG, "%s: no model configured", origin);
  int rc = cfg->family != TRAIN_FAMILY_TRANSFORMER
               ? check_network_layout(cfg, origin, err)
               : model_config_validate(&cfg->model, cfg->model_source[0] ? cfg->model_source : origin, err);
  if (rc) return rc;
  if (strcmp(cfg->nonfinite, "skip") && strcmp(cfg->nonfinite, "stop"))
    return error_set(err, ERR_CONFIG, "%s: training.nonfinite must be \"skip\" or \"stop\", got \"%s\"", origin,
                     cfg->nonfinite);
  /* Products in 64 bits: each factor is range-checked, their product is not. */
  long long per_step_ll = (long long)cfg->micro_batch_size * cfg->world_size;
  if (per_step_ll > (1LL << 30))
    return error_set(err, ERR_CONFIG,
                     "%s: training.micro_batch_size %d x %d rank(s) = %lld sequences per step (expected at most %d)",
                     origin, cfg->micro_batch_size, cfg->world_size, per_step_ll, 1 << 30);
  int per_step = (int)per_step_ll;
  if (cfg->global_batch_size > 0) {
    if (cfg->global_batch_size % per_step) {
      /* Typically a resolved config (every run records its global batch)
       * resumed on more data-parallel ranks: a smaller micro-batch keeps the
       * same global batch, so say which one fits. */
      int fits = 0;
      for (int m = cfg->micro_batch_size - 1; m >= 1 && !fits; m--)
        if (cfg->global_batch_size % (m * cfg->world_size) == 0) fits = m;
      char hint[160];
      if (fits)
        snprintf(hint, sizeof hint, "; give --micro-batch-size %d to keep the global batch of %d on %d rank(s)",
                 fits, cfg->global_batch_size, cfg->world_size);
      else
        snprintf(hint, sizeof hint, "; give --global-batch-size %d (or another multiple of %d)",
                 (cfg->global_batch_size / per_step + 1) * per_step, per_step);
      return error_set(err, ERR_CONFIG,
                       "%s: training.global_batch_size %d is not a multiple of micro_batch_size %d x %d rank(s) "
                       "(expected a multiple of %d)%s",
                       origin, cfg->global_batch_size, cfg->micro_batch_size, cfg->world_size, per_step, hint);
    }
    int accum = cfg->global_batch_size / per_step;
    if (cfg->grad_accum_steps > 0 && cfg->grad_accum_steps != accum)
      return error_set(err, ERR_CONFIG,
                       "%s: training.grad_accum_steps %d contradicts global_batch_size %d = micro_batch_size %d x "
                       "%d (give one of the two)",
                       origin, cfg->grad_accum_steps, cfg->global_batch_size, cfg->micro_batch_size, accum);
    cfg->grad_accum_steps = accum;
  }
  if (cfg->grad_accum_steps <= 0) cfg->grad_accum_steps = 1;
  long long global_ll = per_step_ll * cfg->grad_accum_steps;
  if (global_ll > (1LL << 30))
    return error_set(err, ERR_CONFIG,
                     "%s: training.micro_batch_size %d x grad_accum_steps %d x %d rank(s) = %lld sequences per step "
                     "(expected at most %d)",
                     origin, cfg->micro_batch_size, cfg->grad_accum_steps, cfg->world_size, global_ll, 1 << 30);
  cfg->global_batch_size = (int)global_ll;
  if ((rc = train_config_check_pipeline(cfg, origin, err))) return rc;
  if ((rc = train_config_check_trace(cfg, origin, err))) return rc;
  if ((rc = train_config_check_fold(cfg, origin, 0, err))) return rc;
  if ((rc = train_config_check_compute(cfg, origin, err))) return rc;
  if ((rc = train_config_check_recompute(cfg, origin, err))) return rc;
  if (cfg->min_lr < 0) cfg->min_lr = cfg->lr * 0.1f;
  if (cfg->min_lr > cfg->lr)
    return error_set(err, ERR_CONFIG,
                     "%s: training.min_lr %g is above lr %g (expected min_lr <= lr; set it with --min-lr, e.g. "
                     "--min-lr %g)",
                     origin, (double)cfg->min_lr, (double)cfg->lr, (double)cfg->lr * 0.1);
  if (cfg->model.max_position_embeddings > 0 && cfg->seq_len > cfg->model.max_position_embeddings)
    return error_set(err, ERR_CONFIG,
                     "%s: training.seq_len %d exceeds the model's max_position_embeddings %d (expected seq_len <= "
                     "%d)",
                     origin, cfg->seq_len, cfg->model.max_position_embeddings, cfg->model.max_position_embeddings);
  if (cfg->family != TRAIN_FAMILY_TRANSFORMER) return finish_out_dir(cfg, origin);
  if (cfg->num_train == 0)
    return error_set(err, ERR_CONFIG,
                     "%s: no training data (expected data.train in the config or --train-data on the command line)",
                     origin);
  if ((rc = check_files(cfg->train_paths, cfg->num_train, "data.train", origin, err))) return rc;
  if ((rc = check_files(cfg->val_paths, cfg->num_val, "data.val", origin, err))) return rc;
  if ((rc = check_tokenizer(cfg, origin, err))) return rc;
  if ((rc = train_config_check_tokenizer_shards(cfg, origin, err))) return rc;
  return finish_out_dir(cfg, origin);
}

long train_config_tokens_per_step(const TrainConfig *cfg) {
  return (long)cfg->micro_batch_size * cfg->seq_len * (cfg->grad_accum_steps > 0 ? cfg->grad_accum_steps : 1) *
         cfg->world_size;
}

/* Absolute where possible, so the recorded config reads back from any
 * directory. */
static cJSON *path_json(const char *path) {
  char *abs = realpath(path, NULL);
  cJSON *s = cJSON_CreateString(abs ? abs : path);
  free(abs);
  return s;
}

static cJSON *paths_json(char **paths, int n) {
  cJSON *arr = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, path_json(paths[i]));
  return arr;
}

/* The numeric and named fields of one section. */
static void section_to_json(const TrainConfig *cfg, const char *section, cJSON *t) {
  for (int i = 0; i < NUM_FIELDS; i++) {
    const FieldSpec *f = &FIELDS[i];
    if (strcmp(f->section, section)) continue;
    const char *base = (const char *)cfg + f->offset;
    switch (f->kind) {
      case FIELD_INT: cJSON_AddNumberToObject(t, f->name, *(const int *)base); break;
      case FIELD_FLOAT: cJSON_AddNumberToObject(t, f->name, json_float_value(*(const float *)base)); break;
      case FIELD_DOUBLE:
        if (*(const double *)base > 0) cJSON_AddNumberToObject(t, f->name, *(const double *)base);
        break;
      case FIELD_SEED: cJSON_AddNumberToObject(t, f->name, (double)*(const uint64_t *)base); break;
      case FIELD_DECAY: cJSON_AddStringToObject(t, f->name, lr_decay_name(*(const LrDecay *)base)); break;
      case FIELD_SCHEDULE: cJSON_AddStringToObject(t, f->name, sched_schedule_name(train_config_schedule(cfg))); break;
      case FIELD_AUTO_SWITCH:
        if (*(const int *)base == TRAIN_AUTO) cJSON_AddStringToObject(t, f->name, "auto");
        else cJSON_AddNumberToObject(t, f->name, *(const int *)base);
        break;
      case FIELD_PROGRESS: cJSON_AddStringToObject(t, f->name, train_progress_name(*(const int *)base)); break;
      case FIELD_TEXT:
        if (base[0]) cJSON_AddStringToObject(t, f->name, base);
        break;
      case FIELD_NAMES: {
        cJSON *list = cJSON_AddArrayToObject(t, f->name);
        char buf[128];
        snprintf(buf, sizeof buf, "%s", base);
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
          cJSON_AddItemToArray(list, cJSON_CreateString(tok));
        break;
      }
      case FIELD_STAGES: {
        const int *vals = cfg->layers_per_stage;
        int n = cfg->num_layers_per_stage;
        if (!strcmp(f->name, "stage_widths")) vals = cfg->stage_widths, n = cfg->num_stage_widths;
        else if (!strcmp(f->name, "warmup")) vals = cfg->warmup, n = cfg->num_warmup;
        if (n > 0) cJSON_AddItemToObject(t, f->name, cJSON_CreateIntArray(vals, n));
        break;
      }
      default: break;
    }
  }
}

cJSON *train_config_to_json(const TrainConfig *cfg) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "description", "resolved by fivefold train (every default filled in)");
  cJSON_AddItemToObject(root, "model", cfg->family == TRAIN_FAMILY_MLP      ? mlp_config_to_json(&cfg->mlp)
                                       : cfg->family == TRAIN_FAMILY_VISION ? vision_config_to_json(&cfg->vision)
                                       : cfg->family == TRAIN_FAMILY_GAN    ? gan_config_to_json(&cfg->gan)
                                                                            : model_config_to_json(&cfg->model));
  json_shorten_floats(cJSON_GetObjectItemCaseSensitive(root, "model")); /* 1e-05, not 9.99999974737875e-06 */
  section_to_json(cfg, "training", cJSON_AddObjectToObject(root, "training"));
  if (cfg->family == TRAIN_FAMILY_VISION) {
    cJSON_AddItemToObject(root, "data", image_set_config_to_json(&cfg->images));
  } else if (cfg->family == TRAIN_FAMILY_GAN) {
    cJSON_AddItemToObject(root, "data", gan_data_config_to_json(&cfg->gan_data));
  } else {
    cJSON *d = cJSON_AddObjectToObject(root, "data");
    cJSON_AddItemToObject(d, "train", paths_json(cfg->train_paths, cfg->num_train));
    if (cfg->num_val) cJSON_AddItemToObject(d, "val", paths_json(cfg->val_paths, cfg->num_val));
    if (!strcmp(cfg->tokenizer, TRAIN_TOKENIZER_BYTE_LEVEL))
      cJSON_AddStringToObject(d, "tokenizer", TRAIN_TOKENIZER_BYTE_LEVEL);
    else
      cJSON_AddItemToObject(d, "tokenizer", path_json(cfg->tokenizer));
  }
  section_to_json(cfg, "checkpoint", cJSON_AddObjectToObject(root, "checkpoint"));
  section_to_json(cfg, "parallel", cJSON_AddObjectToObject(root, "parallel"));
  cJSON_AddItemToObject(root, "out", path_json(cfg->out_dir));
  return root;
}
