/* Shared by the export and import tests: a scratch directory under
 * $TMPDIR, removed with everything in it at exit, paths inside it, and a
 * small model config. */
#ifndef FIVEFOLD_TESTS_EXPORT_TEST_UTIL_H
#define FIVEFOLD_TESTS_EXPORT_TEST_UTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "model/config.h"

static char g_scratch[512];

static int scratch_remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void scratch_remove(void) {
  if (g_scratch[0]) nftw(g_scratch, scratch_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static inline const char *scratch_dir(void) {
  if (g_scratch[0]) return g_scratch;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_scratch, sizeof g_scratch, "%s/fivefold-export-test-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(g_scratch)) abort();
  atexit(scratch_remove);
  return g_scratch;
}

/* scratch_dir()/name in one of eight rotating static buffers. */
static inline const char *scratch_path(const char *name) {
  static char bufs[8][1024];
  static int next = 0;
  char *b = bufs[next++ % 8];
  snprintf(b, 1024, "%s/%s", scratch_dir(), name);
  return b;
}

/* A small decoder (MoE in every layer when moe) with GQA and a head_dim
 * other than hidden / heads. */
static inline void base_config(ModelConfig *c, int moe, int tied) {
  model_config_defaults(c);
  c->vocab_size = 300;
  c->hidden_size = 16;
  c->num_layers = 3;
  c->num_heads = 4;
  c->num_kv_heads = 2;
  c->head_dim = 6;
  c->intermediate_size = 24;
  c->max_position_embeddings = 128;
  c->rope_theta = 5e5f;
  c->rms_norm_eps = 1e-6f;
  c->tie_word_embeddings = tied;
  if (moe) {
    c->num_experts = 3;
    c->top_k = 2;
    c->moe_intermediate_size = 10;
    c->norm_topk_prob = 1;
    model_config_set_moe_layer_freq(c, 1);
  }
}

#endif
