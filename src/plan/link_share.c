/* Contention on a node's shared network port (link_share.h): the FIFO
 * ports as an incremental model (messages made ready, run to a time under
 * the ranks' compute state, delivered), driven either over a given
 * timeline (plan_link_share_run) or by the simulator's evaluation through
 * sched's link-model hooks. */
#include "plan/link_share.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the ports ---- */

typedef struct Delivery {
  double t;
  int id; /* a message, or num_jobs + s for send s's part that stays on its node */
} Delivery;

struct PlanPorts {
  int n, nics;
  const PlanLinkJob *jobs;
  double *left;     /* per message: service still to give */
  char *state;      /* per message: 0 not ready, 1 queued, 2 served */
  int *pair_id;     /* per message: its connection, dense */
  int *last;        /* per connection: the message of it made ready last, -1 */
  int *prev;        /* per message: the message of its connection ready before it, -1 */
  int *queue;       /* per port, in the order the messages became ready */
  int *qbegin, *qhead, *qend; /* per port: its slice of queue, first not served, end */
  Delivery *heap;   /* deliveries not yet made, by time */
  int heap_n, heap_cap;
  double clock;
};

static int delivery_earlier(Delivery a, Delivery b) { return a.t < b.t || (a.t == b.t && a.id < b.id); }

static void heap_push(PlanPorts *p, double t, int id) {
  int i = p->heap_n++;
  p->heap[i] = (Delivery){t, id};
  while (i > 0 && delivery_earlier(p->heap[i], p->heap[(i - 1) / 2])) {
    Delivery x = p->heap[i];
    p->heap[i] = p->heap[(i - 1) / 2];
    p->heap[(i - 1) / 2] = x;
    i = (i - 1) / 2;
  }
}

static Delivery heap_pop(PlanPorts *p) {
  Delivery top = p->heap[0];
  p->heap[0] = p->heap[--p->heap_n];
  for (int i = 0;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < p->heap_n && delivery_earlier(p->heap[l], p->heap[m])) m = l;
    if (r < p->heap_n && delivery_earlier(p->heap[r], p->heap[m])) m = r;
    if (m == i) break;
    Delivery x = p->heap[i];
    p->heap[i] = p->heap[m];
    p->heap[m] = x;
    i = m;
  }
  return top;
}

static const PlanLinkJob *g_sort_jobs; /* qsort has no context argument */

static int cmp_pair(const void *a, const void *b) {
  int i = *(const int *)a, j = *(const int *)b;
  if (g_sort_jobs[i].pair != g_sort_jobs[j].pair) return g_sort_jobs[i].pair < g_sort_jobs[j].pair ? -1 : 1;
  return (i > j) - (i < j);
}

static void ports_free(PlanPorts *p) {
  if (!p) return;
  free(p->left), free(p->state), free(p->pair_id), free(p->last), free(p->prev);
  free(p->queue), free(p->qbegin), free(p->qhead), free(p->qend), free(p->heap);
  free(p);
}

/* extra: deliveries beyond the messages' (the simulator's local parts). */
static PlanPorts *ports_new(const PlanLinkJob *jobs, int n, int extra) {
  PlanPorts *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n;
  p->jobs = jobs;
  for (int i = 0; i < n; i++)
    if (jobs[i].nic + 1 > p->nics) p->nics = jobs[i].nic + 1;
  size_t nn = n > 0 ? (size_t)n : 1, np = p->nics > 0 ? (size_t)p->nics : 1;
  p->left = malloc(nn * sizeof *p->left);
  p->state = calloc(nn, 1);
  p->pair_id = malloc(nn * sizeof *p->pair_id);
  p->last = malloc(nn * sizeof *p->last);
  p->prev = malloc(nn * sizeof *p->prev);
  p->queue = malloc(nn * sizeof *p->queue);
  p->qbegin = calloc(np + 1, sizeof *p->qbegin);
  p->qhead = malloc(np * sizeof *p->qhead);
  p->qend = malloc(np * sizeof *p->qend);
  p->heap_cap = n + extra + 1;
  p->heap = malloc((size_t)p->heap_cap * sizeof *p->heap);
  int *by_pair = malloc(nn * sizeof *by_pair);
  if (!p->left || !p->state || !p->pair_id || !p->last || !p->prev || !p->queue || !p->qbegin || !p->qhead ||
      !p->qend || !p->heap || !by_pair) {
    free(by_pair);
    ports_free(p);
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    p->left[i] = jobs[i].service;
    p->prev[i] = p->last[i] = -1;
    p->qbegin[jobs[i].nic + 1]++;
    by_pair[i] = i;
  }
  for (int k = 0; k < p->nics; k++) p->qbegin[k + 1] += p->qbegin[k];
  for (int k = 0; k < p->nics; k++) p->qhead[k] = p->qend[k] = p->qbegin[k];
  g_sort_jobs = jobs;
  qsort(by_pair, (size_t)n, sizeof *by_pair, cmp_pair);
  for (int q = 0, id = -1; q < n; q++) {
    if (q == 0 || jobs[by_pair[q]].pair != jobs[by_pair[q - 1]].pair) id++;
    p->pair_id[by_pair[q]] = id;
  }
  free(by_pair);
  return p;
}

/* Message i is ready now (the ports' clock). */
static void ports_ready(PlanPorts *p, int i) {
  if (p->state[i]) return;
  p->state[i] = 1;
  int c = p->pair_id[i];
  p->prev[i] = p->last[c];
  p->last[c] = i;
  int k = p->jobs[i].nic;
  p->queue[p->qend[k]++] = i;
}

/* Port k's first message it may serve now, or -1: FIFO among the queued,
 * a message waiting for the one before it on its connection (in order),
 * and, held, while neither of its ranks computes. */
static int ports_pick(PlanPorts *p, int k, const int *computing) {
  while (p->qhead[k] < p->qend[k] && p->state[p->queue[p->qhead[k]]] == 2) p->qhead[k]++;
  for (int q = p->qhead[k]; q < p->qend[k]; q++) {
    int i = p->queue[q];
    if (p->state[i] != 1) continue;
    if (p->prev[i] >= 0 && p->state[p->prev[i]] != 2) continue;
    const PlanLinkJob *j = &p->jobs[i];
    if (j->held && computing && (computing[j->src] >= 0 || computing[j->dst] >= 0)) continue;
    return i;
  }
  return -1;
}

/* The next moment the ports change on their own: a service ending or a
 * delivery. */
static double ports_next(PlanPorts *p, const int *computing) {
  double next = p->heap_n ? p->heap[0].t : INFINITY;
  for (int k = 0; k < p->nics; k++) {
    int i = ports_pick(p, k, computing);
    if (i >= 0) next = fmin(next, p->clock + p->left[i]);
  }
  return next;
}

typedef void (*DeliveredFn)(void *arg, int id, double t);

/* Runs the ports from their clock to t under `computing`; calls delivered
 * for each delivery by t, in time order. */
static void ports_advance(PlanPorts *p, double t, const int *computing, DeliveredFn delivered, void *arg) {
  for (int k = 0; k < p->nics; k++) {
    double c = p->clock;
    for (;;) {
      int i = ports_pick(p, k, computing);
      if (i < 0) break;
      /* Served by t when its end is (the comparison ports_next's time
       * passes, so a remainder too small to move the clock still ends). */
      double end = c + p->left[i];
      if (end <= t) {
        p->left[i] = 0;
        p->state[i] = 2;
        c = end;
        heap_push(p, c + p->jobs[i].latency, i);
        continue;
      }
      p->left[i] -= t - c;
      break;
    }
  }
  p->clock = t;
  while (p->heap_n && p->heap[0].t <= t) {
    Delivery d = heap_pop(p);
    delivered(arg, d.id, d.t);
  }
}

/* ---- the ports over a given timeline ---- */

static int cmp_ready(const void *a, const void *b) {
  int i = *(const int *)a, j = *(const int *)b;
  double x = g_sort_jobs[i].ready, y = g_sort_jobs[j].ready;
  if (x != y) return x < y ? -1 : 1;
  return (i > j) - (i < j);
}

typedef struct RunCtx {
  PlanLinkJob *jobs;
  int delivered;
} RunCtx;

static void run_delivered(void *arg, int id, double t) {
  RunCtx *r = arg;
  r->jobs[id].done = t;
  r->delivered++;
}

int plan_link_share_run(PlanLinkJob *jobs, int n, const PlanLinkBusy *busy, Error *err) {
  if (n <= 0) return ERR_OK;
  int R = busy ? busy->num_ranks : 0;
  for (int i = 0; i < n; i++) {
    const PlanLinkJob *j = &jobs[i];
    if (!(isfinite(j->ready) && j->ready >= 0 && isfinite(j->service) && j->service >= 0 && isfinite(j->latency) &&
          j->latency >= 0) || j->nic < 0)
      return error_set(err, ERR_ARG, "link share: message %d has port %d, ready %g, service %g, latency %g (expected "
                       "a port >= 0 and finite times >= 0)", i, j->nic, j->ready, j->service, j->latency);
    if (busy && j->held && (j->src < 0 || j->src >= R || j->dst < 0 || j->dst >= R))
      return error_set(err, ERR_ARG, "link share: message %d joins ranks %d and %d, the timeline has %d", i, j->src,
                       j->dst, R);
  }
  PlanPorts *p = ports_new(jobs, n, 0);
  int *order = malloc((size_t)n * sizeof *order);
  int *computing = malloc((size_t)(R > 0 ? R : 1) * sizeof *computing);
  if (!p || !order || !computing) {
    ports_free(p);
    free(order);
    free(computing);
    return error_set(err, ERR_NOMEM, "link share: out of memory");
  }
  for (int i = 0; i < n; i++) order[i] = i, jobs[i].done = NAN;
  g_sort_jobs = jobs;
  qsort(order, (size_t)n, sizeof *order, cmp_ready);
  RunCtx rc = {jobs, 0};
  int released = 0, status = ERR_OK;
  double now = 0;
  while (rc.delivered < n) {
    while (released < n && jobs[order[released]].ready <= now) ports_ready(p, order[released++]);
    /* The ranks' state from now on, and the next moment it changes. */
    double next = released < n ? jobs[order[released]].ready : INFINITY;
    for (int r = 0; r < R; r++) {
      computing[r] = -1;
      for (int i = busy->begin[r]; i < busy->begin[r + 1]; i++) {
        if (busy->end[i] <= now) continue;
        if (busy->start[i] <= now) {
          computing[r] = 0;
          next = fmin(next, busy->end[i]);
        } else {
          next = fmin(next, busy->start[i]);
        }
        break;
      }
    }
    next = fmin(next, ports_next(p, busy ? computing : NULL));
    if (isinf(next)) {
      status = error_set(err, ERR_INTERNAL, "link share: %d message(s) can never be delivered", n - rc.delivered);
      break;
    }
    ports_advance(p, next, busy ? computing : NULL, run_delivered, &rc);
    now = next;
  }
  ports_free(p);
  free(order);
  free(computing);
  return status;
}

/* ---- the simulator's side ---- */

void plan_link_share_free(PlanLinkShare *ls) {
  if (!ls) return;
  free(ls->send);
  free(ls->recv);
  free(ls->job_begin);
  free(ls->jobs);
  free(ls->local);
  free(ls->index);
  free(ls->sent_at);
  free(ls->posted_at);
  free(ls->pending);
  ports_free(ls->ports);
  free(ls->own_capacity);
  free(ls->own_load);
  memset(ls, 0, sizeof *ls);
}

/* The per-device link between world ranks a and b at `level`, as
 * plan_p2p_time prices it (the calibrated send/recv when the spec has one). */
static PlanLink pair_link(const ClusterSpec *cl, int a, int b, int level) {
  if (cl->has_collective[PLAN_COLL_P2P][level]) return cl->collective[PLAN_COLL_P2P][level];
  PlanLink l = cluster_spec_device_link(cl, a, b);
  l.bandwidth *= cl->link_efficiency[level];
  return l;
}

int plan_link_share_init(PlanLinkShare *ls, const ClusterSpec *cl, const PlanConfig *cfg, const SchedProgram *prog,
                         double p2p_bytes, Error *err) {
  memset(ls, 0, sizeof *ls);
  int k = cl->tiers.devices_per_nic, D = cl->devices_per_node;
  if (k <= 0 || cl->nodes <= 1 || cfg->num_stage_widths || !(p2p_bytes > 0) || D <= 0) return ERR_OK;
  int R = prog->num_ranks, world = plan_config_devices(cfg), n = prog->num_actions;
  if (R < 1 || world % R) return ERR_OK;
  int G = world / R, nics_per_node = D / k;
  int sends = 0;
  for (int i = 0; i < n; i++)
    if (sched_kind_is_send(prog->actions[i].kind) && prog->actions[i].match >= 0) sends++;
  if (!sends) return ERR_OK;
  ls->send = malloc((size_t)sends * sizeof *ls->send);
  ls->recv = malloc((size_t)sends * sizeof *ls->recv);
  ls->job_begin = malloc(((size_t)sends + 1) * sizeof *ls->job_begin);
  ls->jobs = malloc((size_t)sends * G * sizeof *ls->jobs);
  ls->local = calloc((size_t)sends, sizeof *ls->local);
  ls->index = malloc((size_t)n * sizeof *ls->index);
  ls->sent_at = malloc((size_t)sends * sizeof *ls->sent_at);
  ls->posted_at = malloc((size_t)sends * sizeof *ls->posted_at);
  ls->pending = malloc((size_t)sends * sizeof *ls->pending);
  if (!ls->send || !ls->recv || !ls->job_begin || !ls->jobs || !ls->local || !ls->index || !ls->sent_at ||
      !ls->posted_at || !ls->pending) {
    plan_link_share_free(ls);
    return error_set(err, ERR_NOMEM, "simulate: out of memory");
  }
  for (int i = 0; i < n; i++) ls->index[i] = -1;
  int held = cl->runtime.given && !cl->runtime.async_progress;
  int ns = 0, nj = 0;
  for (int i = 0; i < n; i++) {
    const SchedAction *a = &prog->actions[i];
    if (!sched_kind_is_send(a->kind) || a->match < 0) continue;
    int from = a->rank, to = prog->actions[a->match].rank, first = nj;
    double local = 0;
    for (int g = 0; g < G; g++) {
      int wa = g + from * G, wb = g + to * G;
      int da = cluster_spec_device_of(cl, wa), db = cluster_spec_device_of(cl, wb);
      if (da / D == db / D) {
        PlanLink l = pair_link(cl, wa, wb, PLAN_LEVEL_INTRA);
        if (da != db) local = fmax(local, l.latency + p2p_bytes / l.bandwidth);
        continue;
      }
      PlanLink l = pair_link(cl, wa, wb, PLAN_LEVEL_INTER);
      PlanLinkJob *j = &ls->jobs[nj++];
      memset(j, 0, sizeof *j);
      j->nic = (da / D) * nics_per_node + (da % D) / k;
      j->src = from;
      j->dst = to;
      j->pair = da * (cl->nodes * D) + db;
      j->service = p2p_bytes / (l.bandwidth * k);
      j->latency = l.latency;
      j->held = held && p2p_bytes > PLAN_LINK_EAGER_BYTES;
      j->ready = j->done = NAN;
    }
    if (nj == first) continue; /* every message stays on its node: the idle-link price */
    ls->send[ns] = i;
    ls->recv[ns] = a->match;
    ls->index[i] = ns;
    ls->index[a->match] = ns;
    ls->job_begin[ns] = first;
    ls->local[ns] = local;
    ns++;
  }
  ls->job_begin[ns] = nj;
  ls->num_sends = ns;
  if (!ns) {
    plan_link_share_free(ls);
    return ERR_OK;
  }
  ls->held = held;
  ls->active = 1;
  return ERR_OK;
}

/* ---- the link model the evaluator calls ---- */

typedef struct DeliverCtx {
  PlanLinkShare *ls;
  SchedDeliverFn deliver;
  void *arg;
} DeliverCtx;

static int model_claims(void *ctx, const SchedAction *send) {
  const PlanLinkShare *ls = ctx;
  return ls->index[send->id] >= 0 && ls->send[ls->index[send->id]] == send->id;
}

/* Send s's messages that may go now: the eager ones once sent, the held
 * ones once sent and received for (the rendezvous). */
static void release_ready(PlanLinkShare *ls, int s, int at_send) {
  int sent = !isnan(ls->sent_at[s]), posted = !isnan(ls->posted_at[s]);
  for (int j = ls->job_begin[s]; j < ls->job_begin[s + 1]; j++) {
    PlanLinkJob *job = &ls->jobs[j];
    int go = job->held ? sent && posted : at_send;
    if (go && isnan(job->ready)) {
      job->ready = ls->ports->clock;
      ports_ready(ls->ports, j);
    }
  }
}

static void model_sent(void *ctx, int send_id, double t) {
  PlanLinkShare *ls = ctx;
  int s = ls->index[send_id];
  ls->sent_at[s] = t;
  if (ls->local[s] > 0) heap_push(ls->ports, t + ls->local[s], ls->ports->n + s);
  release_ready(ls, s, 1);
}

static void model_posted(void *ctx, int recv_id, double t) {
  PlanLinkShare *ls = ctx;
  int s = ls->index[recv_id];
  ls->posted_at[s] = t;
  release_ready(ls, s, 0);
}

static double model_next(void *ctx, const int *computing) {
  PlanLinkShare *ls = ctx;
  return ports_next(ls->ports, ls->held ? computing : NULL);
}

static void model_delivered(void *arg, int id, double t) {
  DeliverCtx *d = arg;
  PlanLinkShare *ls = d->ls;
  int s = -1;
  if (id >= ls->ports->n) {
    s = id - ls->ports->n;
  } else {
    ls->jobs[id].done = t;
    /* The send whose messages hold id (job_begin is increasing). */
    int lo = 0, hi = ls->num_sends - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (ls->job_begin[mid] <= id) lo = mid;
      else hi = mid - 1;
    }
    s = lo;
  }
  if (--ls->pending[s] == 0) d->deliver(d->arg, ls->recv[s], t);
}

static void model_advance(void *ctx, double t, const int *computing, SchedDeliverFn deliver, void *arg) {
  PlanLinkShare *ls = ctx;
  DeliverCtx d = {ls, deliver, arg};
  ports_advance(ls->ports, t, ls->held ? computing : NULL, model_delivered, &d);
}

int plan_link_share_evaluate(PlanLinkShare *ls, const SchedProgram *prog, const SchedEvalOptions *opts,
                             const SchedShareOptions *share, SchedWorkFn work, void *work_ctx, SchedEval *out,
                             Error *err) {
  memset(out, 0, sizeof *out);
  int R = prog->num_ranks;
  ports_free(ls->ports);
  ls->ports = ports_new(ls->jobs, ls->job_begin[ls->num_sends], ls->num_sends);
  if (!ls->ports) return error_set(err, ERR_NOMEM, "simulate: out of memory");
  for (int s = 0; s < ls->num_sends; s++) {
    ls->sent_at[s] = ls->posted_at[s] = NAN;
    ls->pending[s] = ls->job_begin[s + 1] - ls->job_begin[s] + (ls->local[s] > 0);
    for (int j = ls->job_begin[s]; j < ls->job_begin[s + 1]; j++) ls->jobs[j].ready = ls->jobs[j].done = NAN;
  }
  ls->model = (SchedLinkModel){ls, model_claims, model_sent, model_posted, model_next, model_advance};
  if (share) {
    ls->share = *share;
  } else {
    /* Full speed: one node whose cores run every rank at once. */
    free(ls->own_capacity);
    free(ls->own_load);
    ls->own_capacity = malloc(sizeof *ls->own_capacity);
    ls->own_load = malloc((size_t)(R > 0 ? R : 1) * sizeof *ls->own_load);
    if (!ls->own_capacity || !ls->own_load) return error_set(err, ERR_NOMEM, "simulate: out of memory");
    ls->own_capacity[0] = R > 0 ? R : 1;
    for (int r = 0; r < R; r++) ls->own_load[r] = 1.0;
    memset(&ls->share, 0, sizeof ls->share);
    ls->share.work = work;
    ls->share.work_ctx = work_ctx;
    ls->share.priced_share = 1.0;
    ls->share.num_nodes = 1;
    ls->share.capacity = ls->own_capacity;
    ls->share.load = ls->own_load;
  }
  return sched_evaluate_shared_links(prog, opts, &ls->share, &ls->model, out, err);
}
