/* The cost model's pieces by hand: GEMM roofline with the efficiency curve,
 * bandwidth-bound kernels and the kernel floor, the expert load (measured
 * distribution and assumed imbalance), dropless versus dropping with a
 * capacity factor, which communication each layout pays (TP, EP, ETP),
 * recomputation adding exactly the forward it repeats, and the runtime
 * variants: MoE replicated over TP, the all-gather dispatcher, and the CP
 * ring's measured block-kernel efficiency. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "plan/cost.h"
#include "plan_test_util.h"

static ClusterSpec h100;
static ModelConfig mixtral;

static int setup(void **state) {
  (void)state;
  if (plan_test_load_model(&mixtral, "mixtral-8x7b")) return -1;
  return plan_test_load_cluster(&h100, "dgx-h100");
}

static int teardown(void **state) {
  (void)state;
  cluster_spec_free(&h100);
  return 0;
}

static void assert_close(double got, double want) {
  if (fabs(got - want) > 1e-9 * fabs(want) + 1e-15) print_error("got %.12g, want %.12g\n", got, want);
  assert_true(fabs(got - want) <= 1e-9 * fabs(want) + 1e-15);
}

static void test_primitives(void **state) {
  (void)state;
  double peak = 989.5e12;
  /* A large GEMM is compute-bound at the curve's efficiency. */
  double flops = 2.0 * 8192 * 8192 * 8192;
  double eff = plan_curve_eval(&h100.gemm_efficiency, flops);
  assert_true(eff > 0.5 && eff < 0.8);
  assert_close(plan_gemm_time(&h100, PLAN_DTYPE_BF16, 8192, 8192, 8192), flops / (peak * eff));
  /* A skinny GEMM (the router) is bound by streaming its input. */
  double m = 16384, n = 8, k = 4096;
  double bytes = (m * k + k * n + m * n) * 2;
  assert_close(plan_gemm_time(&h100, PLAN_DTYPE_BF16, m, n, k), bytes / (3.35e12 * 0.7));
  /* Bandwidth-bound kernels, and the floor for tiny ones. */
  assert_close(plan_memory_time(&h100, 1e9), 1e9 / (3.35e12 * 0.7));
  assert_close(plan_memory_time(&h100, 10), h100.kernel_floor);
  assert_close(plan_memory_time(&h100, 0), 0);
  /* Flash attention: forward and backward efficiencies from the spec. */
  assert_close(plan_attention_time(&h100, PLAN_DTYPE_BF16, 1e12, 0, 4096, 0), 1e12 / (peak * h100.attention_fwd_efficiency));
  assert_close(plan_attention_time(&h100, PLAN_DTYPE_BF16, 1e12, 0, 8192, 1), 1e12 / (peak * h100.attention_bwd_efficiency));
  /* Shorter kernels: 1024 queries run at (1/4)^0.25 of the efficiency. */
  assert_close(plan_attention_time(&h100, PLAN_DTYPE_BF16, 1e12, 0, 1024, 0),
               1e12 / (peak * h100.attention_fwd_efficiency * pow(0.25, 0.25)));
  /* Expert products in fp32 take the spec's curve for them where it has one. */
  ClusterSpec cl = h100;
  cl.gemm_efficiency_rows_vary.n = 1;
  cl.gemm_efficiency_rows_vary.x[0] = 1e9;
  cl.gemm_efficiency_rows_vary.y[0] = 0.25;
  double fp32_peak = plan_peak_flops(&cl, PLAN_DTYPE_FP32);
  assert_close(plan_gemm_time_rows_vary(&cl, PLAN_DTYPE_FP32, 8192, 8192, 8192), flops / (fp32_peak * 0.25));
  assert_close(plan_gemm_time(&cl, PLAN_DTYPE_FP32, 8192, 8192, 8192),
               plan_gemm_time(&h100, PLAN_DTYPE_FP32, 8192, 8192, 8192));
  /* fp32 runs on the fp32 peak. */
  assert_true(plan_gemm_time(&h100, PLAN_DTYPE_FP32, 8192, 8192, 8192) > 10 * plan_gemm_time(&h100, PLAN_DTYPE_BF16, 8192, 8192, 8192));
}

static void test_expert_load(void **state) {
  (void)state;
  ModelConfig m = mixtral;
  m.num_experts = 4;
  PlanOptions o;
  plan_options_default(&o);
  static const double load[] = {4, 1, 1, 2};
  o.expert_load = load;
  o.num_expert_load = 4;
  /* EP 2: ranks hold experts {0,1} (5 of 8) and {2,3}: 5 / 4 = 1.25. */
  assert_close(plan_expert_rank_load(&m, &o, 2), 1.25);
  assert_close(plan_expert_rank_load(&m, &o, 4), 2.0);
  assert_close(plan_expert_rank_load(&m, &o, 1), 1.0);
  /* One row per MoE layer (a run's "expert_tokens"): the mean of each
   * layer's busiest rank. EP 2: layer 0 ranks (4, 4) -> 1.0, layer 1
   * (6, 2) -> 1.5; mean 1.25. A row that routed nothing is left out. */
  static const double layers[] = {3, 1, 1, 3, 3, 3, 1, 1, 0, 0, 0, 0};
  o.expert_load = layers;
  o.num_expert_load = 12;
  assert_close(plan_expert_rank_load(&m, &o, 2), 1.25);
  assert_close(plan_expert_rank_load(&m, &o, 4), 1.5); /* 3 of a mean 2 in both */
  /* Assumed imbalance: full at one expert per rank, none with all on one. */
  o.expert_load = NULL;
  o.num_expert_load = 0;
  o.moe_imbalance = 1.2;
  m.num_experts = 8;
  assert_close(plan_expert_rank_load(&m, &o, 8), 1.2);
  assert_close(plan_expert_rank_load(&m, &o, 1), 1.0);
  assert_close(plan_expert_rank_load(&m, &o, 4), 1.0 + 0.2 * sqrt(3.0 / 7.0));
}

static void build(PlanCostModel *cm, const ModelConfig *m, const PlanOptions *o, PlanConfig *c, int gpus) {
  Error err = {0, ""};
  int rc = plan_config_finish(c, m, &h100, gpus, &err);
  if (!rc) rc = plan_cost_model_init(cm, m, &h100, o, c, NULL, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
}

static void test_dropless_versus_capacity(void **state) {
  (void)state;
  PlanOptions o;
  plan_options_default(&o);
  o.moe_imbalance = 1.3;
  PlanConfig c;
  plan_config_init(&c, 4096, 8, 1);
  c.par.ep = 8, c.par.dp = 0;
  PlanCostModel dropless, dropping, padded;
  build(&dropless, &mixtral, &o, &c, 8);
  assert_close(dropless.expert_load, 1.3);
  ModelConfig cap = mixtral;
  cap.capacity_factor = 1.1f;
  PlanConfig c2 = c;
  build(&dropping, &cap, &o, &c2, 8);
  assert_close(dropping.expert_load, (double)1.1f);
  cap.pad_to_capacity = 1;
  PlanConfig c3 = c;
  build(&padded, &cap, &o, &c3, 8);
  assert_close(padded.expert_load, (double)1.1f);
  ModelConfig loose = cap;
  loose.capacity_factor = 2.0f;
  loose.pad_to_capacity = 0;
  PlanConfig c4 = c;
  PlanCostModel under;
  build(&under, &loose, &o, &c4, 8);
  assert_close(under.expert_load, 1.3); /* capacity above the load drops nothing */
  /* The hot rank's expert GEMMs and all-to-all scale with the load; dropless
   * also pays the synchronisation. */
  assert_true(dropless.moe_layer.fwd.t[PLAN_COMP_EXPERT_GEMM] > dropping.moe_layer.fwd.t[PLAN_COMP_EXPERT_GEMM]);
  assert_true(dropless.moe_layer.fwd.t[PLAN_COMP_EP_COMM] > dropping.moe_layer.fwd.t[PLAN_COMP_EP_COMM]);
  assert_true(dropless.moe_layer.fwd.t[PLAN_COMP_ROUTING] >
              dropping.moe_layer.fwd.t[PLAN_COMP_ROUTING] + 0.9 * o.dropless_sync);
  assert_close(dropless.moe_layer.bwd.t[PLAN_COMP_ROUTING] - dropping.moe_layer.bwd.t[PLAN_COMP_ROUTING], 0);
}

/* Rows are sorted by local expert only after an exchange (EP here), as the
 * runtime and Megatron-Core's dispatcher do: a rank that routes its own
 * tokens to all experts permutes them once, already grouped by expert. */
static void test_sort_after_exchange(void **state) {
  (void)state;
  PlanOptions o;
  plan_options_default(&o);
  o.moe_imbalance = 1.0, o.dropless_sync = 0;
  ModelConfig m = mixtral; /* 8 experts: EP2 leaves 4 on each rank */
  PlanConfig c1, c2;
  plan_config_init(&c1, 4096, 2, 1);
  c1.par.dp = 2;
  plan_config_init(&c2, 4096, 2, 1);
  c2.par.ep = 2, c2.par.dp = 0;
  PlanCostModel dp, ep;
  build(&dp, &m, &o, &c1, 2);
  build(&ep, &m, &o, &c2, 2);
  double rows = 4096.0 * m.top_k, sort = plan_memory_time(&h100, 2.0 * 2 * rows * m.hidden_size);
  double r_dp = dp.moe_layer.fwd.t[PLAN_COMP_ROUTING], r_ep = ep.moe_layer.fwd.t[PLAN_COMP_ROUTING];
  assert_true(r_dp < 2.5 * sort);      /* router, permute and combine only */
  assert_true(r_ep - r_dp > 1.9 * sort); /* plus the sort and its inverse */
}

static void test_layout_communication(void **state) {
  (void)state;
  PlanOptions o;
  plan_options_default(&o);
  PlanCostModel cm;
  /* TP 1, EP 1: no communication inside a block. */
  PlanConfig c;
  plan_config_init(&c, 4096, 8, 1);
  c.par.dp = 0;
  build(&cm, &mixtral, &o, &c, 8);
  for (int k = PLAN_COMP_TP_COMM; k <= PLAN_COMP_ETP_COMM; k++) {
    assert_close(cm.moe_layer.fwd.t[k], 0);
    assert_close(cm.moe_layer.bwd.t[k], 0);
  }
  /* TP 2 with experts at TP 2: sequence-parallel gathers and the expert-TP
   * gather/scatter; EP 4 adds the all-to-all. */
  plan_config_init(&c, 4096, 8, 1);
  c.par.tp = 2, c.par.ep = 4, c.par.etp = 2, c.par.dp = 0;
  build(&cm, &mixtral, &o, &c, 8);
  assert_true(cm.moe_layer.fwd.t[PLAN_COMP_TP_COMM] > 0);
  assert_true(cm.moe_layer.fwd.t[PLAN_COMP_EP_COMM] > 0);
  assert_true(cm.moe_layer.fwd.t[PLAN_COMP_ETP_COMM] > 0);
  /* TP 2 only: the attention's gather + scatter, hand-computed: two ring
   * collectives of n h bytes over the TP pair inside a node. */
  plan_config_init(&c, 4096, 8, 1);
  c.par.tp = 2, c.par.dp = 0;
  build(&cm, &mixtral, &o, &c, 8);
  double bytes = 4096.0 * 4096 * 2;
  double one = 1 * 3e-6 + 0.5 * bytes / 360e9;
  assert_close(cm.moe_layer.fwd.t[PLAN_COMP_TP_COMM], 2 * one);
  assert_close(cm.moe_layer.fwd.t[PLAN_COMP_ETP_COMM], 0);
  o.tp_overlap = 0.5;
  build(&cm, &mixtral, &o, &c, 8);
  assert_close(cm.moe_layer.fwd.t[PLAN_COMP_TP_COMM], one);
  /* Pipeline messages: one sequence-parallel activation. */
  assert_close(cm.p2p_bytes, 4096.0 / 2 * 4096 * 2);
}

static void test_recompute_adds_forward(void **state) {
  (void)state;
  PlanOptions o;
  plan_options_default(&o);
  PlanConfig c;
  plan_config_init(&c, 4096, 8, 1);
  c.par.ep = 8, c.par.dp = 0;
  PlanCostModel none, sel, full;
  build(&none, &mixtral, &o, &c, 8);
  PlanConfig cs = c, cf = c;
  cs.recompute = PLAN_RECOMPUTE_SELECTIVE;
  cf.recompute = PLAN_RECOMPUTE_FULL;
  build(&sel, &mixtral, &o, &cs, 8);
  build(&full, &mixtral, &o, &cf, 8);
  assert_close(sel.moe_layer.bwd_total - none.moe_layer.bwd_total, none.moe_layer.fwd.t[PLAN_COMP_ATTN_CORE]);
  assert_close(full.moe_layer.bwd_total - none.moe_layer.bwd_total, none.moe_layer.fwd_total);
  assert_close(full.moe_layer.fwd_total, none.moe_layer.fwd_total);
  /* Backward GEMMs are twice the forward's. */
  assert_close(none.moe_layer.bwd.t[PLAN_COMP_EXPERT_GEMM], 2 * none.moe_layer.fwd.t[PLAN_COMP_EXPERT_GEMM]);
  assert_close(none.moe_layer.bwd.t[PLAN_COMP_ATTN_GEMM], 2 * none.moe_layer.fwd.t[PLAN_COMP_ATTN_GEMM]);
}

static void test_runtime_variants(void **state) {
  (void)state;
  PlanOptions o;
  plan_options_default(&o);
  PlanCostModel one, split, repl;
  PlanConfig c;
  plan_config_init(&c, 4096, 8, 1);
  c.par.dp = 0;
  build(&one, &mixtral, &o, &c, 8);
  /* TP 2 without an MoE grid: Megatron's layout routes n / 2 tokens per rank;
   * the replicating runtime routes all n on both ranks (the one-rank expert
   * work) and gathers once per pass, never scatters. */
  plan_config_init(&c, 4096, 8, 1);
  c.par.tp = 2, c.par.dp = 0;
  build(&split, &mixtral, &o, &c, 8);
  o.moe_tp_replicated = 1;
  build(&repl, &mixtral, &o, &c, 8);
  assert_close(repl.moe_layer.fwd.t[PLAN_COMP_EXPERT_GEMM], one.moe_layer.fwd.t[PLAN_COMP_EXPERT_GEMM]);
  assert_true(split.moe_layer.fwd.t[PLAN_COMP_EXPERT_GEMM] < 0.6 * one.moe_layer.fwd.t[PLAN_COMP_EXPERT_GEMM]);
  double bytes = 4096.0 * 4096 * 2, gather = 1 * 3e-6 + 0.5 * bytes / 360e9;
  assert_close(repl.moe_layer.fwd.t[PLAN_COMP_TP_COMM] - split.moe_layer.fwd.t[PLAN_COMP_TP_COMM], gather);
  assert_close(repl.moe_layer.bwd.t[PLAN_COMP_TP_COMM] - split.moe_layer.bwd.t[PLAN_COMP_TP_COMM], gather);
  /* With an MoE grid the flag changes nothing. */
  c.par.ep = 2;
  PlanCostModel ep_off, ep_on;
  build(&ep_on, &mixtral, &o, &c, 8);
  o.moe_tp_replicated = 0;
  build(&ep_off, &mixtral, &o, &c, 8);
  assert_close(ep_on.moe_layer.fwd_total, ep_off.moe_layer.fwd_total);

  /* All-gather dispatcher over EP 2 (ETP 1): gathers both ranks' t tokens as
   * packed rows (h + 2k elements), reduce-scatters 2t output rows; the same
   * expert work as the all-to-all and no count exchange. */
  plan_config_init(&c, 4096, 8, 1);
  c.par.ep = 2, c.par.dp = 0;
  PlanCostModel a2a, ag;
  build(&a2a, &mixtral, &o, &c, 8);
  o.moe_allgather = 1;
  build(&ag, &mixtral, &o, &c, 8);
  assert_close(ag.moe_layer.fwd.t[PLAN_COMP_EXPERT_GEMM], a2a.moe_layer.fwd.t[PLAN_COMP_EXPERT_GEMM]);
  double t = 4096, h = 4096, k = 2;
  PlanCollAlgo algo = o.algo;
  double want = plan_collective_time(&h100, &ag.group[PLAN_GROUP_EP], PLAN_COLL_ALL_GATHER, 2 * t * (h + 2 * k) * 2,
                                     algo, NULL) +
                plan_collective_time(&h100, &ag.group[PLAN_GROUP_EP], PLAN_COLL_REDUCE_SCATTER, 2 * t * h * 2, algo, NULL);
  assert_close(ag.moe_layer.fwd.t[PLAN_COMP_EP_COMM], want);
  assert_close(ag.moe_layer.bwd.t[PLAN_COMP_EP_COMM], want);
  o.moe_allgather = 0;

  /* CP 2: the causal kernel's price unless the spec measured the ring; then
   * FLOPs / (peak x ring efficiency x (chunk / measured chunk)^exponent). */
  plan_config_init(&c, 4096, 8, 1);
  c.par.cp = 2, c.par.dp = 0;
  PlanCostModel causal, ring;
  build(&causal, &mixtral, &o, &c, 8);
  ClusterSpec saved = h100;
  h100.attention_ring_fwd_efficiency = 0.2, h100.attention_ring_bwd_efficiency = 0.25;
  h100.attention_ring_query_tokens = 512;
  build(&ring, &mixtral, &o, &c, 8);
  double heads = mixtral.num_heads, d = 128;
  double flops = 2.0 * 1 * heads * 4096 * 4096 * d / 2, scale = pow(1024.0 / 512, h100.attention_length_exponent);
  double peak = plan_peak_flops(&h100, PLAN_DTYPE_BF16);
  /* Plus, per ring step after the first, the merge of the partial outputs
   * (forward: both outputs and softmax statistics read, one written) and the
   * fp32 accumulation of the query and travelling key/value gradients. */
  double n = 4096 / 2, kvh = mixtral.num_kv_heads;
  double merge_f = plan_memory_time(&h100, 3 * n * heads * d * 2 + 3 * 4.0 * n * heads);
  double merge_b = plan_memory_time(&h100, 3 * 4.0 * (n * heads * d + 2 * n * kvh * d));
  assert_close(ring.moe_layer.fwd.t[PLAN_COMP_ATTN_CORE], flops / (peak * fmin(1.0, 0.2 * scale)) + merge_f);
  assert_close(ring.moe_layer.bwd.t[PLAN_COMP_ATTN_CORE], 2.5 * flops / (peak * fmin(1.0, 0.25 * scale)) + merge_b);
  assert_true(fabs(causal.moe_layer.fwd.t[PLAN_COMP_ATTN_CORE] - ring.moe_layer.fwd.t[PLAN_COMP_ATTN_CORE]) > 1e-6);
  h100 = saved;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_primitives),           cmocka_unit_test(test_expert_load),
      cmocka_unit_test(test_dropless_versus_capacity), cmocka_unit_test(test_sort_after_exchange),
      cmocka_unit_test(test_layout_communication),
      cmocka_unit_test(test_recompute_adds_forward), cmocka_unit_test(test_runtime_variants),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
