/* Elementwise helpers against plain loops at serial and parallel sizes,
 * and vec_sumsq's double accumulation and thread-count independence. */
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/kern_test_util.h"
#include "kern/vecops.h"

static void check_vecops(size_t n) {
  float *a = test_alloc(n), *b = test_alloc(n), *out = test_alloc(n);
  test_fill_normal(a, n, 1, 1.0f);
  test_fill_normal(b, n, 2, 1.0f);

  vec_add(out, a, b, n);
  for (size_t i = 0; i < n; i++) assert_true(out[i] == a[i] + b[i]);
  vec_copy(out, a, n);
  for (size_t i = 0; i < n; i++) assert_true(out[i] == a[i]);
  vec_acc(out, b, n);
  for (size_t i = 0; i < n; i++) assert_true(out[i] == a[i] + b[i]);
  vec_copy(out, a, n);
  vec_scale(out, -0.75f, n);
  for (size_t i = 0; i < n; i++) assert_true(out[i] == a[i] * -0.75f);
  vec_copy(out, a, n);
  vec_axpy(out, 0.3f, b, n);
  for (size_t i = 0; i < n; i++) assert_true(fabsf(out[i] - (a[i] + 0.3f * b[i])) <= 1e-6f * (1.0f + fabsf(out[i])));
  vec_zero(out, n);
  for (size_t i = 0; i < n; i++) assert_true(out[i] == 0.0f);

  double ref = 0.0;
  for (size_t i = 0; i < n; i++) ref += (double)a[i] * a[i];
  double got = vec_sumsq(a, n);
  assert_true(fabs(got - ref) <= 1e-12 * ref);
  free(a), free(b), free(out);
}

static void test_vecops_small(void **state) {
  (void)state;
  check_vecops(37);
}

static void test_vecops_large(void **state) {
  (void)state;
  check_vecops(3000001);
}

/* 2e7 unit squares: a float accumulator stalls at 2^24, double stays exact;
 * and the fixed block order gives the same bits on 1 or 2 threads. */
static void test_sumsq_precise_and_deterministic(void **state) {
  (void)state;
  const size_t n = 20000000;
  float *x = test_alloc(n);
  for (size_t i = 0; i < n; i++) x[i] = (i % 2) ? 1.0f : -1.0f;
  x[n / 3] = 1e-4f;
  double exact = (double)(n - 1) + 1e-8;
  double s2 = vec_sumsq(x, n);
  assert_true(fabs(s2 - exact) < 1e-6);
  int saved = omp_get_max_threads();
  for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000u) * 1e-3f - 0.5f;
  omp_set_num_threads(1);
  double one = vec_sumsq(x, n);
  omp_set_num_threads(saved > 1 ? saved : 2);
  double many = vec_sumsq(x, n);
  omp_set_num_threads(saved);
  assert_true(one == many);
  assert_true(vec_sumsq(x, 0) == 0.0);
  free(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vecops_small),
      cmocka_unit_test(test_vecops_large),
      cmocka_unit_test(test_sumsq_precise_and_deterministic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
