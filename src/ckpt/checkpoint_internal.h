/* Private to checkpoint_read.c, checkpoint_write.c and checkpoint_dist.c:
 * path helpers, the step-N directory names, 64-bit JSON numbers, state.json
 * parsed into a struct, and the pieces of a save that the one-process and
 * the MPI-IO writers share (so both write the same bytes and follow the same
 * temporary-directory protocol). See checkpoint.h for the format. */
#ifndef FIVEFOLD_CKPT_CHECKPOINT_INTERNAL_H
#define FIVEFOLD_CKPT_CHECKPOINT_INTERNAL_H

#include <stdint.h>

#include "base/safetensors.h"
#include "ckpt/checkpoint.h"

#define CKPT_PATH_MAX CHECKPOINT_PATH_MAX
#define CKPT_STEP_PREFIX "step-"
#define CKPT_TMP_PREFIX ".tmp-step-"
#define CKPT_DEL_PREFIX ".del-step-"
#define CKPT_INVALID_PREFIX "invalid-step-"
#define CKPT_NUM_FILES 2
/* state.json of any sane run is a few KB; more is corruption. */
#define CKPT_STATE_MAX_BYTES (64u << 20)

extern const char *const CKPT_FILES[CKPT_NUM_FILES]; /* model, optimizer */

/* a + "/" + b into out, or ERR_ARG naming the too-long path. */
int ckpt_join(char *out, size_t n, const char *a, const char *b, Error *err);
/* Step of a "step-<8 or more digits>" name, or -1. */
int ckpt_parse_step_name(const char *name);
/* dir/checkpoints when that is a directory, else dir itself. */
void ckpt_root_of(const char *dir, char *out, size_t n);
/* Last path component, ignoring trailing slashes, into out. */
void ckpt_basename(const char *path, char *out, size_t n);

/* 64-bit integers: a JSON number up to 2^53, a decimal string above. */
struct cJSON *ckpt_u64_json(uint64_t x);

typedef struct CkptFileRecord {
  uint64_t bytes;
  uint32_t crc32;
} CkptFileRecord;

/* state.json, parsed and checked field by field. */
typedef struct CkptState {
  char dir[CKPT_PATH_MAX];
  int step;
  ModelConfig model;
  char tokenizer[CHECKPOINT_NAME_MAX];
  DataLoaderState data_loader;
  uint64_t data_windows;
  uint64_t seed;
  CkptFileRecord files[CKPT_NUM_FILES]; /* in CKPT_FILES order */
  struct cJSON *root;                   /* the whole document (owned) */
} CkptState;

int ckpt_state_read(const char *dir, CkptState *st, Error *err);
void ckpt_state_free(CkptState *st);

/* Size and CRC-32 of dir/CKPT_FILES[i] against the record; then its
 * safetensors structure. */
int ckpt_verify_file(const CkptState *st, int i, Error *err);

/* ---- the stored tokenizer (checkpoint_tokenizer.c) ---- */

typedef struct CkptTokenizerRecord {
  int stored; /* 0: byte-level, nothing stored */
  CkptFileRecord file;
  char source[CHECKPOINT_NAME_MAX];
} CkptTokenizerRecord;

/* Copies the run's tokenizer.json (not "byte-level") into tmp/tokenizer.json
 * (synced) and records its size and CRC-32. */
int ckpt_tokenizer_store(const char *tmp, const char *tokenizer, CkptTokenizerRecord *rec, Error *err);
/* Points state.json's "tokenizer" at the stored copy and adds "tokenizer_file". */
void ckpt_tokenizer_annotate(struct cJSON *state, const CkptTokenizerRecord *rec);
/* The tokenizer to decode with: "byte-level", the stored copy (its size and
 * CRC-32 checked against state.json: ERR_FORMAT naming both when changed,
 * ERR_IO when missing) or an older checkpoint's recorded path. */
int ckpt_tokenizer_resolve(const CkptState *st, char *out, size_t n, Error *err);

/* ---- the writer side (checkpoint_write.c) ---- */

/* Layout (and, with data, contents) of the two safetensors files for a
 * tensor table: model.safetensors holds every tensor under its name plus the
 * metadata "fivefold.step"; optimizer.safetensors holds "step" (I64 scalar),
 * then "m.<name>" and "v.<name>" for every tensor. params / m / v may be NULL
 * for a layout-only writer (tensor i's data is base + t[i].offset). */
int ckpt_model_writer(const NetParam *t, int n, const float *params, int step, SafetensorsWriter **out, Error *err);
int ckpt_optimizer_writer(const NetParam *t, int n, const float *m, const float *v, const int64_t *step,
                          SafetensorsWriter **out, Error *err);

/* 0 when `record`, the config of the network being loaded, is the one the
 * checkpoint holds: a transformer's (no "family") compared with saved_cfg
 * as model configs, a network of nets/ with the saved record `saved` (when
 * given) as JSON; else ERR_CONFIG naming the first field that differs and
 * the checkpoint directory. */
int ckpt_check_model_record(const ModelConfig *saved_cfg, const struct cJSON *saved, const struct cJSON *record,
                            const char *dir, Error *err);

/* Creates run_dir/checkpoints (root), removes what dead writers left there,
 * names the final directory and creates the empty temporary one (tmp);
 * each buffer holds CKPT_PATH_MAX bytes. */
int ckpt_save_begin(const char *run_dir, int step, char *root, char *final_dir, char *tmp, Error *err);
/* With both safetensors files complete in tmp: their CRC-32 from disk, the
 * test crash hook, state.json, and a sync of tmp. *bytes: all three files. */
int ckpt_save_finish_contents(const char *tmp, const CheckpointSource *src, uint64_t *bytes, Error *err);
/* Moves tmp into place as final_dir (replacing a checkpoint of the same step)
 * and prunes to keep_last; removes tmp and wraps err when that fails. */
int ckpt_save_commit(const char *root, const char *tmp, const char *final_dir, int step, int keep_last,
                     uint64_t bytes, CheckpointSaveInfo *info, Error *err);
/* Removes a directory of plain files (a checkpoint, or a temporary one). */
int ckpt_remove_dir_flat(const char *path, Error *err);
/* Writes n bytes to path (created or truncated) and fsyncs it; errors name
 * the path and, for a failed write, suggest a full disk. */
int ckpt_write_file_synced(const char *path, const char *data, size_t n, Error *err);
/* 0 if optimizer.safetensors (r, read from path) holds a one-element I64
 * 'step' equal to `expected`, the checkpoint's step; else ERR_FORMAT. */
int ckpt_check_optimizer_step(SafetensorsReader *r, const char *path, int expected, Error *err);

#endif
