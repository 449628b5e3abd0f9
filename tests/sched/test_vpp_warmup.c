/* Warm-up depths of the interleaved order (SchedConfig.warmup with
 * schedule interleaved):
 *  - every accepted depth vector of small pipelines builds a program the
 *    checker passes (each (micro-batch, chunk) forward and backward once,
 *    complete under blocking sends), with the depths it was given;
 *  - the first two bounds of the validation (last rank >= (v-1)p, depths not
 *    growing along the pipeline) are exact: the same order built here
 *    without validation cannot run wherever they refuse (sched_lower
 *    names the blocked computes), and with at most 2p micro-batches so is
 *    the third (rank 0 at most 2p deeper than the last rank);
 *  - refusals name the rank, its depth and the bound;
 *  - depths equal to Megatron-Core's give its order exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/builders.h"
#include "sched/check.h"

static SchedConfig vpp_cfg(int p, int v, int m, const int *w) {
  SchedConfig c;
  memset(&c, 0, sizeof c);
  c.schedule = SCHED_SCHEDULE_INTERLEAVED;
  c.pp = p;
  c.vpp = v;
  c.microbatches = m;
  if (w) {
    c.warmup_set = p;
    memcpy(c.warmup, w, (size_t)p * sizeof *w);
  }
  return c;
}

/* The interleaved order with depths w, written out here independently of
 * the builder (groups of p micro-batches, chunks forward in order and
 * backward in reverse), without any validation. */
static void raw_order(int p, int v, int m, const int *w, SchedComputeOrder *o) {
  o->num_ranks = p;
  o->items = calloc((size_t)p, sizeof *o->items);
  o->counts = calloc((size_t)p, sizeof *o->counts);
  assert_non_null(o->items);
  assert_non_null(o->counts);
  int total = m * v;
  for (int r = 0; r < p; r++) {
    o->items[r] = calloc((size_t)2 * total, sizeof *o->items[r]);
    assert_non_null(o->items[r]);
    int warm = w[r] < total ? w[r] : total, nf = 0, nb = 0;
    while (nf < total || nb < total) {
      int fwd = nf < total && (nf < warm || nf - warm <= nb);
      int k = fwd ? nf++ : nb++;
      int group = k / (p * v), within = k % (p * v), c = within / p;
      SchedComputeItem *it = &o->items[r][o->counts[r]++];
      it->kind = fwd ? SCHED_FWD : SCHED_BWD;
      it->microbatch = group * p + within % p;
      it->chunk = fwd ? c : v - 1 - c;
    }
  }
}

/* Which bound the validation's conditions break (0 none, 1 last rank too
 * shallow, 2 growing, 3 rank 0 too deep), computed from the depths. */
static int broken_bound(int p, int v, int m, const int *w) {
  int e[SCHED_MAX_WARMUP_RANKS];
  for (int r = 0; r < p; r++) e[r] = w[r] < m * v - 1 ? w[r] : m * v - 1;
  if (e[p - 1] < (v - 1) * p) return 1;
  for (int r = 0; r + 1 < p; r++)
    if (e[r + 1] > e[r]) return 2;
  return e[0] > e[p - 1] + 2 * p ? 3 : 0;
}

static void test_exhaustive_small(void **state) {
  (void)state;
  static const int shapes[][3] = {{2, 2, 2}, {2, 2, 4}, {2, 3, 4}, {2, 2, 6}, {3, 2, 3}, {3, 2, 6}, {3, 3, 3}, {4, 2, 4}};
  int accepted = 0, refused = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    int p = shapes[s][0], v = shapes[s][1], m = shapes[s][2], top = m * v + 1, n = 1;
    for (int r = 0; r < p; r++) n *= top + 1;
    for (int code = 0; code < n; code++) {
      int w[SCHED_MAX_WARMUP_RANKS];
      for (int r = 0, x = code; r < p; r++, x /= top + 1) w[r] = x % (top + 1);
      SchedConfig c = vpp_cfg(p, v, m, w);
      Error err = {0, ""};
      int bound = broken_bound(p, v, m, w);
      int rc = sched_config_validate(&c, &err);
      assert_int_equal(rc != ERR_OK, bound != 0);
      SchedProgram *prog = NULL;
      if (!rc) {
        accepted++;
        rc = sched_build(&c, &prog, &err);
        if (rc) print_error("p%d v%d m%d w %d %d: %s\n", p, v, m, w[0], w[1], err.msg);
        assert_int_equal(rc, ERR_OK);
        rc = sched_check(prog, &err);
        if (rc) print_error("p%d v%d m%d: %s\n", p, v, m, err.msg);
        assert_int_equal(rc, ERR_OK);
        for (int r = 0; r < p; r++) {
          int want = w[r] < m * v ? w[r] : m * v;
          assert_int_equal(sched_warmup_forwards(&c, r), want);
        }
        sched_program_free(prog);
        continue;
      }
      refused++;
      /* Bounds 1 and 2 always, bound 3 with m <= 2p: the order itself
       * cannot run. */
      if (bound == 3 && m > 2 * p) continue;
      SchedComputeOrder o;
      raw_order(p, v, m, w, &o);
      SchedConfig plain = vpp_cfg(p, v, m, NULL);
      Error lerr = {0, ""};
      rc = sched_lower(&plain, &o, &prog, &lerr);
      sched_compute_order_free(&o);
      if (!rc) {
        print_error("p%d v%d m%d bound %d: refused depths run\n", p, v, m, bound);
        sched_program_free(prog);
      }
      assert_int_not_equal(rc, ERR_OK);
    }
  }
  print_message("interleaved warm-up depths: %d accepted and checked, %d refused\n", accepted, refused);
  assert_true(accepted > 50 && refused > 50);
}

/* Explicit depths equal to the default give the same compute order. */
static void test_default_depths_same_order(void **state) {
  (void)state;
  for (int p = 2; p <= 4; p++)
    for (int v = 2; v <= 3; v++) {
      int m = 2 * p, w[SCHED_MAX_WARMUP_RANKS];
      for (int r = 0; r < p; r++) w[r] = 2 * (p - r - 1) + (v - 1) * p;
      SchedConfig a = vpp_cfg(p, v, m, NULL), b = vpp_cfg(p, v, m, w);
      SchedComputeOrder oa, ob;
      Error err = {0, ""};
      assert_int_equal(sched_compute_order(&a, &oa, &err), ERR_OK);
      assert_int_equal(sched_compute_order(&b, &ob, &err), ERR_OK);
      for (int r = 0; r < p; r++) {
        assert_int_equal(oa.counts[r], ob.counts[r]);
        assert_memory_equal(oa.items[r], ob.items[r], (size_t)oa.counts[r] * sizeof *oa.items[r]);
      }
      sched_compute_order_free(&oa);
      sched_compute_order_free(&ob);
    }
}

static void expect_refused(int p, int v, int m, const int *w, const char *a, const char *b) {
  SchedConfig c = vpp_cfg(p, v, m, w);
  Error err = {0, ""};
  assert_int_equal(sched_config_validate(&c, &err), ERR_CONFIG);
  if (!strstr(err.msg, a) || !strstr(err.msg, b)) print_error("message: %s\n", err.msg);
  assert_non_null(strstr(err.msg, a));
  assert_non_null(strstr(err.msg, b));
  SchedProgram *prog = NULL;
  assert_int_not_equal(sched_build(&c, &prog, &err), ERR_OK);
  assert_null(prog);
}

static void test_refusals_name_rank_depth_bound(void **state) {
  (void)state;
  /* pp 2, vpp 2, 4 micro-batches: Megatron-Core's depths are 4, 2. */
  expect_refused(2, 2, 4, (const int[]){4, 1}, "rank 1 (the last) is 1", "bound (vpp-1)*pp = 2");
  expect_refused(2, 2, 4, (const int[]){2, 3}, "rank 0 is 2", "below the bound 3 (rank 1's depth)");
  expect_refused(2, 2, 4, (const int[]){7, 2}, "rank 0 is 7", "above the bound 6 (rank 1's depth 2 + 2*pp)");
  int wrong_count[2] = {4, 2};
  SchedConfig c = vpp_cfg(2, 2, 4, wrong_count);
  c.warmup_set = 1;
  Error err = {0, ""};
  assert_int_equal(sched_config_validate(&c, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "1 warm-up depths given for pp 2"));
  /* gpipe still has none to set. */
  c = vpp_cfg(2, 1, 4, wrong_count);
  c.schedule = SCHED_SCHEDULE_GPIPE;
  assert_int_equal(sched_config_validate(&c, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "only 1f1b, zb-h1 and interleaved"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exhaustive_small),
      cmocka_unit_test(test_default_depths_same_order),
      cmocka_unit_test(test_refusals_name_rank_depth_bound),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
