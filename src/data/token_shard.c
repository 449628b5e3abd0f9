/* Token shard writer (temporary file + fsync + rename) and mmap reader with
 * header validation. The format is described in token_shard.h. */
#include "data/token_shard.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

uint32_t token_shard_dtype_for_vocab(uint64_t vocab_size) {
  return vocab_size <= 65536 ? TOKEN_SHARD_DTYPE_U16 : TOKEN_SHARD_DTYPE_U32;
}

size_t token_shard_dtype_bytes(uint32_t dtype) {
  return dtype == TOKEN_SHARD_DTYPE_U16 ? 2 : dtype == TOKEN_SHARD_DTYPE_U32 ? 4 : 0;
}

static void put_u32(unsigned char *p, uint32_t x) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(x >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t x) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(x >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const unsigned char *p) {
  return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void encode_header(unsigned char h[TOKEN_SHARD_HEADER_BYTES], uint32_t dtype, uint64_t count,
                          uint32_t vocab) {
  memset(h, 0, TOKEN_SHARD_HEADER_BYTES);
  memcpy(h, TOKEN_SHARD_MAGIC, 8);
  put_u32(h + 8, TOKEN_SHARD_VERSION);
  put_u32(h + 12, dtype);
  put_u64(h + 16, count);
  put_u32(h + 24, vocab);
}

/* ---- writing ---- */

int token_shard_writer_open(TokenShardWriter *w, const char *path, uint32_t vocab_size, Error *err) {
  memset(w, 0, sizeof *w);
  if (vocab_size == 0) return error_set(err, ERR_ARG, "%s: vocab size must be at least 1", path);
  int n = snprintf(w->path, sizeof w->path, "%s", path);
  int m = snprintf(w->tmp_path, sizeof w->tmp_path, "%s.tmp.%ld", path, (long)getpid());
  if (n < 0 || m < 0 || (size_t)m >= sizeof w->tmp_path)
    return error_set(err, ERR_ARG, "%s: path too long (at most %zu characters)", path, sizeof w->path - 16);
  w->f = fopen(w->tmp_path, "wb");
  if (!w->f) return error_set(err, ERR_IO, "cannot create %s: %s", w->tmp_path, error_errno_text(errno));
  w->vocab_size = vocab_size;
  w->dtype = token_shard_dtype_for_vocab(vocab_size);
  /* The count is not known while streaming: write the header with count 0
   * now and rewrite it in token_shard_writer_commit, before the rename that
   * publishes the file, so a reader never sees a count that is wrong. */
  unsigned char h[TOKEN_SHARD_HEADER_BYTES];
  encode_header(h, w->dtype, 0, vocab_size);
  if (fwrite(h, 1, sizeof h, w->f) != sizeof h) {
    int e = error_set(err, ERR_IO, "cannot write %s: %s", w->tmp_path, error_errno_text(errno));
    token_shard_writer_abort(w);
    return e;
  }
  return 0;
}

int token_shard_writer_append(TokenShardWriter *w, const uint32_t *tokens, size_t n, Error *err) {
  if (!w->f) return error_set(err, ERR_INTERNAL, "%s: writer is not open", w->path);
  unsigned char buf[8192];
  size_t width = token_shard_dtype_bytes(w->dtype), per = sizeof buf / width;
  for (size_t done = 0; done < n;) {
    size_t k = n - done < per ? n - done : per;
    for (size_t i = 0; i < k; i++) {
      uint32_t t = tokens[done + i];
      if (t >= w->vocab_size)
        return error_set(err, ERR_ARG, "%s: token %u at position %llu is outside the vocabulary (size %u)", w->path,
                         t, (unsigned long long)(w->count + done + i), w->vocab_size);
      unsigned char *p = buf + i * width;
      p[0] = (unsigned char)t;
      p[1] = (unsigned char)(t >> 8);
      if (width == 4) {
        p[2] = (unsigned char)(t >> 16);
        p[3] = (unsigned char)(t >> 24);
      }
    }
    if (fwrite(buf, width, k, w->f) != k)
      return error_set(err, ERR_IO, "cannot write %s: %s", w->tmp_path, error_errno_text(errno));
    done += k;
  }
  w->count += n;
  return 0;
}

/* fsync of the directory makes the rename itself durable. */
static void fsync_parent_dir(const char *path) {
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", path);
  int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

int token_shard_writer_commit(TokenShardWriter *w, Error *err) {
  if (!w->f) return error_set(err, ERR_INTERNAL, "%s: writer is not open", w->path);
  unsigned char h[TOKEN_SHARD_HEADER_BYTES];
  encode_header(h, w->dtype, w->count, w->vocab_size);
  int ok = fseek(w->f, 0, SEEK_SET) == 0 && fwrite(h, 1, sizeof h, w->f) == sizeof h && fflush(w->f) == 0 &&
           fsync(fileno(w->f)) == 0;
  int saved = errno;
  int closed = fclose(w->f) == 0;
  w->f = NULL;
  if (!ok || !closed) {
    error_set(err, ERR_IO, "cannot write %s: %s", w->tmp_path, error_errno_text(ok ? errno : saved));
    unlink(w->tmp_path);
    return ERR_IO;
  }
  if (rename(w->tmp_path, w->path) != 0) {
    error_set(err, ERR_IO, "cannot rename %s to %s: %s", w->tmp_path, w->path, error_errno_text(errno));
    unlink(w->tmp_path);
    return ERR_IO;
  }
  fsync_parent_dir(w->path);
  w->tmp_path[0] = '\0';
  return 0;
}

void token_shard_writer_abort(TokenShardWriter *w) {
  if (w->f) fclose(w->f);
  w->f = NULL;
  if (w->tmp_path[0]) unlink(w->tmp_path);
  w->tmp_path[0] = '\0';
}

int token_shard_write(const char *path, const uint32_t *tokens, uint64_t count, uint32_t vocab_size, Error *err) {
  TokenShardWriter w;
  int rc = token_shard_writer_open(&w, path, vocab_size, err);
  if (rc) return rc;
  if ((rc = token_shard_writer_append(&w, tokens, (size_t)count, err)) || (rc = token_shard_writer_commit(&w, err))) {
    token_shard_writer_abort(&w);
    return rc;
  }
  return 0;
}

/* ---- reading ---- */

static int validate_header(const unsigned char *h, uint64_t file_bytes, const char *path, uint32_t *dtype,
                           uint64_t *count, uint32_t *vocab, Error *err) {
  if (memcmp(h, TOKEN_SHARD_MAGIC, 8) != 0)
    return error_set(err, ERR_FORMAT,
                     "%s is not a fivefold token shard (expected the magic \"%s\" in its first 8 bytes); "
                     "make shards with 'fivefold tokenize'",
                     path, TOKEN_SHARD_MAGIC);
  uint32_t version = get_u32(h + 8);
  if (version != TOKEN_SHARD_VERSION)
    return error_set(err, ERR_FORMAT, "%s: token shard version %u is not supported (expected %u)", path, version,
                     TOKEN_SHARD_VERSION);
  *dtype = get_u32(h + 12);
  size_t width = token_shard_dtype_bytes(*dtype);
  if (!width)
    return error_set(err, ERR_FORMAT, "%s: unknown token dtype %u in the header (expected 1 = uint16 or 2 = uint32)",
                     path, *dtype);
  *count = get_u64(h + 16);
  *vocab = get_u32(h + 24);
  if (*vocab == 0) return error_set(err, ERR_FORMAT, "%s: vocab size in the header is 0 (expected >= 1)", path);
  if (*dtype == TOKEN_SHARD_DTYPE_U16 && *vocab > 65536)
    return error_set(err, ERR_FORMAT, "%s: vocab size %u does not fit the uint16 dtype (expected <= 65536)", path,
                     *vocab);
  for (int i = 28; i < TOKEN_SHARD_HEADER_BYTES; i++)
    if (h[i])
      return error_set(err, ERR_FORMAT, "%s: header byte %d is %u (expected bytes 28..63 to be zero in version 1)",
                       path, i, h[i]);
  uint64_t payload = file_bytes - TOKEN_SHARD_HEADER_BYTES;
  if (*count > payload / width || payload != *count * width)
    return error_set(err, ERR_FORMAT,
                     "%s: header says %llu tokens of %zu bytes (%llu bytes after the 64-byte header) but the file "
                     "has %llu bytes after the header (truncated or corrupt)",
                     path, (unsigned long long)*count, width,
                     *count > UINT64_MAX / width ? 0ULL : (unsigned long long)(*count * width),
                     (unsigned long long)payload);
  return 0;
}

static int64_t mtime_ns_of(const struct stat *st) {
  return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

int token_shard_open(TokenShard *s, const char *path, int check_tokens, Error *err) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
  snprintf(s->path, sizeof s->path, "%s", path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error_set(err, ERR_IO, "cannot open token shard %s: %s", path, error_errno_text(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = error_set(err, ERR_IO, "cannot stat %s: %s", path, error_errno_text(errno));
    close(fd);
    return e;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return error_set(err, ERR_IO, "%s is not a regular file (expected a token shard)", path);
  }
  if ((uint64_t)st.st_size < TOKEN_SHARD_HEADER_BYTES) {
    close(fd);
    return error_set(err, ERR_FORMAT, "%s is %lld bytes, too short for a token shard (expected a %d-byte header)",
                     path, (long long)st.st_size, TOKEN_SHARD_HEADER_BYTES);
  }
  void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) {
    int e = error_set(err, ERR_IO, "cannot mmap %s: %s", path, error_errno_text(errno));
    close(fd);
    return e;
  }
  s->fd = fd;
  s->mtime_ns = mtime_ns_of(&st);
  s->map = map;
  s->map_bytes = (size_t)st.st_size;
  int rc = validate_header(map, (uint64_t)st.st_size, path, &s->dtype, &s->count, &s->vocab_size, err);
  if (rc) {
    token_shard_close(s);
    return rc;
  }
  s->version = TOKEN_SHARD_VERSION;
  s->tokens = (const unsigned char *)map + TOKEN_SHARD_HEADER_BYTES;
  if (s->count) (void)madvise(map, s->map_bytes, MADV_WILLNEED);
  if (check_tokens) {
    for (uint64_t i = 0; i < s->count; i++) {
      uint32_t t = token_shard_get(s, i);
      if (t >= s->vocab_size) {
        error_set(err, ERR_FORMAT, "%s: token %u at position %llu is >= the vocab size %u in the header", path, t,
                  (unsigned long long)i, s->vocab_size);
        token_shard_close(s);
        return ERR_FORMAT;
      }
    }
  }
  return 0;
}

void token_shard_close(TokenShard *s) {
  if (s->map) munmap(s->map, s->map_bytes);
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  s->map = NULL;
  s->tokens = NULL;
  s->map_bytes = 0;
}

int token_shard_check_unchanged(const TokenShard *s, Error *err) {
  struct stat st;
  if (fstat(s->fd, &st) != 0) return error_set(err, ERR_IO, "cannot stat token shard %s: %s", s->path, error_errno_text(errno));
  if ((uint64_t)st.st_size != (uint64_t)s->map_bytes)
    return error_set(err, ERR_FORMAT,
                     "token shard %s changed while the run reads it: %zu bytes when opened, %lld now (%s); restore "
                     "it and resume from the last checkpoint",
                     s->path, s->map_bytes, (long long)st.st_size,
                     (uint64_t)st.st_size < (uint64_t)s->map_bytes ? "truncated" : "grown");
  if (mtime_ns_of(&st) != s->mtime_ns)
    return error_set(err, ERR_FORMAT,
                     "token shard %s changed while the run reads it: written to after it was opened (its modification "
                     "time changed), so its tokens may no longer be the ones the run started with; restore it and "
                     "resume from the last checkpoint",
                     s->path);
  return 0;
}

void token_shard_read(const TokenShard *s, uint64_t start, size_t n, int *out) {
  if (s->dtype == TOKEN_SHARD_DTYPE_U16) {
    const unsigned char *p = s->tokens + 2 * start;
    for (size_t i = 0; i < n; i++) out[i] = (int)((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8);
  } else {
    for (size_t i = 0; i < n; i++) out[i] = (int)token_shard_get(s, start + i);
  }
}
