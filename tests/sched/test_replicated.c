/* Stage replication's program (sched/replicated.h): for widths 2+1, 1+2,
 * 2+2, 1+3, 3+2 and 2+1+2 under 1F1B and GPipe, every rank runs its
 * stage's computes, the transfers split into the pieces two replicas share
 * (peers and sequence ranges as the widths imply), the program runs to
 * completion with blocking sends, survives a JSON round trip, and the
 * check refuses a piece that carries the wrong sequences or is unmatched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sched/replicated.h"

static SchedReplication repl(int sequences, int n, const int *w) {
  SchedReplication r;
  memset(&r, 0, sizeof r);
  r.stages = n;
  r.sequences = sequences;
  for (int s = 0; s < n; s++) r.width[s] = w[s];
  return r;
}

static SchedProgram *build(const SchedReplication *r, SchedScheduleKind kind, int m) {
  SchedConfig c;
  memset(&c, 0, sizeof c);
  c.schedule = r->stages == 1 ? SCHED_SCHEDULE_NONE : kind;
  c.pp = r->stages;
  c.vpp = 1;
  c.microbatches = m;
  SchedProgram *prog = NULL;
  Error err = {0, ""};
  int rc = sched_build_replicated(&c, r, &prog, &err);
  if (rc) print_error("%s\n", err.msg);
  assert_int_equal(rc, ERR_OK);
  return prog;
}

static int count_kind(const SchedProgram *p, int rank, SchedActionKind k) {
  int n, c = 0;
  const SchedAction *l = sched_program_rank_actions(p, rank, &n);
  for (int i = 0; i < n; i++) c += l[i].kind == k;
  return c;
}

static void test_layouts(void **state) {
  (void)state;
  static const struct {
    int seq, n, w[3];
  } cases[] = {{2, 2, {2, 1}}, {2, 2, {1, 2}}, {4, 2, {2, 2}}, {3, 2, {1, 3}}, {6, 2, {3, 2}}, {2, 3, {2, 1, 2}}};
  for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++)
    for (int kind = 0; kind < 2; kind++) {
      SchedReplication r = repl(cases[t].seq, cases[t].n, cases[t].w);
      int m = 4;
      SchedProgram *p = build(&r, kind ? SCHED_SCHEDULE_GPIPE : SCHED_SCHEDULE_1F1B, m);
      assert_int_equal(p->num_ranks, sched_replication_ranks(&r));
      for (int q = 0; q < p->num_ranks; q++) {
        int rep = 0, s = sched_replication_stage_of(&r, q, &rep);
        assert_int_equal(count_kind(p, q, SCHED_FWD), m);
        assert_int_equal(count_kind(p, q, SCHED_BWD), m);
        assert_int_equal(count_kind(p, q, SCHED_OPTIM), 1);
        int b0, n0;
        sched_replication_range(&r, s, rep, &b0, &n0);
        int n;
        const SchedAction *l = sched_program_rank_actions(p, q, &n);
        long seqs = 0;
        for (int i = 0; i < n; i++) {
          assert_int_equal(l[i].stage, s);
          if (l[i].kind != SCHED_SEND_ACT) continue;
          /* the piece lies in both ranges */
          int pr = 0, ps = sched_replication_stage_of(&r, l[i].peer, &pr), b1, n1;
          assert_int_equal(ps, s + 1);
          sched_replication_range(&r, ps, pr, &b1, &n1);
          assert_true(l[i].seq_begin >= b0 && l[i].seq_begin + l[i].seq_count <= b0 + n0);
          assert_true(l[i].seq_begin >= b1 && l[i].seq_begin + l[i].seq_count <= b1 + n1);
          seqs += l[i].seq_count;
        }
        assert_int_equal(seqs, s + 1 < r.stages ? (long)n0 * m : 0);
      }
      /* The same program after a JSON round trip. */
      cJSON *j = sched_program_to_json(p);
      assert_non_null(j);
      SchedProgram *back = NULL;
      Error err = {0, ""};
      assert_int_equal(sched_program_from_json(j, &back, &err), ERR_OK);
      assert_int_equal(back->num_actions, p->num_actions);
      for (int i = 0; i < p->num_actions; i++) {
        assert_int_equal(back->actions[i].seq_begin, p->actions[i].seq_begin);
        assert_int_equal(back->actions[i].seq_count, p->actions[i].seq_count);
        assert_int_equal(back->actions[i].peer, p->actions[i].peer);
      }
      assert_int_equal(sched_replicated_check(back, &r, &err), ERR_OK);
      sched_program_free(back);
      cJSON_Delete(j);
      sched_program_free(p);
    }
}

/* 3 replicas feeding 2: replica 1 of the first stage (sequences 2..3)
 * sends sequence 2 to the second stage's replica 0 and 3 to replica 1. */
static void test_pieces_3_to_2(void **state) {
  (void)state;
  SchedReplication r = repl(6, 2, (int[]){3, 2});
  SchedProgram *p = build(&r, SCHED_SCHEDULE_1F1B, 2);
  int id = sched_program_find(p, 1, SCHED_SEND_ACT, 0, 0);
  assert_true(id >= 0);
  const SchedAction *a = sched_program_action(p, id), *b = sched_program_action(p, id + 1);
  assert_int_equal(a->peer, 3);
  assert_int_equal(a->seq_begin, 2);
  assert_int_equal(a->seq_count, 1);
  assert_int_equal(b->kind, SCHED_SEND_ACT);
  assert_int_equal(b->peer, 4);
  assert_int_equal(b->seq_begin, 3);
  assert_int_equal(b->seq_count, 1);
  sched_program_free(p);
}

static void test_check_refuses(void **state) {
  (void)state;
  SchedReplication r = repl(2, 2, (int[]){2, 1});
  SchedProgram *p = build(&r, SCHED_SCHEDULE_1F1B, 2);
  Error err = {0, ""};
  int id = sched_program_find(p, 2, SCHED_RECV_ACT, 1, 0) + 1;
  assert_int_equal(p->actions[id].kind, SCHED_RECV_ACT);
  assert_int_equal(p->actions[id].peer, 1);
  p->actions[id].seq_begin = 0; /* replica 1's piece claims replica 0's sequence */
  assert_int_not_equal(sched_replicated_check(p, &r, &err), ERR_OK);
  assert_non_null(strstr(err.msg, "not matched"));
  p->actions[id].seq_begin = 1;
  assert_int_equal(sched_replicated_check(p, &r, &err), ERR_OK);
  SchedReplication wrong = repl(2, 2, (int[]){1, 2});
  assert_int_not_equal(sched_replicated_check(p, &wrong, &err), ERR_OK);
  SchedReplication odd = repl(3, 2, (int[]){2, 1});
  assert_int_not_equal(sched_replication_validate(&odd, &err), ERR_OK);
  assert_non_null(strstr(err.msg, "does not divide"));
  sched_program_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layouts),
      cmocka_unit_test(test_pieces_3_to_2),
      cmocka_unit_test(test_check_refuses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
