/* Test helper: checking a shard of the model (model.h, "sharding") against
 * the one-rank model, shared by test_model_shard.c (TP and pipeline
 * chunks) and test_model_fold.c (CP, EP and ETP): the tiny configurations
 * both use, the logical position of a local element by the tensor's view
 * (written independently of the model's own), and element-wise comparison
 * of parameters (exact: init is by global index) and gradients.
 * Tolerance for gradients (fp32 sums in another order): |a - b| <= 3e-5 *
 * max|b over the tensor| + 3e-4 * |b|; losses: relative 1e-5. A wrong
 * slice or a missing reduction is off by O(|b|). Header-only (static
 * inline) so a test includes what it uses. */
#ifndef FIVEFOLD_TESTS_MODEL_SHARD_CHECK_H
#define FIVEFOLD_TESTS_MODEL_SHARD_CHECK_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "model/model.h"

/* Dense: 3 layers, hidden 32, 4 heads over 2 KV heads, vocab 64. */
static inline void shard_dense_cfg(ModelConfig *c) {
  model_config_defaults(c);
  c->vocab_size = 64;
  c->hidden_size = 32;
  c->num_layers = 3;
  c->num_heads = 4;
  c->num_kv_heads = 2;
  c->head_dim = 8;
  c->intermediate_size = 48;
  c->init_std = 0.2f;
}

/* MoE on layers 0 and 2 (layer 1 dense): top-2 over num_experts, dropless,
 * a shared expert, aux and z losses on. */
static inline void shard_moe_cfg(ModelConfig *c, int num_experts) {
  shard_dense_cfg(c);
  c->num_experts = num_experts;
  c->top_k = 2;
  c->moe_intermediate_size = 16;
  c->shared_expert_intermediate_size = 8;
  c->is_moe_layer[0] = 1;
  c->is_moe_layer[2] = 1;
  c->aux_loss_coeff = 0.01f;
  c->z_loss_coeff = 0.001f;
}

/* Logical flat index of local element o * inner (the view's last dimension
 * is contiguous). */
static inline size_t logical_row_start(const ParamTensor *t, size_t o) {
  int idx[4] = {0};
  for (int k = t->view_ndim - 2; k >= 0; k--) {
    idx[k] = (int)(o % (size_t)t->view_count[k]);
    o /= (size_t)t->view_count[k];
  }
  size_t g = 0;
  for (int k = 0; k < t->view_ndim; k++) {
    const size_t i = k == t->view_ndim - 1 ? 0 : (size_t)idx[k];
    g = g * (size_t)t->view_shape[k] + i + (size_t)t->view_start[k];
  }
  return g;
}

/* The view covers the one-rank tensor rt and the local slice lies in it. */
static inline void check_view_consistent(const ParamTensor *t, const ParamTensor *rt) {
  size_t gnum = 1, vnum = 1, cnum = 1;
  for (int k = 0; k < rt->ndim; k++) {
    assert_int_equal(t->global_shape[k], rt->shape[k]);
    gnum *= (size_t)rt->shape[k];
  }
  for (int k = 0; k < t->view_ndim; k++) {
    vnum *= (size_t)t->view_shape[k];
    cnum *= (size_t)t->view_count[k];
    assert_true(t->view_start[k] >= 0 && t->view_start[k] + t->view_count[k] <= t->view_shape[k]);
  }
  assert_true(vnum == gnum);
  assert_true(cnum == t->numel);
}

static inline double max_abs(const float *x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
  return m;
}

/* The gradient tolerance; scale: max |one-rank gradient| over the tensor. */
static inline int grad_close(double a, double b, double scale) { return fabs(a - b) <= 3e-5 * scale + 3e-4 * fabs(b); }

/* Every local element of tensor t against the same logical element of the
 * one-rank model ref: params (t's local values) exactly, grads (t's local
 * gradient; NULL: not checked) within the tolerance. */
static inline void compare_slice(const Model *ref, const ParamTensor *t, const float *params, const double *grads,
                                 const char *what) {
  const ParamTensor *rt = model_find_tensor(ref, t->name);
  if (!rt) fail_msg("%s: tensor %s is not in the one-rank model", what, t->name);
  check_view_consistent(t, rt);
  const double scale = max_abs(ref->grads + rt->offset, rt->numel);
  const size_t inner = (size_t)t->view_count[t->view_ndim - 1];
  for (size_t o = 0; o < t->numel / inner; o++) {
    const size_t g = logical_row_start(t, o);
    for (size_t j = 0; j < inner; j++) {
      const size_t li = o * inner + j;
      const float p = params[li], rp = ref->params[rt->offset + g + j];
      if (p != rp) fail_msg("%s: %s[%zu] initialised %g, one rank %g (logical %zu)", what, t->name, li, p, rp, g + j);
      if (!grads) continue;
      const double a = grads[li], b = ref->grads[rt->offset + g + j];
      if (!grad_close(a, b, scale))
        fail_msg("%s: grad %s[%zu] = %.8g, one rank %.8g (logical %zu, tensor max %.3g)", what, t->name, li, a, b,
                 g + j, scale);
    }
  }
}

static inline void expect_loss(const ModelLoss *a, const ModelLoss *b, const char *what) {
  if (fabs(a->lm - b->lm) > 1e-5 * fabs(b->lm)) fail_msg("%s: lm %.9g vs one rank %.9g", what, a->lm, b->lm);
  if (fabs(a->aux - b->aux) > 1e-5 * fabs(b->aux) + 1e-12)
    fail_msg("%s: aux %.9g vs one rank %.9g", what, a->aux, b->aux);
  if (fabs(a->z - b->z) > 1e-5 * fabs(b->z) + 1e-12) fail_msg("%s: z %.9g vs one rank %.9g", what, a->z, b->z);
  assert_int_equal(a->tokens, b->tokens);
}

/* rc and err of a model_create_shard that should have failed with code and
 * a message holding needle; m is freed if it did not fail. */
static inline void expect_create_failed(int rc, Model *m, const Error *err, int code, const char *needle) {
  if (rc == 0) {
    model_free(m);
    fail_msg("expected an error mentioning '%s'", needle);
  }
  assert_int_equal(rc, code);
  if (!strstr(err->msg, needle)) fail_msg("error '%s' does not mention '%s'", err->msg, needle);
}

/* Two pipeline chunks on one rank, two slots (chunk 0: embedding + layer
 * 0; chunk 1: the other layers + head): the layout of the split-backward
 * and recomputation tests, whose forwards of both micro-batches run before
 * either backward. */
static inline void shard_two_chunks(const ModelConfig *c, ModelShard *sh) {
  model_shard_default(c, sh);
  sh->num_chunks = 2;
  sh->layer_begin[0] = 0;
  sh->layer_end[0] = 1;
  sh->layer_begin[1] = 1;
  sh->layer_end[1] = c->num_layers;
  sh->has_embedding[0] = 1;
  sh->has_embedding[1] = 0;
  sh->has_head[0] = 0;
  sh->has_head[1] = 1;
  sh->num_slots = 2;
}

/* Biases start at zero; seeded values make their gradients (and a wrong
 * one) visible. */
static inline void shard_seed_biases(Model *m, uint64_t seed) {
  for (int i = 0; i < m->num_tensors; i++)
    if (m->tensors[i].is_bias)
      for (size_t j = 0; j < m->tensors[i].numel; j++)
        m->params[m->tensors[i].offset + j] = 0.2f * (float)rng_normal(seed, 5, m->tensors[i].offset + j);
}

#endif
