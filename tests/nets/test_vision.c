/* The vision network (nets/vision.h): its parameter table, the whole
 * network's gradient (conv, pool, relu, linear and the softmax
 * cross-entropy, with a loss scale) against central finite differences,
 * a stable loss on huge logits, the operation counts as the layers' sums,
 * and config errors that name the field. */
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
#include "nets/vision.h"

static const char *SMALL =
    "{\"family\":\"vision\",\"input\":[1,6,6],\"classes\":3,\"layers\":["
    "{\"type\":\"conv2d\",\"out_channels\":2,\"kernel\":3,\"padding\":1},{\"type\":\"maxpool\",\"kernel\":2},"
    "{\"type\":\"tanh\"},{\"type\":\"linear\",\"out\":3}]}";

static int config(VisionConfig *cfg, const char *json, Error *err) {
  cJSON *o = cJSON_Parse(json);
  assert_non_null(o);
  memset(err, 0, sizeof *err);
  int rc = vision_config_from_json(cfg, o, "cfg.json", err);
  cJSON_Delete(o);
  return rc;
}

static double loss_of(Network *net, const VisionBatch *b) {
  Error err = {0};
  if (net->ops->forward(net, 0, b, &err)) fail_msg("%s", err.msg);
  NetMetric m[4];
  assert_int_equal(net->ops->metrics(net, m, 4), 2);
  assert_string_equal(m[1].name, "accuracy");
  return m[0].value;
}

static void test_gradients_and_table(void **state) {
  (void)state;
  VisionConfig cfg;
  Error err;
  if (config(&cfg, SMALL, &err)) fail_msg("%s", err.msg);
  Network net;
  if (vision_create(&net, &cfg, 4, &err)) fail_msg("%s", err.msg);
  vision_init_weights(&net, 5);
  assert_int_equal(net.num_tensors, 4);
  assert_string_equal(net.params[0].name, "layers.0.weight");
  assert_string_equal(net.params[1].name, "layers.0.bias");
  assert_string_equal(net.params[3].name, "layers.3.bias");
  assert_true(net.params[1].no_weight_decay && !net.params[2].no_weight_decay);
  assert_int_equal(net.num_values, 2 * 9 + 2 + 3 * 18 + 3);
  /* counts: conv 2x6x6 outputs of 9 taps, pool 18 windows of 4, linear 18 -> 3 */
  assert_true(vision_mults_per_sample(&net) == 72 * 9 + 0 + 54);
  assert_true(vision_adds_per_sample(&net) == 72 * 9 + 18 * 3 + 17 * 3 + 3);
  float x[4 * 36];
  int y[4] = {0, 2, 1, 2};
  for (int i = 0; i < 4 * 36; i++) x[i] = (float)rng_normal(3, 0, (uint64_t)i);
  VisionBatch b = {.n = 4, .x = x, .y = y};
  loss_of(&net, &b);
  memset(net.grads, 0, net.num_values * sizeof(float));
  if (net.ops->backward(&net, 0, &b, 0.5f, &err)) fail_msg("%s", err.msg);
  const double eps = 1e-3; /* small: a pooled window must not change its winner */
  for (size_t i = 0; i < net.num_values; i++) {
    float keep = net.values[i];
    net.values[i] = keep + (float)eps;
    double up = loss_of(&net, &b);
    net.values[i] = keep - (float)eps;
    double down = loss_of(&net, &b);
    net.values[i] = keep;
    double fd = 0.5 * (up - down) / (2 * eps);
    if (fabs(net.grads[i] - fd) > 1e-3 + 1e-2 * fabs(fd))
      fail_msg("parameter %zu: backward %.6g, finite differences %.6g", i, net.grads[i], fd);
  }
  /* huge logits: the loss stays finite (the largest logit is subtracted) */
  for (size_t i = 0; i < net.num_values; i++) net.values[i] *= 1e4f;
  double big = loss_of(&net, &b);
  assert_true(isfinite(big) && big >= 0);
  network_free(&net);
}

static void expect_error(const char *json, const char *needle) {
  VisionConfig cfg;
  Error err;
  assert_int_equal(config(&cfg, json, &err), ERR_CONFIG);
  if (!strstr(err.msg, needle)) fail_msg("expected '%s' in: %s", needle, err.msg);
}

static void test_config_errors(void **state) {
  (void)state;
  expect_error("{\"family\":\"vision\",\"input\":[1,6,6],\"classes\":3,\"layers\":[{\"type\":\"linear\",\"out\":4}]}",
               "cfg.json: model.layers[0]: the last layer yields 4 x 1 x 1 = 4 values per image, expected the 3");
  expect_error("{\"family\":\"vision\",\"input\":[1,6,6],\"classes\":3,\"layers\":[{\"type\":\"conv2d\","
               "\"out_channels\":2,\"kernel\":3,\"strides\":2},{\"type\":\"linear\",\"out\":3}]}",
               "cfg.json: model.layers[0].strides: unknown field");
  expect_error("{\"family\":\"vision\",\"input\":[1,6],\"classes\":3,\"layers\":[]}", "cfg.json: model.input");
  expect_error("{\"family\":\"vision\",\"input\":[1,6,6],\"classes\":3,\"layers\":[]}", "cfg.json: model.layers");
  expect_error("{\"family\":\"vision\",\"input\":[1,6,6],\"layers\":[{\"type\":\"relu\"}]}",
               "cfg.json: model.classes");
  expect_error("{\"family\":\"vision\",\"input\":[1,6,6],\"classes\":3,\"layer\":[]}",
               "cfg.json: model.layer: unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradients_and_table),
      cmocka_unit_test(test_config_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
