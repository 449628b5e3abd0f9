/* Full activation recomputation (ModelShard.recompute_method) against the
 * run that keeps every activation, on pipeline chunks of one Model (4
 * layers as chunks of 1 and 3 blocks, two slots, forwards F0 F1 before the
 * backwards B0 B1, so a backward that did not rerun its group would read
 * the other micro-batch's activations):
 *  - uniform groups of 1, 2 and 3 blocks and the block method (first 1 or
 *    2 blocks of each chunk): losses, chunk outputs, the input gradients
 *    each backward hands back, every parameter gradient and the MoE
 *    statistics are bit-identical, for a dense model, an MoE model (shared
 *    expert, aux and z losses), a biased model with tied embeddings and
 *    GPT-2, in fp32 and bf16;
 *  - with the split backward of zero-bubble orders (B then W), likewise;
 *  - the activation memory of the model is smaller with recomputation, by
 *    at least the blocks it no longer keeps;
 *  - selective recomputation (ModelShard.recompute_modules: layernorm, mlp,
 *    both) likewise bit-identical, unsplit and split, with fewer
 *    activation bytes by at least the norm outputs and first MLP products
 *    the slots no longer keep (less the one shared buffer of each);
 *    (with the residual add and norm fused, the default, and unfused);
 *  - a shard with an unknown method, a negative count, unknown module bits
 *    or modules together with full recomputation is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "kern/fusion.h"
#include "kern/precision.h"
#include "model/model.h"
#include "shard_check.h"

enum { B = 2, T = 8, N = B * T, SEED = 7 };

static int g_tokens[2][N], g_targets[2][N];

static void make_batches(int V) {
  for (int mb = 0; mb < 2; mb++)
    for (int n = 0; n < N; n++) {
      g_tokens[mb][n] = (int)(rng_u64(11, (uint64_t)mb, (uint64_t)n) % (uint64_t)V);
      g_targets[mb][n] = n % 7 == 3 ? -1 : (int)(rng_u64(12, (uint64_t)mb, (uint64_t)n) % (uint64_t)V);
    }
}

/* Chunk 0: embedding + layer 0; chunk 1: layers 1..L-1 + head; two slots. */
static void make_model_sel(Model *m, const ModelConfig *c, int method, int num, int split, unsigned mods) {
  ModelShard sh;
  shard_two_chunks(c, &sh);
  sh.split_backward = split;
  sh.recompute_method = method;
  sh.recompute_num_layers = num;
  sh.recompute_modules = mods;
  Error err = {0, ""};
  if (model_create_shard(m, c, &sh, NULL, B, T, &err)) fail_msg("%s", err.msg);
  model_init_weights(m, SEED);
  shard_seed_biases(m, SEED);
  model_zero_grad(m);
}

static void make_model(Model *m, const ModelConfig *c, int method, int num, int split) {
  make_model_sel(m, c, method, num, split, 0);
}

/* What one run produced, to compare bit for bit. */
typedef struct Run {
  double loss[2][4];
  float *out, *dx; /* [2, rows, C] chunk 0's output, chunk 1's input gradient */
  float *grads;
  long *counts;
  size_t act_bytes;
} Run;

static void run_sel(const ModelConfig *c, int method, int num, int split, unsigned mods, Run *r) {
  Model m;
  make_model_sel(&m, c, method, num, split, mods);
  const size_t rows_c = (size_t)N * c->hidden_size;
  r->out = malloc(2 * rows_c * sizeof(float));
  r->dx = malloc(2 * rows_c * sizeof(float));
  r->grads = malloc(m.num_params * sizeof(float));
  const size_t nc = (size_t)c->num_layers * (c->num_experts > 0 ? c->num_experts : 1);
  r->counts = calloc(2 * nc, sizeof(long));
  assert_true(r->out && r->dx && r->grads && r->counts);
  Error err = {0, ""};
  for (int mb = 0; mb < 2; mb++) {
    ModelLoss l0, l1;
    if (model_chunk_forward(&m, 0, mb, g_tokens[mb], NULL, NULL, B, T, 1, 0.5f, &l0, &err)) fail_msg("%s", err.msg);
    memcpy(r->out + mb * rows_c, model_chunk_output(&m, 0, mb), rows_c * sizeof(float));
    if (model_chunk_forward(&m, 1, mb, NULL, g_targets[mb], model_chunk_output(&m, 0, mb), B, T, 1, 0.5f, &l1, &err))
      fail_msg("%s", err.msg);
    r->loss[mb][0] = l1.lm;
    r->loss[mb][1] = l0.aux + l1.aux;
    r->loss[mb][2] = l0.z + l1.z;
    r->loss[mb][3] = (double)l1.tokens;
    memcpy(r->counts + mb * nc, m.expert_counts, nc * sizeof(long));
  }
  for (int mb = 0; mb < 2; mb++) {
    int rc = split ? model_chunk_backward_input(&m, 1, mb, NULL, &err) : model_chunk_backward(&m, 1, mb, NULL, &err);
    if (rc) fail_msg("%s", err.msg);
    memcpy(r->dx + mb * rows_c, model_chunk_input_grad(&m, 1, mb), rows_c * sizeof(float));
    rc = split ? model_chunk_backward_input(&m, 0, mb, r->dx + mb * rows_c, &err)
               : model_chunk_backward(&m, 0, mb, r->dx + mb * rows_c, &err);
    if (rc) fail_msg("%s", err.msg);
  }
  /* The rerun leaves the forward's statistics alone. */
  assert_int_equal(memcmp(r->counts + nc, m.expert_counts, nc * sizeof(long)), 0);
  if (split)
    for (int mb = 0; mb < 2; mb++)
      if (model_chunk_backward_weights(&m, 1, mb, &err) || model_chunk_backward_weights(&m, 0, mb, &err))
        fail_msg("%s", err.msg);
  memcpy(r->grads, m.grads, m.num_params * sizeof(float));
  r->act_bytes = m.activation_bytes;
  if (method != MODEL_RECOMPUTE_NONE && num > 0) assert_true(m.recompute_workspace_bytes > 0);
  model_free(&m);
}

static void run(const ModelConfig *c, int method, int num, int split, Run *r) { run_sel(c, method, num, split, 0, r); }

static void run_free(Run *r) {
  free(r->out);
  free(r->dx);
  free(r->grads);
  free(r->counts);
}

static void check_same(const ModelConfig *c, const Run *ref, const Run *r, const char *what) {
  const size_t rows_c = (size_t)N * c->hidden_size;
  const size_t nc = (size_t)c->num_layers * (c->num_experts > 0 ? c->num_experts : 1);
  if (memcmp(ref->loss, r->loss, sizeof ref->loss)) fail_msg("%s: losses differ", what);
  if (memcmp(ref->out, r->out, 2 * rows_c * sizeof(float))) fail_msg("%s: chunk outputs differ", what);
  if (memcmp(ref->counts, r->counts, 2 * nc * sizeof(long))) fail_msg("%s: expert counts differ", what);
  if (memcmp(ref->dx, r->dx, 2 * rows_c * sizeof(float))) fail_msg("%s: input gradients differ", what);
  Model shape;
  make_model(&shape, c, 0, 0, 0);
  for (int i = 0; i < shape.num_tensors; i++) {
    const ParamTensor *t = &shape.tensors[i];
    if (memcmp(ref->grads + t->offset, r->grads + t->offset, t->numel * sizeof(float)))
      fail_msg("%s: gradient of %s differs from the run without recomputation", what, t->name);
  }
  model_free(&shape);
}

static void check_config(const ModelConfig *c) {
  make_batches(c->vocab_size);
  const struct {
    int method, num;
    const char *name;
  } kinds[] = {{MODEL_RECOMPUTE_UNIFORM, 1, "uniform 1"},
               {MODEL_RECOMPUTE_UNIFORM, 2, "uniform 2"},
               {MODEL_RECOMPUTE_UNIFORM, 3, "uniform 3"},
               {MODEL_RECOMPUTE_BLOCK, 1, "block 1"},
               {MODEL_RECOMPUTE_BLOCK, 2, "block 2"}};
  for (int split = 0; split < 2; split++) {
    Run ref;
    run(c, MODEL_RECOMPUTE_NONE, 0, split, &ref);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
      Run r;
      char what[64];
      snprintf(what, sizeof what, "%s%s", kinds[k].name, split ? " (split backward)" : "");
      run(c, kinds[k].method, kinds[k].num, split, &r);
      check_same(c, &ref, &r, what);
      /* The slots no longer hold the recomputed blocks' activations. */
      if (r.act_bytes >= ref.act_bytes)
        fail_msg("%s: %zu activation bytes, not fewer than the %zu without recomputation", what, r.act_bytes,
                 ref.act_bytes);
      run_free(&r);
    }
    /* Selective recomputation: what the two slots of both chunks no
     * longer keep (4 blocks each), less the shared buffers. */
    const size_t NC = (size_t)N * c->hidden_size, NF = (size_t)N * 2 * c->intermediate_size;
    int dense = 0;
    for (int l = 0; l < c->num_layers; l++) dense += !(c->num_experts > 0 && c->is_moe_layer[l]);
    const struct {
      unsigned mods;
      size_t saved;
      const char *name;
    } sel[] = {{MODEL_RECOMPUTE_LAYERNORM_BIT, (2 * 2 * (size_t)c->num_layers - 1) * NC, "selective layernorm"},
               {MODEL_RECOMPUTE_MLP_BIT, (2 * (size_t)dense - 1) * NF, "selective mlp"},
               {MODEL_RECOMPUTE_LAYERNORM_BIT | MODEL_RECOMPUTE_MLP_BIT,
                (2 * 2 * (size_t)c->num_layers - 1) * NC + (2 * (size_t)dense - 1) * NF, "selective layernorm,mlp"}};
    for (size_t k = 0; k < sizeof sel / sizeof sel[0]; k++) {
      Run r;
      char what[80];
      snprintf(what, sizeof what, "%s%s", sel[k].name, split ? " (split backward)" : "");
      run_sel(c, MODEL_RECOMPUTE_NONE, 0, split, sel[k].mods, &r);
      check_same(c, &ref, &r, what);
      /* at most one alignment pad per new shared buffer */
      if (r.act_bytes + sel[k].saved * sizeof(float) > ref.act_bytes + 2 * 64)
        fail_msg("%s: %zu activation bytes, expected at most %zu - %zu", what, r.act_bytes, ref.act_bytes,
                 sel[k].saved * sizeof(float));
      run_free(&r);
    }
    run_free(&ref);
  }
}

static void four_layers(ModelConfig *c) { c->num_layers = 4; }

static void test_dense(void **state) {
  (void)state;
  ModelConfig c;
  shard_dense_cfg(&c);
  four_layers(&c);
  check_config(&c);
}

static void test_moe(void **state) {
  (void)state;
  ModelConfig c;
  shard_moe_cfg(&c, 4);
  four_layers(&c);
  c.is_moe_layer[3] = 1;
  check_config(&c);
}

static void test_biased_tied(void **state) {
  (void)state;
  ModelConfig c;
  shard_dense_cfg(&c);
  four_layers(&c);
  c.qkv_bias = 1;
  c.o_bias = 1;
  c.tie_word_embeddings = 1;
  check_config(&c);
}

static void test_gpt2(void **state) {
  (void)state;
  ModelConfig c;
  shard_dense_cfg(&c);
  four_layers(&c);
  c.gpt2 = 1;
  strcpy(c.model_type, "gpt2");
  c.num_kv_heads = 4;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = 1;
  check_config(&c);
}

static void test_bf16(void **state) {
  (void)state;
  ModelConfig c;
  shard_moe_cfg(&c, 4);
  four_layers(&c);
  char why[128];
  if (kern_set_precision(KERN_PRECISION_BF16, why, sizeof why)) {
    printf("bf16 not run: %s\n", why); /* the fp32 cases above still ran */
    return;
  }
  check_config(&c);
  kern_set_precision(KERN_PRECISION_FP32, why, sizeof why);
}

/* Selective recomputation with the residual add and norm unfused: the
 * forward then normalises the stored sum, as the rebuild always does. */
static void test_unfused_norm(void **state) {
  (void)state;
  ModelConfig c;
  shard_moe_cfg(&c, 4);
  four_layers(&c);
  c.is_moe_layer[3] = 1;
  KernFusion f = kern_fusion(), unfused = f;
  unfused.norm_residual = 0;
  kern_set_fusion(unfused);
  check_config(&c);
  kern_set_fusion(f);
}

static void test_refusals(void **state) {
  (void)state;
  ModelConfig c;
  shard_dense_cfg(&c);
  ModelShard sh;
  model_shard_default(&c, &sh);
  Model m;
  Error err = {0, ""};
  sh.recompute_method = 3;
  assert_int_equal(model_create_shard(&m, &c, &sh, NULL, B, T, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "recompute_method"));
  sh.recompute_method = MODEL_RECOMPUTE_UNIFORM;
  sh.recompute_num_layers = -1;
  assert_int_equal(model_create_shard(&m, &c, &sh, NULL, B, T, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "recompute_num_layers"));
  sh.recompute_num_layers = 1;
  sh.recompute_modules = MODEL_RECOMPUTE_LAYERNORM_BIT;
  assert_int_equal(model_create_shard(&m, &c, &sh, NULL, B, T, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "recompute_modules"));
  sh.recompute_method = MODEL_RECOMPUTE_NONE;
  sh.recompute_modules = 1u << 5;
  assert_int_equal(model_create_shard(&m, &c, &sh, NULL, B, T, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "recompute_modules"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dense),       cmocka_unit_test(test_moe),  cmocka_unit_test(test_biased_tied),
      cmocka_unit_test(test_gpt2),        cmocka_unit_test(test_bf16), cmocka_unit_test(test_unfused_norm),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
