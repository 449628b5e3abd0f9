/* Encoding text to ids (pre-tokenize, merge by rank inside each piece, cache
 * the result per distinct piece) and decoding ids back to bytes. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "tok/pretok.h"
#include "tok/tok_internal.h"

/* Longer pieces are rare and would crowd the cache; they are re-encoded. */
#define CACHE_MAX_PIECE 256
/* The cache starts over once it holds this many ids or pieces. */
#define CACHE_MAX_IDS (16u << 20)
#define CACHE_MAX_PIECES (1u << 20)

typedef struct RankPos {
  int32_t rank, pos;
} RankPos;

struct TokEncoder {
  const Tokenizer *tok;
  BytesMap cache; /* piece -> value: offset into cache_ids, aux: count */
  int32_t *cache_ids;
  size_t n_cache_ids, cap_cache_ids;
  /* scratch for one piece */
  int32_t *id, *next, *prev;
  RankPos *heap;
  size_t cap_piece, cap_heap;
  uint8_t *prefixed; /* a segment with the prefix space put in front */
  size_t cap_prefixed;
};

int tok_encoder_new(TokEncoder **out, const Tokenizer *tok, Error *err) {
  TokEncoder *e = calloc(1, sizeof *e);
  if (!e || bytesmap_init(&e->cache, 1 << 14)) {
    free(e);
    *out = NULL;
    return error_set(err, ERR_NOMEM, "out of memory creating a token encoder");
  }
  e->tok = tok;
  *out = e;
  return 0;
}

void tok_encoder_free(TokEncoder *e) {
  if (!e) return;
  bytesmap_free(&e->cache);
  free(e->cache_ids);
  free(e->id);
  free(e->next);
  free(e->prev);
  free(e->heap);
  free(e->prefixed);
  free(e);
}

static int grow_scratch(TokEncoder *e, size_t n) {
  if (n <= e->cap_piece) return 0;
  size_t c = e->cap_piece ? e->cap_piece : 64;
  while (c < n) c *= 2;
  int32_t *id = realloc(e->id, c * sizeof *id);
  if (id) e->id = id;
  int32_t *next = realloc(e->next, c * sizeof *next);
  if (next) e->next = next;
  int32_t *prev = realloc(e->prev, c * sizeof *prev);
  if (prev) e->prev = prev;
  if (!id || !next || !prev) return ERR_NOMEM;
  e->cap_piece = c;
  return 0;
}

static inline int rp_before(RankPos a, RankPos b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

static int heap_push(TokEncoder *e, size_t *n, RankPos it) {
  if (*n == e->cap_heap) {
    size_t c = e->cap_heap ? 2 * e->cap_heap : 128;
    RankPos *h = realloc(e->heap, c * sizeof *h);
    if (!h) return ERR_NOMEM;
    e->heap = h;
    e->cap_heap = c;
  }
  RankPos *h = e->heap;
  size_t i = (*n)++;
  while (i > 0 && rp_before(it, h[(i - 1) / 2])) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = it;
  return 0;
}

static RankPos heap_pop(TokEncoder *e, size_t *n) {
  RankPos *h = e->heap;
  RankPos top = h[0], last = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && rp_before(h[c + 1], h[c])) c++;
    if (!rp_before(h[c], last)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = last;
  return top;
}

static inline int32_t rank_of(const Tokenizer *t, int32_t l, int32_t r) {
  return pairmap_get(&t->ranks, pair_key(l, r));
}

/* Appends the ids of one piece: byte ids, then the lowest-rank adjacent pair
 * merged (leftmost on ties) until none has a merge. Heap entries go stale
 * when a neighbour is merged; a popped entry is used only if its pair still
 * stands at that position. */
static int encode_piece_uncached(TokEncoder *e, const uint8_t *p, size_t n, TokIds *out, Error *err) {
  const Tokenizer *t = e->tok;
  if (n > INT32_MAX - 1) return error_set(err, ERR_ARG, "text piece too long (%zu bytes)", n);
  if (grow_scratch(e, n)) return error_set(err, ERR_NOMEM, "out of memory encoding a %zu-byte piece", n);
  int32_t *id = e->id, *next = e->next, *prev = e->prev;
  int32_t len = (int32_t)n;
  for (int32_t i = 0; i < len; i++) {
    id[i] = t->byte_id[p[i]];
    if (id[i] < 0)
      return error_set(err, ERR_ARG, "byte 0x%02x has no token in this vocabulary and cannot be encoded", p[i]);
    next[i] = i + 1;
    prev[i] = i - 1;
  }
  size_t hn = 0;
  for (int32_t i = 0; i + 1 < len; i++) {
    int32_t r = rank_of(t, id[i], id[i + 1]);
    if (r >= 0 && heap_push(e, &hn, (RankPos){r, i})) return error_set(err, ERR_NOMEM, "out of memory");
  }
  while (hn) {
    RankPos top = heap_pop(e, &hn);
    int32_t i = top.pos, j = next[i];
    /* prev[i] == -2 marks a symbol absorbed into its left neighbour. */
    if (prev[i] == -2 || j >= len || id[i] != t->merge_left[top.rank] || id[j] != t->merge_right[top.rank])
      continue;
    id[i] = t->merge_result[top.rank];
    prev[j] = -2;
    next[i] = next[j];
    if (next[i] < len) prev[next[i]] = i;
    if (prev[i] >= 0) {
      int32_t r = rank_of(t, id[prev[i]], id[i]);
      if (r >= 0 && heap_push(e, &hn, (RankPos){r, prev[i]})) return error_set(err, ERR_NOMEM, "out of memory");
    }
    if (next[i] < len) {
      int32_t r = rank_of(t, id[i], id[next[i]]);
      if (r >= 0 && heap_push(e, &hn, (RankPos){r, i})) return error_set(err, ERR_NOMEM, "out of memory");
    }
  }
  for (int32_t i = 0; i < len; i = next[i])
    if (tok_ids_push(out, id[i], err)) return ERR_NOMEM;
  return 0;
}

static int encode_piece(TokEncoder *e, const uint8_t *p, size_t n, TokIds *out, Error *err) {
  if (n > CACHE_MAX_PIECE) return encode_piece_uncached(e, p, n, out, err);
  uint64_t h = bytes_hash(p, n);
  BytesEntry *hit = bytesmap_find(&e->cache, p, n, h);
  if (hit) {
    if (tok_ids_reserve(out, out->n + hit->aux, err)) return ERR_NOMEM;
    memcpy(out->ids + out->n, e->cache_ids + hit->value, hit->aux * sizeof(int32_t));
    out->n += hit->aux;
    return 0;
  }
  size_t first = out->n;
  int rc = encode_piece_uncached(e, p, n, out, err);
  if (rc) return rc;
  size_t k = out->n - first;
  if (e->n_cache_ids + k > CACHE_MAX_IDS || e->cache.n >= CACHE_MAX_PIECES) {
    bytesmap_clear(&e->cache);
    e->n_cache_ids = 0;
  }
  if (e->n_cache_ids + k > e->cap_cache_ids) {
    size_t c = e->cap_cache_ids ? 2 * e->cap_cache_ids : 1 << 16;
    while (c < e->n_cache_ids + k) c *= 2;
    int32_t *ids = realloc(e->cache_ids, c * sizeof *ids);
    if (!ids) return 0; /* the cache is an optimisation: skip it */
    e->cache_ids = ids;
    e->cap_cache_ids = c;
  }
  int created;
  BytesEntry *slot = bytesmap_upsert(&e->cache, p, n, h, &created);
  if (!slot) return 0;
  slot->value = (int64_t)e->n_cache_ids;
  slot->aux = (uint32_t)k;
  memcpy(e->cache_ids + e->n_cache_ids, out->ids + first, k * sizeof(int32_t));
  e->n_cache_ids += k;
  return 0;
}

/* Encodes text that holds no added token. */
static int encode_segment(TokEncoder *e, const uint8_t *text, size_t len, TokIds *out, Error *err) {
  if (len && e->tok->add_prefix_space && text[0] != ' ') {
    if (len + 1 > e->cap_prefixed) {
      uint8_t *b = realloc(e->prefixed, len + 1);
      if (!b) return error_set(err, ERR_NOMEM, "out of memory encoding %zu bytes", len);
      e->prefixed = b;
      e->cap_prefixed = len + 1;
    }
    e->prefixed[0] = ' ';
    memcpy(e->prefixed + 1, text, len);
    text = e->prefixed;
    len++;
  }
  for (size_t pos = 0; pos < len;) {
    size_t n = tok_pretok_next(text, len, pos);
    int rc = encode_piece(e, text + pos, n, out, err);
    if (rc) return rc;
    pos += n;
  }
  return 0;
}

/* Earliest added token at or after pos (longest on a tie); -1 when none.
 * next_at caches each token's next occurrence so the text is scanned once
 * per token, not once per match. */
static int next_added(const Tokenizer *t, const uint8_t *text, size_t len, size_t pos, size_t *next_at,
                      size_t *where) {
  int best = -1;
  size_t best_at = len, best_len = 0;
  for (int k = 0; k < t->n_added; k++) {
    const char *c = t->added_tokens[k].content;
    size_t cl = strlen(c);
    if (cl == 0) continue; /* never matches: it would not advance */
    if (next_at[k] < pos || next_at[k] == SIZE_MAX - 1) {
      const uint8_t *hit = len - pos >= cl ? memmem(text + pos, len - pos, c, cl) : NULL;
      next_at[k] = hit ? (size_t)(hit - text) : SIZE_MAX;
    }
    if (next_at[k] == SIZE_MAX) continue;
    if (next_at[k] < best_at || (next_at[k] == best_at && cl > best_len)) {
      best = k;
      best_at = next_at[k];
      best_len = cl;
    }
  }
  *where = best_at;
  return best;
}

int tok_encode(TokEncoder *e, const uint8_t *text, size_t len, int flags, TokIds *out, Error *err) {
  const Tokenizer *t = e->tok;
  if (!(flags & TOK_ENCODE_SPECIAL) || t->n_added == 0) return encode_segment(e, text, len, out, err);
  size_t *next_at = malloc((size_t)t->n_added * sizeof *next_at);
  if (!next_at) return error_set(err, ERR_NOMEM, "out of memory");
  for (int k = 0; k < t->n_added; k++) next_at[k] = SIZE_MAX - 1; /* not searched yet */
  size_t pos = 0;
  int rc = 0;
  while (!rc && pos < len) {
    size_t at;
    int k = next_added(t, text, len, pos, next_at, &at);
    if (k < 0) {
      rc = encode_segment(e, text + pos, len - pos, out, err);
      break;
    }
    rc = encode_segment(e, text + pos, at - pos, out, err);
    if (!rc) rc = tok_ids_push(out, t->added_tokens[k].id, err);
    pos = at + strlen(t->added_tokens[k].content);
  }
  free(next_at);
  return rc;
}

int tok_decode(const Tokenizer *t, const int32_t *ids, size_t n, uint8_t **buf, size_t *len, size_t *cap,
               Error *err) {
  for (size_t i = 0; i < n; i++) {
    size_t tl;
    const uint8_t *b = tok_token_bytes(t, ids[i], &tl);
    if (!b)
      return error_set(err, ERR_ARG, "cannot decode id %d at position %zu: no token has that id (vocab size %d)",
                       (int)ids[i], i, t->n_ids);
    if (*len + tl > *cap) {
      size_t c = *cap ? *cap : 4096;
      while (c < *len + tl) c *= 2;
      uint8_t *nb = realloc(*buf, c);
      if (!nb) return error_set(err, ERR_NOMEM, "out of memory decoding %zu ids", n);
      *buf = nb;
      *cap = c;
    }
    memcpy(*buf + *len, b, tl);
    *len += tl;
  }
  return 0;
}
