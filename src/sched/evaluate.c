/* Max-plus evaluation of a program (a longest-path sweep in topological
 * order over the graph the execution model defines), the graph itself
 * (eval_graph.h, shared with the processor-sharing evaluator), deadlock
 * diagnosis, the time-slot chart, and the one-number-per-kind cost model. */
#include "sched/evaluate.h"

#include "sched/eval_graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The partner of a send/receive when the pairing is consistent (kinds are
 * partners, matches point at each other, ranks are each other's peers),
 * else -1. */
static int valid_partner(const SchedProgram *prog, const SchedAction *a) {
  if (!sched_kind_is_send(a->kind) && !sched_kind_is_recv(a->kind)) return -1;
  const SchedAction *m = sched_program_action(prog, a->match);
  if (!m || m->match != a->id || m->kind != sched_kind_partner(a->kind)) return -1;
  if (m->rank == a->rank || a->peer != m->rank || m->peer != a->rank) return -1;
  return m->id;
}

typedef struct Pred {
  int id;
  double weight;
} Pred;

/* Fills the predecessors of action a under the execution model (the pairing
 * edge of a rendezvous pair is not a predecessor: the pair is one node).
 * preds must hold a->num_deps + 3 entries. Returns the count, or -1 when a
 * dependency id is out of range. */
static int collect_preds(const SchedProgram *prog, const SchedAction *a, const int *prev_same,
                         const int *prev_compute, const SchedEvalOptions *opts, Pred *preds) {
  int n = 0;
  if (prev_same[a->id] >= 0) preds[n++] = (Pred){prev_same[a->id], 0};
  if (a->stream != SCHED_STREAM_COMPUTE && prev_compute[a->id] >= 0 && prev_compute[a->id] != prev_same[a->id])
    preds[n++] = (Pred){prev_compute[a->id], 0};
  int partner = valid_partner(prog, a);
  for (int d = 0; d < a->num_deps; d++) {
    int id = a->deps[d];
    if (id < 0 || id >= prog->num_actions) return -1;
    if (id == partner) continue;
    preds[n++] = (Pred){id, 0};
  }
  if (partner >= 0 && sched_kind_is_recv(a->kind) && opts->send_mode == SCHED_SEND_EAGER) {
    const SchedAction *s = &prog->actions[partner];
    double w = opts->transfer ? opts->transfer(s, a, opts->transfer_ctx) : 0.0;
    preds[n++] = (Pred){partner, w};
  }
  return n;
}

static int max_deps(const SchedProgram *prog) {
  int m = 0;
  for (int i = 0; i < prog->num_actions; i++)
    if (prog->actions[i].num_deps > m) m = prog->actions[i].num_deps;
  return m;
}

void sched_eval_free(SchedEval *eval) {
  if (!eval) return;
  free(eval->start);
  free(eval->finish);
  free(eval->busy);
  free(eval->comm);
  free(eval->rank_finish);
  free(eval->stuck);
  memset(eval, 0, sizeof *eval);
}

double sched_eval_rank_idle(const SchedEval *eval, int rank) {
  if (rank < 0 || rank >= eval->num_ranks) return 0;
  return eval->makespan - eval->busy[rank];
}

/* Appends "; rank r is stuck at X, which ..." for each blocked rank. */
static void describe_deadlock(const SchedProgram *prog, const SchedEval *ev, const int *prev_same,
                              const int *prev_compute, const SchedEvalOptions *opts, Pred *preds, Error *err) {
  char msg[sizeof err->msg];
  size_t len = (size_t)snprintf(msg, sizeof msg, "deadlock: %d of %d actions can never start", ev->num_stuck,
                                prog->num_actions);
  int shown = 0, blocked_ranks = 0;
  for (int r = 0; r < prog->num_ranks; r++) {
    int n;
    const SchedAction *list = sched_program_rank_actions(prog, r, &n);
    const SchedAction *a = NULL;
    for (int i = 0; i < n && !a; i++)
      if (isnan(ev->start[list[i].id])) a = &list[i];
    if (!a) continue;
    blocked_ranks++;
    if (len + 200 >= sizeof msg) continue;
    char self[160], other[160], why[400];
    sched_action_describe(a, self, sizeof self);
    int partner = valid_partner(prog, a);
    if ((sched_kind_is_send(a->kind) || sched_kind_is_recv(a->kind)) && partner < 0 &&
        (sched_kind_is_recv(a->kind) || opts->send_mode == SCHED_SEND_RENDEZVOUS)) {
      snprintf(why, sizeof why, "it has no matching %s on rank %d", sched_action_kind_name(sched_kind_partner(a->kind)),
               a->peer);
    } else {
      int np = collect_preds(prog, a, prev_same, prev_compute, opts, preds);
      int waiting = -1;
      for (int k = 0; k < np && waiting < 0; k++)
        if (isnan(ev->finish[preds[k].id])) waiting = preds[k].id;
      if (waiting < 0 && partner >= 0) waiting = partner;
      if (waiting >= 0)
        snprintf(why, sizeof why, "it waits for %s%s%s", waiting == partner ? "its partner " : "",
                 sched_action_describe(&prog->actions[waiting], other, sizeof other),
                 waiting == partner ? ", which that rank never reaches" : "");
      else
        snprintf(why, sizeof why, "it waits on itself");
    }
    len += (size_t)snprintf(msg + len, sizeof msg - len, "; %s is stuck: %s", self, why);
    shown++;
  }
  if (shown < blocked_ranks && len < sizeof msg)
    snprintf(msg + len, sizeof msg - len, "; and %d more blocked ranks", blocked_ranks - shown);
  error_set(err, ERR_CONFIG, "%s", msg);
}

void sched_eval_graph_free(SchedEvalGraph *g) {
  if (!g) return;
  free(g->node);
  free(g->indeg);
  free(g->edge_begin);
  free(g->edges);
  free(g->dur);
  free(g->prev_same);
  free(g->prev_compute);
  memset(g, 0, sizeof *g);
}

int sched_eval_alloc(const SchedProgram *prog, SchedEval *out, Error *err) {
  memset(out, 0, sizeof *out);
  int n = prog->num_actions, R = prog->num_ranks;
  out->num_actions = n;
  out->num_ranks = R;
  out->start = malloc((n ? (size_t)n : 1) * sizeof *out->start);
  out->finish = malloc((n ? (size_t)n : 1) * sizeof *out->finish);
  out->busy = calloc((size_t)R, sizeof *out->busy);
  out->comm = calloc((size_t)R, sizeof *out->comm);
  out->rank_finish = calloc((size_t)R, sizeof *out->rank_finish);
  if (!out->start || !out->finish || !out->busy || !out->comm || !out->rank_finish)
    return error_set(err, ERR_NOMEM, "sched_evaluate: out of memory");
  for (int i = 0; i < n; i++) out->start[i] = out->finish[i] = NAN;
  return ERR_OK;
}

int sched_eval_graph_build(const SchedProgram *prog, const SchedEvalOptions *opts, SchedEvalGraph *g, Error *err) {
  memset(g, 0, sizeof *g);
  if (!opts || !opts->cost) return error_set(err, ERR_ARG, "sched_evaluate: a cost callback is required");
  int n = prog->num_actions, R = prog->num_ranks;
  g->n = n;
  g->prev_same = malloc((n ? (size_t)n : 1) * sizeof *g->prev_same);
  g->prev_compute = malloc((n ? (size_t)n : 1) * sizeof *g->prev_compute);
  g->node = malloc((n ? (size_t)n : 1) * sizeof *g->node);
  g->indeg = calloc(n ? (size_t)n : 1, sizeof *g->indeg);
  g->edge_begin = calloc((size_t)n + 1, sizeof *g->edge_begin);
  g->dur = malloc((n ? (size_t)n : 1) * sizeof *g->dur);
  Pred *preds = malloc(((size_t)max_deps(prog) + 3) * sizeof *preds);
  int *prev_same = g->prev_same, *prev_compute = g->prev_compute, *node = g->node, *indeg = g->indeg;
  int *edge_begin = g->edge_begin;
  double *dur = g->dur;
  int rc = ERR_OK;
  if (!prev_same || !prev_compute || !node || !indeg || !edge_begin || !dur || !preds) {
    rc = error_set(err, ERR_NOMEM, "sched_evaluate: out of memory");
    goto done;
  }
  for (int r = 0; r < R; r++) {
    int last[SCHED_NUM_STREAMS], last_compute = -1;
    for (int s = 0; s < SCHED_NUM_STREAMS; s++) last[s] = -1;
    int cnt;
    const SchedAction *list = sched_program_rank_actions(prog, r, &cnt);
    for (int i = 0; i < cnt; i++) {
      const SchedAction *a = &list[i];
      if ((unsigned)a->stream >= SCHED_NUM_STREAMS) {
        char d[160];
        rc = error_set(err, ERR_FORMAT, "%s: unknown stream %d", sched_action_describe(a, d, sizeof d), (int)a->stream);
        goto done;
      }
      if (opts->serial) {
        prev_same[a->id] = i > 0 ? list[i - 1].id : -1;
        prev_compute[a->id] = -1;
      } else {
        prev_same[a->id] = last[a->stream];
        prev_compute[a->id] = last_compute;
      }
      last[a->stream] = a->id;
      if (a->stream == SCHED_STREAM_COMPUTE) last_compute = a->id;
    }
  }
  /* A rendezvous pair is one node, represented by its SEND. */
  for (int i = 0; i < n; i++) {
    const SchedAction *a = &prog->actions[i];
    int partner = valid_partner(prog, a);
    node[i] = (opts->send_mode == SCHED_SEND_RENDEZVOUS && partner >= 0 && sched_kind_is_recv(a->kind)) ? partner : i;
  }
  for (int i = 0; i < n; i++) {
    const SchedAction *a = &prog->actions[i];
    int partner = valid_partner(prog, a);
    int p2p = sched_kind_is_send(a->kind) || sched_kind_is_recv(a->kind);
    dur[i] = opts->cost(a, opts->cost_ctx);
    if (p2p && partner >= 0 && opts->send_mode == SCHED_SEND_RENDEZVOUS && sched_kind_is_send(a->kind)) {
      /* The pair's node is the send: both ends' own costs plus the transfer. */
      const SchedAction *recv = &prog->actions[partner];
      double recv_cost = opts->cost(recv, opts->cost_ctx);
      double transfer = opts->transfer ? opts->transfer(a, recv, opts->transfer_ctx) : 0.0;
      dur[i] = !(recv_cost >= 0) || !(transfer >= 0) ? -1.0 : dur[i] + transfer + recv_cost;
    }
    if (!(dur[i] >= 0) || isinf(dur[i])) {
      char d[160];
      rc = error_set(err, ERR_ARG, "sched_evaluate: cost of %s is %g; costs must be finite and >= 0",
                     sched_action_describe(a, d, sizeof d), dur[i]);
      goto done;
    }
    /* A receive with no sender never completes; under rendezvous neither
     * does a send with no receiver. The extra in-degree is never released. */
    if (p2p && partner < 0 && (sched_kind_is_recv(a->kind) || opts->send_mode == SCHED_SEND_RENDEZVOUS)) indeg[node[i]]++;
    int np = collect_preds(prog, a, prev_same, prev_compute, opts, preds);
    if (np < 0) {
      char d[160];
      rc = error_set(err, ERR_FORMAT, "sched_evaluate: %s depends on an id outside the program",
                     sched_action_describe(a, d, sizeof d));
      goto done;
    }
    for (int k = 0; k < np; k++) {
      edge_begin[node[preds[k].id] + 1]++;
      indeg[node[i]]++;
    }
  }
  for (int i = 0; i < n; i++) edge_begin[i + 1] += edge_begin[i];
  g->edges = malloc((edge_begin[n] ? (size_t)edge_begin[n] : 1) * sizeof *g->edges);
  int *fill = malloc((n ? (size_t)n : 1) * sizeof *fill);
  if (!g->edges || !fill) {
    free(fill);
    rc = error_set(err, ERR_NOMEM, "sched_evaluate: out of memory");
    goto done;
  }
  for (int i = 0; i < n; i++) fill[i] = edge_begin[i];
  for (int i = 0; i < n; i++) {
    int np = collect_preds(prog, &prog->actions[i], prev_same, prev_compute, opts, preds);
    for (int k = 0; k < np; k++) g->edges[fill[node[preds[k].id]]++] = (SchedEvalEdge){node[i], preds[k].weight};
  }
  free(fill);
done:
  free(preds);
  return rc;
}

int sched_eval_finish(const SchedProgram *prog, const SchedEvalOptions *opts, const SchedEvalGraph *g, SchedEval *out,
                      Error *err) {
  int n = prog->num_actions, R = prog->num_ranks;
  for (int i = 0; i < n; i++) {
    if (g->node[i] != i) {
      out->start[i] = out->start[g->node[i]];
      out->finish[i] = out->finish[g->node[i]];
    }
    const SchedAction *a = &prog->actions[i];
    if (isnan(out->start[i])) {
      out->num_stuck++;
      continue;
    }
    double d = out->finish[i] - out->start[i];
    if (sched_kind_is_compute(a->kind))
      out->busy[a->rank] += d;
    else
      out->comm[a->rank] += d;
    if (out->finish[i] > out->rank_finish[a->rank]) out->rank_finish[a->rank] = out->finish[i];
    if (out->finish[i] > out->makespan) out->makespan = out->finish[i];
  }
  if (out->makespan > 0) {
    double busy = 0;
    for (int r = 0; r < R; r++) busy += out->busy[r];
    out->bubble_fraction = 1.0 - busy / ((double)R * out->makespan);
  }
  if (!out->num_stuck) return ERR_OK;
  out->deadlocked = 1;
  out->stuck = malloc((size_t)out->num_stuck * sizeof *out->stuck);
  Pred *preds = malloc(((size_t)max_deps(prog) + 3) * sizeof *preds);
  if (!out->stuck || !preds) {
    free(preds);
    return error_set(err, ERR_NOMEM, "sched_evaluate: out of memory");
  }
  int k = 0;
  for (int i = 0; i < n; i++)
    if (isnan(out->start[i])) out->stuck[k++] = i;
  describe_deadlock(prog, out, g->prev_same, g->prev_compute, opts, preds, err);
  free(preds);
  return ERR_CONFIG;
}

int sched_evaluate(const SchedProgram *prog, const SchedEvalOptions *opts, SchedEval *out, Error *err) {
  memset(out, 0, sizeof *out);
  if (!opts || !opts->cost) return error_set(err, ERR_ARG, "sched_evaluate: a cost callback is required");
  SchedEvalGraph g;
  memset(&g, 0, sizeof g);
  int n = prog->num_actions;
  int *queue = malloc((n ? (size_t)n : 1) * sizeof *queue);
  double *ready = calloc(n ? (size_t)n : 1, sizeof *ready);
  int rc = sched_eval_alloc(prog, out, err);
  if (!rc && (!queue || !ready)) rc = error_set(err, ERR_NOMEM, "sched_evaluate: out of memory");
  if (!rc) rc = sched_eval_graph_build(prog, opts, &g, err);
  if (rc) goto done;
  /* Longest paths in topological order (Kahn): an action starts when its
   * last predecessor's finish (+ the transfer on a receive's edge) is known. */
  int head = 0, tail = 0;
  for (int i = 0; i < n; i++)
    if (g.node[i] == i && g.indeg[i] == 0) queue[tail++] = i;
  while (head < tail) {
    int u = queue[head++];
    double start = ready[u], finish = start + g.dur[u];
    out->start[u] = start;
    out->finish[u] = finish;
    for (int e = g.edge_begin[u]; e < g.edge_begin[u + 1]; e++) {
      int v = g.edges[e].to;
      double t = finish + g.edges[e].weight;
      if (t > ready[v]) ready[v] = t;
      if (--g.indeg[v] == 0) queue[tail++] = v;
    }
  }
  rc = sched_eval_finish(prog, opts, &g, out, err);
done:
  sched_eval_graph_free(&g);
  free(queue);
  free(ready);
  return rc;
}

/* ---- timeline ---- */

#define TIMELINE_MAX_ROWS 4000

/* One row per time slot: each cell shows the compute running on that rank
 * at the middle of the slot (blank: idle or communicating). */
void sched_eval_print_timeline(const SchedProgram *prog, const SchedEval *ev, FILE *f) {
  double slot = 0;
  for (int i = 0; i < prog->num_actions; i++) {
    double d = ev->finish[i] - ev->start[i];
    if (sched_kind_is_compute(prog->actions[i].kind) && d > 0 && (slot == 0 || d < slot)) slot = d;
  }
  if (slot == 0 || ev->makespan / slot > TIMELINE_MAX_ROWS) {
    fprintf(f, "(time chart skipped: %s)\n", slot == 0 ? "no compute takes time" : "too many slots");
    return;
  }
  int rows = (int)ceil(ev->makespan / slot - 1e-9);
  fprintf(f, "%8s", "time");
  for (int r = 0; r < prog->num_ranks; r++) fprintf(f, " | rank %-5d", r);
  fputc('\n', f);
  int *cursor = calloc((size_t)prog->num_ranks, sizeof *cursor);
  if (!cursor) return;
  for (int row = 0; row < rows; row++) {
    double mid = (row + 0.5) * slot;
    fprintf(f, "%8.2f", row * slot);
    for (int r = 0; r < prog->num_ranks; r++) {
      int n;
      const SchedAction *list = sched_program_rank_actions(prog, r, &n);
      char label[32] = "";
      /* Compute-stream actions run in list order, so one forward scan per rank suffices. */
      while (cursor[r] < n && (list[cursor[r]].stream != SCHED_STREAM_COMPUTE || ev->finish[list[cursor[r]].id] <= mid))
        cursor[r]++;
      if (cursor[r] < n) {
        const SchedAction *a = &list[cursor[r]];
        if (sched_kind_is_compute(a->kind) && ev->start[a->id] <= mid) sched_action_label(prog, a, label, sizeof label);
      }
      fprintf(f, " | %-10s", label);
    }
    fputc('\n', f);
  }
  free(cursor);
}

/* ---- unit cost model ---- */

SchedUnitCosts sched_unit_costs_default(void) {
  SchedUnitCosts c;
  memset(&c, 0, sizeof c);
  c.fwd = 1;
  c.bwd = 2;
  c.bwd_weight = 1;
  return c;
}

double sched_unit_cost(const SchedAction *a, void *ctx) {
  const SchedUnitCosts *c = ctx;
  double scale = 1;
  if (c->stage_scale && a->stage >= 0 && a->stage < c->num_stages) scale = c->stage_scale[a->stage];
  switch (a->kind) {
    case SCHED_FWD: return c->fwd * scale;
    case SCHED_BWD: return (c->split_backward ? c->bwd - c->bwd_weight : c->bwd) * scale;
    case SCHED_BWD_WEIGHT: return c->bwd_weight * scale;
    case SCHED_SEND_ACT:
    case SCHED_SEND_GRAD: return c->send;
    case SCHED_RECV_ACT:
    case SCHED_RECV_GRAD: return c->recv;
    case SCHED_GRAD_REDUCE: return c->grad_reduce;
    case SCHED_OPTIM: return c->optim;
    default: return c->other;
  }
}

double sched_unit_transfer(const SchedAction *send, const SchedAction *recv, void *ctx) {
  (void)send;
  (void)recv;
  return ((const SchedUnitCosts *)ctx)->transfer;
}

SchedEvalOptions sched_unit_eval_options(const SchedUnitCosts *costs, SchedSendMode mode) {
  SchedEvalOptions o;
  memset(&o, 0, sizeof o);
  o.cost = sched_unit_cost;
  o.cost_ctx = (void *)costs;
  o.transfer = sched_unit_transfer;
  o.transfer_ctx = (void *)costs;
  o.send_mode = mode;
  return o;
}
