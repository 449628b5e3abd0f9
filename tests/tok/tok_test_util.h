/* Helpers shared by the tokenizer tests: a sample text, a small trained
 * tokenizer, and encode/decode wrappers that fail the test on error. */
#ifndef FIVEFOLD_TESTS_TOK_UTIL_H
#define FIVEFOLD_TESTS_TOK_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tokenizer.h"

static const char tok_sample_text[] =
    "The quick brown fox jumps over the lazy dog. It's the dog's day, isn't it?\n"
    "We'll see: 1234 apples, 56 pears and 7.5 kg of flour cost $19.99 in 2024.\n"
    "  Indented lines,\ttabs\tand   runs of spaces   \n\n"
    "They're sure you've heard I'd rather they'd not; we're done, aren't we?\n"
    "Na\xc3\xafve caf\xc3\xa9 r\xc3\xa9sum\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x99\x82 -- \"quoted\" (parens) [brackets] {braces}\n"
    "the theme of the thesis: there, then, thence, thereby, therefore, the end.\n"
    "A tokenizer learns merges: th, the, then; in, ing, thing; and so on and on.\n"
    "<|endoftext|> appears here as plain text unless special tokens are asked for.\n";

/* Fails the test with the error message when rc is not 0. */
#define TOK_OK(call)                                            \
  do {                                                          \
    Error err_ = {0};                                           \
    Error *err = &err_;                                         \
    int rc_ = (call);                                           \
    if (rc_ != 0) fail_msg("%s failed: %s", #call, err_.msg);   \
  } while (0)

static inline Tokenizer *tok_test_train(const char *text, int vocab_size) {
  Tokenizer *tok = NULL;
  const uint8_t *texts[] = {(const uint8_t *)text};
  size_t lens[] = {strlen(text)};
  TokTrainOptions opts = {.vocab_size = vocab_size};
  TOK_OK(tok_train(&tok, texts, lens, 1, &opts, err));
  return tok;
}

static inline TokIds tok_test_encode(const Tokenizer *tok, const void *text, size_t len, int flags) {
  TokEncoder *enc = NULL;
  TokIds ids = {0};
  TOK_OK(tok_encoder_new(&enc, tok, err));
  TOK_OK(tok_encode(enc, (const uint8_t *)text, len, flags, &ids, err));
  tok_encoder_free(enc);
  return ids;
}

/* Decoded bytes (malloc'd) and their count. */
static inline uint8_t *tok_test_decode(const Tokenizer *tok, const TokIds *ids, size_t *len) {
  uint8_t *buf = NULL;
  size_t cap = 0;
  *len = 0;
  TOK_OK(tok_decode(tok, ids->ids, ids->n, &buf, len, &cap, err));
  return buf;
}

#endif
