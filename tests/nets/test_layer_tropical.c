/* The tropical layer kinds (nets/layer_tropical.h): central finite
 * differences of every variant's input and parameter gradients on
 * tie-free data, the first-index tie rule through the layers, the
 * backward contract (dx overwritten, parameter gradients added), the
 * re-centring hook leaving the function unchanged, the initial weights
 * staying within "init_range", the standardisation's gradient, the
 * operation counts and the config errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "kern/kern_test_util.h"
#include "kern/tropical.h"
#include "nets/layer_tropical.h"

typedef int (*CreateFn)(Layer *, const cJSON *, LayerShape, int, const char *, Error *);

/* A layer with its parameters and gradients in buffers of its own. */
typedef struct Bound {
  Layer l;
  float *param[LAYER_MAX_PARAMS], *grad[LAYER_MAX_PARAMS];
} Bound;

static int make(Bound *b, CreateFn create, const char *json, LayerShape in, int max_batch, Error *err) {
  cJSON *spec = cJSON_Parse(json);
  if (!spec) fail_msg("bad JSON in the test: %s", json);
  memset(b, 0, sizeof *b);
  int rc = create(&b->l, spec, in, max_batch, "test", err);
  cJSON_Delete(spec);
  if (rc) return rc;
  for (int i = 0; i < b->l.num_params; i++) {
    b->l.param[i] = b->param[i] = test_alloc(b->l.params[i].numel);
    b->l.grad[i] = b->grad[i] = test_alloc(b->l.params[i].numel);
  }
  b->l.ops->init(&b->l, 5, 1);
  return 0;
}

static void must_make(Bound *b, CreateFn create, const char *json, LayerShape in, int max_batch) {
  Error err = {0};
  if (make(b, create, json, in, max_batch, &err)) fail_msg("%s: %s", json, err.msg);
}

static void unbind(Bound *b) {
  b->l.ops->free(&b->l);
  for (int i = 0; i < LAYER_MAX_PARAMS; i++) free(b->param[i]), free(b->grad[i]);
}

static void ok(int rc, const Error *err) {
  if (rc) fail_msg("%s", err->msg);
}

/* Integers in [0, 16) plus (index mod period) * 2^-10: with fewer than 1024
 * candidates per reduction any two candidates differ by at least 2^-10, and
 * a step of 2^-12 moves no winner; every value is exact in float. */
static void fill_tagged(float *x, size_t n, uint64_t seed, size_t period) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(int)(16.0 * rng_uniform(seed, 3, i)) + (float)(i % period) / 1024.0f;
}

static void fill_ints(float *x, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) x[i] = (float)(int)(16.0 * rng_uniform(seed, 4, i));
}

typedef struct LossCtx {
  Bound *b;
  const float *x;
  float *y;
  const float *r;
  int n;
} LossCtx;

static double layer_loss(void *p) {
  LossCtx *c = p;
  Error err = {0};
  ok(c->b->l.ops->forward(&c->b->l, c->x, c->y, c->n, 1, &err), &err);
  return test_dot_loss(c->y, c->r, (size_t)c->n * layer_shape_numel(c->b->l.out));
}

/* Gradients of sum(y * r) from backward against central differences. */
static void gradcheck(Bound *b, float *x, int n, float step, double tolerance, const char *what) {
  size_t nx = (size_t)n * layer_shape_numel(b->l.in), ny = (size_t)n * layer_shape_numel(b->l.out);
  float *y = test_alloc(ny), *r = test_alloc(ny), *dx = test_alloc(nx);
  test_fill_normal(r, ny, 17, 1.0f);
  Error err = {0};
  LossCtx ctx = {b, x, y, r, n};
  layer_loss(&ctx);
  for (int i = 0; i < b->l.num_params; i++) memset(b->grad[i], 0, b->l.params[i].numel * sizeof(float));
  ok(b->l.ops->backward(&b->l, x, y, r, dx, n, &err), &err);
  double ex = test_gradcheck(x, dx, nx, layer_loss, &ctx, step, 400);
  if (!(ex < tolerance)) fail_msg("%s: dx differs from finite differences by %.3g", what, ex);
  for (int i = 0; i < b->l.num_params; i++) {
    double e = test_gradcheck(b->param[i], b->grad[i], b->l.params[i].numel, layer_loss, &ctx, step, 400);
    if (!(e < tolerance)) fail_msg("%s: d%s differs from finite differences by %.3g", what, b->l.params[i].suffix, e);
  }
  free(y), free(r), free(dx);
}

static const char *const INNERS[] = {"max", "min"}, *const OUTERS[] = {"sum", "max", "min"};

static void test_conv_gradients(void **state) {
  (void)state;
  const LayerShape in = {3, 7, 6};
  const int n = 2;
  for (int i = 0; i < 2; i++)
    for (int o = 0; o < 3; o++) {
      char json[256];
      snprintf(json, sizeof json, "{\"type\":\"tropical_conv2d\",\"inner\":\"%s\",\"outer\":\"%s\","
               "\"out_channels\":4,\"kernel\":3,\"stride\":2,\"padding\":1}", INNERS[i], OUTERS[o]);
      Bound b;
      must_make(&b, layer_create_tropical_conv2d, json, in, n);
      assert_int_equal(b.l.out.c, 4), assert_int_equal(b.l.out.h, 4), assert_int_equal(b.l.out.w, 3);
      size_t nx = (size_t)n * layer_shape_numel(in);
      float *x = test_alloc(nx);
      fill_ints(x, nx, 30 + i * 3 + o);
      fill_tagged(b.param[0], b.l.params[0].numel, 40 + i * 3 + o, (size_t)in.c * 9);
      gradcheck(&b, x, n, 1.0f / 4096.0f, 1e-4, json);
      free(x);
      unbind(&b);
    }
}

static void test_dense_gradients(void **state) {
  (void)state;
  const char *const specs[] = {"{\"type\":\"maxplus\",\"out\":9}", "{\"type\":\"minplus\",\"out\":9}",
                               "{\"type\":\"maxplus\",\"out\":5,\"bias\":false}",
                               "{\"type\":\"minplus\",\"out\":5,\"bias\":false}"};
  const LayerShape in = {2, 3, 5}; /* flattened: 30 features */
  const int n = 4;
  for (int s = 0; s < 4; s++) {
    Bound b;
    must_make(&b, s % 2 ? layer_create_minplus : layer_create_maxplus, specs[s], in, n);
    assert_int_equal(b.l.num_params, s < 2 ? 2 : 1);
    size_t nx = (size_t)n * layer_shape_numel(in);
    float *x = test_alloc(nx);
    fill_ints(x, nx, 50 + s);
    fill_tagged(b.param[0], b.l.params[0].numel, 60 + s, layer_shape_numel(in));
    if (s < 2) test_fill_normal(b.param[1], b.l.params[1].numel, 70 + s, 1.0f);
    gradcheck(&b, x, n, 1.0f / 4096.0f, 1e-4, specs[s]);
    free(x);
    unbind(&b);
  }
}

/* All candidates equal: the first index must take every gradient. */
static void test_conv_tie_rule(void **state) {
  (void)state;
  const LayerShape in = {2, 5, 5};
  const int n = 2, cout = 3, k = 2, stride = 2, oh = 2, ow = 2;
  for (int i = 0; i < 2; i++)
    for (int o = 0; o < 3; o++) {
      char json[256];
      snprintf(json, sizeof json, "{\"type\":\"tropical_conv2d\",\"inner\":\"%s\",\"outer\":\"%s\","
               "\"out_channels\":3,\"kernel\":2,\"stride\":2}", INNERS[i], OUTERS[o]);
      Bound b;
      must_make(&b, layer_create_tropical_conv2d, json, in, n);
      size_t nx = (size_t)n * layer_shape_numel(in), ny = (size_t)n * layer_shape_numel(b.l.out);
      size_t nw = b.l.params[0].numel;
      float *x = test_alloc(nx), *y = test_alloc(ny), *dy = test_alloc(ny), *dx = test_alloc(nx);
      float *want_dx = test_alloc(nx), *want_dw = test_alloc(nw);
      for (size_t t = 0; t < nx; t++) x[t] = 1.5f;
      for (size_t t = 0; t < nw; t++) b.param[0][t] = -0.25f;
      test_fill_normal(dy, ny, 80, 1.0f);
      memset(b.grad[0], 0, nw * sizeof(float));
      Error err = {0};
      ok(b.l.ops->forward(&b.l, x, y, n, 1, &err), &err);
      ok(b.l.ops->backward(&b.l, x, y, dy, dx, n, &err), &err);
      int channels = o == 0 ? in.c : 1; /* outer max/min: channel 0 wins */
      for (int m = 0; m < n; m++)
        for (int c = 0; c < channels; c++)
          for (int oc = 0; oc < cout; oc++)
            for (int p = 0; p < oh; p++)
              for (int q = 0; q < ow; q++) {
                float g = dy[((size_t)(m * cout + oc) * oh + p) * ow + q];
                want_dx[((size_t)(m * in.c + c) * in.h + p * stride) * in.w + q * stride] += g; /* tap (0, 0) */
                want_dw[(size_t)(oc * in.c + c) * k * k] += g;
              }
      assert_true(test_rel_err_ff(dx, want_dx, nx, 1.0) < 1e-6);
      assert_true(test_rel_err_ff(b.grad[0], want_dw, nw, 1.0) < 1e-6);
      free(x), free(y), free(dy), free(dx), free(want_dx), free(want_dw);
      unbind(&b);
    }
}

/* A two-way tie between inputs 1 and 3 (the rest lose): input 1 wins. */
static void test_dense_tie_rule(void **state) {
  (void)state;
  for (int s = 0; s < 2; s++) {
    Bound b;
    must_make(&b, s ? layer_create_minplus : layer_create_maxplus, s ? "{\"type\":\"minplus\",\"out\":3}"
              : "{\"type\":\"maxplus\",\"out\":3}", (LayerShape){5, 1, 1}, 1);
    float loser = s ? 9.0f : -9.0f;
    float x[5] = {loser, 2.0f, loser, 2.0f, loser}, y[3], dy[3] = {1.0f, -2.0f, 0.5f}, dx[5];
    memset(b.param[0], 0, 15 * sizeof(float));
    memset(b.grad[0], 0, 15 * sizeof(float)), memset(b.grad[1], 0, 3 * sizeof(float));
    Error err = {0};
    ok(b.l.ops->forward(&b.l, x, y, 1, 1, &err), &err);
    ok(b.l.ops->backward(&b.l, x, y, dy, dx, 1, &err), &err);
    for (int i = 0; i < 5; i++) assert_true(dx[i] == (i == 1 ? 1.0f - 2.0f + 0.5f : 0.0f));
    for (int j = 0; j < 3; j++)
      for (int i = 0; i < 5; i++) assert_true(b.grad[0][j * 5 + i] == (i == 1 ? dy[j] : 0.0f));
    unbind(&b);
  }
}

/* dx is overwritten (garbage before), parameter gradients add. */
static void test_backward_contract(void **state) {
  (void)state;
  Bound conv, dense;
  must_make(&conv, layer_create_tropical_conv2d, "{\"type\":\"tropical_conv2d\",\"inner\":\"min\",\"outer\":\"sum\","
            "\"out_channels\":2,\"kernel\":3,\"padding\":1}", (LayerShape){2, 4, 4}, 3);
  must_make(&dense, layer_create_maxplus, "{\"type\":\"maxplus\",\"out\":4}", (LayerShape){6, 1, 1}, 3);
  Bound *bs[2] = {&conv, &dense};
  for (int t = 0; t < 2; t++) {
    Bound *b = bs[t];
    const int n = 3;
    size_t nx = (size_t)n * layer_shape_numel(b->l.in), ny = (size_t)n * layer_shape_numel(b->l.out);
    float *x = test_alloc(nx), *y = test_alloc(ny), *dy = test_alloc(ny), *dx1 = test_alloc(nx), *dx2 = test_alloc(nx);
    test_fill_normal(x, nx, 90, 1.0f), test_fill_normal(dy, ny, 91, 1.0f);
    Error err = {0};
    ok(b->l.ops->forward(&b->l, x, y, n, 1, &err), &err);
    float *once[LAYER_MAX_PARAMS];
    for (int i = 0; i < b->l.num_params; i++) memset(b->grad[i], 0, b->l.params[i].numel * sizeof(float));
    ok(b->l.ops->backward(&b->l, x, y, dy, dx1, n, &err), &err);
    for (int i = 0; i < b->l.num_params; i++) {
      once[i] = test_alloc(b->l.params[i].numel);
      memcpy(once[i], b->grad[i], b->l.params[i].numel * sizeof(float));
    }
    for (size_t i = 0; i < nx; i++) dx2[i] = 1e6f;
    ok(b->l.ops->backward(&b->l, x, y, dy, dx2, n, &err), &err);
    assert_memory_equal(dx1, dx2, nx * sizeof(float));
    for (int i = 0; i < b->l.num_params; i++) {
      /* not bit-equal: the second pass adds its terms one by one onto the first's sum */
      for (size_t e = 0; e < b->l.params[i].numel; e++) once[i][e] *= 2.0f;
      assert_true(test_rel_err_ff(b->grad[i], once[i], b->l.params[i].numel, 1.0) < 1e-6);
      free(once[i]);
    }
    ok(b->l.ops->backward(&b->l, x, y, dy, NULL, n, &err), &err); /* a first layer: no dx */
    assert_int_not_equal(b->l.ops->forward(&b->l, x, y, n + 1, 1, &err), 0); /* beyond max_batch */
    free(x), free(y), free(dy), free(dx1), free(dx2);
    unbind(b);
  }
}

/* after_update shifts each row's mean into the bias: the same outputs
 * and the same input gradient, weight rows now centred. */
static void test_recenter_keeps_function(void **state) {
  (void)state;
  for (int s = 0; s < 2; s++) {
    Bound b;
    must_make(&b, s ? layer_create_minplus : layer_create_maxplus,
              s ? "{\"type\":\"minplus\",\"out\":7,\"recenter\":true}" : "{\"type\":\"maxplus\",\"out\":7,"
              "\"recenter\":true}", (LayerShape){12, 1, 1}, 4);
    assert_non_null(b.l.ops->after_update);
    for (size_t i = 0; i < 7 * 12; i++) b.param[0][i] += 0.5f * (float)(i / 12); /* rows off-centre */
    test_fill_normal(b.param[1], 7, 3, 1.0f);
    const int n = 4;
    float x[4 * 12], y0[4 * 7], y1[4 * 7], dy[4 * 7], dx0[4 * 12], dx1[4 * 12];
    test_fill_normal(x, sizeof x / sizeof x[0], 4, 1.0f), test_fill_normal(dy, sizeof dy / sizeof dy[0], 5, 1.0f);
    Error err = {0};
    ok(b.l.ops->forward(&b.l, x, y0, n, 1, &err), &err);
    ok(b.l.ops->backward(&b.l, x, y0, dy, dx0, n, &err), &err);
    b.l.ops->after_update(&b.l);
    for (int j = 0; j < 7; j++) {
      double mean = 0.0;
      for (int i = 0; i < 12; i++) mean += b.param[0][j * 12 + i];
      assert_true(fabs(mean / 12) < 1e-6);
    }
    ok(b.l.ops->forward(&b.l, x, y1, n, 1, &err), &err);
    ok(b.l.ops->backward(&b.l, x, y1, dy, dx1, n, &err), &err);
    assert_true(test_rel_err_ff(y1, y0, 4 * 7, 1.0) < 1e-6);
    assert_memory_equal(dx0, dx1, sizeof dx0);
    unbind(&b);
  }
  Bound plain;
  must_make(&plain, layer_create_maxplus, "{\"type\":\"maxplus\",\"out\":3}", (LayerShape){4, 1, 1}, 1);
  float before[12];
  memcpy(before, plain.param[0], sizeof before);
  plain.l.ops->after_update(&plain.l); /* without the option: nothing moves */
  assert_memory_equal(before, plain.param[0], sizeof before);
  unbind(&plain);
}

/* Dense tropical weights start uniform in [-r, r): inside the range and
 * spread over it (min and max near its ends, mean near 0), the default r
 * being 1; the bias starts at 0. */
static void test_init_range(void **state) {
  (void)state;
  static const struct {
    const char *json;
    double r;
  } cases[] = {
      {"{\"type\":\"maxplus\",\"out\":40}", 1.0},
      {"{\"type\":\"maxplus\",\"out\":40,\"init_range\":0.05}", 0.05},
      {"{\"type\":\"minplus\",\"out\":40,\"init_range\":3}", 3.0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    Bound b;
    must_make(&b, strstr(cases[c].json, "minplus") ? layer_create_minplus : layer_create_maxplus, cases[c].json,
              (LayerShape){50, 1, 1}, 2);
    const size_t n = b.l.params[0].numel;
    double lo = INFINITY, hi = -INFINITY, sum = 0.0;
    for (size_t i = 0; i < n; i++) {
      double w = b.param[0][i];
      lo = fmin(lo, w), hi = fmax(hi, w), sum += w;
    }
    const double r = cases[c].r;
    if (!(lo >= -r && hi < r)) fail_msg("%s: weights in [%g, %g], expected inside [-%g, %g)", cases[c].json, lo, hi, r, r);
    /* 2000 uniform draws: the extremes lie within 1% of the ends (a chance of about e^-20 otherwise) */
    if (!(lo < -0.99 * r && hi > 0.99 * r)) fail_msg("%s: weights in [%g, %g], not spread over +-%g", cases[c].json, lo, hi, r);
    assert_true(fabs(sum / (double)n) < 0.1 * r);
    for (int j = 0; j < 40; j++) assert_true(b.param[1][j] == 0.0f);
    unbind(&b);
  }
}

static void test_standardize(void **state) {
  (void)state;
  Bound b;
  must_make(&b, layer_create_standardize, "{\"type\":\"standardize\"}", (LayerShape){3, 2, 4}, 3);
  assert_int_equal(b.l.num_params, 0);
  const int n = 3, f = 24;
  float x[3 * 24], y[3 * 24];
  test_fill_normal(x, sizeof x / sizeof x[0], 6, 2.0f);
  for (int i = 0; i < n * f; i++) x[i] += 3.0f * (float)(i / f);
  Error err = {0};
  ok(b.l.ops->forward(&b.l, x, y, n, 1, &err), &err);
  for (int m = 0; m < n; m++) {
    double mean = 0.0, sq = 0.0;
    for (int i = 0; i < f; i++) mean += y[m * f + i], sq += (double)y[m * f + i] * y[m * f + i];
    assert_true(fabs(mean / f) < 1e-5 && fabs(sq / f - 1.0) < 1e-3);
  }
  gradcheck(&b, x, n, 1e-2f, 2e-3, "standardize");
  unbind(&b);
}

static void test_counts(void **state) {
  (void)state;
  Bound conv, dense;
  must_make(&conv, layer_create_tropical_conv2d, "{\"type\":\"tropical_conv2d\",\"inner\":\"max\",\"outer\":\"max\","
            "\"out_channels\":4,\"kernel\":3,\"stride\":2,\"padding\":1}", (LayerShape){1, 28, 28}, 2);
  assert_int_equal(conv.l.out.h, 14);
  assert_true(conv.l.mults_per_sample == 0.0);
  assert_true(conv.l.adds_per_sample == 4.0 * 14 * 14 * (1 * 17 + 0));
  must_make(&dense, layer_create_minplus, "{\"type\":\"minplus\",\"out\":10}", (LayerShape){4, 7, 7}, 2);
  assert_true(dense.l.mults_per_sample == 0.0);
  assert_true(dense.l.adds_per_sample == 10.0 * (2 * 196 - 1) + 10);
  assert_int_equal((int)dense.l.params[0].shape[0], 10), assert_int_equal((int)dense.l.params[0].shape[1], 196);
  assert_true(dense.l.params[1].no_weight_decay);
  unbind(&conv), unbind(&dense);
}

static void expect_error(CreateFn create, const char *json, LayerShape in, const char *needle) {
  Bound b;
  Error err = {0};
  int rc = make(&b, create, json, in, 2, &err);
  if (rc == 0) fail_msg("%s was accepted", json);
  assert_int_equal(rc, ERR_CONFIG);
  if (!strstr(err.msg, needle)) fail_msg("%s: '%s' does not mention '%s'", json, err.msg, needle);
}

static void test_config_errors(void **state) {
  (void)state;
  LayerShape img = {1, 8, 8};
  expect_error(layer_create_tropical_conv2d, "{\"type\":\"tropical_conv2d\",\"inner\":\"mean\",\"outer\":\"sum\","
               "\"out_channels\":2,\"kernel\":3}", img, "test.inner");
  expect_error(layer_create_tropical_conv2d, "{\"type\":\"tropical_conv2d\",\"inner\":\"max\",\"outer\":\"sum\","
               "\"out_channels\":2,\"kernel\":3,\"padding\":3}", img, "test.padding");
  expect_error(layer_create_tropical_conv2d, "{\"type\":\"tropical_conv2d\",\"inner\":\"max\",\"outer\":\"sum\","
               "\"out_channels\":2,\"kernel\":9}", img, "does not fit");
  expect_error(layer_create_tropical_conv2d, "{\"type\":\"tropical_conv2d\",\"inner\":\"max\",\"outer\":\"sum\","
               "\"out_channels\":2,\"kernel\":3,\"bias\":true}", img, "test.bias");
  expect_error(layer_create_maxplus, "{\"type\":\"maxplus\"}", img, "test.out");
  expect_error(layer_create_minplus, "{\"type\":\"minplus\",\"out\":3,\"bias\":false,\"recenter\":true}", img,
               "test.recenter");
  expect_error(layer_create_maxplus, "{\"type\":\"maxplus\",\"out\":3,\"init_range\":0}", img, "test.init_range");
  expect_error(layer_create_maxplus, "{\"type\":\"maxplus\",\"out\":3,\"init_range\":-0.5}", img, "test.init_range");
  expect_error(layer_create_minplus, "{\"type\":\"minplus\",\"out\":3,\"init_range\":\"small\"}", img,
               "test.init_range");
  expect_error(layer_create_minplus, "{\"type\":\"minplus\",\"out\":3,\"init_range\":1e9}", img, "test.init_range");
  expect_error(layer_create_maxplus, "{\"type\":\"maxplus\",\"out\":3,\"init\":0.1}", img, "test.init:");
  expect_error(layer_create_standardize, "{\"type\":\"standardize\",\"eps\":-1}", img, "test.eps");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_gradients),      cmocka_unit_test(test_dense_gradients),
      cmocka_unit_test(test_conv_tie_rule),       cmocka_unit_test(test_dense_tie_rule),
      cmocka_unit_test(test_backward_contract),   cmocka_unit_test(test_recenter_keeps_function),
      cmocka_unit_test(test_init_range),
      cmocka_unit_test(test_standardize),         cmocka_unit_test(test_counts),
      cmocka_unit_test(test_config_errors),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  tropical_scratch_release();
  return rc;
}
