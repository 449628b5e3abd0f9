/* The choice between overlapped and blocking DP gradient reductions:
 * parallel.overlap_grad_reduce / --overlap-grad-reduce accept auto, 0 and
 * 1 (auto the default, written back as "auto"), and what auto picks for
 * host layouts: blocking only where DP ranks share a host without a spare
 * core per rank, with the reason the dp: line prints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <string.h>

#include "train/dp_grads.h"
#include "train/train_config.h"

static void test_setting_parses_auto_0_1(void **state) {
  (void)state;
  TrainConfig cfg;
  train_config_defaults(&cfg);
  assert_int_equal(cfg.overlap_grad_reduce, TRAIN_AUTO);
  Error err = {0};
  assert_int_equal(train_config_override(&cfg, "--overlap-grad-reduce", "0", &err), 0);
  assert_int_equal(cfg.overlap_grad_reduce, 0);
  assert_int_equal(train_config_override(&cfg, "--overlap-grad-reduce", "1", &err), 0);
  assert_int_equal(cfg.overlap_grad_reduce, 1);
  cJSON *json = train_config_to_json(&cfg);
  char *text = cJSON_PrintUnformatted(json);
  assert_non_null(strstr(text, "\"overlap_grad_reduce\":1"));
  cJSON_free(text), cJSON_Delete(json);
  assert_int_equal(train_config_override(&cfg, "--overlap-grad-reduce", "auto", &err), 0);
  assert_int_equal(cfg.overlap_grad_reduce, TRAIN_AUTO);
  json = train_config_to_json(&cfg);
  text = cJSON_PrintUnformatted(json);
  assert_non_null(strstr(text, "\"overlap_grad_reduce\":\"auto\""));
  cJSON_free(text), cJSON_Delete(json);
  assert_int_not_equal(train_config_override(&cfg, "--overlap-grad-reduce", "2", &err), 0);
  assert_non_null(strstr(err.msg, "--overlap-grad-reduce must be \"auto\", 0 or 1"));
  assert_int_equal(cfg.overlap_grad_reduce, TRAIN_AUTO);
  train_config_free(&cfg);
}

static void test_setting_in_json(void **state) {
  (void)state;
  static const char *good[] = {"\"auto\"", "0", "1", "true"};
  static const int want[] = {TRAIN_AUTO, 0, 1, 1};
  for (int i = 0; i < 4; i++) {
    char text[256];
    snprintf(text, sizeof text, "{\"parallel\": {\"overlap_grad_reduce\": %s}}", good[i]);
    TrainConfig cfg;
    train_config_defaults(&cfg);
    cfg.overlap_grad_reduce = 7;
    Error err = {0};
    train_config_parse(&cfg, text, "run.json", &err); /* other sections may be missing */
    assert_int_equal(cfg.overlap_grad_reduce, want[i]);
    train_config_free(&cfg);
  }
  TrainConfig cfg;
  train_config_defaults(&cfg);
  Error err = {0};
  assert_int_not_equal(train_config_parse(&cfg, "{\"parallel\": {\"overlap_grad_reduce\": \"sometimes\"}}",
                                          "run.json", &err), 0);
  assert_non_null(strstr(err.msg, "run.json: parallel.overlap_grad_reduce must be \"auto\", 0 or 1"));
  train_config_free(&cfg);
}

static void test_auto_choice(void **state) {
  (void)state;
  DpGrads g;
  memset(&g, 0, sizeof g);
  Error err = {0};
  /* 2 ranks x 1 thread on a 2-core host: no spare core, blocking. */
  CommHostLayout shared = {.group_size = 2, .group_hosts = 1, .max_peers_per_host = 2, .host_ranks = 2,
                           .host_threads = 2, .host_cores = 2, .spare_cores = -2};
  assert_int_equal(dp_grads_choose_overlap(&g, TRAIN_AUTO, &shared, &err), 0);
  assert_int_equal(g.overlap, 0);
  assert_string_equal(g.overlap_reason, "auto: 2 ranks share one host, no spare core (2 ranks x 1 thread on 2 cores)");
  /* The same on 4 cores: a spare core per rank, overlapped. */
  CommHostLayout roomy = shared;
  roomy.host_cores = 4, roomy.spare_cores = 0;
  assert_int_equal(dp_grads_choose_overlap(&g, TRAIN_AUTO, &roomy, &err), 0);
  assert_int_equal(g.overlap, 1);
  assert_non_null(strstr(g.overlap_reason, "with a spare core each (2 ranks x 1 thread on 4 cores)"));
  /* One rank per host: overlapped whatever the cores. */
  CommHostLayout apart = shared;
  apart.group_hosts = 2, apart.max_peers_per_host = 1, apart.host_ranks = 1, apart.host_threads = 2;
  apart.spare_cores = -1;
  assert_int_equal(dp_grads_choose_overlap(&g, TRAIN_AUTO, &apart, &err), 0);
  assert_int_equal(g.overlap, 1);
  assert_string_equal(g.overlap_reason, "auto: no two DP ranks share a host");
  /* Explicit settings win, and say so. */
  assert_int_equal(dp_grads_choose_overlap(&g, 1, &shared, &err), 0);
  assert_int_equal(g.overlap, 1);
  assert_string_equal(g.overlap_reason, "parallel.overlap_grad_reduce 1");
  assert_int_equal(dp_grads_choose_overlap(&g, 0, &roomy, &err), 0);
  assert_int_equal(g.overlap, 0);
  assert_int_equal(dp_grads_choose_overlap(&g, 5, &roomy, &err), ERR_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_setting_parses_auto_0_1),
      cmocka_unit_test(test_setting_in_json),
      cmocka_unit_test(test_auto_choice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
