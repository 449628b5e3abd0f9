/* Fuzz harness of the token shard reader (src/data/token_shard.h) and of
 * the windows the data loader cuts from shards (src/data/data_loader.h).
 *
 * Each input is a would-be shard file. token_shard_open must accept it only
 * when the header matches the layout and the file size; an accepted shard
 * must read back exactly the little-endian tokens of the input, all below
 * the header's vocab size when the scan was asked for. The shard then goes
 * through token_windows_open, data_loader_open and val_loader_open (as rank
 * 1 of 2) with a short sequence length taken from the input, and windows and
 * batches are read. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */

#include "data/data_loader.h"
#include "data/token_shard.h"

static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void check_shard(const TokenShard *s, const uint8_t *data, size_t size, int checked) {
  size_t width = token_shard_dtype_bytes(s->dtype);
  if (size < TOKEN_SHARD_HEADER_BYTES || width == 0 || s->count != le(data + 16, 8) || s->vocab_size != le(data + 24, 4) ||
      s->dtype != le(data + 12, 4) || (uint64_t)(size - TOKEN_SHARD_HEADER_BYTES) != s->count * width)
    fuzz_fail("token_shard_open", "accepted a shard whose header does not match the file");
  int out[256];
  for (uint64_t at = 0; at < s->count; at += 256) {
    size_t n = s->count - at < 256 ? (size_t)(s->count - at) : 256;
    token_shard_read(s, at, n, out);
    for (size_t i = 0; i < n; i++) {
      uint32_t want = (uint32_t)le(data + TOKEN_SHARD_HEADER_BYTES + (at + i) * width, (int)width);
      if ((uint32_t)out[i] != want || token_shard_get(s, at + i) != want)
        fuzz_fail("token_shard_read", "a token other than the file's");
      if (checked && want >= s->vocab_size) fuzz_fail("token_shard_open", "a checked token >= vocab size");
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_path(data, size);
  TokenShard s;
  Error err;
  int rc_checked = -1;
  for (int checked = 0; checked <= 1; checked++) {
    fuzz_error_reset(&err);
    int rc = token_shard_open(&s, path, checked, &err);
    fuzz_check_result(rc, &err, "token_shard_open");
    if (rc == 0) {
      check_shard(&s, data, size, checked);
      token_shard_close(&s);
    }
    if (checked) rc_checked = rc;
  }
  if (rc_checked) return 0;

  /* Short sequences, so that small inputs still hold a window. */
  int T = 1 + (size ? data[size - 1] % 8 : 0);
  const char *paths[2] = {path, path};
  TokenWindows w;
  fuzz_error_reset(&err);
  int rc = token_windows_open(&w, paths, 2, T, 0, 1, "fuzz.data", &err);
  fuzz_check_result(rc, &err, "token_windows_open");
  if (rc == 0) {
    int inputs[8], targets[8];
    for (uint64_t i = 0; i < w.num_windows && i < 64; i++) {
      if (token_windows_read(&w, w.num_windows - 1 - i, inputs, targets, &err))
        fuzz_fail("token_windows_read", "an unchanged shard was reported changed");
      for (int k = 0; k + 1 < T; k++)
        if (inputs[k + 1] != targets[k]) fuzz_fail("token_windows_read", "targets are not the inputs shifted by one");
    }
    token_windows_close(&w);
  }

  DataLoader dl;
  uint32_t max_vocab = (uint32_t)le(data + 24, 4); /* the shard's own: accepted */
  fuzz_error_reset(&err);
  rc = data_loader_open(&dl, paths, 1, 2, T, 0, 1, 1234, max_vocab, "fuzz.data", &err);
  fuzz_check_result(rc, &err, "data_loader_open");
  if (rc == 0) {
    int inputs[16], targets[16];
    uint64_t ids[2];
    for (int step = 0; step < 4; step++) {
      if (data_loader_next(&dl, inputs, targets, ids, &err))
        fuzz_fail("data_loader_next", "an unchanged shard was reported changed");
      if (ids[0] >= dl.windows.num_windows || ids[1] >= dl.windows.num_windows)
        fuzz_fail("data_loader_next", "a window index out of range");
    }
    data_loader_close(&dl);
  }

  ValLoader vl;
  fuzz_error_reset(&err);
  rc = val_loader_open(&vl, paths, 2, 2, T, 1, 2, 3, max_vocab, "fuzz.val", &err);
  fuzz_check_result(rc, &err, "val_loader_open");
  if (rc == 0) {
    int inputs[16], targets[16];
    uint64_t ids[2];
    int batches = 0, has_batch = 0;
    for (;;) {
      if (val_loader_next(&vl, inputs, targets, ids, &has_batch, &err))
        fuzz_fail("val_loader_next", "an unchanged shard was reported changed");
      if (!has_batch) break;
      if (ids[0] >= vl.windows.num_windows || ids[1] >= vl.windows.num_windows)
        fuzz_fail("val_loader_next", "a window index out of range");
      if (++batches > vl.num_batches) fuzz_fail("val_loader_next", "more batches than num_batches");
    }
    if (batches != vl.num_batches) fuzz_fail("val_loader_next", "fewer batches than num_batches");
    val_loader_close(&vl);
  }
  return 0;
}
