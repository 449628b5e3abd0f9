/* Writing checkpoints: the temporary directory, the three files (each
 * fsynced), the rename into place, keep-last-K pruning, removal of what
 * crashed processes left behind, and the check that a run does not save into
 * a directory holding another history. The steps are separate functions
 * (checkpoint_internal.h) because the MPI-IO writer, checkpoint_dist.c,
 * runs them on rank 0 around its collective writes. See checkpoint.h. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/crc32.h"
#include "base/log.h"
#include "base/safetensors.h"
#include "ckpt/checkpoint_internal.h"

/* ---- file-system helpers ---- */

static int fsync_dir(const char *path, Error *err) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return error_set(err, ERR_IO, "cannot open directory %s to sync it: %s", path, error_errno_text(errno));
  int rc = fsync(fd);
  int saved = errno;
  close(fd);
  if (rc != 0) return error_set(err, ERR_IO, "cannot sync directory %s: %s", path, error_errno_text(saved));
  return 0;
}


int ckpt_remove_dir_flat(const char *path, Error *err) {
  DIR *d = opendir(path);
  if (!d) {
    if (errno == ENOENT) return 0;
    return error_set(err, ERR_IO, "cannot open %s to delete it: %s", path, error_errno_text(errno));
  }
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d)) && !rc) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char file[CKPT_PATH_MAX];
    if ((rc = ckpt_join(file, sizeof file, path, e->d_name, err))) break;
    if (unlink(file) != 0) rc = error_set(err, ERR_IO, "cannot delete %s: %s", file, error_errno_text(errno));
  }
  closedir(d);
  if (!rc && rmdir(path) != 0) rc = error_set(err, ERR_IO, "cannot delete directory %s: %s", path, error_errno_text(errno));
  return rc;
}

int ckpt_write_file_synced(const char *path, const char *data, size_t n, Error *err) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return error_set(err, ERR_IO, "cannot create %s: %s", path, error_errno_text(errno));
  const char *p = data;
  size_t left = n;
  while (left > 0) {
    ssize_t k = write(fd, p, left);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      int saved = errno;
      close(fd);
      return error_set(err, ERR_IO, "writing %s failed: %s (is the disk full?)", path, error_errno_text(saved));
    }
    p += k;
    left -= (size_t)k;
  }
  if (fsync(fd) != 0) {
    int saved = errno;
    close(fd);
    return error_set(err, ERR_IO, "cannot sync %s: %s", path, error_errno_text(saved));
  }
  if (close(fd) != 0) return error_set(err, ERR_IO, "closing %s failed: %s", path, error_errno_text(errno));
  return 0;
}

/* Pid at the end of ".tmp-step-00000120-<pid>", or -1. */
static long trailing_pid(const char *name) {
  const char *dash = strrchr(name, '-');
  if (!dash || !dash[1] || strspn(dash + 1, "0123456789") != strlen(dash + 1)) return -1;
  return strtol(dash + 1, NULL, 10);
}

/* Removes .tmp-step-* and .del-step-* directories whose writer is gone (or
 * is this process, which writes one checkpoint at a time). Best effort: what
 * cannot be removed is ignored, since it can never be taken for a checkpoint. */
static void remove_stale_dirs(const char *root) {
  DIR *d = opendir(root);
  if (!d) return;
  struct dirent *e;
  char stale[16][CKPT_PATH_MAX];
  int n = 0;
  while ((e = readdir(d)) && n < 16) {
    if (strncmp(e->d_name, CKPT_TMP_PREFIX, strlen(CKPT_TMP_PREFIX)) &&
        strncmp(e->d_name, CKPT_DEL_PREFIX, strlen(CKPT_DEL_PREFIX)))
      continue;
    long pid = trailing_pid(e->d_name);
    if (pid <= 0) continue;
    int gone = pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH);
    if (gone && snprintf(stale[n], sizeof stale[n], "%s/%s", root, e->d_name) < (int)sizeof stale[n]) n++;
  }
  closedir(d);
  for (int i = 0; i < n; i++) {
    Error ignored = {0};
    ckpt_remove_dir_flat(stale[i], &ignored);
  }
}

/* ---- test hook ---- */

/* FIVEFOLD_TEST_CRASH_IN_CHECKPOINT=N: the N-th checkpoint written by this
 * process ends the process halfway (see checkpoint.h). Only tests set it. */
static void maybe_crash_for_test(void) {
  static int written = 0;
  const char *v = getenv(CHECKPOINT_CRASH_ENV);
  written++;
  if (!v || !v[0]) return;
  if (atoi(v) == written) {
    fprintf(stderr, "%s=%s: exiting in the middle of writing checkpoint %d\n", CHECKPOINT_CRASH_ENV, v, written);
    _exit(CHECKPOINT_TEST_CRASH_EXIT);
  }
}

/* ---- the files ---- */

/* A table entry's shape as the safetensors writer takes it. */
static void int_shape(const NetParam *t, int *shape) {
  for (int d = 0; d < NET_MAX_DIMS; d++) shape[d] = d < t->ndim ? (int)t->shape[d] : 0;
}

int ckpt_model_writer(const NetParam *t, int n, const float *params, int step, SafetensorsWriter **out, Error *err) {
  *out = NULL;
  SafetensorsWriter *w = safetensors_writer_new();
  if (!w) return error_set(err, ERR_NOMEM, "out of memory laying out %s", CHECKPOINT_MODEL_FILE);
  char step_text[32];
  snprintf(step_text, sizeof step_text, "%d", step);
  int rc = safetensors_writer_set_metadata(w, "fivefold.step", step_text, err);
  for (int i = 0; i < n && !rc; i++) {
    int shape[NET_MAX_DIMS];
    int_shape(&t[i], shape);
    rc = safetensors_writer_add_f32(w, t[i].name, t[i].ndim, shape, params ? params + t[i].offset : NULL, err);
  }
  if (rc) {
    safetensors_writer_free(w);
    return rc;
  }
  *out = w;
  return 0;
}

int ckpt_optimizer_writer(const NetParam *t, int n, const float *m, const float *v, const int64_t *step,
                          SafetensorsWriter **out, Error *err) {
  *out = NULL;
  SafetensorsWriter *w = safetensors_writer_new();
  if (!w) return error_set(err, ERR_NOMEM, "out of memory laying out %s", CHECKPOINT_OPTIMIZER_FILE);
  int rc = safetensors_writer_add(w, "step", ST_I64, 0, NULL, step, err);
  for (int k = 0; k < 2 && !rc; k++) {
    const float *base = k ? v : m;
    for (int i = 0; i < n && !rc; i++) {
      char name[SAFETENSORS_MAX_NAME];
      snprintf(name, sizeof name, "%s.%s", k ? "v" : "m", t[i].name);
      int shape[NET_MAX_DIMS];
      int_shape(&t[i], shape);
      rc = safetensors_writer_add_f32(w, name, t[i].ndim, shape, base ? base + t[i].offset : NULL, err);
    }
  }
  if (rc) {
    safetensors_writer_free(w);
    return rc;
  }
  *out = w;
  return 0;
}

static int write_model_file(const char *path, const Network *net, int step, Error *err) {
  SafetensorsWriter *w;
  int rc = ckpt_model_writer(net->params, net->num_tensors, net->values, step, &w, err);
  if (!rc) rc = safetensors_writer_write(w, path, err);
  safetensors_writer_free(w);
  return rc;
}

static int write_optimizer_file(const char *path, const Network *net, const CheckpointOptimizer *opt, Error *err) {
  if (opt->num_params != net->num_values)
    return error_set(err, ERR_INTERNAL, "optimizer holds %zu parameters, the network %zu", opt->num_params,
                     net->num_values);
  int64_t step = opt->step;
  SafetensorsWriter *w;
  int rc = ckpt_optimizer_writer(net->params, net->num_tensors, opt->m, opt->v, &step, &w, err);
  if (!rc) rc = safetensors_writer_write(w, path, err);
  safetensors_writer_free(w);
  return rc;
}

static cJSON *state_json(const CheckpointSource *src, const CkptFileRecord *files) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", CHECKPOINT_FORMAT);
  cJSON_AddNumberToObject(root, "version", CHECKPOINT_VERSION);
  cJSON_AddNumberToObject(root, "step", src->step);
  cJSON_AddItemToObject(root, "model_config",
                        src->model_record ? cJSON_Duplicate(src->model_record, 1) : cJSON_CreateObject());
  cJSON_AddItemToObject(root, "train_config",
                        src->train_config ? cJSON_Duplicate(src->train_config, 1) : cJSON_CreateObject());
  const char *tokenizer = src->tokenizer ? src->tokenizer : CHECKPOINT_BYTE_LEVEL;
  if (!strcmp(tokenizer, CHECKPOINT_BYTE_LEVEL)) {
    cJSON_AddStringToObject(root, "tokenizer", CHECKPOINT_BYTE_LEVEL);
  } else {
    char *abs = realpath(tokenizer, NULL);
    cJSON_AddStringToObject(root, "tokenizer", abs ? abs : tokenizer);
    free(abs);
  }
  cJSON *dl = cJSON_AddObjectToObject(root, "data_loader");
  cJSON_AddItemToObject(dl, "seed", ckpt_u64_json(src->data_loader.seed));
  cJSON_AddItemToObject(dl, "epoch", ckpt_u64_json(src->data_loader.epoch));
  cJSON_AddItemToObject(dl, "position", ckpt_u64_json(src->data_loader.position));
  cJSON_AddItemToObject(dl, "num_windows", ckpt_u64_json(src->data_windows));
  cJSON *rng = cJSON_AddObjectToObject(root, "rng");
  cJSON_AddItemToObject(rng, "seed", ckpt_u64_json(src->seed));
  cJSON *fs = cJSON_AddObjectToObject(root, "files");
  for (int i = 0; i < CKPT_NUM_FILES; i++) {
    cJSON *rec = cJSON_AddObjectToObject(fs, CKPT_FILES[i]);
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", files[i].crc32);
    cJSON_AddItemToObject(rec, "bytes", ckpt_u64_json(files[i].bytes));
    cJSON_AddStringToObject(rec, "crc32", hex);
  }
  return root;
}

/* Writes the three files into tmp; their sizes add up in *bytes. */
static int write_contents(const char *tmp, const CheckpointSource *src, uint64_t *bytes, Error *err) {
  char path[CKPT_PATH_MAX];
  for (int i = 0; i < CKPT_NUM_FILES; i++) {
    int rc = ckpt_join(path, sizeof path, tmp, CKPT_FILES[i], err);
    if (!rc) rc = i == 0 ? write_model_file(path, src->net, src->step, err)
                         : write_optimizer_file(path, src->net, &src->opt, err);
    if (rc) return rc;
  }
  return ckpt_save_finish_contents(tmp, src, bytes, err);
}

int ckpt_save_finish_contents(const char *tmp, const CheckpointSource *src, uint64_t *bytes, Error *err) {
  char path[CKPT_PATH_MAX];
  CkptFileRecord files[CKPT_NUM_FILES];
  *bytes = 0;
  for (int i = 0; i < CKPT_NUM_FILES; i++) {
    int rc = ckpt_join(path, sizeof path, tmp, CKPT_FILES[i], err);
    /* The CRC of what is on disk, not of memory: it must catch a bad write. */
    if (!rc) rc = crc32_file(path, &files[i].crc32, &files[i].bytes, err);
    if (rc) return rc;
    *bytes += files[i].bytes;
  }
  maybe_crash_for_test();
  CkptTokenizerRecord tok;
  int trc = ckpt_tokenizer_store(tmp, src->tokenizer ? src->tokenizer : CHECKPOINT_BYTE_LEVEL, &tok, err);
  if (trc) return trc;
  *bytes += tok.file.bytes;
  cJSON *json = state_json(src, files);
  ckpt_tokenizer_annotate(json, &tok);
  char *text = json ? cJSON_Print(json) : NULL;
  cJSON_Delete(json);
  if (!text) return error_set(err, ERR_NOMEM, "out of memory rendering %s", CHECKPOINT_STATE_FILE);
  size_t len = strlen(text);
  char *with_nl = realloc(text, len + 2);
  if (!with_nl) {
    free(text);
    return error_set(err, ERR_NOMEM, "out of memory rendering %s", CHECKPOINT_STATE_FILE);
  }
  memcpy(with_nl + len, "\n", 2);
  int rc = ckpt_join(path, sizeof path, tmp, CHECKPOINT_STATE_FILE, err);
  if (!rc) rc = ckpt_write_file_synced(path, with_nl, len + 1, err);
  free(with_nl);
  *bytes += len + 1;
  if (!rc) rc = fsync_dir(tmp, err);
  return rc;
}

/* ---- save, prune ---- */

int ckpt_save_begin(const char *run_dir, int step, char *root, char *final_dir, char *tmp, Error *err) {
  char name[96];
  int rc = ckpt_join(root, CKPT_PATH_MAX, run_dir, CHECKPOINT_SUBDIR, err);
  if (!rc) rc = fs_mkdir_p(root, err);
  if (!rc) rc = checkpoint_dir_name(root, step, final_dir, CKPT_PATH_MAX, err);
  if (rc) return rc;
  remove_stale_dirs(root);
  snprintf(name, sizeof name, CKPT_TMP_PREFIX "%08d-%ld", step, (long)getpid());
  if ((rc = ckpt_join(tmp, CKPT_PATH_MAX, root, name, err))) return rc;
  if (mkdir(tmp, 0777) != 0) return error_set(err, ERR_IO, "cannot create %s: %s", tmp, error_errno_text(errno));
  return 0;
}

int checkpoint_save(const char *run_dir, const CheckpointSource *src, int keep_last, CheckpointSaveInfo *info,
                    Error *err) {
  if (src->step < 0) return error_set(err, ERR_ARG, "checkpoint step must be >= 0, got %d", src->step);
  if (!src->net || !src->model_record)
    return error_set(err, ERR_ARG, "checkpoint: the network's table and its config record are required");
  char root[CKPT_PATH_MAX], final_dir[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX];
  int rc = ckpt_save_begin(run_dir, src->step, root, final_dir, tmp, err);
  if (rc) return rc;
  uint64_t bytes = 0;
  if ((rc = write_contents(tmp, src, &bytes, err))) {
    Error ignored = {0};
    ckpt_remove_dir_flat(tmp, &ignored);
    return error_wrap(err, "saving checkpoint step %d in %s", src->step, root);
  }
  return ckpt_save_commit(root, tmp, final_dir, src->step, keep_last, bytes, info, err);
}

int ckpt_save_commit(const char *root, const char *tmp, const char *final_dir, int step, int keep_last,
                     uint64_t bytes, CheckpointSaveInfo *info, Error *err) {
  char old[CKPT_PATH_MAX], name[96];
  int rc = 0;
  /* A checkpoint of the same step is replaced; it moves aside first because
   * rename() will not replace a non-empty directory. */
  int had_old = 0;
  struct stat st;
  if (stat(final_dir, &st) == 0) {
    snprintf(name, sizeof name, CKPT_DEL_PREFIX "%08d-%ld", step, (long)getpid());
    if ((rc = ckpt_join(old, sizeof old, root, name, err))) goto fail;
    if (rename(final_dir, old) != 0) {
      rc = error_set(err, ERR_IO, "cannot move the old %s aside: %s", final_dir, error_errno_text(errno));
      goto fail;
    }
    had_old = 1;
  }
  if (rename(tmp, final_dir) != 0) {
    rc = error_set(err, ERR_IO, "cannot rename %s to %s: %s", tmp, final_dir, error_errno_text(errno));
    goto fail;
  }
  if ((rc = fsync_dir(root, err))) return rc;
  if (had_old && (rc = ckpt_remove_dir_flat(old, err))) return rc;
  int removed = 0;
  if ((rc = checkpoint_prune(root, keep_last, &removed, err))) return rc;
  if (info) {
    snprintf(info->dir, sizeof info->dir, "%s", final_dir);
    info->bytes = bytes;
    info->removed = removed;
  }
  return 0;
fail:
  {
    Error ignored = {0};
    ckpt_remove_dir_flat(tmp, &ignored);
  }
  return error_wrap(err, "saving checkpoint step %d in %s", step, root);
}

int checkpoint_prune(const char *dir, int keep_last, int *removed, Error *err) {
  if (removed) *removed = 0;
  if (keep_last <= 0) return 0;
  char root[CKPT_PATH_MAX];
  ckpt_root_of(dir, root, sizeof root);
  int *steps, n;
  int rc = checkpoint_list(root, &steps, &n, err);
  if (rc) return rc;
  for (int i = keep_last; i < n && !rc; i++) {
    char victim[CKPT_PATH_MAX], doomed[CKPT_PATH_MAX], name[96];
    snprintf(name, sizeof name, CKPT_DEL_PREFIX "%08d-%ld", steps[i], (long)getpid());
    rc = checkpoint_dir_name(root, steps[i], victim, sizeof victim, err);
    if (!rc) rc = ckpt_join(doomed, sizeof doomed, root, name, err);
    if (rc) break;
    /* Renamed first: a crash while deleting files must not leave a
     * step-N directory that lacks some of them. */
    if (rename(victim, doomed) != 0) {
      rc = error_set(err, ERR_IO, "cannot remove old checkpoint %s: %s", victim, error_errno_text(errno));
      break;
    }
    if ((rc = ckpt_remove_dir_flat(doomed, err))) break;
    if (removed) (*removed)++;
  }
  free(steps);
  return rc;
}

int checkpoint_check_run_dir(const char *run_dir, int from_step, Error *err) {
  char root[CKPT_PATH_MAX];
  int rc = ckpt_join(root, sizeof root, run_dir, CHECKPOINT_SUBDIR, err);
  if (rc) return rc;
  int *steps, n;
  if ((rc = checkpoint_list(root, &steps, &n, err))) return rc;
  for (int i = 0; i < n && steps[i] > from_step && !rc; i++) {
    char dir[CKPT_PATH_MAX], aside[CKPT_PATH_MAX], name[96];
    if ((rc = checkpoint_dir_name(root, steps[i], dir, sizeof dir, err))) break;
    Error why = {0};
    if (checkpoint_verify(dir, &why) == 0) {
      if (from_step == 0)
        rc = error_set(err, ERR_CONFIG,
                       "%s already holds checkpoints of an earlier run (newest step-%08d): pass --resume to continue "
                       "it, or choose another --out",
                       root, steps[i]);
      else
        rc = error_set(err, ERR_CONFIG,
                       "%s holds step-%08d, newer than the step %d being resumed: saving here would mix two "
                       "histories (move the newer checkpoints away or choose another --out)",
                       root, steps[i], from_step);
      break;
    }
    snprintf(name, sizeof name, CKPT_INVALID_PREFIX "%08d-%ld", steps[i], (long)getpid());
    if ((rc = ckpt_join(aside, sizeof aside, root, name, err))) break;
    if (rename(dir, aside) != 0) {
      rc = error_set(err, ERR_IO, "cannot move the invalid checkpoint %s aside: %s", dir, error_errno_text(errno));
      break;
    }
    log_warn("moved the invalid checkpoint %s to %s (%s)", dir, aside, why.msg);
  }
  free(steps);
  return rc;
}
