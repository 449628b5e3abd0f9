/* Token shards: the binary files training data lives in.
 *
 * Layout (all integers little-endian):
 *   offset  size  field
 *   0       8     magic "FFTOKEN1"
 *   8       4     uint32 version (1)
 *   12      4     uint32 dtype: 1 = uint16 tokens, 2 = uint32 tokens
 *   16      8     uint64 token count
 *   24      4     uint32 vocab size (every token is < vocab size)
 *   28      36    zero (reserved; version 1 readers reject anything else)
 *   64      ...   the tokens, count * (2 or 4) bytes, nothing after them
 *
 * Writers pick the smallest dtype that holds the vocabulary and publish the
 * file atomically (temporary file, fsync, rename), so a reader never sees a
 * half-written shard. Readers mmap the file and validate the header against
 * the file size before touching a token; the data loaders check before each
 * read that the file has not changed since (token_shard_check_unchanged). */
#ifndef FIVEFOLD_DATA_TOKEN_SHARD_H
#define FIVEFOLD_DATA_TOKEN_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"

#define TOKEN_SHARD_MAGIC "FFTOKEN1"
#define TOKEN_SHARD_VERSION 1u
#define TOKEN_SHARD_HEADER_BYTES 64
#define TOKEN_SHARD_DTYPE_U16 1u
#define TOKEN_SHARD_DTYPE_U32 2u

/* dtype able to hold tokens of a vocabulary of this size. */
uint32_t token_shard_dtype_for_vocab(uint64_t vocab_size);
size_t token_shard_dtype_bytes(uint32_t dtype); /* 0 for an unknown dtype */

/* ---- writing ---- */

typedef struct TokenShardWriter {
  char path[4096];     /* final name */
  char tmp_path[4096]; /* where the bytes go until commit */
  FILE *f;
  uint32_t vocab_size, dtype;
  uint64_t count;
} TokenShardWriter;

/* Opens `path`.tmp.<pid> for writing tokens of a vocabulary of vocab_size. */
int token_shard_writer_open(TokenShardWriter *w, const char *path, uint32_t vocab_size, Error *err);
/* Appends tokens; each must be < vocab_size. */
int token_shard_writer_append(TokenShardWriter *w, const uint32_t *tokens, size_t n, Error *err);
/* Writes the final header, fsyncs and renames onto the final path. */
int token_shard_writer_commit(TokenShardWriter *w, Error *err);
/* Drops the temporary file (safe after a failed call or a commit). */
void token_shard_writer_abort(TokenShardWriter *w);

/* One call: writes all tokens to path atomically. */
int token_shard_write(const char *path, const uint32_t *tokens, uint64_t count, uint32_t vocab_size, Error *err);

/* ---- reading ---- */

typedef struct TokenShard {
  char path[4096];
  uint32_t version, dtype, vocab_size;
  uint64_t count;
  const unsigned char *tokens; /* count * dtype_bytes little-endian values */
  void *map;
  size_t map_bytes;
  int fd;           /* kept open to tell whether the file changed (-1: closed) */
  int64_t mtime_ns; /* its modification time when opened */
} TokenShard;

/* Maps and validates a shard. check_tokens != 0 also scans every token and
 * rejects one >= vocab_size (the header's promise). */
int token_shard_open(TokenShard *s, const char *path, int check_tokens, Error *err);
void token_shard_close(TokenShard *s);
/* ERR_FORMAT, naming the file, when the shard's size or modification time is
 * no longer what it was when opened: it was truncated, extended or written
 * to while a run reads it (a new file renamed over the path is no change:
 * the open one is still read). One fstat; readers call it before reading,
 * so a truncated shard is reported before a read past its end could fault. */
int token_shard_check_unchanged(const TokenShard *s, Error *err);

static inline uint32_t token_shard_get(const TokenShard *s, uint64_t i) {
  const unsigned char *p = s->tokens;
  if (s->dtype == TOKEN_SHARD_DTYPE_U16) return (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
  p += 4 * i;
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Copies tokens [start, start + n) into out as ints. */
void token_shard_read(const TokenShard *s, uint64_t start, size_t n, int *out);

#endif
