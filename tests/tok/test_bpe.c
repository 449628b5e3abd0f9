/* BPE training and encoding: exact round trips of arbitrary bytes, agreement
 * of the encoder with a plain reference (lowest-rank pair first, leftmost on
 * ties) and of the incremental trainer with a plain one (recount every pair
 * each step), hand-worked first merges with their tie-breaks, vocab size and
 * early stop, special tokens, and errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "tok/pretok.h"
#include "tok/tok_test_util.h"

/* ---- reference encoder ---- */

static int ref_rank(const Tokenizer *tok, int32_t l, int32_t r) {
  for (int k = 0; k < tok_num_merges(tok); k++) {
    int32_t a, b, res;
    tok_merge(tok, k, &a, &b, &res);
    if (a == l && b == r) return k;
  }
  return -1;
}

typedef struct RefCtx {
  const Tokenizer *tok;
  TokIds *out;
} RefCtx;

static int ref_piece(const uint8_t *p, size_t n, void *ctx_) {
  RefCtx *ctx = ctx_;
  int32_t *sym = malloc(n * sizeof *sym);
  size_t len = n;
  for (size_t i = 0; i < n; i++) sym[i] = tok_byte_id(ctx->tok, p[i]);
  for (;;) {
    int best = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < len; i++) {
      int r = ref_rank(ctx->tok, sym[i], sym[i + 1]);
      if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
    }
    if (best < 0) break;
    int32_t a, b, res;
    tok_merge(ctx->tok, best, &a, &b, &res);
    sym[at] = res;
    memmove(sym + at + 1, sym + at + 2, (len - at - 2) * sizeof *sym);
    len--;
  }
  for (size_t i = 0; i < len; i++) tok_ids_push(ctx->out, sym[i], NULL);
  free(sym);
  return 0;
}

static TokIds ref_encode(const Tokenizer *tok, const uint8_t *text, size_t n) {
  TokIds out = {0};
  RefCtx ctx = {tok, &out};
  tok_pretokenize(text, n, ref_piece, &ctx);
  return out;
}

static void assert_same_ids(const TokIds *got, const TokIds *want, const char *what) {
  size_t n = got->n < want->n ? got->n : want->n;
  for (size_t i = 0; i < n; i++)
    if (got->ids[i] != want->ids[i])
      fail_msg("%s: id %zu is %d, reference %d", what, i, (int)got->ids[i], (int)want->ids[i]);
  if (got->n != want->n) fail_msg("%s: %zu ids, reference %zu", what, got->n, want->n);
}

static void fill_random(uint8_t *buf, size_t n, uint64_t stream) {
  for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rng_u64(11, stream, i);
}

/* ---- tests ---- */

static void test_round_trip_random_bytes(void **state) {
  (void)state;
  Tokenizer *tok = tok_test_train(tok_sample_text, 450);
  uint8_t buf[3000];
  for (int trial = 0; trial < 60; trial++) {
    size_t n = trial == 0 ? 0 : (size_t)rng_u64(3, 0, (uint64_t)trial) % sizeof buf;
    fill_random(buf, n, 100 + (uint64_t)trial);
    if (trial % 3 == 1) /* mostly text with stray bytes: exercises the merges */
      for (size_t i = 0; i < n; i++)
        if (buf[i] % 8) buf[i] = (uint8_t)tok_sample_text[buf[i] % (sizeof tok_sample_text - 1)];
    if (trial % 3 == 2) memset(buf, 0, n / 2); /* runs of NULs */
    TokIds ids = tok_test_encode(tok, buf, n, 0);
    size_t len;
    uint8_t *back = tok_test_decode(tok, &ids, &len);
    assert_int_equal(len, n);
    if (n) assert_memory_equal(back, buf, n);
    for (size_t i = 0; i < ids.n; i++) assert_true(ids.ids[i] >= 0 && ids.ids[i] < tok_vocab_size(tok));
    free(back);
    tok_ids_free(&ids);
  }
  tok_free(tok);
}

static void test_encoder_matches_reference(void **state) {
  (void)state;
  Tokenizer *tok = tok_test_train(tok_sample_text, 450);
  /* The training text itself, a scrambled mix of it, and long pieces (a
   * 600-byte letter run and a space run) that skip the cache. */
  size_t n = 5000;
  uint8_t *text = malloc(n);
  memcpy(text, tok_sample_text, sizeof tok_sample_text - 1);
  for (size_t i = sizeof tok_sample_text - 1; i < 4000; i++)
    text[i] = (uint8_t)tok_sample_text[rng_u64(5, 1, i) % (sizeof tok_sample_text - 1)];
  for (size_t i = 4000; i < 4600; i++) text[i] = "the"[i % 3];
  memset(text + 4600, ' ', 400);
  TokIds got = tok_test_encode(tok, text, n, 0);
  TokIds want = ref_encode(tok, text, n);
  assert_same_ids(&got, &want, "sample text");
  assert_true(got.n < n * 3 / 4); /* the merges did apply */
  tok_ids_free(&got);
  tok_ids_free(&want);
  /* Encoding twice with one encoder (second time from its cache) agrees. */
  TokEncoder *enc;
  TokIds a = {0}, b = {0};
  TOK_OK(tok_encoder_new(&enc, tok, err));
  TOK_OK(tok_encode(enc, text, 4000, 0, &a, err));
  TOK_OK(tok_encode(enc, text, 4000, 0, &b, err));
  assert_same_ids(&b, &a, "cached encoding");
  tok_encoder_free(enc);
  tok_ids_free(&a);
  tok_ids_free(&b);
  free(text);
  tok_free(tok);
}

static const char *token_str(const Tokenizer *tok, int32_t id, char *buf) {
  size_t n;
  const uint8_t *b = tok_token_bytes(tok, id, &n);
  memcpy(buf, b, n);
  buf[n] = '\0';
  return buf;
}

static void assert_merge(const Tokenizer *tok, int rank, const char *left, const char *right) {
  int32_t l, r, res;
  char b1[64], b2[64], b3[64];
  tok_merge(tok, rank, &l, &r, &res);
  if (strcmp(token_str(tok, l, b1), left) || strcmp(token_str(tok, r, b2), right))
    fail_msg("merge %d is \"%s\" + \"%s\", expected \"%s\" + \"%s\"", rank, b1, b2, left, right);
  assert_int_equal(res, 256 + rank);
  char joined[128];
  snprintf(joined, sizeof joined, "%s%s", left, right);
  assert_string_equal(token_str(tok, res, b3), joined);
}

static void test_first_merges_by_hand(void **state) {
  (void)state;
  /* One word, "aaabdaaabac": aa occurs 4 times -> "aa" (256). Then (aa, a)
   * and (a, b) both occur twice; the tie goes to the smaller left id, a (97)
   * -> "ab" (257). Then (aa, ab) twice -> "aaab". */
  Tokenizer *tok = tok_test_train("aaabdaaabac", 256 + 3 + 1);
  assert_int_equal(tok_num_merges(tok), 3);
  assert_merge(tok, 0, "a", "a");
  assert_merge(tok, 1, "a", "b");
  assert_merge(tok, 2, "aa", "ab");
  assert_int_equal(tok_eot_id(tok), 259);
  assert_int_equal(tok_vocab_size(tok), 260);
  /* Overlapping equal-rank pairs merge leftmost first: "aaa" -> aa + a. */
  TokIds aaa = tok_test_encode(tok, "aaaaa", 5, 0);
  assert_int_equal(aaa.n, 3);
  assert_int_equal(aaa.ids[0], 256);
  assert_int_equal(aaa.ids[1], 256);
  assert_int_equal(aaa.ids[2], 'a');
  tok_ids_free(&aaa);
  tok_free(tok);

  /* Words "hug", " hug" x2, " pug", " pun": ug (4) -> hug (3); then " p" and
   * " hug" tie at 2 and " p" wins on the smaller right id ('p' = 112 < 257). */
  tok = tok_test_train("hug hug hug pug pun", 256 + 4 + 1);
  assert_merge(tok, 0, "u", "g");
  assert_merge(tok, 1, "h", "ug");
  assert_merge(tok, 2, " ", "p");
  assert_merge(tok, 3, " ", "hug");
  TokIds ids = tok_test_encode(tok, "hug pun", 7, 0);
  assert_int_equal(ids.n, 4); /* "hug", " p", "u", "n" */
  assert_int_equal(ids.ids[0], 257);
  assert_int_equal(ids.ids[1], 258);
  tok_ids_free(&ids);
  tok_free(tok);
}

static void test_vocab_size_and_early_stop(void **state) {
  (void)state;
  /* Only one pair exists: training stops after it, whatever the target. */
  Tokenizer *tok = tok_test_train("ab ab", 1000);
  assert_int_equal(tok_num_merges(tok), 2); /* "ab", then " ab" */
  assert_int_equal(tok_vocab_size(tok), 256 + 2 + 1);
  tok_free(tok);
  tok = tok_test_train(tok_sample_text, 300);
  assert_int_equal(tok_vocab_size(tok), 300);
  assert_int_equal(tok_num_merges(tok), 300 - 256 - 1);
  assert_int_equal(tok_eot_id(tok), 299);
  assert_true(tok_is_added(tok, 299));
  tok_free(tok);

  /* min_frequency: pairs seen once are never merged. */
  const uint8_t *texts[] = {(const uint8_t *)"xy ab ab"};
  size_t lens[] = {8};
  TokTrainOptions opts = {.vocab_size = 1000, .min_frequency = 2};
  TOK_OK(tok_train(&tok, texts, lens, 1, &opts, err));
  assert_int_equal(tok_num_merges(tok), 2); /* " a" then " ab"; "xy" stays */
  tok_free(tok);

  Error err = {0};
  opts.vocab_size = 256;
  assert_int_equal(tok_train(&tok, texts, lens, 1, &opts, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "vocab size"));
  const char *dup[] = {"<a>", "<a>"};
  opts = (TokTrainOptions){.vocab_size = 300, .special_tokens = dup, .n_special = 2};
  assert_int_equal(tok_train(&tok, texts, lens, 1, &opts, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "twice"));
}

/* ---- plain trainer: recount every pair each step ---- */

static void test_trainer_matches_plain_trainer(void **state) {
  (void)state;
  enum { MERGES = 150, V = 256 + MERGES };
  /* Random text with skewed letter frequencies so many counts tie. */
  size_t n = 6000;
  char *text = malloc(n + 1);
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rng_u64(9, 3, i) % 20;
    text[i] = r < 4 ? ' ' : r < 5 ? '\n' : r < 6 ? '\'' : (char)("etaoinshrdlu"[r % 12]);
  }
  text[n] = '\0';
  Tokenizer *tok = tok_test_train(text, V + 1);
  assert_int_equal(tok_num_merges(tok), MERGES);

  /* Words as symbol arrays (one per piece; repeats simply count again). */
  typedef struct W {
    int32_t s[64];
    int len;
  } W;
  W *words = calloc(n, sizeof *words);
  int n_words = 0;
  for (size_t p = 0; p < n;) {
    size_t k = tok_pretok_next((const uint8_t *)text, n, p);
    assert_true(k <= 64);
    for (size_t i = 0; i < k; i++) words[n_words].s[i] = (uint8_t)text[p + i];
    words[n_words++].len = (int)k;
    p += k;
  }
  int64_t *count = malloc((size_t)V * V * sizeof *count);
  for (int m = 0; m < MERGES; m++) {
    memset(count, 0, (size_t)V * V * sizeof *count);
    for (int w = 0; w < n_words; w++)
      for (int i = 0; i + 1 < words[w].len; i++) count[words[w].s[i] * V + words[w].s[i + 1]]++;
    int64_t best = 0;
    int bl = -1, br = -1;
    for (int l = 0; l < V; l++)
      for (int r = 0; r < V; r++)
        if (count[l * V + r] > best) best = count[l * V + r], bl = l, br = r;
    int32_t a, b, res;
    tok_merge(tok, m, &a, &b, &res);
    if (a != bl || b != br) fail_msg("merge %d: trainer chose (%d, %d), plain trainer (%d, %d) with count %lld", m,
                                     (int)a, (int)b, bl, br, (long long)best);
    int32_t x = 256 + m;
    for (int w = 0; w < n_words; w++) {
      int k = 0;
      for (int i = 0; i < words[w].len; i++) {
        if (i + 1 < words[w].len && words[w].s[i] == bl && words[w].s[i + 1] == br) words[w].s[k++] = x, i++;
        else words[w].s[k++] = words[w].s[i];
      }
      words[w].len = k;
    }
  }
  free(count);
  free(words);
  free(text);
  tok_free(tok);
}

static void test_multiple_buffers(void **state) {
  (void)state;
  /* Buffers are split separately; cutting at a piece boundary changes nothing. */
  const char *whole = "the cat sat on the mat. the cat ate the rat.";
  const uint8_t *parts[] = {(const uint8_t *)"the cat sat on the mat.", (const uint8_t *)" the cat ate the rat."};
  size_t lens[] = {strlen((const char *)parts[0]), strlen((const char *)parts[1])};
  Tokenizer *a = tok_test_train(whole, 280), *b = NULL;
  TokTrainOptions opts = {.vocab_size = 280};
  TOK_OK(tok_train(&b, parts, lens, 2, &opts, err));
  assert_int_equal(tok_num_merges(a), tok_num_merges(b));
  for (int r = 0; r < tok_num_merges(a); r++) {
    int32_t l1, r1, x1, l2, r2, x2;
    tok_merge(a, r, &l1, &r1, &x1);
    tok_merge(b, r, &l2, &r2, &x2);
    assert_int_equal(l1, l2);
    assert_int_equal(r1, r2);
  }
  tok_free(a);
  tok_free(b);
}

static void test_special_tokens(void **state) {
  (void)state;
  const char *specials[] = {TOK_EOT, "<|pad|>"};
  const uint8_t *texts[] = {(const uint8_t *)tok_sample_text};
  size_t lens[] = {sizeof tok_sample_text - 1};
  TokTrainOptions opts = {.vocab_size = 400, .special_tokens = specials, .n_special = 2};
  Tokenizer *tok;
  TOK_OK(tok_train(&tok, texts, lens, 1, &opts, err));
  assert_int_equal(tok_eot_id(tok), 398);
  assert_int_equal(tok_added_id(tok, "<|pad|>"), 399);
  const char *text = "a<|endoftext|>b<|pad|><|endoftext|>";
  size_t n = strlen(text);
  /* Recognised on request... */
  TokIds ids = tok_test_encode(tok, text, n, TOK_ENCODE_SPECIAL);
  assert_int_equal(ids.n, 5);
  assert_int_equal(ids.ids[1], 398);
  assert_int_equal(ids.ids[3], 399);
  assert_int_equal(ids.ids[4], 398);
  size_t len;
  uint8_t *back = tok_test_decode(tok, &ids, &len);
  assert_int_equal(len, n);
  assert_memory_equal(back, text, n);
  free(back);
  tok_ids_free(&ids);
  /* ...and plain bytes otherwise. */
  ids = tok_test_encode(tok, text, n, 0);
  for (size_t i = 0; i < ids.n; i++) assert_false(tok_is_added(tok, ids.ids[i]));
  back = tok_test_decode(tok, &ids, &len);
  assert_int_equal(len, n);
  assert_memory_equal(back, text, n);
  free(back);
  tok_ids_free(&ids);
  tok_free(tok);
}

static void test_decode_rejects_bad_ids(void **state) {
  (void)state;
  Tokenizer *tok = tok_test_train("hello", 260);
  int32_t ids[] = {104, 300};
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  Error err = {0};
  assert_int_equal(tok_decode(tok, ids, 2, &buf, &len, &cap, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "id 300"));
  ids[1] = -1;
  assert_int_equal(tok_decode(tok, ids, 2, &buf, &len, &cap, &err), ERR_ARG);
  free(buf);
  tok_free(tok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_random_bytes),
      cmocka_unit_test(test_encoder_matches_reference),
      cmocka_unit_test(test_first_merges_by_hand),
      cmocka_unit_test(test_vocab_size_and_early_stop),
      cmocka_unit_test(test_trainer_matches_plain_trainer),
      cmocka_unit_test(test_multiple_buffers),
      cmocka_unit_test(test_special_tokens),
      cmocka_unit_test(test_decode_rejects_bad_ids),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
