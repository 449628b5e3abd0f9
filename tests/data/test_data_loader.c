/* Data loader: windows always lie inside one shard and carry the right
 * targets; the per-epoch order is a permutation, reproducible from the seed,
 * different across seeds and epochs, mixes shards, resumes from its state,
 * and splits by data-parallel rank; validation always walks the same
 * windows, and a fixed list of K windows (val_loader_open_windows) is the
 * same under any micro-batch and rank count, padding masked. Shards hold
 * position-encoded tokens (shard k, position i -> k * 100000 + i) so every
 * window can be traced back to its origin. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "data/data_loader.h"
#include "train/train_test_util.h"

/* val_loader_next that must not fail: 1 while the pass has a batch. */
static int next_val_batch(ValLoader *vl, int *inputs, int *targets, uint64_t *ids) {
  int has_batch = 0;
  assert_int_equal(val_loader_next(vl, inputs, targets, ids, &has_batch, NULL), 0);
  return has_batch;
}

#define NUM_SHARDS 3
#define T 16
static const uint64_t SHARD_TOKENS[NUM_SHARDS] = {1001, 517, 2050};
static const char *g_paths[NUM_SHARDS];
/* (1000/16) + (516/16) + (2049/16) */
#define EXPECTED_WINDOWS (62 + 32 + 128)

static int setup(void **state) {
  (void)state;
  static const char *names[NUM_SHARDS] = {"a.bin", "b.bin", "c.bin"};
  for (int k = 0; k < NUM_SHARDS; k++) {
    uint32_t *tok = malloc(sizeof(uint32_t) * SHARD_TOKENS[k]);
    for (uint64_t i = 0; i < SHARD_TOKENS[k]; i++) tok[i] = (uint32_t)(k * 100000 + i);
    g_paths[k] = strdup(scratch_path(names[k]));
    Error err = {0};
    if (token_shard_write(g_paths[k], tok, SHARD_TOKENS[k], 1 << 20, &err)) {
      fprintf(stderr, "%s\n", err.msg);
      return -1;
    }
    free(tok);
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int k = 0; k < NUM_SHARDS; k++) free((void *)g_paths[k]);
  return 0;
}

/* Checks one window's tokens: consecutive positions of one shard, starting
 * at a multiple of T, ending inside the shard, targets shifted by one. */
static void check_window(const int *in, const int *tg, uint64_t id) {
  int shard = in[0] / 100000;
  long start = in[0] % 100000;
  assert_true(shard >= 0 && shard < NUM_SHARDS);
  assert_int_equal(start % T, 0);
  assert_true((uint64_t)start + T + 1 <= SHARD_TOKENS[shard]);
  for (int t = 0; t < T; t++) {
    assert_int_equal(in[t], in[0] + t);
    assert_int_equal(tg[t], in[0] + t + 1);
  }
  /* and the id maps to that shard/offset */
  uint64_t first[NUM_SHARDS] = {0, 62, 94};
  assert_int_equal(id, first[shard] + (uint64_t)start / T);
}

static void open_loader(DataLoader *dl, int B, int rank, int world, uint64_t seed) {
  Error err = {0};
  int rc = data_loader_open(dl, g_paths, NUM_SHARDS, B, T, rank, world, seed, 0, "data.train", &err);
  if (rc) fail_msg("%s", err.msg);
}

static void test_windows_inside_data(void **state) {
  (void)state;
  DataLoader dl;
  open_loader(&dl, 5, 0, 1, 42);
  assert_int_equal(dl.windows.num_windows, EXPECTED_WINDOWS);
  int in[5 * T], tg[5 * T];
  uint64_t ids[5];
  for (int step = 0; step < 200; step++) { /* ~4.5 epochs */
    assert_int_equal(data_loader_next(&dl, in, tg, ids, NULL), 0);
    for (int b = 0; b < 5; b++) check_window(in + b * T, tg + b * T, ids[b]);
  }
  assert_int_equal(dl.state.epoch, 200 * 5 / EXPECTED_WINDOWS);
  assert_int_equal(dl.state.position, 200 * 5 % EXPECTED_WINDOWS);
  data_loader_close(&dl);
}

static void test_permutation_is_bijection(void **state) {
  (void)state;
  const uint64_t sizes[] = {1, 2, 3, 7, 64, 65, 1000, 4099};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    uint64_t n = sizes[s];
    unsigned char *seen = calloc(n, 1);
    for (uint64_t epoch = 0; epoch < 3; epoch++) {
      memset(seen, 0, n);
      for (uint64_t p = 0; p < n; p++) {
        uint64_t w = data_loader_window_at(99, epoch, p, n);
        assert_true(w < n);
        assert_false(seen[w]);
        seen[w] = 1;
      }
    }
    free(seen);
  }
}

/* Same seed: same windows. Different seed or epoch: different order. The
 * order is not the identity and mixes shards early. */
static void test_seed_determinism(void **state) {
  (void)state;
  const uint64_t n = EXPECTED_WINDOWS;
  int same_seed_diff = 0, other_seed_diff = 0, other_epoch_diff = 0, identity = 0;
  for (uint64_t p = 0; p < n; p++) {
    uint64_t a = data_loader_window_at(7, 0, p, n);
    same_seed_diff += a != data_loader_window_at(7, 0, p, n);
    other_seed_diff += a != data_loader_window_at(8, 0, p, n);
    other_epoch_diff += a != data_loader_window_at(7, 1, p, n);
    identity += a == p;
  }
  assert_int_equal(same_seed_diff, 0);
  assert_true(other_seed_diff > (int)n / 2);
  assert_true(other_epoch_diff > (int)n / 2);
  assert_true(identity < (int)n / 4);

  /* Through two loaders: identical batches for the same seed. */
  DataLoader a, b, c;
  open_loader(&a, 4, 0, 1, 123);
  open_loader(&b, 4, 0, 1, 123);
  open_loader(&c, 4, 0, 1, 124);
  int ia[4 * T], ta[4 * T], ib[4 * T], tb[4 * T], ic[4 * T], tc[4 * T];
  int differ = 0, shards_seen[NUM_SHARDS] = {0};
  for (int step = 0; step < 30; step++) {
    assert_int_equal(data_loader_next(&a, ia, ta, NULL, NULL), 0);
    assert_int_equal(data_loader_next(&b, ib, tb, NULL, NULL), 0);
    assert_int_equal(data_loader_next(&c, ic, tc, NULL, NULL), 0);
    assert_memory_equal(ia, ib, sizeof ia);
    assert_memory_equal(ta, tb, sizeof ta);
    differ += memcmp(ia, ic, sizeof ia) != 0;
    if (step < 3)
      for (int k = 0; k < 4; k++) shards_seen[ia[k * T] / 100000] = 1;
  }
  assert_true(differ > 25);
  /* 12 windows drawn from a 222-window space spanning three shards. */
  assert_true(shards_seen[0] + shards_seen[1] + shards_seen[2] >= 2);
  data_loader_close(&a);
  data_loader_close(&b);
  data_loader_close(&c);
}

/* Restoring {seed, epoch, position} continues the exact sequence. */
static void test_resume_from_state(void **state) {
  (void)state;
  DataLoader a, b;
  open_loader(&a, 6, 0, 1, 5);
  int in[6 * T], tg[6 * T];
  uint64_t ids_a[6], ids_b[6];
  for (int i = 0; i < 50; i++) assert_int_equal(data_loader_next(&a, in, tg, NULL, NULL), 0); /* crosses an epoch */
  DataLoaderState saved = a.state;
  open_loader(&b, 6, 0, 1, 0);
  b.state = saved;
  for (int i = 0; i < 60; i++) {
    assert_int_equal(data_loader_next(&a, in, tg, ids_a, NULL), 0);
    assert_int_equal(data_loader_next(&b, in, tg, ids_b, NULL), 0);
    assert_memory_equal(ids_a, ids_b, sizeof ids_a);
  }
  data_loader_close(&a);
  data_loader_close(&b);
}

/* Two ranks with batch B see exactly what one rank with batch 2B sees, split
 * in halves. */
static void test_rank_sharding(void **state) {
  (void)state;
  DataLoader r0, r1, whole;
  open_loader(&r0, 3, 0, 2, 77);
  open_loader(&r1, 3, 1, 2, 77);
  open_loader(&whole, 6, 0, 1, 77);
  int in[6 * T], tg[6 * T];
  uint64_t a[3], b[3], w[6];
  for (int step = 0; step < 100; step++) {
    assert_int_equal(data_loader_next(&r0, in, tg, a, NULL), 0);
    assert_int_equal(data_loader_next(&r1, in, tg, b, NULL), 0);
    assert_int_equal(data_loader_next(&whole, in, tg, w, NULL), 0);
    assert_memory_equal(a, w, sizeof a);
    assert_memory_equal(b, w + 3, sizeof b);
  }
  assert_int_equal(r0.state.position, whole.state.position);
  assert_int_equal(r0.state.epoch, whole.state.epoch);
  Error err = {0};
  DataLoader bad;
  assert_int_equal(data_loader_open(&bad, g_paths, NUM_SHARDS, 3, T, 2, 2, 1, 0, "data.train", &err), ERR_ARG);
  data_loader_close(&r0);
  data_loader_close(&r1);
  data_loader_close(&whole);
}

static void test_validation_is_stable(void **state) {
  (void)state;
  ValLoader vl;
  Error err = {0};
  assert_int_equal(val_loader_open(&vl, g_paths, NUM_SHARDS, 4, T, 0, 1, 10, 0, "data.val", &err), 0);
  assert_int_equal(vl.num_batches, 10);
  int in[4 * T], tg[4 * T];
  uint64_t first[40], second[40];
  int n = 0;
  while (next_val_batch(&vl, in, tg, first + 4 * n)) {
    for (int b = 0; b < 4; b++) check_window(in + b * T, tg + b * T, first[4 * n + b]);
    n++;
  }
  assert_int_equal(n, 10);
  val_loader_reset(&vl);
  n = 0;
  while (next_val_batch(&vl, in, tg, second + 4 * n)) n++;
  assert_int_equal(n, 10);
  assert_memory_equal(first, second, sizeof first);
  /* distinct and spread over the whole set (all three shards) */
  for (int i = 1; i < 40; i++) assert_true(first[i] > first[i - 1]);
  assert_true(first[39] >= EXPECTED_WINDOWS - 222 / 40 - 1);
  val_loader_close(&vl);

  /* More batches than the data holds: clipped, each window once. */
  assert_int_equal(val_loader_open(&vl, g_paths, NUM_SHARDS, 4, T, 0, 1, 1000, 0, "data.val", &err), 0);
  assert_int_equal(vl.num_batches, EXPECTED_WINDOWS / 4);
  val_loader_close(&vl);

  /* Fewer windows than one batch: a clear error. */
  assert_int_equal(val_loader_open(&vl, g_paths + 1, 1, 64, T, 0, 1, 2, 0, "data.val", &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "data.val"));
  assert_non_null(strstr(err.msg, "fewer than one validation batch"));
}

/* Collects the window ids every rank of `world` reads from a fixed list of
 * K windows with micro-batches of B, checking each batch: real windows are
 * well formed, padding has every target -1. Returns the batches per rank. */
static int collect_fixed(int B, int world, uint64_t K, uint64_t *ids, int *n_ids) {
  int batches = -1;
  *n_ids = 0;
  for (int r = 0; r < world; r++) {
    ValLoader vl;
    Error err = {0};
    assert_int_equal(val_loader_open_windows(&vl, g_paths, NUM_SHARDS, B, T, r, world, K, 0, "val", &err), 0);
    assert_int_equal(vl.num_used, K);
    int *in = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    uint64_t *got = malloc(sizeof(uint64_t) * B);
    int n = 0;
    while (next_val_batch(&vl, in, tg, got)) {
      n++;
      for (int b = 0; b < B; b++) {
        if (got[b] == UINT64_MAX) {
          for (int t = 0; t < T; t++) assert_int_equal(tg[b * T + t], -1);
          continue;
        }
        check_window(in + b * T, tg + b * T, got[b]);
        ids[(*n_ids)++] = got[b];
      }
    }
    if (batches >= 0) assert_int_equal(n, batches); /* every rank runs the same batches */
    batches = n;
    free(in);
    free(tg);
    free(got);
    val_loader_close(&vl);
  }
  return batches;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The fixed list is the same K windows whatever B and world are. */
static void test_validation_windows_fixed(void **state) {
  (void)state;
  const uint64_t K = 13;
  uint64_t one[64], other[64];
  int n_one, n_other;
  assert_int_equal(collect_fixed(4, 1, K, one, &n_one), 4);   /* 13 windows: 3 full batches and a padded one */
  assert_int_equal(collect_fixed(2, 3, K, other, &n_other), 3); /* 3 ranks x 2: 18 slots, 5 padded */
  assert_int_equal(n_one, (int)K);
  assert_int_equal(n_other, (int)K);
  qsort(one, K, sizeof *one, cmp_u64);
  qsort(other, K, sizeof *other, cmp_u64);
  for (uint64_t i = 0; i < K; i++) {
    assert_int_equal(one[i], other[i]);
    if (i) assert_true(one[i] > one[i - 1]); /* each window once */
  }
  /* More windows asked for than there are: all of them, once. */
  uint64_t all[EXPECTED_WINDOWS + 8];
  int n_all;
  ValLoader vl;
  Error err = {0};
  assert_int_equal(val_loader_open_windows(&vl, g_paths, NUM_SHARDS, 8, T, 0, 1, 100000, 0, "val", &err), 0);
  assert_int_equal(vl.num_used, EXPECTED_WINDOWS);
  val_loader_close(&vl);
  collect_fixed(8, 2, EXPECTED_WINDOWS, all, &n_all);
  assert_int_equal(n_all, EXPECTED_WINDOWS);
}

static void test_open_errors(void **state) {
  (void)state;
  DataLoader dl;
  Error err = {0};
  /* Shard vocab (2^20) larger than the model's. */
  assert_int_equal(data_loader_open(&dl, g_paths, NUM_SHARDS, 2, T, 0, 1, 1, 256, "data.train", &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, g_paths[0]));
  assert_non_null(strstr(err.msg, "vocab"));
  /* Shorter than one window. */
  uint32_t few[5] = {1, 2, 3, 4, 5};
  const char *tiny = scratch_path("tiny.bin");
  assert_int_equal(token_shard_write(tiny, few, 5, 10, &err), 0);
  assert_int_equal(data_loader_open(&dl, &tiny, 1, 2, T, 0, 1, 1, 0, "data.train", &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "data.train"));
  assert_non_null(strstr(err.msg, "17 tokens"));
  /* A missing shard names itself and the data set. */
  const char *missing = scratch_path("missing.bin");
  assert_int_equal(data_loader_open(&dl, &missing, 1, 2, T, 0, 1, 1, 0, "data.train", &err), ERR_IO);
  assert_non_null(strstr(err.msg, "data.train"));
  assert_non_null(strstr(err.msg, missing));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_windows_inside_data),  cmocka_unit_test(test_permutation_is_bijection),
      cmocka_unit_test(test_seed_determinism),     cmocka_unit_test(test_resume_from_state),
      cmocka_unit_test(test_rank_sharding),        cmocka_unit_test(test_validation_is_stable),
      cmocka_unit_test(test_open_errors),          cmocka_unit_test(test_validation_windows_fixed),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
