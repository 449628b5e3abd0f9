/* The network interface's transformer adapter: its parameter table is the
 * model's (names, shapes, offsets, sizes, weight decay), over the model's
 * buffers, with every gradient in a reduce group; and the interface's
 * lookups (by name, reduce ranges, metrics). */
#include <libgen.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/config.h"
#include "model/model.h"
#include "train/net_transformer.h"
#include "nets/network.h"

static void load_tiny(ModelConfig *cfg) {
  char here[4096], path[4200];
  snprintf(here, sizeof here, "%s", __FILE__);
  snprintf(path, sizeof path, "%s/../../configs/models/tiny/mixtral.json", dirname(here));
  Error err = {0};
  if (model_config_load(cfg, path, &err)) fail_msg("%s", err.msg);
}

static void test_transformer_table(void **state) {
  (void)state;
  ModelConfig cfg;
  load_tiny(&cfg);
  Model m;
  Error err = {0};
  if (model_create(&m, &cfg, 1, 8, &err)) fail_msg("%s", err.msg);
  Network net;
  assert_int_equal(net_transformer_bind(&net, &m, &err), ERR_OK);
  assert_string_equal(net.ops->family, "transformer");
  assert_int_equal(net.num_tensors, m.num_tensors);
  assert_ptr_equal(net.values, m.params);
  assert_ptr_equal(net.grads, m.grads);
  assert_int_equal(net.num_values, m.num_params);
  assert_int_equal(net.num_param_groups, 1);
  size_t covered = 0;
  for (int i = 0; i < m.num_tensors; i++) {
    const NetParam *p = &net.params[i];
    assert_string_equal(p->name, m.tensors[i].name);
    assert_int_equal(p->offset, m.tensors[i].offset);
    assert_int_equal(p->numel, m.tensors[i].numel);
    assert_int_equal(p->no_weight_decay, m.tensors[i].no_weight_decay);
    int64_t numel = 1;
    for (int d = 0; d < p->ndim; d++) numel *= p->shape[d];
    assert_int_equal((size_t)numel, p->numel);
    /* One rank, no folding: every gradient reduces over the replicas, none is a slice. */
    assert_int_equal(p->reduce, NET_REDUCE_DENSE);
    assert_false(p->sharded);
    assert_int_equal(p->param_group, 0);
    covered += p->numel;
  }
  assert_int_equal(covered, m.num_params);
  assert_ptr_equal(network_find_param(&net, m.tensors[0].name), &net.params[0]);
  assert_null(network_find_param(&net, "no.such.tensor"));
  assert_true(network_has_reduce_group(&net, NET_REDUCE_DENSE));
  assert_false(network_has_reduce_group(&net, NET_REDUCE_EXPERT));
  size_t begin[4], end[4];
  assert_int_equal(network_reduce_ranges(&net, NET_REDUCE_EXPERT, begin, end, 4), 0);
  assert_int_equal(network_reduce_ranges(&net, NET_REDUCE_DENSE, begin, end, 4), m.num_tensors);
  assert_int_equal(begin[1], m.tensors[1].offset);
  assert_int_equal(end[1], m.tensors[1].offset + m.tensors[1].numel);
  network_free(&net);
  model_free(&m);
}

static void test_reduce_groups_follow_the_model(void **state) {
  (void)state;
  ModelConfig cfg;
  load_tiny(&cfg);
  Model m;
  Error err = {0};
  if (model_create(&m, &cfg, 1, 8, &err)) fail_msg("%s", err.msg);
  /* Mark tensors the way a folded shard does: routed experts over EDP, a
   * norm held whole by two TP ranks. The adapter must follow. */
  int expert = -1, norm = -1;
  for (int i = 0; i < m.num_tensors; i++) {
    if (expert < 0 && m.tensors[i].is_expert) expert = i;
    if (norm < 0 && m.tensors[i].no_weight_decay) norm = i;
  }
  assert_true(expert >= 0 && norm >= 0);
  m.tensors[expert].reduce_over_edp = 1;
  m.tensors[norm].tp_replicated = 1;
  m.tensors[norm].tp_ranks = 2;
  Network net;
  assert_int_equal(net_transformer_bind(&net, &m, &err), ERR_OK);
  assert_int_equal(net.params[expert].reduce, NET_REDUCE_EXPERT);
  assert_int_equal(net.params[norm].reduce, NET_REDUCE_TP_REPLICATED);
  size_t begin[2], end[2];
  assert_int_equal(network_reduce_ranges(&net, NET_REDUCE_EXPERT, begin, end, 2), 1);
  assert_int_equal(begin[0], m.tensors[expert].offset);
  network_free(&net);
  model_free(&m);
}

static void test_metrics(void **state) {
  (void)state;
  NetMetric metrics[] = {{"loss", 2.5, 3}, {"lm", 2.25, 3}, {"aux", 0.25, 4}};
  assert_true(network_metric(metrics, 3, "lm") == 2.25);
  assert_true(isnan(network_metric(metrics, 3, "z")));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_transformer_table),
      cmocka_unit_test(test_reduce_groups_follow_the_model),
      cmocka_unit_test(test_metrics),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
