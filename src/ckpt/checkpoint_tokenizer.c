/* The tokenizer a checkpoint carries. A run trained with a tokenizer.json
 * stores a copy of it in every checkpoint directory as tokenizer.json, with
 * its size and CRC-32 in state.json:
 *   "tokenizer": "tokenizer.json",
 *   "tokenizer_file": {"bytes": N, "crc32": "xxxxxxxx", "source": "<path it was copied from>"}
 * so a run directory moved or copied elsewhere still samples and exports
 * with the tokenizer it was trained with, and a stored copy that was
 * changed is refused instead of used. Checkpoints written before this
 * record the tokenizer's absolute path, which is used as it is. See
 * checkpoint.h. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/crc32.h"
#include "base/file_text.h"
#include "ckpt/checkpoint_internal.h"

/* A tokenizer.json of a real vocabulary is a few MB. */
#define TOKENIZER_MAX_BYTES ((size_t)256 << 20)

int ckpt_tokenizer_store(const char *tmp, const char *tokenizer, CkptTokenizerRecord *rec, Error *err) {
  memset(rec, 0, sizeof *rec);
  if (!strcmp(tokenizer, CHECKPOINT_BYTE_LEVEL)) return 0;
  char *text = NULL;
  size_t n = 0;
  int rc = file_read_text(tokenizer, "tokenizer", TOKENIZER_MAX_BYTES, &text, &n, err);
  if (rc) return error_wrap(err, "storing the tokenizer in the checkpoint");
  char path[CKPT_PATH_MAX];
  rc = ckpt_join(path, sizeof path, tmp, CHECKPOINT_TOKENIZER_FILE, err);
  if (!rc) rc = ckpt_write_file_synced(path, text, n, err);
  if (!rc) {
    rec->stored = 1;
    rec->file.bytes = n;
    rec->file.crc32 = crc32_update(0, text, n);
    char *abs = realpath(tokenizer, NULL);
    snprintf(rec->source, sizeof rec->source, "%s", abs ? abs : tokenizer);
    free(abs);
  }
  free(text);
  return rc;
}

void ckpt_tokenizer_annotate(cJSON *state, const CkptTokenizerRecord *rec) {
  if (!state || !rec->stored) return;
  cJSON_ReplaceItemInObjectCaseSensitive(state, "tokenizer", cJSON_CreateString(CHECKPOINT_TOKENIZER_FILE));
  cJSON *t = cJSON_AddObjectToObject(state, "tokenizer_file");
  if (!t) return;
  char hex[16];
  snprintf(hex, sizeof hex, "%08x", rec->file.crc32);
  cJSON_AddItemToObject(t, "bytes", ckpt_u64_json(rec->file.bytes));
  cJSON_AddStringToObject(t, "crc32", hex);
  cJSON_AddStringToObject(t, "source", rec->source);
}

int ckpt_tokenizer_resolve(const CkptState *st, char *out, size_t n, Error *err) {
  const char *state_file = CHECKPOINT_STATE_FILE;
  if (strcmp(st->tokenizer, CHECKPOINT_TOKENIZER_FILE) != 0) {
    /* byte-level, or the absolute path older checkpoints recorded */
    if (strlen(st->tokenizer) >= n)
      return error_set(err, ERR_ARG, "%s/%s: the tokenizer path does not fit a buffer of %zu bytes", st->dir,
                       state_file, n);
    snprintf(out, n, "%s", st->tokenizer);
    return 0;
  }
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(st->root, "tokenizer_file");
  const cJSON *crc = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "crc32") : NULL;
  const cJSON *bytes = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "bytes") : NULL;
  char *end = NULL;
  unsigned long want_crc = cJSON_IsString(crc) ? strtoul(crc->valuestring, &end, 16) : 0;
  if (!cJSON_IsString(crc) || !end || *end || strlen(crc->valuestring) != 8 || !cJSON_IsNumber(bytes))
    return error_set(err, ERR_FORMAT,
                     "%s/%s: \"tokenizer\" is the stored %s but \"tokenizer_file\" lacks its \"bytes\" and 8-digit "
                     "hex \"crc32\"",
                     st->dir, state_file, CHECKPOINT_TOKENIZER_FILE);
  char path[CKPT_PATH_MAX];
  int rc = ckpt_join(path, sizeof path, st->dir, CHECKPOINT_TOKENIZER_FILE, err);
  if (rc) return rc;
  uint32_t have_crc = 0;
  uint64_t have_bytes = 0;
  if (crc32_file(path, &have_crc, &have_bytes, err))
    return error_set(err, ERR_IO,
                     "%s: the checkpoint's stored tokenizer is missing or unreadable (%s records it); restore it, or "
                     "give the tokenizer with --tokenizer FILE",
                     path, state_file);
  if (have_crc != (uint32_t)want_crc || (double)have_bytes != bytes->valuedouble)
    return error_set(err, ERR_FORMAT,
                     "%s does not match the tokenizer recorded in %s/%s (CRC-32 %08x, %llu bytes; the file has "
                     "%08x, %llu bytes): the stored tokenizer was changed, and decoding with it would not be the "
                     "model's tokenizer; restore it, or give the right one with --tokenizer FILE",
                     path, st->dir, state_file, (unsigned)want_crc, (unsigned long long)bytes->valuedouble,
                     (unsigned)have_crc, (unsigned long long)have_bytes);
  if (strlen(path) >= n)
    return error_set(err, ERR_ARG, "%s: the tokenizer path does not fit a buffer of %zu bytes", path, n);
  snprintf(out, n, "%s", path);
  return 0;
}
