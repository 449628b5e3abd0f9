/* Shared helpers of the upcycling tests: a scratch directory removed (with
 * everything under it) at exit, a learnable token stream as shards, a tiny
 * dense run config, and a dense checkpoint trained for a few steps.
 * Header-only so each test stays one executable. */
#ifndef FIVEFOLD_TESTS_UPCYCLE_TEST_UTIL_H
#define FIVEFOLD_TESTS_UPCYCLE_TEST_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/rng.h"
#include "data/token_shard.h"
#include "train/trainer.h"

static char g_upc_scratch[512];

static inline void upc_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    struct dirent *e;
    char child[2048];
    while (d && (e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      if (snprintf(child, sizeof child, "%s/%s", path, e->d_name) < (int)sizeof child) upc_remove_tree(child);
    }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

static inline void upc_scratch_remove(void) {
  if (g_upc_scratch[0]) upc_remove_tree(g_upc_scratch);
  g_upc_scratch[0] = '\0';
}

static inline const char *upc_scratch_dir(void) {
  if (g_upc_scratch[0]) return g_upc_scratch;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_upc_scratch, sizeof g_upc_scratch, "%s/fivefold-upcycle-test-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(g_upc_scratch)) {
    perror("mkdtemp");
    abort();
  }
  atexit(upc_scratch_remove);
  return g_upc_scratch;
}

/* upc_scratch_dir()/name in a static rotating buffer. */
static inline const char *upc_path(const char *name) {
  static char bufs[8][1024];
  static int next = 0;
  char *b = bufs[next++ % 8];
  snprintf(b, 1024, "%s/%s", upc_scratch_dir(), name);
  return b;
}

static inline int upc_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

#define UPC_VOCAB 64

/* train.bin / val.bin: mostly a fixed cycle through 64 symbols, with noise,
 * so a few steps lower the loss. */
static inline int upc_write_shards(void) {
  enum { N = 20000 };
  static uint32_t tok[N];
  for (int i = 0; i < N; i++)
    tok[i] = rng_uniform(3, 1, (uint64_t)i) < 0.8 ? (uint32_t)(i * 5 % UPC_VOCAB)
                                                  : (uint32_t)(rng_u64(3, 2, (uint64_t)i) % UPC_VOCAB);
  Error err = {0};
  if (token_shard_write(upc_path("train.bin"), tok, N, UPC_VOCAB, &err) ||
      token_shard_write(upc_path("val.bin"), tok + N / 2, 4000, UPC_VOCAB, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return -1;
  }
  return 0;
}

/* The dense model of the tests: FFN 64 so that granularities 1, 2 and 4
 * all divide it. */
#define UPC_DENSE_MODEL                                                                            \
  "{\"model_type\": \"llama\", \"vocab_size\": 64, \"hidden_size\": 32, \"num_hidden_layers\": 2," \
  " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"intermediate_size\": 64,"            \
  " \"max_position_embeddings\": 64}"

/* A dense run config file in the scratch dir, output in scratch/out_name.
 * One thread: ctest runs tests side by side on few cores. */
static inline const char *upc_write_dense_config(const char *file, const char *out_name, int steps) {
  char text[2048];
  snprintf(text, sizeof text,
           "{\"model\": %s, \"training\": {\"threads\": 1, \"peak_gflops\": 100, \"micro_batch_size\": 4,"
           " \"seq_len\": 32, \"steps\": %d, \"lr\": 0.01, \"warmup_steps\": 2, \"eval_batches\": 4,"
           " \"log_interval\": 1000, \"eval_interval\": 0},"
           " \"data\": {\"train\": \"train.bin\", \"val\": \"val.bin\"}, \"out\": \"%s\"}",
           UPC_DENSE_MODEL, steps, out_name);
  const char *path = upc_path(file);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  fputs(text, f);
  fclose(f);
  return path;
}

/* Trains the dense config for its steps without output and saves its final
 * checkpoint; returns 0 or prints the error. */
static inline int upc_train_dense(const char *config_path) {
  TrainConfig cfg;
  Trainer tr;
  Error err = {0};
  if (train_config_load(&cfg, config_path, &err) || train_config_finalize(&cfg, &err) ||
      trainer_create(&tr, &cfg, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return -1;
  }
  int rc = 0;
  for (int s = 0; s < cfg.steps && !rc; s++) {
    TrainStepResult r;
    rc = trainer_step(&tr, &r, &err);
  }
  if (!rc) rc = trainer_save_checkpoint(&tr, NULL, &err);
  if (rc) fprintf(stderr, "%s\n", err.msg);
  trainer_free(&tr);
  train_config_free(&cfg);
  return rc;
}

#endif
