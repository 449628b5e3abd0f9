/* Stage replication's program (replicated.h): the unreplicated pipeline
 * program copied onto every replica of each stage, its transfers split
 * into pieces by sequence ranges, and the check the executor relies on. */
#include "sched/replicated.h"

#include <stdlib.h>
#include <string.h>

#include "sched/builders.h"
#include "sched/evaluate.h"

int sched_replication_validate(const SchedReplication *r, Error *err) {
  if (r->stages < 1 || r->stages > SCHED_MAX_REPLICATED_STAGES)
    return error_set(err, ERR_CONFIG, "stage replication: %d stages (1 to %d)", r->stages,
                     SCHED_MAX_REPLICATED_STAGES);
  if (r->sequences < 1)
    return error_set(err, ERR_CONFIG, "stage replication: a micro-batch of %d sequences", r->sequences);
  for (int s = 0; s < r->stages; s++) {
    if (r->width[s] < 1)
      return error_set(err, ERR_CONFIG, "stage replication: stage %d has width %d; every stage needs >= 1", s,
                       r->width[s]);
    if (r->sequences % r->width[s])
      return error_set(err, ERR_CONFIG,
                       "stage replication: stage %d's width %d does not divide the micro-batch's %d sequences "
                       "(each replica takes an equal share)",
                       s, r->width[s], r->sequences);
  }
  return ERR_OK;
}

int sched_replication_ranks(const SchedReplication *r) {
  int n = 0;
  for (int s = 0; s < r->stages; s++) n += r->width[s];
  return n;
}

int sched_replication_first_rank(const SchedReplication *r, int stage) {
  int n = 0;
  for (int s = 0; s < stage && s < r->stages; s++) n += r->width[s];
  return n;
}

int sched_replication_stage_of(const SchedReplication *r, int rank, int *replica) {
  for (int s = 0, first = 0; s < r->stages; first += r->width[s], s++)
    if (rank >= first && rank < first + r->width[s]) {
      if (replica) *replica = rank - first;
      return s;
    }
  return -1;
}

void sched_replication_range(const SchedReplication *r, int stage, int replica, int *begin, int *count) {
  int n = r->sequences / r->width[stage];
  *begin = replica * n;
  *count = n;
}

/* The pieces of one transfer between `stage` (replica `replica`) and
 * `other`: the other stage's replicas whose ranges meet this one's, in
 * ascending order (so both ends list their pieces in the order of the
 * sequences, and blocking sends cannot wait on each other in a cycle). */
static int pieces(const SchedReplication *r, int stage, int replica, int other, int *peer_replica, int *begin,
                  int *count) {
  int b0, n0, k = 0;
  sched_replication_range(r, stage, replica, &b0, &n0);
  for (int j = 0; j < r->width[other]; j++) {
    int b1, n1;
    sched_replication_range(r, other, j, &b1, &n1);
    int lo = b0 > b1 ? b0 : b1, hi = b0 + n0 < b1 + n1 ? b0 + n0 : b1 + n1;
    if (lo >= hi) continue;
    peer_replica[k] = j;
    begin[k] = lo;
    count[k] = hi - lo;
    k++;
  }
  return k;
}

static int other_stage(SchedActionKind kind, int stage) {
  return kind == SCHED_SEND_ACT || kind == SCHED_RECV_GRAD ? stage + 1 : stage - 1;
}

int sched_build_replicated(const SchedConfig *stage_config, const SchedReplication *r, SchedProgram **out,
                           Error *err) {
  *out = NULL;
  int rc = sched_replication_validate(r, err);
  if (rc) return rc;
  if (stage_config->pp != r->stages || stage_config->vpp > 1 || stage_config->param_groups > 1)
    return error_set(err, ERR_CONFIG,
                     "stage replication: the pipeline has pp %d, vpp %d and %d parameter groups; it needs pp = the "
                     "%d stages, vpp 1 and one group",
                     stage_config->pp, stage_config->vpp, stage_config->param_groups, r->stages);
  SchedProgram *stages = NULL;
  if ((rc = sched_build(stage_config, &stages, err))) return rc;
  int W = sched_replication_ranks(r), maxw = 1;
  for (int s = 0; s < r->stages; s++)
    if (r->width[s] > maxw) maxw = r->width[s];
  SchedBuilder *b = sched_builder_new(&stages->config, W);
  /* Per rank, where each action of its stage's list went: first[i] and
   * how many (pieces) from there. */
  int *first = malloc(((size_t)stages->num_actions + 1) * sizeof *first);
  int *num = malloc(((size_t)stages->num_actions + 1) * sizeof *num);
  int *peer_rep = malloc((size_t)3 * (2 * maxw + 1) * sizeof *peer_rep);
  if (!b || !first || !num || !peer_rep) {
    rc = error_set(err, ERR_NOMEM, "stage replication: out of memory");
    goto done;
  }
  int *pb = peer_rep + 2 * maxw + 1, *pc = pb + 2 * maxw + 1;
  for (int q = 0; q < W && !rc; q++) {
    int replica = 0, s = sched_replication_stage_of(r, q, &replica), n;
    const SchedAction *list = sched_program_rank_actions(stages, s, &n);
    for (int i = 0; i < n && !rc; i++) {
      const SchedAction *a = &list[i];
      first[i] = sched_builder_count(b, q);
      SchedAction c = *a;
      c.stage = s;
      if (!sched_kind_is_send(a->kind) && !sched_kind_is_recv(a->kind)) {
        num[i] = 1;
        rc = sched_builder_append(b, q, &c, NULL, err);
        continue;
      }
      int o = other_stage(a->kind, s);
      num[i] = pieces(r, s, replica, o, peer_rep, pb, pc);
      for (int k = 0; k < num[i] && !rc; k++) {
        c.peer = sched_replication_first_rank(r, o) + peer_rep[k];
        c.peer_stage = o;
        c.peer_chunk = 0;
        c.seq_begin = pb[k];
        c.seq_count = pc[k];
        rc = sched_builder_append(b, q, &c, NULL, err);
      }
    }
    /* Dependencies inside the rank, onto every piece of the action depended on. */
    for (int i = 0; i < n && !rc; i++) {
      const SchedAction *a = &list[i];
      for (int d = 0; d < a->num_deps && !rc; d++) {
        const SchedAction *on = &stages->actions[a->deps[d]];
        if (on->rank != s) continue; /* a RECV's SEND: linked piece by piece below */
        for (int k = 0; k < num[i] && !rc; k++)
          for (int j = 0; j < num[on->index] && !rc; j++)
            rc = sched_builder_add_dep(b, (SchedActionRef){q, first[i] + k},
                                       (SchedActionRef){q, first[on->index] + j}, err);
      }
    }
  }
  /* Each receive piece with the send piece of the same micro-batch and
   * sequences on its peer. */
  for (int q = 0; q < W && !rc; q++) {
    int n = sched_builder_count(b, q);
    for (int i = 0; i < n && !rc; i++) {
      const SchedAction *a = sched_builder_get(b, (SchedActionRef){q, i});
      if (!sched_kind_is_recv(a->kind)) continue;
      SchedActionKind want = sched_kind_partner(a->kind);
      int peer = a->peer, found = -1, pn = sched_builder_count(b, peer);
      for (int j = 0; j < pn && found < 0; j++) {
        const SchedAction *x = sched_builder_get(b, (SchedActionRef){peer, j});
        if (x->kind == want && x->peer == q && x->microbatch == a->microbatch && x->seq_begin == a->seq_begin &&
            x->seq_count == a->seq_count)
          found = j;
      }
      if (found < 0) {
        char what[128];
        rc = error_set(err, ERR_INTERNAL, "stage replication: %s has no send on rank %d",
                       sched_action_describe(a, what, sizeof what), peer);
        break;
      }
      rc = sched_builder_link(b, (SchedActionRef){peer, found}, (SchedActionRef){q, i}, err);
    }
  }
  if (!rc) rc = sched_builder_finish(b, out, err);
  if (!rc && (rc = sched_replicated_check(*out, r, err))) {
    sched_program_free(*out);
    *out = NULL;
  }
done:
  sched_builder_free(b);
  sched_program_free(stages);
  free(first);
  free(num);
  free(peer_rep);
  return rc;
}

int sched_replicated_check(const SchedProgram *prog, const SchedReplication *r, Error *err) {
  int rc = sched_replication_validate(r, err);
  if (rc) return rc;
  if (prog->num_ranks != sched_replication_ranks(r) || prog->config.pp != r->stages)
    return error_set(err, ERR_CONFIG, "replicated program: %d ranks and pp %d, the widths give %d ranks in %d stages",
                     prog->num_ranks, prog->config.pp, sched_replication_ranks(r), r->stages);
  char what[128], other[128];
  int M = prog->config.microbatches;
  /* covered[kind][mb]: sequences this rank's pieces of that transfer carry */
  int *covered = calloc((size_t)SCHED_NUM_ACTION_KINDS * (M > 0 ? M : 1), sizeof *covered);
  if (!covered) return error_set(err, ERR_NOMEM, "replicated program check: out of memory");
  for (int q = 0; q < prog->num_ranks && !rc; q++) {
    int replica = 0, s = sched_replication_stage_of(r, q, &replica), n, b0, n0;
    sched_replication_range(r, s, replica, &b0, &n0);
    memset(covered, 0, (size_t)SCHED_NUM_ACTION_KINDS * (M > 0 ? M : 1) * sizeof *covered);
    const SchedAction *list = sched_program_rank_actions(prog, q, &n);
    for (int i = 0; i < n && !rc; i++) {
      const SchedAction *a = &list[i];
      if (a->stage != s)
        rc = error_set(err, ERR_CONFIG, "replicated program: %s is not on rank %d's stage %d",
                       sched_action_describe(a, what, sizeof what), q, s);
      if (rc || (!sched_kind_is_send(a->kind) && !sched_kind_is_recv(a->kind))) continue;
      const SchedAction *m = a->match >= 0 ? sched_program_action(prog, a->match) : NULL;
      int ps = sched_replication_stage_of(r, a->peer, NULL);
      if (a->microbatch < 0 || a->microbatch >= M || a->seq_count < 1 || a->seq_begin < b0 ||
          a->seq_begin + a->seq_count > b0 + n0 || ps != other_stage(a->kind, s) || ps != a->peer_stage)
        rc = error_set(err, ERR_CONFIG, "replicated program: %s is not a piece of rank %d's sequences %d..%d to "
                       "a neighbouring stage",
                       sched_action_describe(a, what, sizeof what), q, b0, b0 + n0 - 1);
      else if (!m || m->rank != a->peer || m->peer != q || m->kind != sched_kind_partner(a->kind) ||
               m->microbatch != a->microbatch || m->seq_begin != a->seq_begin || m->seq_count != a->seq_count)
        rc = error_set(err, ERR_CONFIG, "replicated program: %s is not matched with its piece (%s)",
                       sched_action_describe(a, what, sizeof what),
                       m ? sched_action_describe(m, other, sizeof other) : "none");
      else
        covered[(size_t)a->kind * M + a->microbatch] += a->seq_count;
    }
    for (int k = 0; k < SCHED_NUM_ACTION_KINDS && !rc; k++)
      for (int mb = 0; mb < M && !rc; mb++) {
        int c = covered[(size_t)k * M + mb];
        if (c != 0 && c != n0)
          rc = error_set(err, ERR_CONFIG, "replicated program: rank %d's %s pieces of micro-batch %d carry %d of its "
                         "%d sequences",
                         q, sched_action_kind_name((SchedActionKind)k), mb, c, n0);
      }
  }
  free(covered);
  if (rc) return rc;
  /* The strictest executor: blocking calls only, rendezvous sends. */
  SchedUnitCosts costs = sched_unit_costs_default();
  SchedEvalOptions eo = sched_unit_eval_options(&costs, SCHED_SEND_RENDEZVOUS);
  eo.serial = 1;
  SchedEval ev;
  rc = sched_evaluate(prog, &eo, &ev, err);
  sched_eval_free(&ev);
  if (rc) return error_wrap(err, "replicated program");
  return ERR_OK;
}
