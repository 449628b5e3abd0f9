/* Whole-model gradient checks: central finite differences of the objective
 * lm + aux + z against model_backward, for a few elements of every
 * parameter tensor, on tiny dense, MoE (each router order, sigmoid score,
 * aux and z losses, shared expert, dropping) and mixed dense/MoE models.
 * An element whose perturbation changes any routing decision (top-k choice
 * or kept/dropped assignment) is skipped: the objective is not
 * differentiable there. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <omp.h>

#include "base/rng.h"
#include "model/model.h"
#include "model/model_internal.h"

enum { B = 2, T = 8, VOCAB = 32 };

static void tiny_dense(ModelConfig *c) {
  model_config_defaults(c);
  c->vocab_size = VOCAB;
  c->hidden_size = 16;
  c->num_layers = 2;
  c->num_heads = 4;
  c->num_kv_heads = 2;
  c->intermediate_size = 24;
  c->init_std = 0.3f;
  c->rms_norm_eps = 1e-5f;
}

static void tiny_moe(ModelConfig *c) {
  tiny_dense(c);
  c->num_experts = 4;
  c->top_k = 2;
  c->moe_intermediate_size = 12;
  model_config_set_moe_layer_freq(c, 1);
}

static double objective(Model *m, const int *tokens, const int *targets) {
  ModelLoss loss;
  Error err = {0};
  if (model_forward(m, tokens, targets, B, T, 0, 1.0f, &loss, &err)) fail_msg("%s", err.msg);
  return loss.lm + loss.aux + loss.z;
}

typedef struct Stats {
  int checked, skipped;
  double max_abs_err;
} Stats;

/* Checks element j of tensor t; returns 0 if routing flipped (skipped). */
static int check_element(Model *m, const ParamTensor *t, size_t j, const int *tokens, const int *targets,
                         uint64_t base_fp, Stats *st) {
  const float h = 2e-3f;
  float *p = m->params + t->offset + j;
  const float saved = *p;
  *p = saved + h;
  double plus = objective(m, tokens, targets);
  uint64_t fp_plus = model_routing_fingerprint(m);
  *p = saved - h;
  double minus = objective(m, tokens, targets);
  uint64_t fp_minus = model_routing_fingerprint(m);
  /* The actual step in float may differ from h. */
  double step = (double)(saved + h) - (double)(saved - h);
  *p = saved;
  if (fp_plus != base_fp || fp_minus != base_fp) {
    st->skipped++;
    return 0;
  }
  double fd = (plus - minus) / step;
  double an = m->grads[t->offset + j];
  double err = fabs(fd - an);
  double tol = 3e-4 + 3e-2 * fmax(fabs(fd), fabs(an));
  if (err > st->max_abs_err) st->max_abs_err = err;
  if (!(err <= tol))
    fail_msg("%s[%zu]: analytic %.6g, finite difference %.6g (error %.3g > %.3g)", t->name, j, an, fd, err, tol);
  st->checked++;
  return 1;
}

static void gradcheck(const ModelConfig *cfg, const char *label, int lm_loss) {
  Model m;
  Error err = {0};
  if (model_create(&m, cfg, B, T, &err)) fail_msg("%s: %s", label, err.msg);
  model_init_weights(&m, 1234);
  int tokens[B * T], targets[B * T];
  Rng rng = rng_make(99, 7);
  for (int n = 0; n < B * T; n++) {
    tokens[n] = (int)rng_next_below(&rng, VOCAB);
    targets[n] = lm_loss ? (int)rng_next_below(&rng, VOCAB) : -1;
  }
  if (lm_loss) targets[3] = -1; /* an ignored position */

  model_zero_grad(&m);
  ModelLoss loss;
  if (model_forward(&m, tokens, targets, B, T, 1, 1.0f, &loss, &err)) fail_msg("%s", err.msg);
  if (model_backward(&m, &err)) fail_msg("%s", err.msg);
  uint64_t base_fp = model_routing_fingerprint(&m);
  /* The objective the checks differentiate is the one the forward reports. */
  double base = objective(&m, tokens, targets);
  assert_true(fabs(base - (loss.lm + loss.aux + loss.z)) < 1e-6);
  assert_true(model_routing_fingerprint(&m) == base_fp);

  Stats st = {0};
  for (int i = 0; i < m.num_tensors; i++) {
    const ParamTensor *t = &m.tensors[i];
    /* Two elements with the largest gradients (so a wrong or missing
     * gradient cannot hide in small values) and three at random. */
    size_t top[2] = {0, 0};
    for (size_t j = 0; j < t->numel; j++) {
      float g = fabsf(m.grads[t->offset + j]);
      if (g > fabsf(m.grads[t->offset + top[0]]))
        top[1] = top[0], top[0] = j;
      else if (j != top[0] && g > fabsf(m.grads[t->offset + top[1]]))
        top[1] = j;
    }
    for (int k = 0; k < 2; k++) check_element(&m, t, top[k], tokens, targets, base_fp, &st);
    for (int k = 0; k < 3; k++)
      check_element(&m, t, (size_t)rng_next_below(&rng, t->numel), tokens, targets, base_fp, &st);
  }
  if (st.skipped * 4 > st.checked + st.skipped)
    fail_msg("%s: %d of %d elements changed the routing", label, st.skipped, st.checked + st.skipped);
  printf("  %-36s lm %.4f aux %.4g z %.4g dropped %ld: %d elements checked, %d skipped, max error %.2g\n", label,
         loss.lm, loss.aux, loss.z, m.dropped_assignments, st.checked, st.skipped, st.max_abs_err);
  model_free(&m);
}

static void test_dense(void **state) {
  (void)state;
  ModelConfig c;
  tiny_dense(&c);
  gradcheck(&c, "dense (GQA, untied head)", 1);
  c.tie_word_embeddings = 1;
  c.num_kv_heads = 4;
  gradcheck(&c, "dense (MHA, tied head)", 1);
}

static void test_softmax_then_topk(void **state) {
  (void)state;
  ModelConfig c;
  tiny_moe(&c);
  c.aux_loss_coeff = 0.1f;
  c.z_loss_coeff = 0.01f;
  gradcheck(&c, "softmax_then_topk, renormalised", 1);
  c.norm_topk_prob = 0;
  c.topk_scaling_factor = 2.0f;
  gradcheck(&c, "softmax_then_topk, raw, scaled x2", 1);
}

static void test_topk_then_softmax(void **state) {
  (void)state;
  ModelConfig c;
  tiny_moe(&c);
  c.router_order = ROUTER_TOPK_THEN_SOFTMAX;
  c.aux_loss_coeff = 0.1f;
  c.z_loss_coeff = 0.01f;
  gradcheck(&c, "topk_then_softmax", 1);
}

static void test_sigmoid(void **state) {
  (void)state;
  ModelConfig c;
  tiny_moe(&c);
  c.router_score = ROUTER_SCORE_SIGMOID;
  c.aux_loss_coeff = 0.1f;
  c.z_loss_coeff = 0.01f;
  gradcheck(&c, "sigmoid, top-2", 1);
  c.top_k = 1;
  gradcheck(&c, "sigmoid, top-1", 1);
}

static void test_router_losses_only(void **state) {
  (void)state;
  /* No target: the objective is aux + z alone, so the router-loss gradients
   * are checked without the LM loss around them. */
  ModelConfig c;
  tiny_moe(&c);
  c.aux_loss_coeff = 1.0f;
  c.z_loss_coeff = 0.1f;
  gradcheck(&c, "aux + z only, softmax", 0);
  c.router_score = ROUTER_SCORE_SIGMOID;
  gradcheck(&c, "aux + z only, sigmoid", 0);
}

static void test_shared_expert(void **state) {
  (void)state;
  ModelConfig c;
  tiny_moe(&c);
  c.shared_expert_intermediate_size = 20;
  c.tie_word_embeddings = 1;
  c.aux_loss_coeff = 0.05f;
  gradcheck(&c, "shared expert, tied head", 1);
}

static void test_mixed_and_dropping(void **state) {
  (void)state;
  ModelConfig c;
  tiny_moe(&c);
  c.num_layers = 3;
  c.is_moe_layer[0] = 0;
  c.is_moe_layer[1] = 1;
  c.is_moe_layer[2] = 0;
  c.num_experts = 3;
  c.aux_loss_coeff = 0.1f;
  gradcheck(&c, "mixed dense/MoE", 1);
  c.capacity_factor = 0.75f;
  c.drop_policy = DROP_POLICY_PROBS;
  gradcheck(&c, "mixed, dropping (probs)", 1);
  c.drop_policy = DROP_POLICY_POSITION;
  c.pad_to_capacity = 1;
  gradcheck(&c, "mixed, dropping (position, padded)", 1);
}

int main(void) {
  /* Thousands of passes over a model of a few thousand parameters: threads
   * would only add synchronisation (the kernels' threading is tested with
   * the kernels, and the model's in test_moe / test_model). */
  omp_set_num_threads(1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dense),
      cmocka_unit_test(test_softmax_then_topk),
      cmocka_unit_test(test_topk_then_softmax),
      cmocka_unit_test(test_sigmoid),
      cmocka_unit_test(test_router_losses_only),
      cmocka_unit_test(test_shared_expert),
      cmocka_unit_test(test_mixed_and_dropping),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
