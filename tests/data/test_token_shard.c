/* Token shards: round trips in both dtypes, the exact on-disk layout, the
 * atomic writer (no file after a failure), and every malformed-header case
 * the reader must refuse with a message naming the file, and a shard that
 * changes while it is open (written to, truncated). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/token_shard.h"
#include "train/train_test_util.h"

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle)) fail_msg("expected \"%s\" in message: %s", needle, haystack);
}

static void test_round_trip_u16(void **state) {
  (void)state;
  const char *path = scratch_path("u16.bin");
  uint32_t tokens[1000];
  for (int i = 0; i < 1000; i++) tokens[i] = (uint32_t)(i * 37 % 256);
  Error err = {0};
  assert_int_equal(token_shard_write(path, tokens, 1000, 256, &err), 0);
  assert_int_equal(file_size(path), 64 + 2 * 1000);
  TokenShard s;
  assert_int_equal(token_shard_open(&s, path, 1, &err), 0);
  assert_int_equal(s.dtype, TOKEN_SHARD_DTYPE_U16);
  assert_int_equal(s.vocab_size, 256);
  assert_int_equal(s.count, 1000);
  int out[1000];
  token_shard_read(&s, 0, 1000, out);
  for (int i = 0; i < 1000; i++) assert_int_equal(out[i], (int)tokens[i]);
  token_shard_read(&s, 990, 10, out);
  for (int i = 0; i < 10; i++) assert_int_equal(out[i], (int)tokens[990 + i]);
  token_shard_close(&s);
}

/* Written to and then truncated while open: each is reported, naming the
 * file. The file's time is set an hour back first, so the write's new
 * modification time differs whatever the clock's resolution. */
static void test_changed_while_open(void **state) {
  (void)state;
  const char *path = scratch_path("changing.bin");
  uint32_t tokens[100];
  for (int i = 0; i < 100; i++) tokens[i] = (uint32_t)i;
  Error err = {0};
  assert_int_equal(token_shard_write(path, tokens, 100, 256, &err), 0);
  struct timespec past[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
  assert_int_equal(utimensat(AT_FDCWD, path, past, 0), 0);
  TokenShard s;
  assert_int_equal(token_shard_open(&s, path, 1, &err), 0);
  assert_int_equal(token_shard_check_unchanged(&s, &err), 0);
  int fd = open(path, O_WRONLY);
  assert_true(fd >= 0);
  const unsigned char junk[2] = {0xff, 0x7f};
  assert_int_equal(pwrite(fd, junk, sizeof junk, 64 + 10), (ssize_t)sizeof junk);
  assert_int_equal(token_shard_check_unchanged(&s, &err), ERR_FORMAT);
  assert_contains(err.msg, path);
  assert_contains(err.msg, "written to after it was opened");
  assert_int_equal(ftruncate(fd, 64 + 100), 0);
  close(fd);
  assert_int_equal(token_shard_check_unchanged(&s, &err), ERR_FORMAT);
  assert_contains(err.msg, path);
  assert_contains(err.msg, "264 bytes when opened, 164 now (truncated)");
  token_shard_close(&s);
}

static void test_round_trip_u32(void **state) {
  (void)state;
  const char *path = scratch_path("u32.bin");
  enum { N = 5000 };
  static uint32_t tokens[N];
  for (int i = 0; i < N; i++) tokens[i] = (uint32_t)((uint64_t)i * 2654435761u % 200000);
  Error err = {0};
  assert_int_equal(token_shard_write(path, tokens, N, 200000, &err), 0);
  assert_int_equal(file_size(path), 64 + 4 * N);
  TokenShard s;
  assert_int_equal(token_shard_open(&s, path, 1, &err), 0);
  assert_int_equal(s.dtype, TOKEN_SHARD_DTYPE_U32);
  assert_int_equal(s.count, N);
  for (int i = 0; i < N; i++) assert_int_equal(token_shard_get(&s, (uint64_t)i), tokens[i]);
  token_shard_close(&s);
}

/* The bytes on disk are exactly the documented layout, little-endian. */
static void test_layout_little_endian(void **state) {
  (void)state;
  const char *path = scratch_path("layout.bin");
  uint32_t tokens[2] = {0x1234, 0x00ff};
  Error err = {0};
  assert_int_equal(token_shard_write(path, tokens, 2, 65536, &err), 0);
  unsigned char b[68];
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fread(b, 1, sizeof b, f), 68);
  fclose(f);
  assert_memory_equal(b, "FFTOKEN1", 8);
  assert_int_equal(b[8], 1); /* version */
  assert_int_equal(b[9] | b[10] | b[11], 0);
  assert_int_equal(b[12], 1); /* dtype uint16 */
  assert_int_equal(b[16], 2); /* count */
  for (int i = 17; i < 24; i++) assert_int_equal(b[i], 0);
  assert_int_equal(b[24] | b[25] << 8 | b[26] << 16, 65536);
  for (int i = 28; i < 64; i++) assert_int_equal(b[i], 0);
  assert_int_equal(b[64], 0x34);
  assert_int_equal(b[65], 0x12);
  assert_int_equal(b[66], 0xff);
  assert_int_equal(b[67], 0x00);
}

static void test_streaming_writer_and_empty_shard(void **state) {
  (void)state;
  const char *path = scratch_path("stream.bin");
  TokenShardWriter w;
  Error err = {0};
  assert_int_equal(token_shard_writer_open(&w, path, 50, &err), 0);
  assert_int_equal(file_size(path), -1); /* nothing visible before commit */
  uint32_t chunk[3] = {1, 2, 3};
  for (int i = 0; i < 4; i++) assert_int_equal(token_shard_writer_append(&w, chunk, 3, &err), 0);
  assert_int_equal(token_shard_writer_commit(&w, &err), 0);
  TokenShard s;
  assert_int_equal(token_shard_open(&s, path, 1, &err), 0);
  assert_int_equal(s.count, 12);
  assert_int_equal(token_shard_get(&s, 11), 3);
  token_shard_close(&s);

  const char *empty = scratch_path("empty-shard.bin");
  assert_int_equal(token_shard_write(empty, NULL, 0, 256, &err), 0);
  assert_int_equal(token_shard_open(&s, empty, 1, &err), 0);
  assert_int_equal(s.count, 0);
  token_shard_close(&s);
}

/* A token outside the vocabulary fails the write and leaves no file, not
 * even the temporary one. */
static void test_writer_rejects_token_and_leaves_nothing(void **state) {
  (void)state;
  const char *path = scratch_path("bad-token.bin");
  uint32_t tokens[3] = {1, 256, 2};
  Error err = {0};
  assert_int_equal(token_shard_write(path, tokens, 3, 256, &err), ERR_ARG);
  assert_contains(err.msg, path);
  assert_contains(err.msg, "token 256");
  assert_int_equal(file_size(path), -1);
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  assert_int_equal(file_size(tmp), -1);
  assert_int_equal(token_shard_write(path, tokens, 1, 0, &err), ERR_ARG); /* vocab 0 */
}

/* Writes a valid 10-token uint16 shard, lets `mutate` damage the bytes,
 * and returns the reader's error. */
typedef void (*Mutation)(unsigned char *bytes, size_t *len);

static int open_mutated(const char *name, Mutation mutate, int check_tokens, Error *err) {
  unsigned char bytes[64 + 2 * 10 + 16];
  size_t len = 64 + 2 * 10;
  memset(bytes, 0, sizeof bytes);
  memcpy(bytes, "FFTOKEN1", 8);
  bytes[8] = 1;
  bytes[12] = 1;
  bytes[16] = 10;
  bytes[24] = 100; /* vocab 100 */
  for (int i = 0; i < 10; i++) bytes[64 + 2 * i] = (unsigned char)(i * 7);
  mutate(bytes, &len);
  const char *path = scratch_path(name);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  fwrite(bytes, 1, len, f);
  fclose(f);
  TokenShard s;
  memset(err, 0, sizeof *err);
  int rc = token_shard_open(&s, path, check_tokens, err);
  if (rc == 0) token_shard_close(&s);
  else assert_non_null(strstr(err->msg, path));
  return rc;
}

static void m_none(unsigned char *b, size_t *len) { (void)b, (void)len; }
static void m_magic(unsigned char *b, size_t *len) { (void)len, b[7] = '2'; }
static void m_version(unsigned char *b, size_t *len) { (void)len, b[8] = 2; }
static void m_dtype0(unsigned char *b, size_t *len) { (void)len, b[12] = 0; }
static void m_dtype3(unsigned char *b, size_t *len) { (void)len, b[12] = 3; }
static void m_count_big(unsigned char *b, size_t *len) { (void)len, b[16] = 11; }
static void m_count_small(unsigned char *b, size_t *len) { (void)len, b[16] = 9; }
static void m_count_huge(unsigned char *b, size_t *len) { (void)len, b[23] = 0x80; }
static void m_truncated(unsigned char *b, size_t *len) { (void)b, *len -= 1; }
static void m_trailing(unsigned char *b, size_t *len) { (void)b, *len += 2; }
static void m_vocab0(unsigned char *b, size_t *len) { (void)len, b[24] = 0; }
static void m_vocab_u16(unsigned char *b, size_t *len) { (void)len, b[24] = 0, b[25] = 0, b[26] = 2; } /* 131072 */
static void m_reserved(unsigned char *b, size_t *len) { (void)len, b[40] = 1; }
static void m_short(unsigned char *b, size_t *len) { (void)b, *len = 63; }
static void m_empty(unsigned char *b, size_t *len) { (void)b, *len = 0; }
static void m_token(unsigned char *b, size_t *len) { (void)len, b[64 + 2 * 5] = 100; } /* == vocab */

static void test_malformed_headers(void **state) {
  (void)state;
  Error err;
  assert_int_equal(open_mutated("ok.bin", m_none, 1, &err), 0);
  struct {
    const char *name;
    Mutation m;
    const char *expect;
  } cases[] = {
      {"magic.bin", m_magic, "FFTOKEN1"},
      {"version.bin", m_version, "version 2"},
      {"dtype0.bin", m_dtype0, "dtype 0"},
      {"dtype3.bin", m_dtype3, "dtype 3"},
      {"count-big.bin", m_count_big, "11 tokens"},
      {"count-small.bin", m_count_small, "9 tokens"},
      {"count-huge.bin", m_count_huge, "truncated"},
      {"truncated.bin", m_truncated, "19 bytes after the header"},
      {"trailing.bin", m_trailing, "22 bytes after the header"},
      {"vocab0.bin", m_vocab0, "vocab size"},
      {"vocab-u16.bin", m_vocab_u16, "131072"},
      {"reserved.bin", m_reserved, "header byte 40"},
      {"short.bin", m_short, "63 bytes"},
      {"empty.bin", m_empty, "0 bytes"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc = open_mutated(cases[i].name, cases[i].m, 0, &err);
    if (rc != ERR_FORMAT) fail_msg("%s: expected ERR_FORMAT, got %d (%s)", cases[i].name, rc, err.msg);
    assert_contains(err.msg, cases[i].expect);
  }
  /* An out-of-vocab token passes the header check and is caught by the scan. */
  assert_int_equal(open_mutated("token.bin", m_token, 0, &err), 0);
  assert_int_equal(open_mutated("token.bin", m_token, 1, &err), ERR_FORMAT);
  assert_contains(err.msg, "position 5");
}

static void test_missing_and_directory(void **state) {
  (void)state;
  TokenShard s;
  Error err = {0};
  const char *missing = scratch_path("does-not-exist.bin");
  assert_int_equal(token_shard_open(&s, missing, 0, &err), ERR_IO);
  assert_contains(err.msg, missing);
  assert_int_equal(token_shard_open(&s, scratch_dir(), 0, &err), ERR_IO);
  assert_contains(err.msg, "not a regular file");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_u16),
      cmocka_unit_test(test_round_trip_u32),
      cmocka_unit_test(test_layout_little_endian),
      cmocka_unit_test(test_streaming_writer_and_empty_shard),
      cmocka_unit_test(test_writer_rejects_token_and_leaves_nothing),
      cmocka_unit_test(test_malformed_headers),
      cmocka_unit_test(test_missing_and_directory),
      cmocka_unit_test(test_changed_while_open),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
