/* Model FLOPs: a uniform model equals Megatron's formula from
 * /work/shared/REFERENCES.md divided by the batch size (dense, MoE with and
 * without a shared expert, GQA, head_dim != hidden/heads); a mixed model
 * equals the sum of its layers; GPT-2 small's MLP counts two GEMMs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "model/flops.h"

/* F = 12 B s L h^2 [(1 + g/a + s/h)(a d_h / h) + (f_moe/h) k 1.5 + (f_sh/h) 1.5 + V/(2 L h)] */
static double megatron(double B, double s, double L, double h, double a, double g, double dh, double V, double k,
                       double f_moe, double f_sh) {
  return 12 * B * s * L * h * h *
         ((1 + g / a + s / h) * (a * dh / h) + (f_moe / h) * k * 1.5 + (f_sh / h) * 1.5 + V / (2 * L * h));
}

static void close_to(double got, double want) {
  if (fabs(got - want) > 1e-12 * want) fail_msg("flops %.17g, expected %.17g", got, want);
}

static void base(ModelConfig *c) {
  model_config_defaults(c);
  c->vocab_size = 32000;
  c->hidden_size = 4096;
  c->num_layers = 32;
  c->num_heads = 32;
  c->num_kv_heads = 8;
  c->intermediate_size = 14336;
}

static void test_uniform_dense(void **state) {
  (void)state;
  ModelConfig c;
  base(&c);
  const int s = 4096, B = 8;
  close_to(B * model_flops_per_sequence(&c, s), megatron(B, s, 32, 4096, 32, 8, 128, 32000, 1, 14336, 0));
  c.num_kv_heads = 0; /* MHA */
  c.head_dim = 96;    /* not hidden / heads */
  close_to(model_flops_per_sequence(&c, 1000), megatron(1, 1000, 32, 4096, 32, 32, 96, 32000, 1, 14336, 0));
}

/* GPT-2 124M at s = 1024: per layer 24 s h^2 (attention projections)
 * + 12 s^2 h (scores) + 48 s h^2 (MLP, f = 4h, two GEMMs), plus 6 s h V (forward and backward). */
static void test_gpt2(void **state) {
  (void)state;
  ModelConfig c;
  model_config_defaults(&c);
  c.gpt2 = 1;
  c.vocab_size = 50257;
  c.hidden_size = 768;
  c.num_layers = 12;
  c.num_heads = 12;
  c.intermediate_size = 3072;
  const double s = 1024, h = 768;
  const double want = 12 * (24 * s * h * h + 12 * s * s * h + 48 * s * h * h) + 6 * s * h * 50257;
  close_to(model_flops_per_sequence(&c, 1024), want);
  /* The same shape with a SwiGLU MLP counts its third GEMM. */
  c.gpt2 = 0;
  close_to(model_flops_per_sequence(&c, 1024), want + 12 * 24 * s * h * h);
}

static void test_uniform_moe(void **state) {
  (void)state;
  ModelConfig c;
  base(&c);
  c.num_experts = 8;
  c.top_k = 2;
  c.moe_intermediate_size = 14336;
  model_config_set_moe_layer_freq(&c, 1);
  close_to(4 * model_flops_per_sequence(&c, 2048), megatron(4, 2048, 32, 4096, 32, 8, 128, 32000, 2, 14336, 0));
  c.shared_expert_intermediate_size = 5632;
  c.moe_intermediate_size = 1408;
  c.top_k = 4;
  c.num_experts = 60;
  close_to(3 * model_flops_per_sequence(&c, 512), megatron(3, 512, 32, 4096, 32, 8, 128, 32000, 4, 1408, 5632));
}

static void test_mixed_is_sum_of_layers(void **state) {
  (void)state;
  ModelConfig mixed, dense, moe;
  base(&mixed);
  mixed.num_layers = 6;
  mixed.num_experts = 16;
  mixed.top_k = 2;
  mixed.moe_intermediate_size = 2048;
  mixed.shared_expert_intermediate_size = 1024;
  model_config_set_moe_layer_freq(&mixed, 3); /* layers 0 and 3 */
  dense = mixed;
  dense.num_experts = 0;
  memset(dense.is_moe_layer, 0, sizeof dense.is_moe_layer);
  moe = mixed;
  model_config_set_moe_layer_freq(&moe, 1);
  const int s = 1024;
  /* Each uniform model's per-layer share, with the LM head removed. */
  const double head = 6.0 * s * 4096 * 32000;
  double dense_layer = (model_flops_per_sequence(&dense, s) - head) / 6;
  double moe_layer = (model_flops_per_sequence(&moe, s) - head) / 6;
  close_to(model_flops_per_sequence(&mixed, s), head + 4 * dense_layer + 2 * moe_layer);
  close_to(dense_layer * 6 + head, megatron(1, s, 6, 4096, 32, 8, 128, 32000, 1, 14336, 0));
  close_to(moe_layer * 6 + head, megatron(1, s, 6, 4096, 32, 8, 128, 32000, 2, 2048, 1024));
  assert_true(moe_layer != dense_layer);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uniform_dense),
      cmocka_unit_test(test_gpt2),
      cmocka_unit_test(test_uniform_moe),
      cmocka_unit_test(test_mixed_is_sum_of_layers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
