/* The planner prices the GPT-2 family as it runs: per layer, the parameter
 * count it charges (and so the model-state memory) equals what the model
 * actually allocates (model_create's num_params) for a GPT-2 config
 * (LayerNorm with bias, biased q/k/v/o, a two-matrix GeLU MLP with
 * biases, learned positions) and for a SwiGLU one; and the GEMM FLOPs its
 * cost model charges a layer (on a cluster where only GEMMs take time)
 * equal model/flops.c's count of attention projections and MLP, which for
 * GPT-2 is two MLP matrices where a SwiGLU model of the same widths has
 * three. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "model/flops.h"
#include "model/model.h"
#include "plan/cost.h"
#include "plan/memory.h"
#include "plan_test_util.h"

static void assert_close(double got, double want) {
  if (fabs(got - want) > 1e-9 * fabs(want) + 1e-9) print_error("got %.12g, want %.12g\n", got, want);
  assert_true(fabs(got - want) <= 1e-9 * fabs(want) + 1e-9);
}

/* Parameters the planner charges a one-rank run, all stages together. */
static double planned_params(const ModelConfig *m) {
  PlanConfig c;
  plan_config_init(&c, 16, 1, 1);
  double total = plan_embedding_params(m, &c).dense + plan_head_params(m, &c).dense;
  for (int l = 0; l < m->num_layers; l++) {
    PlanParams p = plan_layer_params(m, &c, l);
    total += p.dense + p.expert;
  }
  return total;
}

static double allocated_params(const ModelConfig *cfg) {
  Model m;
  Error err = {0, ""};
  if (model_create(&m, cfg, 1, 8, &err)) fail_msg("%s", err.msg);
  double n = (double)m.num_params;
  model_free(&m);
  return n;
}

/* Forward + backward GEMM FLOPs of one layer for one sequence of s tokens:
 * the time the cost model charges on a cluster where GEMMs run at a flat
 * half of a 1e15 peak and nothing else costs anything. */
static double planned_layer_gemm_flops(const ModelConfig *m, int s) {
  ClusterSpec cl;
  plan_test_free_cluster(&cl, 1, 8);
  PlanOptions o;
  plan_test_free_options(&o);
  PlanConfig c;
  plan_config_init(&c, s, 1, 1);
  PlanCostModel cm;
  Error err = {0, ""};
  int rc = plan_config_finish(&c, m, &cl, 1, &err);
  if (!rc) rc = plan_cost_model_init(&cm, m, &cl, &o, &c, NULL, &err);
  if (rc) fail_msg("%s", err.msg);
  const PlanPassCost *pc = plan_layer_cost(&cm, 0);
  double t = pc->fwd.t[PLAN_COMP_ATTN_GEMM] + pc->fwd.t[PLAN_COMP_MLP_GEMM] + pc->bwd.t[PLAN_COMP_ATTN_GEMM] +
             pc->bwd.t[PLAN_COMP_MLP_GEMM];
  return t * 0.5e15;
}

/* model/flops.c's per-layer count without the attention scores (the
 * cost model prices those as the attention core, causally halved). */
static double counted_layer_gemm_flops(const ModelConfig *m, int s) {
  double h = m->hidden_size, a = m->num_heads, d = model_config_head_dim(m);
  double total = model_flops_per_sequence(m, s) - 6.0 * s * h * m->vocab_size;
  return total / m->num_layers - 12.0 * s * s * a * d;
}

static void test_gpt2_params_and_flops(void **state) {
  (void)state;
  ModelConfig gpt2, swiglu;
  assert_int_equal(plan_test_load_model(&gpt2, "tiny/gpt2"), 0);
  assert_true(gpt2.gpt2);
  /* The same widths with a SwiGLU MLP, RMSNorm, RoPE and no biases. */
  model_config_defaults(&swiglu);
  swiglu.vocab_size = gpt2.vocab_size;
  swiglu.hidden_size = gpt2.hidden_size;
  swiglu.num_layers = gpt2.num_layers;
  swiglu.num_heads = swiglu.num_kv_heads = gpt2.num_heads;
  swiglu.intermediate_size = gpt2.intermediate_size;
  swiglu.max_position_embeddings = gpt2.max_position_embeddings;
  swiglu.tie_word_embeddings = gpt2.tie_word_embeddings;

  assert_close(planned_params(&gpt2), allocated_params(&gpt2));
  assert_close(planned_params(&swiglu), allocated_params(&swiglu));
  /* By hand for the tiny GPT-2 (h 32, f 40, 2 layers, V 48, 64 positions,
   * tied): per layer 4h^2 + 4h (attention) + 2hf + f + h (MLP) + 4h (norms). */
  const double h = 32, f = 40;
  const double layer = 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h;
  PlanConfig c;
  plan_config_init(&c, 16, 1, 1);
  assert_close(plan_layer_params(&gpt2, &c, 0).dense, layer);
  assert_close(planned_params(&gpt2), 2 * layer + 48 * h + 64 * h + 2 * h);
  assert_true(plan_layer_params(&swiglu, &c, 0).dense != layer);

  const int s = 64;
  assert_close(planned_layer_gemm_flops(&gpt2, s), counted_layer_gemm_flops(&gpt2, s));
  assert_close(planned_layer_gemm_flops(&swiglu, s), counted_layer_gemm_flops(&swiglu, s));
  /* The MLP's share: 12 s h f for GeLU's two matrices, 18 s h f for SwiGLU's three. */
  assert_close(planned_layer_gemm_flops(&gpt2, s), 24.0 * s * h * h + 12.0 * s * h * f);
  assert_close(planned_layer_gemm_flops(&swiglu, s) - planned_layer_gemm_flops(&gpt2, s), 6.0 * s * h * f);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpt2_params_and_flops)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
