/* BPE training: count the pre-tokenized words, then repeatedly merge the most
 * frequent adjacent pair.
 *
 * Incremental bookkeeping: every pair has a count (summed over words,
 * weighted by word frequency) and a list of the words it was ever seen in.
 * A merge rewrites only the words on the merged pair's list and adjusts the
 * counts of their pairs. A max-heap orders pairs by (count desc, left id asc,
 * right id asc); its entries may be stale. That is safe because a pair's
 * count never grows after the merge step that creates it (every pair a merge
 * creates contains the new token), so a popped entry whose count is stale is
 * simply pushed back with its current count. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/timer.h"
#include "tok/pretok.h"
#include "tok/tok_internal.h"

typedef struct HeapItem {
  int64_t count;
  uint64_t key; /* pair_key(left, right): smaller wins ties */
  int32_t pair;
} HeapItem;

typedef struct Pair {
  int32_t left, right;
  int64_t count;
  int32_t *words; /* words that contained the pair when it was created or counted */
  int32_t n_words, cap_words;
  int32_t touched_step; /* last merge step that listed it as new */
} Pair;

typedef struct BpeTrainer {
  /* words */
  int32_t n_words;
  int64_t *word_count;
  size_t *word_off;
  int32_t *word_len;
  int32_t *syms;
  /* pairs */
  Pair *pairs;
  int32_t n_pairs, cap_pairs;
  PairMap pair_index;
  /* heap */
  HeapItem *heap;
  size_t heap_n, heap_cap;
  /* pairs created by the current merge step */
  int32_t *fresh;
  size_t n_fresh, cap_fresh;
} BpeTrainer;

static int heap_before(const HeapItem *a, const HeapItem *b) {
  if (a->count != b->count) return a->count > b->count;
  return a->key < b->key;
}

static int heap_push(BpeTrainer *t, int64_t count, int32_t pair) {
  if (t->heap_n == t->heap_cap) {
    size_t c = t->heap_cap ? 2 * t->heap_cap : 1024;
    HeapItem *h = realloc(t->heap, c * sizeof *h);
    if (!h) return ERR_NOMEM;
    t->heap = h;
    t->heap_cap = c;
  }
  HeapItem it = {count, pair_key(t->pairs[pair].left, t->pairs[pair].right), pair};
  size_t i = t->heap_n++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!heap_before(&it, &t->heap[parent])) break;
    t->heap[i] = t->heap[parent];
    i = parent;
  }
  t->heap[i] = it;
  return 0;
}

static HeapItem heap_pop(BpeTrainer *t) {
  HeapItem top = t->heap[0];
  HeapItem last = t->heap[--t->heap_n];
  size_t i = 0, n = t->heap_n;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && heap_before(&t->heap[c + 1], &t->heap[c])) c++;
    if (!heap_before(&t->heap[c], &last)) break;
    t->heap[i] = t->heap[c];
    i = c;
  }
  if (n) t->heap[i] = last;
  return top;
}

/* Index of pair (l, r), created with count 0 when absent; -1 when out of memory. */
static int32_t pair_get_or_add(BpeTrainer *t, int32_t l, int32_t r, int *created) {
  uint64_t key = pair_key(l, r);
  int32_t idx = pairmap_get(&t->pair_index, key);
  *created = 0;
  if (idx >= 0) return idx;
  if (t->n_pairs == t->cap_pairs) {
    int32_t c = t->cap_pairs ? 2 * t->cap_pairs : 4096;
    Pair *p = realloc(t->pairs, (size_t)c * sizeof *p);
    if (!p) return -1;
    t->pairs = p;
    t->cap_pairs = c;
  }
  idx = t->n_pairs++;
  Pair *p = &t->pairs[idx];
  memset(p, 0, sizeof *p);
  p->left = l;
  p->right = r;
  p->touched_step = -1;
  if (pairmap_put(&t->pair_index, key, idx)) return -1;
  *created = 1;
  return idx;
}

static int pair_note_word(Pair *p, int32_t w) {
  if (p->n_words && p->words[p->n_words - 1] == w) return 0;
  if (p->n_words == p->cap_words) {
    int32_t c = p->cap_words ? 2 * p->cap_words : 4;
    int32_t *ws = realloc(p->words, (size_t)c * sizeof *ws);
    if (!ws) return ERR_NOMEM;
    p->words = ws;
    p->cap_words = c;
  }
  p->words[p->n_words++] = w;
  return 0;
}

static void bpe_trainer_free(BpeTrainer *t) {
  free(t->word_count);
  free(t->word_off);
  free(t->word_len);
  free(t->syms);
  for (int32_t i = 0; i < t->n_pairs; i++) free(t->pairs[i].words);
  free(t->pairs);
  pairmap_free(&t->pair_index);
  free(t->heap);
  free(t->fresh);
}

static int count_piece(const uint8_t *piece, size_t len, void *ctx) {
  BytesMap *words = ctx;
  int created;
  BytesEntry *e = bytesmap_upsert(words, piece, len, bytes_hash(piece, len), &created);
  if (!e) return ERR_NOMEM;
  e->value++;
  return 0;
}

/* Turns the word counts into symbol arrays and counts every adjacent pair. */
static int bpe_trainer_setup(BpeTrainer *t, const BytesMap *words, Error *err) {
  size_t n = words->n;
  if (n > INT32_MAX) return error_set(err, ERR_ARG, "too many distinct words (%zu) to train on", n);
  t->n_words = (int32_t)n;
  t->word_count = malloc((n + 1) * sizeof *t->word_count);
  t->word_off = malloc((n + 1) * sizeof *t->word_off);
  t->word_len = malloc((n + 1) * sizeof *t->word_len);
  t->syms = malloc((words->keys_len + 1) * sizeof *t->syms);
  if (!t->word_count || !t->word_off || !t->word_len || !t->syms || pairmap_init(&t->pair_index, 1 << 16))
    return error_set(err, ERR_NOMEM, "out of memory setting up BPE training on %zu words", n);
  int32_t w = 0;
  size_t off = 0;
  for (size_t s = 0; s < words->cap; s++) {
    const BytesEntry *e = &words->slots[s];
    if (!e->hash) continue;
    const uint8_t *key = bytesmap_key(words, e);
    t->word_count[w] = e->value;
    t->word_off[w] = off;
    t->word_len[w] = (int32_t)e->key_len;
    for (uint32_t i = 0; i < e->key_len; i++) t->syms[off + i] = key[i];
    off += e->key_len;
    w++;
  }
  for (w = 0; w < t->n_words; w++) {
    const int32_t *s = t->syms + t->word_off[w];
    for (int32_t i = 0; i + 1 < t->word_len[w]; i++) {
      int created;
      int32_t p = pair_get_or_add(t, s[i], s[i + 1], &created);
      if (p < 0 || pair_note_word(&t->pairs[p], w))
        return error_set(err, ERR_NOMEM, "out of memory counting pairs");
      t->pairs[p].count += t->word_count[w];
    }
  }
  for (int32_t p = 0; p < t->n_pairs; p++)
    if (heap_push(t, t->pairs[p].count, p)) return error_set(err, ERR_NOMEM, "out of memory");
  return 0;
}

/* Adds delta to the count of pair (l, r); a pair that gains from this step's
 * new token x remembers the word and is queued for the heap. */
static int bump(BpeTrainer *t, int32_t l, int32_t r, int64_t delta, int32_t w, int32_t x, int32_t step) {
  int created;
  int32_t p = pair_get_or_add(t, l, r, &created);
  if (p < 0) return ERR_NOMEM;
  Pair *pp = &t->pairs[p];
  pp->count += delta;
  if (delta < 0 || (l != x && r != x)) return 0;
  if (pair_note_word(pp, w)) return ERR_NOMEM;
  if (pp->touched_step != step) {
    pp->touched_step = step;
    if (t->n_fresh == t->cap_fresh) {
      size_t cf = t->cap_fresh ? 2 * t->cap_fresh : 256;
      int32_t *f = realloc(t->fresh, cf * sizeof *f);
      if (!f) return ERR_NOMEM;
      t->fresh = f;
      t->cap_fresh = cf;
    }
    t->fresh[t->n_fresh++] = p;
  }
  return 0;
}

/* Rewrites word w with (a, b) -> x, left to right, and moves only the counts
 * of the pairs around each occurrence: the left neighbour is the symbol
 * already written (possibly an x), the right one the next unread symbol, so
 * back-to-back occurrences ("a b a b", "a a a") come out exact. Cost is a
 * scan of the word plus a few updates per occurrence, so long words (text
 * without spaces) stay cheap. A word with no occurrence is a stale entry of
 * the pair's list and is left alone. */
static int merge_in_word(BpeTrainer *t, int32_t w, int32_t a, int32_t b, int32_t x, int32_t step) {
  int32_t *s = t->syms + t->word_off[w];
  int32_t len = t->word_len[w];
  int64_t c = t->word_count[w];
  int32_t k = 0;
  for (int32_t i = 0; i < len;) {
    if (i + 1 < len && s[i] == a && s[i + 1] == b) {
      if (k > 0 && (bump(t, s[k - 1], a, -c, w, x, step) || bump(t, s[k - 1], x, c, w, x, step))) return ERR_NOMEM;
      if (i + 2 < len && (bump(t, b, s[i + 2], -c, w, x, step) || bump(t, x, s[i + 2], c, w, x, step)))
        return ERR_NOMEM;
      if (bump(t, a, b, -c, w, x, step)) return ERR_NOMEM;
      s[k++] = x;
      i += 2;
    } else {
      s[k++] = s[i++];
    }
  }
  t->word_len[w] = k;
  return 0;
}

static int check_options(const TokTrainOptions *o, const char *const *specials, int n_special, Error *err) {
  if (n_special < 0 || n_special > 1024)
    return error_set(err, ERR_ARG, "n_special must be between 0 and 1024, got %d", n_special);
  if (o->vocab_size < 256 + n_special || o->vocab_size > TOK_MAX_ID)
    return error_set(err, ERR_ARG, "vocab size must be between %d (256 bytes + %d special tokens) and %d, got %d",
                     256 + n_special, n_special, TOK_MAX_ID, o->vocab_size);
  for (int i = 0; i < n_special; i++) {
    if (!specials[i] || !specials[i][0])
      return error_set(err, ERR_ARG, "special token %d is empty", i);
    for (int j = 0; j < i; j++)
      if (strcmp(specials[i], specials[j]) == 0)
        return error_set(err, ERR_ARG, "special token \"%s\" is listed twice", specials[i]);
  }
  return 0;
}

static int build_tokenizer(Tokenizer **out, const int32_t *ml, const int32_t *mr,
                           int n_merges, const char *const *specials, int n_special, Error *err) {
  Tokenizer *tok;
  int rc = tok_alloc(&tok, 256 + n_merges + n_special, n_merges, err);
  if (rc) return rc;
  for (int b = 0; b < 256 && !rc; b++) {
    uint8_t byte = (uint8_t)b;
    rc = tok_set_token(tok, b, &byte, 1, err);
  }
  uint8_t *buf = NULL;
  size_t buf_cap = 0;
  for (int r = 0; r < n_merges && !rc; r++) {
    size_t ll, rl;
    const uint8_t *lb = tok_token_bytes(tok, ml[r], &ll);
    const uint8_t *rb = tok_token_bytes(tok, mr[r], &rl);
    if (ll + rl > buf_cap) {
      buf_cap = 2 * (ll + rl);
      uint8_t *nb = realloc(buf, buf_cap);
      if (!nb) {
        rc = error_set(err, ERR_NOMEM, "out of memory building the vocabulary");
        break;
      }
      buf = nb;
    }
    /* Copy first: the pool may move while the new token is stored. */
    memcpy(buf, lb, ll);
    memcpy(buf + ll, rb, rl);
    tok->merge_left[r] = ml[r];
    tok->merge_right[r] = mr[r];
    tok->merge_result[r] = 256 + r;
    rc = tok_set_token(tok, 256 + r, buf, ll + rl, err);
  }
  free(buf);
  for (int i = 0; i < n_special && !rc; i++) {
    int32_t id = 256 + n_merges + i;
    rc = tok_set_token(tok, id, (const uint8_t *)specials[i], strlen(specials[i]), err);
    if (!rc) rc = tok_add_added(tok, id, specials[i], 1, err);
  }
  tok->has_post_processor = 1;
  if (!rc) rc = tok_finish(tok, "trained tokenizer", err);
  if (rc) {
    tok_free(tok);
    return rc;
  }
  *out = tok;
  return 0;
}

int tok_train(Tokenizer **out, const uint8_t *const *texts, const size_t *lens, int n_texts,
              const TokTrainOptions *opts, Error *err) {
  static const char *default_specials[] = {TOK_EOT};
  *out = NULL;
  const char *const *specials = opts->special_tokens ? opts->special_tokens : default_specials;
  int n_special = opts->special_tokens ? opts->n_special : 1;
  int rc = check_options(opts, specials, n_special, err);
  if (rc) return rc;
  int64_t min_freq = opts->min_frequency > 1 ? opts->min_frequency : 1;
  int target = opts->vocab_size - 256 - n_special;
  double t0 = timer_now();

  BytesMap words;
  if (bytesmap_init(&words, 1 << 16)) return error_set(err, ERR_NOMEM, "out of memory");
  for (int i = 0; i < n_texts; i++) {
    if (tok_pretokenize(texts[i], lens[i], count_piece, &words)) {
      bytesmap_free(&words);
      return error_set(err, ERR_NOMEM, "out of memory counting words");
    }
  }
  BpeTrainer t;
  memset(&t, 0, sizeof t);
  rc = bpe_trainer_setup(&t, &words, err);
  bytesmap_free(&words);
  int32_t *ml = malloc((size_t)(target + 1) * sizeof *ml);
  int32_t *mr = malloc((size_t)(target + 1) * sizeof *mr);
  if (!rc && (!ml || !mr)) rc = error_set(err, ERR_NOMEM, "out of memory");
  double t1 = timer_now();
  if (!rc && opts->verbose)
    log_info("bpe: %d distinct words, %d pairs counted in %.2f s", (int)t.n_words, (int)t.n_pairs, t1 - t0);

  int n_merges = 0;
  while (!rc && n_merges < target && t.heap_n) {
    HeapItem top = heap_pop(&t);
    Pair *p = &t.pairs[top.pair];
    if (top.count != p->count) {
      if (p->count >= min_freq && heap_push(&t, p->count, top.pair)) rc = error_set(err, ERR_NOMEM, "out of memory");
      continue;
    }
    if (p->count < min_freq) break; /* every other count is no larger */
    int32_t a = p->left, b = p->right, x = 256 + n_merges;
    ml[n_merges] = a;
    mr[n_merges] = b;
    t.n_fresh = 0;
    /* The list cannot grow during the step: new pairs all contain x. */
    int32_t *list = p->words, n_list = p->n_words;
    p->words = NULL;
    p->n_words = p->cap_words = 0;
    for (int32_t i = 0; i < n_list && !rc; i++)
      if (merge_in_word(&t, list[i], a, b, x, n_merges)) rc = error_set(err, ERR_NOMEM, "out of memory merging");
    free(list);
    for (size_t i = 0; i < t.n_fresh && !rc; i++) {
      int32_t q = t.fresh[i];
      if (t.pairs[q].count >= min_freq && heap_push(&t, t.pairs[q].count, q))
        rc = error_set(err, ERR_NOMEM, "out of memory");
    }
    n_merges++;
    if (opts->verbose && n_merges % 1024 == 0)
      log_info("bpe: %d merges, last with count %lld", n_merges, (long long)top.count);
  }
  if (!rc && opts->verbose)
    log_info("bpe: learned %d merges in %.2f s%s", n_merges, timer_now() - t1,
             n_merges < target ? " (ran out of pairs before the target vocab size)" : "");
  bpe_trainer_free(&t);
  if (!rc) rc = build_tokenizer(out, ml, mr, n_merges, specials, n_special, err);
  free(ml);
  free(mr);
  return rc;
}
