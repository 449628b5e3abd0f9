/* IDX reader (src/base/idx.h): malformed files the test writes (gzip'd and
 * plain) are refused with an error naming the file and the field — bad
 * magic, wrong element type or dimension count, zero dimension, truncated
 * data, trailing bytes, image/label count mismatch, label out of range,
 * missing file — a well-formed one reads back exactly; then the real
 * Fashion-MNIST files (60000 + 10000 images, 28 x 28, balanced classes).
 * Exit 77 (SKIP) after the other checks when the dataset is not installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "base/idx.h"

static char tmp_dir[] = "/tmp/fivefold-idx-test.XXXXXX";

static const char *tmp_path(const char *name) {
  static char buf[8][256];
  static int next;
  char *p = buf[next++ % 8];
  snprintf(p, 256, "%s/%s", tmp_dir, name);
  return p;
}

/* An IDX file: magic (type, ndim), dims, then `data_bytes` bytes i % 251,
 * gzip'd or plain. */
static const char *write_idx(const char *name, int gz, int type, int ndim, const uint32_t *dims,
                             size_t data_bytes, const uint8_t *data) {
  const char *path = tmp_path(name);
  size_t n = 4 + 4 * (size_t)ndim + data_bytes;
  uint8_t *buf = malloc(n);
  assert_non_null(buf);
  buf[0] = 0, buf[1] = 0, buf[2] = (uint8_t)type, buf[3] = (uint8_t)ndim;
  for (int d = 0; d < ndim; d++)
    for (int b = 0; b < 4; b++) buf[4 + 4 * d + b] = (uint8_t)(dims[d] >> (24 - 8 * b));
  for (size_t i = 0; i < data_bytes; i++) buf[4 + 4 * ndim + i] = data ? data[i] : (uint8_t)(i % 251);
  if (gz) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, buf, (unsigned)n), (int)n);
    gzclose(f);
  } else {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
  }
  free(buf);
  return path;
}

static void expect_error(int rc, const Error *err, int code, const char *path, const char *needle) {
  if (rc != code || !strstr(err->msg, path) || !strstr(err->msg, needle))
    fail_msg("expected %s mentioning '%s' and '%s', got %s: %s", error_code_name(code), path, needle,
             error_code_name(rc), err->msg);
}

static void test_reads_well_formed(void **state) {
  (void)state;
  uint32_t dims[3] = {5, 3, 4};
  for (int gz = 0; gz < 2; gz++) {
    const char *path = write_idx(gz ? "ok.gz" : "ok.raw", gz, 0x08, 3, dims, 60, NULL);
    IdxArray a;
    Error err = {0};
    assert_int_equal(idx_read_u8(path, 3, &a, &err), 0);
    assert_int_equal(a.ndim, 3);
    assert_int_equal(a.dims[0], 5), assert_int_equal(a.dims[1], 3), assert_int_equal(a.dims[2], 4);
    assert_int_equal(a.size, 60);
    for (size_t i = 0; i < 60; i++) assert_int_equal(a.data[i], i % 251);
    idx_free(&a);
  }
}

static void test_rejects_malformed(void **state) {
  (void)state;
  uint32_t dims[3] = {5, 3, 4}, zero[3] = {5, 0, 4};
  IdxArray a;
  Error err = {0};
  const char *p = write_idx("type.gz", 1, 0x0D, 3, dims, 60, NULL);
  expect_error(idx_read_u8(p, 3, &a, &err), &err, ERR_FORMAT, p, "expected 0x08");
  p = write_idx("ndim.gz", 1, 0x08, 1, dims, 5, NULL);
  expect_error(idx_read_u8(p, 3, &a, &err), &err, ERR_FORMAT, p, "1 dimensions, expected 3");
  p = write_idx("zero.gz", 1, 0x08, 3, zero, 0, NULL);
  expect_error(idx_read_u8(p, 3, &a, &err), &err, ERR_FORMAT, p, "dimension 1 is 0");
  p = write_idx("short.gz", 1, 0x08, 3, dims, 59, NULL);
  expect_error(idx_read_u8(p, 3, &a, &err), &err, ERR_FORMAT, p, "truncated: 59 data bytes, the dimensions need 60");
  p = write_idx("long.gz", 1, 0x08, 3, dims, 61, NULL);
  expect_error(idx_read_u8(p, 3, &a, &err), &err, ERR_FORMAT, p, "trailing bytes");
  /* Bad magic: the first two bytes must be zero. */
  p = tmp_path("magic.gz");
  gzFile f = gzopen(p, "wb");
  assert_non_null(f);
  gzwrite(f, "\x1f\x08\x08\x03\0\0\0\1", 8);
  gzclose(f);
  expect_error(idx_read_u8(p, 3, &a, &err), &err, ERR_FORMAT, p, "magic number");
  /* Cut inside the header. */
  p = tmp_path("head.gz");
  f = gzopen(p, "wb");
  assert_non_null(f);
  gzwrite(f, "\0\0\x08\x03\0\0\0\5\0\0", 10);
  gzclose(f);
  expect_error(idx_read_u8(p, 3, &a, &err), &err, ERR_FORMAT, p, "inside the dimensions");
  p = tmp_path("absent.gz");
  expect_error(idx_read_u8(p, 3, &a, &err), &err, ERR_IO, p, "cannot open");
  assert_null(a.data);
}

static void test_image_set_checks(void **state) {
  (void)state;
  uint32_t img_dims[3] = {4, 2, 2}, lab4[1] = {4}, lab3[1] = {3};
  const char *images = write_idx("set-images.gz", 1, 0x08, 3, img_dims, 16, NULL);
  uint8_t good[4] = {0, 9, 3, 1}, bad[4] = {0, 10, 3, 1};
  const char *labels = write_idx("set-labels.gz", 1, 0x08, 1, lab4, 4, good);
  IdxImageSet s;
  Error err = {0};
  assert_int_equal(idx_read_image_set(images, labels, 10, &s, &err), 0);
  assert_int_equal(s.count, 4), assert_int_equal(s.rows, 2), assert_int_equal(s.cols, 2);
  assert_memory_equal(s.labels, good, 4);
  idx_image_set_free(&s);
  const char *fewer = write_idx("set-labels3.gz", 1, 0x08, 1, lab3, 3, good);
  expect_error(idx_read_image_set(images, fewer, 10, &s, &err), &err, ERR_FORMAT, fewer, "3 labels, expected 4");
  assert_non_null(strstr(err.msg, images));
  const char *out_of_range = write_idx("set-labels-bad.gz", 1, 0x08, 1, lab4, 4, bad);
  expect_error(idx_read_image_set(images, out_of_range, 10, &s, &err), &err, ERR_FORMAT, out_of_range,
               "label 1 is 10, expected below 10");
  /* Files swapped: the labels file is not an images file. */
  expect_error(idx_read_image_set(labels, images, 10, &s, &err), &err, ERR_FORMAT, labels, "expected 3");
  assert_null(s.pixels);
}

static int dataset_present;

static void test_fashion_mnist(void **state) {
  (void)state;
  const char *splits[2] = {"train", "t10k"};
  const size_t counts[2] = {60000, 10000};
  for (int i = 0; i < 2; i++) {
    IdxImageSet s;
    Error err = {0};
    if (fashion_mnist_read(NULL, splits[i], &s, &err)) fail_msg("%s", err.msg);
    assert_int_equal(s.count, counts[i]);
    assert_int_equal(s.rows, 28), assert_int_equal(s.cols, 28);
    size_t per_class[FASHION_MNIST_CLASSES] = {0}, lit = 0;
    for (size_t j = 0; j < s.count; j++) per_class[s.labels[j]]++;
    for (int c = 0; c < FASHION_MNIST_CLASSES; c++) assert_int_equal(per_class[c], counts[i] / 10);
    for (size_t j = 0; j < (size_t)28 * 28; j++) lit += s.pixels[j] > 0;
    assert_true(lit > 50); /* the first image is not blank */
    idx_image_set_free(&s);
  }
  IdxImageSet s;
  Error err = {0};
  assert_int_equal(fashion_mnist_read(NULL, "valid", &s, &err), ERR_ARG);
  assert_int_equal(fashion_mnist_read("/nonexistent", "train", &s, &err), ERR_IO);
  assert_non_null(strstr(err.msg, "/nonexistent/train-images-idx3-ubyte.gz"));
}

static void remove_tmp(void) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmp_dir);
}

int main(void) {
  if (!mkdtemp(tmp_dir)) {
    perror("mkdtemp");
    return 1;
  }
  atexit(remove_tmp);
  dataset_present = access(FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) == 0 &&
                    access(FASHION_MNIST_DIR "/t10k-labels-idx1-ubyte.gz", R_OK) == 0;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reads_well_formed),
      cmocka_unit_test(test_rejects_malformed),
      cmocka_unit_test(test_image_set_checks),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  if (failed) return failed;
  if (!dataset_present) {
    printf("SKIP: Fashion-MNIST is not installed under %s (Debian package dataset-fashion-mnist)\n",
           FASHION_MNIST_DIR);
    return 77;
  }
  const struct CMUnitTest real[] = {cmocka_unit_test(test_fashion_mnist)};
  return cmocka_run_group_tests(real, NULL, NULL);
}
