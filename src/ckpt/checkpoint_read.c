/* Reading checkpoints: listing the step-N directories of a run, parsing and
 * checking state.json, verifying sizes and CRC-32s, picking the newest valid
 * checkpoint, and loading weights and optimizer state with name and shape
 * checks. Every message names the file and what was wrong. See checkpoint.h. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/crc32.h"
#include "base/json_util.h"
#include "base/log.h"
#include "base/safetensors.h"
#include "ckpt/checkpoint_internal.h"

#include "base/file_text.h"

const char *const CKPT_FILES[CKPT_NUM_FILES] = {CHECKPOINT_MODEL_FILE, CHECKPOINT_OPTIMIZER_FILE};

/* ---- names and paths ---- */

int ckpt_join(char *out, size_t n, const char *a, const char *b, Error *err) {
  int k = snprintf(out, n, "%s/%s", a, b);
  if (k < 0 || (size_t)k >= n) return error_set(err, ERR_ARG, "path %s/%s is too long (limit %zu bytes)", a, b, n - 1);
  return 0;
}

int ckpt_parse_step_name(const char *name) {
  size_t plen = strlen(CKPT_STEP_PREFIX);
  if (strncmp(name, CKPT_STEP_PREFIX, plen) != 0) return -1;
  const char *d = name + plen;
  size_t digits = strlen(d);
  if (digits < 8 || digits > 10) return -1;
  long long v = 0;
  for (const char *p = d; *p; p++) {
    if (*p < '0' || *p > '9') return -1;
    v = v * 10 + (*p - '0');
  }
  return v <= INT_MAX ? (int)v : -1;
}

int checkpoint_dir_name(const char *dir, int step, char *out, size_t n, Error *err) {
  char name[32];
  snprintf(name, sizeof name, CKPT_STEP_PREFIX "%08d", step);
  return ckpt_join(out, n, dir, name, err);
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void ckpt_root_of(const char *dir, char *out, size_t n) {
  char sub[CKPT_PATH_MAX];
  int k = snprintf(sub, sizeof sub, "%s/%s", dir, CHECKPOINT_SUBDIR);
  if (k > 0 && (size_t)k < sizeof sub && is_dir(sub)) snprintf(out, n, "%s", sub);
  else snprintf(out, n, "%s", dir);
}

void ckpt_basename(const char *path, char *out, size_t n) {
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  size_t start = len;
  while (start > 0 && path[start - 1] != '/') start--;
  snprintf(out, n, "%.*s", (int)(len - start), path + start);
}

static int cmp_desc(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x < y) - (x > y);
}

int checkpoint_list(const char *dir, int **steps, int *n, Error *err) {
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) return 0;
    return error_set(err, ERR_IO, "cannot list checkpoints in %s: %s", dir, error_errno_text(errno));
  }
  int cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int step = ckpt_parse_step_name(e->d_name);
    if (step < 0) continue;
    char path[CKPT_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path || !is_dir(path)) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      int *grown = realloc(*steps, (size_t)cap * sizeof **steps);
      if (!grown) {
        closedir(d);
        free(*steps);
        *steps = NULL;
        *n = 0;
        return error_set(err, ERR_NOMEM, "out of memory listing checkpoints in %s", dir);
      }
      *steps = grown;
    }
    (*steps)[(*n)++] = step;
  }
  closedir(d);
  if (*n > 1) qsort(*steps, (size_t)*n, sizeof **steps, cmp_desc);
  return 0;
}

/* ---- state.json ---- */

cJSON *ckpt_u64_json(uint64_t x) {
  if (x <= (1ULL << 53)) return cJSON_CreateNumber((double)x);
  char buf[32];
  snprintf(buf, sizeof buf, "%llu", (unsigned long long)x);
  return cJSON_CreateString(buf);
}

static int read_u64(const cJSON *obj, const char *key, const char *file, const char *where, uint64_t *out,
                    Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0 &&
      v->valuedouble == floor(v->valuedouble)) {
    *out = (uint64_t)v->valuedouble;
    return 0;
  }
  if (cJSON_IsString(v) && v->valuestring[0] && strlen(v->valuestring) <= 20 &&
      strspn(v->valuestring, "0123456789") == strlen(v->valuestring)) {
    errno = 0;
    unsigned long long x = strtoull(v->valuestring, NULL, 10);
    if (errno == 0) {
      *out = x;
      return 0;
    }
  }
  return error_set(err, ERR_FORMAT, "%s: %s%s must be a non-negative integer (a number, or a decimal string), got %s",
                   file, where, key, json_type_name(v));
}

static const cJSON *need_object(const cJSON *root, const char *key, const char *file, Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!cJSON_IsObject(v)) error_set(err, ERR_FORMAT, "%s: \"%s\" must be an object, got %s", file, key, json_type_name(v));
  return cJSON_IsObject(v) ? v : NULL;
}

static char *read_text_file(const char *path, size_t max, Error *err) {
  char *text = NULL;
  if (file_read_text(path, "checkpoint state", max, &text, NULL, err)) {
    if (err && err->code == ERR_IO && errno == ENOENT)
      error_set(err, ERR_IO, "%s: missing (not a complete checkpoint)", path);
    return NULL;
  }
  return text;
}

static int parse_files(const cJSON *files, const char *file, CkptState *st, Error *err) {
  for (const cJSON *e = files->child; e; e = e->next) {
    int known = 0;
    for (int i = 0; i < CKPT_NUM_FILES; i++) known |= !strcmp(e->string, CKPT_FILES[i]);
    if (!known)
      return error_set(err, ERR_FORMAT, "%s: files.\"%s\" is not a file of a version %d checkpoint (expected %s, %s)",
                       file, e->string, CHECKPOINT_VERSION, CKPT_FILES[0], CKPT_FILES[1]);
  }
  for (int i = 0; i < CKPT_NUM_FILES; i++) {
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(files, CKPT_FILES[i]);
    char where[96];
    snprintf(where, sizeof where, "files.\"%s\".", CKPT_FILES[i]);
    if (!cJSON_IsObject(rec))
      return error_set(err, ERR_FORMAT, "%s: files.\"%s\" must be an object {bytes, crc32}, got %s", file,
                       CKPT_FILES[i], json_type_name(rec));
    int rc = read_u64(rec, "bytes", file, where, &st->files[i].bytes, err);
    if (rc) return rc;
    const cJSON *crc = cJSON_GetObjectItemCaseSensitive(rec, "crc32");
    const char *s = cJSON_IsString(crc) ? crc->valuestring : NULL;
    if (!s || strlen(s) != 8 || strspn(s, "0123456789abcdef") != 8)
      return error_set(err, ERR_FORMAT, "%s: %scrc32 must be 8 lower-case hex digits, got %s%s%s", file, where,
                       s ? "\"" : json_type_name(crc), s ? s : "", s ? "\"" : "");
    st->files[i].crc32 = (uint32_t)strtoul(s, NULL, 16);
  }
  return 0;
}

int ckpt_state_read(const char *dir, CkptState *st, Error *err) {
  memset(st, 0, sizeof *st);
  snprintf(st->dir, sizeof st->dir, "%s", dir);
  char file[CKPT_PATH_MAX];
  int rc = ckpt_join(file, sizeof file, dir, CHECKPOINT_STATE_FILE, err);
  if (rc) return rc;
  if (!is_dir(dir)) return error_set(err, ERR_IO, "checkpoint %s: not a directory", dir);
  char *text = read_text_file(file, CKPT_STATE_MAX_BYTES, err);
  if (!text) return err ? err->code : ERR_IO;
  st->root = cJSON_Parse(text);
  free(text);
  const cJSON *root = st->root;
  if (!cJSON_IsObject(root)) {
    rc = error_set(err, ERR_FORMAT, "%s: not a JSON object (truncated or corrupt)", file);
    goto fail;
  }
  const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
  if (!cJSON_IsString(format) || strcmp(format->valuestring, CHECKPOINT_FORMAT)) {
    rc = error_set(err, ERR_FORMAT, "%s: \"format\" must be \"%s\", got %s%s%s", file, CHECKPOINT_FORMAT,
                   cJSON_IsString(format) ? "\"" : json_type_name(format), cJSON_IsString(format) ? format->valuestring : "",
                   cJSON_IsString(format) ? "\"" : "");
    goto fail;
  }
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
  if (!cJSON_IsNumber(version) || version->valuedouble != CHECKPOINT_VERSION) {
    if (cJSON_IsNumber(version))
      rc = error_set(err, ERR_FORMAT, "%s: \"version\" is %g but this build reads version %d (%s)", file,
                     version->valuedouble, CHECKPOINT_VERSION,
                     version->valuedouble > CHECKPOINT_VERSION ? "written by a newer fivefold" : "unknown version");
    else
      rc = error_set(err, ERR_FORMAT, "%s: \"version\" must be the number %d, got %s", file, CHECKPOINT_VERSION,
                     json_type_name(version));
    goto fail;
  }
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(root, "step");
  if (!cJSON_IsNumber(step) || step->valuedouble < 0 || step->valuedouble > INT_MAX ||
      step->valuedouble != floor(step->valuedouble)) {
    rc = error_set(err, ERR_FORMAT, "%s: \"step\" must be a non-negative integer, got %s", file,
                   cJSON_IsNumber(step) ? "a number out of range" : json_type_name(step));
    goto fail;
  }
  st->step = (int)step->valuedouble;
  char base[256];
  ckpt_basename(dir, base, sizeof base);
  int dir_step = ckpt_parse_step_name(base);
  if (dir_step >= 0 && dir_step != st->step) {
    rc = error_set(err, ERR_FORMAT, "%s: \"step\" is %d but the directory is %s (expected the step it is named after)",
                   file, st->step, base);
    goto fail;
  }
  const cJSON *mc = need_object(root, "model_config", file, err);
  if (!mc) goto fail_code;
  char where[CKPT_PATH_MAX + 32];
  snprintf(where, sizeof where, "%s: model_config", file);
  /* A network of nets/ records its own config, which names its family;
   * its tensors are still checked by name and shape when loaded. */
  if (!cJSON_GetObjectItemCaseSensitive(mc, "family")) {
    if ((rc = model_config_from_json(&st->model, mc, where, err))) goto fail;
    if ((rc = model_config_validate(&st->model, where, err))) goto fail;
  }
  if (!need_object(root, "train_config", file, err)) goto fail_code;
  const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
  if (!cJSON_IsString(tok) || !tok->valuestring[0] || strlen(tok->valuestring) >= sizeof st->tokenizer) {
    rc = error_set(err, ERR_FORMAT, "%s: \"tokenizer\" must be \"%s\" or the path of a tokenizer.json, got %s", file,
                   CHECKPOINT_BYTE_LEVEL, cJSON_IsString(tok) ? "an empty or overlong string" : json_type_name(tok));
    goto fail;
  }
  snprintf(st->tokenizer, sizeof st->tokenizer, "%s", tok->valuestring);
  const cJSON *dl = need_object(root, "data_loader", file, err);
  if (!dl) goto fail_code;
  if ((rc = read_u64(dl, "seed", file, "data_loader.", &st->data_loader.seed, err)) ||
      (rc = read_u64(dl, "epoch", file, "data_loader.", &st->data_loader.epoch, err)) ||
      (rc = read_u64(dl, "position", file, "data_loader.", &st->data_loader.position, err)) ||
      (rc = read_u64(dl, "num_windows", file, "data_loader.", &st->data_windows, err)))
    goto fail;
  if (st->data_windows == 0 || st->data_loader.position >= st->data_windows) {
    rc = error_set(err, ERR_FORMAT,
                   "%s: data_loader.position %llu is outside the %llu windows it records (expected position < "
                   "num_windows)",
                   file, (unsigned long long)st->data_loader.position, (unsigned long long)st->data_windows);
    goto fail;
  }
  const cJSON *rng = need_object(root, "rng", file, err);
  if (!rng) goto fail_code;
  if ((rc = read_u64(rng, "seed", file, "rng.", &st->seed, err))) goto fail;
  const cJSON *files = need_object(root, "files", file, err);
  if (!files) goto fail_code;
  if ((rc = parse_files(files, file, st, err))) goto fail;
  return 0;
fail_code:
  rc = err ? err->code : ERR_FORMAT;
fail:
  ckpt_state_free(st);
  return rc ? rc : ERR_FORMAT;
}

void ckpt_state_free(CkptState *st) {
  cJSON_Delete(st->root);
  st->root = NULL;
}

/* ---- verification ---- */

int ckpt_verify_file(const CkptState *st, int i, Error *err) {
  char path[CKPT_PATH_MAX];
  int rc = ckpt_join(path, sizeof path, st->dir, CKPT_FILES[i], err);
  if (rc) return rc;
  const CkptFileRecord *want = &st->files[i];
  struct stat sb;
  if (stat(path, &sb) != 0)
    return error_set(err, ERR_FORMAT, "%s: %s (state.json records %llu bytes)", path,
                     errno == ENOENT ? "missing" : error_errno_text(errno), (unsigned long long)want->bytes);
  if ((uint64_t)sb.st_size != want->bytes)
    return error_set(err, ERR_FORMAT, "%s: %llu bytes but state.json records %llu (truncated or overwritten)", path,
                     (unsigned long long)sb.st_size, (unsigned long long)want->bytes);
  uint32_t crc;
  uint64_t bytes;
  if ((rc = crc32_file(path, &crc, &bytes, err))) return rc;
  if (bytes != want->bytes)
    return error_set(err, ERR_FORMAT, "%s: read %llu bytes but state.json records %llu (changed while reading)", path,
                     (unsigned long long)bytes, (unsigned long long)want->bytes);
  if (crc != want->crc32)
    return error_set(err, ERR_FORMAT, "%s: CRC-32 is %08x but state.json records %08x (the file is corrupt)", path,
                     crc, want->crc32);
  SafetensorsReader *r = NULL;
  if ((rc = safetensors_open(&r, path, err))) return rc;
  safetensors_close(r);
  return 0;
}

int checkpoint_verify(const char *ckpt_dir, Error *err) {
  CkptState st;
  int rc = ckpt_state_read(ckpt_dir, &st, err);
  for (int i = 0; !rc && i < CKPT_NUM_FILES; i++) rc = ckpt_verify_file(&st, i, err);
  ckpt_state_free(&st);
  return rc;
}

int checkpoint_resolve(const char *path, char *out, size_t n, Error *err) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    if (errno == ENOENT) return error_set(err, ERR_IO, "no checkpoint in %s (no such directory)", path);
    return error_set(err, ERR_IO, "checkpoint path %s: %s", path, error_errno_text(errno));
  }
  if (!S_ISDIR(sb.st_mode))
    return error_set(err, ERR_ARG,
                     "%s is not a directory (expected a checkpoint directory step-NNNNNNNN, a run directory, or its "
                     "%s/ directory)",
                     path, CHECKPOINT_SUBDIR);
  char clean[CKPT_PATH_MAX];
  if (strlen(path) >= sizeof clean) return error_set(err, ERR_ARG, "checkpoint path %.64s... is too long", path);
  snprintf(clean, sizeof clean, "%s", path);
  for (size_t len = strlen(clean); len > 1 && clean[len - 1] == '/'; len--) clean[len - 1] = '\0';
  char base[256];
  ckpt_basename(clean, base, sizeof base);
  if (ckpt_parse_step_name(base) >= 0) {
    int rc = checkpoint_verify(clean, err);
    if (rc) return rc;
    if (strlen(clean) >= n) return error_set(err, ERR_ARG, "checkpoint path %s is too long", clean);
    snprintf(out, n, "%s", clean);
    return 0;
  }
  char root[CKPT_PATH_MAX];
  ckpt_root_of(clean, root, sizeof root);
  int *steps, count;
  int rc = checkpoint_list(root, &steps, &count, err);
  if (rc) return rc;
  if (count == 0)
    return error_set(err, ERR_IO,
                     "no checkpoint in %s (expected directories %s/%s/step-NNNNNNNN; a run saves one every "
                     "checkpoint.interval steps and at its end)",
                     clean, clean, CHECKPOINT_SUBDIR);
  char first_msg[sizeof err->msg] = "";
  for (int i = 0; i < count; i++) {
    char dir[CKPT_PATH_MAX];
    Error e = {0};
    rc = checkpoint_dir_name(root, steps[i], dir, sizeof dir, &e);
    if (!rc) rc = checkpoint_verify(dir, &e);
    if (!rc) {
      free(steps);
      if (strlen(dir) >= n) return error_set(err, ERR_ARG, "checkpoint path %s is too long", dir);
      snprintf(out, n, "%s", dir);
      return 0;
    }
    if (!first_msg[0]) snprintf(first_msg, sizeof first_msg, "%s", e.msg);
    log_warn("checkpoint %s is invalid and is skipped: %s", dir, e.msg);
  }
  free(steps);
  return error_set(err, ERR_FORMAT,
                   "no valid checkpoint in %s: all %d are invalid (newest: %.700s); refusing to continue from "
                   "damaged state",
                   root, count, first_msg);
}

/* ---- model configs ---- */

/* ERR_CONFIG naming the first top-level field in which two config records
 * differ; 0 when they are the same. */
static int compare_records(const cJSON *ja, const char *what_a, const cJSON *jb, const char *what_b, Error *err) {
  int rc = 0;
  for (int pass = 0; pass < 2 && !rc; pass++) {
    const cJSON *from = pass ? jb : ja, *other = pass ? ja : jb;
    for (const cJSON *x = from->child; x && !rc; x = x->next) {
      const cJSON *y = cJSON_GetObjectItemCaseSensitive(other, x->string);
      if (y && cJSON_Compare(x, y, 1)) continue;
      char *sx = cJSON_PrintUnformatted(x), *sy = y ? cJSON_PrintUnformatted(y) : NULL;
      const char *va = pass ? (sy ? sy : "(absent)") : sx, *vb = pass ? sx : (sy ? sy : "(absent)");
      rc = error_set(err, ERR_CONFIG,
                     "the model configs differ: %s is %.200s in %s but %.200s in %s (a checkpoint loads only into "
                     "the same model)",
                     x->string, va ? va : "?", what_a, vb ? vb : "?", what_b);
      free(sx);
      free(sy);
    }
  }
  return rc;
}

int checkpoint_compare_model_configs(const ModelConfig *a, const char *what_a, const ModelConfig *b,
                                     const char *what_b, Error *err) {
  cJSON *ja = model_config_to_json(a), *jb = model_config_to_json(b);
  int rc = ja && jb ? compare_records(ja, what_a, jb, what_b, err)
                    : error_set(err, ERR_NOMEM, "out of memory comparing model configs");
  cJSON_Delete(ja);
  cJSON_Delete(jb);
  return rc;
}

int ckpt_check_model_record(const ModelConfig *saved_cfg, const cJSON *saved, const cJSON *record, const char *dir,
                            Error *err) {
  if (!cJSON_IsObject(record))
    return error_set(err, ERR_ARG, "%s: no config record of the network being loaded to compare with", dir);
  int rc = 0;
  if (cJSON_GetObjectItemCaseSensitive(record, "family")) {
    if (saved) rc = compare_records(saved, "the checkpoint", record, "the model being loaded", err);
  } else {
    ModelConfig mine;
    rc = model_config_from_json(&mine, record, "the model being loaded", err);
    if (!rc) rc = checkpoint_compare_model_configs(saved_cfg, "the checkpoint", &mine, "the model being loaded", err);
  }
  return rc ? error_wrap(err, "%s", dir) : 0;
}

int checkpoint_read_model_config(const char *ckpt_dir, ModelConfig *cfg, char *tokenizer, size_t tn, int *step,
                                 Error *err) {
  CkptState st;
  int rc = ckpt_state_read(ckpt_dir, &st, err);
  if (rc) return rc;
  if (tokenizer && (rc = ckpt_tokenizer_resolve(&st, tokenizer, tn, err))) {
    ckpt_state_free(&st);
    return rc;
  }
  *cfg = st.model;
  if (step) *step = st.step;
  ckpt_state_free(&st);
  return 0;
}

int checkpoint_read_train_config(const char *ckpt_dir, cJSON **train_config, Error *err) {
  CkptState st;
  int rc = ckpt_state_read(ckpt_dir, &st, err);
  if (rc) return rc;
  *train_config = cJSON_DetachItemFromObjectCaseSensitive(st.root, "train_config");
  ckpt_state_free(&st);
  return 0;
}

/* ---- loading tensors ---- */

/* Reads prefix + name of every model tensor into base + offset, checking
 * dtype and shape. */
static int load_param_tensors(const SafetensorsReader *r, const Network *net, const char *prefix, float *base,
                              Error *err) {
  const char *path = safetensors_path(r);
  for (int i = 0; i < net->num_tensors; i++) {
    const NetParam *p = &net->params[i];
    char name[SAFETENSORS_MAX_NAME];
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    const SafetensorsTensorInfo *info = safetensors_find(r, name);
    int64_t want[4];
    for (int d = 0; d < p->ndim; d++) want[d] = p->shape[d];
    char ws[96], gs[96];
    safetensors_shape_str(p->ndim, want, ws, sizeof ws);
    if (!info)
      return error_set(err, ERR_FORMAT, "%s: tensor '%s' is missing (the model has it, shape %s)", path, name, ws);
    if (info->dtype != ST_F32)
      return error_set(err, ERR_FORMAT, "%s: tensor '%s' is %s (expected F32)", path, name,
                       safetensors_dtype_name(info->dtype));
    int same = info->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = info->shape[d] == want[d];
    if (!same)
      return error_set(err, ERR_FORMAT, "%s: tensor '%s' has shape %s but the model expects %s", path, name,
                       safetensors_shape_str(info->ndim, info->shape, gs, sizeof gs), ws);
    int rc = safetensors_read(r, name, ST_F32, base + p->offset, p->numel * sizeof(float), err);
    if (rc) return rc;
  }
  return 0;
}

/* The file holds only prefix + parameter name for the given prefixes (and,
 * when with_step, the tensor "step"): a tensor of another model is an error,
 * not something to ignore. */
static int check_no_foreign_tensors(const SafetensorsReader *r, const Network *net, const char *const *prefixes,
                                    int np, int with_step, Error *err) {
  int count = safetensors_num_tensors(r);
  for (int i = 0; i < count; i++) {
    const char *name = safetensors_tensor_at(r, i)->name;
    int known = with_step && !strcmp(name, "step");
    for (int k = 0; k < np && !known; k++) {
      size_t plen = strlen(prefixes[k]);
      known = !strncmp(name, prefixes[k], plen) && network_find_param(net, name + plen);
    }
    if (!known)
      return error_set(err, ERR_FORMAT, "%s: tensor '%s' is not %s of this model", safetensors_path(r), name,
                       with_step ? "optimizer state of a parameter" : "a parameter");
  }
  return 0;
}

static int open_checked(const CkptState *st, int i, SafetensorsReader **r, Error *err) {
  int rc = ckpt_verify_file(st, i, err);
  if (rc) return rc;
  char path[CKPT_PATH_MAX];
  if ((rc = ckpt_join(path, sizeof path, st->dir, CKPT_FILES[i], err))) return rc;
  return safetensors_open(r, path, err);
}

static int load_weights_from_state(const CkptState *st, Network *net, const cJSON *model_record, Error *err) {
  int rc = ckpt_check_model_record(&st->model, cJSON_GetObjectItemCaseSensitive(st->root, "model_config"),
                                   model_record, st->dir, err);
  if (rc) return rc;
  SafetensorsReader *r = NULL;
  if ((rc = open_checked(st, 0, &r, err))) return rc;
  static const char *const prefixes[] = {""};
  rc = load_param_tensors(r, net, "", net->values, err);
  network_weights_changed(net, -1); /* bf16 copies of the old values are stale (kern/bf16_weights.h) */
  if (!rc) rc = check_no_foreign_tensors(r, net, prefixes, 1, 0, err);
  safetensors_close(r);
  return rc;
}

int checkpoint_load_weights(const char *ckpt_dir, Network *net, const cJSON *model_record, Error *err) {
  CkptState st;
  int rc = ckpt_state_read(ckpt_dir, &st, err);
  if (rc) return rc;
  /* Only the files it reads: sampling and export need no optimizer state,
   * so a damaged optimizer file does not stop them (checkpoint_verify and
   * checkpoint_load_training still refuse it). */
  rc = load_weights_from_state(&st, net, model_record, err);
  ckpt_state_free(&st);
  return rc;
}

int ckpt_check_optimizer_step(SafetensorsReader *r, const char *path, int expected, Error *err) {
  const SafetensorsTensorInfo *info = safetensors_find(r, "step");
  int64_t step = -1;
  int rc = 0;
  if (!info || info->dtype != ST_I64 || info->numel != 1)
    rc = error_set(err, ERR_FORMAT, "%s: tensor 'step' must be one I64 (the optimizer's step count)%s", path,
                   info ? "" : ", but it is missing");
  if (!rc) rc = safetensors_read(r, "step", ST_I64, &step, sizeof step, err);
  if (!rc && step != expected)
    rc = error_set(err, ERR_FORMAT, "%s: optimizer step %lld differs from the checkpoint's step %d", path,
                   (long long)step, expected);
  return rc;
}

static int load_optimizer(const CkptState *st, const Network *net, CheckpointOptimizer *opt, Error *err) {
  if (opt->num_params != net->num_values)
    return error_set(err, ERR_INTERNAL, "optimizer built for %zu parameters, the network has %zu", opt->num_params,
                     net->num_values);
  SafetensorsReader *r = NULL;
  int rc = open_checked(st, 1, &r, err);
  if (rc) return rc;
  const char *path = safetensors_path(r);
  rc = ckpt_check_optimizer_step(r, path, st->step, err);
  static const char *const prefixes[] = {"m.", "v."};
  if (!rc) rc = load_param_tensors(r, net, "m.", opt->m, err);
  if (!rc) rc = load_param_tensors(r, net, "v.", opt->v, err);
  if (!rc) rc = check_no_foreign_tensors(r, net, prefixes, 2, 1, err);
  safetensors_close(r);
  if (!rc) opt->step = st->step; /* equal to the file's step, checked above */
  return rc;
}

int checkpoint_load_training(const char *ckpt_dir, Network *net, const cJSON *model_record, CheckpointOptimizer *opt,
                             CheckpointTrainState *out, Error *err) {
  CkptState st;
  int rc = ckpt_state_read(ckpt_dir, &st, err);
  if (rc) return rc;
  if (!(rc = load_weights_from_state(&st, net, model_record, err)) && !(rc = load_optimizer(&st, net, opt, err))) {
    memset(out, 0, sizeof *out);
    out->step = st.step;
    out->data_loader = st.data_loader;
    out->data_windows = st.data_windows;
    out->seed = st.seed;
  }
  ckpt_state_free(&st);
  return rc;
}
