/* Tokenizer construction, accessors, id arrays, the hash maps of
 * tok_internal.h and the GPT-2 byte <-> unicode mapping. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

/* ---- id arrays ---- */

int tok_ids_reserve(TokIds *v, size_t cap, Error *err) {
  if (cap <= v->cap) return 0;
  size_t c = v->cap ? v->cap : 1024;
  while (c < cap) c *= 2;
  int32_t *p = realloc(v->ids, c * sizeof *p);
  if (!p) return error_set(err, ERR_NOMEM, "out of memory growing a token array to %zu ids", c);
  v->ids = p;
  v->cap = c;
  return 0;
}

int tok_ids_push(TokIds *v, int32_t id, Error *err) {
  if (v->n == v->cap && tok_ids_reserve(v, v->n + 1, err)) return ERR_NOMEM;
  v->ids[v->n++] = id;
  return 0;
}

void tok_ids_free(TokIds *v) {
  free(v->ids);
  v->ids = NULL;
  v->n = v->cap = 0;
}

/* ---- PairMap ---- */

int pairmap_init(PairMap *m, size_t expected) {
  size_t cap = 64;
  while (cap < 2 * expected + 2) cap *= 2;
  m->keys = malloc(cap * sizeof *m->keys);
  m->vals = malloc(cap * sizeof *m->vals);
  m->cap = cap;
  m->n = 0;
  if (!m->keys || !m->vals) {
    pairmap_free(m);
    return ERR_NOMEM;
  }
  memset(m->keys, 0xff, cap * sizeof *m->keys);
  return 0;
}

void pairmap_free(PairMap *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

static void pairmap_insert_raw(uint64_t *keys, int32_t *vals, size_t cap, uint64_t key, int32_t val) {
  size_t mask = cap - 1;
  size_t i = tok_mix64(key) & mask;
  while (keys[i] != PAIR_EMPTY && keys[i] != key) i = (i + 1) & mask;
  keys[i] = key;
  vals[i] = val;
}

int pairmap_put(PairMap *m, uint64_t key, int32_t val) {
  size_t mask = m->cap - 1;
  for (size_t i = tok_mix64(key) & mask;; i = (i + 1) & mask) {
    if (m->keys[i] == key) {
      m->vals[i] = val;
      return 0;
    }
    if (m->keys[i] == PAIR_EMPTY) break;
  }
  if (2 * (m->n + 1) > m->cap) {
    size_t cap = m->cap * 2;
    uint64_t *keys = malloc(cap * sizeof *keys);
    int32_t *vals = malloc(cap * sizeof *vals);
    if (!keys || !vals) {
      free(keys);
      free(vals);
      return ERR_NOMEM;
    }
    memset(keys, 0xff, cap * sizeof *keys);
    for (size_t i = 0; i < m->cap; i++)
      if (m->keys[i] != PAIR_EMPTY) pairmap_insert_raw(keys, vals, cap, m->keys[i], m->vals[i]);
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
  }
  pairmap_insert_raw(m->keys, m->vals, m->cap, key, val);
  m->n++;
  return 0;
}

/* ---- BytesMap ---- */

uint64_t bytes_hash(const uint8_t *p, size_t n) {
  /* FNV-1a over 8-byte words, finished by a 64-bit mixer. */
  uint64_t h = 0xcbf29ce484222325ULL ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  uint64_t w = 0;
  for (size_t k = 0; i < n; i++, k++) w |= (uint64_t)p[i] << (8 * k);
  h = (h ^ w) * 0x100000001b3ULL;
  return tok_mix64(h) | 1;
}

int bytesmap_init(BytesMap *m, size_t expected) {
  memset(m, 0, sizeof *m);
  size_t cap = 64;
  while (cap < 2 * expected + 2) cap *= 2;
  m->slots = calloc(cap, sizeof *m->slots);
  if (!m->slots) return ERR_NOMEM;
  m->cap = cap;
  return 0;
}

void bytesmap_free(BytesMap *m) {
  free(m->slots);
  free(m->keys);
  memset(m, 0, sizeof *m);
}

void bytesmap_clear(BytesMap *m) {
  memset(m->slots, 0, m->cap * sizeof *m->slots);
  m->n = 0;
  m->keys_len = 0;
}

BytesEntry *bytesmap_find(const BytesMap *m, const uint8_t *key, size_t n, uint64_t hash) {
  size_t mask = m->cap - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    BytesEntry *e = &m->slots[i];
    if (e->hash == 0) return NULL;
    if (e->hash == hash && e->key_len == n && memcmp(m->keys + e->key_off, key, n) == 0) return e;
  }
}

static int bytesmap_grow(BytesMap *m) {
  size_t cap = m->cap * 2;
  BytesEntry *slots = calloc(cap, sizeof *slots);
  if (!slots) return ERR_NOMEM;
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->slots[i].hash) continue;
    size_t j = m->slots[i].hash & (cap - 1);
    while (slots[j].hash) j = (j + 1) & (cap - 1);
    slots[j] = m->slots[i];
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  return 0;
}

BytesEntry *bytesmap_upsert(BytesMap *m, const uint8_t *key, size_t n, uint64_t hash, int *created) {
  *created = 0;
  BytesEntry *e = bytesmap_find(m, key, n, hash);
  if (e) return e;
  if (n > UINT32_MAX) return NULL;
  if (2 * (m->n + 1) > m->cap && bytesmap_grow(m)) return NULL;
  if (m->keys_len + n > m->keys_cap) {
    size_t c = m->keys_cap ? m->keys_cap : 4096;
    while (c < m->keys_len + n) c *= 2;
    uint8_t *k = realloc(m->keys, c);
    if (!k) return NULL;
    m->keys = k;
    m->keys_cap = c;
  }
  if (n) memcpy(m->keys + m->keys_len, key, n);
  size_t mask = m->cap - 1;
  size_t i = hash & mask;
  while (m->slots[i].hash) i = (i + 1) & mask;
  e = &m->slots[i];
  e->hash = hash;
  e->key_off = m->keys_len;
  e->key_len = (uint32_t)n;
  e->aux = 0;
  e->value = 0;
  m->keys_len += n;
  m->n++;
  *created = 1;
  return e;
}

/* ---- construction ---- */

int tok_alloc(Tokenizer **out, int n_ids, int n_merges, Error *err) {
  *out = NULL;
  if (n_ids < 0 || n_ids > TOK_MAX_ID || n_merges < 0 || n_merges > TOK_MAX_ID)
    return error_set(err, ERR_ARG, "tokenizer size out of range: %d ids, %d merges (at most %d)", n_ids,
                     n_merges, TOK_MAX_ID);
  Tokenizer *t = calloc(1, sizeof *t);
  if (!t) return error_set(err, ERR_NOMEM, "out of memory allocating a tokenizer");
  t->n_ids = n_ids;
  size_t ni = n_ids ? (size_t)n_ids : 1, nm = n_merges ? (size_t)n_merges : 1;
  t->tok_off = calloc(ni, sizeof *t->tok_off);
  t->tok_len = malloc(ni * sizeof *t->tok_len);
  t->added = calloc(ni, 1);
  t->merge_left = malloc(nm * sizeof(int32_t));
  t->merge_right = malloc(nm * sizeof(int32_t));
  t->merge_result = malloc(nm * sizeof(int32_t));
  if (!t->tok_off || !t->tok_len || !t->added || !t->merge_left || !t->merge_right || !t->merge_result) {
    tok_free(t);
    return error_set(err, ERR_NOMEM, "out of memory allocating a tokenizer of %d ids", n_ids);
  }
  for (int i = 0; i < n_ids; i++) t->tok_len[i] = -1;
  t->n_merges = n_merges;
  for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
  *out = t;
  return 0;
}

void tok_free(Tokenizer *t) {
  if (!t) return;
  free(t->tok_off);
  free(t->tok_len);
  free(t->pool);
  free(t->added);
  free(t->merge_left);
  free(t->merge_right);
  free(t->merge_result);
  pairmap_free(&t->ranks);
  for (int i = 0; i < t->n_added; i++) free(t->added_tokens[i].content);
  free(t->added_tokens);
  free(t);
}

int tok_set_token(Tokenizer *t, int32_t id, const uint8_t *bytes, size_t n, Error *err) {
  if (id < 0 || id >= t->n_ids) return error_set(err, ERR_INTERNAL, "token id %d out of range", (int)id);
  if (t->tok_len[id] >= 0) return error_set(err, ERR_FORMAT, "id %d is given to two tokens", (int)id);
  if (n > INT32_MAX) return error_set(err, ERR_FORMAT, "token %d is too long (%zu bytes)", (int)id, n);
  if (t->pool_len + n > t->pool_cap) {
    size_t c = t->pool_cap ? t->pool_cap : 4096;
    while (c < t->pool_len + n) c *= 2;
    uint8_t *p = realloc(t->pool, c);
    if (!p) return error_set(err, ERR_NOMEM, "out of memory storing token bytes");
    t->pool = p;
    t->pool_cap = c;
  }
  if (n) memcpy(t->pool + t->pool_len, bytes, n);
  t->tok_off[id] = t->pool_len;
  t->tok_len[id] = (int32_t)n;
  t->pool_len += n;
  return 0;
}

int tok_add_added(Tokenizer *t, int32_t id, const char *content, int special, Error *err) {
  TokAdded *a = realloc(t->added_tokens, (size_t)(t->n_added + 1) * sizeof *a);
  if (!a) return error_set(err, ERR_NOMEM, "out of memory adding token %s", content);
  t->added_tokens = a;
  TokAdded *x = &a[t->n_added];
  memset(x, 0, sizeof *x);
  x->content = strdup(content);
  if (!x->content) return error_set(err, ERR_NOMEM, "out of memory adding token %s", content);
  x->id = id;
  x->special = (uint8_t)(special != 0);
  t->n_added++;
  if (id >= 0 && id < t->n_ids) t->added[id] = 1;
  return 0;
}

int tok_finish(Tokenizer *t, const char *where, Error *err) {
  for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
  for (int id = 0; id < t->n_ids; id++)
    if (t->tok_len[id] == 1 && !t->added[id]) t->byte_id[t->pool[t->tok_off[id]]] = id;
  pairmap_free(&t->ranks);
  if (pairmap_init(&t->ranks, (size_t)t->n_merges))
    return error_set(err, ERR_NOMEM, "%s: out of memory indexing %d merges", where, t->n_merges);
  for (int r = 0; r < t->n_merges; r++) {
    int32_t l = t->merge_left[r], rt = t->merge_right[r], res = t->merge_result[r];
    if (l < 0 || l >= t->n_ids || rt < 0 || rt >= t->n_ids || res < 0 || res >= t->n_ids)
      return error_set(err, ERR_FORMAT, "%s: merge %d uses an id outside [0, %d)", where, r, t->n_ids);
    int32_t ll = t->tok_len[l], rl = t->tok_len[rt], sl = t->tok_len[res];
    if (ll < 0 || rl < 0 || sl < 0)
      return error_set(err, ERR_FORMAT, "%s: merge %d uses an id that names no token", where, r);
    if (ll == 0 || rl == 0)
      return error_set(err, ERR_FORMAT, "%s: merge %d has an empty part", where, r);
    if ((int64_t)ll + rl != sl || memcmp(t->pool + t->tok_off[l], t->pool + t->tok_off[res], (size_t)ll) ||
        memcmp(t->pool + t->tok_off[rt], t->pool + t->tok_off[res] + ll, (size_t)rl))
      return error_set(err, ERR_FORMAT,
                       "%s: merge %d (ids %d + %d -> %d): the result is not the two parts joined", where, r,
                       (int)l, (int)rt, (int)res);
    uint64_t key = pair_key(l, rt);
    int32_t prev = pairmap_get(&t->ranks, key);
    if (prev >= 0)
      return error_set(err, ERR_FORMAT, "%s: merge %d repeats merge %d (ids %d + %d)", where, r, (int)prev,
                       (int)l, (int)rt);
    if (pairmap_put(&t->ranks, key, r)) return error_set(err, ERR_NOMEM, "%s: out of memory", where);
  }
  return 0;
}

/* ---- accessors ---- */

int tok_vocab_size(const Tokenizer *t) { return t->n_ids; }
int tok_num_merges(const Tokenizer *t) { return t->n_merges; }

void tok_merge(const Tokenizer *t, int rank, int32_t *left, int32_t *right, int32_t *result) {
  *left = t->merge_left[rank];
  *right = t->merge_right[rank];
  *result = t->merge_result[rank];
}

const uint8_t *tok_token_bytes(const Tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_ids || t->tok_len[id] < 0) {
    *len = 0;
    return NULL;
  }
  *len = (size_t)t->tok_len[id];
  /* A non-NULL pointer even for an empty token or an empty pool. */
  return t->pool ? t->pool + t->tok_off[id] : (const uint8_t *)"";
}

int32_t tok_byte_id(const Tokenizer *t, uint8_t byte) { return t->byte_id[byte]; }

int32_t tok_added_id(const Tokenizer *t, const char *content) {
  for (int i = 0; i < t->n_added; i++)
    if (strcmp(t->added_tokens[i].content, content) == 0) return t->added_tokens[i].id;
  return -1;
}

int32_t tok_eot_id(const Tokenizer *t) { return tok_added_id(t, TOK_EOT); }

int tok_is_added(const Tokenizer *t, int32_t id) { return id >= 0 && id < t->n_ids && t->added[id]; }

/* ---- GPT-2 byte <-> unicode ---- */

static int printable_latin1(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

/* 68 bytes are unprintable; they take U+0100 upwards in byte order. */
#define TOK_N_UNPRINTABLE 68
static uint32_t cp_of_byte[256];
static int16_t byte_of_cp[256 + TOK_N_UNPRINTABLE];
static pthread_once_t bytelevel_once = PTHREAD_ONCE_INIT;

static void bytelevel_build(void) {
  uint32_t k = 0;
  for (int i = 0; i < 256 + TOK_N_UNPRINTABLE; i++) byte_of_cp[i] = -1;
  for (unsigned b = 0; b < 256; b++) {
    uint32_t cp = printable_latin1(b) ? b : 256 + k++;
    cp_of_byte[b] = cp;
    byte_of_cp[cp] = (int16_t)b;
  }
}

static void bytelevel_init(void) { pthread_once(&bytelevel_once, bytelevel_build); }

uint32_t tok_byte_to_codepoint(uint8_t b) {
  bytelevel_init();
  return cp_of_byte[b];
}

int tok_codepoint_to_byte(uint32_t cp) {
  bytelevel_init();
  return cp < 256 + TOK_N_UNPRINTABLE ? byte_of_cp[cp] : -1;
}

char *tok_bytes_to_text(const uint8_t *bytes, size_t n) {
  bytelevel_init();
  char *s = malloc(2 * n + 1); /* every code point used is below U+0800 */
  if (!s) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t cp = cp_of_byte[bytes[i]];
    if (cp < 0x80) {
      s[k++] = (char)cp;
    } else {
      s[k++] = (char)(0xC0 | (cp >> 6));
      s[k++] = (char)(0x80 | (cp & 0x3F));
    }
  }
  s[k] = '\0';
  return s;
}

/* Decodes one UTF-8 code point (strict: no overlongs, surrogates or values
 * above U+10FFFF); returns its length or 0 when invalid. */
static size_t utf8_decode(const uint8_t *s, uint32_t *cp) {
  uint8_t c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t n;
  uint32_t v, min;
  if ((c & 0xE0) == 0xC0) n = 2, v = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) n = 3, v = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) n = 4, v = c & 0x07, min = 0x10000;
  else return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the terminating NUL */
    v = (v << 6) | (s[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

int tok_text_to_bytes(const char *text, uint8_t **bytes, size_t *n, uint32_t *bad_cp) {
  size_t len = strlen(text);
  uint8_t *out = malloc(len + 1);
  *bytes = NULL;
  *n = 0;
  if (!out) {
    *bad_cp = 0xFFFFFFFFu;
    return -1;
  }
  const uint8_t *s = (const uint8_t *)text;
  size_t k = 0;
  for (size_t i = 0; i < len;) {
    uint32_t cp;
    size_t m = utf8_decode(s + i, &cp);
    int b = m ? tok_codepoint_to_byte(cp) : -1;
    if (b < 0) {
      *bad_cp = m ? cp : 0xFFFFFFFFu;
      free(out);
      return -1;
    }
    out[k++] = (uint8_t)b;
    i += m;
  }
  *bytes = out;
  *n = k;
  return 0;
}
