/* safetensors writer and reader: round trips of every supported shape of use
 * (dtypes, scalars, empty tensors, metadata, ranges, conversions), and
 * rejection of damaged files (truncation, bad header length, bad JSON,
 * offsets out of range, dtype/shape disagreeing with the offsets, overlaps,
 * gaps) with a message naming the file and the tensor, never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/rng.h"
#include "base/safetensors.h"

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/test_safetensors_XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(const char *name) {
  static char buf[4][400];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

/* A file with this exact header text (no padding added) and data bytes. */
static void write_raw(const char *path, const char *json, size_t data_bytes) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  uint64_t n = strlen(json);
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
  assert_int_equal(fwrite(len, 1, 8, f), 8);
  assert_int_equal(fwrite(json, 1, n, f), n);
  for (size_t i = 0; i < data_bytes; i++) fputc((int)(i & 0xff), f);
  fclose(f);
}

static void write_bytes(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(bytes, 1, n, f), n);
  fclose(f);
}

static unsigned char *read_whole(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*n ? *n : 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

/* Opening must fail with ERR_FORMAT (or ERR_IO) and a message containing each
 * of the given fragments. */
static void expect_open_fails(const char *path, int code, ...) {
  SafetensorsReader *r = (SafetensorsReader *)0x1;
  Error err = {0};
  int rc = safetensors_open(&r, path, &err);
  if (rc == 0) fail_msg("opening %s succeeded; expected an error", path);
  assert_null(r);
  assert_int_equal(rc, code);
  assert_int_equal(err.code, code);
  va_list ap;
  va_start(ap, code);
  for (const char *frag = va_arg(ap, const char *); frag; frag = va_arg(ap, const char *))
    if (!strstr(err.msg, frag)) fail_msg("message \"%s\" lacks \"%s\"", err.msg, frag);
  va_end(ap);
}

/* ---- round trip ---- */

static void test_round_trip(void **state) {
  (void)state;
  float f32[2 * 3];
  for (int i = 0; i < 6; i++) f32[i] = 0.5f * (float)i - 1.25f;
  int32_t i32[4] = {-1, 0, 7, 2147483647};
  int64_t i64[3] = {INT64_MIN, 0, 1234567890123LL};
  double f64[2] = {3.141592653589793, -1e300};
  uint16_t bf16[3] = {0x3f80, 0xc000, 0x0000};  /* 1, -2, 0 */
  uint16_t f16[4] = {0x3c00, 0xc000, 0x0001, 0x7bff}; /* 1, -2, 2^-24, 65504 */
  uint8_t u8scalar = 42;

  SafetensorsWriter *w = safetensors_writer_new();
  assert_non_null(w);
  Error err = {0};
  int shape_f32[2] = {2, 3};
  assert_int_equal(safetensors_writer_add_f32(w, "layers.0.w", 2, shape_f32, f32, &err), 0);
  /* Declared out of size order on purpose: the writer aligns by dtype. */
  assert_int_equal(safetensors_writer_add(w, "bf16", ST_BF16, 1, (int64_t[]){3}, bf16, &err), 0);
  assert_int_equal(safetensors_writer_add(w, "ints", ST_I32, 2, (int64_t[]){2, 2}, i32, &err), 0);
  assert_int_equal(safetensors_writer_add(w, "longs", ST_I64, 1, (int64_t[]){3}, i64, &err), 0);
  assert_int_equal(safetensors_writer_add(w, "scalar", ST_U8, 0, NULL, &u8scalar, &err), 0);
  assert_int_equal(safetensors_writer_add(w, "doubles", ST_F64, 1, (int64_t[]){2}, f64, &err), 0);
  assert_int_equal(safetensors_writer_add(w, "empty", ST_F32, 2, (int64_t[]){0, 5}, NULL, &err), 0);
  assert_int_equal(safetensors_writer_add(w, "half", ST_F16, 1, (int64_t[]){4}, f16, &err), 0);
  assert_int_equal(safetensors_writer_add(w, "we\"ird\\name\n", ST_F32, 1, (int64_t[]){1}, f32, &err), 0);
  assert_int_equal(safetensors_writer_set_metadata(w, "format", "pt", &err), 0);
  assert_int_equal(safetensors_writer_set_metadata(w, "step", "1", &err), 0);
  assert_int_equal(safetensors_writer_set_metadata(w, "step", "10", &err), 0); /* replaces */
  const char *path = tmp_path("rt.safetensors");
  assert_int_equal(safetensors_writer_write(w, path, &err), 0);

  char *header;
  size_t header_bytes;
  uint64_t offsets[9], total;
  assert_int_equal(safetensors_writer_layout(w, &header, &header_bytes, offsets, &total, &err), 0);
  assert_int_equal(header_bytes % 8, 0);
  size_t file_bytes;
  unsigned char *file = read_whole(path, &file_bytes);
  assert_int_equal(file_bytes, total);
  assert_memory_equal(file, header, header_bytes); /* layout describes exactly what was written */
  assert_memory_equal(file + offsets[0], f32, sizeof f32);
  assert_memory_equal(file + offsets[3], i64, sizeof i64);
  assert_int_equal(offsets[3] % 8, 0);
  assert_int_equal(offsets[5] % 8, 0);
  assert_int_equal(offsets[2] % 4, 0);
  free(file);
  free(header);
  safetensors_writer_free(w);

  struct stat st;
  assert_int_not_equal(stat(tmp_path("rt.safetensors.tmp"), &st), 0); /* no temp file left */

  SafetensorsReader *r;
  assert_int_equal(safetensors_open(&r, path, &err), 0);
  assert_string_equal(safetensors_path(r), path);
  assert_int_equal(safetensors_num_tensors(r), 9);
  assert_string_equal(safetensors_tensor_at(r, 0)->name, "layers.0.w"); /* header order */
  assert_string_equal(safetensors_tensor_at(r, 8)->name, "we\"ird\\name\n");
  assert_null(safetensors_tensor_at(r, 9));
  assert_int_equal(safetensors_num_metadata(r), 2);
  assert_string_equal(safetensors_metadata_get(r, "format"), "pt");
  assert_string_equal(safetensors_metadata_get(r, "step"), "10");
  assert_null(safetensors_metadata_get(r, "missing"));
  const char *k, *v;
  safetensors_metadata_at(r, 0, &k, &v);
  assert_string_equal(k, "format");
  assert_string_equal(v, "pt");

  const SafetensorsTensorInfo *t = safetensors_find(r, "ints");
  assert_non_null(t);
  assert_int_equal(t->dtype, ST_I32);
  assert_int_equal(t->ndim, 2);
  assert_int_equal(t->shape[0], 2);
  assert_int_equal(t->numel, 4);
  assert_int_equal(t->nbytes, 16);
  assert_null(safetensors_find(r, "nope"));
  t = safetensors_find(r, "scalar");
  assert_int_equal(t->ndim, 0);
  assert_int_equal(t->numel, 1);
  t = safetensors_find(r, "empty");
  assert_int_equal(t->numel, 0);
  assert_int_equal(t->data_begin, t->data_end);

  float f32_back[6];
  assert_int_equal(safetensors_read(r, "layers.0.w", ST_F32, f32_back, sizeof f32_back, &err), 0);
  assert_memory_equal(f32_back, f32, sizeof f32);
  int32_t i32_back[4];
  assert_int_equal(safetensors_read(r, "ints", ST_I32, i32_back, sizeof i32_back, &err), 0);
  assert_memory_equal(i32_back, i32, sizeof i32);
  int64_t i64_back[3];
  assert_int_equal(safetensors_read(r, "longs", ST_I64, i64_back, sizeof i64_back, &err), 0);
  assert_memory_equal(i64_back, i64, sizeof i64);
  uint8_t u8_back = 0;
  assert_int_equal(safetensors_read(r, "scalar", ST_U8, &u8_back, 1, &err), 0);
  assert_int_equal(u8_back, 42);
  assert_int_equal(safetensors_read(r, "empty", ST_F32, NULL, 0, &err), 0);
  float one = 0;
  assert_int_equal(safetensors_read(r, "we\"ird\\name\n", ST_F32, &one, sizeof one, &err), 0);
  assert_true(one == f32[0]);

  /* A contiguous range: row 1 of the [2, 3] tensor. */
  float row[3];
  assert_int_equal(safetensors_read_range(r, "layers.0.w", ST_F32, 3, 3, row, sizeof row, &err), 0);
  assert_memory_equal(row, f32 + 3, sizeof row);
  assert_int_equal(safetensors_read_range(r, "layers.0.w", ST_F32, 4, 3, row, sizeof row, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "layers.0.w"));

  /* Conversions to float32. */
  float conv[4];
  assert_int_equal(safetensors_read_f32(r, "bf16", 1, (int64_t[]){3}, conv, &err), 0);
  assert_true(conv[0] == 1.0f && conv[1] == -2.0f && conv[2] == 0.0f);
  assert_int_equal(safetensors_read_f32(r, "half", 1, (int64_t[]){4}, conv, &err), 0);
  assert_true(conv[0] == 1.0f && conv[1] == -2.0f && conv[2] == 0x1p-24f && conv[3] == 65504.0f);
  assert_int_equal(safetensors_read_f32(r, "doubles", 1, (int64_t[]){2}, conv, &err), 0);
  assert_true(conv[0] == (float)f64[0]);
  assert_int_equal(safetensors_read_f32(r, "layers.0.w", 2, (int64_t[]){2, 3}, f32_back, &err), 0);
  assert_memory_equal(f32_back, f32, sizeof f32);

  /* Misuse is reported, naming the file and tensor. */
  assert_int_equal(safetensors_read_f32(r, "layers.0.w", 2, (int64_t[]){3, 2}, f32_back, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "layers.0.w"));
  assert_non_null(strstr(err.msg, "[2, 3]"));
  assert_non_null(strstr(err.msg, path));
  assert_int_equal(safetensors_read_f32(r, "ints", 2, (int64_t[]){2, 2}, f32_back, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "I32"));
  assert_int_equal(safetensors_read(r, "ints", ST_F32, f32_back, sizeof f32_back, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "expected F32"));
  assert_int_equal(safetensors_read(r, "ints", ST_I32, i32_back, 8, &err), ERR_ARG);
  assert_int_equal(safetensors_read(r, "missing", ST_F32, f32_back, sizeof f32_back, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "missing"));
  safetensors_close(r);
}

static void test_empty_file_and_rewrite(void **state) {
  (void)state;
  Error err = {0};
  const char *path = tmp_path("empty.safetensors");
  SafetensorsWriter *w = safetensors_writer_new();
  assert_int_equal(safetensors_writer_write(w, path, &err), 0);
  SafetensorsReader *r;
  assert_int_equal(safetensors_open(&r, path, &err), 0);
  assert_int_equal(safetensors_num_tensors(r), 0);
  assert_int_equal(safetensors_num_metadata(r), 0);
  safetensors_close(r);

  /* Rewriting replaces the old file in one step. */
  float x = 5.0f;
  assert_int_equal(safetensors_writer_add_f32(w, "x", 1, (int[]){1}, &x, &err), 0);
  assert_int_equal(safetensors_writer_write(w, path, &err), 0);
  assert_int_equal(safetensors_open(&r, path, &err), 0);
  assert_int_equal(safetensors_num_tensors(r), 1);
  safetensors_close(r);
  safetensors_writer_free(w);
}

static void test_writer_rejects_misuse(void **state) {
  (void)state;
  Error err = {0};
  float x[4] = {0};
  SafetensorsWriter *w = safetensors_writer_new();
  assert_int_equal(safetensors_writer_add_f32(w, "a", 1, (int[]){4}, x, &err), 0);
  assert_int_equal(safetensors_writer_add_f32(w, "a", 1, (int[]){4}, x, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "'a' added twice"));
  assert_int_equal(safetensors_writer_add_f32(w, "", 1, (int[]){4}, x, &err), ERR_ARG);
  assert_int_equal(safetensors_writer_add_f32(w, "__metadata__", 1, (int[]){4}, x, &err), ERR_ARG);
  assert_int_equal(safetensors_writer_add_f32(w, "neg", 2, (int[]){4, -1}, x, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "[4, -1]"));
  assert_int_equal(safetensors_writer_add(w, "huge", ST_F64, 2, (int64_t[]){INT64_MAX, 4}, x, &err), ERR_ARG);
  assert_int_equal(safetensors_writer_add_f32(w, "deep", 9, (int[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, x, &err), ERR_ARG);
  assert_int_equal(safetensors_writer_add_f32(w, "nodata", 1, (int[]){4}, NULL, &err), 0);
  const char *path = tmp_path("misuse.safetensors");
  assert_int_equal(safetensors_writer_write(w, path, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "'nodata' has no data"));
  safetensors_writer_free(w);

  w = safetensors_writer_new();
  assert_int_equal(safetensors_writer_write(w, "/nonexistent-dir/x.safetensors", &err), ERR_IO);
  assert_non_null(strstr(err.msg, "/nonexistent-dir/x.safetensors.tmp"));
  safetensors_writer_free(w);
}

/* ---- damaged files ---- */

static void test_truncated_file(void **state) {
  (void)state;
  Error err = {0};
  float data[64];
  for (int i = 0; i < 64; i++) data[i] = (float)i;
  SafetensorsWriter *w = safetensors_writer_new();
  assert_int_equal(safetensors_writer_add_f32(w, "a", 2, (int[]){4, 8}, data, &err), 0);
  assert_int_equal(safetensors_writer_add_f32(w, "b", 1, (int[]){32}, data + 32, &err), 0);
  const char *path = tmp_path("full.safetensors");
  assert_int_equal(safetensors_writer_write(w, path, &err), 0);
  safetensors_writer_free(w);
  size_t n;
  unsigned char *bytes = read_whole(path, &n);
  const char *cut = tmp_path("cut.safetensors");
  /* Every proper prefix is rejected; none crashes. */
  for (size_t len = 0; len < n; len++) {
    write_bytes(cut, bytes, len);
    SafetensorsReader *r;
    int rc = safetensors_open(&r, cut, &err);
    if (rc == 0) fail_msg("a %zu-byte prefix of a %zu-byte file was accepted", len, n);
    assert_int_equal(rc, ERR_FORMAT);
    assert_non_null(strstr(err.msg, cut));
  }
  write_bytes(cut, bytes, 5);
  expect_open_fails(cut, ERR_FORMAT, "5 bytes", "too short", NULL);
  write_bytes(cut, bytes, 20);
  expect_open_fails(cut, ERR_FORMAT, "header length says", "truncated", NULL);
  write_bytes(cut, bytes, n - 4); /* the last tensor loses its tail */
  expect_open_fails(cut, ERR_FORMAT, "tensor 'b'", "past the end of the data section", NULL);
  /* Extra bytes after the last tensor are also corruption. */
  unsigned char *longer = calloc(n + 4, 1);
  memcpy(longer, bytes, n);
  write_bytes(cut, longer, n + 4);
  expect_open_fails(cut, ERR_FORMAT, "trailing", NULL);
  free(longer);
  free(bytes);
  expect_open_fails(tmp_path("does-not-exist.safetensors"), ERR_IO, "cannot open", "does-not-exist", NULL);
}

static void test_corrupt_header_length(void **state) {
  (void)state;
  const char *path = tmp_path("len.safetensors");
  const char *json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  size_t jl = strlen(json);
  unsigned char buf[256] = {0};
  memcpy(buf + 8, json, jl);
  uint64_t lens[] = {UINT64_MAX, (uint64_t)1 << 40, SAFETENSORS_MAX_HEADER_BYTES + 1ull, jl + 100, 0, 1, jl - 1};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    for (int b = 0; b < 8; b++) buf[b] = (unsigned char)(lens[i] >> (8 * b));
    write_bytes(path, buf, 8 + jl + 8);
    SafetensorsReader *r;
    Error err = {0};
    int rc = safetensors_open(&r, path, &err);
    if (rc == 0) fail_msg("header length %llu was accepted", (unsigned long long)lens[i]);
    assert_int_equal(rc, ERR_FORMAT);
    assert_non_null(strstr(err.msg, path));
  }
  for (int b = 0; b < 8; b++) buf[b] = 0xff;
  write_bytes(path, buf, 8 + jl + 8);
  expect_open_fails(path, ERR_FORMAT, "exceeds", "corrupt", NULL);
}

static void test_bad_json(void **state) {
  (void)state;
  const char *path = tmp_path("json.safetensors");
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8);
  expect_open_fails(path, ERR_FORMAT, "does not parse", NULL);
  write_raw(path, "[1, 2, 3]                      ", 0);
  expect_open_fails(path, ERR_FORMAT, "does not start with '{'", NULL);
  write_raw(path, "{} x", 0);
  expect_open_fails(path, ERR_FORMAT, "unexpected bytes after the JSON header", NULL);
  write_raw(path, "{\"a\":5}", 0);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "expected an object", NULL);
  write_raw(path, "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "dtype", NULL);
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "shape", NULL);
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "data_offsets", NULL);
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "data_offsets", NULL);
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0.5,8]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "data_offsets", NULL);
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "shape[0]", NULL);
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "shape[0]", NULL);
  write_raw(path, "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "unknown dtype \"F33\"", NULL);
  write_raw(path, "{\"__metadata__\":{\"k\":3}}", 0);
  expect_open_fails(path, ERR_FORMAT, "metadata entry 'k'", NULL);
  write_raw(path, "{\"__metadata__\":[]}", 0);
  expect_open_fails(path, ERR_FORMAT, "__metadata__", NULL);
  write_raw(path,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            8);
  expect_open_fails(path, ERR_FORMAT, "'a' appears twice", NULL);
  write_raw(path, "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  expect_open_fails(path, ERR_FORMAT, "empty name", NULL);
  /* A header with a NUL byte inside. */
  unsigned char raw[8 + 16] = {16, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, ' ', ' ', ' ', ' ', ' ',
                               ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
  write_bytes(path, raw, sizeof raw);
  expect_open_fails(path, ERR_FORMAT, "NUL", NULL);
  /* Header padding with spaces and a trailing newline is fine. */
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}   \n ", 8);
  SafetensorsReader *r;
  Error err = {0};
  assert_int_equal(safetensors_open(&r, path, &err), 0);
  safetensors_close(r);
}

static void test_offsets_out_of_range(void **state) {
  (void)state;
  const char *path = tmp_path("range.safetensors");
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "[0, 16]", "past the end of the data section (8 bytes)",
                    NULL);
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1000000000000,1000000000008]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "past the end", NULL);
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "end before they begin", NULL);
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'a'", "data_offsets", NULL);
  /* Overlap, gap, and a data section not fully covered. */
  write_raw(path,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
            12);
  expect_open_fails(path, ERR_FORMAT, "tensor 'b'", "overlaps tensor 'a'", NULL);
  write_raw(path,
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
            12);
  expect_open_fails(path, ERR_FORMAT, "tensor 'b'", "starts at byte 8", "'a' ends at 4", NULL);
  write_raw(path, "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'b'", "starts at byte 4", NULL);
  write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "data section has 8 bytes", "cover 4", NULL);
  /* Order in the header does not matter as long as the data is tiled. */
  write_raw(path,
            "{\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[4,12]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
            12);
  SafetensorsReader *r;
  Error err = {0};
  assert_int_equal(safetensors_open(&r, path, &err), 0);
  int64_t b;
  assert_int_equal(safetensors_read(r, "b", ST_I64, &b, sizeof b, &err), 0);
  assert_int_equal(b, 0x0b0a090807060504LL); /* write_raw fills byte i with i */
  safetensors_close(r);
}

static void test_dtype_shape_mismatch(void **state) {
  (void)state;
  const char *path = tmp_path("mismatch.safetensors");
  write_raw(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 12);
  expect_open_fails(path, ERR_FORMAT, "tensor 'w'", "F32", "[2, 2]", "need 16 bytes", "span 12", NULL);
  write_raw(path, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16);
  expect_open_fails(path, ERR_FORMAT, "tensor 'w'", "BF16", "need 8 bytes", NULL);
  write_raw(path, "{\"w\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,4]}}", 4);
  expect_open_fails(path, ERR_FORMAT, "tensor 'w'", "need 8 bytes", NULL);
  write_raw(path,
            "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,8]}}", 8);
  expect_open_fails(path, ERR_FORMAT, "tensor 'w'", "overflows", NULL);
}

/* Random byte flips in a valid file's header: each variant must either open
 * and read cleanly or be rejected; the sanitizer build catches anything else. */
static void test_random_corruption_never_crashes(void **state) {
  (void)state;
  Error err = {0};
  float data[24];
  for (int i = 0; i < 24; i++) data[i] = (float)i;
  SafetensorsWriter *w = safetensors_writer_new();
  assert_int_equal(safetensors_writer_add_f32(w, "x", 2, (int[]){2, 6}, data, &err), 0);
  assert_int_equal(safetensors_writer_add(w, "y", ST_I32, 1, (int64_t[]){12}, data + 12, &err), 0);
  assert_int_equal(safetensors_writer_set_metadata(w, "k", "v", &err), 0);
  const char *path = tmp_path("fuzz-src.safetensors");
  assert_int_equal(safetensors_writer_write(w, path, &err), 0);
  safetensors_writer_free(w);
  size_t n;
  unsigned char *orig = read_whole(path, &n);
  unsigned char *buf = malloc(n);
  const char *fuzz = tmp_path("fuzz.safetensors");
  int rejected = 0;
  Rng rng = rng_make(7, 1);
  for (int trial = 0; trial < 400; trial++) {
    memcpy(buf, orig, n);
    int flips = 1 + (int)rng_next_below(&rng, 3);
    for (int f = 0; f < flips; f++) {
      size_t at = (size_t)rng_next_below(&rng, n < 160 ? n : 160);
      buf[at] = (unsigned char)rng_next_below(&rng, 256);
    }
    write_bytes(fuzz, buf, n);
    SafetensorsReader *r;
    if (safetensors_open(&r, fuzz, &err) != 0) {
      assert_true(strlen(err.msg) > 0);
      rejected++;
      continue;
    }
    for (int i = 0; i < safetensors_num_tensors(r); i++) {
      const SafetensorsTensorInfo *t = safetensors_tensor_at(r, i);
      void *dst = malloc(t->nbytes ? t->nbytes : 1);
      assert_int_equal(safetensors_read(r, t->name, t->dtype, dst, t->nbytes, &err), 0);
      free(dst);
    }
    safetensors_close(r);
  }
  assert_true(rejected > 100); /* most damage is detected */
  free(buf);
  free(orig);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_empty_file_and_rewrite),
      cmocka_unit_test(test_writer_rejects_misuse),
      cmocka_unit_test(test_truncated_file),
      cmocka_unit_test(test_corrupt_header_length),
      cmocka_unit_test(test_bad_json),
      cmocka_unit_test(test_offsets_out_of_range),
      cmocka_unit_test(test_dtype_shape_mismatch),
      cmocka_unit_test(test_random_corruption_never_crashes),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
