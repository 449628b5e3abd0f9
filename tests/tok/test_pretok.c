/* Pre-tokenizer: hand-checked splits of the GPT-2 cases (contractions,
 * leading spaces, digit and punctuation runs, whitespace runs before a word
 * and at the end, UTF-8 words), and agreement on random text with a plain
 * reference that tries the regex alternatives one by one in their order, with
 * the backtracking of \s+(?!\S) done literally. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "tok/pretok.h"

typedef struct Split {
  size_t n;
  size_t len[256];
  const uint8_t *at[256];
} Split;

static int collect(const uint8_t *piece, size_t len, void *ctx) {
  Split *s = ctx;
  if (s->n == 256) return 1;
  s->at[s->n] = piece;
  s->len[s->n++] = len;
  return 0;
}

/* Splits text and compares with the NULL-terminated list of pieces. */
static void check_split(const char *text, const char *const *want) {
  Split s = {0};
  assert_int_equal(tok_pretokenize((const uint8_t *)text, strlen(text), collect, &s), 0);
  size_t n_want = 0;
  while (want[n_want]) n_want++;
  for (size_t i = 0; i < s.n && i < n_want; i++) {
    if (s.len[i] != strlen(want[i]) || memcmp(s.at[i], want[i], s.len[i]) != 0)
      fail_msg("splitting \"%s\": piece %zu is \"%.*s\", expected \"%s\"", text, i, (int)s.len[i],
               (const char *)s.at[i], want[i]);
  }
  if (s.n != n_want) fail_msg("splitting \"%s\": %zu pieces, expected %zu", text, s.n, n_want);
}

#define SPLIT(text, ...) check_split(text, (const char *const[]){__VA_ARGS__, NULL})

static void test_words_and_spaces(void **state) {
  (void)state;
  SPLIT("Hello world", "Hello", " world");
  SPLIT("hi ", "hi", " ");
  SPLIT("x   ", "x", "   ");
  SPLIT("a  b", "a", " ", " b");
  SPLIT("  \tx", "  ", "\t", "x");
  SPLIT("\t\tfoo", "\t", "\t", "foo");
  SPLIT("a\n\nb", "a", "\n", "\n", "b");
  SPLIT("end.\n", "end", ".", "\n");
  SPLIT("   lead", "  ", " lead");
}

static void test_contractions(void **state) {
  (void)state;
  SPLIT("I'm don't we'll they're you've I'd it's", "I", "'m", " don", "'t", " we", "'ll", " they", "'re", " you",
        "'ve", " I", "'d", " it", "'s");
  SPLIT("it's'S", "it", "'s", "'", "S"); /* upper case is no contraction */
  SPLIT("'ll'", "'ll", "'");
  SPLIT(" 'll", " '", "ll"); /* a space makes it punctuation first */
  SPLIT("!!'s", "!!'", "s");
}

static void test_digits_punctuation(void **state) {
  (void)state;
  SPLIT("abc123 456!!", "abc", "123", " 456", "!!");
  SPLIT("3.14", "3", ".", "14");
  SPLIT(" ?!x", " ?!", "x");
  SPLIT("Ge1:1 In", "Ge", "1", ":", "1", " In");
}

static void test_utf8_words(void **state) {
  (void)state;
  SPLIT("na\xc3\xafve caf\xc3\xa9!", "na\xc3\xafve", " caf\xc3\xa9", "!");
  SPLIT("\xe4\xb8\xad\xe6\x96\x87 \xff\xfe", "\xe4\xb8\xad\xe6\x96\x87", " \xff\xfe");
}

/* ---- reference: the regex alternatives tried in order ---- */

static int is_letter(uint8_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c >= 0x80; }
static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static int is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }
static int is_other(uint8_t c) { return !is_letter(c) && !is_digit(c) && !is_space(c); }

/* " ?CLASS+": with the space if that matches, else without. */
static size_t opt_space_run(const uint8_t *t, size_t n, size_t p, int (*cls)(uint8_t)) {
  for (int with_space = 1; with_space >= 0; with_space--) {
    size_t q = p;
    if (with_space) {
      if (q < n && t[q] == ' ') q++;
      else continue;
    }
    size_t r = q;
    while (r < n && cls(t[r])) r++;
    if (r > q) return r - p;
  }
  return 0;
}

static size_t reference_next(const uint8_t *t, size_t n, size_t p) {
  static const char *const contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
  for (int i = 0; i < 7; i++) {
    size_t cl = strlen(contractions[i]);
    if (p + cl <= n && memcmp(t + p, contractions[i], cl) == 0) return cl;
  }
  size_t m;
  if ((m = opt_space_run(t, n, p, is_letter))) return m;
  if ((m = opt_space_run(t, n, p, is_digit))) return m;
  if ((m = opt_space_run(t, n, p, is_other))) return m;
  size_t run = 0;
  while (p + run < n && is_space(t[p + run])) run++;
  for (size_t k = run; k >= 1; k--) /* \s+(?!\S), longest first */
    if (p + k == n || is_space(t[p + k])) return k;
  return run >= 1 ? 1 : 0; /* \s+ (the loop above only fails for a single space byte) */
}

static void test_random_against_reference(void **state) {
  (void)state;
  static const uint8_t alphabet[] = {' ', ' ', ' ', '\n', '\t', '\r', 'a', 'Z', 'e', 's', 'l', 'r', 'v', 'm',
                                     'd', 't', '1', '7', '\'', '\'', '!', '.', 0, 0x7f, 0xc3, 0xa9, 0xff, 0x80};
  uint8_t text[200];
  for (int trial = 0; trial < 3000; trial++) {
    size_t n = 1 + rng_u64(7, 1, (uint64_t)trial) % sizeof text;
    for (size_t i = 0; i < n; i++)
      text[i] = alphabet[rng_u64(7, 2, (uint64_t)trial * 1000 + i) % sizeof alphabet];
    for (size_t p = 0; p < n;) {
      size_t got = tok_pretok_next(text, n, p), want = reference_next(text, n, p);
      if (got != want || got == 0)
        fail_msg("trial %d: piece at byte %zu has length %zu, reference says %zu", trial, p, got, want);
      p += got;
    }
  }
}

static void test_empty_and_stop(void **state) {
  (void)state;
  Split s = {0};
  assert_int_equal(tok_pretokenize((const uint8_t *)"", 0, collect, &s), 0);
  assert_int_equal(s.n, 0);
  /* A non-zero callback value stops the walk and is returned. */
  char big[600];
  for (int i = 0; i < 300; i++) big[2 * i] = 'a', big[2 * i + 1] = ' ';
  memset(&s, 0, sizeof s);
  assert_int_equal(tok_pretokenize((const uint8_t *)big, sizeof big, collect, &s), 1);
  assert_int_equal(s.n, 256);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_words_and_spaces),  cmocka_unit_test(test_contractions),
      cmocka_unit_test(test_digits_punctuation), cmocka_unit_test(test_utf8_words),
      cmocka_unit_test(test_random_against_reference), cmocka_unit_test(test_empty_and_stop),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
