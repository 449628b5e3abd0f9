/* The classic layer kinds (linear, conv2d, maxpool, avgpool, relu,
 * leaky_relu, tanh): every input and parameter gradient against central
 * finite differences of L = sum(y * r) for a fixed random r, with inputs
 * kept away from kinks and ties; the max pool's tie rule (the first input
 * of the window wins); and each kind's multiplication and addition counts
 * against a direct loop that counts the operations it performs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "base/rng.h"
#include "nets/layer.h"

typedef struct Bound {
  Layer l;
  float *buf[LAYER_MAX_PARAMS], *gbuf[LAYER_MAX_PARAMS];
} Bound;

static void make(Bound *b, const char *json, LayerShape in, int n) {
  cJSON *spec = cJSON_Parse(json);
  assert_non_null(spec);
  Error err = {0};
  if (layer_create(&b->l, spec, in, n, "test", &err)) fail_msg("%s: %s", json, err.msg);
  cJSON_Delete(spec);
  for (int t = 0; t < b->l.num_params; t++) {
    b->l.param[t] = b->buf[t] = calloc(b->l.params[t].numel, sizeof(float));
    b->l.grad[t] = b->gbuf[t] = calloc(b->l.params[t].numel, sizeof(float));
  }
  b->l.ops->init(&b->l, 7, 3);
}

static void unmake(Bound *b) {
  for (int t = 0; t < b->l.num_params; t++) free(b->buf[t]), free(b->gbuf[t]);
  layer_free(&b->l);
}

static double objective(Bound *b, const float *x, const float *r, float *y, int n) {
  Error err = {0};
  if (b->l.ops->forward(&b->l, x, y, n, 1, &err)) fail_msg("%s", err.msg);
  double sum = 0;
  for (size_t i = 0, e = (size_t)n * layer_shape_numel(b->l.out); i < e; i++) sum += (double)y[i] * r[i];
  return sum;
}

/* Inputs: distinct values spaced `gap` apart in a random order (so no two
 * pooled values tie and none lies within gap/2 of zero), or N(0, 1). */
static void fill_inputs(float *x, size_t count, double gap, uint64_t seed) {
  for (size_t i = 0; i < count; i++) x[i] = (float)rng_normal(seed, 1, i);
  if (gap <= 0) return;
  for (size_t i = 0; i < count; i++) x[i] = (float)(gap * ((double)i - (double)count / 2 + 0.5));
  for (size_t i = count - 1; i > 0; i--) {
    size_t j = (size_t)(rng_uniform(seed, 2, i) * (double)(i + 1));
    float t = x[i];
    x[i] = x[j], x[j] = t;
  }
}

static void check_one(const char *what, size_t i, double analytic, double numeric) {
  double tol = 2e-3 + 2e-3 * fabs(numeric);
  if (!(fabs(analytic - numeric) <= tol))
    fail_msg("%s[%zu]: backward %.6g, finite differences %.6g", what, i, analytic, numeric);
}

/* Gradients of L against central differences, every element. */
static void check_gradients(const char *json, LayerShape in, int n, double gap, double eps) {
  Bound b;
  make(&b, json, in, n);
  size_t nx = (size_t)n * layer_shape_numel(in), ny = (size_t)n * layer_shape_numel(b.l.out);
  float *x = malloc(nx * sizeof(float)), *y = malloc(ny * sizeof(float)), *r = malloc(ny * sizeof(float));
  float *dx = malloc(nx * sizeof(float));
  fill_inputs(x, nx, gap, 11);
  for (size_t i = 0; i < ny; i++) r[i] = (float)rng_normal(12, 0, i);
  Error err = {0};
  objective(&b, x, r, y, n);
  for (int t = 0; t < b.l.num_params; t++) memset(b.gbuf[t], 0, b.l.params[t].numel * sizeof(float));
  if (b.l.ops->backward(&b.l, x, y, r, dx, n, &err)) fail_msg("%s", err.msg);
  for (size_t i = 0; i < nx; i++) {
    float keep = x[i];
    x[i] = keep + (float)eps;
    double up = objective(&b, x, r, y, n);
    x[i] = keep - (float)eps;
    double down = objective(&b, x, r, y, n);
    x[i] = keep;
    check_one("dx", i, dx[i], (up - down) / (2 * eps));
  }
  for (int t = 0; t < b.l.num_params; t++)
    for (size_t i = 0; i < b.l.params[t].numel; i++) {
      float keep = b.buf[t][i];
      b.buf[t][i] = keep + (float)eps;
      double up = objective(&b, x, r, y, n);
      b.buf[t][i] = keep - (float)eps;
      double down = objective(&b, x, r, y, n);
      b.buf[t][i] = keep;
      check_one(b.l.params[t].suffix, i, b.gbuf[t][i], (up - down) / (2 * eps));
    }
  /* Parameter gradients add into grad[]: a second backward doubles them. */
  if (b.l.num_params > 0) {
    float first = b.gbuf[0][0];
    objective(&b, x, r, y, n);
    if (b.l.ops->backward(&b.l, x, y, r, NULL, n, &err)) fail_msg("%s", err.msg);
    assert_true(fabsf(b.gbuf[0][0] - 2 * first) <= 1e-5f * (1 + fabsf(first)));
  }
  free(x), free(y), free(r), free(dx);
  unmake(&b);
}

static void test_linear_gradients(void **state) {
  (void)state;
  check_gradients("{\"type\":\"linear\",\"out\":4}", (LayerShape){2, 3, 2}, 3, 0, 1e-2);
  check_gradients("{\"type\":\"linear\",\"out\":3,\"bias\":false}", (LayerShape){5, 1, 1}, 2, 0, 1e-2);
}

static void test_conv_gradients(void **state) {
  (void)state;
  check_gradients("{\"type\":\"conv2d\",\"out_channels\":3,\"kernel\":3,\"padding\":1}", (LayerShape){2, 5, 6}, 2, 0,
                  1e-2);
  check_gradients("{\"type\":\"conv2d\",\"out_channels\":2,\"kernel\":[3,2],\"stride\":2,\"bias\":false}",
                  (LayerShape){3, 7, 6}, 2, 0, 1e-2);
}

static void test_pool_gradients(void **state) {
  (void)state;
  check_gradients("{\"type\":\"maxpool\",\"kernel\":2}", (LayerShape){2, 6, 6}, 2, 0.05, 1e-2);
  check_gradients("{\"type\":\"maxpool\",\"kernel\":3,\"stride\":2}", (LayerShape){1, 7, 8}, 2, 0.05, 1e-2);
  check_gradients("{\"type\":\"avgpool\",\"kernel\":2}", (LayerShape){2, 6, 5}, 2, 0, 1e-2);
  check_gradients("{\"type\":\"avgpool\",\"kernel\":[3,2],\"stride\":1}", (LayerShape){1, 5, 5}, 2, 0, 1e-2);
}

static void test_activation_gradients(void **state) {
  (void)state;
  check_gradients("{\"type\":\"relu\"}", (LayerShape){2, 3, 4}, 2, 0.05, 1e-2);
  check_gradients("{\"type\":\"leaky_relu\",\"slope\":0.2}", (LayerShape){2, 3, 4}, 2, 0.05, 1e-2);
  check_gradients("{\"type\":\"tanh\"}", (LayerShape){3, 2, 2}, 2, 0, 1e-2);
}

/* Equal values in a window: the gradient goes to the first of them in
 * row-major order, and only to it. */
static void test_maxpool_first_index_wins(void **state) {
  (void)state;
  Bound b;
  make(&b, "{\"type\":\"maxpool\",\"kernel\":2}", (LayerShape){1, 2, 4}, 1);
  /* window 0: rows 0-1, cols 0-1 = {1, 3, 3, 3}: the first 3 (index 1) wins;
   * window 1: cols 2-3 = {5, 5, 5, 5}: index 2 wins */
  float x[8] = {1, 3, 5, 5, 3, 3, 5, 5}, y[2], dy[2] = {1.5f, -2.0f}, dx[8];
  Error err = {0};
  assert_int_equal(b.l.ops->forward(&b.l, x, y, 1, 1, &err), 0);
  assert_true(y[0] == 3 && y[1] == 5);
  assert_int_equal(b.l.ops->backward(&b.l, x, y, dy, dx, 1, &err), 0);
  const float expect[8] = {0, 1.5f, -2.0f, 0, 0, 0, 0, 0};
  for (int i = 0; i < 8; i++)
    if (dx[i] != expect[i]) fail_msg("dx[%d] = %g, expected %g (first index wins)", i, dx[i], expect[i]);
  unmake(&b);
}

/* The operations a direct loop performs per sample, counted as it runs:
 * a dense layer's and a convolution's products over every tap (padded
 * taps read zero), a pool's window, an activation's element. */
typedef struct Counts {
  double mults, adds;
} Counts;

static Counts count_linear(int in, int out, int bias) {
  Counts c = {0, 0};
  for (int o = 0; o < out; o++) {
    for (int i = 0; i < in; i++) {
      c.mults++;
      if (i > 0) c.adds++;
    }
    if (bias) c.adds++;
  }
  return c;
}

static Counts count_conv(LayerShape in, int oc, int kh, int kw, int stride, int pad, int bias) {
  Counts c = {0, 0};
  int oh = (in.h + 2 * pad - kh) / stride + 1, ow = (in.w + 2 * pad - kw) / stride + 1;
  for (int o = 0; o < oc * oh * ow; o++) {
    int taps = 0;
    for (int ci = 0; ci < in.c; ci++)
      for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++) {
          c.mults++;
          if (taps++) c.adds++;
        }
    if (bias) c.adds++;
  }
  return c;
}

static void expect_counts(const char *json, LayerShape in, Counts c) {
  Bound b;
  make(&b, json, in, 1);
  if (b.l.mults_per_sample != c.mults || b.l.adds_per_sample != c.adds)
    fail_msg("%s: counts %.0f mults / %.0f adds, the counting loop %.0f / %.0f", json, b.l.mults_per_sample,
             b.l.adds_per_sample, c.mults, c.adds);
  unmake(&b);
}

static void test_operation_counts(void **state) {
  (void)state;
  LayerShape mnist = {1, 28, 28}, feat = {6, 12, 12};
  expect_counts("{\"type\":\"linear\",\"out\":10}", (LayerShape){4, 7, 7}, count_linear(196, 10, 1));
  expect_counts("{\"type\":\"linear\",\"out\":10,\"bias\":false}", (LayerShape){84, 1, 1}, count_linear(84, 10, 0));
  expect_counts("{\"type\":\"conv2d\",\"out_channels\":6,\"kernel\":5}", mnist, count_conv(mnist, 6, 5, 5, 1, 0, 1));
  expect_counts("{\"type\":\"conv2d\",\"out_channels\":4,\"kernel\":3,\"stride\":2,\"padding\":1,\"bias\":false}",
                mnist, count_conv(mnist, 4, 3, 3, 2, 1, 0));
  /* pools: 6 x 6 x 6 windows of 4 */
  expect_counts("{\"type\":\"maxpool\",\"kernel\":2}", feat, (Counts){0, 216 * 3});
  expect_counts("{\"type\":\"avgpool\",\"kernel\":2}", feat, (Counts){216, 216 * 3});
  expect_counts("{\"type\":\"relu\"}", feat, (Counts){0, 864});
  expect_counts("{\"type\":\"leaky_relu\"}", feat, (Counts){864, 864});
  expect_counts("{\"type\":\"tanh\"}", feat, (Counts){0, 0});
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_linear_gradients),       cmocka_unit_test(test_conv_gradients),
      cmocka_unit_test(test_pool_gradients),         cmocka_unit_test(test_activation_gradients),
      cmocka_unit_test(test_maxpool_first_index_wins), cmocka_unit_test(test_operation_counts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
