/* Windows over token shards, the seeded per-epoch permutation that orders
 * them for training, and the fixed validation walk. See data_loader.h. */
#include "data/data_loader.h"

#include <stdlib.h>
#include <string.h>

#include "base/rng.h"

int token_windows_open(TokenWindows *w, const char *const *paths, int num_paths, int T, uint32_t max_vocab,
                       int check_tokens, const char *what, Error *err) {
  memset(w, 0, sizeof *w);
  if (num_paths <= 0) return error_set(err, ERR_CONFIG, "%s: no token shards given (expected at least one)", what);
  if (T <= 0) return error_set(err, ERR_ARG, "%s: sequence length must be positive, got %d", what, T);
  w->T = T;
  w->shards = calloc((size_t)num_paths, sizeof *w->shards);
  w->first_window = calloc((size_t)num_paths + 1, sizeof *w->first_window);
  if (!w->shards || !w->first_window) {
    token_windows_close(w);
    return error_set(err, ERR_NOMEM, "%s: out of memory for %d shards", what, num_paths);
  }
  for (int i = 0; i < num_paths; i++) {
    TokenShard *s = &w->shards[i];
    int rc = token_shard_open(s, paths[i], check_tokens, err);
    if (rc) {
      token_windows_close(w);
      return error_wrap(err, "%s", what);
    }
    w->num_shards = i + 1;
    if (max_vocab && s->vocab_size > max_vocab) {
      error_set(err, ERR_CONFIG,
                "%s: shard %s has vocab size %u but the model's vocab_size is %u (expected shard vocab <= model "
                "vocab; tokenize with a smaller vocabulary or enlarge the model)",
                what, paths[i], s->vocab_size, max_vocab);
      token_windows_close(w);
      return ERR_CONFIG;
    }
    if (s->vocab_size > w->vocab_size) w->vocab_size = s->vocab_size;
    uint64_t windows = s->count > 0 ? (s->count - 1) / (uint64_t)T : 0;
    w->first_window[i + 1] = w->first_window[i] + windows;
    w->num_tokens += s->count;
  }
  w->num_windows = w->first_window[num_paths];
  if (w->num_windows == 0) {
    error_set(err, ERR_CONFIG,
              "%s: %llu tokens in %d shard(s) give no window of seq_len + 1 = %d tokens (expected a shard with at "
              "least %d tokens)",
              what, (unsigned long long)w->num_tokens, num_paths, T + 1, T + 1);
    token_windows_close(w);
    return ERR_CONFIG;
  }
  return 0;
}

void token_windows_close(TokenWindows *w) {
  if (w->shards)
    for (int i = 0; i < w->num_shards; i++) token_shard_close(&w->shards[i]);
  free(w->shards);
  free(w->first_window);
  memset(w, 0, sizeof *w);
}

void token_windows_locate(const TokenWindows *w, uint64_t index, int *shard, uint64_t *start_token) {
  /* Binary search for the shard whose window range holds index. */
  int lo = 0, hi = w->num_shards - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (w->first_window[mid] <= index) lo = mid;
    else hi = mid - 1;
  }
  *shard = lo;
  *start_token = (index - w->first_window[lo]) * (uint64_t)w->T;
}

int token_windows_read(const TokenWindows *w, uint64_t index, int *inputs, int *targets, Error *err) {
  int shard;
  uint64_t start;
  token_windows_locate(w, index, &shard, &start);
  const TokenShard *s = &w->shards[shard];
  /* Before the read: a truncated shard would fault there (SIGBUS). */
  int rc = token_shard_check_unchanged(s, err);
  if (rc) return rc;
  token_shard_read(s, start, (size_t)w->T, inputs);
  token_shard_read(s, start + 1, (size_t)w->T, targets);
  return 0;
}

/* ---- training order ---- */

#define FEISTEL_ROUNDS 4

/* A bijection on [0, 2^(2*half)) keyed by (seed, epoch). */
static uint64_t feistel(uint64_t x, int half, uint64_t seed, uint64_t stream) {
  uint64_t mask = (1ULL << half) - 1;
  uint64_t left = x >> half, right = x & mask;
  for (uint64_t round = 0; round < FEISTEL_ROUNDS; round++) {
    uint64_t f = rng_u64(seed, stream, (round << 58) ^ right) & mask;
    uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return left << half | right;
}

uint64_t data_loader_window_at(uint64_t seed, uint64_t epoch, uint64_t position, uint64_t num_windows) {
  if (num_windows <= 1) return 0;
  int bits = 1;
  while (bits < 64 && (1ULL << bits) < num_windows) bits++;
  if (bits & 1) bits++;
  int half = bits / 2;
  uint64_t stream = rng_stream_id("data_loader.epoch") ^ rng_hash64(epoch);
  /* Cycle-walking: the domain is < 4x num_windows, so a few rounds at most
   * on average; it stays a bijection on [0, num_windows). */
  uint64_t x = position % num_windows;
  do x = feistel(x, half, seed, stream);
  while (x >= num_windows);
  return x;
}

int data_loader_open(DataLoader *dl, const char *const *paths, int num_paths, int B, int T, int rank, int world,
                     uint64_t seed, uint32_t max_vocab, const char *what, Error *err) {
  memset(dl, 0, sizeof *dl);
  if (B <= 0) return error_set(err, ERR_ARG, "%s: micro-batch size must be positive, got %d", what, B);
  if (world <= 0 || rank < 0 || rank >= world)
    return error_set(err, ERR_ARG, "%s: rank %d is outside a world of %d ranks", what, rank, world);
  int rc = token_windows_open(&dl->windows, paths, num_paths, T, max_vocab, 1, what, err);
  if (rc) return rc;
  dl->B = B;
  dl->rank = rank;
  dl->world = world;
  dl->state.seed = seed;
  return 0;
}

void data_loader_close(DataLoader *dl) {
  token_windows_close(&dl->windows);
  memset(dl, 0, sizeof *dl);
}

/* (epoch, position) advanced by k positions, wrapping into later epochs. */
static void advance(uint64_t *epoch, uint64_t *position, uint64_t k, uint64_t num_windows) {
  uint64_t p = *position + k;
  *epoch += p / num_windows;
  *position = p % num_windows;
}

int data_loader_next(DataLoader *dl, int *inputs, int *targets, uint64_t *window_ids, Error *err) {
  const TokenWindows *w = &dl->windows;
  uint64_t n = w->num_windows;
  for (int b = 0; b < dl->B; b++) {
    uint64_t epoch = dl->state.epoch, pos = dl->state.position;
    advance(&epoch, &pos, (uint64_t)dl->rank * (uint64_t)dl->B + (uint64_t)b, n);
    uint64_t id = data_loader_window_at(dl->state.seed, epoch, pos, n);
    int rc = token_windows_read(w, id, inputs + (size_t)b * w->T, targets + (size_t)b * w->T, err);
    if (rc) return rc;
    if (window_ids) window_ids[b] = id;
  }
  advance(&dl->state.epoch, &dl->state.position, (uint64_t)dl->world * (uint64_t)dl->B, n);
  return 0;
}

/* ---- validation ---- */

int val_loader_open(ValLoader *vl, const char *const *paths, int num_paths, int B, int T, int rank, int world,
                    int num_batches, uint32_t max_vocab, const char *what, Error *err) {
  memset(vl, 0, sizeof *vl);
  if (B <= 0) return error_set(err, ERR_ARG, "%s: micro-batch size must be positive, got %d", what, B);
  if (world <= 0 || rank < 0 || rank >= world)
    return error_set(err, ERR_ARG, "%s: rank %d is outside a world of %d ranks", what, rank, world);
  if (num_batches <= 0) return error_set(err, ERR_ARG, "%s: eval batches must be positive, got %d", what, num_batches);
  int rc = token_windows_open(&vl->windows, paths, num_paths, T, max_vocab, 1, what, err);
  if (rc) return rc;
  uint64_t per_batch = (uint64_t)B * (uint64_t)world;
  uint64_t available = vl->windows.num_windows / per_batch;
  if (available == 0) {
    error_set(err, ERR_CONFIG,
              "%s: %llu windows of %d tokens are fewer than one validation batch of %llu windows (expected more "
              "validation data or a smaller micro_batch_size / seq_len)",
              what, (unsigned long long)vl->windows.num_windows, T + 1, (unsigned long long)per_batch);
    token_windows_close(&vl->windows);
    return ERR_CONFIG;
  }
  vl->num_batches = (uint64_t)num_batches < available ? num_batches : (int)available;
  vl->num_used = (uint64_t)vl->num_batches * per_batch;
  vl->B = B;
  vl->rank = rank;
  vl->world = world;
  return 0;
}

int val_loader_open_windows(ValLoader *vl, const char *const *paths, int num_paths, int B, int T, int rank,
                            int world, uint64_t num_windows, uint32_t max_vocab, const char *what, Error *err) {
  memset(vl, 0, sizeof *vl);
  if (B <= 0) return error_set(err, ERR_ARG, "%s: micro-batch size must be positive, got %d", what, B);
  if (world <= 0 || rank < 0 || rank >= world)
    return error_set(err, ERR_ARG, "%s: rank %d is outside a world of %d ranks", what, rank, world);
  if (num_windows == 0) return error_set(err, ERR_ARG, "%s: eval windows must be positive", what);
  int rc = token_windows_open(&vl->windows, paths, num_paths, T, max_vocab, 1, what, err);
  if (rc) return rc;
  if (vl->windows.num_windows == 0) {
    error_set(err, ERR_CONFIG, "%s: no window of %d tokens in the validation data (expected more data or a shorter "
              "seq_len)", what, T + 1);
    token_windows_close(&vl->windows);
    return ERR_CONFIG;
  }
  vl->num_used = num_windows < vl->windows.num_windows ? num_windows : vl->windows.num_windows;
  uint64_t per_batch = (uint64_t)B * (uint64_t)world;
  vl->num_batches = (int)((vl->num_used + per_batch - 1) / per_batch);
  vl->B = B;
  vl->rank = rank;
  vl->world = world;
  vl->padded = 1;
  return 0;
}

void val_loader_close(ValLoader *vl) {
  token_windows_close(&vl->windows);
  memset(vl, 0, sizeof *vl);
}

void val_loader_reset(ValLoader *vl) { vl->next_batch = 0; }

int val_loader_next(ValLoader *vl, int *inputs, int *targets, uint64_t *window_ids, int *has_batch, Error *err) {
  *has_batch = vl->next_batch < vl->num_batches;
  if (!*has_batch) return 0;
  const TokenWindows *w = &vl->windows;
  uint64_t base = (uint64_t)vl->next_batch * vl->B * vl->world + (uint64_t)vl->rank * vl->B;
  for (int b = 0; b < vl->B; b++) {
    /* Evenly spread: the j-th used window is floor(j * N / K). */
    uint64_t j = base + (uint64_t)b;
    if (vl->padded && j >= vl->num_used) {
      int *in = inputs + (size_t)b * w->T, *tg = targets + (size_t)b * w->T;
      int rc = token_windows_read(w, 0, in, tg, err);
      if (rc) return rc;
      for (int t = 0; t < w->T; t++) tg[t] = -1;
      if (window_ids) window_ids[b] = UINT64_MAX;
      continue;
    }
    uint64_t id = (uint64_t)((unsigned __int128)j * w->num_windows / vl->num_used);
    int rc = token_windows_read(w, id, inputs + (size_t)b * w->T, targets + (size_t)b * w->T, err);
    if (rc) return rc;
    if (window_ids) window_ids[b] = id;
  }
  vl->next_batch++;
  return 0;
}
