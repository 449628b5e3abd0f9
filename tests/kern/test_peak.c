/* Peak measurements return positive finite GFLOP/s (no timing threshold:
 * the numbers depend on the machine and its load). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "kern/peak.h"

static void test_fma_peak_positive(void **state) {
  (void)state;
  double one = peak_fma_gflops(1, 0.05);
  double all = peak_fma_gflops(0, 0.05);
  print_message("fma peak: 1 thread %.1f GFLOP/s, all threads %.1f GFLOP/s\n", one, all);
  assert_true(isfinite(one) && one > 0.0);
  assert_true(isfinite(all) && all > 0.0);
}

static void test_sgemm_peak_positive(void **state) {
  (void)state;
  double g = peak_sgemm_gflops(128, 0.05);
  print_message("sgemm 128: %.1f GFLOP/s\n", g);
  assert_true(isfinite(g) && g > 0.0);
  assert_true(peak_sgemm_gflops(0, 0.01) == 0.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fma_peak_positive),
      cmocka_unit_test(test_sgemm_peak_positive),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
