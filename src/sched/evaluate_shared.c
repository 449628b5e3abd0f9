/* The processor-sharing evaluator (evaluate_shared.h): an event simulation
 * in time order over the max-plus evaluator's graph, re-timing the
 * computing ranks whenever the set of them changes. */
#include "sched/evaluate_shared.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/eval_graph.h"

/* ---- a binary min-heap of (time, node), ties by node id (deterministic) ---- */

typedef struct Event {
  double t;
  int id;
} Event;

typedef struct Heap {
  Event *e;
  int n;
} Heap;

static int earlier(Event a, Event b) { return a.t < b.t || (a.t == b.t && a.id < b.id); }

static void heap_push(Heap *h, double t, int id) {
  int i = h->n++;
  h->e[i] = (Event){t, id};
  while (i > 0 && earlier(h->e[i], h->e[(i - 1) / 2])) {
    Event x = h->e[i];
    h->e[i] = h->e[(i - 1) / 2];
    h->e[(i - 1) / 2] = x;
    i = (i - 1) / 2;
  }
}

static Event heap_pop(Heap *h) {
  Event top = h->e[0];
  h->e[0] = h->e[--h->n];
  for (int i = 0;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && earlier(h->e[l], h->e[m])) m = l;
    if (r < h->n && earlier(h->e[r], h->e[m])) m = r;
    if (m == i) break;
    Event x = h->e[i];
    h->e[i] = h->e[m];
    h->e[m] = x;
    i = m;
  }
  return top;
}

/* ---- the simulation ---- */

typedef struct Sim {
  const SchedProgram *prog;
  const SchedShareOptions *sh;
  const SchedLinkModel *links; /* NULL: none */
  SchedEvalGraph g;
  SchedEval *out;
  double *ready;    /* per node: latest predecessor finish (+ edge weight) so far */
  double *work;     /* per node: CPU work in dedicated-core seconds */
  double *rest;     /* per node: the part of its cost that is not CPU work */
  Heap pending;     /* nodes whose predecessors all finished, by start time */
  Heap resting;     /* nodes in their non-CPU part, by finish time */
  int *computing;   /* per rank: the node in its CPU part, -1 */
  double *left;     /* per rank: that node's CPU work still to do */
  double *speed;    /* per rank: its current fraction of a dedicated core */
  double *node_busy; /* per cluster node: devices of the computing ranks (+ waiting_load x the others) */
  char *held;       /* per node: a RECV whose transfer a link model releases (still counted in indeg) */
  int finished;
} Sim;

/* A node's indegree fell: start it when nothing is left, or tell the link
 * model that a RECV it holds was posted. */
static void released(Sim *s, int v) {
  if (s->g.indeg[v] == 0) heap_push(&s->pending, s->ready[v], v);
  else if (s->g.indeg[v] == 1 && s->held[v] == 1) {
    s->held[v] = 2; /* posted once */
    s->links->posted(s->links->ctx, v, s->ready[v]);
  }
}

static void deliver(void *arg, int v, double t) {
  Sim *s = arg;
  if (v < 0 || v >= s->g.n || !s->held[v]) return;
  s->held[v] = 0;
  if (t > s->ready[v]) s->ready[v] = t;
  --s->g.indeg[v];
  released(s, v);
}

static void finish_node(Sim *s, int u, double t) {
  s->out->finish[u] = t;
  s->finished++;
  const SchedAction *a = &s->prog->actions[u];
  int claimed_recv = s->links && sched_kind_is_send(a->kind) && a->match >= 0 && s->held[a->match] ? a->match : -1;
  for (int e = s->g.edge_begin[u]; e < s->g.edge_begin[u + 1]; e++) {
    int v = s->g.edges[e].to;
    if (v == claimed_recv) continue; /* the link model releases it */
    double at = t + s->g.edges[e].weight;
    if (at > s->ready[v]) s->ready[v] = at;
    --s->g.indeg[v];
    released(s, v);
  }
  if (claimed_recv >= 0) s->links->sent(s->links->ctx, u, t);
}

/* The CPU part is done at t: the rest follows, or the node finishes. */
static void end_cpu_part(Sim *s, int u, double t) {
  if (s->rest[u] > 0)
    heap_push(&s->resting, t + s->rest[u], u);
  else
    finish_node(s, u, t);
}

static int start_node(Sim *s, int u, double t, Error *err) {
  s->out->start[u] = t;
  if (s->work[u] > 0) {
    int r = s->prog->actions[u].rank;
    if (s->computing[r] >= 0)
      return error_set(err, ERR_INTERNAL, "sched_evaluate_shared: rank %d computes two actions at once", r);
    s->computing[r] = u;
    s->left[r] = s->work[u];
    return ERR_OK;
  }
  end_cpu_part(s, u, t);
  return ERR_OK;
}

/* Speeds of the computing ranks for the current set of them. */
static void update_speeds(Sim *s) {
  const SchedShareOptions *sh = s->sh;
  int R = s->prog->num_ranks, N = sh->num_nodes;
  for (int n = 0; n < N; n++) s->node_busy[n] = 0;
  for (int r = 0; r < R; r++) {
    double w = s->computing[r] >= 0 ? 1.0 : sh->waiting_load;
    if (w > 0)
      for (int n = 0; n < N; n++) s->node_busy[n] += w * sh->load[(size_t)r * N + n];
  }
  for (int r = 0; r < R; r++) {
    if (s->computing[r] < 0) continue;
    double v = 1.0;
    for (int n = 0; n < N; n++)
      if (sh->load[(size_t)r * N + n] > 0 && sh->capacity[n] < s->node_busy[n])
        v = fmin(v, sh->capacity[n] / s->node_busy[n]);
    s->speed[r] = v;
  }
}

static int check_options(const SchedProgram *prog, const SchedShareOptions *sh, Error *err) {
  if (!sh || !sh->work || !sh->capacity || !sh->load || sh->num_nodes < 1)
    return error_set(err, ERR_ARG, "sched_evaluate_shared: needs a work callback, node capacities and rank loads");
  if (!(sh->priced_share > 0 && sh->priced_share <= 1))
    return error_set(err, ERR_ARG, "sched_evaluate_shared: priced_share %g is not in (0, 1]", sh->priced_share);
  if (!(sh->waiting_load >= 0 && sh->waiting_load <= 1))
    return error_set(err, ERR_ARG, "sched_evaluate_shared: waiting_load %g is not in [0, 1]", sh->waiting_load);
  for (int n = 0; n < sh->num_nodes; n++)
    if (!(sh->capacity[n] > 0) || isinf(sh->capacity[n]))
      return error_set(err, ERR_ARG, "sched_evaluate_shared: node %d's capacity %g is not a number > 0", n,
                       sh->capacity[n]);
  for (size_t i = 0; i < (size_t)prog->num_ranks * sh->num_nodes; i++)
    if (!(sh->load[i] >= 0) || isinf(sh->load[i]))
      return error_set(err, ERR_ARG, "sched_evaluate_shared: rank %d's load on node %d is %g (expected >= 0)",
                       (int)(i / sh->num_nodes), (int)(i % sh->num_nodes), sh->load[i]);
  return ERR_OK;
}

static void sim_free(Sim *s) {
  sched_eval_graph_free(&s->g);
  free(s->ready);
  free(s->work);
  free(s->rest);
  free(s->pending.e);
  free(s->resting.e);
  free(s->computing);
  free(s->left);
  free(s->speed);
  free(s->node_busy);
  free(s->held);
}

/* Runs the events until none is left. */
static int run(Sim *s, Error *err) {
  int R = s->prog->num_ranks, n = s->g.n;
  for (int i = 0; i < n; i++)
    if (s->g.node[i] == i && s->g.indeg[i] == 0) heap_push(&s->pending, 0.0, i);
  double now = 0;
  for (;;) {
    double next = INFINITY;
    if (s->pending.n) next = fmin(next, s->pending.e[0].t);
    if (s->resting.n) next = fmin(next, s->resting.e[0].t);
    for (int r = 0; r < R; r++)
      if (s->computing[r] >= 0) next = fmin(next, now + s->left[r] / s->speed[r]);
    const SchedLinkModel *lm = s->links;
    if (lm) next = fmin(next, lm->next(lm->ctx, s->computing));
    if (isinf(next)) return ERR_OK;
    /* The links run to `next` under the ranks' state since `now`; what
     * they deliver by then starts below. */
    if (lm) lm->advance(lm->ctx, next, s->computing, deliver, s);
    /* CPU parts advance at their speeds; the ones due at `next` end there. */
    int changed = 0;
    for (int r = 0; r < R; r++) {
      int u = s->computing[r];
      if (u < 0) continue;
      if (now + s->left[r] / s->speed[r] <= next) {
        s->computing[r] = -1;
        s->left[r] = 0;
        changed = 1;
        end_cpu_part(s, u, next);
      } else {
        s->left[r] = fmax(0.0, s->left[r] - s->speed[r] * (next - now));
      }
    }
    now = next;
    while (s->resting.n && s->resting.e[0].t <= now) {
      Event e = heap_pop(&s->resting);
      finish_node(s, e.id, e.t);
    }
    while (s->pending.n && s->pending.e[0].t <= now) {
      Event e = heap_pop(&s->pending);
      int rc = start_node(s, e.id, e.t, err);
      if (rc) return rc;
      changed |= s->work[e.id] > 0;
    }
    if (changed) update_speeds(s);
  }
}

int sched_evaluate_shared(const SchedProgram *prog, const SchedEvalOptions *opts, const SchedShareOptions *sh,
                          SchedEval *out, Error *err) {
  return sched_evaluate_shared_links(prog, opts, sh, NULL, out, err);
}

int sched_evaluate_shared_links(const SchedProgram *prog, const SchedEvalOptions *opts, const SchedShareOptions *sh,
                                const SchedLinkModel *links, SchedEval *out, Error *err) {
  memset(out, 0, sizeof *out);
  if (!opts || !opts->cost) return error_set(err, ERR_ARG, "sched_evaluate: a cost callback is required");
  int rc = check_options(prog, sh, err);
  if (rc) return rc;
  Sim s;
  memset(&s, 0, sizeof s);
  s.prog = prog;
  s.sh = sh;
  s.links = links;
  s.out = out;
  int n = prog->num_actions, R = prog->num_ranks;
  size_t nn = n ? (size_t)n : 1, nr = R ? (size_t)R : 1;
  rc = sched_eval_alloc(prog, out, err);
  if (!rc) rc = sched_eval_graph_build(prog, opts, &s.g, err);
  if (rc) {
    sim_free(&s);
    return rc;
  }
  s.ready = calloc(nn, sizeof *s.ready);
  s.work = calloc(nn, sizeof *s.work);
  s.rest = calloc(nn, sizeof *s.rest);
  s.pending.e = malloc(nn * sizeof *s.pending.e);
  s.resting.e = malloc(nn * sizeof *s.resting.e);
  s.computing = malloc(nr * sizeof *s.computing);
  s.left = calloc(nr, sizeof *s.left);
  s.speed = malloc(nr * sizeof *s.speed);
  s.node_busy = calloc((size_t)sh->num_nodes, sizeof *s.node_busy);
  s.held = calloc(nn, 1);
  if (!s.ready || !s.work || !s.rest || !s.pending.e || !s.resting.e || !s.computing || !s.left || !s.speed ||
      !s.node_busy || !s.held) {
    sim_free(&s);
    return error_set(err, ERR_NOMEM, "sched_evaluate_shared: out of memory");
  }
  int nodes = 0;
  for (int r = 0; r < R; r++) s.computing[r] = -1, s.speed[r] = 1.0;
  for (int u = 0; u < n; u++) {
    if (s.g.node[u] != u) continue;
    nodes++;
    const SchedAction *a = &prog->actions[u];
    /* A rendezvous pair is one node of two ranks: its time is the wire's. */
    int paired = opts->send_mode == SCHED_SEND_RENDEZVOUS && sched_kind_is_send(a->kind) && a->match >= 0 &&
                 a->match < n && s.g.node[a->match] == u;
    double cpu = a->stream == SCHED_STREAM_COMPUTE && !paired ? sh->work(a, sh->work_ctx) : 0.0;
    if (!(cpu >= 0)) cpu = 0;
    if (cpu > s.g.dur[u]) cpu = s.g.dur[u];
    s.work[u] = cpu * sh->priced_share;
    s.rest[u] = s.g.dur[u] - cpu;
  }
  if (links) {
    if (opts->send_mode != SCHED_SEND_EAGER) {
      sim_free(&s);
      return error_set(err, ERR_ARG, "sched_evaluate_shared: a link model needs eager sends");
    }
    for (int u = 0; u < n; u++) {
      const SchedAction *a = &prog->actions[u];
      if (sched_kind_is_send(a->kind) && a->match >= 0 && a->match < n && links->claims(links->ctx, a))
        s.held[a->match] = 1;
    }
    /* A held RECV with nothing but its transfer to wait for is posted at 0. */
    for (int v = 0; v < n; v++)
      if (s.held[v] && s.g.indeg[v] == 1) released(&s, v);
  }
  rc = run(&s, err);
  if (!rc && s.finished == nodes) rc = sched_eval_finish(prog, opts, &s.g, out, err);
  else if (!rc) {
    /* Which actions can start does not depend on durations: the max-plus
     * evaluator names what each blocked rank waits for. */
    sched_eval_free(out);
    rc = sched_evaluate(prog, opts, out, err);
  }
  sim_free(&s);
  return rc;
}
