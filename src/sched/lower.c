/* sched_lower: from a compute order to a full program (sends, receives,
 * gradient reductions, optimizer step). builders.h explains the placement
 * rule and why it cannot deadlock; this file is its implementation:
 *   1. time the computes alone (a compute-only program through the same
 *      evaluator, with the order costs and free communication),
 *   2. stamp every cross-rank transfer with the time its tensor is ready and
 *      sort all transfers by (time, kind, micro-batch, stage),
 *   3. on each rank, put each transfer before the first compute starting at
 *      or after its time, in that global order,
 *   4. hand the lists to sched_program_assemble for the dependencies. */
#include <stdlib.h>
#include <string.h>

#include "sched/builders.h"
#include "sched/evaluate.h"

typedef struct Transfer {
  double time;
  int grad; /* 0: activation of stage -> stage+1; 1: gradient of stage+1 -> stage */
  int microbatch, stage; /* the lower stage of the link */
} Transfer;

static int transfer_cmp(const void *pa, const void *pb) {
  const Transfer *a = pa, *b = pb;
  if (a->time != b->time) return a->time < b->time ? -1 : 1;
  if (a->grad != b->grad) return a->grad - b->grad;
  if (a->microbatch != b->microbatch) return a->microbatch - b->microbatch;
  return a->stage - b->stage;
}

typedef struct Lowering {
  const SchedConfig *cfg;
  int P, V, M, S;
  int *fpos, *bpos, *wpos; /* [rank][mb][chunk] -> index in the rank's order (wpos: split backward) */
  SchedProgram *timing; /* compute-only program */
  SchedEval ev;
  Transfer *transfers;
  int num_transfers;
  int **ops;     /* per rank: transfer indices in global order (send and receive ends) */
  int *num_ops;
  SchedAction **lists;
  int *counts;
} Lowering;

static size_t slot(const Lowering *L, int rank, int mb, int chunk) {
  return ((size_t)rank * L->M + mb) * L->V + chunk;
}

/* Validates the order and fills fpos/bpos. */
static int index_order(Lowering *L, const SchedComputeOrder *order, Error *err) {
  size_t n = (size_t)L->P * L->M * L->V;
  L->fpos = malloc(n * sizeof *L->fpos);
  L->bpos = malloc(n * sizeof *L->bpos);
  L->wpos = malloc(n * sizeof *L->wpos);
  if (!L->fpos || !L->bpos || !L->wpos) return error_set(err, ERR_NOMEM, "sched_lower: out of memory");
  for (size_t i = 0; i < n; i++) L->fpos[i] = L->bpos[i] = L->wpos[i] = -1;
  const int split = L->cfg->split_backward != 0;
  if (order->num_ranks != L->P)
    return error_set(err, ERR_ARG, "sched_lower: the compute order has %d ranks, pp is %d", order->num_ranks, L->P);
  for (int r = 0; r < L->P; r++) {
    for (int i = 0; i < order->counts[r]; i++) {
      const SchedComputeItem *it = &order->items[r][i];
      int kind_ok = it->kind == SCHED_FWD || it->kind == SCHED_BWD || (split && it->kind == SCHED_BWD_WEIGHT);
      if (!kind_ok || it->microbatch < 0 || it->microbatch >= L->M || it->chunk < 0 || it->chunk >= L->V)
        return error_set(err, ERR_ARG,
                         "sched_lower: rank %d item %d is %s mb %d chunk %d; expected FWD, BWD%s with mb in [0, %d) and "
                         "chunk in [0, %d)",
                         r, i, sched_action_kind_name(it->kind), it->microbatch, it->chunk,
                         split ? " or BWD_WEIGHT" : " (BWD_WEIGHT only with split_backward)", L->M, L->V);
      int *pos = (it->kind == SCHED_FWD ? L->fpos : it->kind == SCHED_BWD ? L->bpos : L->wpos) +
                 slot(L, r, it->microbatch, it->chunk);
      if (*pos >= 0)
        return error_set(err, ERR_ARG, "sched_lower: rank %d runs %s mb %d chunk %d twice (items %d and %d)", r,
                         sched_action_kind_name(it->kind), it->microbatch, it->chunk, *pos, i);
      *pos = i;
    }
    for (int mb = 0; mb < L->M; mb++)
      for (int c = 0; c < L->V; c++) {
        size_t k = slot(L, r, mb, c);
        if (L->fpos[k] < 0 || L->bpos[k] < 0 || (split && L->wpos[k] < 0))
          return error_set(err, ERR_ARG, "sched_lower: rank %d never runs the %s of mb %d chunk %d", r,
                           L->fpos[k] < 0 ? "forward" : L->bpos[k] < 0 ? "backward" : "weight gradient", mb, c);
        if (split && L->wpos[k] < L->bpos[k])
          return error_set(err, ERR_ARG, "sched_lower: rank %d runs the weight gradient of mb %d chunk %d before its backward",
                           r, mb, c);
      }
  }
  return ERR_OK;
}

/* Step 1: the compute-only program, timed. */
static int time_computes(Lowering *L, const SchedComputeOrder *order, Error *err) {
  SchedBuilder *b = sched_builder_new(L->cfg, L->P);
  if (!b) return error_set(err, ERR_NOMEM, "sched_lower: out of memory");
  int rc = ERR_OK;
  for (int r = 0; r < L->P && !rc; r++)
    for (int i = 0; i < order->counts[r] && !rc; i++) {
      const SchedComputeItem *it = &order->items[r][i];
      SchedAction a = sched_action_make(it->kind);
      a.microbatch = it->microbatch;
      a.chunk = it->chunk;
      a.stage = it->chunk * L->P + r;
      rc = sched_builder_append(b, r, &a, NULL, err);
    }
  for (int r = 0; r < L->P && !rc; r++)
    for (int i = 0; i < order->counts[r] && !rc; i++) {
      const SchedComputeItem *it = &order->items[r][i];
      int s = it->chunk * L->P + r, mb = it->microbatch;
      SchedActionRef self = {r, i};
      if (it->kind == SCHED_FWD && s > 0) {
        SchedActionRef d = {(s - 1) % L->P, L->fpos[slot(L, (s - 1) % L->P, mb, (s - 1) / L->P)]};
        rc = sched_builder_add_dep(b, self, d, err);
      }
      if (it->kind == SCHED_BWD_WEIGHT) {
        SchedActionRef bw = {r, L->bpos[slot(L, r, mb, it->chunk)]};
        rc = sched_builder_add_dep(b, self, bw, err);
      }
      if (it->kind == SCHED_BWD) {
        SchedActionRef f = {r, L->fpos[slot(L, r, mb, it->chunk)]};
        rc = sched_builder_add_dep(b, self, f, err);
        if (!rc && s < L->S - 1) {
          SchedActionRef d = {(s + 1) % L->P, L->bpos[slot(L, (s + 1) % L->P, mb, (s + 1) / L->P)]};
          rc = sched_builder_add_dep(b, self, d, err);
        }
      }
    }
  if (!rc) rc = sched_builder_finish(b, &L->timing, err);
  sched_builder_free(b);
  if (rc) return rc;
  SchedUnitCosts costs = sched_unit_costs_default();
  if (L->cfg->order_fwd_cost > 0) costs.fwd = L->cfg->order_fwd_cost;
  if (L->cfg->order_bwd_cost > 0) costs.bwd = L->cfg->order_bwd_cost;
  costs.bwd_weight = costs.bwd / 2;
  costs.split_backward = L->cfg->split_backward;
  SchedEvalOptions opts = sched_unit_eval_options(&costs, SCHED_SEND_EAGER);
  rc = sched_evaluate(L->timing, &opts, &L->ev, err);
  if (rc == ERR_CONFIG) error_wrap(err, "sched_lower: the compute order of schedule %s can never run", sched_schedule_name(L->cfg->schedule));
  return rc;
}

static double fwd_finish(const Lowering *L, int rank, int mb, int chunk) {
  return L->ev.finish[sched_action_id(L->timing, rank, L->fpos[slot(L, rank, mb, chunk)])];
}
static double bwd_finish(const Lowering *L, int rank, int mb, int chunk) {
  return L->ev.finish[sched_action_id(L->timing, rank, L->bpos[slot(L, rank, mb, chunk)])];
}

/* Step 2: every cross-rank transfer with its ready time, in global order,
 * then the per-rank lists of transfer ends. */
static int collect_transfers(Lowering *L, Error *err) {
  int P = L->P;
  size_t cap = (size_t)2 * L->M * (L->S > 0 ? L->S - 1 : 0);
  L->transfers = malloc((cap ? cap : 1) * sizeof *L->transfers);
  L->ops = calloc((size_t)P, sizeof *L->ops);
  L->num_ops = calloc((size_t)P, sizeof *L->num_ops);
  if (!L->transfers || !L->ops || !L->num_ops) return error_set(err, ERR_NOMEM, "sched_lower: out of memory");
  for (int mb = 0; mb < L->M; mb++)
    for (int s = 0; s + 1 < L->S; s++) {
      int lo = s % P, hi = (s + 1) % P;
      if (lo == hi) continue; /* same rank: a local dependency, no transfer */
      L->transfers[L->num_transfers++] = (Transfer){fwd_finish(L, lo, mb, s / P), 0, mb, s};
      L->transfers[L->num_transfers++] = (Transfer){bwd_finish(L, hi, mb, (s + 1) / P), 1, mb, s};
    }
  qsort(L->transfers, (size_t)L->num_transfers, sizeof *L->transfers, transfer_cmp);
  for (int r = 0; r < P; r++) {
    L->ops[r] = malloc(((size_t)L->num_transfers + 1) * sizeof *L->ops[r]);
    if (!L->ops[r]) return error_set(err, ERR_NOMEM, "sched_lower: out of memory");
  }
  for (int t = 0; t < L->num_transfers; t++) {
    int s = L->transfers[t].stage;
    int lo = s % P, hi = (s + 1) % P;
    L->ops[lo][L->num_ops[lo]++] = t;
    L->ops[hi][L->num_ops[hi]++] = t;
  }
  return ERR_OK;
}

/* The action for rank's end of transfer t. */
static SchedAction transfer_end(const Lowering *L, int rank, int t) {
  const Transfer *x = &L->transfers[t];
  int lo = x->stage % L->P;
  int at_lo = rank == lo;
  SchedActionKind kind = x->grad ? (at_lo ? SCHED_RECV_GRAD : SCHED_SEND_GRAD) : (at_lo ? SCHED_SEND_ACT : SCHED_RECV_ACT);
  SchedAction a = sched_action_make(kind);
  a.microbatch = x->microbatch;
  a.stage = at_lo ? x->stage : x->stage + 1;
  a.chunk = a.stage / L->P;
  return a;
}

/* Step 3: merge computes and transfer ends on each rank. */
static int merge_lists(Lowering *L, const SchedComputeOrder *order, Error *err) {
  L->lists = calloc((size_t)L->P, sizeof *L->lists);
  L->counts = calloc((size_t)L->P, sizeof *L->counts);
  if (!L->lists || !L->counts) return error_set(err, ERR_NOMEM, "sched_lower: out of memory");
  for (int r = 0; r < L->P; r++) {
    int nc = order->counts[r];
    L->lists[r] = malloc(((size_t)nc + L->num_ops[r] + L->V + 1) * sizeof *L->lists[r]);
    int *last_bwd = malloc((size_t)L->V * sizeof *last_bwd);
    if (!L->lists[r] || !last_bwd) {
      free(last_bwd);
      return error_set(err, ERR_NOMEM, "sched_lower: out of memory");
    }
    for (int c = 0; c < L->V; c++) last_bwd[c] = -1;
    /* A chunk's gradient is complete after its last backward, or with a
     * split backward its last weight gradient. */
    SchedActionKind completes = L->cfg->split_backward ? SCHED_BWD_WEIGHT : SCHED_BWD;
    for (int i = 0; i < nc; i++)
      if (order->items[r][i].kind == completes) last_bwd[order->items[r][i].chunk] = i;
    SchedAction *out = L->lists[r];
    int n = 0, next_op = 0;
    for (int i = 0; i < nc; i++) {
      double start = L->ev.start[sched_action_id(L->timing, r, i)];
      while (next_op < L->num_ops[r] && L->transfers[L->ops[r][next_op]].time <= start)
        out[n++] = transfer_end(L, r, L->ops[r][next_op++]);
      const SchedComputeItem *it = &order->items[r][i];
      SchedAction a = sched_action_make(it->kind);
      a.microbatch = it->microbatch;
      a.chunk = it->chunk;
      out[n++] = a;
      if (it->kind == completes && last_bwd[it->chunk] == i) {
        SchedAction red = sched_action_make(SCHED_GRAD_REDUCE);
        red.chunk = it->chunk;
        red.bucket = it->chunk;
        out[n++] = red;
      }
    }
    while (next_op < L->num_ops[r]) out[n++] = transfer_end(L, r, L->ops[r][next_op++]);
    out[n++] = sched_action_make(SCHED_OPTIM);
    L->counts[r] = n;
    free(last_bwd);
  }
  return ERR_OK;
}

int sched_lower(const SchedConfig *config, const SchedComputeOrder *order, SchedProgram **out, Error *err) {
  *out = NULL;
  if (config->pp < 1 || config->vpp < 1 || config->microbatches < 1)
    return error_set(err, ERR_ARG, "sched_lower: need pp, vpp and microbatches >= 1 (got %d, %d, %d)", config->pp,
                     config->vpp, config->microbatches);
  Lowering L;
  memset(&L, 0, sizeof L);
  L.cfg = config;
  L.P = config->pp;
  L.V = config->vpp;
  L.M = config->microbatches;
  L.S = L.P * L.V;
  int rc = index_order(&L, order, err);
  if (!rc) rc = time_computes(&L, order, err);
  if (!rc) rc = collect_transfers(&L, err);
  if (!rc) rc = merge_lists(&L, order, err);
  if (!rc) rc = sched_program_assemble(config, L.lists, L.counts, out, err);
  free(L.fpos);
  free(L.bpos);
  free(L.wpos);
  sched_program_free(L.timing);
  sched_eval_free(&L.ev);
  free(L.transfers);
  for (int r = 0; L.ops && r < L.P; r++) free(L.ops[r]);
  free(L.ops);
  free(L.num_ops);
  for (int r = 0; L.lists && r < L.P; r++) free(L.lists[r]);
  free(L.lists);
  free(L.counts);
  return rc;
}
