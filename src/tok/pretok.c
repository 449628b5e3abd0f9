/* The hand-written GPT-2-style splitter described in pretok.h. */
#include "tok/pretok.h"

enum { CLS_OTHER = 0, CLS_LETTER, CLS_DIGIT, CLS_SPACE };

/* Bytes not listed are CLS_OTHER (0). Range designators are a GNU C
 * extension (the build is gnu11); a constant table needs no run-time
 * initialisation shared between threads. */
static const unsigned char byte_class[256] = {
    ['A' ... 'Z'] = CLS_LETTER, ['a' ... 'z'] = CLS_LETTER,
    [0x80 ... 0xFF] = CLS_LETTER, ['0' ... '9'] = CLS_DIGIT, [' '] = CLS_SPACE,
    ['\t'] = CLS_SPACE, ['\n'] = CLS_SPACE, ['\v'] = CLS_SPACE, ['\f'] = CLS_SPACE, ['\r'] = CLS_SPACE,
};

static inline int cls(uint8_t b) { return byte_class[b]; }

static size_t contraction_len(const uint8_t *t, size_t len, size_t pos) {
  if (t[pos] != '\'' || pos + 1 >= len) return 0;
  uint8_t a = t[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 < len) {
    uint8_t b = t[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

static size_t run_of(const uint8_t *t, size_t len, size_t pos, int c) {
  size_t end = pos;
  while (end < len && cls(t[end]) == c) end++;
  return end;
}

size_t tok_pretok_next(const uint8_t *t, size_t len, size_t pos) {
  size_t n = contraction_len(t, len, pos);
  if (n) return n;
  size_t start = pos;
  if (t[pos] == ' ' && pos + 1 < len && cls(t[pos + 1]) != CLS_SPACE) pos++;
  int c = cls(t[pos]);
  if (c != CLS_SPACE) return run_of(t, len, pos, c) - start;
  size_t end = run_of(t, len, pos, CLS_SPACE);
  if (end == len || end - pos == 1) return end - pos;
  return end - 1 - pos;
}

int tok_pretokenize(const uint8_t *text, size_t len, TokPieceFn fn, void *ctx) {
  size_t pos = 0;
  while (pos < len) {
    size_t n = tok_pretok_next(text, len, pos);
    int rc = fn(text + pos, n, ctx);
    if (rc) return rc;
    pos += n;
  }
  return 0;
}
