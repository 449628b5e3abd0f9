/* Parameter groups that step in phases of their own (nets/network.h,
 * sched/program.h SchedConfig.param_groups, train/phases.h), proven on the
 * MLP with "param_groups": 2: the program has one phase per group (two
 * OPTIM actions naming groups 0 and 1) and passes the checker, which
 * refuses a phase that reaches into another; data-parallel buckets never
 * mix groups; and a phase's update changes its own group's values only.
 * (DP2 against one rank and a bit-exact resume: tests/nets/mlp_groups_test.sh.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "nets/mlp.h"
#include "sched/builders.h"
#include "sched/check.h"
#include "train/phases.h"
#include "train/trainer.h"

static void test_program_has_a_phase_per_group(void **state) {
  (void)state;
  Error err = {0};
  SchedConfig sc = {.schedule = SCHED_SCHEDULE_NONE, .pp = 1, .vpp = 1, .microbatches = 3, .param_groups = 2};
  SchedProgram *prog = NULL;
  if (sched_build(&sc, &prog, &err) || sched_check(prog, &err)) fail_msg("%s", err.msg);
  int optims = 0, reduces[2] = {0, 0}, computes[2] = {0, 0}, phase = 0;
  for (int i = 0; i < prog->num_actions; i++) {
    const SchedAction *a = &prog->actions[i];
    assert_true(a->group == phase); /* phases in order, every action naming its own */
    if (a->kind == SCHED_FWD || a->kind == SCHED_BWD) computes[a->group]++;
    if (a->kind == SCHED_GRAD_REDUCE) reduces[a->group]++;
    if (a->kind == SCHED_OPTIM) {
      assert_int_equal(a->group, optims);
      optims++;
      phase++;
    }
  }
  assert_int_equal(optims, 2);
  assert_int_equal(reduces[0], 1);
  assert_int_equal(reduces[1], 1);
  assert_int_equal(computes[0], 6);
  assert_int_equal(computes[1], 6);
  /* A phase that depends on another one's action is refused, and so is an
   * action of no phase. */
  SchedAction *opt1 = &prog->actions[prog->num_actions - 1];
  int saved = opt1->group;
  opt1->group = opt1->phase = 0;
  assert_int_equal(sched_check(prog, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "another phase"));
  opt1->phase = 1; /* in phase 1, naming group 0 */
  assert_int_equal(sched_check(prog, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "is in phase 1, which steps group 1"));
  opt1->group = 5;
  assert_int_equal(sched_check(prog, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "names no parameter group"));
  opt1->group = saved;
  assert_int_equal(sched_check(prog, &err), ERR_OK);
  sched_program_free(prog);
  /* Pipelines have phases too. */
  SchedConfig pc = {.schedule = SCHED_SCHEDULE_1F1B, .pp = 2, .vpp = 1, .microbatches = 4, .param_groups = 2};
  if (sched_build(&pc, &prog, &err) || sched_check(prog, &err)) fail_msg("%s", err.msg);
  sched_program_free(prog);
}

/* A group that runs k phases in a row (a GAN's critic steps): phases
 * 0..k-1 of group 0, then group 1's, each with its own reduction and
 * OPTIM; the JSON form keeps them; a phase naming the wrong group is refused. */
static void test_repeated_phases(void **state) {
  (void)state;
  Error err = {0};
  SchedConfig sc = {.schedule = SCHED_SCHEDULE_NONE, .pp = 1, .vpp = 1, .microbatches = 2, .param_groups = 2,
                    .phase_repeats = {3, 1}};
  assert_int_equal(sched_config_num_phases(&sc), 4);
  SchedProgram *prog = NULL;
  if (sched_build(&sc, &prog, &err) || sched_check(prog, &err)) fail_msg("%s", err.msg);
  static const int GROUP_OF_PHASE[4] = {0, 0, 0, 1};
  int optims = 0, computes[4] = {0};
  for (int i = 0; i < prog->num_actions; i++) {
    const SchedAction *a = &prog->actions[i];
    assert_int_equal(a->phase, optims); /* in list order, each phase ends with its OPTIM */
    assert_int_equal(a->group, GROUP_OF_PHASE[a->phase]);
    if (a->kind == SCHED_FWD || a->kind == SCHED_BWD) computes[a->phase]++;
    if (a->kind == SCHED_OPTIM) optims++;
  }
  assert_int_equal(optims, 4);
  for (int p = 0; p < 4; p++) assert_int_equal(computes[p], 4);
  cJSON *json = sched_program_to_json(prog);
  SchedProgram *again = NULL;
  if (!json || sched_program_from_json(json, &again, &err)) fail_msg("JSON round trip: %s", err.msg);
  cJSON_Delete(json);
  assert_int_equal(again->config.phase_repeats[0], 3);
  assert_int_equal(again->num_actions, prog->num_actions);
  for (int i = 0; i < prog->num_actions; i++) {
    assert_int_equal(again->actions[i].phase, prog->actions[i].phase);
    assert_int_equal(again->actions[i].group, prog->actions[i].group);
  }
  if (sched_check(again, &err)) fail_msg("%s", err.msg);
  sched_program_free(again);
  prog->actions[prog->num_actions - 1].group = 0; /* the generator phase's OPTIM naming the critic */
  assert_int_equal(sched_check(prog, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "is in phase 3, which steps group 1"));
  sched_program_free(prog);
}

static const MlpConfig MLP2 = {.inputs = 5, .classes = 3, .num_hidden = 2, .hidden = {7, 6}, .param_groups = 2};

static void test_buckets_never_mix_groups(void **state) {
  (void)state;
  Error err = {0};
  Network net;
  if (mlp_create(&net, &MLP2, 4, &err)) fail_msg("%s", err.msg);
  assert_int_equal(net.num_param_groups, 2);
  size_t begin[2][4], end[2][4];
  for (int g = 0; g < 2; g++) assert_int_equal(network_group_ranges(&net, g, begin[g], end[g], 4), 1);
  assert_true(begin[0][0] == 0 && end[0][0] == begin[1][0] && end[1][0] == net.num_values);
  /* Buckets of 10 floats would straddle the groups' boundary without the cuts. */
  size_t cuts[8];
  int n = phases_group_cuts(&net, cuts, 8);
  assert_int_equal(n, 4);
  DpGrads g;
  if (dp_grads_create(&g, comm_world(), net.grads, net.num_values, cuts, n, 10 * sizeof(float), 0, &err) ||
      phases_tag_buckets(&g, &net, &err))
    fail_msg("%s", err.msg);
  int per_group[2] = {0, 0};
  for (int b = 0; b < g.num_buckets; b++) {
    const DpBucket *k = &g.buckets[b];
    int grp = k->param_group;
    assert_true(grp == 0 || grp == 1);
    assert_true(k->begin >= begin[grp][0] && k->end <= end[grp][0]);
    per_group[grp]++;
  }
  assert_true(per_group[0] > 1 && per_group[1] > 1);
  dp_grads_free(&g);
  if (dp_grads_create(&g, comm_world(), net.grads, net.num_values, NULL, 0, 10 * sizeof(float), 0, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(phases_tag_buckets(&g, &net, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "straddles parameter group"));
  dp_grads_free(&g);
  network_free(&net);
}

/* ---- a phase steps its own group ---- */

static ExecutorHandler real_optim;
static float *before;  /* values before the running phase */
static int phases_seen;
static int changed[2]; /* per group: tensors whose values the phase changed */

static void count_changes(const Network *net) {
  changed[0] = changed[1] = 0;
  for (int t = 0; t < net->num_tensors; t++) {
    const NetParam *p = &net->params[t];
    if (memcmp(before + p->offset, net->values + p->offset, p->numel * sizeof(float))) changed[p->param_group]++;
  }
}

static int watched_optim(void *ctx, const SchedAction *a, Error *err) {
  Trainer *tr = ctx;
  int rc = real_optim(ctx, a, err);
  if (rc) return rc;
  count_changes(&tr->net);
  /* Both weights and biases of the phase's layers move, nothing else. */
  int layers_in_group = a->group == 0 ? 2 : 1;
  assert_int_equal(changed[a->group], 2 * layers_in_group);
  assert_int_equal(changed[1 - a->group], 0);
  memcpy(before, tr->net.values, tr->net.num_values * sizeof(float));
  phases_seen++;
  return 0;
}

static void test_phase_steps_only_its_group(void **state) {
  (void)state;
  const char *text = "{\"model\": {\"family\": \"mlp\", \"inputs\": 5, \"hidden\": [7, 6], \"classes\": 3,"
                     " \"param_groups\": 2},"
                     " \"training\": {\"micro_batch_size\": 4, \"grad_accum_steps\": 2, \"steps\": 3, \"lr\": 0.05,"
                     " \"warmup_steps\": 0, \"threads\": 1, \"seed\": 5, \"eval_batches\": 1}}";
  TrainConfig cfg;
  Trainer tr;
  Error err = {0};
  if (train_config_parse(&cfg, text, "groups.json", &err) || train_config_finalize(&cfg, &err) ||
      trainer_create(&tr, &cfg, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(tr.net.num_param_groups, 2);
  real_optim = tr.exec.handlers[SCHED_OPTIM];
  executor_set_handler(&tr.exec, SCHED_OPTIM, watched_optim);
  before = malloc(tr.net.num_values * sizeof(float));
  for (int s = 0; s < 3; s++) {
    memcpy(before, tr.net.values, tr.net.num_values * sizeof(float));
    TrainStepResult r;
    if (trainer_step(&tr, &r, &err)) fail_msg("%s", err.msg);
  }
  assert_int_equal(phases_seen, 6);
  assert_int_equal(tr.opt.step, 3); /* the groups of one step share its number */
  free(before);
  trainer_free(&tr);
  train_config_free(&cfg);
}

int main(int argc, char **argv) {
  Error err = {0};
  if (comm_init(&argc, &argv, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_program_has_a_phase_per_group), cmocka_unit_test(test_repeated_phases),
      cmocka_unit_test(test_buckets_never_mix_groups),
      cmocka_unit_test(test_phase_steps_only_its_group),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  comm_finalize(&err);
  return rc;
}
