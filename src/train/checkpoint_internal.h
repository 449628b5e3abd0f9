/* Private to checkpoint_read.c and checkpoint_write.c: path helpers, the
 * step-N directory names, 64-bit JSON numbers, and state.json parsed into a
 * struct. See checkpoint.h for the format. */
#ifndef FIVEFOLD_TRAIN_CHECKPOINT_INTERNAL_H
#define FIVEFOLD_TRAIN_CHECKPOINT_INTERNAL_H

#include <stdint.h>

#include "train/checkpoint.h"

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
  char tokenizer[TRAIN_PATH_MAX];
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

#endif
