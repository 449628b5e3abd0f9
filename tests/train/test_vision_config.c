/* The run configuration of a vision network (train_config.h with
 * "family": "vision"): the data section is the image set's whatever its
 * place in the file, its errors name file and data.<field>, the resolved
 * config (what checkpoints record) parses back to the same, and transformer
 * data fields are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "train/train_config.h"

#define MODEL                                                                                                   \
  "\"model\": {\"family\": \"vision\", \"input\": [1, 28, 28], \"classes\": 10, \"layers\": ["                  \
  "{\"type\": \"conv2d\", \"out_channels\": 2, \"kernel\": 5}, {\"type\": \"maxpool\", \"kernel\": 4},"        \
  "{\"type\": \"linear\", \"out\": 10}]}"

static void test_parse_and_round_trip(void **state) {
  (void)state;
  TrainConfig cfg;
  Error err = {0};
  /* data before model: still the image set's section */
  const char *text = "{\"data\": {\"val_images\": 1000, \"noise_gaussian\": 0.1, \"noise_on\": \"all\"}, " MODEL
                     ", \"training\": {\"steps\": 3}}";
  if (train_config_parse(&cfg, text, "cfg.json", &err)) fail_msg("%s", err.msg);
  assert_int_equal(cfg.family, TRAIN_FAMILY_VISION);
  assert_int_equal(cfg.images.val_images, 1000);
  assert_int_equal(cfg.images.noise_on, IMAGE_NOISE_ALL);
  assert_int_equal(cfg.vision.num_layers, 3);
  if (train_config_set_world(&cfg, 1, &err) || train_config_finalize(&cfg, &err)) fail_msg("%s", err.msg);
  cJSON *json = train_config_to_json(&cfg);
  char *again = cJSON_PrintUnformatted(json);
  TrainConfig back;
  if (train_config_parse(&back, again, "cfg.json", &err)) fail_msg("%s: %s", again, err.msg);
  assert_memory_equal(&back.images, &cfg.images, sizeof cfg.images);
  assert_string_equal(back.vision.layers_json, cfg.vision.layers_json);
  free(again);
  cJSON_Delete(json);
  train_config_free(&back);
  train_config_free(&cfg);
}

static void expect_error(const char *text, const char *needle) {
  TrainConfig cfg;
  Error err = {0};
  assert_int_equal(train_config_parse(&cfg, text, "cfg.json", &err), ERR_CONFIG);
  if (!strstr(err.msg, needle)) fail_msg("expected '%s' in: %s", needle, err.msg);
}

static void test_errors_name_the_field(void **state) {
  (void)state;
  expect_error("{" MODEL ", \"data\": {\"max_train_images\": -3}}", "cfg.json: data.max_train_images: expected");
  expect_error("{" MODEL ", \"data\": {\"train\": \"shards/train.bin\"}}", "cfg.json: data.train: unknown field");
  expect_error("{\"model\": {\"family\": \"visoin\"}}",
               "cfg.json: model.family: expected \"mlp\", \"vision\" or \"gan\"");
  expect_error("{\"model\": {\"family\": \"vision\", \"input\": [1, 28, 28], \"classes\": 10, \"layers\": ["
               "{\"type\": \"conv2d\", \"out_channels\": 2, \"kernel\": 5}]}}",
               "cfg.json: model.layers[0]: the last layer yields 2 x 24 x 24 = 1152 values per image");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_and_round_trip),
      cmocka_unit_test(test_errors_name_the_field),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
