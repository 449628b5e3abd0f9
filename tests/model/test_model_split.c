/* The split backward of zero-bubble orders (model.h,
 * model_chunk_backward_input / model_chunk_backward_weights) against the
 * unsplit one, on pipeline chunks of one Model (3 layers as chunks of 1 and
 * 2 blocks, the embedding and the head on the ends), two micro-batches:
 *  - the gradients after F0 F1 B0 B1 W0 W1 (and F0 B0 W0 F1 B1 W1) are
 *    bit-identical to F0 F1 B0 B1 (F0 B0 F1 B1) with the unsplit backward, and so are
 *    the input gradients each B hands to the previous stage, for a dense
 *    model, an MoE model (experts stay in B), a biased GQA model and GPT-2
 *    (its MLP stays in B);
 *  - after B alone, the deferred weights (wq, wk, wv, wo, w_gate_up,
 *    w_down) still hold no gradient of that micro-batch, so the split
 *    really moves work;
 *  - on_grads_ready is reported by W, not B, covering the chunk once;
 *  - misuse is refused: W without B, a forward into a slot whose W is due,
 *    and either half on a shard made without split_backward. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "model/model.h"
#include "shard_check.h"

enum { B = 2, T = 8, N = B * T, SEED = 99 };

static int g_tokens[2][N], g_targets[2][N];

static void make_batches(int V) {
  for (int mb = 0; mb < 2; mb++)
    for (int n = 0; n < N; n++) {
      g_tokens[mb][n] = (int)(rng_u64(3, (uint64_t)mb, (uint64_t)n) % (uint64_t)V);
      g_targets[mb][n] = n % 5 == 2 ? -1 : (int)(rng_u64(4, (uint64_t)mb, (uint64_t)n) % (uint64_t)V);
    }
}

/* Chunk 0: embedding + layer 0, chunk 1: layers 1..2 + head; two slots. */
static void make_model(Model *m, const ModelConfig *c, int split) {
  ModelShard sh;
  shard_two_chunks(c, &sh);
  sh.split_backward = split;
  Error err = {0, ""};
  if (model_create_shard(m, c, &sh, NULL, B, T, &err)) fail_msg("%s", err.msg);
  model_init_weights(m, SEED);
  shard_seed_biases(m, SEED);
  model_zero_grad(m);
}

static void forward(Model *m, int mb) {
  Error err = {0, ""};
  ModelLoss l;
  if (model_chunk_forward(m, 0, mb, g_tokens[mb], NULL, NULL, B, T, 1, 0.5f, &l, &err)) fail_msg("%s", err.msg);
  if (model_chunk_forward(m, 1, mb, NULL, g_targets[mb], model_chunk_output(m, 0, mb), B, T, 1, 0.5f, &l, &err))
    fail_msg("%s", err.msg);
}

typedef struct Ready {
  size_t reported; /* floats reported */
} Ready;

static void on_ready(void *ctx, size_t offset, size_t count) {
  (void)offset;
  ((Ready *)ctx)->reported += count;
}

/* The backward of micro-batch mb through both chunks; split: B only (W
 * follows with weights()). The input gradient of chunk 1 goes to dx. */
static void backward(Model *m, int mb, int split, float *dx, size_t rows_c) {
  Error err = {0, ""};
  int rc = split ? model_chunk_backward_input(m, 1, mb, NULL, &err) : model_chunk_backward(m, 1, mb, NULL, &err);
  if (rc) fail_msg("%s", err.msg);
  memcpy(dx, model_chunk_input_grad(m, 1, mb), rows_c * sizeof *dx);
  rc = split ? model_chunk_backward_input(m, 0, mb, dx, &err) : model_chunk_backward(m, 0, mb, dx, &err);
  if (rc) fail_msg("%s", err.msg);
}

static void weights(Model *m, int mb) {
  Error err = {0, ""};
  if (model_chunk_backward_weights(m, 1, mb, &err)) fail_msg("%s", err.msg);
  if (model_chunk_backward_weights(m, 0, mb, &err)) fail_msg("%s", err.msg);
}

static const ParamTensor *tensor(const Model *m, const char *name) {
  const ParamTensor *t = model_find_tensor(m, name);
  if (!t) fail_msg("no tensor %s", name);
  return t;
}

static int all_zero(const Model *m, const ParamTensor *t) {
  for (size_t j = 0; j < t->numel; j++)
    if (m->grads[t->offset + j] != 0.0f) return 0;
  return 1;
}

static void check_split(const ModelConfig *c, int interleave_w) {
  make_batches(c->vocab_size);
  Model ref, sp;
  make_model(&ref, c, 0);
  make_model(&sp, c, 1);
  size_t rows_c = (size_t)N * c->hidden_size;
  float *dx_ref = malloc(2 * rows_c * sizeof(float)), *dx_sp = malloc(2 * rows_c * sizeof(float));
  assert_non_null(dx_ref);
  assert_non_null(dx_sp);
  /* The unsplit reference in the same order of forwards and backwards
   * (a tied embedding adds the head's gradient in forward, so the order of
   * F and B changes its sums). */
  if (interleave_w) {
    for (int mb = 0; mb < 2; mb++) {
      forward(&ref, mb);
      backward(&ref, mb, 0, dx_ref + mb * rows_c, rows_c);
    }
  } else {
    forward(&ref, 0);
    forward(&ref, 1);
    for (int mb = 0; mb < 2; mb++) backward(&ref, mb, 0, dx_ref + mb * rows_c, rows_c);
  }
  Ready ready = {0};
  sp.on_grads_ready = on_ready;
  sp.on_grads_ready_ctx = &ready;
  forward(&sp, 0);
  if (!interleave_w) forward(&sp, 1);
  backward(&sp, 0, 1, dx_sp, rows_c);
  assert_int_equal(ready.reported, 0); /* B reports nothing: the gradient is not final */
  /* B left the deferred weight GEMMs to W: those gradients are still zero. */
  const char *deferred[] = {"layers.1.attn.wq", "layers.1.attn.wk", "layers.1.attn.wv", "layers.1.attn.wo"};
  for (int k = 0; k < 4; k++) assert_true(all_zero(&sp, tensor(&sp, deferred[k])));
  if (!c->gpt2 && !(c->num_experts > 0 && c->is_moe_layer[1]))
    assert_true(all_zero(&sp, tensor(&sp, "layers.1.mlp.w_down")));
  /* A forward into a slot whose W is due is refused. */
  Error err = {0, ""};
  ModelLoss l;
  assert_int_equal(model_chunk_forward(&sp, 0, 0, g_tokens[0], NULL, NULL, B, T, 1, 0.5f, &l, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "awaits the weight gradients"));
  if (interleave_w) {
    weights(&sp, 0);
    forward(&sp, 1);
    backward(&sp, 1, 1, dx_sp + rows_c, rows_c);
  } else {
    backward(&sp, 1, 1, dx_sp + rows_c, rows_c);
    weights(&sp, 0);
  }
  weights(&sp, 1);
  assert_int_equal(ready.reported, 2 * sp.num_params); /* both chunks, each micro-batch's W */
  assert_int_equal(memcmp(dx_ref, dx_sp, 2 * rows_c * sizeof(float)), 0);
  assert_int_equal(ref.num_params, sp.num_params);
  for (int i = 0; i < ref.num_tensors; i++) {
    const ParamTensor *t = &ref.tensors[i];
    if (memcmp(ref.grads + t->offset, sp.grads + t->offset, t->numel * sizeof(float)))
      fail_msg("%s: the split backward's gradient differs from the unsplit one", t->name);
  }
  /* W twice is refused. */
  assert_int_equal(model_chunk_backward_weights(&sp, 0, 1, &err), ERR_ARG);
  free(dx_ref);
  free(dx_sp);
  model_free(&ref);
  model_free(&sp);
}

static void dense_cfg(ModelConfig *c) { shard_dense_cfg(c); }

static void test_dense(void **state) {
  (void)state;
  ModelConfig c;
  dense_cfg(&c);
  check_split(&c, 0);
  check_split(&c, 1);
}

static void test_moe(void **state) {
  (void)state;
  ModelConfig c;
  shard_moe_cfg(&c, 4);
  check_split(&c, 0);
  c.is_moe_layer[1] = 1; /* the deferred layer is MoE: its experts stay in B */
  c.is_moe_layer[2] = 0;
  check_split(&c, 1);
}

static void test_biased_gpt2(void **state) {
  (void)state;
  ModelConfig c;
  dense_cfg(&c);
  c.qkv_bias = 1;
  c.o_bias = 1;
  c.tie_word_embeddings = 1;
  check_split(&c, 0);
  dense_cfg(&c);
  c.gpt2 = 1;
  strcpy(c.model_type, "gpt2");
  c.num_kv_heads = 4;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = 1;
  check_split(&c, 1);
}

static void test_refusals(void **state) {
  (void)state;
  ModelConfig c;
  dense_cfg(&c);
  make_batches(c.vocab_size);
  Model m;
  make_model(&m, &c, 0);
  Error err = {0, ""};
  forward(&m, 0);
  assert_int_equal(model_chunk_backward_input(&m, 1, 0, NULL, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "without split_backward"));
  assert_int_equal(model_chunk_backward_weights(&m, 1, 0, &err), ERR_ARG);
  model_free(&m);
  make_model(&m, &c, 1);
  forward(&m, 0);
  assert_int_equal(model_chunk_backward_weights(&m, 1, 0, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "no split backward awaiting"));
  model_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dense),
      cmocka_unit_test(test_moe),
      cmocka_unit_test(test_biased_gpt2),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
