/* The simulator of nets/ networks (plan/net_sim.h): a layer list priced by
 * hand on a cluster with round numbers (GEMM layers at the GEMM curve,
 * convolutions at the batch-interpolated convolution curves, the measured
 * per-element rates at an unstated size never below memory traffic, the
 * first layer without a data gradient), per-pass convolution curves and
 * rates measured at several sizes (interpolated, no roofline on top), the
 * step as micro-batches x (forward + backward) plus the reduction and the
 * update, ZeRO-1's shard and gather, and the spec fields calibrate writes
 * (conv_efficiency with its pass curves, layer_seconds at sizes) through a
 * round trip and their refusals naming the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/calibrate_fit.h"
#include "plan/net_sim.h"
#include "plan_test_util.h"

static void assert_close(double got, double want) {
  if (fabs(got - want) > 1e-9 * fabs(want) + 1e-15) print_error("got %.12g, want %.12g\n", got, want);
  assert_true(fabs(got - want) <= 1e-9 * fabs(want) + 1e-15);
}

/* Peak 1e12 FLOP/s, GEMMs at 0.5, memory 1e10 B/s at efficiency 1, no
 * floor; links of 1e9 B/s without latency. */
static void round_cluster(ClusterSpec *c) {
  plan_test_free_cluster(c, 1, 4);
  for (int d = 0; d < PLAN_NUM_DTYPES; d++) c->peak_flops[d] = 1e12;
  c->memory_bandwidth = 1e10;
  for (int l = 0; l < PLAN_NUM_LEVELS; l++) c->link[l].bandwidth = 1e9;
}

static PlanNetLayer gemm_layer(const char *kind, double m, double n, double k, double in, double out, double params,
                               double bias) {
  PlanNetLayer l;
  memset(&l, 0, sizeof l);
  snprintf(l.kind, sizeof l.kind, "%s", kind);
  snprintf(l.name, sizeof l.name, "%s", kind);
  l.gemm = 1, l.m = m, l.n = n, l.k = k, l.in = in, l.out = out, l.params = params, l.bias = bias;
  return l;
}

static PlanNetLayer memory_layer(const char *kind, double in, double out) {
  PlanNetLayer l;
  memset(&l, 0, sizeof l);
  snprintf(l.kind, sizeof l.kind, "%s", kind);
  snprintf(l.name, sizeof l.name, "%s", kind);
  l.in = in, l.out = out;
  return l;
}

/* A dense layer of 1000 x 1000 x 1000 (2e9 FLOPs: 4 ms at half of 1e12),
 * a relu over 1e6 elements in and out (8 MB: 0.8 ms forward, 12 MB 1.2 ms
 * backward), then a dense layer with a bias of 1e6 outputs. */
static void test_by_hand(void **state) {
  (void)state;
  ClusterSpec cl;
  round_cluster(&cl);
  PlanOptions opt;
  plan_test_free_options(&opt);
  PlanNetLayer L[3] = {gemm_layer("linear", 1000, 1000, 1000, 1e6, 1e6, 1e6, 0), memory_layer("relu", 1e6, 1e6),
                       gemm_layer("linear", 1000, 1000, 1000, 1e6, 1e6, 1e6 + 1000, 1000)};
  PlanNetConfig cfg = {1, 10, 3, 0, PLAN_DTYPE_FP32, 100, 0};
  PlanNetResult r;
  Error err = {0, ""};
  assert_int_equal(plan_net_simulate(L, 3, &cl, &opt, &cfg, &r, &err), 0);
  double gemm = 4e-3, bias_f = 2e6 * 4 / 1e10, bias_b = 1e6 * 4 / 1e10;
  assert_close(r.layer_fwd[0], gemm);
  assert_close(r.layer_bwd[0], gemm); /* the first layer has no data gradient */
  assert_close(r.layer_fwd[1], 0.8e-3);
  assert_close(r.layer_bwd[1], 1.2e-3);
  assert_close(r.layer_fwd[2], gemm + bias_f);
  assert_close(r.layer_bwd[2], 2 * gemm + bias_b);
  /* Input copy 2 x 1e6 x 4 B, loss 3 x 10 x 100 x 4 B. */
  double extra = 8e6 / 1e10 + 12e3 / 1e10;
  assert_close(r.fwd, extra + 2 * gemm + bias_f + 0.8e-3);
  assert_close(r.bwd, 3 * gemm + bias_b + 1.2e-3);
  double params = 2e6 + 1000;
  double optim = params * 28 / 1e10 + 2 * params * 4 / 1e10;
  assert_close(r.optimizer, optim);
  assert_close(r.reduce, 0);
  assert_close(r.step_time, 3 * (r.fwd + r.bwd) + optim);

  /* Measured rates: relu at 2 ns forward and 0.1 ns backward per element:
   * forward 2 ms, backward stays at its memory traffic. */
  cl.num_layer_seconds = 1;
  snprintf(cl.layer_seconds[0].kind, sizeof cl.layer_seconds[0].kind, "relu");
  cl.layer_seconds[0].fwd = 2e-9, cl.layer_seconds[0].bwd = 1e-10;
  assert_int_equal(plan_net_simulate(L, 3, &cl, &opt, &cfg, &r, &err), 0);
  assert_close(r.layer_fwd[1], 2e-3);
  assert_close(r.layer_bwd[1], 1.2e-3);

  /* DP 2: one all-reduce of the whole gradient after backward (no
   * overlap); ZeRO-1 reduce-scatters, updates half and gathers. */
  PlanNetConfig dp = cfg;
  dp.dp = 2;
  opt.bucket_params = 1e9;
  assert_int_equal(plan_net_simulate(L, 3, &cl, &opt, &dp, &r, &err), 0);
  assert_int_equal(r.buckets, 1);
  assert_true(r.reduce > 0);
  PlanNetResult z;
  dp.distributed_optimizer = 1;
  assert_int_equal(plan_net_simulate(L, 3, &cl, &opt, &dp, &z, &err), 0);
  assert_true(z.reduce < r.reduce); /* a reduce-scatter moves half an all-reduce's bytes */
  assert_true(z.optimizer > params / 2 * 28 / 1e10);
  /* Smaller buckets: more of them. */
  opt.bucket_params = 1e6;
  assert_int_equal(plan_net_simulate(L, 3, &cl, &opt, &dp, &z, &err), 0);
  assert_int_equal(z.buckets, 3);
  /* The runtime's own cost per bucket (calibrated) is added to each of
   * them: the reductions run back to back after backward. */
  PlanNetResult w;
  opt.bucket_overhead = 7e-6;
  assert_int_equal(plan_net_simulate(L, 3, &cl, &opt, &dp, &w, &err), 0);
  assert_close(w.reduce, z.reduce + 3 * 7e-6);
  /* With the runtime's measured update rate the update is the local
   * parameters at that rate: all of them, a dp-th under ZeRO-1 (plus the
   * parameters' all-gather, unchanged). */
  PlanNetConfig plain = dp;
  plain.distributed_optimizer = 0;
  PlanNetResult u, zu;
  cl.optimizer_per_param = 2e-9;
  assert_int_equal(plan_net_simulate(L, 3, &cl, &opt, &plain, &u, &err), 0);
  assert_close(u.optimizer, params * 2e-9);
  assert_int_equal(plan_net_simulate(L, 3, &cl, &opt, &dp, &zu, &err), 0);
  cl.optimizer_per_param = 0;
  assert_int_equal(plan_net_simulate(L, 3, &cl, &opt, &dp, &w, &err), 0);
  double gather = w.optimizer - (params / 2 * 28 / 1e10 + 2 * params * 4 / 1e10);
  assert_close(zu.optimizer, params / 2 * 2e-9 + gather);
  /* The runtime's reduction against the fit, by bucket size (the curve
   * read in log(bytes) between its points, held beyond them): at a factor
   * of 2 for every bucket, the buckets cost twice the collective, plus
   * each one's overhead. */
  PlanNetResult f2;
  opt.grad_reduce_factor.n = 2;
  opt.grad_reduce_factor.x[0] = 1e6, opt.grad_reduce_factor.y[0] = 1.5;
  opt.grad_reduce_factor.x[1] = 1.6e7, opt.grad_reduce_factor.y[1] = 2.5;
  assert_close(plan_curve_eval(&opt.grad_reduce_factor, 4e6), 2.0);
  assert_close(plan_curve_eval(&opt.grad_reduce_factor, 4e3), 1.5);
  opt.grad_reduce_factor.n = 1;
  opt.grad_reduce_factor.y[0] = 2.0;
  assert_int_equal(plan_net_simulate(L, 3, &cl, &opt, &dp, &f2, &err), 0);
  assert_close(f2.reduce, 2 * z.reduce + 3 * 7e-6);
  opt.grad_reduce_factor.n = 0;
  /* One rank reduces nothing, so pays nothing. */
  PlanNetResult one;
  assert_int_equal(plan_net_simulate(L, 3, &cl, &opt, &cfg, &one, &err), 0);
  assert_close(one.reduce, 0);
}

/* Convolution curves at batches 10 and 100: a pass of 10 images reads the
 * first (0.5), of 100 the second (0.25), of 1000 holds the second, and of
 * 31 interpolates the per-image time in log(batch). */
static void test_conv_batches(void **state) {
  (void)state;
  ClusterSpec cl;
  round_cluster(&cl);
  cl.memory_bandwidth = 1e30;
  PlanConvCurves *cc = &cl.conv_efficiency;
  cc->n = 2;
  cc->batch[0] = 10, cc->batch[1] = 100;
  cc->curve[0].n = cc->curve[1].n = 1;
  cc->curve[0].x[0] = cc->curve[1].x[0] = 1;
  cc->curve[0].y[0] = 0.5, cc->curve[1].y[0] = 0.25;
  PlanOptions opt;
  plan_test_free_options(&opt);
  double batches[4] = {10, 100, 1000, 31};
  double eff[4] = {0.5, 0.25, 0.25, 0}; /* 0: between the two */
  for (int i = 0; i < 4; i++) {
    double b = batches[i];
    /* 1000 positions x 10 channels x 50 taps per image: 1e6 FLOPs. */
    PlanNetLayer L[2] = {memory_layer("relu", b, b), gemm_layer("conv2d", b * 1000, 10, 50, b, b, 500, 0)};
    PlanNetConfig cfg = {1, (int)b, 1, 0, PLAN_DTYPE_FP32, 1, 0};
    PlanNetResult r;
    Error err = {0, ""};
    assert_int_equal(plan_net_simulate(L, 2, &cl, &opt, &cfg, &r, &err), 0);
    double a = log(b / 10) / log(10.0); /* per image 2 us at batch 10, 4 us at 100 */
    double want = eff[i] > 0 ? b * 1e6 / (1e12 * eff[i]) : b * (2e-6 + a * (4e-6 - 2e-6));
    assert_close(r.layer_fwd[1], want);
    assert_close(r.layer_bwd[1], 2 * want);
  }
  /* bf16 without its own curves: the GEMM curve (0.5 here). */
  PlanNetLayer L[1] = {gemm_layer("conv2d", 1000, 10, 50, 1, 1, 500, 0)};
  PlanNetConfig cfg = {1, 1, 1, 0, PLAN_DTYPE_BF16, 1, 0};
  PlanNetResult r;
  Error err = {0, ""};
  assert_int_equal(plan_net_simulate(L, 1, &cl, &opt, &cfg, &r, &err), 0);
  assert_close(r.layer_fwd[0], 1e6 / (1e12 * 0.5));
}

/* Per-pass curves: forward at 0.5, data gradient at 0.25, weights at 0.1
 * (1e6 FLOPs per pass: 2, 4 and 10 us); the first layer skips the data
 * gradient. The roofline counts input, weights and output once: with
 * 1e6 + 500 + 1e6 floats at 1e10 B/s (0.8002 ms) it binds every pass. */
static void test_conv_passes(void **state) {
  (void)state;
  ClusterSpec cl;
  round_cluster(&cl);
  cl.memory_bandwidth = 1e30;
  PlanConvCurves *cc = &cl.conv_efficiency;
  cc->n = 1, cc->batch[0] = 1, cc->per_pass = 1;
  PlanCurve *curves[3] = {&cc->curve[0], &cc->data[0], &cc->weights[0]};
  const double eff[3] = {0.5, 0.25, 0.1};
  for (int p = 0; p < 3; p++) curves[p]->n = 1, curves[p]->x[0] = 1, curves[p]->y[0] = eff[p];
  PlanOptions opt;
  plan_test_free_options(&opt);
  PlanNetLayer L[2] = {gemm_layer("conv2d", 1000, 10, 50, 1, 1, 500, 0), gemm_layer("conv2d", 1000, 10, 50, 1, 1, 500, 0)};
  PlanNetConfig cfg = {1, 1, 1, 0, PLAN_DTYPE_FP32, 1, 0};
  PlanNetResult r;
  Error err = {0, ""};
  assert_int_equal(plan_net_simulate(L, 2, &cl, &opt, &cfg, &r, &err), 0);
  assert_close(r.layer_fwd[0], 2e-6);
  assert_close(r.layer_bwd[0], 10e-6);
  assert_close(r.layer_fwd[1], 2e-6);
  assert_close(r.layer_bwd[1], 4e-6 + 10e-6);
  cl.memory_bandwidth = 1e10;
  L[1].in = L[1].out = 1e6;
  assert_int_equal(plan_net_simulate(L, 2, &cl, &opt, &cfg, &r, &err), 0);
  assert_close(r.layer_fwd[1], (2e6 + 500) * 4 / 1e10);
  assert_close(r.layer_bwd[1], 2 * (2e6 + 500) * 4 / 1e10);
}

/* relu measured at 1e5 elements (1 ns forward, 2 ns backward per element)
 * and at 1e7 (3 and 4 ns): at or below the first size its rates, at or
 * above the last the last's, between them interpolated in log(elements);
 * the memory roofline (here 0.8 ns per element forward) is not applied. */
static void test_layer_sizes(void **state) {
  (void)state;
  ClusterSpec cl;
  round_cluster(&cl);
  cl.num_layer_seconds = 1;
  snprintf(cl.layer_seconds[0].kind, sizeof cl.layer_seconds[0].kind, "relu");
  cl.layer_seconds[0].sizes = 2;
  cl.layer_seconds[0].elements[0] = 1e5, cl.layer_seconds[0].elements[1] = 1e7;
  cl.layer_seconds[0].fwd_at[0] = 1e-9, cl.layer_seconds[0].fwd_at[1] = 3e-9;
  cl.layer_seconds[0].bwd_at[0] = 2e-9, cl.layer_seconds[0].bwd_at[1] = 4e-9;
  cl.layer_seconds[0].fwd = 1e-9, cl.layer_seconds[0].bwd = 2e-9;
  PlanOptions opt;
  plan_test_free_options(&opt);
  const double sizes[4] = {1e4, 1e5, 1e6, 1e8}, f_ns[4] = {1, 1, 2, 3}, b_ns[4] = {2, 2, 3, 4};
  for (int i = 0; i < 4; i++) {
    PlanNetLayer L[2] = {memory_layer("relu", sizes[i], sizes[i]), memory_layer("relu", sizes[i], sizes[i])};
    PlanNetConfig cfg = {1, 1, 1, 0, PLAN_DTYPE_FP32, 1, 0};
    PlanNetResult r;
    Error err = {0, ""};
    assert_int_equal(plan_net_simulate(L, 2, &cl, &opt, &cfg, &r, &err), 0);
    assert_close(r.layer_fwd[1], f_ns[i] * 1e-9 * sizes[i]);
    assert_close(r.layer_bwd[1], b_ns[i] * 1e-9 * sizes[i]);
  }
}

static void test_refusals(void **state) {
  (void)state;
  ClusterSpec cl;
  round_cluster(&cl);
  PlanOptions opt;
  plan_test_free_options(&opt);
  PlanNetLayer L[1] = {memory_layer("relu", 1, 1)};
  PlanNetConfig cfg = {0, 1, 1, 0, PLAN_DTYPE_FP32, 1, 0};
  PlanNetResult r;
  Error err = {0, ""};
  assert_int_not_equal(plan_net_simulate(L, 1, &cl, &opt, &cfg, &r, &err), 0);
  assert_non_null(strstr(err.msg, "dp 0"));
  cfg.dp = 1;
  assert_int_not_equal(plan_net_simulate(L, 0, &cl, &opt, &cfg, &r, &err), 0);
}

static const char *kSpec =
    "{\"name\": \"t\", \"nodes\": 1, \"devices_per_node\": 2, \"peak_tflops\": {\"bf16\": 1},"
    " \"memory\": {\"capacity_GiB\": 10, \"bandwidth_GBps\": 10},"
    " \"intra_node\": {\"bandwidth_GBps\": 5, \"latency_us\": 2},"
    " \"inter_node\": {\"bandwidth_Gbps\": 10, \"latency_us\": 30}, \"compute\": {%s}}";

static int parse(const char *compute, ClusterSpec *out, Error *err) {
  char text[4096];
  snprintf(text, sizeof text, kSpec, compute);
  cJSON *j = cJSON_Parse(text);
  assert_non_null(j);
  int rc = cluster_spec_from_json(out, j, "spec.json", err);
  cJSON_Delete(j);
  return rc;
}

static void expect_refused(const char *compute, const char *needle) {
  ClusterSpec c;
  Error err = {0, ""};
  int rc = parse(compute, &c, &err);
  if (rc == 0 || !strstr(err.msg, needle)) print_error("'%s': rc %d, '%s' (want '%s')\n", compute, rc, err.msg, needle);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(err.msg, needle));
  assert_non_null(strstr(err.msg, "spec.json"));
}

static void test_spec_fields(void **state) {
  (void)state;
  ClusterSpec c;
  Error err = {0, ""};
  const char *ok = "\"conv_efficiency\": [{\"batch\": 32, \"curve\": [[1e6, 0.2], [1e8, 0.8]]},"
                   " {\"batch\": 256, \"curve\": [[1e7, 0.1]]}],"
                   " \"layer_seconds\": {\"maxpool\": [1.1e-9, 1.5e-10], \"relu\": [7e-11, 1e-10]}";
  assert_int_equal(parse(ok, &c, &err), 0);
  assert_int_equal(c.conv_efficiency.n, 2);
  assert_int_equal(c.conv_efficiency.batch[1], 256);
  assert_int_equal(c.conv_efficiency.curve[0].n, 2);
  assert_int_equal(c.conv_efficiency_bf16.n, 0);
  assert_int_equal(c.num_layer_seconds, 2);
  assert_string_equal(c.layer_seconds[0].kind, "maxpool");
  assert_close(c.layer_seconds[0].fwd, 1.1e-9);
  /* What calibrate writes reads back the same. */
  cJSON *j = calib_spec_to_json(&c, "round trip");
  assert_non_null(j);
  ClusterSpec back;
  assert_int_equal(cluster_spec_from_json(&back, j, "back.json", &err), 0);
  cJSON_Delete(j);
  assert_int_equal(back.conv_efficiency.n, 2);
  assert_int_equal(back.conv_efficiency.batch[0], 32);
  assert_close(back.conv_efficiency.curve[0].y[1], 0.8);
  assert_int_equal(back.num_layer_seconds, 2);
  assert_string_equal(back.layer_seconds[1].kind, "relu");
  assert_close(back.layer_seconds[1].bwd, 1e-10);
  cluster_spec_free(&back);
  cluster_spec_free(&c);

  /* The pass curves and the sized rates calibrate writes, round trip. */
  const char *passes = "\"conv_efficiency\": [{\"batch\": 32, \"curve\": [[1e6, 0.2]], \"data\": [[1e6, 0.1]],"
                       " \"weights\": [[1e6, 0.05], [1e8, 0.4]]}],"
                       " \"layer_seconds\": {\"relu\": [[4e5, 3e-10, 4e-10], [6.4e6, 3.5e-10, 6e-10]]},"
                       " \"optimizer_ns_per_param\": 1.5";
  assert_int_equal(parse(passes, &c, &err), 0);
  assert_int_equal(c.conv_efficiency.per_pass, 1);
  assert_close(c.conv_efficiency.data[0].y[0], 0.1);
  assert_int_equal(c.conv_efficiency.weights[0].n, 2);
  assert_int_equal(c.layer_seconds[0].sizes, 2);
  assert_close(c.layer_seconds[0].elements[1], 6.4e6);
  assert_close(c.layer_seconds[0].bwd_at[1], 6e-10);
  j = calib_spec_to_json(&c, "round trip");
  assert_int_equal(cluster_spec_from_json(&back, j, "back.json", &err), 0);
  cJSON_Delete(j);
  assert_int_equal(back.conv_efficiency.per_pass, 1);
  assert_close(back.conv_efficiency.weights[0].y[1], 0.4);
  assert_int_equal(back.layer_seconds[0].sizes, 2);
  assert_close(back.layer_seconds[0].fwd_at[0], 3e-10);
  assert_close(back.layer_seconds[0].elements[0], 4e5);
  assert_close(back.optimizer_per_param, 1.5e-9);
  cluster_spec_free(&back);
  cluster_spec_free(&c);

  expect_refused("\"conv_efficiency\": [{\"batch\": 32, \"curve\": [[1e6, 0.2]], \"data\": [[1e6, 0.1]]}]",
                 "compute.conv_efficiency[0]\": expected both \"data\" and \"weights\"");
  expect_refused("\"conv_efficiency\": [{\"batch\": 32, \"curve\": [[1e6, 0.2]], \"data\": [[1e6, 0.1]], \"weights\":"
                 " [[1e6, 0.1]]}, {\"batch\": 64, \"curve\": [[1e6, 0.2]]}]", "alike in every entry");
  expect_refused("\"conv_efficiency\": [{\"batch\": 32, \"curve\": [[1e6, 0.2]], \"data\": [[1e6, 3]], \"weights\":"
                 " [[1e6, 0.1]]}]", "compute.conv_efficiency[0].data");
  expect_refused("\"layer_seconds\": {\"relu\": [[4e5, 3e-10, 4e-10], [1e5, 3e-10, 4e-10]]}",
                 "compute.layer_seconds.relu[1]");
  expect_refused("\"layer_seconds\": {\"relu\": [[4e5, -1, 4e-10]]}", "compute.layer_seconds.relu[0]");
  expect_refused("\"layer_seconds\": {\"relu\": [[4e5, 3e-10]]}", "compute.layer_seconds.relu[0]");
  expect_refused("\"optimizer_ns_per_param\": -1", "compute.optimizer_ns_per_param");
  expect_refused("\"conv_efficiency\": [[1e6, 0.2]]", "compute.conv_efficiency[0]");
  expect_refused("\"conv_efficiency\": [{\"batch\": 32, \"curve\": [[1e6, 0.2]]}, {\"batch\": 16, \"curve\": [[1e6, "
                 "0.2]]}]", "compute.conv_efficiency[1].batch");
  expect_refused("\"conv_efficiency\": [{\"batch\": 32}]", "compute.conv_efficiency[0].curve");
  expect_refused("\"conv_efficiency_bf16\": [{\"batch\": 32, \"curve\": [[1e6, 2]]}]",
                 "compute.conv_efficiency_bf16[0].curve");
  expect_refused("\"layer_seconds\": {\"relu\": [1e-9]}", "compute.layer_seconds.relu");
  expect_refused("\"layer_seconds\": [1]", "compute.layer_seconds");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_by_hand),
      cmocka_unit_test(test_conv_batches),
      cmocka_unit_test(test_conv_passes),
      cmocka_unit_test(test_layer_sizes),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_spec_fields),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
