/* The small shared helpers of base/: mkdir -p (nested, existing, a file in
 * the way), bounded whole-file reads (cap, non-regular files), JSON type
 * names, near-miss suggestions, and the command-line option parser (both
 * option forms, switches, optional values, lists, positional arguments and
 * the wording of its errors), and errno values as name and text in
 * messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/file_text.h"
#include "base/fs.h"
#include "base/json_util.h"
#include "base/near_miss.h"
#include "base/options.h"

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/test_helpers_XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_mkdir_p(void **state) {
  (void)state;
  char path[512];
  Error err = {0};
  snprintf(path, sizeof path, "%s/a/b/c", tmpdir);
  assert_int_equal(fs_mkdir_p(path, &err), ERR_OK);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(fs_mkdir_p(path, &err), ERR_OK); /* exists already: fine */
  snprintf(path, sizeof path, "%s/a/b/c/", tmpdir);
  assert_int_equal(fs_mkdir_p(path, &err), ERR_OK); /* trailing slash */
  snprintf(path, sizeof path, "%s/file", tmpdir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  assert_int_equal(fs_mkdir_p(path, &err), ERR_IO);
  assert_non_null(strstr(err.msg, "not a directory"));
  snprintf(path, sizeof path, "%s/file/below", tmpdir);
  assert_int_equal(fs_mkdir_p(path, &err), ERR_IO);
  assert_non_null(strstr(err.msg, "file/below"));
  assert_int_equal(fs_mkdir_p("", &err), ERR_ARG);
}

static void test_file_read_text(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/text", tmpdir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("hello, world", f);
  fclose(f);
  Error err = {0};
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(file_read_text(path, "greeting", 100, &text, &len, &err), ERR_OK);
  assert_int_equal(len, 12);
  assert_string_equal(text, "hello, world");
  free(text);
  assert_int_equal(file_read_text(path, "greeting", 11, &text, &len, &err), ERR_FORMAT);
  assert_null(text);
  assert_non_null(strstr(err.msg, "expected at most 11"));
  assert_int_equal(file_read_text(tmpdir, "greeting", 100, &text, &len, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "regular file"));
  assert_int_equal(file_read_text("/dev/zero", "greeting", 100, &text, &len, &err), ERR_FORMAT);
  snprintf(path, sizeof path, "%s/missing", tmpdir);
  assert_int_equal(file_read_text(path, "greeting", 100, &text, &len, &err), ERR_IO);
  assert_non_null(strstr(err.msg, "cannot open greeting"));
}

static void test_json_type_name(void **state) {
  (void)state;
  cJSON *root = cJSON_Parse("{\"n\": 1, \"s\": \"x\", \"b\": true, \"z\": null, \"a\": [], \"o\": {}}");
  assert_non_null(root);
  assert_string_equal(json_type_name(cJSON_GetObjectItem(root, "n")), "a number");
  assert_string_equal(json_type_name(cJSON_GetObjectItem(root, "s")), "a string");
  assert_string_equal(json_type_name(cJSON_GetObjectItem(root, "b")), "a boolean");
  assert_string_equal(json_type_name(cJSON_GetObjectItem(root, "z")), "null");
  assert_string_equal(json_type_name(cJSON_GetObjectItem(root, "a")), "an array");
  assert_string_equal(json_type_name(cJSON_GetObjectItem(root, "o")), "an object");
  assert_non_null(strstr(json_type_name(NULL), "missing"));
  cJSON_Delete(root);
}

static void test_near_miss(void **state) {
  (void)state;
  static const char *const names[] = {"--steps", "--seq-len", "--lr", "--micro-batch-size"};
  assert_int_equal(near_miss_distance("kitten", "sitting"), 3);
  assert_int_equal(near_miss_distance("", "abc"), 3);
  assert_string_equal(near_miss("--stpes", names, 4), "--steps");
  assert_string_equal(near_miss("--micro-batch", names, 4), "--micro-batch-size");
  assert_null(near_miss("--frobnicate", names, 4));
  assert_null(near_miss("--x", NULL, 0));
}

static const char *const KNOWN[] = {"--out", "--format", "--quiet", "--input", "--help"};

static void test_options_both_forms(void **state) {
  (void)state;
  char *argv[] = {"cmd", "--out", "dir", "--format=hf", "--quiet", "file", "--input", "a", "b", "--out=", NULL};
  int argc = 10;
  OptionParser op;
  Error err = {0};
  option_parser_init(&op, "cmd", argc, argv, KNOWN, 5);
  const char *v = NULL;
  assert_true(option_next(&op));
  assert_true(option_is(&op, "--out"));
  assert_int_equal(option_value(&op, &v, &err), ERR_OK);
  assert_string_equal(v, "dir");
  assert_true(option_next(&op));
  assert_true(option_is(&op, "--format"));
  assert_int_equal(option_value(&op, &v, &err), ERR_OK);
  assert_string_equal(v, "hf");
  assert_true(option_next(&op));
  assert_true(option_is(&op, "--quiet"));
  assert_int_equal(option_switch(&op, &err), ERR_OK);
  assert_true(option_next(&op));
  assert_true(option_is_positional(&op));
  assert_string_equal(op.arg, "file");
  assert_true(option_next(&op));
  assert_true(option_is(&op, "--input"));
  const char **list = NULL;
  int n = 0;
  option_values_until_option(&op, &list, &n);
  assert_int_equal(n, 2);
  assert_string_equal(list[1], "b");
  assert_true(option_next(&op));
  assert_true(option_is(&op, "--out"));
  assert_int_equal(option_value(&op, &v, &err), ERR_OK); /* "--out=" is an empty value, not a missing one */
  assert_string_equal(v, "");
  assert_false(option_next(&op));
}

static int is_digit_text(const char *s) { return s[0] >= '0' && s[0] <= '9'; }

static void test_options_errors(void **state) {
  (void)state;
  char *argv[] = {"cmd", "--fromat", "hf", "--quiet=1", "--out", "--format", "--resume", "7", "--resume", "x", NULL};
  OptionParser op;
  Error err = {0};
  option_parser_init(&op, "export", 10, argv, KNOWN, 5);
  assert_true(option_next(&op));
  assert_int_equal(option_unknown(&op, &err), ERR_ARG);
  assert_string_equal(err.msg, "unknown option '--fromat' (did you mean '--format'?; see 'fivefold export --help')");
  assert_true(option_next(&op));
  assert_int_equal(option_unknown(&op, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "unexpected argument 'hf'"));
  assert_true(option_next(&op));
  assert_int_equal(option_switch(&op, &err), ERR_ARG);
  assert_string_equal(err.msg, "--quiet takes no value (see 'fivefold export --help')");
  assert_true(option_next(&op));
  const char *v = NULL;
  assert_int_equal(option_value(&op, &v, &err), ERR_ARG); /* the next argument is an option */
  assert_string_equal(err.msg, "--out needs a value (see 'fivefold export --help')");
  assert_true(option_next(&op));
  assert_true(option_is(&op, "--format"));
  assert_true(option_next(&op));
  assert_string_equal(option_optional_value(&op, is_digit_text), "7");
  assert_true(option_next(&op));
  assert_null(option_optional_value(&op, is_digit_text)); /* "x" is not taken */
  assert_true(option_next(&op));
  assert_string_equal(op.arg, "x");
  assert_false(option_next(&op));
  char *last[] = {"cmd", "--out", NULL};
  option_parser_init(&op, "export", 2, last, KNOWN, 5);
  assert_true(option_next(&op));
  assert_int_equal(option_value(&op, &v, &err), ERR_ARG);
}

/* "ENOSPC: No space left on device": the name to search for and the text;
 * several in one message stay apart; a file reader's message carries it. */
static void test_errno_text(void **state) {
  (void)state;
  char both[400];
  snprintf(both, sizeof both, "%s | %s", error_errno_text(ENOSPC), error_errno_text(EROFS));
  assert_string_equal(both, "ENOSPC: No space left on device | EROFS: Read-only file system");
  assert_string_equal(error_errno_text(12345), "errno 12345: Unknown error 12345");
  char path[512];
  snprintf(path, sizeof path, "%s/no-such-file", tmpdir);
  Error err = {0};
  char *text = NULL;
  assert_int_equal(file_read_text(path, "greeting", 100, &text, NULL, &err), ERR_IO);
  if (!strstr(err.msg, path) || !strstr(err.msg, "ENOENT: No such file or directory"))
    fail_msg("expected the path and \"ENOENT: No such file or directory\" in: %s", err.msg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mkdir_p),          cmocka_unit_test(test_file_read_text),
      cmocka_unit_test(test_json_type_name),   cmocka_unit_test(test_near_miss),
      cmocka_unit_test(test_options_both_forms), cmocka_unit_test(test_options_errors),
      cmocka_unit_test(test_errno_text),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
