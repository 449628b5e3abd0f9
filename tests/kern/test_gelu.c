/* GeLU (tanh approximation): forward against a double reference of the
 * formula, backward by finite differences; the row-bias helpers against
 * plain sums and by finite differences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gelu_forward_matches_formula),
      cmocka_unit_test(test_gelu_backward_gradcheck),
      cmocka_unit_test(test_bias_rows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
