/* Partition refinement by simulation: on cases small enough to enumerate
 * every partition (8 layers on 4 stages, a heavy LM head), the refined
 * partition is the best of all partitions by simulated step time among
 * those that fit in memory, and it is never worse than the compute min-max
 * partition it starts from. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/refine.h"
#include "plan_test_util.h"

static void model_with_heavy_head(ModelConfig *m, int vocab) {
  model_config_defaults(m);
  m->vocab_size = vocab;
  m->hidden_size = 2048;
  m->num_layers = 8;
  m->num_heads = 16;
  m->num_kv_heads = 16;
  m->intermediate_size = 8192;
}

static PlanResult simulate(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o, PlanConfig *c,
                           int gpus) {
  Error err = {0, ""};
  PlanResult r;
  int rc = plan_config_finish(c, m, cl, gpus, &err);
  if (!rc) rc = plan_simulate(m, cl, o, c, NULL, NULL, &r, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  return r;
}

/* The best fitting partition of 8 layers on 4 stages by brute force: every
 * composition into parts >= 1. *best_peak: its peak memory; *lowest_below:
 * the highest peak among partitions with a lower peak than it (0: none). */
static double brute_force(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o, const PlanConfig *c,
                          int gpus, int best_layers[4], double *best_peak, double *lowest_below, int *fitting) {
  double best = INFINITY;
  *fitting = 0;
  double peaks[64];
  int n = 0;
  for (int a = 1; a <= 5; a++)
    for (int b = 1; a + b <= 6; b++)
      for (int d = 1; a + b + d <= 7; d++) {
        PlanConfig p = *c;
        p.num_given_layers = 4;
        p.layers_per_stage[0] = a, p.layers_per_stage[1] = b, p.layers_per_stage[2] = d;
        p.layers_per_stage[3] = 8 - a - b - d;
        PlanResult t = simulate(m, cl, o, &p, gpus);
        peaks[n++] = t.peak_memory;
        if (t.fits) {
          (*fitting)++;
          if (t.step_time < best) {
            best = t.step_time;
            *best_peak = t.peak_memory;
            memcpy(best_layers, p.layers_per_stage, 4 * sizeof *best_layers);
          }
        }
        plan_result_free(&t);
      }
  *lowest_below = 0;
  for (int i = 0; i < n; i++)
    if (peaks[i] < *best_peak * (1 - 1e-9) && peaks[i] > *lowest_below) *lowest_below = peaks[i];
  return best;
}

typedef struct Case {
  const char *name;
  int vocab, dp, mbs, global_batch;
} Case;

/* Refines the min-max partition of c and checks it against brute force. */
static int check_case(const char *name, const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o,
                      PlanConfig c, int gpus, double *best_peak, double *lowest_below) {
  PlanResult r = simulate(m, cl, o, &c, gpus);
  int best_layers[4] = {0}, fitting;
  double best = brute_force(m, cl, o, &c, gpus, best_layers, best_peak, lowest_below, &fitting);
  PlanRefineStats st;
  Error err = {0, ""};
  assert_int_equal(plan_partition_refine(&r, m, cl, o, &st, &err), 0);
  print_message("%-40s min-max [%d %d %d %d] %.4f s%s -> refined [%d %d %d %d] %.4f s (%d moves, %ld sims); "
                "best of %d fitting [%d %d %d %d] %.4f s\n",
                name, st.start_layers[0], st.start_layers[1], st.start_layers[2], st.start_layers[3],
                st.start_step_time, st.start_fits ? "" : " (over memory)", r.cfg.layers_per_stage[0],
                r.cfg.layers_per_stage[1], r.cfg.layers_per_stage[2], r.cfg.layers_per_stage[3], r.step_time, st.moves,
                st.simulated, fitting, best_layers[0], best_layers[1], best_layers[2], best_layers[3], best);
  assert_true(fitting > 0);
  assert_true(r.fits);
  assert_true(fabs(r.step_time - best) <= 1e-9 * best);
  if (st.start_fits) assert_true(r.step_time <= st.start_step_time);
  int improved = !st.start_fits || r.step_time < st.start_step_time * (1 - 1e-6);
  plan_result_free(&r);
  return improved;
}

static void test_refined_equals_best_of_all(void **state) {
  (void)state;
  static const Case cases[] = {
      {"vocab 128k, 8 micro-batches", 131072, 1, 1, 8},
      {"vocab 256k, 4 micro-batches", 262144, 1, 1, 4},
      {"vocab 256k, DP2, 16 micro-batches", 262144, 2, 1, 32},
      {"vocab 64k, mbs 2, 8 micro-batches", 65536, 1, 2, 16},
  };
  ClusterSpec cl;
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  PlanOptions o;
  plan_options_default(&o);
  int improved = 0, memory_bound = 0;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const Case *cs = &cases[k];
    ModelConfig m;
    model_with_heavy_head(&m, cs->vocab);
    PlanConfig c;
    plan_config_init(&c, 4096, cs->global_batch, cs->mbs);
    c.par.pp = 4;
    c.par.dp = cs->dp;
    double peak, below;
    improved |= check_case(cs->name, &m, &cl, &o, c, 4 * cs->dp, &peak, &below);
    /* Again with the memory just below the unconstrained best's peak, so
     * memory decides which partition wins. */
    if (below > 0) {
      ClusterSpec tight = cl;
      tight.memory_capacity = 0.5 * (below + peak);
      char name[96];
      snprintf(name, sizeof name, "%s, %.1f GiB", cs->name, tight.memory_capacity / 1073741824.0);
      double p2, b2;
      improved |= check_case(name, &m, &tight, &o, c, 4 * cs->dp, &p2, &b2);
      memory_bound++;
    }
  }
  /* The refinement is not idle on these cases, and memory bound some. */
  assert_true(improved);
  assert_true(memory_bound > 0);
  cluster_spec_free(&cl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refined_equals_best_of_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
