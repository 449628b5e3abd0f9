/* The bf16 weight cache (kern/bf16_weights.h) under the bf16 GEMMs:
 * products with a registered weight are bit for bit those of the same
 * weight values at an unregistered address (the per-call conversion), for
 * every way a layer reads its weight (forward x W^T, backward dY x W, the
 * weight as the left operand) and for weights holding rounding ties,
 * denormals and huge values; one conversion serves many GEMMs; a write
 * without invalidation leaves the copy stale (the product of the old
 * values: what a missed invalidation would train on) and invalidation
 * makes the next GEMM convert again; experts of a 3-d tensor, operands
 * with a row stride wider than their rows and operands running past a
 * registered matrix; forget and off; OpenMP workers converting at once;
 * the environment variable's check. Exits 77 (SKIP) where bf16 cannot
 * run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kern/bf16.h"
#include "kern/bf16_weights.h"
#include "kern/gemm.h"
#include "kern/kern_test_util.h"

enum { M = 37, K = 129, N = 48 };

/* Weights with values that round in every way: ties to even and odd, just
 * off ties, denormals, large values. */
static void fill_weights(float *w, size_t n, uint64_t seed) {
  test_fill_normal(w, n, seed, 0.5f);
  for (size_t i = 0; i < n; i += 7) {
    uint32_t bits;
    memcpy(&bits, &w[i], sizeof bits);
    switch ((i / 7) % 4) {
      case 0: bits = (bits & 0xffff0000u) | 0x8000u; break; /* an exact tie */
      case 1: bits = (bits & 0xffff0000u) | 0x8001u; break; /* just above */
      case 2: bits = (bits & 0x80000000u) | 0x00000f00u; break; /* a denormal */
      default: bits = (bits & 0x80000000u) | 0x4f000000u; break; /* 2^31 */
    }
    memcpy(&w[i], &bits, sizeof bits);
  }
}

static float *copy_of(const float *x, size_t n) {
  float *c = test_alloc(n);
  memcpy(c, x, n * sizeof *c);
  return c;
}

static int bf16_here(void) {
  char why[512];
  return kern_bf16_supported(why, sizeof why) && kern_set_precision(KERN_PRECISION_BF16, why, sizeof why) == 0;
}

/* The three products a linear layer takes of its weight w[N, K], into
 * y[M, N], dx[M, K] and t[K, K] (w^T w: the weight as the left operand). */
static void layer_products(const float *w, const float *x, const float *dy, float *y, float *dx, float *t) {
  linear_forward(y, x, w, M, K, N, 0);
  linear_backward(dx, NULL, dy, x, w, M, K, N, 0);
  gemm(1, 0, K, K, N, 1.0f, w, K, w, K, 0.0f, t, K);
}

typedef struct Products {
  float *y, *dx, *t;
} Products;

static Products products_alloc(void) {
  Products p = {test_alloc((size_t)M * N), test_alloc((size_t)M * K), test_alloc((size_t)K * K)};
  return p;
}

static void products_free(Products *p) { free(p->y), free(p->dx), free(p->t); }

static int products_equal(const Products *a, const Products *b) {
  return !memcmp(a->y, b->y, sizeof(float) * M * N) && !memcmp(a->dx, b->dx, sizeof(float) * M * K) &&
         !memcmp(a->t, b->t, sizeof(float) * K * K);
}

static void test_hits_bit_identical_and_invalidation(void **state) {
  (void)state;
  float *w = test_alloc((size_t)N * K), *x = test_alloc((size_t)M * K), *dy = test_alloc((size_t)M * N);
  fill_weights(w, (size_t)N * K, 1);
  test_fill_normal(x, (size_t)M * K, 2, 1.0f);
  test_fill_normal(dy, (size_t)M * N, 3, 1.0f);
  float *w_plain = copy_of(w, (size_t)N * K); /* same values, not registered */
  Products cached = products_alloc(), plain = products_alloc(), again = products_alloc();

  Bf16WeightStats s0, s1;
  bf16_weights_stats(&s0);
  assert_int_equal(bf16_weights_register(w, N, K), 0);
  bf16_weights_stats(&s1);
  assert_int_equal(s1.tensors, s0.tensors + 1);
  assert_int_equal(s1.registered_bytes - s0.registered_bytes, (size_t)N * K * sizeof(kern_bf16));
  assert_int_equal(s1.resident_bytes, s0.resident_bytes); /* nothing converted before a GEMM reads it */

  layer_products(w, x, dy, cached.y, cached.dx, cached.t);
  layer_products(w_plain, x, dy, plain.y, plain.dx, plain.t);
  assert_true(products_equal(&cached, &plain));
  bf16_weights_stats(&s1);
  assert_int_equal(s1.conversions - s0.conversions, 1); /* four operand reads, one conversion */
  assert_int_equal(s1.hits - s0.hits, 4);
  assert_int_equal(s1.resident_bytes - s0.resident_bytes, (size_t)N * K * sizeof(kern_bf16)); /* half of fp32 */
  /* The cache really is read: the copy is what a bf16 GEMM multiplies. */
  const kern_bf16 *c = bf16_weights_lookup(w, N, K, K);
  assert_non_null(c);
  kern_bf16 *per_call = malloc(sizeof(kern_bf16) * N * K);
  assert_non_null(per_call);
  bf16_pack_rows(per_call, w, N, K, K);
  assert_memory_equal(c, per_call, sizeof(kern_bf16) * N * K);
  free(per_call);

  /* A write without invalidation: the GEMMs still multiply the old values. */
  for (size_t i = 0; i < (size_t)N * K; i++) w[i] = -2.0f * w[i] + 0.25f;
  memcpy(w_plain, w, sizeof(float) * N * K);
  layer_products(w, x, dy, again.y, again.dx, again.t);
  assert_true(products_equal(&again, &cached)); /* stale */
  layer_products(w_plain, x, dy, plain.y, plain.dx, plain.t);
  assert_false(products_equal(&again, &plain));
  /* Invalidated (a range covering it is enough): converted again, once. */
  bf16_weights_stats(&s0);
  bf16_weights_invalidate(w + 5, 1);
  layer_products(w, x, dy, again.y, again.dx, again.t);
  assert_true(products_equal(&again, &plain));
  bf16_weights_stats(&s1);
  assert_int_equal(s1.conversions - s0.conversions, 1);
  /* A range next to it invalidates nothing. */
  bf16_weights_invalidate(w + (size_t)N * K, 16);
  layer_products(w, x, dy, again.y, again.dx, again.t);
  bf16_weights_stats(&s0);
  assert_int_equal(s0.conversions, s1.conversions);

  bf16_weights_forget(w, (size_t)N * K);
  assert_null(bf16_weights_lookup(w, N, K, K));
  bf16_weights_stats(&s1);
  assert_int_equal(s1.tensors, s0.tensors - 1);
  products_free(&cached), products_free(&plain), products_free(&again);
  free(w), free(w_plain), free(x), free(dy);
}

/* Experts of a 3-d tensor convert one by one; an operand inside a matrix
 * with a wider row stride is read from the copy; one reaching past the
 * matrix is not (and is still right). */
static void test_experts_strides_and_bounds(void **state) {
  (void)state;
  enum { E = 4, R = 24, C = 40 };
  const size_t n = (size_t)E * R * C;
  float *w = test_alloc(n + 2 * C), *x = test_alloc((size_t)M * C), *y = test_alloc((size_t)M * R),
        *y_plain = test_alloc((size_t)M * R);
  fill_weights(w, n + 2 * C, 4);
  test_fill_normal(x, (size_t)M * C, 5, 1.0f);
  float *w_plain = copy_of(w, n + 2 * C);
  Bf16WeightStats s0, s1;
  bf16_weights_stats(&s0);
  assert_int_equal(bf16_weights_register_tensor(w, 3, E, R, n), 0);
  bf16_weights_stats(&s1);
  assert_int_equal(s1.tensors - s0.tensors, E);
  for (int e = 0; e < E; e++) {
    linear_forward(y, x, w + (size_t)e * R * C, M, C, R, 0);
    linear_forward(y_plain, x, w_plain + (size_t)e * R * C, M, C, R, 0);
    assert_memory_equal(y, y_plain, sizeof(float) * M * R);
  }
  bf16_weights_stats(&s1);
  assert_int_equal(s1.conversions - s0.conversions, E);
  /* Columns 3..C-6 of expert 1's rows: row stride C, wider than the rows. */
  const float *sub = w + (size_t)R * C + 3, *sub_plain = w_plain + (size_t)R * C + 3;
  assert_non_null(bf16_weights_lookup(sub, R, C - 8, C));
  gemm(0, 1, M, R, C - 8, 1.0f, x, C, sub, C, 0.0f, y, R);
  gemm(0, 1, M, R, C - 8, 1.0f, x, C, sub_plain, C, 0.0f, y_plain, R);
  assert_memory_equal(y, y_plain, sizeof(float) * M * R);
  /* Expert 3's last rows and the floats after the tensor: not in one matrix. */
  const float *past = w + n - (size_t)C * 2;
  assert_null(bf16_weights_lookup(past, 4, C, C));
  /* Expert 0's rows running into expert 1's: two matrices, not one. */
  assert_null(bf16_weights_lookup(w + C, R, C, C));
  gemm(0, 1, M, 4, C, 1.0f, x, C, past, C, 0.0f, y, 4);
  gemm(0, 1, M, 4, C, 1.0f, x, C, w_plain + n - (size_t)C * 2, C, 0.0f, y_plain, 4);
  assert_memory_equal(y, y_plain, sizeof(float) * M * 4);
  bf16_weights_forget(w, n);
  bf16_weights_stats(&s1);
  assert_int_equal(s1.tensors, s0.tensors);
  free(w), free(w_plain), free(x), free(y), free(y_plain);
}

/* OpenMP workers reading experts at once, right after an invalidation,
 * as the MoE layer's per-expert GEMMs do. */
static void test_concurrent_workers(void **state) {
  (void)state;
  enum { E = 8, R = 32, C = 64, ROUNDS = 3 };
  const size_t n = (size_t)E * R * C;
  float *w = test_alloc(n), *x = test_alloc((size_t)M * C);
  fill_weights(w, n, 6);
  test_fill_normal(x, (size_t)M * C, 7, 1.0f);
  float *w_plain = copy_of(w, n), *y = test_alloc((size_t)E * M * R), *y_plain = test_alloc((size_t)E * M * R);
  assert_int_equal(bf16_weights_register_tensor(w, 3, E, R, n), 0);
  for (int round = 0; round < ROUNDS; round++) {
    for (size_t i = 0; i < n; i++) w[i] = w_plain[i] = w[i] * 0.5f + 0.125f * (float)round;
    bf16_weights_invalidate(w, n);
#pragma omp parallel for schedule(dynamic, 1) num_threads(4)
    for (int e = 0; e < 2 * E; e++) {
      const int ex = e % E;
      float *out = (e < E ? y : y_plain) + (size_t)ex * M * R;
      linear_forward(out, x, (e < E ? w : w_plain) + (size_t)ex * R * C, M, C, R, 0);
    }
    assert_memory_equal(y, y_plain, sizeof(float) * E * M * R);
  }
  bf16_weights_forget(w, n);
  free(w), free(w_plain), free(x), free(y), free(y_plain);
}

static void test_off_and_environment(void **state) {
  (void)state;
  float *w = test_alloc((size_t)N * K);
  fill_weights(w, (size_t)N * K, 8);
  bf16_weights_set_enabled(0);
  assert_false(bf16_weights_enabled());
  assert_int_equal(bf16_weights_register(w, N, K), 0);
  assert_null(bf16_weights_lookup(w, N, K, K)); /* off: nothing registered, nothing read */
  Bf16WeightStats s;
  bf16_weights_stats(&s);
  assert_int_equal(s.tensors, 0);
  bf16_weights_set_enabled(1);
  assert_int_equal(bf16_weights_register(w, N, K), 0);
  assert_non_null(bf16_weights_lookup(w, N, K, K));
  bf16_weights_set_enabled(0); /* off forgets what was registered */
  bf16_weights_set_enabled(1);
  assert_null(bf16_weights_lookup(w, N, K, K));

  char err[256];
  const char *good[] = {"on", "off", "1", "0", ""};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    setenv("FIVEFOLD_BF16_WEIGHT_CACHE", good[i], 1);
    assert_int_equal(bf16_weights_check_env(err, sizeof err), 0);
  }
  setenv("FIVEFOLD_BF16_WEIGHT_CACHE", "Off!", 1);
  assert_int_equal(bf16_weights_check_env(err, sizeof err), -1);
  assert_non_null(strstr(err, "FIVEFOLD_BF16_WEIGHT_CACHE must be \"on\" or \"off\", got \"Off!\""));
  unsetenv("FIVEFOLD_BF16_WEIGHT_CACHE");
  assert_int_equal(bf16_weights_check_env(err, sizeof err), 0);
  free(w);
}

int main(void) {
  if (!bf16_here()) {
    char why[512] = "";
    kern_bf16_supported(why, sizeof why);
    printf("SKIP: bf16 cannot run here: %s\n", why);
    return 77;
  }
  bf16_weights_set_enabled(1); /* whatever FIVEFOLD_BF16_WEIGHT_CACHE says: the cache is under test */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hits_bit_identical_and_invalidation),
      cmocka_unit_test(test_experts_strides_and_bounds),
      cmocka_unit_test(test_concurrent_workers),
      cmocka_unit_test(test_off_and_environment),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
