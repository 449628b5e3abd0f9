/* .npy reader (src/base/npy.h): tiny arrays the test writes (float64,
 * float32 and bytes; format versions 1.0 and 2.0) read back exactly;
 * malformed files are refused naming the file and what was wrong (bad
 * magic, version, Fortran order, big-endian or unknown type, unknown or
 * missing header keys, truncated header or data, trailing bytes), and
 * every prefix of a valid file is refused; then scikit-image's real
 * lfw_subset.npy (200 x 25 x 25, values 0..1). Exit 77 (SKIP) after the
 * other checks when that file is not installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/npy.h"

/* A .npy image of `header` (padded as NumPy pads it) and data bytes. */
static size_t make_npy(unsigned char *buf, int version, const char *header, const void *data, size_t data_bytes) {
  const size_t pre = version == 1 ? 10 : 12;
  size_t hl = strlen(header) + 1;
  while ((pre + hl) % 16) hl++;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)version, buf[7] = 0;
  if (version == 1) buf[8] = (unsigned char)hl, buf[9] = (unsigned char)(hl >> 8);
  else buf[8] = (unsigned char)hl, buf[9] = (unsigned char)(hl >> 8), buf[10] = 0, buf[11] = 0;
  memset(buf + pre, ' ', hl);
  memcpy(buf + pre, header, strlen(header));
  buf[pre + hl - 1] = '\n';
  memcpy(buf + pre + hl, data, data_bytes);
  return pre + hl + data_bytes;
}

static void test_valid(void **state) {
  (void)state;
  unsigned char buf[512];
  NpyArray a;
  Error err;
  const double d[6] = {0, 0.25, 0.5, 0.75, 1, 0.125};
  size_t n = make_npy(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", d, sizeof d);
  if (npy_decode_f32("d.npy", buf, n, &a, &err)) fail_msg("%s", err.msg);
  assert_int_equal(a.ndim, 2);
  assert_true(a.dims[0] == 2 && a.dims[1] == 3 && a.count == 6);
  for (int i = 0; i < 6; i++) assert_true(a.data[i] == (float)d[i]);
  npy_free(&a);
  const float f[2] = {1.5f, -2.0f};
  n = make_npy(buf, 2, "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,)}", f, sizeof f);
  if (npy_decode_f32("f.npy", buf, n, &a, &err)) fail_msg("%s", err.msg);
  assert_true(a.ndim == 1 && a.data[0] == 1.5f && a.data[1] == -2.0f);
  npy_free(&a);
  const unsigned char u[3] = {0, 128, 255};
  n = make_npy(buf, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 3), }", u, 3);
  if (npy_decode_f32("u.npy", buf, n, &a, &err)) fail_msg("%s", err.msg);
  assert_true(a.ndim == 3 && a.data[1] == 128.0f && a.data[2] == 255.0f);
  npy_free(&a);
}

static void expect_refused(const unsigned char *buf, size_t n, const char *what) {
  NpyArray a;
  Error err = {0};
  int rc = npy_decode_f32("bad.npy", buf, n, &a, &err);
  if (rc != ERR_FORMAT) fail_msg("rc %d, expected ERR_FORMAT for '%s' (%s)", rc, what, err.msg);
  if (!strstr(err.msg, "bad.npy") || !strstr(err.msg, what)) fail_msg("message '%s' lacks '%s'", err.msg, what);
  npy_free(&a);
}

static void test_malformed(void **state) {
  (void)state;
  unsigned char buf[512];
  const double d[2] = {0.5, 0.5};
  size_t n = make_npy(buf, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", d, sizeof d);
  unsigned char bad[512];
  memcpy(bad, buf, n);
  bad[1] = 'X';
  expect_refused(bad, n, "bad magic");
  memcpy(bad, buf, n);
  bad[6] = 9;
  expect_refused(bad, n, "format version 9");
  expect_refused(buf, n - 1, "truncated");
  memcpy(bad, buf, n), bad[n] = 0;
  expect_refused(bad, n + 1, "trailing");
  expect_refused(buf, 40, "truncated");
  /* Headers that must be refused, each with what the message must say. */
  static const char *const BAD_HEADERS[][2] = {
      {"{'descr': '<f8', 'fortran_order': True, 'shape': (2,), }", "fortran_order' is True"},
      {"{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", "unsupported element type '>f8'"},
      {"{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }", "unsupported element type"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'extra': 1}", "header key 'extra'"},
      {"{'descr': '<f8', 'shape': (2,), }", "lacks 'fortran_order'"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (2, x), }", "'shape'"},
      {"['descr']", "a dict"},
  };
  for (size_t i = 0; i < sizeof BAD_HEADERS / sizeof BAD_HEADERS[0]; i++)
    expect_refused(bad, make_npy(bad, 1, BAD_HEADERS[i][0], d, sizeof d), BAD_HEADERS[i][1]);
  for (size_t cut = 0; cut < n; cut++) {
    NpyArray a;
    Error err;
    if (npy_decode_f32("prefix.npy", buf, cut, &a, &err) != ERR_FORMAT) fail_msg("prefix of %zu bytes read", cut);
    npy_free(&a);
  }
  NpyArray a;
  Error err;
  assert_int_equal(npy_read_f32("/nonexistent/x.npy", &a, &err), ERR_IO);
  assert_non_null(strstr(err.msg, "/nonexistent/x.npy"));
}

static int real_file_missing;

static void test_real_lfw_subset(void **state) {
  (void)state;
  if (access(SKIMAGE_LFW_SUBSET, R_OK)) {
    print_message("SKIP (missing dependency: python3-skimage): %s is not installed\n", SKIMAGE_LFW_SUBSET);
    real_file_missing = 1;
    return;
  }
  NpyArray a;
  Error err;
  if (npy_read_f32(SKIMAGE_LFW_SUBSET, &a, &err)) fail_msg("%s", err.msg);
  assert_string_equal(a.descr, "<f8");
  assert_true(a.ndim == 3 && a.dims[0] == 200 && a.dims[1] == 25 && a.dims[2] == 25);
  float lo = 1, hi = 0;
  for (size_t i = 0; i < a.count; i++) lo = a.data[i] < lo ? a.data[i] : lo, hi = a.data[i] > hi ? a.data[i] : hi;
  assert_true(lo >= 0.0f && hi <= 1.0f && hi - lo > 0.9f);
  npy_free(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_real_lfw_subset),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  return rc ? rc : real_file_missing ? 77 : 0;
}
