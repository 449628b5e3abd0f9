/* GeLU (tanh approximation): forward against a double reference of the
 * formula, forward and derivative on a dense grid of [-20, 20] and the
 * saturation far out (the tanh is computed through a polynomial exp),
 * backward by finite differences; the row-bias helpers against plain sums
 * and by finite differences. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/fusion.h"
#include "kern/gelu.h"
#include "kern/kern_test_util.h"

typedef struct GeluCase {
  size_t n;
  float *x, *out, *r;
} GeluCase;

static double gelu_loss(void *ctx) {
  GeluCase *c = ctx;
  gelu_forward(c->out, c->x, c->n);
  return test_dot_loss(c->out, c->r, c->n);
}

static void test_gelu_forward_matches_formula(void **state) {
  (void)state;
  const size_t n = 1000;
  float *x = test_alloc(n), *out = test_alloc(n);
  double *ref = test_alloc_d(n);
  test_fill_normal(x, n, 1, 3.0f);
  gelu_forward(out, x, n);
  for (size_t i = 0; i < n; i++) {
    const double v = x[i];
    ref[i] = 0.5 * v * (1.0 + tanh(0.79788456080286536 /* sqrt(2 / pi) */ * (v + 0.044715 * v * v * v)));
  }
  assert_true(test_rel_err(out, ref, n, 1.0) < 1e-6);
  free(x), free(out), free(ref);
}

static double ref_tanh_arg(double v) { return 0.79788456080286536 * (v + 0.044715 * v * v * v); }

/* Every float step of 1e-4 over [-20, 20] (an odd count, so the vector
 * loops' tails are covered too): GeLU within 1e-6 absolute of the double
 * formula, as it was through libm's expf (4.3e-7 measured), and the
 * derivative within 4e-6. */
static void test_gelu_dense_grid(void **state) {
  (void)state;
  const size_t n = 400001;
  float *x = test_alloc(n), *out = test_alloc(n), *one = test_alloc(n), *d = test_alloc(n);
  for (size_t i = 0; i < n; i++) {
    x[i] = -20.0f + 40.0f * (float)i / (float)(n - 1);
    one[i] = 1.0f;
  }
  gelu_forward(out, x, n);
  gelu_backward(d, one, x, n);
  double worst = 0.0, worst_d = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double v = x[i], t = tanh(ref_tanh_arg(v));
    const double y = 0.5 * v * (1.0 + t);
    const double dy = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * 0.79788456080286536 * (1.0 + 3.0 * 0.044715 * v * v);
    if (fabs(out[i] - y) > worst) worst = fabs(out[i] - y);
    if (fabs(d[i] - dy) > worst_d) worst_d = fabs(d[i] - dy);
  }
  print_message("gelu on [-20, 20]: max abs error %.3g, derivative %.3g\n", worst, worst_d);
  assert_true(worst < 1e-6);
  assert_true(worst_d < 4e-6);
  free(x), free(out), free(one), free(d);
}

/* Far out the tanh saturates to exactly +-1: gelu(x) = x above, 0 (or -0)
 * below, and the forward never overflows into inf or nan, even where x^3
 * does; the derivative is 1 and 0 up to |x| = 1e4 (past ~1e19 its x^2 term
 * overflows and 0 * inf gives nan, as it always has). */
static void test_gelu_saturation(void **state) {
  (void)state;
  const float x[] = {30.0f, 88.0f, 1e4f, 3e38f, -30.0f, -88.0f, -1e4f, -3e38f};
  const size_t n = sizeof x / sizeof x[0];
  float out[8], d[8], one[8];
  for (size_t i = 0; i < n; i++) one[i] = 1.0f;
  gelu_forward(out, x, n);
  gelu_backward(d, one, x, n);
  for (size_t i = 0; i < n; i++) {
    assert_true(out[i] == (x[i] > 0 ? x[i] : 0.0f));
    if (fabsf(x[i]) <= 1e4f) assert_true(d[i] == (x[i] > 0 ? 1.0f : 0.0f));
  }
}

static void test_gelu_backward_gradcheck(void **state) {
  (void)state;
  GeluCase c = {.n = 97};
  c.x = test_alloc(c.n), c.out = test_alloc(c.n), c.r = test_alloc(c.n);
  test_fill_normal(c.x, c.n, 10, 2.0f);
  test_fill_normal(c.r, c.n, 11, 1.0f);
  float *dx = test_alloc(c.n);
  gelu_backward(dx, c.r, c.x, c.n);
  const double e = test_gradcheck(c.x, dx, c.n, gelu_loss, &c, 1e-2f, 1000);
  print_message("gelu gradcheck: dx %.3g\n", e);
  assert_true(e < 2e-3);
  /* In place: dx may alias dout. */
  float *inplace = test_alloc(c.n);
  for (size_t i = 0; i < c.n; i++) inplace[i] = c.r[i];
  gelu_backward(inplace, inplace, c.x, c.n);
  for (size_t i = 0; i < c.n; i++) assert_true(inplace[i] == dx[i]);
  free(c.x), free(c.out), free(c.r), free(dx), free(inplace);
}

typedef struct BiasCase {
  int N, C;
  float *y0, *y, *b, *r;
} BiasCase;

static double bias_loss(void *ctx) {
  BiasCase *c = ctx;
  for (int i = 0; i < c->N * c->C; i++) c->y[i] = c->y0[i];
  bias_add_rows(c->y, c->b, c->N, c->C);
  return test_dot_loss(c->y, c->r, (size_t)c->N * c->C);
}

static void test_bias_rows(void **state) {
  (void)state;
  BiasCase c = {.N = 7, .C = 131}; /* C past one column block */
  const size_t nc = (size_t)c.N * c.C;
  c.y0 = test_alloc(nc), c.y = test_alloc(nc), c.b = test_alloc(c.C), c.r = test_alloc(nc);
  test_fill_normal(c.y0, nc, 20, 1.0f);
  test_fill_normal(c.b, c.C, 21, 1.0f);
  test_fill_normal(c.r, nc, 22, 1.0f);
  bias_loss(&c);
  for (int n = 0; n < c.N; n++)
    for (int k = 0; k < c.C; k++) assert_true(c.y[n * c.C + k] == c.y0[n * c.C + k] + c.b[k]);
  float *db = test_alloc(c.C);
  for (int k = 0; k < c.C; k++) db[k] = 1.0f; /* accumulates */
  bias_backward_rows(db, c.r, c.N, c.C);
  for (int k = 0; k < c.C; k++) db[k] -= 1.0f;
  const double e = test_gradcheck(c.b, db, (size_t)c.C, bias_loss, &c, 1e-2f, 1000);
  print_message("bias gradcheck: db %.3g\n", e);
  assert_true(e < 2e-3);
  free(c.y0), free(c.y), free(c.b), free(c.r), free(db);
}

/* The fused bias + GeLU: forward = bias_add_rows then gelu_forward and
 * backward = gelu_backward then bias_backward_rows bit for bit (fused or
 * through the switch, at sizes on both sides of the parallel threshold and
 * past one column block), and its gradients in the pre-bias input and the
 * bias by finite differences. */
typedef struct BiasGeluCase {
  int N, F;
  float *h0, *h, *a, *b, *r;
} BiasGeluCase;

static double bias_gelu_loss(void *ctx) {
  BiasGeluCase *c = ctx;
  for (int i = 0; i < c->N * c->F; i++) c->h[i] = c->h0[i];
  bias_gelu_forward_fused(c->h, c->a, c->b, c->N, c->F);
  return test_dot_loss(c->a, c->r, (size_t)c->N * c->F);
}

static void test_bias_gelu_fused(void **state) {
  (void)state;
  const int sizes[][2] = {{7, 131}, {96, 520}, {1, 1}};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    int N = sizes[k][0], F = sizes[k][1];
    size_t nf = (size_t)N * F;
    float *h0 = test_alloc(nf), *b = test_alloc(F), *da = test_alloc(nf);
    test_fill_normal(h0, nf, 60 + k, 2.0f);
    test_fill_normal(b, F, 70 + k, 1.0f);
    test_fill_normal(da, nf, 80 + k, 1.0f);
    float *h1 = test_alloc(nf), *h2 = test_alloc(nf), *h3 = test_alloc(nf);
    float *a1 = test_alloc(nf), *a2 = test_alloc(nf), *a3 = test_alloc(nf);
    for (size_t i = 0; i < nf; i++) h1[i] = h2[i] = h3[i] = h0[i];
    bias_gelu_forward_fused(h1, a1, b, N, F);
    bias_add_rows(h2, b, N, F);
    gelu_forward(a2, h2, nf);
    kern_set_fusion((KernFusion){.swiglu = 1, .bias_gelu = 0, .norm_residual = 1});
    bias_gelu_forward(h3, a3, b, N, F);
    assert_memory_equal(h1, h2, nf * sizeof(float));
    assert_memory_equal(h1, h3, nf * sizeof(float));
    assert_memory_equal(a1, a2, nf * sizeof(float));
    assert_memory_equal(a1, a3, nf * sizeof(float));
    float *d1 = test_alloc(nf), *d2 = test_alloc(nf), *d3 = test_alloc(nf);
    float *db1 = test_alloc(F), *db2 = test_alloc(F), *db3 = test_alloc(F);
    for (int c = 0; c < F; c++) db1[c] = db2[c] = db3[c] = 0.5f; /* accumulates */
    bias_gelu_backward(d3, db3, da, h1, N, F); /* unfused, by the switch */
    kern_set_fusion((KernFusion){.swiglu = 1, .bias_gelu = 1, .norm_residual = 1});
    bias_gelu_backward_fused(d1, db1, da, h1, N, F);
    gelu_backward(d2, da, h1, nf);
    bias_backward_rows(db2, d2, N, F);
    assert_memory_equal(d1, d2, nf * sizeof(float));
    assert_memory_equal(d1, d3, nf * sizeof(float));
    assert_memory_equal(db1, db2, (size_t)F * sizeof(float));
    assert_memory_equal(db1, db3, (size_t)F * sizeof(float));
    free(h0), free(b), free(da), free(h1), free(h2), free(h3), free(a1), free(a2), free(a3);
    free(d1), free(d2), free(d3), free(db1), free(db2), free(db3);
  }
  /* Gradients: dh (the pre-bias input's) and db against finite differences. */
  BiasGeluCase c = {.N = 5, .F = 70};
  size_t nf = (size_t)c.N * c.F;
  c.h0 = test_alloc(nf), c.h = test_alloc(nf), c.a = test_alloc(nf), c.b = test_alloc(c.F), c.r = test_alloc(nf);
  test_fill_normal(c.h0, nf, 90, 2.0f);
  test_fill_normal(c.b, c.F, 91, 1.0f);
  test_fill_normal(c.r, nf, 92, 1.0f);
  bias_gelu_loss(&c);
  float *dh = test_alloc(nf), *db = test_alloc(c.F);
  for (int k = 0; k < c.F; k++) db[k] = 0.0f;
  bias_gelu_backward_fused(dh, db, c.r, c.h, c.N, c.F);
  const double eh = test_gradcheck(c.h0, dh, nf, bias_gelu_loss, &c, 1e-2f, 1000);
  const double eb = test_gradcheck(c.b, db, (size_t)c.F, bias_gelu_loss, &c, 1e-2f, 1000);
  print_message("bias+gelu gradcheck: dh %.3g, db %.3g\n", eh, eb);
  assert_true(eh < 2e-3);
  assert_true(eb < 2e-3);
  free(c.h0), free(c.h), free(c.a), free(c.b), free(c.r), free(dh), free(db);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gelu_forward_matches_formula),
      cmocka_unit_test(test_gelu_dense_grid),
      cmocka_unit_test(test_gelu_saturation),
      cmocka_unit_test(test_gelu_backward_gradcheck),
      cmocka_unit_test(test_bias_rows),
      cmocka_unit_test(test_bias_gelu_fused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
