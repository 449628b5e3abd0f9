/* conv_transpose2d and instance_norm layers (src/nets/layer_gan.h):
 * gradients of the loss sum(y * dy) with respect to the input and every
 * parameter against central finite differences (the layer's own forward,
 * every element), on strided, padded and output-padded transposed
 * convolutions with and without bias and on instance norm with and
 * without affine parameters; parameter gradients add up over calls and a
 * NULL dx skips only dx; shapes, parameter specs and counts; config errors
 * that name the field. PyTorch parity is tests/torch_ref/gan_layers.py. */
#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "kern/conv2d.h"
#include "nets/layer_gan.h"

typedef int (*Creator)(Layer *, const cJSON *, LayerShape, int, const char *, Error *);

static void create(Creator make, const char *spec_text, LayerShape in, int max_batch, Layer *l) {
  cJSON *spec = cJSON_Parse(spec_text);
  assert_non_null(spec);
  Error err;
  if (make(l, spec, in, max_batch, "test", &err)) fail_msg("%s: %s", spec_text, err.msg);
  cJSON_Delete(spec);
  for (int p = 0; p < l->num_params; p++) {
    l->param[p] = calloc(l->params[p].numel, sizeof(float));
    l->grad[p] = calloc(l->params[p].numel, sizeof(float));
    assert_true(l->param[p] && l->grad[p]);
  }
  l->ops->init(l, 1, 7);
}

static void destroy(Layer *l) {
  for (int p = 0; p < l->num_params; p++) free(l->param[p]), free(l->grad[p]);
  l->ops->free(l);
}

static void fill_normal(float *v, size_t n, uint64_t stream, float scale, float offset) {
  for (size_t i = 0; i < n; i++) v[i] = offset + scale * (float)rng_normal(5, stream, i);
}

static double loss(Layer *l, const float *x, float *y, const float *dy, int n) {
  Error err;
  if (l->ops->forward(l, x, y, n, 1, &err)) fail_msg("%s", err.msg);
  double s = 0.0;
  for (size_t i = 0; i < (size_t)n * layer_shape_numel(l->out); i++) s += (double)y[i] * dy[i];
  return s;
}

/* max |analytic - numeric| / max |numeric| over every element of v. */
static double fd_error(Layer *l, float *x, float *y, const float *dy, int n, float *v, size_t count,
                       const float *analytic, float h) {
  double worst = 0.0, scale = 1e-6;
  for (size_t i = 0; i < count; i++) {
    const float keep = v[i];
    v[i] = keep + h;
    const double up = loss(l, x, y, dy, n);
    v[i] = keep - h;
    const double down = loss(l, x, y, dy, n);
    v[i] = keep;
    const double numeric = (up - down) / (2.0 * h);
    worst = fmax(worst, fabs(numeric - analytic[i]));
    scale = fmax(scale, fabs(numeric));
  }
  return worst / scale;
}

/* The whole check for one layer: input and every parameter. */
static void gradient_check(Creator make, const char *spec, LayerShape in, int n, float h, double tol) {
  Layer l;
  create(make, spec, in, n + 1, &l);
  for (int p = 0; p < l.num_params; p++) /* away from the init's special values (ones, zeros) */
    fill_normal(l.param[p], l.params[p].numel, 100 + (uint64_t)p, 0.5f, 0.8f);
  const size_t nx = (size_t)n * layer_shape_numel(l.in), ny = (size_t)n * layer_shape_numel(l.out);
  float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y), *dy = malloc(ny * sizeof *dy);
  float *dx = malloc(nx * sizeof *dx);
  fill_normal(x, nx, 1, 1.0f, 0.3f);
  fill_normal(dy, ny, 2, 1.0f, 0.0f);
  Error err;
  loss(&l, x, y, dy, n);
  if (l.ops->backward(&l, x, y, dy, dx, n, &err)) fail_msg("%s", err.msg);
  float *grads[LAYER_MAX_PARAMS];
  for (int p = 0; p < l.num_params; p++) {
    grads[p] = malloc(l.params[p].numel * sizeof(float));
    memcpy(grads[p], l.grad[p], l.params[p].numel * sizeof(float));
  }
  double e = fd_error(&l, x, y, dy, n, x, nx, dx, h);
  print_message("%s: dx %.2e", spec, e);
  if (e > tol) fail_msg("%s: dx differs from finite differences by %.3e (tolerance %.1e)", spec, e, tol);
  for (int p = 0; p < l.num_params; p++) {
    e = fd_error(&l, x, y, dy, n, l.param[p], l.params[p].numel, grads[p], h);
    print_message(", d%s %.2e", l.params[p].suffix, e);
    if (e > tol) fail_msg("%s: d%s differs by %.3e", spec, l.params[p].suffix, e);
  }
  print_message("\n");
  /* Parameter gradients add up; a NULL dx gives the same parameter gradients. */
  loss(&l, x, y, dy, n);
  assert_int_equal(l.ops->backward(&l, x, y, dy, NULL, n, &err), 0);
  for (int p = 0; p < l.num_params; p++)
    for (size_t i = 0; i < l.params[p].numel; i++)
      if (fabsf(l.grad[p][i] - 2.0f * grads[p][i]) > 1e-5f * (1.0f + fabsf(grads[p][i])))
        fail_msg("%s: grad %s[%zu] %g after two backward passes, expected %g", spec, l.params[p].suffix, i,
                 l.grad[p][i], 2.0f * grads[p][i]);
  for (int p = 0; p < l.num_params; p++) free(grads[p]);
  free(x), free(y), free(dy), free(dx);
  destroy(&l);
}

static void test_conv_transpose_gradients(void **state) {
  (void)state;
  const LayerShape in = {3, 4, 5};
  gradient_check(layer_create_conv_transpose2d,
                 "{\"out_channels\": 2, \"kernel\": 3, \"stride\": 2, \"padding\": 1, "
                 "\"output_padding\": 1}",
                 in, 2, 1e-2f, 5e-4);
  gradient_check(layer_create_conv_transpose2d, "{\"out_channels\": 4, \"kernel\": [2, 3], \"bias\": false}", in, 1,
                 1e-2f, 5e-4);
  gradient_check(layer_create_conv_transpose2d,
                 "{\"out_channels\": 2, \"kernel\": 4, \"stride\": [2, 1], "
                 "\"padding\": [1, 2]}",
                 in, 2, 1e-2f, 5e-4);
  conv2d_cache_clear();
}

static void test_instance_norm_gradients(void **state) {
  (void)state;
  const LayerShape in = {3, 3, 4};
  gradient_check(layer_create_instance_norm, "{\"affine\": true}", in, 2, 4e-3f, 1e-3);
  gradient_check(layer_create_instance_norm, "{}", in, 2, 4e-3f, 1e-3);
  gradient_check(layer_create_instance_norm, "{\"affine\": true, \"eps\": 0.1}", (LayerShape){2, 1, 5}, 3, 4e-3f, 1e-3);
}

static void test_shapes_and_counts(void **state) {
  (void)state;
  Layer l;
  create(layer_create_conv_transpose2d,
         "{\"out_channels\": 8, \"kernel\": 3, \"stride\": 2, \"padding\": 1, "
         "\"output_padding\": 1}",
         (LayerShape){16, 10, 12}, 4, &l);
  assert_true(l.out.c == 8 && l.out.h == 20 && l.out.w == 24); /* (in - 1) 2 - 2 + 3 + 1 */
  assert_int_equal(l.num_params, 2);
  assert_string_equal(l.params[0].suffix, "weight");
  assert_true(l.params[0].ndim == 4 && l.params[0].shape[0] == 16 && l.params[0].shape[1] == 8);
  assert_true(l.params[1].numel == 8 && l.params[1].no_weight_decay);
  assert_true(l.mults_per_sample == 16.0 * 8 * 9 * 10 * 12);
  /* PyTorch's init: uniform in +-1/sqrt(8 * 9). */
  float lo = 1, hi = -1;
  for (size_t i = 0; i < l.params[0].numel; i++) lo = fminf(lo, l.param[0][i]), hi = fmaxf(hi, l.param[0][i]);
  const float bound = 1.0f / sqrtf(72.0f);
  assert_true(lo >= -bound && hi <= bound && hi - lo > 1.8f * bound);
  destroy(&l);
  create(layer_create_instance_norm, "{\"affine\": true}", (LayerShape){5, 6, 7}, 2, &l);
  assert_true(l.out.c == 5 && l.out.h == 6 && l.out.w == 7 && l.num_params == 2);
  assert_true(l.param[0][0] == 1.0f && l.param[1][0] == 0.0f);
  assert_true(l.mults_per_sample == 3.0 * 5 * 6 * 7);
  /* Evaluation keeps no statistics, so a backward after it is refused. */
  float x[2 * 5 * 6 * 7] = {0}, y[2 * 5 * 6 * 7];
  Error err;
  assert_int_equal(l.ops->forward(&l, x, y, 2, 0, &err), 0);
  assert_int_equal(l.ops->backward(&l, x, y, y, NULL, 2, &err), ERR_INTERNAL);
  assert_int_equal(l.ops->forward(&l, x, y, 3, 1, &err), ERR_ARG); /* above max_batch */
  destroy(&l);
  create(layer_create_instance_norm, "{}", (LayerShape){5, 6, 7}, 2, &l);
  assert_int_equal(l.num_params, 0);
  destroy(&l);
  conv2d_cache_clear();
}

static void expect_config_error(Creator make, const char *spec_text, const char *field) {
  cJSON *spec = cJSON_Parse(spec_text);
  assert_non_null(spec);
  Layer l;
  Error err = {0};
  int rc = make(&l, spec, (LayerShape){3, 4, 4}, 2, "cfg.json: model.layers[1]", &err);
  cJSON_Delete(spec);
  if (rc != ERR_CONFIG) fail_msg("%s: rc %d, expected ERR_CONFIG (%s)", spec_text, rc, err.msg);
  if (!strstr(err.msg, "cfg.json: model.layers[1]") || !strstr(err.msg, field))
    fail_msg("%s: message '%s' does not name '%s'", spec_text, err.msg, field);
}

static void test_config_errors(void **state) {
  (void)state;
  expect_config_error(layer_create_conv_transpose2d, "{\"kernel\": 3}", "out_channels");
  expect_config_error(layer_create_conv_transpose2d, "{\"out_channels\": 2}", "kernel");
  expect_config_error(layer_create_conv_transpose2d, "{\"out_channels\": 2, \"kernel\": 3, \"output_padding\": 1}",
                      "output_padding");
  expect_config_error(layer_create_conv_transpose2d, "{\"out_channels\": 2, \"kernel\": 3, \"padding\": 3}", "padding");
  expect_config_error(layer_create_conv_transpose2d, "{\"out_channels\": 2, \"kernel\": 3, \"strde\": 2}", "strde");
  expect_config_error(layer_create_instance_norm, "{\"affine\": 1}", "affine");
  expect_config_error(layer_create_instance_norm, "{\"eps\": -1}", "eps");
  expect_config_error(layer_create_instance_norm, "{\"momentum\": 0.1}", "momentum");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv_transpose_gradients),
      cmocka_unit_test(test_instance_norm_gradients),
      cmocka_unit_test(test_shapes_and_counts),
      cmocka_unit_test(test_config_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
