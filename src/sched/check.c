/* The program checker (rules in check.h). Problems are collected into one
 * report so a broken builder shows everything wrong at once; the deadlock
 * simulation is the evaluator run under rendezvous semantics. */
#include "sched/check.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "sched/evaluate.h"

typedef struct Report {
  char text[4096];
  size_t len;
  int count;
} Report;

static void problem(Report *rep, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(Report *rep, const char *fmt, ...) {
  rep->count++;
  if (rep->len + 2 >= sizeof rep->text) return;
  if (rep->count > 1) rep->len += (size_t)snprintf(rep->text + rep->len, sizeof rep->text - rep->len, "; ");
  if (rep->len >= sizeof rep->text) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(rep->text + rep->len, sizeof rep->text - rep->len, fmt, ap);
  va_end(ap);
  rep->len += n > 0 ? (size_t)n : 0;
  if (rep->len > sizeof rep->text - 1) rep->len = sizeof rep->text - 1;
}

/* Up to four descriptions alive at once, for messages naming several actions
 * (calls are sequenced, so each one gets its own buffer). */
typedef struct DescRing {
  char buf[4][160];
  int next;
} DescRing;

static const char *describe(DescRing *ring, const SchedAction *a) {
  char *b = ring->buf[ring->next];
  ring->next = (ring->next + 1) % 4;
  return sched_action_describe(a, b, sizeof ring->buf[0]);
}
#define DESC(a) describe(&ring, (a))

static int has_dep(const SchedAction *a, int id) {
  for (int d = 0; d < a->num_deps; d++)
    if (a->deps[d] == id) return 1;
  return 0;
}

/* ---- structure ---- */

static int check_structure(const SchedProgram *prog, Report *rep) {
  DescRing ring = {.next = 0};
  int bad_ids = 0;
  const SchedConfig *c = &prog->config;
  int P = c->pp, V = c->vpp, M = c->microbatches;
  if (prog->num_ranks != P) problem(rep, "the program has %d ranks but config.pp is %d", prog->num_ranks, P);
  for (int r = 0; r < prog->num_ranks; r++) {
    int n;
    const SchedAction *list = sched_program_rank_actions(prog, r, &n);
    for (int i = 0; i < n; i++) {
      const SchedAction *a = &list[i];
      if (a->id != prog->rank_begin[r] + i || a->rank != r || a->index != i) {
        problem(rep, "%s sits at rank %d #%d (id %d)", DESC(a), r, i, prog->rank_begin[r] + i);
        bad_ids = 1;
      }
      if ((unsigned)a->kind >= SCHED_NUM_ACTION_KINDS || (unsigned)a->stream >= SCHED_NUM_STREAMS) {
        problem(rep, "%s has an unknown kind or stream", DESC(a));
        bad_ids = 1;
        continue;
      }
      int staged = a->kind == SCHED_FWD || a->kind == SCHED_BWD || a->kind == SCHED_BWD_WEIGHT || sched_kind_is_send(a->kind) ||
                   sched_kind_is_recv(a->kind);
      if (staged) {
        if (a->microbatch < 0 || a->microbatch >= M || a->chunk < 0 || a->chunk >= V)
          problem(rep, "%s: micro-batch %d / chunk %d outside [0, %d) / [0, %d)", DESC(a), a->microbatch, a->chunk, M, V);
        else if (a->stage != a->chunk * P + r)
          problem(rep, "%s: stage %d, but chunk %d of rank %d is stage %d", DESC(a), a->stage, a->chunk, r,
                  a->chunk * P + r);
      }
      for (int d = 0; d < a->num_deps; d++) {
        const SchedAction *dep = sched_program_action(prog, a->deps[d]);
        if (!dep) {
          problem(rep, "%s depends on id %d, which is not in the program", DESC(a), a->deps[d]);
          bad_ids = 1;
        } else if (dep->rank == r && dep->index >= i) {
          problem(rep, "%s depends on %s, which is not earlier on its rank", DESC(a), DESC(dep));
        } else if (dep->rank != r && !(sched_kind_is_recv(a->kind) && dep->id == a->match)) {
          problem(rep, "%s depends on %s on another rank; only a RECV may, on its SEND", DESC(a), DESC(dep));
        }
      }
      if (a->match >= prog->num_actions) {
        problem(rep, "%s: match id %d is not in the program", DESC(a), a->match);
        bad_ids = 1;
      }
    }
  }
  return bad_ids;
}

/* ---- send/receive matching ---- */

typedef struct LinkEnd {
  int grad, sender, receiver, mb, send_stage, recv_stage; /* the key */
  int is_recv, id;
} LinkEnd;

static int link_cmp(const void *pa, const void *pb) {
  const LinkEnd *a = pa, *b = pb;
  const int ka[] = {a->grad, a->sender, a->receiver, a->mb, a->send_stage, a->recv_stage, a->is_recv, a->id};
  const int kb[] = {b->grad, b->sender, b->receiver, b->mb, b->send_stage, b->recv_stage, b->is_recv, b->id};
  for (int i = 0; i < 8; i++)
    if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
  return 0;
}

static int same_link(const LinkEnd *a, const LinkEnd *b) {
  return a->grad == b->grad && a->sender == b->sender && a->receiver == b->receiver && a->mb == b->mb &&
         a->send_stage == b->send_stage && a->recv_stage == b->recv_stage;
}

static void check_matching(const SchedProgram *prog, Report *rep) {
  DescRing ring = {.next = 0};
  int P = prog->config.pp, S = prog->config.pp * prog->config.vpp;
  LinkEnd *ends = malloc((prog->num_actions ? (size_t)prog->num_actions : 1) * sizeof *ends);
  if (!ends) {
    problem(rep, "out of memory checking sends and receives");
    return;
  }
  int n = 0;
  for (int i = 0; i < prog->num_actions; i++) {
    const SchedAction *a = &prog->actions[i];
    int send = sched_kind_is_send(a->kind), recv = sched_kind_is_recv(a->kind);
    if (!send && !recv) continue;
    int grad = a->kind == SCHED_SEND_GRAD || a->kind == SCHED_RECV_GRAD;
    int step = (grad ? -1 : 1) * (send ? 1 : -1);
    if (a->peer == a->rank)
      problem(rep, "%s sends to or receives from its own rank", DESC(a));
    else if (a->stage < 0 || a->peer_stage != a->stage + step || a->peer_stage < 0 || a->peer_stage >= S ||
             a->peer != a->peer_stage % P || a->peer_chunk != a->peer_stage / P)
      problem(rep, "%s: peer stage %d (rank %d chunk %d) is not the %s stage of stage %d", DESC(a), a->peer_stage,
              a->peer, a->peer_chunk, step > 0 ? "next" : "previous", a->stage);
    LinkEnd e = {grad, send ? a->rank : a->peer, send ? a->peer : a->rank, a->microbatch,
                 send ? a->stage : a->peer_stage, send ? a->peer_stage : a->stage, recv, a->id};
    ends[n++] = e;
  }
  qsort(ends, (size_t)n, sizeof *ends, link_cmp);
  for (int i = 0; i < n;) {
    int j = i, sends = 0, recvs = 0, send_id = -1, recv_id = -1;
    while (j < n && same_link(&ends[i], &ends[j])) {
      if (ends[j].is_recv) {
        recvs++;
        if (recv_id < 0) recv_id = ends[j].id;
      } else {
        sends++;
        if (send_id < 0) send_id = ends[j].id;
      }
      j++;
    }
    const SchedAction *s = send_id >= 0 ? &prog->actions[send_id] : NULL;
    const SchedAction *r = recv_id >= 0 ? &prog->actions[recv_id] : NULL;
    if (s && !r)
      problem(rep, "%s has no matching %s on rank %d", DESC(s), sched_action_kind_name(sched_kind_partner(s->kind)), s->peer);
    else if (r && !s)
      problem(rep, "%s has no matching %s on rank %d", DESC(r), sched_action_kind_name(sched_kind_partner(r->kind)), r->peer);
    else if (sends > 1 || recvs > 1)
      problem(rep, "%s: the transfer is sent %d times and received %d times", DESC(s), sends, recvs);
    else if (s->match != r->id || r->match != s->id)
      problem(rep, "%s and %s are each other's partners but their match fields say %d and %d", DESC(s), DESC(r),
              s->match, r->match);
    else if (!has_dep(r, s->id))
      problem(rep, "%s does not list its SEND %s as a dependency", DESC(r), DESC(s));
    i = j;
  }
  free(ends);
}

/* ---- computes, data flow, reductions ---- */

enum { POS_FWD, POS_BWD, POS_SA, POS_RA, POS_SG, POS_RG, POS_W, NUM_POS };

static int pos_kind(SchedActionKind k) {
  switch (k) {
    case SCHED_FWD: return POS_FWD;
    case SCHED_BWD: return POS_BWD;
    case SCHED_SEND_ACT: return POS_SA;
    case SCHED_RECV_ACT: return POS_RA;
    case SCHED_SEND_GRAD: return POS_SG;
    case SCHED_RECV_GRAD: return POS_RG;
    case SCHED_BWD_WEIGHT: return POS_W;
    default: return -1;
  }
}

static void check_rank(const SchedProgram *prog, int r, int *pos, int *dup, Report *rep) {
  DescRing ring = {.next = 0};
  const SchedConfig *c = &prog->config;
  int P = c->pp, V = c->vpp, M = c->microbatches, S = P * V;
  size_t slots = (size_t)NUM_POS * M * V;
  for (size_t k = 0; k < slots; k++) pos[k] = -1, dup[k] = 0;
#define POS(kind_, mb_, ch_) pos[((size_t)(kind_) * M + (mb_)) * V + (ch_)]
  int n;
  const SchedAction *list = sched_program_rank_actions(prog, r, &n);
  for (int i = 0; i < n; i++) {
    const SchedAction *a = &list[i];
    int pk = pos_kind(a->kind);
    if (pk < 0 || a->microbatch < 0 || a->microbatch >= M || a->chunk < 0 || a->chunk >= V) continue;
    size_t k = ((size_t)pk * M + a->microbatch) * V + a->chunk;
    if (pos[k] >= 0) {
      if (!dup[k]) problem(rep, "%s repeats %s", DESC(a), DESC(&list[pos[k]]));
      dup[k] = 1;
    } else {
      pos[k] = i;
    }
  }
  int last_bwd_any = -1, last_fwd_any = -1;
  for (int mb = 0; mb < M; mb++)
    for (int ch = 0; ch < V; ch++) {
      int s = ch * P + r, f = POS(POS_FWD, mb, ch), b = POS(POS_BWD, mb, ch);
      if (f < 0 || b < 0) {
        problem(rep, "rank %d never runs the %s of mb %d chunk %d (stage %d)", r, f < 0 ? "forward" : "backward", mb, ch, s);
        continue;
      }
      if (f > last_fwd_any) last_fwd_any = f;
      if (b > last_bwd_any) last_bwd_any = b;
      const SchedAction *F = &list[f], *B = &list[b];
      if (b < f) problem(rep, "%s runs before its forward %s", DESC(B), DESC(F));
      if (!has_dep(B, F->id)) problem(rep, "%s does not depend on its forward %s", DESC(B), DESC(F));
      /* A split backward: its weight gradient once, after it. */
      int w = POS(POS_W, mb, ch);
      if (c->split_backward && w < 0)
        problem(rep, "rank %d never runs the weight gradient (BWD_WEIGHT) of mb %d chunk %d (stage %d)", r, mb, ch, s);
      else if (!c->split_backward && w >= 0)
        problem(rep, "%s in a program whose backward is not split (config.split_backward 0)", DESC(&list[w]));
      else if (w >= 0 && (w < b || !has_dep(&list[w], B->id)))
        problem(rep, "%s does not follow its backward %s", DESC(&list[w]), DESC(B));
      if (w > last_bwd_any) last_bwd_any = w;
      /* Input activation. */
      if (s > 0 && (s - 1) % P != r) {
        int ra = POS(POS_RA, mb, ch);
        if (ra < 0) problem(rep, "%s has no RECV_ACT for its input on rank %d", DESC(F), r);
        else if (ra > f || !has_dep(F, list[ra].id)) problem(rep, "%s does not wait for %s", DESC(F), DESC(&list[ra]));
      } else if (s > 0) {
        int pf = POS(POS_FWD, mb, (s - 1) / P);
        if (pf >= 0 && !has_dep(F, list[pf].id)) problem(rep, "%s does not wait for %s", DESC(F), DESC(&list[pf]));
      }
      /* Output activation and incoming gradient. */
      if (s < S - 1 && (s + 1) % P != r) {
        int sa = POS(POS_SA, mb, ch), rg = POS(POS_RG, mb, ch);
        if (sa < 0) problem(rep, "%s never sends its output to rank %d", DESC(F), (s + 1) % P);
        else if (sa < f || !has_dep(&list[sa], F->id)) problem(rep, "%s does not follow its forward %s", DESC(&list[sa]), DESC(F));
        if (rg < 0) problem(rep, "%s has no RECV_GRAD for its output gradient on rank %d", DESC(B), r);
        else if (rg > b || !has_dep(B, list[rg].id)) problem(rep, "%s does not wait for %s", DESC(B), DESC(&list[rg]));
      } else if (s < S - 1) {
        int nb = POS(POS_BWD, mb, (s + 1) / P);
        if (nb >= 0 && !has_dep(B, list[nb].id)) problem(rep, "%s does not wait for %s", DESC(B), DESC(&list[nb]));
      }
      /* Outgoing gradient. */
      if (s > 0 && (s - 1) % P != r) {
        int sg = POS(POS_SG, mb, ch);
        if (sg < 0) problem(rep, "%s never sends its input gradient to rank %d", DESC(B), (s - 1) % P);
        else if (sg < b || !has_dep(&list[sg], B->id)) problem(rep, "%s does not follow its backward %s", DESC(&list[sg]), DESC(B));
      }
    }
#undef POS
  /* Reductions and the optimizer step. */
  int optim = -1, optims = 0;
  for (int i = 0; i < n; i++)
    if (list[i].kind == SCHED_OPTIM) {
      optims++;
      if (optim < 0) optim = i;
    }
  if (optims != 1) problem(rep, "rank %d has %d OPTIM actions, expected 1", r, optims);
  for (int ch = 0; ch < V; ch++) {
    int last_b = -1, reduces = 0;
    for (int i = 0; i < n; i++)
      if ((list[i].kind == SCHED_BWD || list[i].kind == SCHED_BWD_WEIGHT) && list[i].chunk == ch) last_b = i;
    for (int i = 0; i < n; i++) {
      const SchedAction *a = &list[i];
      if (a->kind != SCHED_GRAD_REDUCE || a->chunk != ch) continue;
      reduces++;
      if (last_b >= 0 && (i < last_b || !has_dep(a, list[last_b].id)))
        problem(rep, "%s does not follow the chunk's last backward %s", DESC(a), DESC(&list[last_b]));
      if (optim >= 0 && (optim < i || !has_dep(&list[optim], a->id)))
        problem(rep, "%s does not wait for %s", DESC(&list[optim]), DESC(a));
    }
    if (!reduces) problem(rep, "rank %d never reduces the gradients of chunk %d (no GRAD_REDUCE)", r, ch);
  }
  for (int i = 0; i < n; i++)
    if (list[i].kind == SCHED_GRAD_REDUCE && (list[i].chunk < 0 || list[i].chunk >= V))
      problem(rep, "%s reduces chunk %d, outside [0, %d)", DESC(&list[i]), list[i].chunk, V);
  if (optim >= 0 && (optim < last_bwd_any || optim < last_fwd_any))
    problem(rep, "%s comes before the rank's last forward or backward", DESC(&list[optim]));
}

/* ---- phases (param_groups > 1) ---- */

/* Phase p of a phased program as a one-group program of its own: the
 * actions naming phase p, in list order, with their dependencies and
 * matches; one that leaves the phase is a problem. NULL when it cannot be
 * built (the problem is in rep). */
static SchedProgram *phase_program(const SchedProgram *prog, int p, SchedActionRef *where, Report *rep) {
  DescRing ring = {.next = 0};
  SchedConfig one = prog->config;
  one.param_groups = 0;
  for (int g = 0; g < SCHED_MAX_PARAM_GROUPS; g++) one.phase_repeats[g] = 0;
  SchedBuilder *b = sched_builder_new(&one, prog->num_ranks);
  if (!b) {
    problem(rep, "out of memory checking phase %d", p);
    return NULL;
  }
  Error e = {0, ""};
  int rc = 0;
  for (int id = 0; id < prog->num_actions && !rc; id++) {
    const SchedAction *a = &prog->actions[id];
    where[id].rank = -1;
    if (a->phase != p) continue;
    rc = sched_builder_append(b, a->rank, a, &where[id], &e);
  }
  for (int id = 0; id < prog->num_actions && !rc; id++) {
    const SchedAction *a = &prog->actions[id];
    if (a->phase != p) continue;
    for (int d = 0; d < a->num_deps && !rc; d++) {
      if (where[a->deps[d]].rank < 0) problem(rep, "%s depends on %s of another phase", DESC(a), DESC(&prog->actions[a->deps[d]]));
      else rc = sched_builder_add_dep(b, where[id], where[a->deps[d]], &e);
    }
    if (!rc && a->match >= 0) {
      if (where[a->match].rank < 0) problem(rep, "%s is matched with %s of another phase", DESC(a), DESC(&prog->actions[a->match]));
      else rc = sched_builder_set_match(b, where[id], where[a->match], &e);
    }
  }
  SchedProgram *out = NULL;
  if (!rc) rc = sched_builder_finish(b, &out, &e);
  sched_builder_free(b);
  if (rc) problem(rep, "phase %d: %s", p, e.msg);
  return rc ? NULL : out;
}

/* Every action belongs to one phase and names that phase's group (the
 * groups in order, group g in phase_repeats[g] phases in a row), and each
 * phase is a correct one-group iteration by every rule above. */
static void check_phases(const SchedProgram *prog, Report *rep) {
  DescRing ring = {.next = 0};
  int G = prog->config.param_groups, P = sched_config_num_phases(&prog->config);
  if (P > SCHED_MAX_PHASES) {
    problem(rep, "%d phases per iteration, at most %d", P, SCHED_MAX_PHASES);
    return;
  }
  for (int id = 0; id < prog->num_actions; id++) {
    const SchedAction *a = &prog->actions[id];
    if (a->group < 0 || a->group >= G) problem(rep, "%s names no parameter group in [0, %d)", DESC(a), G);
    else if (a->phase < 0 || a->phase >= P) problem(rep, "%s names no phase in [0, %d)", DESC(a), P);
    else if (sched_config_phase_group(&prog->config, a->phase) != a->group)
      problem(rep, "%s is in phase %d, which steps group %d", DESC(a), a->phase,
              sched_config_phase_group(&prog->config, a->phase));
  }
  SchedActionRef *where = malloc((prog->num_actions ? (size_t)prog->num_actions : 1) * sizeof *where);
  if (!where) {
    problem(rep, "out of memory checking the phases");
    return;
  }
  for (int p = 0; p < P; p++) {
    SchedProgram *phase = phase_program(prog, p, where, rep);
    Error e = {0, ""};
    if (phase && sched_check(phase, &e))
      problem(rep, "phase %d (group %d): %s", p, sched_config_phase_group(&prog->config, p), e.msg);
    sched_program_free(phase);
  }
  free(where);
}

int sched_check(const SchedProgram *prog, Error *err) {
  Report rep;
  memset(&rep, 0, sizeof rep);
  const SchedConfig *c = &prog->config;
  if (c->param_groups > 1) {
    check_phases(prog, &rep);
    if (!rep.count) return ERR_OK;
    return error_set(err, ERR_CONFIG, "program check (%s, pp %d, vpp %d, m %d, %d parameter groups): %d problem%s: %s",
                     sched_schedule_name(c->schedule), c->pp, c->vpp, c->microbatches, c->param_groups, rep.count,
                     rep.count == 1 ? "" : "s", rep.text);
  }
  if (c->pp < 1 || c->vpp < 1 || c->microbatches < 0)
    return error_set(err, ERR_CONFIG, "program check: config has pp %d, vpp %d, microbatches %d", c->pp, c->vpp,
                     c->microbatches);
  int bad_ids = check_structure(prog, &rep);
  if (!bad_ids) {
    check_matching(prog, &rep);
    size_t slots = (size_t)NUM_POS * c->microbatches * c->vpp;
    int *pos = malloc((slots ? slots : 1) * sizeof *pos);
    int *dup = malloc((slots ? slots : 1) * sizeof *dup);
    if (!pos || !dup)
      problem(&rep, "out of memory checking computes");
    else
      for (int r = 0; r < prog->num_ranks && r < c->pp; r++) check_rank(prog, r, pos, dup, &rep);
    free(pos);
    free(dup);
    SchedUnitCosts costs = sched_unit_costs_default();
    costs.split_backward = c->split_backward;
    SchedEvalOptions opts = sched_unit_eval_options(&costs, SCHED_SEND_RENDEZVOUS);
    opts.serial = 1;
    SchedEval ev;
    Error eval_err = {0, ""};
    int rc = sched_evaluate(prog, &opts, &ev, &eval_err);
    if (rc == ERR_CONFIG)
      problem(&rep, "run in list order with blocking send/receive: %s", eval_err.msg);
    else if (rc)
      problem(&rep, "%s", eval_err.msg);
    sched_eval_free(&ev);
  }
  if (!rep.count) return ERR_OK;
  return error_set(err, ERR_CONFIG, "program check (%s, pp %d, vpp %d, m %d): %d problem%s: %s",
                   sched_schedule_name(c->schedule), c->pp, c->vpp, c->microbatches, rep.count, rep.count == 1 ? "" : "s",
                   rep.text);
}
