/* Operator fusion as a priced choice (plan/fusion.h): the unfused SwiGLU
 * and bias + GeLU chains cost exactly their extra memory traffic (SwiGLU 2
 * elements of [tokens, ffn] forward and 8 backward, bias + GeLU 1 and 1, at
 * the memory bandwidth), in dense layers and in experts, and the unfused
 * residual adds + norms 2 elements of [tokens, hidden] forward (6 with
 * GPT-2's attention-output and proj biases) and 4 backward, in dense and
 * MoE layers;
 * the search
 * simulates only the model's own switch, picks the variant the pricing
 * makes faster, and prices the unfused variant's step as fused + the
 * layers' extra traffic x micro-batches; with memory free the variants
 * tie and the fused kernel is kept; a plan file's "fusion" is read back
 * and a malformed one refused naming the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "plan/fusion.h"
#include "plan/plan_file.h"
#include "plan_test_util.h"

#define BW 1e10

static void assert_close(double got, double want) {
  if (fabs(got - want) > 1e-9 * fabs(want) + 1e-15) print_error("got %.12g, want %.12g\n", got, want);
  assert_true(fabs(got - want) <= 1e-9 * fabs(want) + 1e-15);
}

static void cluster(ClusterSpec *c, double bandwidth) {
  plan_test_free_cluster(c, 1, 8);
  c->memory_bandwidth = bandwidth;
}

static ModelConfig dense(void) {
  ModelConfig m = plan_test_tiny_moe();
  m.num_experts = 0, m.top_k = 0;
  model_config_set_moe_layer_freq(&m, 0);
  return m;
}

static void config(PlanConfig *c, const ModelConfig *m, const ClusterSpec *cl) {
  plan_config_init(c, 128, 4, 2); /* 2 micro-batches of 2 x 128 tokens */
  c->dtype = PLAN_DTYPE_FP32;
  Error err = {0, ""};
  assert_int_equal(plan_config_finish(c, m, cl, 1, &err), 0);
}

/* Elementwise time of layer l, forward and backward, with the switches. */
static void elementwise_n(const ModelConfig *m, const ClusterSpec *cl, const PlanConfig *c, int swiglu,
                          int bias_gelu, int norm_residual, int l, double *fwd, double *bwd) {
  PlanOptions o;
  plan_test_free_options(&o);
  o.fuse_swiglu = swiglu, o.fuse_bias_gelu = bias_gelu, o.fuse_norm_residual = norm_residual;
  PlanCostModel cm;
  Error err = {0, ""};
  assert_int_equal(plan_cost_model_init(&cm, m, cl, &o, c, NULL, &err), 0);
  const PlanPassCost *pc = plan_layer_cost(&cm, l);
  *fwd = pc->fwd.t[PLAN_COMP_ELEMENTWISE];
  *bwd = pc->bwd.t[PLAN_COMP_ELEMENTWISE];
}

static void elementwise(const ModelConfig *m, const ClusterSpec *cl, const PlanConfig *c, int swiglu, int bias_gelu,
                        int l, double *fwd, double *bwd) {
  elementwise_n(m, cl, c, swiglu, bias_gelu, 1, l, fwd, bwd);
}

static void test_extra_traffic(void **state) {
  (void)state;
  ClusterSpec cl;
  cluster(&cl, BW);
  double N = 2 * 128, fa, ba, fb, bb;
  /* SwiGLU, dense: F = 512 fp32. */
  ModelConfig m = dense();
  PlanConfig c;
  config(&c, &m, &cl);
  elementwise(&m, &cl, &c, 1, 1, 0, &fa, &ba);
  elementwise(&m, &cl, &c, 0, 1, 0, &fb, &bb);
  assert_close(fb - fa, 4 * 2 * N * 512 / BW);
  assert_close(bb - ba, 4 * 8 * N * 512 / BW);
  elementwise(&m, &cl, &c, 1, 0, 0, &fb, &bb); /* no GeLU here: nothing changes */
  assert_true(fb == fa && bb == ba);
  /* SwiGLU, experts: N x top-2 rows of width 512 (load 1). */
  ModelConfig e = plan_test_tiny_moe();
  config(&c, &e, &cl);
  PlanOptions o;
  plan_test_free_options(&o);
  elementwise(&e, &cl, &c, 1, 1, 0, &fa, &ba);
  elementwise(&e, &cl, &c, 0, 1, 0, &fb, &bb);
  PlanCostModel cm;
  Error err = {0, ""};
  assert_int_equal(plan_cost_model_init(&cm, &e, &cl, &o, &c, NULL, &err), 0);
  double rows = N * 2 * cm.expert_load;
  assert_close(fb - fa, 4 * 2 * rows * 512 / BW);
  assert_close(bb - ba, 4 * 8 * rows * 512 / BW);
  /* GPT-2: bias + GeLU on F = its inner width. */
  ModelConfig g;
  assert_int_equal(plan_test_load_model(&g, "tiny/gpt2"), 0);
  config(&c, &g, &cl);
  elementwise(&g, &cl, &c, 1, 1, 0, &fa, &ba);
  elementwise(&g, &cl, &c, 1, 0, 0, &fb, &bb);
  assert_close(fb - fa, 4.0 * N * g.intermediate_size / BW);
  assert_close(bb - ba, 4.0 * N * g.intermediate_size / BW);
  elementwise(&g, &cl, &c, 0, 1, 0, &fb, &bb); /* no SwiGLU in GPT-2 */
  assert_true(fb == fa && bb == ba);
}

/* The residual adds + norms unfused: N x hidden fp32 values at BW, forward
 * 1 for each of the two adds (3 each with GPT-2's biases: 2 x 128 tokens x
 * 32 x 4 B x 6 = 196608 B, 19.6608 us at 10 GB/s) and backward 4 (2 per
 * norm: 131072 B, 13.1072 us). */
static void test_norm_residual_traffic(void **state) {
  (void)state;
  ClusterSpec cl;
  cluster(&cl, BW);
  const double N = 2 * 128;
  double fa, ba, fb, bb;
  PlanConfig c;
  ModelConfig m = dense();
  config(&c, &m, &cl);
  elementwise_n(&m, &cl, &c, 1, 1, 1, 0, &fa, &ba);
  elementwise_n(&m, &cl, &c, 1, 1, 0, 0, &fb, &bb);
  assert_close(fb - fa, 4 * 2 * N * m.hidden_size / BW);
  assert_close(bb - ba, 4 * 4 * N * m.hidden_size / BW);
  ModelConfig e = plan_test_tiny_moe(); /* the MoE layer's norm too */
  config(&c, &e, &cl);
  elementwise_n(&e, &cl, &c, 1, 1, 1, 0, &fa, &ba);
  elementwise_n(&e, &cl, &c, 1, 1, 0, 0, &fb, &bb);
  assert_true(e.is_moe_layer[0]);
  assert_close(fb - fa, 4 * 2 * N * e.hidden_size / BW);
  assert_close(bb - ba, 4 * 4 * N * e.hidden_size / BW);
  ModelConfig g;
  assert_int_equal(plan_test_load_model(&g, "tiny/gpt2"), 0);
  config(&c, &g, &cl);
  elementwise_n(&g, &cl, &c, 1, 1, 1, 0, &fa, &ba);
  elementwise_n(&g, &cl, &c, 1, 1, 0, 0, &fb, &bb);
  assert_close(fb - fa, 4 * 6 * N * g.hidden_size / BW);
  assert_close(bb - ba, 4 * 4 * N * g.hidden_size / BW);
  assert_int_equal(g.hidden_size, 32);
  assert_close(fb - fa, 19.6608e-6);
  assert_close(bb - ba, 13.1072e-6);
}

static void search(const ModelConfig *m, const ClusterSpec *cl, PlanFusionChoice *f, PlanOptions *chosen) {
  PlanOptions o;
  plan_test_free_options(&o);
  PlanConfig c;
  config(&c, m, cl);
  Error err = {0, ""};
  assert_int_equal(plan_fusion_search(m, cl, &o, &c, f, chosen, &err), 0);
}

static void test_choice_follows_pricing(void **state) {
  (void)state;
  ClusterSpec cl;
  cluster(&cl, BW);
  ModelConfig m = dense();
  PlanFusionChoice f;
  PlanOptions chosen;
  search(&m, &cl, &f, &chosen);
  assert_true(f.has_swiglu && !f.has_bias_gelu && f.has_norm_residual);
  assert_int_equal(f.simulations, 4);
  assert_true(f.swiglu == 1 && chosen.fuse_swiglu == 1 && f.norm_residual == 1 && chosen.fuse_norm_residual == 1);
  assert_true(f.step_time < f.unfused_step_time);
  /* The unfused step: every layer's extra traffic, forward and backward, per
   * micro-batch: SwiGLU 2 + 8 values of [N, ffn], the norms 2 + 4 of [N, hidden]. */
  double N = 2 * 128, swiglu = 4 * 10 * N * m.intermediate_size / BW, norm = 4 * 6 * N * m.hidden_size / BW;
  assert_close(f.unfused_step_time - f.step_time, m.num_layers * 2 * (swiglu + norm));
  assert_close(f.step_time_of[1][1][0] - f.step_time, m.num_layers * 2 * norm);
  assert_close(f.step_time_of[0][1][1] - f.step_time, m.num_layers * 2 * swiglu);
  /* With memory free the two tie: the fused kernel is kept. */
  ClusterSpec free_mem;
  cluster(&free_mem, 1e30);
  search(&m, &free_mem, &f, &chosen);
  assert_true(f.swiglu == 1 && f.unfused_step_time == f.step_time);
  /* GPT-2: only bias + GeLU is searched. */
  ModelConfig g;
  assert_int_equal(plan_test_load_model(&g, "tiny/gpt2"), 0);
  search(&g, &cl, &f, &chosen);
  assert_true(!f.has_swiglu && f.has_bias_gelu && f.simulations == 4 && f.bias_gelu == 1 && f.norm_residual == 1);
  assert_close(f.unfused_step_time - f.step_time,
               g.num_layers * 2 * (4 * 2 * N * g.intermediate_size / BW + 4 * 10 * N * g.hidden_size / BW));
}

static void test_plan_file_fusion(void **state) {
  (void)state;
  const char *base =
      "{\"format\": \"fivefold.plan\", \"version\": 1, \"gpus\": 1, \"seq_length\": 128, \"parallel\": {\"tp\": 1, "
      "\"cp\": 1, \"dp\": 1, \"pp\": 1, \"vpp\": 1, \"micro_batch_size\": 1, \"global_batch_size\": 2, "
      "\"schedule\": \"none\", \"layers_per_stage\": [4]}%s}";
  char text[1024];
  PlanChoice pc;
  Error err = {0, ""};
  snprintf(text, sizeof text, base, "");
  cJSON *j = cJSON_Parse(text);
  assert_int_equal(plan_file_from_json(j, "p.json", &pc, &err), 0);
  assert_true(pc.fuse_swiglu == -1 && pc.fuse_bias_gelu == -1 && pc.fuse_norm_residual == -1);
  cJSON_Delete(j);
  snprintf(text, sizeof text, base, ", \"fusion\": {\"swiglu\": false, \"bias_gelu\": true}");
  j = cJSON_Parse(text);
  assert_int_equal(plan_file_from_json(j, "p.json", &pc, &err), 0);
  assert_true(pc.fuse_swiglu == 0 && pc.fuse_bias_gelu == 1 && pc.fuse_norm_residual == -1);
  cJSON_Delete(j);
  snprintf(text, sizeof text, base, ", \"fusion\": {\"norm_residual\": false}");
  j = cJSON_Parse(text);
  assert_int_equal(plan_file_from_json(j, "p.json", &pc, &err), 0);
  assert_true(pc.fuse_swiglu == -1 && pc.fuse_norm_residual == 0);
  cJSON_Delete(j);
  snprintf(text, sizeof text, base, ", \"fusion\": {\"norm_residual\": \"no\"}");
  j = cJSON_Parse(text);
  assert_int_not_equal(plan_file_from_json(j, "p.json", &pc, &err), 0);
  assert_non_null(strstr(err.msg, "p.json: field \"fusion.norm_residual\": expected true"));
  cJSON_Delete(j);
  snprintf(text, sizeof text, base, ", \"fusion\": {\"swiglu\": 1}");
  j = cJSON_Parse(text);
  assert_int_not_equal(plan_file_from_json(j, "p.json", &pc, &err), 0);
  assert_non_null(strstr(err.msg, "p.json: field \"fusion.swiglu\": expected true"));
  cJSON_Delete(j);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_extra_traffic),
      cmocka_unit_test(test_norm_residual_traffic),
      cmocka_unit_test(test_choice_follows_pricing),
      cmocka_unit_test(test_plan_file_fusion),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
