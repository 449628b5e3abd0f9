/* The bucket-size search of the nets' simulator (plan/net_buckets.h) on a
 * LeNet-5-shaped layer list: on the runtime's terms (reduction after the
 * last backward) it fuses the whole gradient into one bucket and beats the
 * default quarter; where reductions may run behind backward it finds an
 * interior size no point of a 300-size sweep beats; and a deliberately
 * wrong cost (the links' per-message latency dropped) changes the choice
 * to the smallest buckets, which the true cost prices slower. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "plan/net_buckets.h"
#include "plan_test_util.h"

/* 1e12 FLOP/s, GEMMs at half of it, memory 1e10 B/s; links of 1e9 B/s
 * with 20 us per message. */
static void lenet_cluster(ClusterSpec *c, double latency) {
  plan_test_free_cluster(c, 1, 2);
  for (int d = 0; d < PLAN_NUM_DTYPES; d++) c->peak_flops[d] = 1e12;
  c->memory_bandwidth = 1e10;
  for (int l = 0; l < PLAN_NUM_LEVELS; l++) c->link[l].bandwidth = 1e9, c->link[l].latency = latency;
}

static PlanNetLayer layer(int gemm, double m, double n, double k, double in, double out, double params, double bias) {
  PlanNetLayer l;
  memset(&l, 0, sizeof l);
  snprintf(l.kind, sizeof l.kind, "%s", gemm ? "linear" : "relu");
  snprintf(l.name, sizeof l.name, "%s", l.kind);
  l.gemm = gemm, l.m = m, l.n = n, l.k = k, l.in = in, l.out = out, l.params = params, l.bias = bias;
  return l;
}

/* LeNet-5 at 32 images per micro-batch: conv 6 5x5 on 28x28, relu, conv 16
 * 5x5 on 14x14, relu, dense 400-120-84-10 (61,706 parameters). */
static int lenet(PlanNetLayer *L) {
  double b = 32;
  int n = 0;
  L[n++] = layer(1, b * 784, 6, 25, b * 784, b * 6 * 784, 156, 6);
  L[n++] = layer(0, 0, 0, 0, b * 6 * 784, b * 6 * 784, 0, 0);
  L[n++] = layer(1, b * 100, 16, 150, b * 6 * 196, b * 1600, 2416, 16);
  L[n++] = layer(0, 0, 0, 0, b * 1600, b * 1600, 0, 0);
  L[n++] = layer(1, b, 120, 400, b * 400, b * 120, 48120, 120);
  L[n++] = layer(1, b, 84, 120, b * 120, b * 84, 10164, 84);
  L[n++] = layer(1, b, 10, 84, b * 84, b * 10, 850, 10);
  return n;
}

static double step_at(const PlanNetLayer *L, int n, const ClusterSpec *cl, const PlanNetConfig *cfg, double size) {
  PlanOptions o;
  plan_test_free_options(&o);
  o.bucket_params = size, o.bucket_max_share = 0;
  PlanNetResult r;
  Error err = {0, ""};
  assert_int_equal(plan_net_simulate(L, n, cl, &o, cfg, &r, &err), 0);
  return r.step_time;
}

static void search(const PlanNetLayer *L, int n, const ClusterSpec *cl, const PlanNetConfig *cfg,
                   PlanNetBucketChoice *c) {
  PlanOptions o;
  plan_test_free_options(&o);
  o.bucket_params = 0, o.bucket_max_share = 0.25; /* the nets runtime's default: a quarter */
  Error err = {0, ""};
  assert_int_equal(plan_net_search_buckets(L, n, cl, &o, cfg, c, &err), 0);
}

static void test_runtime_terms(void **state) {
  (void)state;
  PlanNetLayer L[8];
  int n = lenet(L);
  ClusterSpec cl;
  lenet_cluster(&cl, 20e-6);
  PlanNetConfig cfg = {2, 32, 2, 0, PLAN_DTYPE_FP32, 10, 0.0};
  PlanNetBucketChoice c;
  search(L, n, &cl, &cfg, &c);
  /* floor(61706 / 4) = 15426 (even): 4 full buckets and 2 elements, as dp_grads_create cuts them. */
  assert_int_equal(c.default_buckets, 5);
  assert_true(c.default_params == 15426);
  assert_int_equal(c.buckets, 1);
  assert_true(c.bucket_params >= 61706);
  /* Only the reduction changes, and by whole latencies of 20 us (each
   * all-reduce pays its algorithm's steps of one; four fewer messages). */
  double saved = c.default_step_time - c.step_time, latencies = saved / 20e-6;
  print_message("one bucket instead of 5 saves %.3f us (%.3f latencies)\n", saved * 1e6, latencies);
  assert_true(latencies >= 4 - 1e-6);
  assert_true(fabs(latencies - round(latencies)) < 1e-6);
  assert_true(fmod(round(latencies), 4) == 0);
  assert_true(c.simulations > c.num_candidates);
  /* The MB the runtime reads back is the same whole number of floats. */
  assert_true((size_t)(c.bucket_mb * 1e6 / sizeof(float)) == (size_t)c.bucket_params);
}

static void test_overlap_interior(void **state) {
  (void)state;
  PlanNetLayer L[8];
  int n = lenet(L);
  ClusterSpec cl;
  lenet_cluster(&cl, 20e-6);
  PlanNetConfig cfg = {2, 32, 1, 0, PLAN_DTYPE_FP32, 10, 1.0};
  PlanNetBucketChoice c;
  search(L, n, &cl, &cfg, &c);
  print_message("overlap 1: default %d buckets %.6f ms, chosen %.0f elements %d buckets %.6f ms\n", c.default_buckets,
                c.default_step_time * 1e3, c.bucket_params, c.buckets, c.step_time * 1e3);
  assert_true(c.step_time <= c.default_step_time);
  assert_true(c.buckets > 1 && c.buckets < 64);
  assert_true(fabs(step_at(L, n, &cl, &cfg, c.bucket_params) - c.step_time) <= 1e-12);
  /* No size of a fine sweep (64 elements to the whole gradient) beats it. */
  for (int i = 0; i <= 300; i++) {
    double size = round(64 * pow(61706.0 / 64, i / 300.0));
    double t = step_at(L, n, &cl, &cfg, size);
    if (t < c.step_time * (1 - 1e-9)) print_error("size %.0f: %.9f ms < chosen %.9f ms\n", size, t * 1e3, c.step_time * 1e3);
    assert_true(t >= c.step_time * (1 - 1e-9));
  }
}

static void test_wrong_cost(void **state) {
  (void)state;
  PlanNetLayer L[8];
  int n = lenet(L);
  ClusterSpec right, wrong;
  lenet_cluster(&right, 20e-6);
  lenet_cluster(&wrong, 0.0); /* no per-bucket latency: every split looks free */
  PlanNetConfig cfg = {2, 32, 1, 0, PLAN_DTYPE_FP32, 10, 1.0};
  PlanNetBucketChoice c_right, c_wrong;
  search(L, n, &right, &cfg, &c_right);
  search(L, n, &wrong, &cfg, &c_wrong);
  print_message("chosen with latency %.0f elements (%d buckets), without %.0f elements (%d buckets)\n",
                c_right.bucket_params, c_right.buckets, c_wrong.bucket_params, c_wrong.buckets);
  assert_true(c_wrong.bucket_params < c_right.bucket_params);
  assert_true(c_wrong.buckets > c_right.buckets);
  /* Priced with the real latency, the wrong cost's choice is slower. */
  assert_true(step_at(L, n, &right, &cfg, c_wrong.bucket_params) > c_right.step_time * (1 + 1e-6));
}

static void test_one_rank(void **state) {
  (void)state;
  PlanNetLayer L[8];
  int n = lenet(L);
  ClusterSpec cl;
  lenet_cluster(&cl, 20e-6);
  PlanNetConfig cfg = {1, 32, 1, 0, PLAN_DTYPE_FP32, 10, 1.0};
  PlanNetBucketChoice c;
  search(L, n, &cl, &cfg, &c);
  assert_int_equal(c.simulations, 1); /* nothing to reduce: the default stands */
  assert_true(c.step_time == c.default_step_time);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_terms),
      cmocka_unit_test(test_overlap_interior),
      cmocka_unit_test(test_wrong_cost),
      cmocka_unit_test(test_one_rank),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
