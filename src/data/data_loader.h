/* Training and validation batches from token shards.
 *
 * A shard of n tokens holds floor((n - 1) / T) windows of T + 1 tokens,
 * starting every T tokens (inputs are the first T, targets the last T, so
 * consecutive windows share one token). The windows of all shards form one
 * index space [0, num_windows).
 *
 * Training order: in epoch e, position p reads window perm_e(p), where perm_e
 * is a pseudo-random permutation of [0, num_windows) keyed by (seed, e) — a
 * Feistel network over the next power of two, cycle-walked into range. It
 * mixes windows across and within shards without storing anything, so the
 * loader's whole state is {seed, epoch, position} (DataLoaderState), which a
 * checkpoint can save and restore.
 *
 * Data parallelism: each step consumes world * B consecutive positions; rank r
 * takes positions [r*B, (r+1)*B) of them. With world = 1 that is the plain
 * sequence. Positions that run past the end of an epoch continue at the start
 * of the next one.
 *
 * Validation (ValLoader) walks a fixed list of windows evenly spread over the
 * validation shards, the same list on every call, independent of any seed. */
#ifndef FIVEFOLD_DATA_DATA_LOADER_H
#define FIVEFOLD_DATA_DATA_LOADER_H

#include <stdint.h>

#include "base/error.h"
#include "data/token_shard.h"

/* Shards cut into windows of T + 1 tokens. */
typedef struct TokenWindows {
  TokenShard *shards;
  int num_shards;
  uint64_t *first_window; /* [num_shards + 1]: prefix sums of windows per shard */
  uint64_t num_windows;
  uint64_t num_tokens; /* over all shards */
  int T;
  uint32_t vocab_size; /* largest header vocab among the shards */
} TokenWindows;

/* Opens every shard; rejects a shard whose header vocab exceeds max_vocab
 * (the model's vocab_size; 0 = no limit) and scans tokens when check_tokens.
 * `what` names the data set in messages ("data.train"). */
int token_windows_open(TokenWindows *w, const char *const *paths, int num_paths, int T, uint32_t max_vocab,
                       int check_tokens, const char *what, Error *err);
void token_windows_close(TokenWindows *w);
/* Where window `index` lives. */
void token_windows_locate(const TokenWindows *w, uint64_t index, int *shard, uint64_t *start_token);
/* Copies window `index` into inputs[T] and targets[T], after checking that
 * its shard has not changed since it was opened (ERR_FORMAT naming it). */
int token_windows_read(const TokenWindows *w, uint64_t index, int *inputs, int *targets, Error *err);

/* The whole resumable state of the training order. */
typedef struct DataLoaderState {
  uint64_t seed;
  uint64_t epoch;
  uint64_t position; /* next position within the epoch, [0, num_windows) */
} DataLoaderState;

typedef struct DataLoader {
  TokenWindows windows;
  int B, rank, world;
  DataLoaderState state;
} DataLoader;

int data_loader_open(DataLoader *dl, const char *const *paths, int num_paths, int B, int T, int rank, int world,
                     uint64_t seed, uint32_t max_vocab, const char *what, Error *err);
void data_loader_close(DataLoader *dl);

/* Next batch of this rank: inputs and targets [B, T]. Optionally the window
 * indices used (window_ids[B], may be NULL). Fails (the position unchanged)
 * when a shard changed since it was opened. */
int data_loader_next(DataLoader *dl, int *inputs, int *targets, uint64_t *window_ids, Error *err);

/* The window read at (epoch, position) under `seed`: perm_epoch(position). */
uint64_t data_loader_window_at(uint64_t seed, uint64_t epoch, uint64_t position, uint64_t num_windows);

/* Fixed validation windows. */
typedef struct ValLoader {
  TokenWindows windows;
  int B, rank, world;
  int num_batches;   /* batches per full pass for this rank */
  int next_batch;
  uint64_t num_used; /* windows in the fixed list (all ranks) */
  int padded;        /* opened by val_loader_open_windows: entries past num_used are padding */
} ValLoader;

/* Uses num_batches * B * world windows (fewer when the data has fewer: then
 * num_batches shrinks and each window appears at most once). The list
 * depends on B and world: the trainer uses val_loader_open_windows. */
int val_loader_open(ValLoader *vl, const char *const *paths, int num_paths, int B, int T, int rank, int world,
                    int num_batches, uint32_t max_vocab, const char *what, Error *err);
/* A fixed list of num_windows windows (at most every window once), the same
 * whatever B and world are: window j of the list is floor(j N / K) of the N
 * windows. Rank r of `world` reads list entries b B world + r B + i in batch
 * b; every rank has the same ceil(K / (B world)) batches, and entries past
 * the list's end are padding: a copy of the first window with every target
 * -1 (no loss, no token counted; window id UINT64_MAX). Sums over the ranks
 * then cover exactly the K windows under any layout. */
int val_loader_open_windows(ValLoader *vl, const char *const *paths, int num_paths, int B, int T, int rank,
                            int world, uint64_t num_windows, uint32_t max_vocab, const char *what, Error *err);
void val_loader_close(ValLoader *vl);
void val_loader_reset(ValLoader *vl);
/* Next batch of the pass into inputs and targets; *has_batch = 0 when the
 * pass is over. Fails when a shard changed since it was opened. */
int val_loader_next(ValLoader *vl, int *inputs, int *targets, uint64_t *window_ids, int *has_batch, Error *err);

#endif
