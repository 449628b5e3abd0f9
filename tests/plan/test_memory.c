/* The memory model by hand: bytes per parameter with and without the
 * distributed optimizer (18 / 6 + 12/d mixed precision, 16 / 8 + 8/d fp32),
 * parameter counts and activations of a small MoE model under TP, EP and
 * PP worked out on paper, in-flight micro-batches taken from the schedule
 * (1F1B: p - r, GPipe: m, interleaved: its warm-up + 1), recomputation,
 * uneven stages, and what zb-h1 keeps between each B and its W. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "plan/memory.h"
#include "sched/builders.h"

static void assert_close(double got, double want) {
  if (fabs(got - want) > 1e-9 * fabs(want) + 1e-9) print_error("got %.12g, want %.12g\n", got, want);
  assert_true(fabs(got - want) <= 1e-9 * fabs(want) + 1e-9);
}

static void test_bytes_per_param(void **state) {
  (void)state;
  assert_close(plan_bytes_per_param(PLAN_DTYPE_BF16, 0, 8), 18);
  for (int d = 1; d <= 64; d *= 2) {
    assert_close(plan_bytes_per_param(PLAN_DTYPE_BF16, 1, d), 6 + 12.0 / d);
    assert_close(plan_bytes_per_param(PLAN_DTYPE_FP32, 1, d), 8 + 8.0 / d);
  }
  assert_close(plan_bytes_per_param(PLAN_DTYPE_FP32, 0, 64), 16);
  assert_close(plan_bytes_per_param(PLAN_DTYPE_FP16, 1, 4), 9);
  PlanStateBytes s = plan_state_bytes(PLAN_DTYPE_BF16, 1, 1000, 4);
  assert_close(s.weights, 2000);
  assert_close(s.grads, 4000);
  assert_close(s.optimizer, 3000);
}

/* V 1000, h 64, 4 MoE layers, 4 heads (2 KV heads) of 16, 4 experts of
 * 128, top-2; TP 2, EP 2, PP 2 over 8 GPUs; sequence 32, micro-batch 1. */
static void small_model(ModelConfig *m) {
  model_config_defaults(m);
  m->vocab_size = 1000;
  m->hidden_size = 64;
  m->num_layers = 4;
  m->num_heads = 4;
  m->num_kv_heads = 2;
  m->head_dim = 16;
  m->intermediate_size = 256;
  m->num_experts = 4;
  m->top_k = 2;
  m->moe_intermediate_size = 128;
  model_config_set_moe_layer_freq(m, 1);
}

static void small_config(PlanConfig *c, SchedScheduleKind schedule, int vpp) {
  plan_config_init(c, 32, 4, 1);
  c->par.tp = 2, c->par.pp = 2, c->par.vpp = vpp, c->par.ep = 2, c->par.etp = 1, c->par.dp = 0;
  c->distributed_optimizer = 1;
  c->schedule = schedule;
}

static void finish(PlanConfig *c, const ModelConfig *m) {
  Error err = {0, ""};
  int rc = plan_config_finish(c, m, NULL, 8, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
}

static void partition(SchedPartition *p, int pp, int vpp, const int *layers) {
  SchedPartitionSpec s;
  memset(&s, 0, sizeof s);
  s.pp = pp;
  s.vpp = vpp;
  s.layers_per_stage = layers;
  s.num_given = pp * vpp;
  assert_int_equal(sched_partition_make(&s, p, NULL), 0);
}

static void test_params_by_hand(void **state) {
  (void)state;
  ModelConfig m;
  small_model(&m);
  PlanConfig c;
  small_config(&c, SCHED_SCHEDULE_1F1B, 1);
  finish(&c, &m);
  assert_int_equal(c.par.dp, 2);
  assert_int_equal(c.par.edp, 2);
  assert_int_equal(c.microbatches, 2);
  PlanParams l = plan_layer_params(&m, &c, 0);
  /* attention 64 (2 + 2) 16 + 2 16 64, two norms, router 64 x 4 */
  assert_close(l.dense, 4096 + 2048 + 128 + 256);
  /* two local experts of 3 x 64 x 128 */
  assert_close(l.expert, 2 * 3 * 64 * 128);
  assert_close(plan_embedding_params(&m, &c).dense, 32000);
  assert_close(plan_head_params(&m, &c).dense, 64 + 32000);
}

static void test_activations_and_1f1b(void **state) {
  (void)state;
  ModelConfig m;
  small_model(&m);
  PlanConfig c;
  small_config(&c, SCHED_SCHEDULE_1F1B, 1);
  finish(&c, &m);
  /* One MoE block, one micro-batch: 16 tokens per rank between blocks, 32
   * inside; input 2048, attention 2 (16 64 + 32 4 16 + 32 2 16) = 8192,
   * softmax statistics 4 x 32 x 2 = 256, MLP: norm 4096, router 512, 32
   * routed rows x (64 + 3 x 128) x 2 = 28672, expert outputs 4096. */
  double block = 2048 + 8192 + 256 + 4096 + 512 + 28672 + 4096;
  assert_close(plan_layer_activation_bytes(&m, &c, 0, 1.0), block);
  SchedPartition p;
  partition(&p, 2, 1, (const int[]){2, 2});
  PlanRankMemory mem[2];
  assert_int_equal(plan_memory_estimate(&m, NULL, &c, &p, 1.0, mem, NULL), 0);
  double state0 = (2 * (4096 + 2048 + 128 + 256) + 32000) + 2 * 2 * 3 * 64 * 128;
  assert_close(mem[0].weights, 2 * state0);
  assert_close(mem[0].grads, 4 * state0);
  assert_close(mem[0].optimizer, 6 * state0); /* 12 / d with d = 2 for both kinds */
  /* 1F1B: rank 0 holds p - 0 = 2 micro-batches, rank 1 one. */
  assert_int_equal(mem[0].peak_inflight, 2);
  assert_int_equal(mem[1].peak_inflight, 1);
  assert_close(mem[0].activations, 2 * 2 * block);
  assert_close(mem[0].transient, 0);
  /* The last stage adds the final norm and the logits (32 x 500 x (2 + 4)). */
  assert_close(mem[1].activations, 2 * block + 4096);
  assert_close(mem[1].transient, 96000);
  assert_close(mem[0].total, mem[0].weights + mem[0].grads + mem[0].optimizer + mem[0].activations);
  /* Without the distributed optimizer: 18 bytes per parameter. */
  c.distributed_optimizer = 0;
  assert_int_equal(plan_memory_estimate(&m, NULL, &c, &p, 1.0, mem, NULL), 0);
  assert_close(mem[0].weights + mem[0].grads + mem[0].optimizer, 18 * state0);
  /* Full recomputation keeps block inputs and rebuilds one block in backward. */
  c.recompute = PLAN_RECOMPUTE_FULL;
  assert_int_equal(plan_memory_estimate(&m, NULL, &c, &p, 1.0, mem, NULL), 0);
  assert_close(mem[0].activations, 2 * 2 * 2048);
  assert_close(mem[0].transient, block);
  /* Selective drops only the softmax statistics under flash attention. */
  c.recompute = PLAN_RECOMPUTE_SELECTIVE;
  assert_close(plan_layer_activation_bytes(&m, &c, 0, 1.0), block - 256);
  /* Routed activations scale with the expert load. */
  c.recompute = PLAN_RECOMPUTE_NONE;
  assert_close(plan_layer_activation_bytes(&m, &c, 0, 1.5) - plan_layer_activation_bytes(&m, &c, 0, 1.0),
               0.5 * 28672);
  sched_partition_free(&p);
}

static void test_schedules_and_uneven_stages(void **state) {
  (void)state;
  ModelConfig m;
  small_model(&m);
  PlanConfig c;
  double block = 2048 + 8192 + 256 + 4096 + 512 + 28672 + 4096;
  /* GPipe keeps all m = 2 micro-batches on every rank. */
  small_config(&c, SCHED_SCHEDULE_GPIPE, 1);
  finish(&c, &m);
  SchedPartition p;
  partition(&p, 2, 1, (const int[]){3, 1});
  PlanRankMemory mem[2];
  assert_int_equal(plan_memory_estimate(&m, NULL, &c, &p, 1.0, mem, NULL), 0);
  assert_int_equal(mem[0].peak_inflight, 2);
  assert_int_equal(mem[1].peak_inflight, 2);
  /* Uneven: three blocks on rank 0, one on rank 1. */
  assert_close(mem[0].activations, 2 * 3 * block);
  assert_close(mem[1].activations, 2 * (block + 4096));
  assert_true(mem[0].weights > mem[1].weights);
  sched_partition_free(&p);

  /* Interleaved, 2 chunks of one block per rank: rank r holds its warm-up
   * 2 (p - r - 1) + (v - 1) p forwards plus the one in flight. */
  small_config(&c, SCHED_SCHEDULE_1F1B, 2);
  finish(&c, &m);
  assert_int_equal(c.schedule, SCHED_SCHEDULE_INTERLEAVED);
  partition(&p, 2, 2, (const int[]){1, 1, 1, 1});
  assert_int_equal(plan_memory_estimate(&m, NULL, &c, &p, 1.0, mem, NULL), 0);
  SchedConfig sc;
  memset(&sc, 0, sizeof sc);
  sc.schedule = c.schedule, sc.pp = 2, sc.vpp = 2, sc.microbatches = c.microbatches;
  for (int r = 0; r < 2; r++) {
    int expect = sched_warmup_forwards(&sc, r) + 1;
    if (expect > c.microbatches * 2) expect = c.microbatches * 2;
    assert_int_equal(mem[r].peak_inflight, expect);
  }
  assert_int_equal(mem[0].peak_inflight, 4);
  assert_int_equal(mem[1].peak_inflight, 3);
  assert_close(mem[0].activations, 4 * block);
  sched_partition_free(&p);
}

/* zb-h1 by hand: a dense block (hidden 64, 4 heads and 2 KV heads of 16,
 * SwiGLU 256) at tp 1, PP 2, 32 tokens, bf16. Between B and W a micro-batch
 * keeps its forward's activations and the output gradients of the deferred
 * GEMMs: wo (64), q (64), k and v (32 each), w_down (64), w_gate_up (512)
 * = 768 values per token, 32 x 768 x 2 = 49152 bytes per block. */
static void test_zb_h1_keeps_output_gradients(void **state) {
  (void)state;
  ModelConfig m;
  small_model(&m);
  m.num_experts = 0;
  m.top_k = 0;
  m.moe_intermediate_size = 0;
  model_config_set_moe_layer_freq(&m, 0);
  PlanConfig c;
  plan_config_init(&c, 32, 4, 1);
  c.par.tp = 1, c.par.pp = 2, c.par.vpp = 1, c.par.ep = 1, c.par.etp = 1, c.par.dp = 0;
  c.schedule = SCHED_SCHEDULE_ZB_H1;
  c.schedule_given = 1;
  Error err = {0, ""};
  int rc = plan_config_finish(&c, &m, NULL, 2, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(c.microbatches, 4);
  /* input 4096, attention 2 (32 64 + 32 8 16 + 32 4 16) = 16384, softmax
   * statistics 512, MLP norms 8192 and SwiGLU 2 x 32 x 3 x 256 = 49152 */
  const double A = 4096 + 16384 + 512 + 8192 + 49152, K = 49152;
  assert_close(plan_layer_activation_bytes(&m, &c, 0, 1.0), A);
  assert_close(plan_layer_split_keep_bytes(&m, &c, 0), K);
  SchedPartition p;
  partition(&p, 2, 1, (const int[]){2, 2});
  PlanRankMemory mem[2];
  assert_int_equal(plan_memory_estimate(&m, NULL, &c, &p, 1.0, mem, NULL), 0);
  /* Rank 0 runs F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3: at B0 two micro-batches'
   * activations and B0's kept gradients; rank 1 (F B W per micro-batch) one
   * of each, with the final norm's 2 x 2 x 32 x 64. */
  assert_close(mem[0].activations, 2 * 2 * A + 2 * K);
  assert_close(mem[1].activations, 2 * A + 8192 + 2 * K);
  assert_int_equal(mem[0].peak_inflight, 2);
  /* 1F1B frees each micro-batch at its backward and keeps no gradients. */
  c.schedule = SCHED_SCHEDULE_1F1B;
  assert_close(plan_layer_split_keep_bytes(&m, &c, 0), 0);
  assert_int_equal(plan_memory_estimate(&m, NULL, &c, &p, 1.0, mem, NULL), 0);
  assert_close(mem[0].activations, 2 * 2 * A);
  assert_close(mem[1].activations, 2 * A + 8192);
  /* An MoE block defers only its attention GEMMs: 32 x 192 x 2; under
   * tensor parallelism the runtime defers nothing. */
  c.schedule = SCHED_SCHEDULE_ZB_H1;
  ModelConfig moe;
  small_model(&moe);
  assert_close(plan_layer_split_keep_bytes(&moe, &c, 0), 12288);
  c.par.tp = 2;
  assert_close(plan_layer_split_keep_bytes(&m, &c, 0), 0);
  sched_partition_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bytes_per_param),
      cmocka_unit_test(test_params_by_hand),
      cmocka_unit_test(test_activations_and_1f1b),
      cmocka_unit_test(test_schedules_and_uneven_stages),
      cmocka_unit_test(test_zb_h1_keeps_output_gradients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
