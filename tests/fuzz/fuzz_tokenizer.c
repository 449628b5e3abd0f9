/* Fuzz harness of the tokenizer.json reader (src/tok/tokenizer.h).
 *
 * Each input is a would-be tokenizer.json, read by both tok_load_json_buffer
 * (straight from the fuzz buffer, which is not NUL-terminated) and
 * tok_load_json (from a file with the same bytes); the two must agree. A
 * loaded tokenizer is then used the way training uses it: every accessor,
 * and encoding of a fixed text and of the input itself, with and without
 * added-token matching. Whatever encodes must decode back to the text (with
 * the leading space add_prefix_space asks for), since merges are checked at
 * load time to join their parts. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include "tok/tok_internal.h" /* add_prefix_space and n_added decide the expected decode */
#include "tok/tokenizer.h"

static const char SAMPLE[] =
    "Hello, world! It's 2024: the quick brown fox jumps over 13 lazy dogs.\n\n"
    "<|endoftext|>Second  document\twith   spaces, caf\xc3\xa9 and \xe2\x82\xac; raw \xff\xfe bytes.";

/* Encodes text; when that works, checks the decode. Returns nothing: a
 * refusal (a byte without a token) is a valid outcome for a loaded file. */
static void encode_and_check(const Tokenizer *tok, TokEncoder *enc, const uint8_t *text, size_t len, int flags) {
  TokIds ids = {0};
  Error err;
  fuzz_error_reset(&err);
  int rc = tok_encode(enc, text, len, flags, &ids, &err);
  fuzz_check_result(rc, &err, "tok_encode");
  if (rc == 0) {
    for (size_t i = 0; i < ids.n; i++) {
      size_t n;
      if (!tok_token_bytes(tok, ids.ids[i], &n) || n == 0)
        fuzz_fail("tok_encode", "produced an id that names no token");
    }
    uint8_t *buf = NULL;
    size_t blen = 0, cap = 0;
    fuzz_error_reset(&err);
    rc = tok_decode(tok, ids.ids, ids.n, &buf, &blen, &cap, &err);
    fuzz_check_result(rc, &err, "tok_decode");
    if (rc) fuzz_fail("tok_decode", "refuses ids tok_encode produced");
    /* add_prefix_space puts a space before each segment of text between
     * added tokens; the expected text is simple unless both apply. */
    int segmented = (flags & TOK_ENCODE_SPECIAL) && tok->n_added > 0;
    if (!(tok->add_prefix_space && segmented)) {
      size_t pre = tok->add_prefix_space && len > 0 && text[0] != ' ';
      if (blen != len + pre || (pre && buf[0] != ' ') || (len && memcmp(buf + pre, text, len) != 0))
        fuzz_fail("tok_decode(tok_encode(text))", "is not the text");
    }
    free(buf);
  }
  tok_ids_free(&ids);
}

static void exercise(const Tokenizer *tok, const uint8_t *data, size_t size) {
  int n_ids = tok_vocab_size(tok), n_merges = tok_num_merges(tok);
  if (n_ids < 1 || n_ids > TOK_MAX_ID || n_merges < 0) fuzz_fail("a loaded tokenizer", "has sizes out of range");
  /* Ids are bounded by TOK_MAX_ID; look at the first few thousand of each
   * kind so a huge vocabulary does not make every input slow. */
  for (int32_t id = 0; id < n_ids && id < 4096; id++) {
    size_t n;
    const uint8_t *b = tok_token_bytes(tok, id, &n);
    if (b && n == 0) fuzz_fail("tok_token_bytes", "an empty token");
  }
  size_t n;
  if (tok_token_bytes(tok, -1, &n) || tok_token_bytes(tok, n_ids, &n)) fuzz_fail("tok_token_bytes", "out of range id");
  for (int r = 0; r < n_merges && r < 4096; r++) {
    int32_t l, rt, res;
    tok_merge(tok, r, &l, &rt, &res);
    size_t ln, rn, resn;
    const uint8_t *lb = tok_token_bytes(tok, l, &ln), *rb = tok_token_bytes(tok, rt, &rn),
                  *resb = tok_token_bytes(tok, res, &resn);
    if (!lb || !rb || !resb || ln + rn != resn || memcmp(lb, resb, ln) || memcmp(rb, resb + ln, rn))
      fuzz_fail("tok_merge", "a merge whose result is not its parts joined");
  }
  for (int b = 0; b < 256; b++) {
    int32_t id = tok_byte_id(tok, (uint8_t)b);
    if (id < 0) continue;
    const uint8_t *bb = tok_token_bytes(tok, id, &n);
    if (!bb || n != 1 || bb[0] != b) fuzz_fail("tok_byte_id", "names a token that is not that byte");
  }
  int32_t eot = tok_eot_id(tok);
  if (eot >= 0 && !tok_is_added(tok, eot)) fuzz_fail("tok_eot_id", "names a token that is not added");

  TokEncoder *enc = NULL;
  Error err;
  fuzz_error_reset(&err);
  int rc = tok_encoder_new(&enc, tok, &err);
  fuzz_check_result(rc, &err, "tok_encoder_new");
  if (rc) return;
  size_t own = size < 1024 ? size : 1024;
  for (int flags = 0; flags <= TOK_ENCODE_SPECIAL; flags += TOK_ENCODE_SPECIAL) {
    encode_and_check(tok, enc, (const uint8_t *)SAMPLE, sizeof SAMPLE - 1, flags);
    encode_and_check(tok, enc, data, own, flags);
    encode_and_check(tok, enc, (const uint8_t *)SAMPLE, sizeof SAMPLE - 1, flags); /* from the cache */
  }
  tok_encoder_free(enc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Tokenizer *from_buffer = NULL, *from_file = NULL;
  Error err;
  fuzz_error_reset(&err);
  int rc_buf = tok_load_json_buffer(&from_buffer, (const char *)data, size, "fuzz/tokenizer.json", &err);
  fuzz_check_result(rc_buf, &err, "tok_load_json_buffer");
  if ((rc_buf == 0) != (from_buffer != NULL)) fuzz_fail("tok_load_json_buffer", "result and return code disagree");

  fuzz_error_reset(&err);
  int rc_file = tok_load_json(&from_file, fuzz_input_path(data, size), &err);
  fuzz_check_result(rc_file, &err, "tok_load_json");
  if ((rc_file == 0) != (from_file != NULL)) fuzz_fail("tok_load_json", "result and return code disagree");
  if ((rc_buf == 0) != (rc_file == 0)) fuzz_fail("tok_load_json and tok_load_json_buffer", "disagree");

  if (from_buffer) {
    if (tok_vocab_size(from_buffer) != tok_vocab_size(from_file) ||
        tok_num_merges(from_buffer) != tok_num_merges(from_file))
      fuzz_fail("tok_load_json and tok_load_json_buffer", "read different tokenizers");
    exercise(from_buffer, data, size);
  }
  tok_free(from_buffer);
  tok_free(from_file);
  return 0;
}
