/* Peak measurements return positive finite GFLOP/s (no timing threshold:
 * the numbers depend on the machine and its load), and the bf16 peak is the
 * peak of what bf16 GEMMs run on: oneDNN's bf16 product never beats it (on
 * a CPU with AMX it would beat the vdpbf16ps loop several times over). Both
 * are the fastest of repeated runs, which load only slows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "kern/bf16.h"
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

static void test_bf16_peak_bounds_the_gemm(void **state) {
  (void)state;
  char why[256] = "";
  if (!kern_bf16_supported(why, sizeof why)) {
    print_message("bf16 peak: not measured here (%s)\n", why);
    assert_true(peak_bf16_gflops(1, 0.01) == 0.0);
    return;
  }
  double peak = peak_bf16_gflops(0, 0.1); /* every thread, as the GEMM uses */
  const char *src = peak_bf16_source();
  double gemm = peak_gemm_gflops(GEMM_BACKEND_ONEDNN, KERN_PRECISION_BF16, 512, 0.2);
  print_message("bf16 peak %.1f GFLOP/s (%s), oneDNN bf16 GEMM 512: %.1f GFLOP/s\n", peak, src, gemm);
  assert_true(isfinite(peak) && peak > 0.0);
  assert_true(!strcmp(src, "vdpbf16ps") || !strcmp(src, "tdpbf16ps (AMX)"));
  /* 5% for the clock. */
  assert_true(gemm <= 1.05 * peak);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fma_peak_positive),
      cmocka_unit_test(test_sgemm_peak_positive),
      cmocka_unit_test(test_bf16_peak_bounds_the_gemm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
