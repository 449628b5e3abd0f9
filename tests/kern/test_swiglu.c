/* SwiGLU: forward against a double reference (including saturated gates),
 * backward by finite differences, the parallel path, and the unfused
 * chains (kern/fusion.h) bit-identical to the fused kernels at sizes on
 * both sides of the parallel threshold, through the switch too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/kern_test_util.h"
#include "kern/fusion.h"
#include "kern/swiglu.h"

static void swiglu_reference(double *out, double *dh, const float *h, const float *dy, int N, int F) {
  for (int n = 0; n < N; n++)
    for (int f = 0; f < F; f++) {
      double g = h[n * 2 * F + f], u = h[n * 2 * F + F + f];
      double sig = 1.0 / (1.0 + exp(-g));
      out[n * F + f] = g * sig * u;
      if (dh) {
        dh[n * 2 * F + f] = dy[n * F + f] * u * sig * (1.0 + g * (1.0 - sig));
        dh[n * 2 * F + F + f] = dy[n * F + f] * g * sig;
      }
    }
}

typedef struct SwigluCase {
  int N, F;
  float *h, *out, *r;
} SwigluCase;

static double swiglu_loss(void *ctx) {
  SwigluCase *c = ctx;
  swiglu_forward(c->out, c->h, c->N, c->F);
  return test_dot_loss(c->out, c->r, (size_t)c->N * c->F);
}

static void test_swiglu_forward_matches_reference(void **state) {
  (void)state;
  const int N = 3, F = 21;
  float *h = test_alloc(N * 2 * F), *out = test_alloc(N * F);
  double *ref = test_alloc_d(N * F);
  test_fill_normal(h, N * 2 * F, 1, 3.0f);
  /* saturated gates: silu(-100) ~ -0, silu(100) = 100 */
  h[0] = -100.0f, h[1] = 100.0f, h[2] = -30.0f, h[3] = 0.0f;
  swiglu_forward(out, h, N, F);
  swiglu_reference(ref, NULL, h, NULL, N, F);
  double e = test_rel_err(out, ref, N * F, 1.0);
  print_message("swiglu forward rel err %.3g\n", e);
  assert_true(e < 1e-6);
  for (int i = 0; i < N * F; i++) assert_true(isfinite(out[i]));
  free(h), free(out), free(ref);
}

static void test_swiglu_backward_gradcheck(void **state) {
  (void)state;
  SwigluCase c = {.N = 4, .F = 9};
  size_t nh = (size_t)c.N * 2 * c.F, no = (size_t)c.N * c.F;
  c.h = test_alloc(nh), c.out = test_alloc(no), c.r = test_alloc(no);
  test_fill_normal(c.h, nh, 10, 2.0f);
  test_fill_normal(c.r, no, 11, 1.0f);
  float *dh = test_alloc(nh);
  for (size_t i = 0; i < nh; i++) dh[i] = NAN; /* overwritten */
  swiglu_backward(dh, c.r, c.h, c.N, c.F);
  double e = test_gradcheck(c.h, dh, nh, swiglu_loss, &c, 1e-2f, 1000);
  print_message("swiglu gradcheck: %.3g\n", e);
  assert_true(e < 2e-3);
  free(c.h), free(c.out), free(c.r), free(dh);
}

static void test_swiglu_parallel_sizes_match_reference(void **state) {
  (void)state;
  const int N = 64, F = 1000;
  size_t nh = (size_t)N * 2 * F, no = (size_t)N * F;
  float *h = test_alloc(nh), *dy = test_alloc(no), *out = test_alloc(no), *dh = test_alloc(nh);
  double *ref = test_alloc_d(no), *ref_dh = test_alloc_d(nh);
  test_fill_normal(h, nh, 20, 3.0f);
  test_fill_normal(dy, no, 21, 1.0f);
  swiglu_forward(out, h, N, F);
  swiglu_backward(dh, dy, h, N, F);
  swiglu_reference(ref, ref_dh, h, dy, N, F);
  double eo = test_rel_err(out, ref, no, 1.0), ed = test_rel_err(dh, ref_dh, nh, 1.0);
  print_message("swiglu large: out %.3g dh %.3g\n", eo, ed);
  assert_true(eo < 1e-6 && ed < 1e-6);
  free(h), free(dy), free(out), free(dh), free(ref), free(ref_dh);
}

static void test_swiglu_unfused_bit_identical(void **state) {
  (void)state;
  const int sizes[][2] = {{3, 17}, {64, 600}, {1, 1}};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    int N = sizes[k][0], F = sizes[k][1];
    size_t nf = (size_t)N * F;
    float *h = test_alloc(2 * nf), *dy = test_alloc(nf);
    test_fill_normal(h, 2 * nf, 40 + k, 3.0f);
    test_fill_normal(dy, nf, 50 + k, 1.0f);
    float *o1 = test_alloc(nf), *o2 = test_alloc(nf), *o3 = test_alloc(nf);
    float *d1 = test_alloc(2 * nf), *d2 = test_alloc(2 * nf), *d3 = test_alloc(2 * nf);
    swiglu_forward_fused(o1, h, N, F);
    swiglu_forward_unfused(o2, h, N, F);
    swiglu_backward_fused(d1, dy, h, N, F);
    swiglu_backward_unfused(d2, dy, h, N, F);
    kern_set_fusion((KernFusion){.swiglu = 0, .bias_gelu = 1, .norm_residual = 1});
    swiglu_forward(o3, h, N, F);
    swiglu_backward(d3, dy, h, N, F);
    kern_set_fusion((KernFusion){.swiglu = 1, .bias_gelu = 1, .norm_residual = 1});
    assert_int_equal(kern_fusion().swiglu, 1);
    assert_memory_equal(o1, o2, nf * sizeof(float));
    assert_memory_equal(o1, o3, nf * sizeof(float));
    assert_memory_equal(d1, d2, 2 * nf * sizeof(float));
    assert_memory_equal(d1, d3, 2 * nf * sizeof(float));
    free(h), free(dy), free(o1), free(o2), free(o3), free(d1), free(d2), free(d3);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_swiglu_forward_matches_reference),
      cmocka_unit_test(test_swiglu_backward_gradcheck),
      cmocka_unit_test(test_swiglu_parallel_sizes_match_reference),
      cmocka_unit_test(test_swiglu_unfused_bit_identical),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
