/* The layer registry (nets/layer.c) and the field readers of layer specs
 * (nets/layer_spec.c): every kind is reachable by its "type", and a bad
 * type, an unknown field, a wrong type or an out-of-range value gives an
 * error that names origin.field and what was expected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "nets/layer.h"
#include "nets/layer_spec.h"

static const LayerShape IMAGE = {3, 8, 8};

/* Creates a layer from JSON text; returns the error code, err holds the message. */
static int create(Layer *l, const char *json, Error *err) {
  cJSON *spec = cJSON_Parse(json);
  assert_non_null(spec);
  memset(err, 0, sizeof *err);
  int rc = layer_create(l, spec, IMAGE, 4, "cfg.json: model.layers[2]", err);
  cJSON_Delete(spec);
  return rc;
}

static void expect_error(const char *json, const char *needle1, const char *needle2) {
  Layer l;
  Error err;
  assert_int_equal(create(&l, json, &err), ERR_CONFIG);
  if (!strstr(err.msg, needle1) || (needle2 && !strstr(err.msg, needle2)))
    fail_msg("for %s expected '%s' and '%s' in: %s", json, needle1, needle2 ? needle2 : "", err.msg);
}

static void test_every_kind_is_registered(void **state) {
  (void)state;
  static const char *const SPECS[] = {
      "{\"type\":\"linear\",\"out\":5}",
      "{\"type\":\"conv2d\",\"out_channels\":2,\"kernel\":3,\"padding\":1}",
      "{\"type\":\"maxpool\",\"kernel\":2}",
      "{\"type\":\"avgpool\",\"kernel\":2,\"stride\":1}",
      "{\"type\":\"relu\"}",
      "{\"type\":\"leaky_relu\",\"slope\":0.2}",
      "{\"type\":\"tanh\"}",
  };
  static const LayerShape OUT[] = {{5, 1, 1}, {2, 8, 8}, {3, 4, 4}, {3, 7, 7}, {3, 8, 8}, {3, 8, 8}, {3, 8, 8}};
  for (size_t i = 0; i < sizeof SPECS / sizeof SPECS[0]; i++) {
    Layer l;
    Error err;
    if (create(&l, SPECS[i], &err)) fail_msg("%s: %s", SPECS[i], err.msg);
    cJSON *spec = cJSON_Parse(SPECS[i]);
    assert_string_equal(l.ops->kind, cJSON_GetObjectItem(spec, "type")->valuestring);
    assert_non_null(strstr(layer_kinds(), l.ops->kind));
    cJSON_Delete(spec);
    assert_int_equal(l.out.c, OUT[i].c);
    assert_int_equal(l.out.h, OUT[i].h);
    assert_int_equal(l.out.w, OUT[i].w);
    layer_free(&l);
  }
}

static void test_bad_specs_name_the_field(void **state) {
  (void)state;
  expect_error("{\"type\":\"lineer\",\"out\":5}", "cfg.json: model.layers[2].type", "did you mean \"linear\"");
  expect_error("{\"type\":\"transformer\"}", "model.layers[2].type", "linear, conv2d");
  expect_error("{\"out\":5}", "model.layers[2].type", "required");
  expect_error("[1]", "model.layers[2]", "expected a layer object");
  expect_error("{\"type\":\"linear\",\"out\":5,\"biass\":true}", "model.layers[2].biass", "unknown field");
  expect_error("{\"type\":\"linear\",\"out\":0}", "model.layers[2].out", "expected an integer in 1..");
  expect_error("{\"type\":\"linear\",\"out\":2.5}", "model.layers[2].out", "out of range");
  expect_error("{\"type\":\"linear\",\"out\":5,\"bias\":1}", "model.layers[2].bias", "expected true or false");
  expect_error("{\"type\":\"conv2d\",\"out_channels\":2}", "model.layers[2].kernel", "required");
  expect_error("{\"type\":\"conv2d\",\"out_channels\":2,\"kernel\":[3,3,3]}", "model.layers[2].kernel", "pair");
  expect_error("{\"type\":\"conv2d\",\"out_channels\":2,\"kernel\":9}", "model.layers[2].kernel", "does not fit");
  expect_error("{\"type\":\"conv2d\",\"out_channels\":2,\"kernel\":3,\"padding\":3}", "model.layers[2].padding",
               "below the kernel");
  expect_error("{\"type\":\"maxpool\",\"kernel\":9}", "model.layers[2].kernel", "does not fit");
  expect_error("{\"type\":\"maxpool\",\"kernel\":2,\"stride\":0}", "model.layers[2].stride", "1..");
  expect_error("{\"type\":\"leaky_relu\",\"slope\":2}", "model.layers[2].slope", "expected a number in 0..1");
  expect_error("{\"type\":\"relu\",\"slope\":0.1}", "model.layers[2].slope", "unknown field");
}

static void test_spec_readers(void **state) {
  (void)state;
  cJSON *spec = cJSON_Parse("{\"type\":\"x\",\"k\":[2,3],\"mode\":\"max\",\"f\":0.5,\"s\":\"no\"}");
  Error err = {0};
  int a = 0, b = 0, c = 0;
  assert_int_equal(layer_spec_pair(spec, "k", 1, 0, 1, 9, &a, &b, "o", &err), 0);
  assert_int_equal(a * 10 + b, 23);
  assert_int_equal(layer_spec_int(spec, "absent", 0, 7, 1, 9, &c, "o", &err), 0);
  assert_int_equal(c, 7);
  static const char *const CHOICES[] = {"min", "max", NULL};
  assert_int_equal(layer_spec_choice(spec, "mode", 1, 0, CHOICES, &c, "o", &err), 0);
  assert_int_equal(c, 1);
  assert_int_equal(layer_spec_choice(spec, "s", 1, 0, CHOICES, &c, "o", &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "o.s: expected one of \"min\", \"max\", got \"no\""));
  double d = 0;
  assert_int_equal(layer_spec_double(spec, "f", 1, 0, 1, &d, "o", &err), 0);
  assert_true(d == 0.5);
  assert_int_equal(layer_spec_double(spec, "s", 1, 0, 1, &d, "o", &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "o.s: expected a number"));
  static const char *const KNOWN[] = {"k", "mode", "f", NULL};
  assert_int_equal(layer_spec_check_fields(spec, KNOWN, "o", &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "o.s: unknown field"));
  cJSON_Delete(spec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_kind_is_registered),
      cmocka_unit_test(test_bad_specs_name_the_field),
      cmocka_unit_test(test_spec_readers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
