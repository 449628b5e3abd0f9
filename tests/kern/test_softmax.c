/* Router math: softmax and sigmoid (forward vs double, backward by finite
 * differences), log-sum-exp at extreme values, and top-k with its fixed
 * tie rule against a brute-force reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/kern_test_util.h"
#include "kern/softmax.h"

static void softmax_reference(double *p, const float *z, int N, int E) {
  for (int n = 0; n < N; n++) {
    double m = -INFINITY, s = 0.0;
    for (int e = 0; e < E; e++) m = z[n * E + e] > m ? z[n * E + e] : m;
    for (int e = 0; e < E; e++) s += exp(z[n * E + e] - m);
    for (int e = 0; e < E; e++) p[n * E + e] = exp(z[n * E + e] - m) / s;
  }
}

typedef struct RowCase {
  int N, E;
  float *z, *out, *r;
} RowCase;

static double softmax_loss(void *ctx) {
  RowCase *c = ctx;
  softmax_forward(c->out, c->z, c->N, c->E);
  return test_dot_loss(c->out, c->r, (size_t)c->N * c->E);
}

static double sigmoid_loss(void *ctx) {
  RowCase *c = ctx;
  sigmoid_forward(c->out, c->z, c->N * c->E);
  return test_dot_loss(c->out, c->r, (size_t)c->N * c->E);
}

static void test_softmax_forward(void **state) {
  (void)state;
  /* small (serial) and large (parallel); rows shifted far from 0 */
  const int sizes[2][2] = {{5, 8}, {700, 64}};
  for (int s = 0; s < 2; s++) {
    int N = sizes[s][0], E = sizes[s][1];
    float *z = test_alloc((size_t)N * E), *p = test_alloc((size_t)N * E);
    double *ref = test_alloc_d((size_t)N * E);
    test_fill_normal(z, (size_t)N * E, 1 + s, 4.0f);
    for (int e = 0; e < E; e++) z[e] += 1000.0f, z[E + e] -= 1000.0f;
    softmax_forward(p, z, N, E);
    softmax_reference(ref, z, N, E);
    double err = test_rel_err(p, ref, (size_t)N * E, 1e-3);
    print_message("softmax N=%d E=%d rel err %.3g\n", N, E, err);
    assert_true(err < 1e-5);
    for (int n = 0; n < N; n++) {
      double sum = 0.0;
      for (int e = 0; e < E; e++) sum += p[n * E + e];
      assert_true(fabs(sum - 1.0) < 1e-5);
    }
    free(z), free(p), free(ref);
  }
}

static void test_softmax_backward_gradcheck(void **state) {
  (void)state;
  RowCase c = {.N = 4, .E = 6};
  size_t n = (size_t)c.N * c.E;
  c.z = test_alloc(n), c.out = test_alloc(n), c.r = test_alloc(n);
  test_fill_normal(c.z, n, 10, 2.0f);
  test_fill_normal(c.r, n, 11, 1.0f);
  float *p = test_alloc(n), *dz = test_alloc(n);
  softmax_forward(p, c.z, c.N, c.E);
  softmax_backward(dz, c.r, p, c.N, c.E);
  double e = test_gradcheck(c.z, dz, n, softmax_loss, &c, 1e-2f, 1000);
  print_message("softmax gradcheck: %.3g\n", e);
  assert_true(e < 2e-3);
  free(c.z), free(c.out), free(c.r), free(p), free(dz);
}

static void test_sigmoid_forward_and_gradcheck(void **state) {
  (void)state;
  const int n = 40000; /* parallel path */
  float *z = test_alloc(n), *s = test_alloc(n);
  test_fill_normal(z, n, 20, 5.0f);
  z[0] = -200.0f, z[1] = 200.0f, z[2] = -INFINITY, z[3] = INFINITY, z[4] = 0.0f;
  sigmoid_forward(s, z, n);
  double worst = 0.0;
  for (int i = 0; i < n; i++) {
    double ref = 1.0 / (1.0 + exp(-(double)z[i]));
    double d = fabs(s[i] - ref);
    if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
  }
  assert_true(worst < 1e-6);
  assert_true(s[2] == 0.0f && s[3] == 1.0f && s[4] == 0.5f);

  RowCase c = {.N = 1, .E = 12};
  c.z = test_alloc(12), c.out = test_alloc(12), c.r = test_alloc(12);
  test_fill_normal(c.z, 12, 21, 2.0f);
  test_fill_normal(c.r, 12, 22, 1.0f);
  float *sv = test_alloc(12), *dz = test_alloc(12);
  sigmoid_forward(sv, c.z, 12);
  sigmoid_backward(dz, c.r, sv, 12);
  double e = test_gradcheck(c.z, dz, 12, sigmoid_loss, &c, 1e-2f, 1000);
  print_message("sigmoid gradcheck: %.3g\n", e);
  assert_true(e < 2e-3);
  free(z), free(s), free(c.z), free(c.out), free(c.r), free(sv), free(dz);
}

static void test_logsumexp(void **state) {
  (void)state;
  const int N = 6, E = 10;
  float z[60], lse[6];
  test_fill_normal(z, 60, 30, 3.0f);
  for (int e = 0; e < E; e++) {
    z[1 * E + e] += 5000.0f;                /* exp overflows without the shift */
    z[2 * E + e] -= 5000.0f;                /* ... or underflows */
    z[3 * E + e] = e == 4 ? 2.0f : -INFINITY; /* one finite entry */
    z[4 * E + e] = -INFINITY;               /* fully masked */
  }
  logsumexp_rows(lse, z, N, E);
  for (int n = 0; n < N; n++) {
    if (n == 4) {
      assert_true(lse[n] == -INFINITY);
      continue;
    }
    double m = -INFINITY, s = 0.0;
    for (int e = 0; e < E; e++) m = z[n * E + e] > m ? z[n * E + e] : m;
    for (int e = 0; e < E; e++) s += exp(z[n * E + e] - m);
    double ref = m + log(s);
    assert_true(fabs(lse[n] - ref) <= 1e-6 * fmax(1.0, fabs(ref)));
  }
  assert_true(fabsf(lse[3] - 2.0f) < 1e-6f);
}

/* Brute force: pick k times the first index of the largest value left. */
static void topk_reference(int *idx, const float *x, int E, int k) {
  int taken[256] = {0};
  for (int j = 0; j < k; j++) {
    int best = -1;
    for (int e = 0; e < E; e++)
      if (!taken[e] && (best < 0 || x[e] > x[best])) best = e;
    taken[best] = 1;
    idx[j] = best;
  }
}

static void test_topk_ties_take_lower_index(void **state) {
  (void)state;
  const float x[2 * 6] = {1, 3, 3, 2, 3, 0, /* ties at the top */
                          5, 5, 5, 5, 5, 5};
  int idx[2 * 4];
  float val[2 * 4];
  topk_rows(idx, val, x, 2, 6, 4);
  const int expected[8] = {1, 2, 4, 3, 0, 1, 2, 3};
  for (int i = 0; i < 8; i++) assert_int_equal(idx[i], expected[i]);
  assert_true(val[0] == 3.0f && val[3] == 2.0f && val[4] == 5.0f);
  /* val may be NULL; k == E is a full stable sort */
  int all[6];
  topk_rows(all, NULL, x, 1, 6, 6);
  const int sorted[6] = {1, 2, 4, 3, 0, 5};
  for (int i = 0; i < 6; i++) assert_int_equal(all[i], sorted[i]);
}

static void test_topk_matches_brute_force(void **state) {
  (void)state;
  const int N = 600, E = 64, k = 6; /* parallel path */
  float *x = test_alloc((size_t)N * E), *val = test_alloc((size_t)N * k);
  int *idx = calloc((size_t)N * k, sizeof *idx), ref[8];
  /* values on a coarse grid: many ties */
  for (int i = 0; i < N * E; i++) x[i] = (float)(rng_u64(40, 0, (uint64_t)i) % 7);
  topk_rows(idx, val, x, N, E, k);
  for (int n = 0; n < N; n++) {
    topk_reference(ref, x + (long)n * E, E, k);
    for (int j = 0; j < k; j++) {
      assert_int_equal(idx[n * k + j], ref[j]);
      assert_true(val[n * k + j] == x[(long)n * E + ref[j]]);
    }
  }
  free(x), free(val), free(idx);
}

static void test_topk_nan_ranks_last(void **state) {
  (void)state;
  const float x[5] = {NAN, 1.0f, NAN, -1.0f, 0.5f};
  int idx[4];
  topk_rows(idx, NULL, x, 1, 5, 4);
  assert_int_equal(idx[0], 1);
  assert_int_equal(idx[1], 4);
  assert_int_equal(idx[2], 3);
  assert_int_equal(idx[3], 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_softmax_forward),
      cmocka_unit_test(test_softmax_backward_gradcheck),
      cmocka_unit_test(test_sigmoid_forward_and_gradcheck),
      cmocka_unit_test(test_logsumexp),
      cmocka_unit_test(test_topk_ties_take_lower_index),
      cmocka_unit_test(test_topk_matches_brute_force),
      cmocka_unit_test(test_topk_nan_ranks_last),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
