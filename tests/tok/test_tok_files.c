/* Whole-file tokenization: train + save + encode on two small files, with the
 * train/val cut at a line boundary, an end-of-text id before every part, the
 * decoded streams equal to the file contents, the written tokenizer.json
 * encoding the files identically, and clear errors for bad arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tok/tok_test_util.h"

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/test_tok_files_XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(const char *name) {
  static char buf[8][400];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
  fclose(f);
}

/* Decodes ids into text, with every end-of-text id written as "|". */
static char *decode_marked(const Tokenizer *tok, const TokIds *ids) {
  size_t total = 0;
  char *out = malloc(1);
  for (size_t i = 0; i < ids->n; i++) {
    size_t n;
    const uint8_t *b = tok_token_bytes(tok, ids->ids[i], &n);
    if (ids->ids[i] == tok_eot_id(tok)) b = (const uint8_t *)"|", n = 1;
    assert_non_null(b);
    out = realloc(out, total + n + 1);
    memcpy(out + total, b, n);
    total += n;
  }
  out[total] = '\0';
  return out;
}

static void test_train_and_encode_files(void **state) {
  (void)state;
  /* File one is 100 bytes of 10-byte lines: a 0.25 val fraction cuts at byte
   * 75, moved to just past the next newline (byte 80). File two has no
   * newline after its cut, so it is cut exactly there. */
  char one[101] = {0};
  for (int i = 0; i < 10; i++) memcpy(one + 10 * i, i % 2 ? "the cats.\n" : "then sat.\n", 10);
  const char *two = "there the then theme thesis";
  write_file(tmp_path("one.txt"), one);
  write_file(tmp_path("two.txt"), two);
  const char *inputs[] = {tmp_path("one.txt"), tmp_path("two.txt")};
  const char *out_dir = tmp_path("out/nested");
  Tokenizer *tok;
  TokIds train = {0}, val = {0};
  TOK_OK(tok_train_and_encode_files(inputs, 2, 270, 0.25, out_dir, &tok, &train, &val, err));
  assert_int_equal(tok_vocab_size(tok), 270);
  char *t = decode_marked(tok, &train), *v = decode_marked(tok, &val);
  char want_train[200], want_val[200];
  size_t two_cut = (size_t)(0.75 * (double)strlen(two));
  snprintf(want_train, sizeof want_train, "|%.80s|%.*s", one, (int)two_cut, two);
  snprintf(want_val, sizeof want_val, "|%s|%s", one + 80, two + two_cut);
  assert_string_equal(t, want_train);
  assert_string_equal(v, want_val);
  assert_true(train.n < strlen(want_train)); /* merges applied */
  free(t);
  free(v);

  /* The saved tokenizer encodes the same files to the same ids. */
  char path[600];
  snprintf(path, sizeof path, "%s/tokenizer.json", out_dir);
  Tokenizer *loaded;
  TOK_OK(tok_load_json(&loaded, path, err));
  TokIds train2 = {0}, val2 = {0};
  TOK_OK(tok_encode_files(loaded, inputs, 2, 0.25, &train2, &val2, err));
  assert_int_equal(train2.n, train.n);
  assert_int_equal(val2.n, val.n);
  assert_memory_equal(train2.ids, train.ids, train.n * sizeof *train.ids);
  assert_memory_equal(val2.ids, val.ids, val.n * sizeof *val.ids);
  tok_ids_free(&train2);
  tok_ids_free(&val2);

  /* val_fraction 0: everything is train, val stays empty. */
  TOK_OK(tok_encode_files(loaded, inputs, 2, 0.0, &train2, &val2, err));
  assert_int_equal(val2.n, 0);
  t = decode_marked(loaded, &train2);
  snprintf(want_train, sizeof want_train, "|%s|%s", one, two);
  assert_string_equal(t, want_train);
  free(t);
  tok_ids_free(&train2);
  tok_ids_free(&val2);
  tok_free(loaded);
  tok_ids_free(&train);
  tok_ids_free(&val);
  tok_free(tok);
}

static void test_bad_arguments(void **state) {
  (void)state;
  write_file(tmp_path("ok.txt"), "some text\n");
  const char *missing[] = {tmp_path("ok.txt"), tmp_path("absent.txt")};
  TokIds train = {0}, val = {0};
  Error err = {0};
  assert_int_equal(tok_train_and_encode_files(missing, 2, 300, 0.1, tmp_path("o"), NULL, &train, &val, &err), ERR_IO);
  assert_non_null(strstr(err.msg, "absent.txt"));
  assert_int_equal(tok_train_and_encode_files(missing, 1, 300, 1.0, tmp_path("o"), NULL, &train, &val, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "val fraction"));
  assert_int_equal(tok_train_and_encode_files(missing, 1, 100, 0.1, tmp_path("o"), NULL, &train, &val, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "vocab size"));
  assert_int_equal(tok_train_and_encode_files(missing, 0, 300, 0.1, tmp_path("o"), NULL, &train, &val, &err), ERR_ARG);
  /* out_dir below a regular file cannot be made. */
  assert_int_equal(
      tok_train_and_encode_files(missing, 1, 300, 0.1, tmp_path("ok.txt/sub"), NULL, &train, &val, &err), ERR_IO);
  assert_non_null(strstr(err.msg, "ok.txt"));
  tok_ids_free(&train);
  tok_ids_free(&val);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_train_and_encode_files),
      cmocka_unit_test(test_bad_arguments),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
