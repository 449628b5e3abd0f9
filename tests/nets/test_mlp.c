/* The MLP network: every parameter's gradient against central finite
 * differences of the loss (weights and biases of every layer, with a
 * gradient scale), the table's layout, config parsing errors, the
 * synthetic task's reproducibility, and that plain gradient descent
 * learns the task. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "nets/mlp.h"

static const MlpConfig SMALL = {.inputs = 5, .classes = 3, .num_hidden = 2, .hidden = {7, 6}};

typedef struct Data {
  float x[64 * 16];
  int y[64];
  MlpBatch batch;
} Data;

static void make_data(Data *d, const MlpConfig *cfg, uint64_t first, int n) {
  d->batch.x = d->x;
  d->batch.y = d->y;
  mlp_synthetic_batch(cfg, 42, first, n, &d->batch);
}

static double loss_of(Network *net, const MlpBatch *b) {
  Error err = {0};
  if (net->ops->forward(net, 0, b, &err)) fail_msg("%s", err.msg);
  NetMetric m[4];
  assert_int_equal(net->ops->metrics(net, m, 4), 2);
  assert_string_equal(m[0].name, "loss");
  return m[0].value;
}

static void test_gradients_match_finite_differences(void **state) {
  (void)state;
  Network net;
  Error err = {0};
  assert_int_equal(mlp_create(&net, &SMALL, 8, &err), ERR_OK);
  mlp_init_weights(&net, 7);
  for (size_t i = 0; i < net.num_values; i++) net.values[i] += 0.05f * (float)((int)(i % 7) - 3); /* biases too */
  Data d;
  make_data(&d, &SMALL, 100, 6);
  const float scale = 0.5f;
  memset(net.grads, 0, net.num_values * sizeof(float));
  loss_of(&net, &d.batch);
  assert_int_equal(net.ops->backward(&net, 0, &d.batch, scale, &err), ERR_OK);
  int checked = 0, bad = 0;
  for (size_t i = 0; i < net.num_values; i++) {
    float keep = net.values[i];
    const float h = 1e-2f;
    net.values[i] = keep + h;
    double up = loss_of(&net, &d.batch);
    net.values[i] = keep - h;
    double down = loss_of(&net, &d.batch);
    net.values[i] = keep;
    double numeric = scale * (up - down) / (2.0 * h);
    double analytic = net.grads[i];
    if (fabs(numeric - analytic) > 2e-3 + 2e-2 * fabs(numeric)) {
      if (bad++ < 5) fprintf(stderr, "parameter %zu: analytic %.6g, numeric %.6g\n", i, analytic, numeric);
    }
    checked++;
  }
  assert_int_equal((size_t)checked, mlp_num_params(&SMALL));
  assert_int_equal(bad, 0);
  network_free(&net);
}

static void test_table(void **state) {
  (void)state;
  Network net;
  Error err = {0};
  assert_int_equal(mlp_create(&net, &SMALL, 4, &err), ERR_OK);
  assert_string_equal(net.ops->family, "mlp");
  assert_int_equal(net.num_tensors, 6);
  assert_string_equal(net.params[0].name, "layers.0.weight");
  assert_int_equal(net.params[0].shape[0], 7);
  assert_int_equal(net.params[0].shape[1], 5);
  assert_string_equal(net.params[5].name, "layers.2.bias");
  assert_true(net.params[5].no_weight_decay);
  assert_false(net.params[4].no_weight_decay);
  size_t at = 0;
  for (int i = 0; i < net.num_tensors; i++) {
    assert_int_equal(net.params[i].offset, at);
    assert_int_equal(net.params[i].reduce, NET_REDUCE_DENSE);
    at += net.params[i].numel;
  }
  assert_int_equal(at, net.num_values);
  Data d;
  make_data(&d, &SMALL, 0, 5);
  assert_int_equal(net.ops->forward(&net, 1, &d.batch, &err), ERR_ARG); /* one chunk only */
  assert_int_equal(net.ops->forward(&net, 0, &d.batch, &err), ERR_ARG); /* more than max_batch */
  network_free(&net);
}

static void test_config(void **state) {
  (void)state;
  Error err = {0};
  MlpConfig cfg;
  cJSON *ok = cJSON_Parse("{\"family\": \"mlp\", \"inputs\": 16, \"hidden\": [32, 8], \"classes\": 4}");
  assert_int_equal(mlp_config_from_json(&cfg, ok, "run.json", &err), ERR_OK);
  assert_int_equal(cfg.num_hidden, 2);
  assert_int_equal(cfg.hidden[1], 8);
  cJSON *back = mlp_config_to_json(&cfg);
  assert_true(cJSON_Compare(ok, back, 1));
  cJSON_Delete(back);
  cJSON_Delete(ok);
  cJSON *bad = cJSON_Parse("{\"family\": \"mlp\", \"inputs\": 16, \"hidden\": [32], \"classes\": 1}");
  assert_int_equal(mlp_config_from_json(&cfg, bad, "run.json", &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "run.json: model.classes"));
  cJSON_Delete(bad);
  bad = cJSON_Parse("{\"family\": \"mlp\", \"inputs\": 16, \"hiden\": [32], \"classes\": 3}");
  assert_int_equal(mlp_config_from_json(&cfg, bad, "run.json", &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "model.hiden"));
  cJSON_Delete(bad);
}

static void test_task_is_reproducible_and_learnable(void **state) {
  (void)state;
  Data a, b;
  make_data(&a, &SMALL, 1000, 8);
  make_data(&b, &SMALL, 1004, 4);
  assert_memory_equal(a.x + 4 * SMALL.inputs, b.x, 4 * SMALL.inputs * sizeof(float));
  assert_memory_equal(a.y + 4, b.y, 4 * sizeof(int));
  Network net;
  Error err = {0};
  assert_int_equal(mlp_create(&net, &SMALL, 64, &err), ERR_OK);
  mlp_init_weights(&net, 3);
  Data d;
  make_data(&d, &SMALL, 0, 64);
  double first = loss_of(&net, &d.batch), last = first;
  for (int step = 0; step < 300; step++) {
    memset(net.grads, 0, net.num_values * sizeof(float));
    last = loss_of(&net, &d.batch);
    assert_int_equal(net.ops->backward(&net, 0, &d.batch, 1.0f, &err), ERR_OK);
    for (size_t i = 0; i < net.num_values; i++) net.values[i] -= 0.5f * net.grads[i];
  }
  assert_true(last < 0.5 * first);
  network_free(&net);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradients_match_finite_differences),
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_config),
      cmocka_unit_test(test_task_is_reproducible_and_learnable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
