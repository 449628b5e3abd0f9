/* Checkpoints: CRC-32 against known values; a save/load round trip restores
 * weights, AdamW state, step, data-loader state and config exactly; keep-last-K
 * prunes the oldest; each kind of damage (truncated file, flipped byte,
 * missing file, bad state.json field, foreign tensors) is rejected with a
 * message naming the file, and resolution falls back to the previous good
 * checkpoint with a warning, or fails when none is valid; a stale
 * .tmp-step directory never counts; a run refuses a directory holding another
 * history; the run config's checkpoint and tokenizer fields parse; and
 * N steps + save + resume in a fresh trainer + N steps equals 2N steps, bit
 * for bit; in bf16, loading weights into a model whose bf16 weight cache
 * holds copies of its old weights makes the next forward use the loaded
 * ones (kern/bf16_weights.h). */
#define _GNU_SOURCE /* nftw */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/crc32.h"
#include "base/rng.h"
#include "base/safetensors.h"
#include "ckpt/checkpoint.h"
#include "kern/bf16.h"
#include "kern/bf16_weights.h"
#include "kern/precision.h"
#include "data/token_shard.h"
#include "train/net_transformer.h"
#include "train/trainer.h"

/* ---- scratch space (nested directories, removed at exit) ---- */

static char g_root[512];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void remove_root(void) {
  if (g_root[0]) nftw(g_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *path_of(const char *fmt, ...) {
  static char bufs[8][1024];
  static int next = 0;
  char *b = bufs[next++ % 8];
  char rel[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rel, sizeof rel, fmt, ap);
  va_end(ap);
  snprintf(b, 1024, "%s/%s", g_root, rel);
  return b;
}

static void assert_contains(const char *haystack, const char *needle) {
  if (!strstr(haystack, needle)) fail_msg("expected \"%s\" in: %s", needle, haystack);
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- a tiny model with optimizer state ---- */

static void tiny_config(ModelConfig *mc, int hidden) {
  model_config_defaults(mc);
  mc->vocab_size = 64;
  mc->hidden_size = hidden;
  mc->num_layers = 2;
  mc->num_heads = 2;
  mc->intermediate_size = 48;
  mc->num_experts = 4;
  mc->top_k = 2;
  mc->moe_intermediate_size = 16;
  model_config_set_moe_layer_freq(mc, 2); /* layer 0 MoE, layer 1 dense */
}

typedef struct Fixture {
  TrainConfig tc;
  cJSON *tc_json;
  Model model;
  Network net;          /* the model's table as the checkpoint takes it */
  cJSON *model_record;  /* its config record */
  Optimizer opt;
  CheckpointSource src;
} Fixture;

/* The optimizer's buffers as the checkpoint module takes them. */
static CheckpointOptimizer moments_of(const Optimizer *opt) {
  return (CheckpointOptimizer){.m = opt->m, .v = opt->v, .num_params = opt->num_params, .step = opt->step};
}

/* Weights from `seed`, moments with distinct random values, a step count
 * and a data-loader state with a seed too big for a double. */
static void fixture_make(Fixture *fx, uint64_t seed, int step) {
  memset(fx, 0, sizeof *fx);
  train_config_defaults(&fx->tc);
  tiny_config(&fx->tc.model, 32);
  fx->tc.has_model = 1;
  Error err = {0};
  if (model_create(&fx->model, &fx->tc.model, 1, 8, &err)) fail_msg("%s", err.msg);
  model_init_weights(&fx->model, seed);
  if (net_transformer_checkpoint_view(&fx->net, &fx->model_record, &fx->model, &err)) fail_msg("%s", err.msg);
  OptimizerConfig oc = {
      .schedule = {1e-3f, 1e-4f, 2, 100, LR_DECAY_COSINE}, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
  if (optimizer_create(&fx->opt, fx->model.num_params, &oc, &err)) fail_msg("%s", err.msg);
  for (size_t i = 0; i < fx->model.num_params; i++) {
    fx->opt.m[i] = (float)rng_normal(seed, 11, i);
    fx->opt.v[i] = (float)rng_uniform(seed, 12, i);
  }
  fx->opt.step = step;
  fx->tc_json = train_config_to_json(&fx->tc);
  fx->src = (CheckpointSource){
      .step = step,
      .net = &fx->net,
      .model_record = fx->model_record,
      .opt = moments_of(&fx->opt),
      .data_loader = {.seed = 0xFFFFFFFFFFFFFFF1ULL, .epoch = 3, .position = (uint64_t)step % 100},
      .data_windows = 100,
      .train_config = fx->tc_json,
      .tokenizer = fx->tc.tokenizer,
      .seed = fx->tc.seed,
  };
}

static void fixture_free(Fixture *fx) {
  cJSON_Delete(fx->tc_json);
  cJSON_Delete(fx->model_record);
  network_free(&fx->net);
  optimizer_free(&fx->opt);
  model_free(&fx->model);
  train_config_free(&fx->tc);
}

static void save_step(Fixture *fx, const char *run, int step, int keep_last) {
  fx->src.step = fx->src.opt.step = fx->opt.step = step;
  fx->src.data_loader.position = (uint64_t)step % 100;
  Error err = {0};
  if (checkpoint_save(run, &fx->src, keep_last, NULL, &err)) fail_msg("%s", err.msg);
}

/* A run directory with checkpoints at steps 1 and 2. */
static const char *two_checkpoints(const char *name, Fixture *fx) {
  const char *run = path_of("%s", name);
  fixture_make(fx, 5, 1);
  save_step(fx, run, 1, 0);
  save_step(fx, run, 2, 0);
  return run;
}

/* Runs checkpoint_resolve with stderr captured into *warnings (malloc'd). */
static int resolve_capturing(const char *path, char *out, size_t n, char **warnings, Error *err) {
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  const char *log = path_of("stderr.txt");
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fd, STDERR_FILENO);
  close(fd);
  int rc = checkpoint_resolve(path, out, n, err);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  FILE *f = fopen(log, "rb");
  *warnings = calloc(1, 65536);
  if (f) {
    size_t got = fread(*warnings, 1, 65535, f);
    (*warnings)[got] = '\0';
    fclose(f);
  }
  return rc;
}

/* ---- CRC-32 ---- */

static uint32_t crc32_bitwise(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
  }
  return ~c;
}

static void test_crc32(void **state) {
  (void)state;
  assert_int_equal(crc32_update(0, "", 0), 0);
  assert_int_equal(crc32_update(0, "123456789", 9), 0xCBF43926u);
  assert_int_equal(crc32_update(0, "The quick brown fox jumps over the lazy dog", 43), 0x414FA339u);
  enum { N = 5000 };
  static unsigned char buf[N];
  for (int i = 0; i < N; i++) buf[i] = (unsigned char)rng_u64(1, 2, (uint64_t)i);
  /* Every alignment and split agrees with the bit-by-bit definition. */
  for (int off = 0; off < 9; off++) {
    uint32_t want = crc32_bitwise(buf + off, N - 100);
    assert_int_equal(crc32_update(0, buf + off, N - 100), want);
    uint32_t split = crc32_update(crc32_update(0, buf + off, 13 + off), buf + off + 13 + off, N - 100 - 13 - off);
    assert_int_equal(split, want);
  }
  const char *p = path_of("crc.bin");
  FILE *f = fopen(p, "wb");
  fwrite(buf, 1, N, f);
  fclose(f);
  uint32_t crc;
  uint64_t bytes;
  Error err = {0};
  assert_int_equal(crc32_file(p, &crc, &bytes, &err), 0);
  assert_int_equal(bytes, N);
  assert_int_equal(crc, crc32_bitwise(buf, N));
  assert_int_not_equal(crc32_file(path_of("absent.bin"), &crc, &bytes, &err), 0);
  assert_contains(err.msg, "absent.bin");
}

/* ---- round trip, keep-last ---- */

static void test_round_trip(void **state) {
  (void)state;
  Fixture a;
  fixture_make(&a, 7, 42);
  snprintf(a.tc.tokenizer, sizeof a.tc.tokenizer, "%s", "byte-level");
  const char *run = path_of("rt");
  CheckpointSaveInfo info;
  Error err = {0};
  if (checkpoint_save(run, &a.src, 3, &info, &err)) fail_msg("%s", err.msg);
  assert_string_equal(info.dir, path_of("rt/checkpoints/step-00000042"));
  assert_true(info.bytes > a.model.num_params * 12);
  assert_int_equal(info.removed, 0);

  char dir[CHECKPOINT_PATH_MAX];
  if (checkpoint_resolve(run, dir, sizeof dir, &err)) fail_msg("%s", err.msg);
  assert_string_equal(dir, info.dir);
  ModelConfig mc;
  char tok[64];
  int step = -1;
  if (checkpoint_read_model_config(dir, &mc, tok, sizeof tok, &step, &err)) fail_msg("%s", err.msg);
  assert_int_equal(step, 42);
  assert_string_equal(tok, "byte-level");
  assert_int_equal(checkpoint_compare_model_configs(&mc, "a", &a.model.cfg, "b", &err), 0);

  /* Into a model and optimizer that start from other values. */
  Fixture b;
  fixture_make(&b, 8, 0);
  CheckpointTrainState st;
  CheckpointOptimizer b_moments = moments_of(&b.opt);
  if (net_transformer_load_training(dir, &b.model, &b_moments, &st, &err)) fail_msg("%s", err.msg);
  b.opt.step = b_moments.step;
  assert_memory_equal(a.model.params, b.model.params, a.model.num_params * sizeof(float));
  assert_memory_equal(a.opt.m, b.opt.m, a.model.num_params * sizeof(float));
  assert_memory_equal(a.opt.v, b.opt.v, a.model.num_params * sizeof(float));
  assert_int_equal(b.opt.step, 42);
  assert_int_equal(st.step, 42);
  assert_true(st.data_loader.seed == 0xFFFFFFFFFFFFFFF1ULL);
  assert_int_equal(st.data_loader.epoch, 3);
  assert_int_equal(st.data_loader.position, 42);
  assert_int_equal(st.data_windows, 100);
  assert_true(st.seed == a.tc.seed);

  /* checkpoint_load_weights alone (what sampling uses). */
  model_init_weights(&b.model, 99);
  if (net_transformer_load_weights(dir, &b.model, &err)) fail_msg("%s", err.msg);
  assert_memory_equal(a.model.params, b.model.params, a.model.num_params * sizeof(float));

  /* The same step again replaces the checkpoint. */
  a.model.params[0] += 1.0f;
  if (checkpoint_save(run, &a.src, 3, NULL, &err)) fail_msg("%s", err.msg);
  if (net_transformer_load_weights(dir, &b.model, &err)) fail_msg("%s", err.msg);
  assert_true(b.model.params[0] == a.model.params[0]);
  fixture_free(&a);
  fixture_free(&b);
}

static void test_keep_last(void **state) {
  (void)state;
  Fixture fx;
  fixture_make(&fx, 3, 1);
  const char *run = path_of("keep");
  for (int s = 1; s <= 5; s++) save_step(&fx, run, s * 10, 2);
  int *steps, n;
  Error err = {0};
  if (checkpoint_list(path_of("keep/checkpoints"), &steps, &n, &err)) fail_msg("%s", err.msg);
  assert_int_equal(n, 2);
  assert_int_equal(steps[0], 50);
  assert_int_equal(steps[1], 40);
  free(steps);
  /* Nothing but the two checkpoints is left behind. */
  int entries = 0;
  DIR *d = opendir(path_of("keep/checkpoints"));
  for (struct dirent *e; (e = readdir(d));) entries += e->d_name[0] != '.';
  closedir(d);
  assert_int_equal(entries, 2);
  /* keep_last 0 keeps every checkpoint. */
  for (int s = 6; s <= 8; s++) save_step(&fx, run, s * 10, 0);
  if (checkpoint_list(path_of("keep/checkpoints"), &steps, &n, &err)) fail_msg("%s", err.msg);
  assert_int_equal(n, 5);
  free(steps);
  fixture_free(&fx);
}

/* ---- damage ---- */

static void flip_byte(const char *path, long offset) {
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  unsigned char c;
  assert_int_equal(pread(fd, &c, 1, offset), 1);
  c ^= 0x10;
  assert_int_equal(pwrite(fd, &c, 1, offset), 1);
  close(fd);
}

/* Rewrites state.json after `edit` changed its JSON. */
static void edit_state(const char *ckpt, void (*edit)(cJSON *root)) {
  char path[1024];
  snprintf(path, sizeof path, "%s/state.json", ckpt);
  FILE *f = fopen(path, "rb");
  static char text[1 << 16];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  cJSON *root = cJSON_Parse(text);
  assert_non_null(root);
  edit(root);
  char *out = cJSON_Print(root);
  cJSON_Delete(root);
  f = fopen(path, "wb");
  fputs(out, f);
  fclose(f);
  free(out);
}

static void edit_version(cJSON *root) { cJSON_ReplaceItemInObject(root, "version", cJSON_CreateNumber(2)); }
static void edit_position(cJSON *root) {
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "data_loader"), "position", cJSON_CreateString("-5"));
}
static void edit_step(cJSON *root) { cJSON_ReplaceItemInObject(root, "step", cJSON_CreateNumber(7)); }
static void edit_crc_text(cJSON *root) {
  cJSON *rec = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "files"), "model.safetensors");
  cJSON_ReplaceItemInObject(rec, "crc32", cJSON_CreateString("xyz"));
}
static void edit_model_config(cJSON *root) {
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "model_config"), "hidden_size", cJSON_CreateString("big"));
}
static void drop_files(cJSON *root) { cJSON_DeleteItemFromObject(root, "files"); }

typedef struct Damage {
  const char *what;
  void (*damage)(const char *ckpt);
  const char *needles[3]; /* in the message */
} Damage;

static void truncate_model(const char *ckpt) {
  char p[1024];
  snprintf(p, sizeof p, "%s/model.safetensors", ckpt);
  assert_int_equal(truncate(p, 1000), 0);
}
static void flip_optimizer(const char *ckpt) {
  char p[1024];
  snprintf(p, sizeof p, "%s/optimizer.safetensors", ckpt);
  flip_byte(p, 5000);
}
static void flip_model_header(const char *ckpt) {
  char p[1024];
  snprintf(p, sizeof p, "%s/model.safetensors", ckpt);
  flip_byte(p, 20);
}
static void remove_optimizer(const char *ckpt) {
  char p[1024];
  snprintf(p, sizeof p, "%s/optimizer.safetensors", ckpt);
  assert_int_equal(unlink(p), 0);
}
static void remove_state(const char *ckpt) {
  char p[1024];
  snprintf(p, sizeof p, "%s/state.json", ckpt);
  assert_int_equal(unlink(p), 0);
}
static void truncate_state(const char *ckpt) {
  char p[1024];
  snprintf(p, sizeof p, "%s/state.json", ckpt);
  assert_int_equal(truncate(p, 100), 0);
}
static void bad_version(const char *ckpt) { edit_state(ckpt, edit_version); }
static void bad_position(const char *ckpt) { edit_state(ckpt, edit_position); }
static void bad_step(const char *ckpt) { edit_state(ckpt, edit_step); }
static void bad_crc_text(const char *ckpt) { edit_state(ckpt, edit_crc_text); }
static void bad_model_config(const char *ckpt) { edit_state(ckpt, edit_model_config); }
static void no_files(const char *ckpt) { edit_state(ckpt, drop_files); }

static const Damage DAMAGES[] = {
    {"truncated model", truncate_model, {"model.safetensors", "1000 bytes", "truncated"}},
    {"flipped byte", flip_optimizer, {"optimizer.safetensors", "CRC-32", "corrupt"}},
    {"flipped header byte", flip_model_header, {"model.safetensors", "CRC-32", NULL}},
    {"missing optimizer", remove_optimizer, {"optimizer.safetensors", "missing", NULL}},
    {"missing state", remove_state, {"state.json", "missing", NULL}},
    {"truncated state", truncate_state, {"state.json", "not a JSON object", NULL}},
    {"version", bad_version, {"state.json", "\"version\" is 2", "newer"}},
    {"position", bad_position, {"state.json", "data_loader.position", "non-negative integer"}},
    {"step", bad_step, {"state.json", "\"step\" is 7", "step-00000002"}},
    {"crc text", bad_crc_text, {"state.json", "files.\"model.safetensors\".crc32", "hex"}},
    {"model config", bad_model_config, {"state.json: model_config", "hidden_size", NULL}},
    {"files", no_files, {"state.json", "\"files\" must be an object", NULL}},
};

static void test_damage_is_rejected_and_skipped(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof DAMAGES / sizeof DAMAGES[0]; i++) {
    const Damage *d = &DAMAGES[i];
    char name[64];
    snprintf(name, sizeof name, "damage%zu", i);
    Fixture fx;
    const char *run = two_checkpoints(name, &fx);
    const char *good = path_of("%s/checkpoints/step-00000001", name);
    const char *bad = path_of("%s/checkpoints/step-00000002", name);
    d->damage(bad);
    Error err = {0};
    int rc = checkpoint_verify(bad, &err);
    if (rc == 0) fail_msg("%s: damaged checkpoint accepted", d->what);
    for (int k = 0; k < 3 && d->needles[k]; k++) assert_contains(err.msg, d->needles[k]);
    assert_contains(err.msg, bad); /* the message names the file's directory */

    /* A run directory falls back to step 1, with a warning naming the problem. */
    char dir[CHECKPOINT_PATH_MAX], *warnings;
    rc = resolve_capturing(run, dir, sizeof dir, &warnings, &err);
    if (rc) fail_msg("%s: %s", d->what, err.msg);
    assert_string_equal(dir, good);
    assert_contains(warnings, "step-00000002");
    assert_contains(warnings, d->needles[0]);
    free(warnings);

    /* Naming the damaged checkpoint itself is an error, not a fallback. */
    assert_int_not_equal(checkpoint_resolve(bad, dir, sizeof dir, &err), 0);
    assert_contains(err.msg, d->needles[0]);
    fixture_free(&fx);
  }
}

static void test_no_valid_checkpoint_stops(void **state) {
  (void)state;
  Fixture fx;
  const char *run = two_checkpoints("allbad", &fx);
  truncate_model(path_of("allbad/checkpoints/step-00000001"));
  flip_optimizer(path_of("allbad/checkpoints/step-00000002"));
  char dir[CHECKPOINT_PATH_MAX], *warnings;
  Error err = {0};
  assert_int_not_equal(resolve_capturing(run, dir, sizeof dir, &warnings, &err), 0);
  assert_contains(err.msg, "no valid checkpoint");
  assert_contains(err.msg, "all 2 are invalid");
  assert_contains(err.msg, "optimizer.safetensors"); /* the newest one's problem */
  free(warnings);
  /* Loading the weights re-checks size and checksum. */
  assert_int_not_equal(net_transformer_load_weights(path_of("allbad/checkpoints/step-00000001"), &fx.model, &err), 0);
  assert_contains(err.msg, "model.safetensors");
  /* An empty run directory says where checkpoints were expected. */
  mkdir(path_of("empty"), 0777);
  assert_int_not_equal(checkpoint_resolve(path_of("empty"), dir, sizeof dir, &err), 0);
  assert_contains(err.msg, "no checkpoint in");
  assert_int_not_equal(checkpoint_resolve(path_of("nowhere"), dir, sizeof dir, &err), 0);
  assert_contains(err.msg, "no checkpoint in");
  assert_contains(err.msg, "nowhere");
  fixture_free(&fx);
}

/* Writes a model.safetensors holding the fixture's tensors with one change,
 * then updates state.json's size and checksum so that only the contents
 * are wrong. */
static uint64_t g_bytes;
static uint32_t g_crc;
static void edit_model_record(cJSON *root) {
  cJSON *rec = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "files"), "model.safetensors");
  char hex[16];
  snprintf(hex, sizeof hex, "%08x", g_crc);
  cJSON_ReplaceItemInObject(rec, "bytes", cJSON_CreateNumber((double)g_bytes));
  cJSON_ReplaceItemInObject(rec, "crc32", cJSON_CreateString(hex));
}

static void rewrite_model(const char *ckpt, const Model *m, const char *skip, const char *extra, int reshape) {
  char path[1024];
  snprintf(path, sizeof path, "%s/model.safetensors", ckpt);
  SafetensorsWriter *w = safetensors_writer_new();
  Error err = {0};
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *p = &m->tensors[i];
    if (skip && !strcmp(p->name, skip)) continue;
    int shape[4] = {p->shape[0], p->shape[1], p->shape[2], p->shape[3]};
    int ndim = p->ndim;
    if (reshape && i == 0) shape[0] = 1, shape[1] = (int)p->numel, ndim = 2;
    if (safetensors_writer_add_f32(w, p->name, ndim, shape, m->params + p->offset, &err)) fail_msg("%s", err.msg);
  }
  if (extra) {
    int one = 1;
    safetensors_writer_add_f32(w, extra, 1, &one, m->params, &err);
  }
  if (safetensors_writer_write(w, path, &err)) fail_msg("%s", err.msg);
  safetensors_writer_free(w);
  if (crc32_file(path, &g_crc, &g_bytes, &err)) fail_msg("%s", err.msg);
  edit_state(ckpt, edit_model_record);
}

static void test_names_and_shapes_checked(void **state) {
  (void)state;
  Fixture fx;
  two_checkpoints("names", &fx);
  const char *ckpt = path_of("names/checkpoints/step-00000002");
  Error err = {0};
  rewrite_model(ckpt, &fx.model, "layers.1.mlp.w_down", NULL, 0);
  assert_int_equal(checkpoint_verify(ckpt, &err), 0); /* intact as a file ... */
  assert_int_not_equal(net_transformer_load_weights(ckpt, &fx.model, &err), 0); /* ... but not this model's */
  assert_contains(err.msg, "model.safetensors");
  assert_contains(err.msg, "'layers.1.mlp.w_down' is missing");
  rewrite_model(ckpt, &fx.model, NULL, "layers.9.attn.wq", 0);
  assert_int_not_equal(net_transformer_load_weights(ckpt, &fx.model, &err), 0);
  assert_contains(err.msg, "'layers.9.attn.wq' is not a parameter");
  rewrite_model(ckpt, &fx.model, NULL, NULL, 1);
  assert_int_not_equal(net_transformer_load_weights(ckpt, &fx.model, &err), 0);
  assert_contains(err.msg, "has shape [1, ");
  assert_contains(err.msg, "model expects [64, 32]");

  /* A model of another size is refused before any tensor is read. */
  ModelConfig other;
  tiny_config(&other, 48);
  Model m2;
  if (model_create(&m2, &other, 1, 8, &err)) fail_msg("%s", err.msg);
  assert_int_equal(net_transformer_load_weights(path_of("names/checkpoints/step-00000001"), &m2, &err), ERR_CONFIG);
  assert_contains(err.msg, "hidden_size is 32 in the checkpoint but 48");
  Optimizer o2;
  OptimizerConfig oc = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
  optimizer_create(&o2, m2.num_params, &oc, &err);
  CheckpointTrainState st;
  CheckpointOptimizer o2_moments = moments_of(&o2);
  assert_int_equal(net_transformer_load_training(path_of("names/checkpoints/step-00000001"), &m2, &o2_moments, &st, &err),
                   ERR_CONFIG);
  assert_contains(err.msg, "hidden_size");
  optimizer_free(&o2);
  model_free(&m2);
  fixture_free(&fx);
}

/* ---- crashes ---- */

static long dead_pid(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  return (long)pid;
}

static void copy_file(const char *from, const char *to) {
  FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
  assert_non_null(a);
  assert_non_null(b);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
  fclose(a);
  fclose(b);
}

static void test_stale_tmp_is_never_newest(void **state) {
  (void)state;
  Fixture fx;
  const char *run = two_checkpoints("stale", &fx);
  /* What a crash leaves: a complete-looking temporary directory of a later
   * step (here a full copy of step 2, with step 9 written into it). */
  long pid = dead_pid();
  const char *tmp = path_of("stale/checkpoints/.tmp-step-00000009-%ld", pid);
  assert_int_equal(mkdir(tmp, 0777), 0);
  static const char *files[] = {"model.safetensors", "optimizer.safetensors", "state.json"};
  for (int i = 0; i < 3; i++) {
    char from[1024], to[1024];
    snprintf(from, sizeof from, "%s/%s", path_of("stale/checkpoints/step-00000002"), files[i]);
    snprintf(to, sizeof to, "%s/%s", tmp, files[i]);
    copy_file(from, to);
  }
  char dir[CHECKPOINT_PATH_MAX];
  Error err = {0};
  if (checkpoint_resolve(run, dir, sizeof dir, &err)) fail_msg("%s", err.msg);
  assert_string_equal(dir, path_of("stale/checkpoints/step-00000002"));
  int *steps, n;
  checkpoint_list(path_of("stale/checkpoints"), &steps, &n, &err);
  assert_int_equal(n, 2);
  free(steps);
  /* The next save removes what the dead process left. */
  save_step(&fx, run, 3, 0);
  assert_false(is_dir(tmp));
  if (checkpoint_resolve(run, dir, sizeof dir, &err)) fail_msg("%s", err.msg);
  assert_string_equal(dir, path_of("stale/checkpoints/step-00000003"));
  fixture_free(&fx);
}

static void test_run_dir_holding_another_history(void **state) {
  (void)state;
  Fixture fx;
  const char *run = two_checkpoints("history", &fx);
  Error err = {0};
  assert_int_equal(checkpoint_check_run_dir(run, 0, &err), ERR_CONFIG);
  assert_contains(err.msg, "--resume");
  assert_int_equal(checkpoint_check_run_dir(run, 1, &err), ERR_CONFIG);
  assert_contains(err.msg, "newer than the step 1");
  assert_int_equal(checkpoint_check_run_dir(run, 2, &err), 0);
  /* An invalid newer checkpoint (one a resume skipped) is moved aside. */
  flip_optimizer(path_of("history/checkpoints/step-00000002"));
  assert_int_equal(checkpoint_check_run_dir(run, 1, &err), 0);
  assert_false(is_dir(path_of("history/checkpoints/step-00000002")));
  assert_int_equal(checkpoint_check_run_dir(path_of("fresh-run"), 0, &err), 0);
  fixture_free(&fx);
}

/* ---- run config fields ---- */

static void test_config_fields(void **state) {
  (void)state;
  mkdir(path_of("cfg"), 0777);
  FILE *f = fopen(path_of("cfg/train.bin"), "wb");
  fclose(f);
  const char *model = "{\"vocab_size\": 300, \"hidden_size\": 32, \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
                      " \"intermediate_size\": 64}";
  char text[2048];
  snprintf(text, sizeof text,
           "{\"model\": %s, \"data\": {\"train\": \"train.bin\", \"tokenizer\": \"tok/tokenizer.json\"},"
           " \"checkpoint\": {\"interval\": 25, \"keep_last\": 5}}",
           model);
  TrainConfig cfg;
  Error err = {0};
  if (train_config_parse(&cfg, text, path_of("cfg/run.json"), &err)) fail_msg("%s", err.msg);
  assert_int_equal(cfg.checkpoint_interval, 25);
  assert_int_equal(cfg.keep_last, 5);
  assert_string_equal(cfg.tokenizer, path_of("cfg/tok/tokenizer.json")); /* relative to the file */
  /* The tokenizer must exist ... */
  assert_int_equal(train_config_finalize(&cfg, &err), ERR_CONFIG);
  assert_contains(err.msg, "data.tokenizer");
  assert_contains(err.msg, "tok/tokenizer.json");
  /* ... and overrides set each field. */
  assert_int_equal(train_config_override(&cfg, "--tokenizer", "byte-level", &err), 0);
  assert_int_equal(train_config_override(&cfg, "--save-interval", "7", &err), 0);
  assert_int_equal(train_config_override(&cfg, "--keep-last", "0", &err), 0);
  assert_int_equal(train_config_override(&cfg, "--keep-last", "-1", &err), ERR_ARG);
  assert_contains(err.msg, "--keep-last");
  assert_int_equal(train_config_finalize(&cfg, &err), 0);
  assert_int_equal(cfg.checkpoint_interval, 7);
  assert_int_equal(cfg.keep_last, 0);
  /* The resolved config records them and parses back. */
  cJSON *json = train_config_to_json(&cfg);
  char *printed = cJSON_Print(json);
  cJSON_Delete(json);
  TrainConfig back;
  if (train_config_parse(&back, printed, path_of("cfg/resolved.json"), &err)) fail_msg("%s", err.msg);
  free(printed);
  assert_int_equal(back.checkpoint_interval, 7);
  assert_int_equal(back.keep_last, 0);
  assert_string_equal(back.tokenizer, "byte-level");
  train_config_free(&back);
  train_config_free(&cfg);

  /* Defaults, a typo, a bad value. */
  snprintf(text, sizeof text, "{\"model\": %s, \"data\": {\"train\": \"train.bin\"}}", model);
  if (train_config_parse(&cfg, text, path_of("cfg/run.json"), &err)) fail_msg("%s", err.msg);
  assert_int_equal(cfg.checkpoint_interval, 0);
  assert_int_equal(cfg.keep_last, 3);
  assert_string_equal(cfg.tokenizer, "byte-level");
  train_config_free(&cfg);
  snprintf(text, sizeof text, "{\"model\": %s, \"checkpoint\": {\"keep_lats\": 2}}", model);
  assert_int_equal(train_config_parse(&cfg, text, path_of("cfg/run.json"), &err), ERR_CONFIG);
  assert_contains(err.msg, "checkpoint.keep_lats");
  assert_contains(err.msg, "did you mean 'keep_last'");
  snprintf(text, sizeof text, "{\"model\": %s, \"checkpoint\": {\"interval\": 2.5}}", model);
  assert_int_equal(train_config_parse(&cfg, text, path_of("cfg/run.json"), &err), ERR_CONFIG);
  assert_contains(err.msg, "checkpoint.interval");

  char *buf = NULL;
  size_t len = 0;
  FILE *h = open_memstream(&buf, &len);
  train_config_print_flags(h);
  fclose(h);
  assert_contains(buf, "--save-interval");
  assert_contains(buf, "--keep-last");
  assert_contains(buf, "[checkpoint.interval]");
  assert_contains(buf, "--tokenizer");
  free(buf);
}

/* ---- resume through the trainer ---- */

static void make_trainer_config(TrainConfig *cfg, const char *out) {
  char text[2048];
  snprintf(text, sizeof text,
           "{\"model\": {\"vocab_size\": 64, \"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 2,"
           " \"intermediate_size\": 64, \"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32,"
           " \"moe_aux_loss_coeff\": 0.01, \"moe_z_loss_coeff\": 0.001},"
           " \"training\": {\"micro_batch_size\": 2, \"seq_len\": 16, \"grad_accum_steps\": 2, \"steps\": 8,"
           " \"warmup_steps\": 2, \"lr\": 0.003, \"threads\": 1, \"peak_gflops\": 100},"
           " \"data\": {\"train\": \"tr/train.bin\"}, \"out\": \"%s\"}",
           out);
  Error err = {0};
  if (train_config_parse(cfg, text, path_of("trainer.json"), &err) || train_config_finalize(cfg, &err))
    fail_msg("%s", err.msg);
}

static void test_trainer_resume_is_bit_exact(void **state) {
  (void)state;
  enum { N = 3000 };
  static uint32_t tok[N];
  for (int i = 0; i < N; i++) tok[i] = (uint32_t)(rng_u64(4, 1, (uint64_t)i) % 64);
  mkdir(path_of("tr"), 0777);
  Error err = {0};
  if (token_shard_write(path_of("tr/train.bin"), tok, N, 64, &err)) fail_msg("%s", err.msg);

  TrainConfig cfg;
  make_trainer_config(&cfg, "tr/run");
  Trainer straight, first, second;
  TrainStepResult r;
  double losses[8];
  if (trainer_create(&straight, &cfg, &err)) fail_msg("%s", err.msg);
  for (int s = 0; s < 8; s++) {
    if (trainer_step(&straight, &r, &err)) fail_msg("%s", err.msg);
    losses[s] = r.loss;
  }
  if (trainer_create(&first, &cfg, &err)) fail_msg("%s", err.msg);
  for (int s = 0; s < 4; s++)
    if (trainer_step(&first, &r, &err)) fail_msg("%s", err.msg);
  if (trainer_save_checkpoint(&first, NULL, &err)) fail_msg("%s", err.msg);
  trainer_free(&first);

  /* A fresh trainer (other initial weights would not matter: they are
   * overwritten) continues from the checkpoint. */
  if (trainer_create(&second, &cfg, &err)) fail_msg("%s", err.msg);
  char dir[CHECKPOINT_PATH_MAX];
  if (checkpoint_resolve(cfg.out_dir, dir, sizeof dir, &err) || trainer_resume(&second, dir, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(second.step, 4);
  for (int s = 4; s < 8; s++) {
    if (trainer_step(&second, &r, &err)) fail_msg("%s", err.msg);
    assert_int_equal(r.step, s + 1);
    if (r.loss != losses[s]) fail_msg("step %d: loss %.17g after resume, %.17g straight", s + 1, r.loss, losses[s]);
  }
  assert_memory_equal(straight.model.params, second.model.params, straight.model.num_params * sizeof(float));
  assert_memory_equal(straight.opt.m, second.opt.m, straight.model.num_params * sizeof(float));
  assert_memory_equal(straight.opt.v, second.opt.v, straight.model.num_params * sizeof(float));
  assert_memory_equal(&straight.train.state, &second.train.state, sizeof(DataLoaderState));
  trainer_free(&straight);
  trainer_free(&second);
  train_config_free(&cfg);

  /* A run config with another model is refused, naming the field. */
  make_trainer_config(&cfg, "tr/run");
  cfg.model.num_layers = 3;
  cfg.model.is_moe_layer[2] = 1;
  Trainer other;
  if (trainer_create(&other, &cfg, &err)) fail_msg("%s", err.msg);
  assert_int_equal(trainer_resume(&other, dir, &err), ERR_CONFIG);
  assert_contains(err.msg, "num_hidden_layers is 2 in the checkpoint but 3");
  trainer_free(&other);
  train_config_free(&cfg);
}

static int setup(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_root, sizeof g_root, "%s/fivefold-ckpt-test-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(g_root)) return -1;
  atexit(remove_root);
  return 0;
}

/* ---- the bf16 weight cache across a load ---- */

static double bf16_loss(Model *m) {
  const int tokens[8] = {1, 5, 9, 13, 17, 21, 25, 29}, targets[8] = {5, 9, 13, 17, 21, 25, 29, 33};
  ModelLoss loss;
  Error err = {0};
  if (model_forward(m, tokens, targets, 1, 8, 1, 1.0f, &loss, &err)) fail_msg("%s", err.msg);
  return loss.lm;
}

static void test_bf16_cache_after_load(void **state) {
  (void)state;
  char why[512];
  if (!kern_bf16_supported(why, sizeof why)) {
    print_message("bf16 unsupported here: %s\n", why);
    skip();
  }
  Fixture a, b;
  fixture_make(&a, 5, 1);
  const char *run = path_of("bf16-cache");
  save_step(&a, run, 1, 0);
  fixture_make(&b, 9, 0);
  assert_int_equal(kern_set_precision(KERN_PRECISION_BF16, why, sizeof why), 0);
  const double want = bf16_loss(&a.model); /* a is not cached: converted at every GEMM */
  model_cache_bf16_weights(&b.model);
  const double before = bf16_loss(&b.model); /* b's copies now hold its seed-9 weights */
  Bf16WeightStats s0, s1;
  bf16_weights_stats(&s0);
  assert_true(s0.resident_bytes > 0);
  assert_true(before != want);
  char dir[CHECKPOINT_PATH_MAX];
  Error err = {0};
  if (checkpoint_resolve(run, dir, sizeof dir, &err)) fail_msg("%s", err.msg);
  if (net_transformer_load_weights(dir, &b.model, &err)) fail_msg("%s", err.msg);
  const double after = bf16_loss(&b.model);
  bf16_weights_stats(&s1);
  assert_true(s1.conversions > s0.conversions); /* the load made the copies stale */
  assert_memory_equal(&after, &want, sizeof want);
  assert_int_equal(kern_set_precision(KERN_PRECISION_FP32, why, sizeof why), 0);
  fixture_free(&a);
  fixture_free(&b);
  bf16_weights_stats(&s1);
  assert_int_equal(s1.tensors, 0); /* model_free forgot them */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_crc32),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_keep_last),
      cmocka_unit_test(test_damage_is_rejected_and_skipped),
      cmocka_unit_test(test_no_valid_checkpoint_stops),
      cmocka_unit_test(test_names_and_shapes_checked),
      cmocka_unit_test(test_stale_tmp_is_never_newest),
      cmocka_unit_test(test_run_dir_holding_another_history),
      cmocka_unit_test(test_config_fields),
      cmocka_unit_test(test_trainer_resume_is_bit_exact),
      cmocka_unit_test(test_bf16_cache_after_load),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
