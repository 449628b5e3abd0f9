/* AdamW and gradient clipping against a double-precision transcription of
 * torch.optim.AdamW / torch.nn.utils.clip_grad_norm_, over several steps
 * with weight decay, clipping active and inactive, and sizes that take the
 * vector, tail and parallel paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/adamw.h"
#include "kern/kern_test_util.h"
#include "kern/vecops.h"

/* p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps). */
static void adamw_reference(double *p, const double *grad, double *m, double *v, size_t n, int t, double lr,
                            double b1, double b2, double eps, double wd, double grad_scale) {
  for (size_t i = 0; i < n; i++) {
    double g = grad[i] * grad_scale;
    p[i] *= 1.0 - lr * wd;
    m[i] = b1 * m[i] + (1.0 - b1) * g;
    v[i] = b2 * v[i] + (1.0 - b2) * g * g;
    double mhat = m[i] / (1.0 - pow(b1, t)), vhat = v[i] / (1.0 - pow(b2, t));
    p[i] -= lr * mhat / (sqrt(vhat) + eps);
  }
}

static double clip_reference(double sumsq, double max_norm) {
  if (max_norm <= 0) return 1.0;
  double coef = max_norm / (sqrt(sumsq) + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

static void run_adamw_steps(size_t n, float max_norm, float weight_decay) {
  AdamWHyper h = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = weight_decay};
  float *p = test_alloc(n), *g = test_alloc(n), *m = test_alloc(n), *v = test_alloc(n);
  double *rp = test_alloc_d(n), *rg = test_alloc_d(n), *rm = test_alloc_d(n), *rv = test_alloc_d(n);
  test_fill_normal(p, n, 1, 1.0f);
  for (size_t i = 0; i < n; i++) rp[i] = p[i];
  double worst = 0.0;
  int clipped_steps = 0;
  for (int t = 1; t <= 5; t++) {
    /* gradients of varying size so clipping engages on some steps only */
    test_fill_normal(g, n, 100 + (uint64_t)t, t % 2 ? 0.05f : 0.5f);
    for (size_t i = 0; i < n; i++) rg[i] = g[i];
    double sumsq = vec_sumsq(g, n);
    float scale = clip_grad_scale(sumsq, max_norm);
    double ref_scale = clip_reference(sumsq, max_norm);
    assert_true(fabs(scale - ref_scale) <= 1e-6 * ref_scale);
    clipped_steps += scale < 1.0f;
    adamw_update(p, g, m, v, n, t, &h, scale);
    /* the reference uses the float hyper-parameters widened to double */
    adamw_reference(rp, rg, rm, rv, n, t, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, ref_scale);
    for (size_t i = 0; i < n; i++) {
      double d = fabs(p[i] - rp[i]);
      if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
    }
  }
  double em = test_rel_err(m, rm, n, 1e-6), ev = test_rel_err(v, rv, n, 1e-9);
  print_message("adamw n=%zu max_norm=%g: %d clipped steps, param max abs err %.3g, m %.3g, v %.3g\n", n,
                (double)max_norm, clipped_steps, worst, em, ev);
  /* each step moves a parameter by ~lr = 3e-3; errors are float rounding */
  assert_true(worst < 2e-6);
  assert_true(em < 1e-5 && ev < 1e-5);
  if (max_norm > 0) assert_true(clipped_steps > 0 && clipped_steps < 5);
  free(p), free(g), free(m), free(v), free(rp), free(rg), free(rm), free(rv);
}

static void test_adamw_small_with_decay_and_clipping(void **state) {
  (void)state;
  run_adamw_steps(29, 0.5f, 0.1f); /* 29: three vectors and a tail */
}

static void test_adamw_no_clipping_no_decay(void **state) {
  (void)state;
  run_adamw_steps(1000, 0.0f, 0.0f);
}

static void test_adamw_parallel_size(void **state) {
  (void)state;
  run_adamw_steps(100003, 50.0f, 0.1f);
}

/* The first step moves every parameter by about lr (m/sqrt(v) = sign g). */
static void test_adamw_first_step_is_lr_sign(void **state) {
  (void)state;
  AdamWHyper h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f};
  float p[3] = {1.0f, 1.0f, 1.0f}, g[3] = {2.0f, -0.001f, 0.0f}, m[3] = {0}, v[3] = {0};
  adamw_update(p, g, m, v, 3, 1, &h, 1.0f);
  assert_true(fabsf(p[0] - 0.99f) < 1e-6f);
  assert_true(fabsf(p[1] - 1.01f) < 1e-5f);
  assert_true(p[2] == 1.0f);
}

static void test_clip_grad_scale(void **state) {
  (void)state;
  assert_true(clip_grad_scale(0.25, 1.0f) == 1.0f);  /* norm 0.5 < 1 */
  assert_true(clip_grad_scale(100.0, 0.0f) == 1.0f); /* disabled */
  assert_true(clip_grad_scale(100.0, -1.0f) == 1.0f);
  assert_true(fabsf(clip_grad_scale(16.0, 1.0f) - (float)(1.0 / (4.0 + 1e-6))) < 1e-7f);
  /* exactly at the threshold the 1e-6 makes the factor just below 1 */
  assert_true(clip_grad_scale(1.0, 1.0f) < 1.0f && clip_grad_scale(1.0, 1.0f) > 0.999998f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adamw_small_with_decay_and_clipping),
      cmocka_unit_test(test_adamw_no_clipping_no_decay),
      cmocka_unit_test(test_adamw_parallel_size),
      cmocka_unit_test(test_adamw_first_step_is_lr_sign),
      cmocka_unit_test(test_clip_grad_scale),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
