/* Selective recomputation at Megatron's granularity (--recompute-modules):
 * each module adds its own forward to the backward pass and drops its own
 * stored activations; the default is the attention core alone. Priced on
 * Mixtral-8x22B (MoE) and Llama-3-8B (dense) on DGX-H100. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "plan/cost.h"
#include "plan/memory.h"
#include "plan/simulate.h"
#include "plan/stages.h"
#include "plan_test_util.h"

static ClusterSpec h100;

static int setup(void **state) {
  (void)state;
  return plan_test_load_cluster(&h100, "dgx-h100");
}

static int teardown(void **state) {
  (void)state;
  cluster_spec_free(&h100);
  return 0;
}

typedef struct Priced {
  double recompute; /* the block's recomputation in backward */
  double stored;    /* activation bytes it keeps per micro-batch */
} Priced;

static Priced price(const ModelConfig *m, PlanRecompute r, const char *modules) {
  PlanOptions o;
  plan_options_default(&o);
  PlanConfig c;
  plan_config_init(&c, 4096, 64, 1);
  c.par.tp = 2, c.par.dp = 0;
  if (m->num_experts) c.par.ep = 8, c.par.etp = 1;
  c.recompute = r;
  Error err = {0, ""};
  if (modules) assert_int_equal(plan_recompute_modules_parse(modules, &c.recompute_modules, &err), 0);
  assert_int_equal(plan_config_finish(&c, m, &h100, 64, &err), 0);
  PlanCostModel cm;
  assert_int_equal(plan_cost_model_init(&cm, m, &h100, &o, &c, NULL, &err), 0);
  const PlanPassCost *layer = plan_layer_cost(&cm, 0);
  Priced p = {layer->bwd.t[PLAN_COMP_RECOMPUTE], plan_layer_activation_bytes(m, &c, 0, cm.expert_load)};
  return p;
}

static void test_moe_modules(void **state) {
  (void)state;
  ModelConfig m;
  assert_int_equal(plan_test_load_model(&m, "mixtral-8x22b"), 0);
  Priced none = price(&m, PLAN_RECOMPUTE_NONE, NULL), dflt = price(&m, PLAN_RECOMPUTE_SELECTIVE, NULL);
  Priced core = price(&m, PLAN_RECOMPUTE_SELECTIVE, "core_attn");
  Priced norm = price(&m, PLAN_RECOMPUTE_SELECTIVE, "core_attn,layernorm");
  Priced act = price(&m, PLAN_RECOMPUTE_SELECTIVE, "moe_act");
  Priced moe = price(&m, PLAN_RECOMPUTE_SELECTIVE, "moe");
  Priced both = price(&m, PLAN_RECOMPUTE_SELECTIVE, "moe,moe_act");
  Priced full = price(&m, PLAN_RECOMPUTE_FULL, NULL);
  assert_true(none.recompute == 0);
  assert_true(dflt.recompute == core.recompute && dflt.stored == core.stored);
  /* The norms: two RMSNorm forwards (read and write b s h / TP elements
   * each), and their two outputs no longer stored. */
  double t_sp = 4096.0 / 2, h = m.hidden_size;
  double norms = 2 * plan_memory_time(&h100, 2.0 * 2 * t_sp * h);
  assert_true(fabs(norm.recompute - core.recompute - norms) <= 1e-12);
  assert_true(fabs(core.stored - norm.stored - 2.0 * 2 * t_sp * h) <= 1e-3);
  /* The experts' SwiGLU output is the busiest rank's routed rows x f. */
  assert_true(act.recompute > 0 && act.stored < none.stored);
  /* The whole MoE part costs more to rebuild and frees more than its
   * activation; naming moe_act as well changes nothing. */
  assert_true(moe.recompute > act.recompute && moe.stored < act.stored);
  assert_true(both.recompute == moe.recompute && both.stored == moe.stored);
  assert_true(full.recompute > moe.recompute && full.stored < moe.stored);
}

static void test_dense_modules(void **state) {
  (void)state;
  ModelConfig m;
  assert_int_equal(plan_test_load_model(&m, "llama-3-8b"), 0);
  Priced core = price(&m, PLAN_RECOMPUTE_SELECTIVE, NULL), mlp = price(&m, PLAN_RECOMPUTE_SELECTIVE, "mlp");
  Priced moe = price(&m, PLAN_RECOMPUTE_SELECTIVE, "moe");
  /* SwiGLU's gate, up and output (3 f / TP per token, bf16) are dropped. */
  double n = 4096, f = m.intermediate_size / 2.0;
  assert_true(fabs(price(&m, PLAN_RECOMPUTE_NONE, NULL).stored - mlp.stored - 2.0 * n * 3 * f) <= 1e-3);
  assert_true(mlp.recompute > core.recompute);
  /* MoE modules do nothing in a dense block. */
  assert_true(moe.recompute == 0);
}

static void test_parse(void **state) {
  (void)state;
  unsigned bits;
  Error err = {0, ""};
  assert_int_equal(plan_recompute_modules_parse("core_attn,moe_act,layernorm", &bits, &err), 0);
  assert_int_equal(bits, PLAN_RECOMPUTE_CORE_ATTN | PLAN_RECOMPUTE_MOE_ACT | PLAN_RECOMPUTE_LAYERNORM);
  char buf[80];
  assert_string_equal(plan_recompute_modules_describe(bits, buf, sizeof buf), "core_attn,layernorm,moe_act");
  assert_int_not_equal(plan_recompute_modules_parse("core_attn,mla_up_proj", &bits, &err), 0);
  assert_non_null(strstr(err.msg, "mla_up_proj"));
  assert_int_not_equal(plan_recompute_modules_parse("", &bits, &err), 0);
}

static PlanResult simulate_full(const ModelConfig *m, int method, int n) {
  PlanOptions o;
  plan_options_default(&o);
  PlanConfig c;
  plan_config_init(&c, 4096, 64, 1);
  c.par.tp = 8, c.par.pp = 4, c.par.dp = 0;
  c.recompute = PLAN_RECOMPUTE_FULL, c.recompute_method = method, c.recompute_num_layers = n;
  Error err = {0, ""};
  assert_int_equal(plan_config_finish(&c, m, &h100, 64, &err), 0);
  if (method == 1) assert_int_equal(plan_recompute_block_apply(m, &h100, &o, &c, n, &err), 0);
  PlanResult r;
  int rc = plan_simulate(m, &h100, &o, &c, NULL, NULL, &r, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  return r;
}

/* Full recomputation's methods: block recomputes the first n blocks of each
 * stage (3 / 8 of uniform's recomputation on the critical 8-block stage) and stores the
 * rest; uniform over groups of 4 stores a quarter of the inputs and
 * rebuilds four blocks at a time. */
static void test_full_methods(void **state) {
  (void)state;
  ModelConfig m;
  assert_int_equal(plan_test_load_model(&m, "llama-3-8b"), 0); /* 32 layers on 4 stages */
  PlanResult every = simulate_full(&m, 0, 1), group = simulate_full(&m, 0, 4), block = simulate_full(&m, 1, 3);
  assert_true(fabs(block.breakdown.t[PLAN_COMP_RECOMPUTE] - 3.0 / 8 * every.breakdown.t[PLAN_COMP_RECOMPUTE]) <=
              1e-9 * every.breakdown.t[PLAN_COMP_RECOMPUTE]);
  assert_true(block.step_time < every.step_time);
  assert_true(block.memory[0].activations > every.memory[0].activations);
  assert_true(group.breakdown.t[PLAN_COMP_RECOMPUTE] == every.breakdown.t[PLAN_COMP_RECOMPUTE]);
  assert_true(fabs(group.memory[0].activations - every.memory[0].activations / 4) <= 1e-6 * every.memory[0].activations);
  assert_true(group.memory[0].transient > every.memory[0].transient);
  for (int s = 0, first = 0; s < 4; first += block.cfg.layers_per_stage[s++])
    for (int i = 0; i < block.cfg.layers_per_stage[s]; i++)
      assert_int_equal(block.cfg.layer_recompute[first + i], i < 3 ? PLAN_RECOMPUTE_FULL : PLAN_RECOMPUTE_NONE);
  plan_result_free(&every);
  plan_result_free(&group);
  plan_result_free(&block);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_moe_modules),
      cmocka_unit_test(test_dense_modules),
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_full_methods),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
