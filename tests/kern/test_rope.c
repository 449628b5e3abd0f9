/* RoPE: the Hugging Face rotate_half convention on a hand-computed example,
 * the table against exact angles, norm preservation, backward as the exact
 * transpose (and inverse) of forward, and a finite-difference check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kern/kern_test_util.h"
#include "kern/rope.h"

/* D = 4, theta = 10000: inv_freq = [1, 0.01]; element 0 pairs with 2 and
 * 1 with 3. x = [1, 2, 3, 4] at position 1 rotates (1, 3) by 1 rad and
 * (2, 4) by 0.01 rad; at position 3 by 3 and 0.03 rad. */
static void test_rope_matches_hf_hand_example(void **state) {
  (void)state;
  const int D = 4, max_pos = 8;
  float cos_t[8 * 2], sin_t[8 * 2];
  rope_table_init(cos_t, sin_t, max_pos, D, 10000.0f);
  float x[2 * 4] = {1, 2, 3, 4, 1, 2, 3, 4};
  int pos[2] = {1, 3};
  rope_forward(x, pos, 2, 1, D, cos_t, sin_t);
  const double expected[8] = {-1.9841106485555495, 1.959900667496664,  2.4623779024123156, 4.019799668334994,
                              -1.413352520780047,  1.8791180666879925, -2.828857481741469, 4.058191135400942};
  for (int i = 0; i < 8; i++) assert_true(fabs(x[i] - expected[i]) < 2e-6);
}

static void test_rope_table_angles(void **state) {
  (void)state;
  const int D = 64, max_pos = 4096, half = D / 2;
  float *cos_t = test_alloc((size_t)max_pos * half), *sin_t = test_alloc((size_t)max_pos * half);
  rope_table_init(cos_t, sin_t, max_pos, D, 500000.0f);
  double worst = 0.0;
  for (int p = 0; p < max_pos; p += 17)
    for (int i = 0; i < half; i++) {
      double angle = p * pow(500000.0, -2.0 * i / D);
      double d = fabs(cos_t[p * half + i] - cos(angle)) + fabs(sin_t[p * half + i] - sin(angle));
      if (d > worst) worst = d;
    }
  /* A float32 angle (the HF recipe) is off by up to p * 2^-24 rad. */
  print_message("rope table max error vs exact angles: %.3g\n", worst);
  assert_true(worst < 2.0 * max_pos * 6e-8 + 1e-6);
  assert_true(cos_t[0] == 1.0f && sin_t[0] == 0.0f);
  free(cos_t), free(sin_t);
}

typedef struct RopeCase {
  int N, H, D;
  int *pos;
  float *cos_t, *sin_t, *x, *work, *r;
} RopeCase;

static double rope_loss(void *ctx) {
  RopeCase *c = ctx;
  size_t n = (size_t)c->N * c->H * c->D;
  for (size_t i = 0; i < n; i++) c->work[i] = c->x[i];
  rope_forward(c->work, c->pos, c->N, c->H, c->D, c->cos_t, c->sin_t);
  return test_dot_loss(c->work, c->r, n);
}

static RopeCase rope_case_make(int N, int H, int D, int max_pos, uint64_t seed) {
  RopeCase c = {.N = N, .H = H, .D = D};
  size_t n = (size_t)N * H * D;
  c.pos = calloc((size_t)N, sizeof *c.pos);
  c.cos_t = test_alloc((size_t)max_pos * D / 2), c.sin_t = test_alloc((size_t)max_pos * D / 2);
  c.x = test_alloc(n), c.work = test_alloc(n), c.r = test_alloc(n);
  rope_table_init(c.cos_t, c.sin_t, max_pos, D, 10000.0f);
  for (int i = 0; i < N; i++) c.pos[i] = (int)(rng_u64(seed, 1, (uint64_t)i) % (uint64_t)max_pos);
  test_fill_normal(c.x, n, seed + 1, 1.0f);
  test_fill_normal(c.r, n, seed + 2, 1.0f);
  return c;
}

static void rope_case_free(RopeCase *c) {
  free(c->pos), free(c->cos_t), free(c->sin_t), free(c->x), free(c->work), free(c->r);
}

static void test_rope_preserves_norms_and_inverts(void **state) {
  (void)state;
  /* Large enough to take the parallel path. */
  RopeCase c = rope_case_make(128, 8, 64, 2048, 40);
  size_t n = (size_t)c.N * c.H * c.D;
  for (size_t i = 0; i < n; i++) c.work[i] = c.x[i];
  rope_forward(c.work, c.pos, c.N, c.H, c.D, c.cos_t, c.sin_t);
  double worst_norm = 0.0;
  for (int t = 0; t < c.N * c.H; t++) {
    double a = 0.0, b = 0.0;
    for (int d = 0; d < c.D; d++) {
      a += (double)c.x[t * c.D + d] * c.x[t * c.D + d];
      b += (double)c.work[t * c.D + d] * c.work[t * c.D + d];
    }
    if (fabs(sqrt(a) - sqrt(b)) / sqrt(a) > worst_norm) worst_norm = fabs(sqrt(a) - sqrt(b)) / sqrt(a);
  }
  assert_true(worst_norm < 1e-5);
  rope_backward(c.work, c.pos, c.N, c.H, c.D, c.cos_t, c.sin_t);
  assert_true(test_rel_err_ff(c.work, c.x, n, 1.0) < 1e-5);
  rope_case_free(&c);
}

/* <R x, y> = <x, R^T y> for all x, y: the backward is the transpose. */
static void test_rope_backward_is_transpose(void **state) {
  (void)state;
  RopeCase c = rope_case_make(9, 3, 16, 100, 50);
  size_t n = (size_t)c.N * c.H * c.D;
  float *y = test_alloc(n);
  for (size_t i = 0; i < n; i++) c.work[i] = c.x[i], y[i] = c.r[i];
  rope_forward(c.work, c.pos, c.N, c.H, c.D, c.cos_t, c.sin_t);
  rope_backward(y, c.pos, c.N, c.H, c.D, c.cos_t, c.sin_t);
  double lhs = test_dot_loss(c.work, c.r, n), rhs = test_dot_loss(c.x, y, n);
  assert_true(fabs(lhs - rhs) < 1e-4 * (fabs(lhs) + 1.0));
  free(y);
  rope_case_free(&c);
}

static void test_rope_backward_gradcheck(void **state) {
  (void)state;
  RopeCase c = rope_case_make(5, 2, 8, 64, 60);
  size_t n = (size_t)c.N * c.H * c.D;
  float *dx = test_alloc(n);
  for (size_t i = 0; i < n; i++) dx[i] = c.r[i];
  rope_backward(dx, c.pos, c.N, c.H, c.D, c.cos_t, c.sin_t);
  double e = test_gradcheck(c.x, dx, n, rope_loss, &c, 1e-2f, 1000);
  print_message("rope gradcheck: %.3g\n", e);
  assert_true(e < 1e-3);
  free(dx);
  rope_case_free(&c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rope_matches_hf_hand_example),
      cmocka_unit_test(test_rope_table_angles),
      cmocka_unit_test(test_rope_preserves_norms_and_inverts),
      cmocka_unit_test(test_rope_backward_is_transpose),
      cmocka_unit_test(test_rope_backward_gradcheck),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
