/* Gradient-tensor fusion: the bucket-by-bucket price (by hand on a small
 * case), the backtracking boundary search against brute force over every
 * set of layer boundaries, the candidate uniform sizes against brute force
 * over every size, an interior optimum where latency and overlap trade off
 * (and none without overlap), and the simulator-driven search of the
 * runtime's bucket size against a fine sweep of simulations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/buckets.h"
#include "plan/calibrate_fit.h"
#include "plan_test_util.h"

/* alpha-beta per group: latency[g] + elements x per_element[g]. */
typedef struct AlphaBeta {
  double latency[PLAN_BUCKET_GROUPS], per_element[PLAN_BUCKET_GROUPS];
} AlphaBeta;

static double alpha_beta(const void *ctx, int g, double elements) {
  const AlphaBeta *ab = ctx;
  return elements > 0 ? ab->latency[g] + elements * ab->per_element[g] : 0.0;
}

static void assert_close(double got, double want) {
  if (fabs(got - want) > 1e-9 * fabs(want) + 1e-12) print_error("got %.12g, want %.12g\n", got, want);
  assert_true(fabs(got - want) <= 1e-9 * fabs(want) + 1e-12);
}

/* Three layers of 100 elements, 1 s of backward each, latency 0.5 s and
 * 0.01 s per element. Buckets of 100: ready at 1, 2, 3; costs 1.5 each;
 * serialised: 1-2.5, 2.5-4, 4-5.5: exposed 2.5 s. One bucket: 3 + 3.5 = 6.5,
 * exposed 3.5. Without overlap the three run after backward: 4.5. */
static void test_price_by_hand(void **state) {
  (void)state;
  PlanGradLayer layers[3] = {{{100, 0}, 1, 0}, {{100, 0}, 1, 0}, {{100, 0}, 1, 0}};
  AlphaBeta ab = {{0.5, 0.5}, {0.01, 0.01}};
  PlanBucketModel bm = {layers, 3, 1.0, alpha_beta, &ab};
  PlanBucketPrice p;
  Error err = {0, ""};
  assert_int_equal(plan_buckets_price_uniform(&bm, 100, &p, &err), 0);
  assert_int_equal(p.buckets, 3);
  assert_close(p.backward, 3);
  assert_close(p.reduce, 4.5);
  assert_close(p.exposed, 2.5);
  assert_int_equal(plan_buckets_price_uniform(&bm, 300, &p, &err), 0);
  assert_int_equal(p.buckets, 1);
  assert_close(p.exposed, 3.5);
  /* A bucket of 150 straddles layer 1: ready when layer 1 is done. */
  assert_int_equal(plan_buckets_price_uniform(&bm, 150, &p, &err), 0);
  assert_int_equal(p.buckets, 2);
  assert_close(p.finish, fmax(2 + 2.0, 3) + 2.0); /* 2-4, then 4-6 */
  bm.overlap = 0;
  assert_int_equal(plan_buckets_price_uniform(&bm, 100, &p, &err), 0);
  assert_close(p.exposed, 4.5);
  /* A segment boundary before layer 2 (a runtime cut): buckets of 150 cut
   * the first segment into 150 + 50 and the second is one bucket of 100. */
  layers[2].starts_segment = 1;
  bm.overlap = 1;
  assert_int_equal(plan_buckets_price_uniform(&bm, 150, &p, &err), 0);
  assert_int_equal(p.buckets, 3);
  assert_close(p.finish, 6.5); /* ready 2, 2, 3; costs 2, 1, 1.5: 2-4, 4-5, 5-6.5 */
  layers[2].starts_segment = 0;
  bm.overlap = 0;
  /* Ends must cover the total. */
  double bad[2] = {100, 200};
  assert_int_not_equal(plan_buckets_price(&bm, bad, 2, &p, &err), 0);
}

/* Every subset of the L - 1 inner layer boundaries, priced. */
static double brute_force_boundaries(const PlanBucketModel *bm, int *best_buckets) {
  int L = bm->num_layers;
  double best = -1;
  for (unsigned mask = 0; mask < 1u << (L - 1); mask++) {
    int allowed = 1;
    for (int i = 0; i + 1 < L; i++)
      if (bm->layer[i + 1].starts_segment && !(mask >> i & 1)) allowed = 0;
    if (!allowed) continue;
    double ends[16], acc = 0;
    int n = 0;
    for (int i = 0; i < L; i++) {
      acc += bm->layer[i].elements[0] + bm->layer[i].elements[1];
      if (i == L - 1 || (mask >> i & 1)) ends[n++] = acc;
    }
    PlanBucketPrice p;
    Error err = {0, ""};
    assert_int_equal(plan_buckets_price(bm, ends, n, &p, &err), 0);
    if (best < 0 || p.exposed < best - 1e-12 || (fabs(p.exposed - best) <= 1e-12 && n < *best_buckets)) {
      best = p.exposed;
      *best_buckets = n;
    }
  }
  return best;
}

static double uniform01(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return ((*seed >> 8) & 0xffff) / 65536.0;
}

static void test_boundaries_equal_brute_force(void **state) {
  (void)state;
  unsigned seed = 7;
  int cases = 0, interior = 0;
  for (int L = 1; L <= 9; L++)
    for (int trial = 0; trial < 12; trial++) {
      PlanGradLayer layers[9];
      for (int i = 0; i < L; i++) {
        layers[i].elements[0] = 1 + floor(1000 * uniform01(&seed));
        layers[i].elements[1] = trial % 3 == 0 ? floor(500 * uniform01(&seed)) : 0; /* experts in some */
        layers[i].bwd_seconds = 0.1 + uniform01(&seed);
        layers[i].starts_segment = trial % 5 == 3 && i > 0 && uniform01(&seed) < 0.3;
      }
      AlphaBeta ab = {{0.05 + uniform01(&seed), 0.2 * uniform01(&seed)}, {1e-3 * uniform01(&seed), 2e-3 * uniform01(&seed)}};
      PlanBucketModel bm = {layers, L, trial % 4 == 1 ? 0.0 : trial % 4 == 2 ? 0.5 : 1.0, alpha_beta, &ab};
      int cut[9], exhaustive = 0, brute_n = 0;
      long nodes = 0;
      PlanBucketPrice best;
      Error err = {0, ""};
      assert_int_equal(plan_buckets_search_boundaries(&bm, 1000000, cut, &best, &nodes, &exhaustive, &err), 0);
      assert_true(exhaustive);
      double brute = brute_force_boundaries(&bm, &brute_n);
      assert_close(best.exposed, brute);
      assert_int_equal(best.buckets, brute_n);
      assert_int_equal(cut[L - 1], 1);
      cases++;
      interior += best.buckets > 1 && best.buckets < L;
    }
  print_message("boundary search = brute force on %d cases (%d with an interior bucket count)\n", cases, interior);
  assert_true(interior > 0);
}

/* The candidate sizes hold the best uniform size: brute force over every
 * integer size of a 240-element gradient finds nothing better. */
static void test_uniform_candidates_equal_brute_force(void **state) {
  (void)state;
  PlanGradLayer layers[6];
  for (int i = 0; i < 6; i++) layers[i] = (PlanGradLayer){{40, 0}, 1.0, 0};
  AlphaBeta ab = {{0.3, 0}, {0.02, 0}};
  for (int o = 0; o <= 2; o++) {
    PlanBucketModel bm = {layers, 6, o / 2.0, alpha_beta, &ab};
    double total = plan_buckets_total_elements(&bm), sizes[512];
    int n = plan_bucket_candidate_sizes(&total, 1, 240, 1, sizes, 512);
    Error err = {0, ""};
    PlanBucketPrice p;
    double best_candidate = -1, best_any = -1;
    for (int i = 0; i < n; i++) {
      assert_int_equal(plan_buckets_price_uniform(&bm, sizes[i], &p, &err), 0);
      if (best_candidate < 0 || p.exposed < best_candidate) best_candidate = p.exposed;
    }
    for (int size = 1; size <= 240; size++) {
      assert_int_equal(plan_buckets_price_uniform(&bm, size, &p, &err), 0);
      if (best_any < 0 || p.exposed < best_any) best_any = p.exposed;
    }
    assert_close(best_candidate, best_any);
    assert_true(n < 240); /* fewer than every size: the layouts that differ */
  }
}

/* Latency against overlap: with overlap the exposed time falls and then
 * rises again as buckets shrink (an interior optimum); without overlap
 * one bucket is best. */
static void test_interior_optimum(void **state) {
  (void)state;
  PlanGradLayer layers[16];
  for (int i = 0; i < 16; i++) layers[i] = (PlanGradLayer){{1000, 0}, 0.01, 0};
  AlphaBeta ab = {{2e-3, 0}, {1e-5, 0}}; /* 16k elements: 0.16 s of bandwidth, backward 0.16 s */
  PlanBucketModel bm = {layers, 16, 1.0, alpha_beta, &ab};
  Error err = {0, ""};
  double best = -1, best_size = 0, smallest = 0, largest = 0;
  for (int size = 250; size <= 16000; size += 250) {
    PlanBucketPrice p;
    assert_int_equal(plan_buckets_price_uniform(&bm, size, &p, &err), 0);
    if (size == 250) smallest = p.exposed;
    if (size == 16000) largest = p.exposed;
    if (best < 0 || p.exposed < best) best = p.exposed, best_size = size;
  }
  print_message("overlap 1: exposed %.4f s at 250 elements, %.4f s at %.0f, %.4f s in one bucket\n", smallest, best,
                best_size, largest);
  assert_true(best_size > 250 && best_size < 16000);
  assert_true(best < 0.8 * smallest && best < 0.8 * largest);
  bm.overlap = 0;
  best = -1;
  for (int size = 250; size <= 16000; size += 250) {
    PlanBucketPrice p;
    assert_int_equal(plan_buckets_price_uniform(&bm, size, &p, &err), 0);
    if (best < 0 || p.exposed <= best) best = p.exposed, best_size = size;
  }
  assert_true(best_size == 16000);
}

static double simulate_size(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o, const PlanConfig *c,
                            double size) {
  PlanOptions x = *o;
  x.bucket_params = size;
  x.bucket_max_share = 0;
  PlanResult r;
  Error err = {0, ""};
  assert_int_equal(plan_simulate(m, cl, &x, c, NULL, NULL, &r, &err), 0);
  double t = r.step_time;
  plan_result_free(&r);
  return t;
}

/* DP2 on a 2-device spec with slow links and asynchronous progress: the
 * simulated step has an interior optimum in the bucket size, and the
 * search's choice is no slower than any size of a fine sweep. Without
 * asynchronous progress (the CPU runtime) it picks one bucket per stage. */
static void test_search_driven_by_the_simulator(void **state) {
  (void)state;
  ModelConfig m = plan_test_tiny_moe();
  ClusterSpec cl;
  calib_spec_local_default(&cl, 2);
  cl.link[PLAN_LEVEL_INTRA] = (PlanLink){2e9, 400e-6};
  PlanOptions o;
  plan_options_default(&o);
  o.dp_overlap = 1;
  PlanConfig c;
  plan_config_init(&c, 128, 8, 4);
  c.par.dp = 2;
  c.dtype = PLAN_DTYPE_FP32;
  Error err = {0, ""};
  assert_int_equal(plan_config_finish(&c, &m, &cl, 2, &err), 0);
  PlanBucketChoice choice;
  PlanOptions chosen;
  assert_int_equal(plan_buckets_search_uniform(&m, &cl, &o, &c, &choice, &chosen, &err), 0);
  assert_true(chosen.bucket_params == choice.bucket_params && chosen.bucket_max_share == 0);
  assert_close(simulate_size(&m, &cl, &o, &c, choice.bucket_params), choice.step_time);
  double total = 0;
  {
    PlanCostModel cm;
    PlanStageCosts sc;
    assert_int_equal(plan_cost_model_init(&cm, &m, &cl, &o, &c, NULL, &err), 0);
    assert_int_equal(plan_stage_costs_build(&cm, &sc, &err), 0);
    PlanParams p = plan_stage_params(&m, &c, &sc.part, 0);
    total = p.dense + p.expert;
    plan_stage_costs_free(&sc);
  }
  double sweep_best = -1, first = 0, last = 0;
  for (int k = 1; k <= 200; k++) {
    double size = ceil(total * k / 200.0), t = simulate_size(&m, &cl, &o, &c, size);
    if (k == 1) first = t;
    if (k == 200) last = t;
    if (sweep_best < 0 || t < sweep_best) sweep_best = t;
  }
  print_message("DP2: step %.4f s at 1/200 of the gradient, %.4f s in one bucket, chosen %.4g elements (%d buckets) "
                "%.4f s; sweep best %.4f s\n",
                first, last, choice.bucket_params, choice.buckets_per_stage[0], choice.step_time, sweep_best);
  assert_true(choice.step_time <= sweep_best * (1 + 1e-12));
  assert_true(choice.step_time < first && choice.step_time < last);
  assert_true(choice.buckets_per_stage[0] > 1);
  assert_true(choice.step_time < choice.default_step_time);
  /* The CPU runtime: no asynchronous progress, every bucket's latency is
   * exposed, one bucket wins. */
  o.dp_overlap = 0;
  assert_int_equal(plan_buckets_search_uniform(&m, &cl, &o, &c, &choice, &chosen, &err), 0);
  assert_int_equal(choice.buckets_per_stage[0], 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_price_by_hand),
      cmocka_unit_test(test_boundaries_equal_brute_force),
      cmocka_unit_test(test_uniform_candidates_equal_brute_force),
      cmocka_unit_test(test_interior_optimum),
      cmocka_unit_test(test_search_driven_by_the_simulator),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
