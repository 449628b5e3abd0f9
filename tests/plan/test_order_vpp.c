/* The order search on an interleaved pipeline (plan/order.h): warm-up
 * depths of the interleaved order, priced by the simulator and the memory
 * model (plan/memory.c walks the order, so each extra warm-up forward keeps
 * one more chunk's activations in flight):
 *  - pricing: depths equal to Megatron-Core's price as its default; rank 0's
 *    chunks in flight are its depth + 1 and its activations grow with it; a
 *    rank 0 too shallow to cover the fill costs time;
 *  - on this cost model (even stages, DGX-H100) no depth is faster than
 *    Megatron-Core's, which the search keeps; rank 0 can run two forwards
 *    fewer at the same step time, so with memory between the two peaks the
 *    search chooses shallower depths that fit (a fitting candidate beats
 *    one that does not) and loses no time. */
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

static PlanConfig vpp_config(void) {
  PlanConfig c;
  plan_config_init(&c, 4096, 8, 1);
  c.par.pp = 4;
  c.par.vpp = 2;
  c.schedule = SCHED_SCHEDULE_INTERLEAVED;
  c.schedule_given = 1;
  return c;
}

static PlanResult simulate(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o, PlanConfig c,
                           const int *warmup) {
  Error err = {0, ""};
  PlanResult r;
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

/* Megatron-Core's depths for pp 4, vpp 2: 2(p-r-1) + (v-1)p. */
static const int megatron[4] = {10, 8, 6, 4};

/* Each warm-up forward of rank 0 is one more chunk in flight: the memory
 * model's count and peak follow the depth; a shallower rank 0 costs time
 * once it no longer covers the pipeline's fill. */
static void test_pricing(void **state) {
  (void)state;
  ClusterSpec cl;
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  PlanOptions o;
  plan_options_default(&o);
  ModelConfig m;
  dense_model(&m);
  PlanResult def = simulate(&m, &cl, &o, vpp_config(), NULL);
  PlanResult same = simulate(&m, &cl, &o, vpp_config(), megatron);
  assert_true(same.step_time == def.step_time && same.peak_memory == def.peak_memory);
  assert_int_equal(def.memory[0].peak_inflight, 11); /* 10 warm-up forwards, then the steady phase's one more */
  double prev = 0;
  static const int deep[][4] = {{8, 7, 6, 4}, {9, 8, 6, 4}, {10, 8, 6, 4}, {12, 10, 8, 6}};
  for (int i = 0; i < 4; i++) {
    PlanResult t = simulate(&m, &cl, &o, vpp_config(), deep[i]);
    print_message("warm-up %d %d %d %d: %.5f s, peak %.2f GiB, rank 0 %d chunks in flight\n", deep[i][0], deep[i][1],
                  deep[i][2], deep[i][3], t.step_time, t.peak_memory / 1073741824.0, t.memory[0].peak_inflight);
    assert_int_equal(t.memory[0].peak_inflight, deep[i][0] + 1);
    assert_true(t.memory[0].activations > prev);
    prev = t.memory[0].activations;
    plan_result_free(&t);
  }
  static const int shallow[4] = {6, 6, 5, 4};
  PlanResult t = simulate(&m, &cl, &o, vpp_config(), shallow);
  print_message("warm-up 6 6 5 4: %.5f s (default %.5f s)\n", t.step_time, def.step_time);
  assert_true(t.step_time > def.step_time * 1.05);
  assert_true(t.peak_memory < def.peak_memory);
  plan_result_free(&t);
  plan_result_free(&same);
  plan_result_free(&def);
  cluster_spec_free(&cl);
}

/* With ample memory nothing beats Megatron-Core's depths here (the search
 * keeps them); with memory just below their peak a shallower rank 0 fits at
 * the same step time and the search takes it, within memory. */
static void test_search(void **state) {
  (void)state;
  ClusterSpec cl;
  assert_int_equal(plan_test_load_cluster(&cl, "dgx-h100"), 0);
  PlanOptions o;
  plan_options_default(&o);
  ModelConfig m;
  dense_model(&m);
  PlanResult def = simulate(&m, &cl, &o, vpp_config(), NULL);
  PlanResult r = simulate(&m, &cl, &o, vpp_config(), NULL);
  PlanOrderStats st;
  Error err = {0, ""};
  assert_int_equal(plan_order_search(&r, &m, &cl, &o, 0, &st, &err), 0);
  print_message("ample memory: %ld simulations, %d moves, %.5f s\n", st.simulated, st.moves, r.step_time);
  assert_true(st.simulated > 1);
  assert_int_equal(st.num_kinds, 1);
  assert_int_equal(r.cfg.schedule, SCHED_SCHEDULE_INTERLEAVED);
  assert_true(r.step_time <= def.step_time * (1 + 1e-12));
  assert_true(!st.moves || r.step_time < def.step_time * (1 - 1e-9));
  plan_result_free(&r);

  static const int shallow[4] = {8, 7, 6, 4};
  PlanResult lean = simulate(&m, &cl, &o, vpp_config(), shallow);
  ClusterSpec tight = cl;
  tight.memory_capacity = 0.5 * (lean.peak_memory + def.peak_memory);
  r = simulate(&m, &tight, &o, vpp_config(), NULL);
  assert_false(r.fits);
  assert_int_equal(plan_order_search(&r, &m, &tight, &o, 0, &st, &err), 0);
  print_message("at %.2f GiB: warm-up %d %d %d %d, %.5f s (default %.5f s), peak %.2f GiB, %d moves\n",
                tight.memory_capacity / 1073741824.0, r.cfg.warmup[0], r.cfg.warmup[1], r.cfg.warmup[2],
                r.cfg.warmup[3], r.step_time, def.step_time, r.peak_memory / 1073741824.0, st.moves);
  assert_true(r.fits && r.peak_memory <= tight.memory_capacity);
  assert_int_equal(r.cfg.schedule, SCHED_SCHEDULE_INTERLEAVED);
  assert_int_equal(r.cfg.warmup_set, 4);
  assert_true(st.moves > 0 && r.cfg.warmup[0] < megatron[0]);
  assert_true(r.step_time <= def.step_time * (1 + 1e-9)); /* the fill still covered: no time lost */
  /* The explanation names the choice against Megatron-Core's depths. */
  char line[1024] = "";
  FILE *f = tmpfile();
  plan_order_explain(&st, &r, f);
  rewind(f);
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  print_message("%s", line);
  assert_non_null(strstr(line, "pipeline order by simulation: interleaved "));
  assert_non_null(strstr(line, "(does not fit)"));
  assert_non_null(strstr(line, "chosen interleaved with warm-up"));
  assert_non_null(strstr(line, "(Megatron-Core's is 10 8 6 4)"));
  plan_result_free(&r);
  plan_result_free(&lean);
  plan_result_free(&def);
  cluster_spec_free(&cl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pricing),
      cmocka_unit_test(test_search),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
