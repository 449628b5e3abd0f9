/* ckpt_dist_check: the multi-rank half of tests/train/ckpt_dist_test.sh.
 * It builds this rank's shard of a tiny model for a TP x DP x PP layout
 * (tp fastest, then dp, then pp, as the attention grid orders them) with
 * model_create_shard, and saves or loads distributed checkpoints
 * (ckpt/checkpoint_dist.h), or does the same with the one-process
 * functions of ckpt/checkpoint.h on the whole model.
 *
 * Values: the weights of the checkpoint of step S are model_init_weights
 * with seed 1000 + S; the AdamW moments of element i of logical tensor NAME
 * are N(0,1) and U(0,1) draws of stream "m.NAME" / "v.NAME" at index i. So
 * the expected value of every local element follows from its global index,
 * and a checkpoint of another step or a misplaced slice shows up.
 *
 * usage: ckpt_dist_check OPERATION [+ OPERATION ...]
 * Operations run one after the other in the same job (starting MPI jobs is
 * the slow part of the test), each on the first --np ranks of the world:
 *   save RUN_DIR     collective checkpoint_save_sharded
 *   save1 RUN_DIR    one-process checkpoint_save of the whole model (rank 0)
 *   load CKPT_DIR    collective checkpoint_load_training_sharded; checks
 *                    every local parameter and moment, the step and the
 *                    data-loader state
 *   load1 CKPT_DIR   checkpoint_load_training and checkpoint_load_weights
 *                    of the whole model (rank 0), checked the same way
 *   tamper CKPT_DIR  rewrites model.safetensors without tensor --drop NAME
 *                    or with tensor --flatten NAME stored 1-D (rank 0), and
 *                    records the new size and CRC-32 in state.json, so only
 *                    the tensor check can catch it
 * options of an operation: --np N (default: the whole world) --tp T --pp P
 *   (N = tp x dp x pp) --chunks V (virtual stages per rank) --model
 *   moe|tied|wide --step S --keep-last K --claim-dp0 (every rank claims dp_rank
 *   0: a layout that writes replicas twice) --expect-fail TEXT (the
 *   operation must fail on every rank with the same code and a message
 *   containing TEXT).
 * Exit status 0 when every check passed; messages start with "FAIL". */
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/crc32.h"
#include "base/error.h"
#include "base/file_text.h"
#include "base/rng.h"
#include "base/safetensors.h"
#include "comm/comm.h"
#include "model/config.h"
#include "model/model.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dist.h"
#include "train/net_transformer.h"
#include "train/optimizer.h"
#include "train/tp_ops.h"
#include "train/train_config.h"

#define SEED_BASE 1000

typedef struct Options {
  const char *mode, *dir, *model, *expect_fail, *drop, *flatten;
  int np, tp, pp, chunks, step, keep_last, claim_dp0;
} Options;

static void usage_exit(const char *why) {
  fprintf(stderr, "ckpt_dist_check: %s\nusage: ckpt_dist_check save|save1|load|load1|tamper DIR [--np N] [--tp T] "
                  "[--pp P] [--chunks V] [--model moe|tied|wide] [--step S] [--keep-last K] [--claim-dp0] "
                  "[--expect-fail TEXT] [--drop NAME] [--flatten NAME] [+ more operations]\n",
          why);
  exit(2);
}

/* One operation: argv[0] is its mode, argv[1] its directory. */
static void parse_options(int argc, char **argv, Options *o) {
  *o = (Options){.model = "moe", .tp = 1, .pp = 1, .chunks = 1, .step = 1};
  if (argc < 2) usage_exit("missing MODE or DIR");
  o->mode = argv[0];
  o->dir = argv[1];
  if (strcmp(o->mode, "save") && strcmp(o->mode, "load") && strcmp(o->mode, "save1") && strcmp(o->mode, "load1") &&
      strcmp(o->mode, "tamper"))
    usage_exit("unknown MODE");
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--claim-dp0")) {
      o->claim_dp0 = 1;
      continue;
    }
    if (!v) usage_exit("an option lacks its value");
    i++;
    if (!strcmp(a, "--tp")) o->tp = atoi(v);
    else if (!strcmp(a, "--pp")) o->pp = atoi(v);
    else if (!strcmp(a, "--np")) o->np = atoi(v);
    else if (!strcmp(a, "--chunks")) o->chunks = atoi(v);
    else if (!strcmp(a, "--step")) o->step = atoi(v);
    else if (!strcmp(a, "--keep-last")) o->keep_last = atoi(v);
    else if (!strcmp(a, "--model")) o->model = v;
    else if (!strcmp(a, "--expect-fail")) o->expect_fail = v;
    else if (!strcmp(a, "--drop")) o->drop = v;
    else if (!strcmp(a, "--flatten")) o->flatten = v;
    else usage_exit("unknown option");
  }
  if (o->tp < 1 || o->pp < 1 || o->chunks < 1 || o->step < 0 || o->np < 0)
    usage_exit("bad --np, --tp, --pp, --chunks or --step");
  if (o->mode[strlen(o->mode) - 1] == '1' || !strcmp(o->mode, "tamper")) o->np = 1;
}

/* Four layers (one MoE with a shared expert in "moe"), sizes that split
 * over TP 1, 2 and 4; two KV heads, so TP 4 shares each KV head between two
 * ranks. "tied": dense with tied embeddings (the last stage holds a copy).
 * "wide": a dense model of about 40M parameters, to time transfers. */
static void tiny_config(ModelConfig *c, const char *model) {
  model_config_defaults(c);
  snprintf(c->model_type, sizeof c->model_type, "fivefold");
  c->vocab_size = 64;
  c->hidden_size = 16;
  c->num_layers = 4;
  c->num_heads = 4;
  c->num_kv_heads = 2;
  c->intermediate_size = 32;
  if (!strcmp(model, "tied")) {
    c->tie_word_embeddings = 1;
  } else if (!strcmp(model, "wide")) {
    /* About 40M parameters, for measuring (not used by the tests). */
    c->vocab_size = 8192;
    c->hidden_size = 512;
    c->num_layers = 8;
    c->num_heads = 8;
    c->num_kv_heads = 4;
    c->intermediate_size = 2048;
    c->tie_word_embeddings = 0;
  } else {
    c->tie_word_embeddings = 0;
    c->num_experts = 4;
    c->top_k = 2;
    c->moe_intermediate_size = 8;
    c->shared_expert_intermediate_size = 8;
    model_config_set_moe_layer_freq(c, 2);
  }
}

static float moment_value(int which, const char *name, uint64_t index) {
  char stream[128];
  snprintf(stream, sizeof stream, "%s.%s", which ? "v" : "m", name);
  uint64_t id = rng_stream_id(stream);
  return which ? (float)rng_uniform(SEED_BASE, id, index) : (float)rng_normal(SEED_BASE, id, index);
}

static const char *logical_name(const ParamTensor *p) { return p->tied_copy ? "embed.weight" : p->name; }

/* Global flat index of local element j of p (row-major over view_count). */
static uint64_t global_index(const ParamTensor *p, size_t j) {
  if (p->view_ndim == 0) return j;
  uint64_t g = 0, stride = 1;
  for (int d = p->view_ndim - 1; d >= 0; d--) {
    uint64_t i = j % (size_t)p->view_count[d];
    j /= (size_t)p->view_count[d];
    g += (i + (uint64_t)p->view_start[d]) * stride;
    stride *= (uint64_t)p->view_shape[d];
  }
  return g;
}

/* ---- the layout ---- */

typedef struct Layout {
  int tp_rank, dp_rank, pp_rank, dp;
  ModelShard shard;
  const ModelParallelOps *ops; /* the TP group's collectives (the trainer's), NULL when tp = 1 */
} Layout;

static int make_layout(const Options *o, const ModelConfig *cfg, int rank, int world, Layout *l, Error *err) {
  memset(l, 0, sizeof *l);
  if (world % (o->tp * o->pp))
    return error_set(err, ERR_ARG, "world %d is not a multiple of tp %d x pp %d", world, o->tp, o->pp);
  l->dp = world / (o->tp * o->pp);
  l->tp_rank = rank % o->tp;
  l->dp_rank = rank / o->tp % l->dp;
  l->pp_rank = rank / (o->tp * l->dp);
  const int stages = o->pp * o->chunks;
  if (cfg->num_layers % stages || o->chunks > MODEL_MAX_CHUNKS)
    return error_set(err, ERR_ARG, "%d layers do not split into %d virtual stages", cfg->num_layers, stages);
  ModelShard *s = &l->shard;
  s->tp_size = o->tp;
  s->tp_rank = l->tp_rank;
  s->num_chunks = o->chunks;
  s->num_slots = 1;
  const int per = cfg->num_layers / stages;
  for (int c = 0; c < o->chunks; c++) {
    const int vs = c * o->pp + l->pp_rank; /* interleaved virtual stages */
    s->layer_begin[c] = vs * per;
    s->layer_end[c] = (vs + 1) * per;
    s->has_embedding[c] = vs == 0;
    s->has_head[c] = vs == stages - 1;
  }
  return 0;
}

static long run_layout(const Options *o, const CommGroup *g, const Layout *lp, int whole);

/* ---- values ---- */

typedef struct Fixture {
  TrainConfig tc;
  Model model, full; /* this rank's shard; the whole model for expected weights */
  Network net;       /* the shard's table as the checkpoint takes it */
  cJSON *model_record;
  Optimizer opt;
  cJSON *tc_json;
  CheckpointSource src;
} Fixture;

/* The optimizer's buffers as the checkpoint module takes them. */
static CheckpointOptimizer moments_of(const Optimizer *opt) {
  return (CheckpointOptimizer){.m = opt->m, .v = opt->v, .num_params = opt->num_params, .step = opt->step};
}

static int fixture_make(Fixture *fx, const Options *o, const Layout *l, int whole, Error *err) {
  memset(fx, 0, sizeof *fx);
  train_config_defaults(&fx->tc);
  tiny_config(&fx->tc.model, o->model);
  fx->tc.has_model = 1;
  int rc = model_create(&fx->full, &fx->tc.model, 1, 4, err);
  if (!rc) rc = whole ? model_create(&fx->model, &fx->tc.model, 1, 4, err)
                      : model_create_shard(&fx->model, &fx->tc.model, &l->shard, l->ops, 1, 4, err);
  if (rc) return rc;
  model_init_weights(&fx->full, SEED_BASE + (uint64_t)o->step);
  OptimizerConfig oc = {
      .schedule = {1e-3f, 1e-4f, 2, 100, LR_DECAY_COSINE}, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
  if ((rc = optimizer_create(&fx->opt, fx->model.num_params, &oc, err))) return rc;
  if ((rc = net_transformer_checkpoint_view(&fx->net, &fx->model_record, &fx->model, err))) return rc;
  fx->tc_json = train_config_to_json(&fx->tc);
  fx->src = (CheckpointSource){
      .step = o->step,
      .net = &fx->net,
      .model_record = fx->model_record,
      .opt = moments_of(&fx->opt),
      .data_loader = {.seed = 0xFFFFFFFFFFFFFFF1ULL, .epoch = 2, .position = (uint64_t)o->step % 100},
      .data_windows = 100,
      .train_config = fx->tc_json,
      .tokenizer = fx->tc.tokenizer,
      .seed = fx->tc.seed,
  };
  return 0;
}

static void fixture_free(Fixture *fx) {
  cJSON_Delete(fx->tc_json);
  cJSON_Delete(fx->model_record);
  network_free(&fx->net);
  optimizer_free(&fx->opt);
  model_free(&fx->model);
  model_free(&fx->full);
  train_config_free(&fx->tc);
}

/* Fills (expected) or checks every local parameter and moment; returns the
 * number of mismatching elements (the first few are printed). */
static long visit_values(Fixture *fx, int step, int fill, int check_moments, int rank) {
  Model *m = &fx->model;
  long bad = 0;
  /* Values of another step: moments depend on the step too. */
  for (int i = 0; i < m->num_tensors; i++) {
    const ParamTensor *p = &m->tensors[i];
    const ParamTensor *g = model_find_tensor(&fx->full, logical_name(p));
    if (!g) {
      fprintf(stderr, "FAIL rank %d: local tensor %s has no global tensor %s\n", rank, p->name, logical_name(p));
      return 1;
    }
    for (size_t j = 0; j < p->numel; j++) {
      uint64_t gi = global_index(p, j) + (uint64_t)step * 7919u;
      float want[3] = {fx->full.params[g->offset + global_index(p, j)], moment_value(0, g->name, gi),
                       moment_value(1, g->name, gi)};
      float *at[3] = {&m->params[p->offset + j], &fx->opt.m[p->offset + j], &fx->opt.v[p->offset + j]};
      for (int k = 0; k < (check_moments ? 3 : 1); k++) {
        if (fill) {
          *at[k] = want[k];
        } else if (memcmp(at[k], &want[k], sizeof(float)) != 0) {
          if (bad++ < 5)
            fprintf(stderr, "FAIL rank %d: %s%s element %zu (global %llu) is %g, expected %g\n", rank,
                    k == 0 ? "" : k == 1 ? "m." : "v.", p->name, j, (unsigned long long)global_index(p, j),
                    (double)*at[k], (double)want[k]);
        }
      }
    }
  }
  return bad;
}

static void poison(Fixture *fx) {
  for (size_t i = 0; i < fx->model.num_params; i++) fx->model.params[i] = fx->opt.m[i] = fx->opt.v[i] = NAN;
  fx->opt.step = -1;
}

/* ---- modes ---- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long check_state(const CheckpointTrainState *st, const Options *o, const Optimizer *opt, int rank) {
  long bad = 0;
  if (st->step != o->step || opt->step != o->step) {
    fprintf(stderr, "FAIL rank %d: loaded step %d (optimizer %d), expected %d\n", rank, st->step, opt->step, o->step);
    bad++;
  }
  if (st->data_loader.seed != 0xFFFFFFFFFFFFFFF1ULL || st->data_loader.epoch != 2 ||
      st->data_loader.position != (uint64_t)o->step % 100 || st->data_windows != 100) {
    fprintf(stderr, "FAIL rank %d: data-loader state not restored\n", rank);
    bad++;
  }
  return bad;
}

/* rc/err of a collective operation against --expect-fail. */
static long judge(const Options *o, int rc, const Error *err, int rank) {
  if (!o->expect_fail) {
    if (rc) fprintf(stderr, "FAIL rank %d: %s %s: %s\n", rank, o->mode, o->dir, err->msg);
    return rc != 0;
  }
  if (!rc) {
    fprintf(stderr, "FAIL rank %d: %s %s succeeded, expected a failure mentioning \"%s\"\n", rank, o->mode, o->dir,
            o->expect_fail);
    return 1;
  }
  if (!strstr(err->msg, o->expect_fail)) {
    fprintf(stderr, "FAIL rank %d: the error does not mention \"%s\": %s\n", rank, o->expect_fail, err->msg);
    return 1;
  }
  if (rank == 0) printf("expected failure (%s): %s\n", error_code_name(rc), err->msg);
  return 0;
}

/* ---- tampering ---- */

static int tamper(const Options *o, Error *err) {
  char path[1024], state[1024];
  snprintf(path, sizeof path, "%s/%s", o->dir, CHECKPOINT_MODEL_FILE);
  snprintf(state, sizeof state, "%s/%s", o->dir, CHECKPOINT_STATE_FILE);
  SafetensorsReader *r = NULL;
  int rc = safetensors_open(&r, path, err);
  if (rc) return rc;
  SafetensorsWriter *w = safetensors_writer_new();
  int n = safetensors_num_tensors(r);
  float **data = calloc((size_t)n, sizeof *data);
  for (int i = 0; i < safetensors_num_metadata(r) && !rc; i++) {
    const char *k, *v;
    safetensors_metadata_at(r, i, &k, &v);
    rc = safetensors_writer_set_metadata(w, k, v, err);
  }
  for (int i = 0; i < n && !rc; i++) {
    const SafetensorsTensorInfo *t = safetensors_tensor_at(r, i);
    if (o->drop && !strcmp(t->name, o->drop)) continue;
    data[i] = malloc(t->nbytes ? t->nbytes : 1);
    rc = safetensors_read(r, t->name, ST_F32, data[i], t->nbytes, err);
    int64_t flat = (int64_t)t->numel;
    int flatten = o->flatten && !strcmp(t->name, o->flatten);
    if (!rc) rc = safetensors_writer_add(w, t->name, ST_F32, flatten ? 1 : t->ndim, flatten ? &flat : t->shape, data[i], err);
  }
  safetensors_close(r);
  if (!rc) rc = safetensors_writer_write(w, path, err);
  safetensors_writer_free(w);
  for (int i = 0; i < n; i++) free(data[i]);
  free(data);
  uint32_t crc = 0;
  uint64_t bytes = 0;
  if (!rc) rc = crc32_file(path, &crc, &bytes, err);
  char *text = NULL;
  if (!rc) rc = file_read_text(state, "checkpoint state", 1 << 20, &text, NULL, err);
  if (rc) return rc;
  cJSON *root = cJSON_Parse(text);
  free(text);
  cJSON *rec = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "files"), CHECKPOINT_MODEL_FILE);
  char hex[16];
  snprintf(hex, sizeof hex, "%08x", crc);
  cJSON_ReplaceItemInObject(rec, "bytes", cJSON_CreateNumber((double)bytes));
  cJSON_ReplaceItemInObject(rec, "crc32", cJSON_CreateString(hex));
  char *out = cJSON_Print(root);
  cJSON_Delete(root);
  FILE *f = fopen(state, "w");
  if (!f || fputs(out, f) < 0) rc = error_set(err, ERR_IO, "cannot rewrite %s", state);
  if (f) fclose(f);
  free(out);
  return rc;
}

/* Runs one operation on the ranks of g; returns the failed checks. */
static long run_operation(const Options *o, const CommGroup *g) {
  const int rank = g->rank, whole = o->np == 1 && o->mode[strlen(o->mode) - 1] == '1';
  Error err = {0};
  if (!strcmp(o->mode, "tamper")) {
    if (!tamper(o, &err)) return 0;
    fprintf(stderr, "FAIL: tampering with %s: %s\n", o->dir, err.msg);
    return 1;
  }
  Layout l;
  ModelConfig cfg;
  tiny_config(&cfg, o->model);
  if (make_layout(o, &cfg, rank, g->size, &l, &err)) {
    fprintf(stderr, "FAIL rank %d: %s\n", rank, err.msg);
    return 1;
  }
  /* The TP group of this layout (tp varies fastest) with the trainer's
   * collectives over it, as a real sharded model has. */
  CommGroup tp_group = {.comm = MPI_COMM_NULL, .size = o->tp, .rank = l.tp_rank, .name = "tp"};
  TpOps tp_ops;
  memset(&tp_ops, 0, sizeof tp_ops);
  if (o->tp > 1 && !whole) {
    MPI_Comm_split(g->comm, rank / o->tp, rank, &tp_group.comm);
    tp_ops_init(&tp_ops, &tp_group);
    l.ops = &tp_ops.ops;
  }
  long bad = run_layout(o, g, &l, whole);
  if (tp_group.comm != MPI_COMM_NULL) {
    tp_ops_free(&tp_ops);
    MPI_Comm_free(&tp_group.comm);
  }
  return bad;
}

/* The operation on one layout; returns the failed checks. */
static long run_layout(const Options *o, const CommGroup *g, const Layout *lp, int whole) {
  const int rank = g->rank;
  Error err = {0};
  Layout l = *lp;
  Fixture fx;
  if (fixture_make(&fx, o, &l, whole, &err)) {
    fprintf(stderr, "FAIL rank %d: building the model: %s\n", rank, err.msg);
    fixture_free(&fx);
    return 1;
  }
  /* Without expert parallelism the EDP group is TP x DP. */
  CheckpointShardInfo sh = {.world = g,
                            .dp_rank = o->claim_dp0 ? 0 : l.dp_rank,
                            .tp_rank = l.tp_rank,
                            .edp_rank = o->claim_dp0 ? 0 : l.tp_rank + o->tp * l.dp_rank};
  long bad = 0;
  int rc = 0;
  if (o->mode[0] == 's') {
    visit_values(&fx, o->step, 1, 1, rank);
    fx.opt.step = fx.src.opt.step = o->step;
    CheckpointSaveInfo info;
    memset(&info, 0, sizeof info);
    double t0 = now_ms();
    rc = whole ? checkpoint_save(o->dir, &fx.src, o->keep_last, &info, &err)
               : checkpoint_save_sharded(o->dir, &fx.src, &sh, o->keep_last, &info, &err);
    double ms = now_ms() - t0;
    bad += judge(o, rc, &err, rank);
    if (!rc && rank == 0) printf("saved %s (%llu bytes, %.0f ms)\n", info.dir, (unsigned long long)info.bytes, ms);
  } else {
    poison(&fx);
    CheckpointTrainState st;
    memset(&st, 0, sizeof st);
    double t0 = now_ms();
    CheckpointOptimizer moments = moments_of(&fx.opt);
    rc = whole ? checkpoint_load_training(o->dir, &fx.net, fx.model_record, &moments, &st, &err)
               : checkpoint_load_training_sharded(o->dir, &fx.net, fx.model_record, &moments, &st, &sh, &err);
    fx.opt.step = moments.step;
    double ms = now_ms() - t0;
    bad += judge(o, rc, &err, rank);
    if (!rc && rank == 0) printf("loaded %s (%.0f ms)\n", o->dir, ms);
    if (!rc) {
      bad += check_state(&st, o, &fx.opt, rank);
      bad += visit_values(&fx, o->step, 0, 1, rank);
    }
    if (!rc && whole) {
      /* The weights-only loader of `fivefold sample` / `export` too. */
      poison(&fx);
      if (checkpoint_load_weights(o->dir, &fx.net, fx.model_record, &err)) {
        fprintf(stderr, "FAIL: checkpoint_load_weights %s: %s\n", o->dir, err.msg);
        bad++;
      } else {
        bad += visit_values(&fx, o->step, 0, 0, rank);
      }
    }
  }
  /* Every rank must report the same outcome. */
  int64_t codes[2] = {rc, -(int64_t)rc};
  Error ignored = {0};
  comm_allreduce_i64(g, codes, 2, COMM_MAX, NULL, &ignored);
  if (codes[0] != -codes[1]) {
    if (rank == 0)
      fprintf(stderr, "FAIL: the ranks returned different codes (%lld .. %lld)\n", (long long)-codes[1],
              (long long)codes[0]);
    bad++;
  }
  if (rank == 0 && bad == 0)
    printf("%s %s: checks passed on %d rank%s (tp %d, dp %d, pp %d x %d chunk%s)\n", o->mode, o->dir, g->size,
           g->size > 1 ? "s" : "", o->tp, l.dp, o->pp, o->chunks, o->chunks > 1 ? "s" : "");
  fixture_free(&fx);
  return bad;
}

int main(int argc, char **argv) {
  Error err = {0};
  if (comm_init(&argc, &argv, &err)) {
    fprintf(stderr, "FAIL: %s\n", err.msg);
    return 1;
  }
  const CommGroup *world = comm_world();
  int64_t total_bad = 0;
  for (int first = 1; first < argc;) {
    int end = first;
    while (end < argc && strcmp(argv[end], "+")) end++;
    Options o;
    parse_options(end - first, argv + first, &o);
    const int np = o.np ? o.np : world->size;
    if (np > world->size) usage_exit("--np exceeds the world");
    /* The operation's own world: the first np ranks. */
    CommGroup g = {.comm = MPI_COMM_NULL, .size = np, .rank = world->rank};
    snprintf(g.name, sizeof g.name, "ckpt-check");
    MPI_Comm_split(world->comm, world->rank < np ? 0 : MPI_UNDEFINED, world->rank, &g.comm);
    int64_t bad = g.comm != MPI_COMM_NULL ? run_operation(&o, &g) : 0;
    if (g.comm != MPI_COMM_NULL) MPI_Comm_free(&g.comm);
    Error ignored = {0};
    comm_allreduce_i64(world, &bad, 1, COMM_SUM, NULL, &ignored);
    total_bad += bad;
    first = end + 1;
  }
  if (world->rank == 0 && total_bad == 0) printf("ckpt_dist_check: all checks passed\n");
  comm_finalize(&err);
  return total_bad ? 1 : 0;
}
