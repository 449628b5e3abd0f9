/* tokenizer.json: the GPT-2 byte <-> unicode mapping, save -> load giving
 * identical encodings (and a byte-identical second save), the shape of the
 * written file, loading hand-written GPT-2-style files (merges as pairs and
 * as strings, arbitrary ids with holes, added tokens), rejection of malformed
 * files with messages naming the file and field, and no crash on truncated
 * or mutated files. */
#include <cjson/cJSON.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/rng.h"
#include "tok/tok_test_util.h"

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/test_tok_json_XXXXXX");
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

static char *read_text(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  buf[n] = '\0';
  *len = (size_t)n;
  return buf;
}

static void assert_same_encoding(const Tokenizer *a, const Tokenizer *b, const void *text, size_t n, int flags) {
  TokIds x = tok_test_encode(a, text, n, flags), y = tok_test_encode(b, text, n, flags);
  assert_int_equal(x.n, y.n);
  if (x.n) assert_memory_equal(x.ids, y.ids, x.n * sizeof *x.ids);
  tok_ids_free(&x);
  tok_ids_free(&y);
}

static void test_byte_unicode_mapping(void **state) {
  (void)state;
  assert_int_equal(tok_byte_to_codepoint('!'), '!');
  assert_int_equal(tok_byte_to_codepoint(0), 0x100);
  assert_int_equal(tok_byte_to_codepoint('\n'), 0x10A); /* "Ċ" */
  assert_int_equal(tok_byte_to_codepoint(' '), 0x120);  /* "Ġ" */
  assert_int_equal(tok_byte_to_codepoint(0x7F), 0x121);
  assert_int_equal(tok_byte_to_codepoint(0xA0), 0x142);
  assert_int_equal(tok_byte_to_codepoint(0xAD), 0x143);
  assert_int_equal(tok_byte_to_codepoint(0xE9), 0xE9);
  for (int b = 0; b < 256; b++) assert_int_equal(tok_codepoint_to_byte(tok_byte_to_codepoint((uint8_t)b)), b);
  assert_int_equal(tok_codepoint_to_byte(' '), -1);
  assert_int_equal(tok_codepoint_to_byte(0x144), -1);
  assert_int_equal(tok_codepoint_to_byte(0x4E2D), -1);

  uint8_t all[256];
  for (int b = 0; b < 256; b++) all[b] = (uint8_t)b;
  char *text = tok_bytes_to_text(all, 256);
  uint8_t *back;
  size_t n;
  uint32_t bad;
  assert_int_equal(tok_text_to_bytes(text, &back, &n, &bad), 0);
  assert_int_equal(n, 256);
  assert_memory_equal(back, all, 256);
  free(back);
  free(text);
  assert_int_equal(tok_text_to_bytes("a b", &back, &n, &bad), -1);
  assert_int_equal(bad, ' ');
  assert_int_equal(tok_text_to_bytes("\xc4", &back, &n, &bad), -1); /* cut UTF-8 */
  assert_int_equal(bad, 0xFFFFFFFFu);
  assert_int_equal(tok_text_to_bytes("\xc0\xa1", &back, &n, &bad), -1); /* overlong */
}

static void test_save_load_round_trip(void **state) {
  (void)state;
  Tokenizer *tok = tok_test_train(tok_sample_text, 420);
  assert_int_equal(tok_vocab_size(tok), 420); /* the sample text has pairs enough */
  const char *p1 = tmp_path("a.json"), *p2 = tmp_path("b.json");
  TOK_OK(tok_save_json(tok, p1, err));
  Tokenizer *back;
  TOK_OK(tok_load_json(&back, p1, err));
  assert_int_equal(tok_vocab_size(back), tok_vocab_size(tok));
  assert_int_equal(tok_num_merges(back), tok_num_merges(tok));
  assert_int_equal(tok_eot_id(back), tok_eot_id(tok));
  for (int32_t id = 0; id < tok_vocab_size(tok); id++) {
    size_t n1, n2;
    const uint8_t *b1 = tok_token_bytes(tok, id, &n1), *b2 = tok_token_bytes(back, id, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
  }
  assert_same_encoding(tok, back, tok_sample_text, sizeof tok_sample_text - 1, 0);
  assert_same_encoding(tok, back, tok_sample_text, sizeof tok_sample_text - 1, TOK_ENCODE_SPECIAL);
  uint8_t noise[2000];
  for (size_t i = 0; i < sizeof noise; i++) noise[i] = (uint8_t)rng_u64(1, 2, i);
  assert_same_encoding(tok, back, noise, sizeof noise, 0);
  /* Writing the loaded tokenizer reproduces the file byte for byte. */
  TOK_OK(tok_save_json(back, p2, err));
  size_t l1, l2;
  char *t1 = read_text(p1, &l1), *t2 = read_text(p2, &l2);
  assert_int_equal(l1, l2);
  assert_memory_equal(t1, t2, l1);
  assert_int_equal(access(tmp_path("a.json.tmp"), F_OK), -1);
  free(t2);

  /* The file has the Hugging Face layout. */
  cJSON *root = cJSON_Parse(t1);
  assert_non_null(root);
  assert_string_equal(cJSON_GetObjectItem(root, "version")->valuestring, "1.0");
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(root, "normalizer")));
  cJSON *pre = cJSON_GetObjectItem(root, "pre_tokenizer");
  assert_string_equal(cJSON_GetObjectItem(pre, "type")->valuestring, "ByteLevel");
  assert_true(cJSON_IsFalse(cJSON_GetObjectItem(pre, "add_prefix_space")));
  assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "decoder"), "type")->valuestring, "ByteLevel");
  cJSON *added = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "added_tokens"), 0);
  assert_int_equal(cJSON_GetObjectItem(added, "id")->valueint, 419);
  assert_string_equal(cJSON_GetObjectItem(added, "content")->valuestring, TOK_EOT);
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(added, "special")));
  cJSON *model = cJSON_GetObjectItem(root, "model");
  assert_string_equal(cJSON_GetObjectItem(model, "type")->valuestring, "BPE");
  cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
  assert_int_equal(cJSON_GetArraySize(vocab), 420);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(vocab, "\xc4\xa0")->valueint, ' ');  /* "Ġ" */
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(vocab, "\xc4\x80")->valueint, 0);    /* "Ā" */
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(vocab, TOK_EOT)->valueint, 419);
  cJSON *merges = cJSON_GetObjectItem(model, "merges");
  assert_int_equal(cJSON_GetArraySize(merges), 420 - 257);
  int32_t l, r, x;
  tok_merge(tok, 0, &l, &r, &x);
  size_t nl, nr;
  const uint8_t *bl = tok_token_bytes(tok, l, &nl), *br = tok_token_bytes(tok, r, &nr);
  char *sl = tok_bytes_to_text(bl, nl), *sr = tok_bytes_to_text(br, nr), want[64];
  snprintf(want, sizeof want, "%s %s", sl, sr);
  assert_string_equal(cJSON_GetArrayItem(merges, 0)->valuestring, want);
  free(sl);
  free(sr);
  cJSON_Delete(root);
  free(t1);
  tok_free(back);
  tok_free(tok);
}

/* A GPT-2-style file written by hand: ids in no particular order with holes
 * (13 is a non-special added token, 18 and 19 are unused, 20 is
 * end-of-text, present in the vocab too), "Ġ" = space, "Ċ" = newline. */
#define HAND_MERGES_PAIRS                                                                              \
  "[[\"h\",\"e\"],[\"l\",\"l\"],[\"he\",\"ll\"],[\"hell\",\"o\"],[\"\xc4\xa0\",\"w\"],[\"o\",\"r\"]," \
  "[\"\xc4\xa0w\",\"or\"],[\"l\",\"d\"]]"
#define HAND_MERGES_STRINGS \
  "[\"h e\",\"l l\",\"he ll\",\"hell o\",\"\xc4\xa0 w\",\"o r\",\"\xc4\xa0w or\",\"l d\"]"
#define HAND_VOCAB                                                                                          \
  "{\"\xc4\xa0\": 0, \"o\": 1, \"e\": 2, \"w\": 3, \"r\": 4, \"h\": 5, \"d\": 6, \"l\": 7, \"he\": 8, "     \
  "\"ll\": 9, \"hell\": 10, \"hello\": 11, \"\xc4\xa0w\": 12, \"or\": 14, \"\xc4\xa0wor\": 15, \"ld\": 16, " \
  "\"\xc4\x8a\": 17, \"<|endoftext|>\": 20}"
#define HAND_ADDED                                                                                             \
  "[{\"id\": 20, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false," \
  " \"normalized\": false, \"special\": true},"                                                                \
  " {\"id\": 13, \"content\": \"<|x|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false,"       \
  " \"normalized\": true, \"special\": false}]"

static char *hand_json(const char *vocab, const char *merges) {
  static const char fmt[] =
      "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": %s,\n"
      " \"normalizer\": null,\n"
      " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
      "\"use_regex\": true},\n"
      " \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, "
      "\"use_regex\": true},\n"
      " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
      "\"use_regex\": true},\n"
      " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": "
      "null, \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false,\n"
      "  \"vocab\": %s,\n  \"merges\": %s}}\n";
  size_t n = sizeof fmt + strlen(HAND_ADDED) + strlen(vocab) + strlen(merges);
  char *s = malloc(n);
  snprintf(s, n, fmt, HAND_ADDED, vocab, merges);
  return s;
}

static void check_hand_tokenizer(const Tokenizer *tok) {
  assert_int_equal(tok_vocab_size(tok), 21);
  assert_int_equal(tok_num_merges(tok), 8);
  assert_int_equal(tok_eot_id(tok), 20);
  assert_int_equal(tok_added_id(tok, "<|x|>"), 13);
  assert_int_equal(tok_byte_id(tok, ' '), 0);
  assert_int_equal(tok_byte_id(tok, 'h'), 5);
  assert_int_equal(tok_byte_id(tok, '!'), -1);
  const char *text = "hello world\n";
  TokIds ids = tok_test_encode(tok, text, strlen(text), 0);
  int32_t want[] = {11, 15, 16, 17};
  assert_int_equal(ids.n, 4);
  assert_memory_equal(ids.ids, want, sizeof want);
  size_t len;
  uint8_t *back = tok_test_decode(tok, &ids, &len);
  assert_int_equal(len, strlen(text));
  assert_memory_equal(back, text, len);
  free(back);
  tok_ids_free(&ids);
  text = "hello<|endoftext|>hello<|x|>";
  ids = tok_test_encode(tok, text, strlen(text), TOK_ENCODE_SPECIAL);
  int32_t want2[] = {11, 20, 11, 13};
  assert_int_equal(ids.n, 4);
  assert_memory_equal(ids.ids, want2, sizeof want2);
  tok_ids_free(&ids);

  Error err = {0};
  TokEncoder *enc;
  TokIds out = {0};
  TOK_OK(tok_encoder_new(&enc, tok, err));
  assert_int_equal(tok_encode(enc, (const uint8_t *)"hello!", 6, 0, &out, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "0x21"));
  tok_encoder_free(enc);
  tok_ids_free(&out);
  int32_t hole[] = {18};
  uint8_t *buf = NULL;
  size_t cap = 0;
  len = 0;
  assert_int_equal(tok_decode(tok, hole, 1, &buf, &len, &cap, &err), ERR_ARG);
  free(buf);
}

static void test_load_hand_written(void **state) {
  (void)state;
  char *pairs = hand_json(HAND_VOCAB, HAND_MERGES_PAIRS), *strings = hand_json(HAND_VOCAB, HAND_MERGES_STRINGS);
  Tokenizer *a, *b, *c;
  TOK_OK(tok_load_json_buffer(&a, pairs, strlen(pairs), "pairs.json", err));
  TOK_OK(tok_load_json_buffer(&b, strings, strlen(strings), "strings.json", err));
  check_hand_tokenizer(a);
  check_hand_tokenizer(b);
  /* Our writer keeps the ids, holes and added-token flags. */
  const char *path = tmp_path("hand.json");
  TOK_OK(tok_save_json(a, path, err));
  TOK_OK(tok_load_json(&c, path, err));
  check_hand_tokenizer(c);
  size_t n;
  char *saved = read_text(path, &n);
  cJSON *root = cJSON_Parse(saved);
  cJSON *x = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "added_tokens"), 1);
  assert_int_equal(cJSON_GetObjectItem(x, "id")->valueint, 13);
  assert_true(cJSON_IsFalse(cJSON_GetObjectItem(x, "special")));
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(x, "normalized")));
  cJSON_Delete(root);
  free(saved);
  tok_free(a);
  tok_free(b);
  tok_free(c);
  free(pairs);
  free(strings);
}

static void test_add_prefix_space(void **state) {
  (void)state;
  char *json = hand_json(HAND_VOCAB, HAND_MERGES_PAIRS);
  char *p = strstr(json, "\"add_prefix_space\": false");
  memcpy(p, "\"add_prefix_space\": true ", strlen("\"add_prefix_space\": true "));
  Tokenizer *tok;
  TOK_OK(tok_load_json_buffer(&tok, json, strlen(json), "aps.json", err));
  TokIds ids = tok_test_encode(tok, "world", 5, 0); /* as " world" */
  int32_t want[] = {15, 16};
  assert_int_equal(ids.n, 2);
  assert_memory_equal(ids.ids, want, sizeof want);
  tok_ids_free(&ids);
  tok_free(tok);
  free(json);
}

typedef struct BadCase {
  const char *find, *replace; /* edit applied to the hand-written file */
  const char *expect;         /* must appear in the message */
} BadCase;

static char *edited(const char *base, const char *find, const char *replace) {
  const char *at = strstr(base, find);
  if (!at) fail_msg("test bug: \"%s\" not in the base file", find);
  size_t n = strlen(base) - strlen(find) + strlen(replace) + 1;
  char *s = malloc(n);
  size_t k = (size_t)(at - base);
  memcpy(s, base, k);
  strcpy(s + k, replace);
  strcat(s, at + strlen(find));
  return s;
}

static void test_malformed_files_rejected(void **state) {
  (void)state;
  static const BadCase cases[] = {
      {"{\"version\"", "{{\"version\"", "not valid JSON"},
      {"\"merges\": [[", "\"merges\": [[[", "not valid JSON"},
      {"\"model\": {", "\"modelx\": {", "model: expected an object, got nothing"},
      {"\"vocab\": {", "\"vocab\": [{", "not valid JSON"},
      {"\"merges\": [[\"h\",\"e\"]", "\"merges\": [[\"h\",\"q\"]", "model.merges[0]: right part \"q\" is not in model.vocab"},
      {"[\"o\",\"r\"]", "[\"o\",\"x\"]", "model.merges[5]: right part \"x\""},
      {"[\"l\",\"d\"]", "[\"d\",\"l\"]", "model.merges[7]: the merged token \"dl\" is not in model.vocab"},
      {"[\"h\",\"e\"]", "[\"h\"]", "model.merges[0]: expected a string \"left right\" or an array of two strings"},
      {"[\"l\",\"d\"]", "[\"l\",\"l\"]", "merge 7 repeats merge 1"},
      {"\"hello\": 11", "\"hel lo\": 11", "token \"hel lo\" (id 11) is not valid byte-level text: character U+0020"},
      {"\"hello\": 11", "\"\xe4\xb8\xad\": 11", "character U+4E2D stands for no byte"},
      {"\"ld\": 16", "\"ld\": 9", "model.vocab: id 9 is given to both \"ll\" and \"ld\""},
      {"\"ld\": 16", "\"ll\": 16", "token \"ll\" appears twice"},
      {"\"ld\": 16", "\"ld\": -1", "model.vocab[\"ld\"]: expected an integer id in [0, 4194304), got -1"},
      {"\"ld\": 16", "\"ld\": 1.5", "expected an integer id"},
      {"\"ld\": 16", "\"ld\": 1e12", "expected an integer id"},
      {"\"ld\": 16", "\"ld\": \"16\"", "expected an integer id, got a string"},
      {"\"ld\": 16", "\"\": 16", "is an empty string"},
      {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model.type: expected \"BPE\", got \"WordPiece\""},
      {"\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", "normalizer: expected null"},
      {"\"pre_tokenizer\": {\"type\": \"ByteLevel\"", "\"pre_tokenizer\": {\"type\": \"Metaspace\"",
       "pre_tokenizer: expected an object with \"type\": \"ByteLevel\", got an object of type Metaspace"},
      {"\"use_regex\": true},\n \"post", "\"use_regex\": false},\n \"post", "pre_tokenizer.use_regex"},
      {"\"decoder\": {\"type\": \"ByteLevel\"", "\"decoder\": {\"type\": \"WordPiece\"", "decoder: expected null"},
      {"\"post_processor\": {\"type\": \"ByteLevel\"", "\"post_processor\": {\"type\": \"TemplateProcessing\"",
       "post_processor: expected null or"},
      {"\"dropout\": null", "\"dropout\": 0.1", "model.dropout"},
      {"\"byte_fallback\": false", "\"byte_fallback\": true", "model.byte_fallback: expected false"},
      {"\"end_of_word_suffix\": null", "\"end_of_word_suffix\": \"</w>\"", "model.end_of_word_suffix"},
      {"\"byte_fallback\": false", "\"byte_fallback\": 1", "model.byte_fallback: expected true or false"},
      {"\"id\": 13", "\"id\": 20", "added_tokens[1]: id 20 is already used by added_tokens[0]"},
      {"\"content\": \"<|x|>\"", "\"content\": \"<|endoftext|>\"", "is already added_tokens[0]"},
      {"\"content\": \"<|x|>\"", "\"content\": \"\"", "added_tokens[1]: expected \"content\" to be a non-empty"},
      {"\"id\": 13", "\"id\": null", "added_tokens[1].id: expected an integer id, got null"},
      {"\"added_tokens\": [", "\"added_tokens\": {\"a\": [", "not valid JSON"},
      {"\"<|endoftext|>\": 20}", "\"<|endoftext|>\": 17}", "id 17 is given to both"},
      {"\"<|endoftext|>\": 20}", "\"<|eot|>\": 20}", "id 20 is the added token \"<|endoftext|>\" but the vocab names it \"<|eot|>\""},
      {"\"version\": \"1.0\"", "\"version\": 1", "version: expected a string, got a number"},
      {"}}\n", "}}\n}", "unexpected data after the JSON value"},
  };
  char *base = hand_json(HAND_VOCAB, HAND_MERGES_PAIRS);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *json = edited(base, cases[i].find, cases[i].replace);
    Tokenizer *tok = (Tokenizer *)1;
    Error err = {0};
    int rc = tok_load_json_buffer(&tok, json, strlen(json), "bad.json", &err);
    if (rc != ERR_FORMAT) fail_msg("case %zu: expected ERR_FORMAT, got %d (%s)", i, rc, err.msg);
    assert_null(tok);
    if (strncmp(err.msg, "bad.json: ", 10) != 0 || !strstr(err.msg, cases[i].expect))
      fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, err.msg, cases[i].expect);
    free(json);
  }
  /* Not an object; empty vocab; a missing file; an unwritable path. */
  Tokenizer *tok;
  Error err = {0};
  assert_int_equal(tok_load_json_buffer(&tok, "[1, 2]", 6, "arr.json", &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "arr.json: top level: expected an object, got an array"));
  char *empty = hand_json("{}", "[]");
  assert_int_equal(tok_load_json_buffer(&tok, empty, strlen(empty), "e.json", &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "model.vocab: is empty"));
  free(empty);
  assert_int_equal(tok_load_json(&tok, tmp_path("missing.json"), &err), ERR_IO);
  assert_non_null(strstr(err.msg, "missing.json"));
  assert_int_equal(tok_load_json_buffer(&tok, "", 0, "zero.json", &err), ERR_FORMAT);
  TOK_OK(tok_load_json_buffer(&tok, base, strlen(base), "good.json", err));
  assert_int_equal(tok_save_json(tok, tmp_path("no/such/dir/t.json"), &err), ERR_IO);
  assert_non_null(strstr(err.msg, "no/such/dir"));
  tok_free(tok);
  free(base);
}

/* Every truncation and many random edits of a valid file: each load either
 * succeeds (and the tokenizer then works) or fails with a message. */
static void test_damaged_files_never_crash(void **state) {
  (void)state;
  char *base = hand_json(HAND_VOCAB, HAND_MERGES_STRINGS);
  size_t n = strlen(base);
  char *buf = malloc(n + 1);
  static const char junk[] = "\"{}[],:09-. a\\\xc4\xa0\xff";
  int loaded = 0;
  for (int trial = 0; trial < (int)n + 3000; trial++) {
    size_t len = n;
    memcpy(buf, base, n + 1);
    if (trial < (int)n) {
      len = (size_t)trial;
    } else {
      int edits = 1 + (int)(rng_u64(4, 0, (uint64_t)trial) % 3);
      for (int e = 0; e < edits; e++)
        buf[rng_u64(4, 1, (uint64_t)trial * 8 + (uint64_t)e) % n] =
            junk[rng_u64(4, 2, (uint64_t)trial * 8 + (uint64_t)e) % (sizeof junk - 1)];
    }
    Tokenizer *tok = NULL;
    Error err = {0};
    int rc = tok_load_json_buffer(&tok, buf, len, "damaged.json", &err);
    if (rc) {
      assert_null(tok);
      assert_true(strlen(err.msg) > 0);
      continue;
    }
    loaded++;
    TokEncoder *enc;
    TokIds ids = {0};
    TOK_OK(tok_encoder_new(&enc, tok, err));
    if (tok_encode(enc, (const uint8_t *)"hello world<|x|>", 16, TOK_ENCODE_SPECIAL, &ids, &err) == 0) {
      size_t dl = 0, cap = 0;
      uint8_t *dec = NULL;
      tok_decode(tok, ids.ids, ids.n, &dec, &dl, &cap, &err);
      free(dec);
    }
    tok_ids_free(&ids);
    tok_encoder_free(enc);
    tok_free(tok);
  }
  assert_true(loaded > 0); /* edits inside strings or whitespace keep it valid */
  free(buf);
  free(base);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_byte_unicode_mapping),
      cmocka_unit_test(test_save_load_round_trip),
      cmocka_unit_test(test_load_hand_written),
      cmocka_unit_test(test_add_prefix_space),
      cmocka_unit_test(test_malformed_files_rejected),
      cmocka_unit_test(test_damaged_files_never_crash),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
