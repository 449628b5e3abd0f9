/* The program data model: dense stable ids, lookups, labels, the builder's
 * dependency order, the text format (labels printed by one program parse
 * back into the same program), and JSON that round-trips every field and
 * rejects malformed files with a message naming the place. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "sched/builders.h"
#include "sched/check.h"
#include "sched/program.h"

static SchedConfig make_cfg(SchedScheduleKind kind, int p, int v, int m) {
  SchedConfig c;
  memset(&c, 0, sizeof c);
  c.schedule = kind;
  c.pp = p;
  c.vpp = v;
  c.microbatches = m;
  return c;
}

static SchedProgram *build(SchedScheduleKind kind, int p, int v, int m) {
  SchedConfig c = make_cfg(kind, p, v, m);
  SchedProgram *prog = NULL;
  assert_int_equal(sched_build(&c, &prog, NULL), ERR_OK);
  return prog;
}

static void assert_same_program(const SchedProgram *a, const SchedProgram *b) {
  assert_int_equal(a->num_ranks, b->num_ranks);
  assert_int_equal(a->num_actions, b->num_actions);
  assert_int_equal(a->config.pp, b->config.pp);
  assert_int_equal(a->config.vpp, b->config.vpp);
  assert_int_equal(a->config.microbatches, b->config.microbatches);
  for (int r = 0; r <= a->num_ranks; r++) assert_int_equal(a->rank_begin[r], b->rank_begin[r]);
  for (int i = 0; i < a->num_actions; i++) {
    const SchedAction *x = &a->actions[i], *y = &b->actions[i];
    assert_int_equal(x->id, y->id);
    assert_int_equal(x->rank, y->rank);
    assert_int_equal(x->index, y->index);
    assert_int_equal(x->kind, y->kind);
    assert_int_equal(x->stream, y->stream);
    assert_int_equal(x->microbatch, y->microbatch);
    assert_int_equal(x->chunk, y->chunk);
    assert_int_equal(x->stage, y->stage);
    assert_int_equal(x->peer, y->peer);
    assert_int_equal(x->peer_chunk, y->peer_chunk);
    assert_int_equal(x->peer_stage, y->peer_stage);
    assert_int_equal(x->match, y->match);
    assert_int_equal(x->bucket, y->bucket);
    assert_int_equal(x->layer, y->layer);
    assert_int_equal(x->num_deps, y->num_deps);
    for (int d = 0; d < x->num_deps; d++) assert_int_equal(x->deps[d], y->deps[d]);
  }
}

static void test_names_round_trip(void **state) {
  (void)state;
  for (int k = 0; k < SCHED_NUM_ACTION_KINDS; k++) {
    SchedActionKind back;
    assert_int_equal(sched_action_kind_from_name(sched_action_kind_name((SchedActionKind)k), &back), 0);
    assert_int_equal(back, k);
    assert_int_equal(sched_kind_partner(sched_kind_partner((SchedActionKind)k)), k);
  }
  for (int s = 0; s < SCHED_NUM_SCHEDULES; s++) {
    SchedScheduleKind back;
    assert_int_equal(sched_schedule_from_name(sched_schedule_name((SchedScheduleKind)s), &back), 0);
    assert_int_equal(back, s);
  }
  SchedActionKind k;
  assert_int_equal(sched_action_kind_from_name("ALLREDUCE", &k), -1);
  assert_int_equal(sched_kind_partner(SCHED_SEND_ACT), SCHED_RECV_ACT);
  assert_int_equal(sched_kind_partner(SCHED_RECV_GRAD), SCHED_SEND_GRAD);
  assert_true(sched_kind_is_compute(SCHED_FWD) && !sched_kind_is_compute(SCHED_SEND_ACT));
  assert_int_equal(sched_kind_default_stream(SCHED_RECV_ACT), SCHED_STREAM_P2P);
  assert_int_equal(sched_kind_default_stream(SCHED_GRAD_REDUCE), SCHED_STREAM_COLLECTIVE);
  assert_int_equal(sched_kind_default_stream(SCHED_SEND_GRAD), SCHED_STREAM_COMPUTE);
}

static void test_ids_and_lookup(void **state) {
  (void)state;
  SchedProgram *prog = build(SCHED_SCHEDULE_INTERLEAVED, 2, 2, 4);
  int seen = 0;
  for (int r = 0; r < prog->num_ranks; r++) {
    int n;
    const SchedAction *list = sched_program_rank_actions(prog, r, &n);
    for (int i = 0; i < n; i++) {
      assert_int_equal(list[i].id, sched_action_id(prog, r, i));
      assert_ptr_equal(sched_program_action(prog, list[i].id), &list[i]);
      assert_int_equal(list[i].rank, r);
      assert_int_equal(list[i].index, i);
      seen++;
    }
  }
  assert_int_equal(seen, prog->num_actions);
  assert_null(sched_program_action(prog, -1));
  assert_null(sched_program_action(prog, prog->num_actions));
  int id = sched_program_find(prog, 1, SCHED_FWD, 3, 1);
  assert_true(id >= 0);
  assert_int_equal(prog->actions[id].stage, 1 * 2 + 1);
  assert_int_equal(sched_program_find(prog, 1, SCHED_FWD, 4, 1), -1);
  /* The last stage (rank 1, chunk 1) sends nothing forward; rank 1's chunk 0
   * sends to rank 0's chunk 1 (the wrap-around of interleaving). */
  assert_int_equal(sched_program_find(prog, 1, SCHED_SEND_ACT, 0, 1), -1);
  int wrap = sched_program_find(prog, 1, SCHED_SEND_ACT, 0, 0);
  assert_true(wrap >= 0);
  assert_int_equal(prog->actions[wrap].peer, 0);
  assert_int_equal(prog->actions[wrap].peer_chunk, 1);
  assert_int_equal(prog->actions[wrap].peer_stage, 2);
  const SchedAction *recv = sched_program_action(prog, prog->actions[wrap].match);
  assert_non_null(recv);
  assert_int_equal(recv->kind, SCHED_RECV_ACT);
  assert_int_equal(recv->rank, 0);
  assert_int_equal(recv->chunk, 1);
  assert_int_equal(recv->match, wrap);
  /* Same configuration, same ids. */
  SchedProgram *again = build(SCHED_SCHEDULE_INTERLEAVED, 2, 2, 4);
  assert_same_program(prog, again);
  sched_program_free(again);
  sched_program_free(prog);
}

static void test_labels_and_describe(void **state) {
  (void)state;
  SchedProgram *prog = build(SCHED_SCHEDULE_INTERLEAVED, 2, 2, 2);
  char buf[64], desc[160];
  const SchedAction *a = &prog->actions[sched_program_find(prog, 1, SCHED_SEND_ACT, 1, 0)];
  assert_string_equal(sched_action_label(prog, a, buf, sizeof buf), "SA1.0>0");
  a = &prog->actions[sched_program_find(prog, 0, SCHED_RECV_GRAD, 0, 0)];
  assert_string_equal(sched_action_label(prog, a, buf, sizeof buf), "RG0.0<1");
  a = &prog->actions[sched_program_find(prog, 0, SCHED_GRAD_REDUCE, -1, 1)];
  assert_string_equal(sched_action_label(prog, a, buf, sizeof buf), "AR1");
  sched_action_describe(a, desc, sizeof desc);
  assert_non_null(strstr(desc, "GRAD_REDUCE"));
  assert_non_null(strstr(desc, "bucket 1"));
  SchedProgram *flat = build(SCHED_SCHEDULE_1F1B, 3, 1, 2);
  a = &flat->actions[sched_program_find(flat, 1, SCHED_SEND_GRAD, 1, 0)];
  assert_string_equal(sched_action_label(flat, a, buf, sizeof buf), "SG1>0");
  char expect[160];
  snprintf(expect, sizeof expect, "rank 1 #%d SEND_GRAD mb 1 stage 1->0 (peer rank 0) (id %d)", a->index, a->id);
  assert_string_equal(sched_action_describe(a, desc, sizeof desc), expect);
  sched_program_free(flat);
  sched_program_free(prog);
}

/* Dependencies keep the order they were added; links are symmetric. */
static void test_builder(void **state) {
  (void)state;
  SchedConfig cfg = make_cfg(SCHED_SCHEDULE_CUSTOM, 2, 1, 1);
  SchedBuilder *b = sched_builder_new(&cfg, 2);
  assert_non_null(b);
  SchedAction f = sched_action_make(SCHED_FWD), s = sched_action_make(SCHED_SEND_ACT), r = sched_action_make(SCHED_RECV_ACT);
  SchedActionRef rf, rs, rr, rf1;
  assert_int_equal(sched_builder_append(b, 0, &f, &rf, NULL), ERR_OK);
  assert_int_equal(sched_builder_append(b, 0, &s, &rs, NULL), ERR_OK);
  assert_int_equal(sched_builder_append(b, 1, &r, &rr, NULL), ERR_OK);
  assert_int_equal(sched_builder_append(b, 1, &f, &rf1, NULL), ERR_OK);
  assert_int_equal(sched_builder_count(b, 1), 2);
  assert_int_equal(sched_builder_add_dep(b, rs, rf, NULL), ERR_OK);
  assert_int_equal(sched_builder_link(b, rs, rr, NULL), ERR_OK);
  assert_int_equal(sched_builder_add_dep(b, rf1, rr, NULL), ERR_OK);
  assert_int_equal(sched_builder_add_dep(b, rf1, rf, NULL), ERR_OK); /* a second, cross-rank dep */
  Error err = {0, ""};
  SchedActionRef bad = {5, 0};
  assert_int_equal(sched_builder_add_dep(b, rf1, bad, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "rank 5"));
  assert_int_equal(sched_builder_append(b, 2, &f, NULL, &err), ERR_ARG);
  SchedProgram *prog = NULL;
  assert_int_equal(sched_builder_finish(b, &prog, NULL), ERR_OK);
  sched_builder_free(b);
  assert_int_equal(prog->num_actions, 4);
  const SchedAction *send = &prog->actions[1], *recv = &prog->actions[2], *f1 = &prog->actions[3];
  assert_int_equal(send->match, 2);
  assert_int_equal(recv->match, 1);
  assert_int_equal(recv->num_deps, 1);
  assert_int_equal(recv->deps[0], 1);
  assert_int_equal(f1->num_deps, 2);
  assert_int_equal(f1->deps[0], 2);
  assert_int_equal(f1->deps[1], 0);
  sched_program_free(prog);
}

/* Printing each rank's labels and parsing them back gives the same program. */
static void test_text_round_trip(void **state) {
  (void)state;
  const int cases[][4] = {{SCHED_SCHEDULE_1F1B, 3, 1, 5}, {SCHED_SCHEDULE_GPIPE, 2, 1, 3},
                          {SCHED_SCHEDULE_INTERLEAVED, 2, 3, 4}, {SCHED_SCHEDULE_NONE, 1, 1, 3}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    SchedProgram *prog = build((SchedScheduleKind)cases[c][0], cases[c][1], cases[c][2], cases[c][3]);
    size_t cap = (size_t)prog->num_actions * 16 + 16, len = 0;
    char *text = malloc(cap);
    for (int r = 0; r < prog->num_ranks; r++) {
      int n;
      const SchedAction *list = sched_program_rank_actions(prog, r, &n);
      for (int i = 0; i < n; i++) {
        char label[32];
        len += (size_t)snprintf(text + len, cap - len, "%s ", sched_action_label(prog, &list[i], label, sizeof label));
      }
      len += (size_t)snprintf(text + len, cap - len, "\n");
    }
    SchedProgram *back = NULL;
    Error err = {0, ""};
    int rc = sched_program_parse_text(&prog->config, text, &back, &err);
    if (rc) print_error("%s\n", err.msg);
    assert_int_equal(rc, ERR_OK);
    assert_same_program(prog, back);
    sched_program_free(back);
    free(text);
    sched_program_free(prog);
  }
}

static void expect_text_error(const SchedConfig *cfg, const char *text, const char *needle) {
  SchedProgram *prog = NULL;
  Error err = {0, ""};
  assert_int_equal(sched_program_parse_text(cfg, text, &prog, &err), ERR_FORMAT);
  assert_null(prog);
  if (!strstr(err.msg, needle)) print_error("message: %s\n", err.msg);
  assert_non_null(strstr(err.msg, needle));
}

static void test_text_errors(void **state) {
  (void)state;
  SchedConfig cfg = make_cfg(SCHED_SCHEDULE_CUSTOM, 2, 1, 1);
  expect_text_error(&cfg, "F0 X3\nF0", "unknown action 'X3'");
  expect_text_error(&cfg, "F0 SA0>2\nRA0 F0", "names peer rank 2");
  expect_text_error(&cfg, "F\nF0", "needs a number");
  expect_text_error(&cfg, "F0x\nF0", "trailing characters");
  expect_text_error(&cfg, "F0", "1 lines for 2 ranks");
  expect_text_error(&cfg, "F0;F0;F0", "more lines than the 2 ranks");
  expect_text_error(&cfg, "F0<1\nF0", "must follow a receive");
  SchedProgram *prog = NULL;
  assert_int_equal(sched_program_parse_text(&cfg, "-\nF0 B0", &prog, NULL), ERR_OK);
  int n;
  sched_program_rank_actions(prog, 0, &n);
  assert_int_equal(n, 0);
  sched_program_free(prog);
}

static void test_json_round_trip(void **state) {
  (void)state;
  char path[] = "/tmp/fivefold_sched_prog_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  const int cases[][4] = {{SCHED_SCHEDULE_1F1B, 4, 1, 6}, {SCHED_SCHEDULE_INTERLEAVED, 3, 2, 6}, {SCHED_SCHEDULE_NONE, 1, 1, 2}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    SchedProgram *prog = build((SchedScheduleKind)cases[c][0], cases[c][1], cases[c][2], cases[c][3]);
    Error err = {0, ""};
    assert_int_equal(sched_program_write_json(prog, path, &err), ERR_OK);
    SchedProgram *back = NULL;
    int rc = sched_program_read_json(path, &back, &err);
    if (rc) print_error("%s\n", err.msg);
    assert_int_equal(rc, ERR_OK);
    assert_same_program(prog, back);
    assert_int_equal(back->config.schedule, prog->config.schedule);
    assert_int_equal(sched_check(back, NULL), ERR_OK);
    sched_program_free(back);
    sched_program_free(prog);
  }
  unlink(path);
}

/* Applies `edit` to the JSON of a small program and expects from_json to fail
 * with `needle` in the message. */
static void expect_json_error(void (*edit)(cJSON *root), const char *needle) {
  SchedProgram *prog = build(SCHED_SCHEDULE_1F1B, 2, 1, 1);
  cJSON *root = sched_program_to_json(prog);
  assert_non_null(root);
  edit(root);
  SchedProgram *back = NULL;
  Error err = {0, ""};
  assert_int_not_equal(sched_program_from_json(root, &back, &err), ERR_OK);
  assert_null(back);
  if (!strstr(err.msg, needle)) print_error("message: %s\n", err.msg);
  assert_non_null(strstr(err.msg, needle));
  cJSON_Delete(root);
  sched_program_free(prog);
}

static cJSON *first_action(cJSON *root) {
  cJSON *ranks = cJSON_GetObjectItem(root, "ranks");
  return cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(ranks, 1), "actions"), 0);
}
static void edit_format(cJSON *root) { cJSON_ReplaceItemInObject(root, "format", cJSON_CreateString("other")); }
static void edit_kind(cJSON *root) { cJSON_ReplaceItemInObject(first_action(root), "kind", cJSON_CreateString("JUMP")); }
static void edit_id(cJSON *root) { cJSON_ReplaceItemInObject(first_action(root), "id", cJSON_CreateNumber(0)); }
static void edit_dep(cJSON *root) {
  cJSON *deps = cJSON_CreateArray();
  cJSON_AddItemToArray(deps, cJSON_CreateNumber(999));
  cJSON_ReplaceItemInObject(first_action(root), "deps", deps);
}
static void edit_mb(cJSON *root) { cJSON_ReplaceItemInObject(first_action(root), "mb", cJSON_CreateString("1")); }
static void edit_schedule(cJSON *root) {
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "config"), "schedule", cJSON_CreateString("zb"));
}

static void test_json_errors(void **state) {
  (void)state;
  expect_json_error(edit_format, "\"format\" must be");
  expect_json_error(edit_kind, "ranks[1].actions[0]: unknown or missing \"kind\"");
  expect_json_error(edit_id, "ranks[1].actions[0]: id 0, expected");
  expect_json_error(edit_dep, "id 999 in deps is not an action");
  expect_json_error(edit_mb, "field \"mb\" must be an integer");
  expect_json_error(edit_schedule, "config.schedule");
  Error err = {0, ""};
  SchedProgram *prog = NULL;
  assert_int_equal(sched_program_read_json("/nonexistent/dir/prog.json", &prog, &err), ERR_IO);
  assert_non_null(strstr(err.msg, "/nonexistent/dir/prog.json"));
}

/* sched_program_first_difference: -1 for one program built twice or read
 * back from JSON; the first id that differs otherwise. zb-h1 on 4 ranks
 * with warm-up 4 3 2 2 places rank 1's last activation send elsewhere
 * (id 33) when the order costs are 1 and 1.6 instead of 1 and 2. */
static void test_first_difference(void **state) {
  (void)state;
  SchedConfig c = make_cfg(SCHED_SCHEDULE_ZB_H1, 4, 1, 4);
  c.warmup_set = 4;
  const int depths[4] = {4, 3, 2, 2};
  memcpy(c.warmup, depths, sizeof depths);
  SchedProgram *a = NULL, *b = NULL, *priced = NULL, *back = NULL;
  assert_int_equal(sched_build(&c, &a, NULL), ERR_OK);
  assert_int_equal(sched_build(&c, &b, NULL), ERR_OK);
  assert_int_equal(sched_program_first_difference(a, b), -1);
  cJSON *j = sched_program_to_json(a);
  assert_non_null(j);
  assert_int_equal(sched_program_from_json(j, &back, NULL), ERR_OK);
  cJSON_Delete(j);
  assert_int_equal(sched_program_first_difference(a, back), -1);
  c.order_fwd_cost = 1.0, c.order_bwd_cost = 1.6;
  assert_int_equal(sched_build(&c, &priced, NULL), ERR_OK);
  assert_int_equal(priced->num_actions, a->num_actions);
  assert_int_equal(sched_program_first_difference(a, priced), 33);
  assert_int_equal(sched_program_first_difference(priced, a), 33);
  sched_program_free(b);
  b = build(SCHED_SCHEDULE_1F1B, 4, 1, 3); /* fewer actions, another order */
  int d = sched_program_first_difference(a, b);
  assert_true(d >= 0 && d <= b->num_actions);
  sched_program_free(a);
  sched_program_free(b);
  sched_program_free(priced);
  sched_program_free(back);
}

static void test_print_table(void **state) {
  (void)state;
  SchedProgram *prog = build(SCHED_SCHEDULE_1F1B, 2, 1, 2);
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  sched_program_print_table(prog, f);
  fclose(f);
  assert_non_null(strstr(buf, "rank 0"));
  assert_non_null(strstr(buf, "rank 1"));
  assert_non_null(strstr(buf, "SA0>1"));
  assert_non_null(strstr(buf, "RA0<0"));
  assert_non_null(strstr(buf, "OPT"));
  free(buf);
  sched_program_free(prog);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names_round_trip), cmocka_unit_test(test_ids_and_lookup),
      cmocka_unit_test(test_labels_and_describe), cmocka_unit_test(test_builder),
      cmocka_unit_test(test_text_round_trip), cmocka_unit_test(test_text_errors),
      cmocka_unit_test(test_json_round_trip), cmocka_unit_test(test_json_errors),
      cmocka_unit_test(test_print_table), cmocka_unit_test(test_first_difference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
