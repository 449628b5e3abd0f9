/* The order search (plan/order.h) and the pricing of a split backward:
 *  - on DGX-H100 at tp 1, a dense 8-layer model on 4 stages prices zb-h1
 *    faster than 1f1b with a smaller bubble (its W fills the cool-down),
 *    and the same program with the weight share priced 0 (tp 2, which the
 *    runtime does not split) gains nothing;
 *  - the search's choice is never slower than any plain schedule, beats
 *    them here, and with memory set between the plain schedules' peak and
 *    a deeper warm-up's it stays within memory (a search that ignored
 *    memory would take the deeper warm-up);
 *  - every warm-up vector it may reach is no better than what it chose
 *    among its one-step neighbours (a local optimum), and the line it
 *    prints names the schedules and the choice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/memory.h"
#include "plan/order.h"
#include "plan_test_util.h"

static void dense_model(ModelConfig *m) {
  model_config_defaults(m);
  m->vocab_size = 32768;
  m->hidden_size = 2048;
  m->num_layers = 8;
  m->num_heads = 16;
  m->num_kv_heads = 16;
  m->intermediate_size = 8192;
}

static PlanResult simulate(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o, PlanConfig c,
                           SchedScheduleKind kind, const int *warmup) {
  Error err = {0, ""};
  PlanResult r;
  c.schedule = kind;
  c.schedule_given = 1;
  if (warmup) {
    c.warmup_set = c.par.pp;
    memcpy(c.warmup, warmup, (size_t)c.par.pp * sizeof *warmup);
  }
  int rc = plan_config_finish(&c, m, cl, c.par.pp * c.par.tp, &err);
  if (!rc) rc = plan_simulate(m, cl, o, &c, NULL, NULL, &r, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, 0);
  return r;
}

static PlanConfig base_config(int tp) {
  PlanConfig c;
  plan_config_init(&c, 4096, 8, 1);
  c.par.pp = 4;
  c.par.tp = tp;
  return c;
}

static void test_zb_pricing(void **state) {
  (void)state;
  ClusterSpec cl;
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  PlanOptions o;
  plan_options_default(&o);
  ModelConfig m;
  dense_model(&m);
  PlanResult one = simulate(&m, &cl, &o, base_config(1), SCHED_SCHEDULE_1F1B, NULL);
  PlanResult zb = simulate(&m, &cl, &o, base_config(1), SCHED_SCHEDULE_ZB_H1, NULL);
  print_message("tp 1: 1f1b %.4f s (bubble %.1f%%), zb-h1 %.4f s (bubble %.1f%%)\n", one.step_time,
                100 * one.bubble_fraction, zb.step_time, 100 * zb.bubble_fraction);
  assert_true(zb.step_time < one.step_time * 0.99);
  assert_true(zb.bubble_fraction < one.bubble_fraction);
  /* zb-h1 keeps 1F1B's micro-batches in flight and, from a B to its W, the
   * output gradients W multiplies with: rank 0 peaks at its first B with
   * p micro-batches' activations and one micro-batch's kept gradients of
   * its two blocks (plan_layer_split_keep_bytes). */
  double keep = 2 * plan_layer_split_keep_bytes(&m, &zb.cfg, 0);
  print_message("peak 1f1b %.3f GiB, zb-h1 %.3f GiB, kept gradients per stage %.3f GiB\n",
                one.peak_memory / 1073741824.0, zb.peak_memory / 1073741824.0, keep / 1073741824.0);
  assert_true(keep > 0);
  assert_true(fabs(zb.peak_memory - one.peak_memory - keep) <= 1e-9 * one.peak_memory);
  plan_result_free(&one);
  plan_result_free(&zb);
  /* tp 2: the runtime does not split, so W is priced 0 and B carries all. */
  one = simulate(&m, &cl, &o, base_config(2), SCHED_SCHEDULE_1F1B, NULL);
  zb = simulate(&m, &cl, &o, base_config(2), SCHED_SCHEDULE_ZB_H1, NULL);
  print_message("tp 2: 1f1b %.4f s, zb-h1 %.4f s\n", one.step_time, zb.step_time);
  assert_true(zb.step_time >= one.step_time * (1 - 1e-6));
  plan_result_free(&one);
  plan_result_free(&zb);
  cluster_spec_free(&cl);
}

static void test_order_search(void **state) {
  (void)state;
  ClusterSpec cl;
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  PlanOptions o;
  plan_options_default(&o);
  ModelConfig m;
  dense_model(&m);
  PlanConfig c = base_config(1);
  PlanResult plain[3];
  const SchedScheduleKind kinds[3] = {SCHED_SCHEDULE_GPIPE, SCHED_SCHEDULE_1F1B, SCHED_SCHEDULE_ZB_H1};
  double best_plain = INFINITY, plain_peak = 0;
  for (int k = 0; k < 3; k++) {
    plain[k] = simulate(&m, &cl, &o, c, kinds[k], NULL);
    if (plain[k].step_time < best_plain) best_plain = plain[k].step_time;
    if (kinds[k] != SCHED_SCHEDULE_GPIPE && plain[k].peak_memory > plain_peak) plain_peak = plain[k].peak_memory;
  }
  PlanResult r = simulate(&m, &cl, &o, c, SCHED_SCHEDULE_1F1B, NULL);
  PlanOrderStats st;
  Error err = {0, ""};
  assert_int_equal(plan_order_search(&r, &m, &cl, &o, 0, &st, &err), 0);
  print_message("search: %s, warm-up set %d, %.4f s (best plain %.4f s), %d moves, %ld simulations, peak %.1f GiB\n",
                sched_schedule_name(r.cfg.schedule), r.cfg.warmup_set, r.step_time, best_plain, st.moves, st.simulated,
                r.peak_memory / 1073741824.0);
  assert_true(r.fits);
  assert_true(r.step_time <= best_plain * (1 + 1e-12));
  assert_true(r.step_time < best_plain * (1 - 1e-4)); /* deeper warm-up of zb-h1 pays here */
  assert_int_equal(r.cfg.schedule, SCHED_SCHEDULE_ZB_H1);
  assert_true(r.cfg.warmup_set == 4 && st.moves > 0);
  double deep_peak = r.peak_memory;
  assert_true(deep_peak > plain_peak);
  /* A local optimum: no one-step neighbour of its depths is faster (one
   * rank, or ranks 0..q together). */
  for (int mv = 0; mv < 8; mv++)
    for (int d = -1; d <= 1; d += 2) {
      int w[4], q = mv % 4;
      memcpy(w, r.cfg.warmup, sizeof w);
      for (int j = mv >= 4 ? 0 : q; j <= q; j++) w[j] += d;
      int ok = w[q] >= 0 && w[q] <= c.global_batch_size;
      for (int k = 0; ok && k + 1 < 4; k++) ok = w[k + 1] <= w[k];
      if (!ok) continue;
      PlanResult t = simulate(&m, &cl, &o, c, SCHED_SCHEDULE_ZB_H1, w);
      assert_true(t.step_time >= r.step_time * (1 - 1e-9) || !t.fits);
      plan_result_free(&t);
    }
  /* The explanation names the schedules and the choice. */
  char line[1024] = "";
  FILE *f = tmpfile();
  plan_order_explain(&st, &r, f);
  rewind(f);
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  print_message("%s", line);
  assert_non_null(strstr(line, "pipeline order by simulation: 1f1b "));
  assert_non_null(strstr(line, "chosen zb-h1 with warm-up"));
  plan_result_free(&r);
  /* Memory between the plain schedules' peak and the deeper warm-up's: the
   * search must stay within it. */
  ClusterSpec tight = cl;
  tight.memory_capacity = 0.5 * (plain_peak + deep_peak);
  r = simulate(&m, &tight, &o, c, SCHED_SCHEDULE_1F1B, NULL);
  assert_int_equal(plan_order_search(&r, &m, &tight, &o, 0, &st, &err), 0);
  print_message("at %.1f GiB: %s, %.4f s, peak %.1f GiB\n", tight.memory_capacity / 1073741824.0,
                sched_schedule_name(r.cfg.schedule), r.step_time, r.peak_memory / 1073741824.0);
  assert_true(r.fits);
  assert_true(r.peak_memory <= tight.memory_capacity);
  plan_result_free(&r);
  for (int k = 0; k < 3; k++) plan_result_free(&plain[k]);
  cluster_spec_free(&cl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zb_pricing),
      cmocka_unit_test(test_order_search),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
