/* The instrumented multiplication counter (kern/op_count.h) against the
 * analytic counts: for every network of configs/vision/ (and one config
 * with the kinds those lack: avgpool, leaky_relu, tanh, a strided conv
 * without bias), the multiplications a forward pass really performs per
 * image, counted by the layers' kernel calls in both the training and the
 * evaluation form, equal the sum of the layers' mults_per_sample; and
 * nothing is counted while counting is off. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "base/rng.h"
#include "kern/op_count.h"
#include "nets/vision.h"

#define BATCH 3

/* configs/vision of the source tree this file is in (tests/nets/). */
static void configs_dir(char *buf, size_t cap) {
  snprintf(buf, cap, "%s", __FILE__);
  char *slash = strrchr(buf, '/');
  if (slash) *slash = '\0';
  size_t len = strlen(buf);
  snprintf(buf + len, cap - len, "/../../configs/vision");
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("%s: cannot open", path);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)size + 1);
  assert_non_null(text);
  assert_int_equal(fread(text, 1, (size_t)size, f), (size_t)size);
  text[size] = '\0';
  fclose(f);
  return text;
}

/* Counted against analytic for the "model" object `model`; returns the
 * analytic count per image. */
static double check_model(const cJSON *model, const char *name) {
  VisionConfig cfg;
  Error err = {0};
  if (vision_config_from_json(&cfg, model, name, &err)) fail_msg("%s", err.msg);
  Network net;
  if (vision_create(&net, &cfg, BATCH, &err)) fail_msg("%s: %s", name, err.msg);
  vision_init_weights(&net, 7);
  size_t numel = (size_t)cfg.in_c * cfg.in_h * cfg.in_w;
  float *x = malloc(BATCH * numel * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < BATCH * numel; i++) x[i] = (float)rng_normal(11, 0, i);
  int y[BATCH] = {0, 1 % cfg.classes, 2 % cfg.classes};
  VisionBatch b = {.n = BATCH, .x = x, .y = y};
  double analytic = vision_mults_per_sample(&net);
  for (int train = 0; train <= 1; train++) {
    double counted = -1;
    if (vision_count_mults(&net, &b, train, &counted, &err)) fail_msg("%s: %s", name, err.msg);
    printf("%-28s %s forward: counted %.0f, analytic %.0f multiplications per image\n", name,
           train ? "training" : "evaluation", counted, analytic);
    if (counted != analytic)
      fail_msg("%s (%s forward): %.0f multiplications per image counted, the layers' formulas say %.0f", name,
               train ? "training" : "evaluation", counted, analytic);
  }
  /* counting off: a plain forward adds nothing */
  double before = op_count_mults_total;
  if (net.ops->forward(&net, 0, &b, &err)) fail_msg("%s", err.msg);
  assert_true(op_count_mults_total == before);
  free(x);
  network_free(&net);
  return analytic;
}

static void test_every_vision_config(void **state) {
  (void)state;
  char dir[4096];
  configs_dir(dir, sizeof dir);
  DIR *d = opendir(dir);
  if (!d) fail_msg("%s: cannot open the config directory", dir);
  int checked = 0, with_mults = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".json")) continue;
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    char *text = read_text(path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) fail_msg("%s: not JSON", path);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    assert_non_null(model);
    with_mults += check_model(model, e->d_name) > 0;
    checked++;
    cJSON_Delete(root);
  }
  closedir(d);
  /* the shipped networks: 13 configs, every one with a linear layer */
  if (checked < 13) fail_msg("%s: %d configs, expected at least 13", dir, checked);
  assert_int_equal(with_mults, checked);
}

static void test_other_kinds(void **state) {
  (void)state;
  const char *json =
      "{\"family\":\"vision\",\"input\":[2,9,9],\"classes\":4,\"layers\":["
      "{\"type\":\"conv2d\",\"out_channels\":3,\"kernel\":[3,2],\"stride\":2,\"padding\":1,\"bias\":false},"
      "{\"type\":\"leaky_relu\"},{\"type\":\"avgpool\",\"kernel\":2},{\"type\":\"tanh\"},"
      "{\"type\":\"tropical_conv2d\",\"inner\":\"min\",\"outer\":\"sum\",\"out_channels\":2,\"kernel\":2},"
      "{\"type\":\"standardize\"},{\"type\":\"maxplus\",\"out\":5},{\"type\":\"minplus\",\"out\":6,\"bias\":false},"
      "{\"type\":\"linear\",\"out\":4,\"bias\":false}]}";
  cJSON *model = cJSON_Parse(json);
  assert_non_null(model);
  /* conv 3x5x5 outputs of 2x3x2 taps, leaky 75, avgpool 3x2x2 outputs, standardize 2x(2x1x1), linear 6x4 */
  assert_true(check_model(model, "inline") == 75.0 * 12 + 75 + 12 + 2 * 2 + 24);
  cJSON_Delete(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_vision_config),
      cmocka_unit_test(test_other_kinds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
