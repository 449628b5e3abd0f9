/* Internals shared by the tokenizer's source files: the Tokenizer struct, a
 * pair -> int hash map (merge ranks, training pair index) and a
 * byte-string -> value hash map (word counts, encoder cache, vocab lookup). */
#ifndef FIVEFOLD_TOK_INTERNAL_H
#define FIVEFOLD_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "tok/tokenizer.h"

/* ---- (left, right) -> int32 ---- */

#define PAIR_EMPTY UINT64_MAX

typedef struct PairMap {
  uint64_t *keys;
  int32_t *vals;
  size_t cap, n; /* cap is a power of two, at most half full */
} PairMap;

static inline uint64_t pair_key(int32_t left, int32_t right) {
  return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

static inline uint64_t tok_mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

int pairmap_init(PairMap *m, size_t expected);
void pairmap_free(PairMap *m);
/* Inserts or overwrites; returns 0 or ERR_NOMEM. */
int pairmap_put(PairMap *m, uint64_t key, int32_t val);

static inline int32_t pairmap_get(const PairMap *m, uint64_t key) {
  size_t mask = m->cap - 1;
  for (size_t i = tok_mix64(key) & mask;; i = (i + 1) & mask) {
    if (m->keys[i] == key) return m->vals[i];
    if (m->keys[i] == PAIR_EMPTY) return -1;
  }
}

/* ---- byte string -> (int64 value, uint32 aux) ---- */

typedef struct BytesEntry {
  uint64_t hash; /* 0 marks an empty slot (real hashes are forced odd) */
  size_t key_off;
  uint32_t key_len;
  uint32_t aux;
  int64_t value;
} BytesEntry;

typedef struct BytesMap {
  BytesEntry *slots;
  size_t cap, n;
  uint8_t *keys; /* arena holding every key */
  size_t keys_len, keys_cap;
} BytesMap;

uint64_t bytes_hash(const uint8_t *p, size_t n);
int bytesmap_init(BytesMap *m, size_t expected);
void bytesmap_free(BytesMap *m);
void bytesmap_clear(BytesMap *m);
/* Entry for the key or NULL. */
BytesEntry *bytesmap_find(const BytesMap *m, const uint8_t *key, size_t n, uint64_t hash);
/* Entry for the key, created with value 0 / aux 0 when absent (*created set
 * to 1 then); NULL when out of memory. The pointer lasts until the next
 * insertion. */
BytesEntry *bytesmap_upsert(BytesMap *m, const uint8_t *key, size_t n, uint64_t hash, int *created);

static inline const uint8_t *bytesmap_key(const BytesMap *m, const BytesEntry *e) {
  return m->keys + e->key_off;
}

/* ---- the tokenizer ---- */

typedef struct TokAdded {
  int32_t id;
  char *content;
  uint8_t single_word, lstrip, rstrip, normalized, special;
} TokAdded;

struct Tokenizer {
  int n_ids;          /* highest id + 1 */
  size_t *tok_off;    /* per id: offset of its bytes in pool */
  int32_t *tok_len;   /* per id: length, -1 for a hole */
  uint8_t *pool;
  size_t pool_len, pool_cap;
  uint8_t *added;     /* per id: 1 when an added token */
  int32_t byte_id[256];
  int n_merges;
  int32_t *merge_left, *merge_right, *merge_result;
  PairMap ranks;      /* pair_key(left, right) -> rank */
  int n_added;
  TokAdded *added_tokens;
  int add_prefix_space;
  int has_post_processor; /* a ByteLevel post_processor is written back */
};

/* Allocates an empty tokenizer with n_ids holes and room for n_merges. */
int tok_alloc(Tokenizer **out, int n_ids, int n_merges, Error *err);
/* Gives id the bytes (the id must still be a hole). */
int tok_set_token(Tokenizer *tok, int32_t id, const uint8_t *bytes, size_t n, Error *err);
/* Appends an added token (content copied) and marks its id. */
int tok_add_added(Tokenizer *tok, int32_t id, const char *content, int special, Error *err);
/* Fills byte_id and the rank map from the tokens and merge arrays; checks
 * every merge's result is the concatenation of its parts and that no pair
 * appears twice. `where` prefixes messages. */
int tok_finish(Tokenizer *tok, const char *where, Error *err);

#endif
