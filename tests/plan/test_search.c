/* The search: on a space small enough to simulate every configuration, its
 * best equals the brute-force best (so no pruning rule dropped a winner),
 * it lists only configurations that fit, best first, each reproducible by
 * simulating it alone, and it counts what it considered and pruned. The
 * coupled (unfolded) restriction is honoured, an impossible request says
 * why, and the full Mixtral-8x22B search over 1,024 GPUs prunes nearly
 * everything before simulating. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "plan/search.h"
#include "plan_test_util.h"

static ModelConfig mixtral;
static ClusterSpec h100;

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

static void small_space(PlanSearchSpace *sp) {
  plan_search_space_default(sp, 16, 4096, 32);
  sp->max_cp = 1;
  sp->max_vpp = 2;
  sp->micro_batch_sizes[0] = 1;
  sp->micro_batch_sizes[1] = 2;
  sp->num_micro_batch_sizes = 2;
  sp->allow_recompute[PLAN_RECOMPUTE_SELECTIVE] = 0;
}

/* Every configuration of small_space, simulated; returns the best fitting
 * step time and counts the valid and the fitting ones. */
static double brute_force(const PlanOptions *o, long *valid, long *fitting) {
  double best = INFINITY;
  *valid = *fitting = 0;
  const int G = 16;
  for (int pp = 1; pp <= G; pp *= 2)
    for (int tp = 1; tp * pp <= G && tp <= h100.devices_per_node; tp *= 2) /* TP stays in a node */
      for (int ep = 1; ep <= 8; ep *= 2)
        for (int etp = 1; etp <= 8; etp *= 2) {
          if ((G / pp) % (ep * etp)) continue;
          for (int vpp = 1; vpp <= 2; vpp++)
            for (int mbs = 1; mbs <= 2; mbs++)
              for (int rc = 0; rc < PLAN_NUM_RECOMPUTE; rc += 2)
                for (int dist = 0; dist < 2; dist++) {
                  PlanConfig c;
                  plan_config_init(&c, 4096, 32, mbs);
                  c.par.tp = tp, c.par.pp = pp, c.par.vpp = vpp, c.par.ep = ep, c.par.etp = etp, c.par.dp = 0;
                  c.recompute = (PlanRecompute)rc;
                  c.distributed_optimizer = dist;
                  if (vpp > 1 && pp == 1) continue;
                  if (plan_config_finish(&c, &mixtral, &h100, G, NULL)) continue;
                  (*valid)++;
                  PlanResult r;
                  Error err = {0, ""};
                  int e = plan_simulate(&mixtral, &h100, o, &c, NULL, NULL, &r, &err);
                  if (e) print_error("%s\n", err.msg);
                  assert_int_equal(e, 0);
                  if (r.fits) {
                    (*fitting)++;
                    if (r.step_time < best) best = r.step_time;
                  }
                  plan_result_free(&r);
                }
        }
  return best;
}

static void test_matches_brute_force(void **state) {
  (void)state;
  PlanOptions o;
  plan_options_default(&o);
  PlanSearchSpace sp;
  small_space(&sp);
  PlanSearchResult res;
  Error err = {0, ""};
  int rc = plan_search(&mixtral, &h100, &o, &sp, 5, &res, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  long valid, fitting;
  double best = brute_force(&o, &valid, &fitting);
  assert_true(fitting > 0 && fitting < valid); /* memory matters in this space */
  assert_int_equal(res.stats.considered, valid);
  assert_true(fabs(res.top[0].step_time - best) <= 1e-12 * best);
  const PlanSearchStats *s = &res.stats;
  assert_int_equal(s->considered,
                   s->pruned_memory_lb + s->pruned_memory + s->pruned_dominated + s->pruned_bound + s->simulated);
  assert_true(res.num_top == 5);
  for (int i = 0; i < res.num_top; i++) {
    const PlanResult *r = &res.top[i];
    assert_true(r->fits);
    assert_true(r->peak_memory <= h100.memory_capacity);
    if (i) assert_true(r->step_time >= res.top[i - 1].step_time);
    /* Simulating the listed configuration alone gives the same prediction. */
    PlanConfig c = r->cfg;
    PlanResult again;
    assert_int_equal(plan_simulate(&mixtral, &h100, &o, &c, NULL, NULL, &again, NULL), 0);
    assert_true(fabs(again.step_time - r->step_time) <= 1e-12 * r->step_time);
    assert_true(again.fits);
    plan_result_free(&again);
  }
  plan_search_result_free(&res);
}

static void test_coupled_only_and_impossible(void **state) {
  (void)state;
  PlanOptions o;
  plan_options_default(&o);
  PlanSearchSpace sp;
  small_space(&sp);
  sp.allow_folding = 0;
  PlanSearchResult res;
  assert_int_equal(plan_search(&mixtral, &h100, &o, &sp, 3, &res, NULL), 0);
  for (int i = 0; i < res.num_top; i++) assert_false(plan_config_is_folded(&res.top[i].cfg));
  plan_search_result_free(&res);

  /* Mixtral-8x7B cannot train on two 80 GB GPUs. */
  plan_search_space_default(&sp, 2, 4096, 32);
  Error err = {0, ""};
  assert_int_not_equal(plan_search(&mixtral, &h100, &o, &sp, 3, &res, &err), 0);
  assert_non_null(strstr(err.msg, "no configuration fits"));
  assert_int_equal(res.num_top, 0);
}

static void test_mixtral_8x22b_on_1024(void **state) {
  (void)state;
  ModelConfig m;
  assert_int_equal(plan_test_load_model(&m, "mixtral-8x22b"), 0);
  PlanOptions o;
  plan_options_default(&o);
  PlanSearchSpace sp;
  plan_search_space_default(&sp, 1024, 4096, 1024);
  PlanSearchResult res;
  Error err = {0, ""};
  int rc = plan_search(&m, &h100, &o, &sp, 5, &res, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(res.num_top, 5);
  assert_true(res.stats.considered > 10000);
  assert_true(res.stats.simulated < res.stats.considered / 100);
  for (int i = 0; i < res.num_top; i++) assert_true(res.top[i].fits && res.top[i].mfu > 0.2);
  plan_search_result_free(&res);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matches_brute_force),
      cmocka_unit_test(test_coupled_only_and_impossible),
      cmocka_unit_test(test_mixtral_8x22b_on_1024),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
