/* Builds the measured DAG of one iteration (dag.h): the program's edges,
 * then the measured ones (a posted receive's wait, collective operations
 * inside actions). */
#include "trace/dag.h"

#include <stdlib.h>
#include <string.h>

#include "trace/match.h"

static const char *const EDGE_NAMES[TRACE_NUM_EDGE_KINDS] = {"stream", "issue",      "data", "message",
                                                              "collective", "wait", "sync"};

const char *trace_edge_kind_name(TraceEdgeKind kind) {
  return kind >= 0 && kind < TRACE_NUM_EDGE_KINDS ? EDGE_NAMES[kind] : "?";
}

int trace_edge_from_end(TraceEdgeKind kind) {
  return kind != TRACE_EDGE_COLLECTIVE && kind != TRACE_EDGE_MESSAGE && kind != TRACE_EDGE_SYNC;
}
int trace_edge_to_end(TraceEdgeKind kind) {
  return kind == TRACE_EDGE_MESSAGE || kind == TRACE_EDGE_COLLECTIVE || kind == TRACE_EDGE_WAIT;
}

int64_t trace_edge_source_time(const TraceDag *dag, const TraceEdge *e) {
  if (e->kind == TRACE_EDGE_SYNC) return e->from_time;
  const TraceNode *n = &dag->nodes[e->from];
  return trace_edge_from_end(e->kind) ? n->end : n->begin;
}

int64_t trace_edge_target_time(const TraceDag *dag, const TraceEdge *e) {
  if (e->kind == TRACE_EDGE_SYNC) return e->to_time;
  const TraceNode *n = &dag->nodes[e->to];
  return trace_edge_to_end(e->kind) ? n->end : n->begin;
}

int trace_dag_node(const TraceDag *dag, int rank, int action) {
  if (rank < 0 || rank >= dag->run->num_ranks || action < 0 || action >= dag->program->num_actions) return -1;
  return dag->node_of[(size_t)rank * dag->program->num_actions + action];
}

void trace_dag_free(TraceDag *dag) {
  if (!dag) return;
  free(dag->nodes);
  free(dag->edges);
  free(dag->in_begin);
  free(dag->in_edges);
  free(dag->out_begin);
  free(dag->out_edges);
  free(dag->node_of);
  memset(dag, 0, sizeof *dag);
}

typedef struct EdgeList {
  TraceEdge *e;
  int n, cap;
} EdgeList;

static int push(EdgeList *l, int from, int to, TraceEdgeKind kind) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 256;
    TraceEdge *p = realloc(l->e, (size_t)cap * sizeof *p);
    if (!p) return -1;
    l->e = p;
    l->cap = cap;
  }
  l->e[l->n++] = (TraceEdge){from, to, kind, 0, 0, 0, -1};
  return 0;
}

/* Adds an edge when both ends were recorded; counts it missing otherwise. */
static int link(TraceDag *dag, EdgeList *l, int from, int to, TraceEdgeKind kind) {
  if (from < 0 || to < 0) {
    dag->num_missing_edges++;
    return 0;
  }
  return push(l, from, to, kind);
}

/* Program-order, issue-order and dependency edges into rank r's nodes. */
static int rank_edges(TraceDag *dag, int r, EdgeList *l) {
  const TraceRun *run = dag->run;
  int count;
  const SchedAction *list = sched_program_rank_actions(dag->program, run->ranks[r].info.pipeline_rank, &count);
  int prev_stream[SCHED_NUM_STREAMS];
  for (int s = 0; s < SCHED_NUM_STREAMS; s++) prev_stream[s] = -1;
  int prev_compute = -1;
  for (int i = 0; list && i < count; i++) {
    const SchedAction *a = &list[i];
    int node = trace_dag_node(dag, r, a->id);
    if (node < 0) continue;
    int ps = prev_stream[a->stream];
    if (ps >= 0 && push(l, ps, node, TRACE_EDGE_STREAM)) return -1;
    if (a->stream != SCHED_STREAM_COMPUTE && prev_compute >= 0 && prev_compute != ps &&
        push(l, prev_compute, node, TRACE_EDGE_ISSUE))
      return -1;
    for (int d = 0; d < a->num_deps; d++) {
      const SchedAction *dep = sched_program_action(dag->program, a->deps[d]);
      if (!dep) continue;
      const TraceEvent *ev = &run->ranks[r].events[dag->nodes[node].event];
      if (sched_kind_is_recv(a->kind) && dep->id == a->match) {
        int peer = trace_peer_world_rank(run->ranks, run->num_ranks, r, a->peer, ev->peer);
        if (link(dag, l, trace_dag_node(dag, peer, dep->id), node, TRACE_EDGE_MESSAGE)) return -1;
      } else if (dep->rank == a->rank) {
        if (link(dag, l, trace_dag_node(dag, r, dep->id), node, TRACE_EDGE_DATA)) return -1;
      } else {
        int peer = trace_peer_world_rank(run->ranks, run->num_ranks, r, dep->rank, -1);
        if (link(dag, l, trace_dag_node(dag, peer, dep->id), node, TRACE_EDGE_DATA)) return -1;
      }
    }
    prev_stream[a->stream] = node;
    if (a->stream == SCHED_STREAM_COMPUTE) prev_compute = node;
  }
  return 0;
}

static int collective_edges(TraceDag *dag, const TraceIndex *ix, EdgeList *l, Error *err) {
  TraceCollectives coll;
  int rc = trace_collectives_find(ix, dag->iteration, &coll, err);
  if (rc) return rc;
  for (int c = 0; c < coll.count; c++)
    for (int p = coll.begin[c]; p < coll.begin[c + 1]; p++)
      for (int q = coll.begin[c]; q < coll.begin[c + 1]; q++) {
        if (p == q) continue;
        int from = trace_dag_node(dag, coll.parts[p].rank, coll.parts[p].action);
        int to = trace_dag_node(dag, coll.parts[q].rank, coll.parts[q].action);
        if (push(l, from, to, TRACE_EDGE_COLLECTIVE)) {
          trace_collectives_free(&coll);
          return error_set(err, ERR_NOMEM, "trace DAG: out of memory");
        }
      }
  trace_collectives_free(&coll);
  return ERR_OK;
}

/* WAIT edges into rank r's posted receives (dag.h), and their wait_begin. */
static int wait_edges(TraceDag *dag, int r, EdgeList *l) {
  int count;
  const SchedAction *list = sched_program_rank_actions(dag->program, dag->run->ranks[r].info.pipeline_rank, &count);
  for (int i = 0; list && i < count; i++) {
    if (!sched_kind_is_recv(list[i].kind)) continue;
    int recv = trace_dag_node(dag, r, list[i].id);
    if (recv < 0) continue;
    int consumer = -1;
    for (int j = i + 1; j < count && consumer < 0; j++)
      for (int d = 0; d < list[j].num_deps; d++)
        if (list[j].deps[d] == list[i].id) consumer = j;
    if (consumer < 0) continue;
    /* What the host ran last before it went to wait: posted work (other
     * receives, a posted gradient reduction) does not hold the host. */
    int pred = -1;
    for (int j = consumer - 1; j >= 0 && pred < 0; j--)
      if (!sched_kind_is_recv(list[j].kind) && list[j].kind != SCHED_GRAD_REDUCE) pred = trace_dag_node(dag, r, list[j].id);
    if (pred < 0) continue;
    if (push(l, pred, recv, TRACE_EDGE_WAIT)) return -1;
    TraceNode *n = &dag->nodes[recv];
    int64_t from = dag->nodes[pred].end;
    if (from > n->end) from = n->end;
    if (from > n->begin) n->wait_begin = from;
  }
  return 0;
}

/* ---- SYNC: collective operations inside actions ---- */

typedef struct CollOp {
  int group;
  uint64_t members; /* which group of that kind: the coordinates it does not vary over */
  int rank, seq;    /* seq: position among the rank's calls on that group */
  int node, kind;
  int64_t begin, end;
} CollOp;

static int op_is_collective(int kind) {
  return kind == TRACE_OP_ALLREDUCE || kind == TRACE_OP_REDUCE_SCATTER || kind == TRACE_OP_ALLGATHER ||
         kind == TRACE_OP_ALLTOALL || kind == TRACE_OP_BCAST || kind == TRACE_OP_BARRIER;
}

/* The coordinates a group of kind `group` does not vary over, packed; the
 * members of one group share them. Coordinates unknown (-1: an eBPF trace)
 * count as 0 in a pure pipeline run (every group but pp is then the rank
 * itself or the world); otherwise the group cannot be told: -1. */
static int group_members(const TraceRankInfo *in, int group, int pure_pipeline, uint64_t *out) {
  static const unsigned char VARIES[TRACE_NUM_GROUPS][4] = {
      /* attention grid tp cp dp pp, for TP .. TP_PP; MoE grid etp ep edp pp for ETP .. ETP_EP_PP */
      {1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}, {0, 1, 1, 0}, {1, 1, 0, 0}, {1, 0, 0, 1},
      {1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {1, 1, 0, 0}, {1, 1, 0, 1}, {1, 1, 1, 1}};
  if (group < 0 || group >= TRACE_NUM_GROUPS) return -1;
  int moe = group >= TRACE_GROUP_ETP && group <= TRACE_GROUP_ETP_EP_PP;
  int c[4] = {moe ? in->etp : in->tp, moe ? in->ep : in->cp, moe ? in->edp : in->dp, in->pp};
  uint64_t key = (uint64_t)moe << 63;
  for (int d = 0; d < 4; d++) {
    if (VARIES[group][d]) continue;
    int v = c[d];
    if (v < 0 && pure_pipeline) v = 0;
    if (v < 0) return -1;
    key |= (uint64_t)(v & 0x7fff) << (15 * d);
  }
  *out = key;
  return 0;
}

/* The node of rank r whose action the operation ran inside: the shortest
 * recorded action spanning it that the host runs to completion (a posted
 * receive's span can hold whole actions, never part of one). */
static int enclosing_node(const TraceDag *dag, int r, int64_t begin, int64_t end) {
  int best = -1;
  for (int i = 0; i < dag->num_nodes; i++) {
    const TraceNode *n = &dag->nodes[i];
    if (n->rank != r || n->begin > begin || n->end < end) continue;
    if (sched_kind_is_recv(dag->program->actions[n->action].kind)) continue;
    if (best < 0 || n->end - n->begin < dag->nodes[best].end - dag->nodes[best].begin) best = i;
  }
  return best;
}

static int cmp_coll(const void *pa, const void *pb) {
  const CollOp *a = pa, *b = pb;
  if (a->group != b->group) return a->group < b->group ? -1 : 1;
  if (a->members != b->members) return a->members < b->members ? -1 : 1;
  if (a->seq != b->seq) return a->seq < b->seq ? -1 : 1;
  return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static int cmp_coll_begin(const void *pa, const void *pb) {
  const CollOp *a = pa, *b = pb;
  return a->begin < b->begin ? -1 : a->begin > b->begin;
}

/* Appends the collective operations of the iteration on rank r (in time
 * order, numbered per group) to *ops. */
static int collect_ops(TraceDag *dag, int r, int pure_pipeline, CollOp **ops, size_t *n, size_t *cap) {
  const TraceRankBuffer *b = &dag->run->ranks[r];
  size_t first = *n;
  for (size_t i = 0; i < b->count; i++) {
    const TraceEvent *e = &b->events[i];
    if (e->type != TRACE_EVENT_OP || e->iteration != dag->iteration || !op_is_collective(e->id)) continue;
    uint64_t members;
    int node = enclosing_node(dag, r, (int64_t)e->begin, (int64_t)e->end);
    if (node < 0 || group_members(&b->info, e->group, pure_pipeline, &members)) {
      dag->num_unmatched_collective_ops++;
      continue;
    }
    if (*n == *cap) {
      size_t grown = *cap ? 2 * *cap : 64;
      CollOp *p = realloc(*ops, grown * sizeof *p);
      if (!p) return -1;
      *ops = p;
      *cap = grown;
    }
    (*ops)[(*n)++] = (CollOp){e->group, members, r, 0, node, e->id, (int64_t)e->begin, (int64_t)e->end};
  }
  if (*n == first) return 0; /* none (and *ops may still be NULL) */
  qsort(*ops + first, *n - first, sizeof **ops, cmp_coll_begin);
  for (size_t i = first; i < *n; i++)
    for (size_t j = first; j < i; j++)
      if ((*ops)[j].group == (*ops)[i].group && (*ops)[j].members == (*ops)[i].members) (*ops)[i].seq++;
  return 0;
}

/* Every member of one call: the k-th call of each rank on the same group.
 * A group whose members recorded different numbers of calls (drops) is
 * left out, counted as unmatched. */
static int sync_edges(TraceDag *dag, EdgeList *l) {
  const TraceRun *run = dag->run;
  int pure_pipeline = run->num_ranks == dag->program->num_ranks; /* world = pp: every other coordinate is 0 */
  CollOp *ops = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  for (int r = 0; r < run->num_ranks && !rc; r++) rc = collect_ops(dag, r, pure_pipeline, &ops, &n, &cap);
  if (!rc && n) qsort(ops, n, sizeof *ops, cmp_coll);
  size_t num_ranks = run->num_ranks > 0 ? (size_t)run->num_ranks : 1;
  int *calls = rc ? NULL : calloc(num_ranks, sizeof *calls);
  if (!rc && !calls) rc = -1;
  for (size_t g = 0; !rc && g < n;) {
    size_t end = g;
    while (end < n && ops[end].group == ops[g].group && ops[end].members == ops[g].members) end++;
    /* The same number of calls on every member that recorded any. */
    memset(calls, 0, num_ranks * sizeof *calls);
    for (size_t i = g; i < end; i++) calls[ops[i].rank]++;
    int want = -1, even = 1;
    for (int r = 0; r < run->num_ranks; r++)
      if (calls[r]) {
        if (want < 0) want = calls[r];
        else if (calls[r] != want) even = 0;
      }
    for (size_t c = g; even && c < end;) { /* one call: equal seq, by rank */
      size_t ce = c;
      while (ce < end && ops[ce].seq == ops[c].seq) ce++;
      int same_kind = 1;
      for (size_t p = c; p < ce; p++) same_kind &= ops[p].kind == ops[c].kind;
      for (size_t p = c; same_kind && p < ce && !rc; p++)
        for (size_t q = c; q < ce && !rc; q++) {
          if (p == q) continue;
          if (push(l, ops[p].node, ops[q].node, TRACE_EDGE_SYNC)) {
            rc = -1;
            break;
          }
          TraceEdge *e = &l->e[l->n - 1];
          e->from_time = ops[p].begin;
          e->to_time = ops[q].end;
          e->self_time = ops[q].begin;
          e->op_kind = ops[q].kind;
        }
      if (!same_kind) dag->num_unmatched_collective_ops += (int)(ce - c);
      c = ce;
    }
    if (!even) dag->num_unmatched_collective_ops += (int)(end - g);
    g = end;
  }
  free(calls);
  free(ops);
  return rc;
}

/* Compressed adjacency: for each node the edges ending (or starting) there. */
static int build_adjacency(TraceDag *dag, int incoming, int **begin_out, int **edges_out) {
  int *begin = calloc((size_t)dag->num_nodes + 1, sizeof *begin);
  int *edges = malloc((size_t)(dag->num_edges ? dag->num_edges : 1) * sizeof *edges);
  if (!begin || !edges) {
    free(begin);
    free(edges);
    return -1;
  }
  for (int i = 0; i < dag->num_edges; i++) begin[(incoming ? dag->edges[i].to : dag->edges[i].from) + 1]++;
  for (int n = 0; n < dag->num_nodes; n++) begin[n + 1] += begin[n];
  int *fill = calloc((size_t)dag->num_nodes + 1, sizeof *fill);
  if (!fill) {
    free(begin);
    free(edges);
    return -1;
  }
  for (int i = 0; i < dag->num_edges; i++) {
    int n = incoming ? dag->edges[i].to : dag->edges[i].from;
    edges[begin[n] + fill[n]++] = i;
  }
  free(fill);
  *begin_out = begin;
  *edges_out = edges;
  return 0;
}

int trace_dag_build(const TraceRun *run, int iteration, TraceDag *dag, Error *err) {
  memset(dag, 0, sizeof *dag);
  if (!run->program)
    return error_set(err, ERR_FORMAT,
                     "the trace has no schedule program (otherData.program): the DAG cannot be rebuilt; record with "
                     "the program (the executor writes it; for eBPF traces pass --program FILE)");
  dag->run = run;
  dag->program = run->program;
  dag->iteration = iteration;
  TraceIndex ix;
  int rc = trace_index_build(run->ranks, run->num_ranks, run->program, &ix, err);
  if (rc) return rc;
  int num_actions = run->program->num_actions;
  size_t slots = (size_t)run->num_ranks * num_actions;
  dag->node_of = malloc((slots ? slots : 1) * sizeof *dag->node_of);
  int cap_nodes = 0;
  for (int r = 0; r < run->num_ranks; r++) {
    int count;
    if (sched_program_rank_actions(run->program, run->ranks[r].info.pipeline_rank, &count)) cap_nodes += count;
  }
  dag->nodes = malloc((size_t)(cap_nodes ? cap_nodes : 1) * sizeof *dag->nodes);
  if (!dag->node_of || !dag->nodes) {
    trace_index_free(&ix);
    trace_dag_free(dag);
    return error_set(err, ERR_NOMEM, "trace DAG: out of memory for %d nodes", cap_nodes);
  }
  for (size_t i = 0; i < slots; i++) dag->node_of[i] = -1;
  for (int r = 0; r < run->num_ranks; r++) {
    int count;
    const SchedAction *list = sched_program_rank_actions(run->program, run->ranks[r].info.pipeline_rank, &count);
    for (int i = 0; list && i < count; i++) {
      int ev = trace_index_event(&ix, r, iteration, list[i].id);
      if (ev < 0) {
        dag->num_missing_actions++;
        continue;
      }
      const TraceEvent *e = &run->ranks[r].events[ev];
      TraceNode *n = &dag->nodes[dag->num_nodes];
      *n = (TraceNode){r, list[i].id, ev, (int64_t)e->begin, (int64_t)e->end, (int64_t)e->begin};
      if (dag->num_nodes == 0 || n->begin < dag->begin) dag->begin = n->begin;
      if (dag->num_nodes == 0 || n->end > dag->end) dag->end = n->end;
      dag->node_of[(size_t)r * num_actions + list[i].id] = dag->num_nodes++;
    }
  }
  if (dag->num_nodes == 0) {
    trace_index_free(&ix);
    trace_dag_free(dag);
    return error_set(err, ERR_FORMAT, "the trace has no recorded action of iteration %d", iteration);
  }
  EdgeList l = {0};
  for (int r = 0; r < run->num_ranks && rc == ERR_OK; r++)
    if (rank_edges(dag, r, &l)) rc = error_set(err, ERR_NOMEM, "trace DAG: out of memory");
  if (rc == ERR_OK) rc = collective_edges(dag, &ix, &l, err);
  trace_index_free(&ix);
  for (int r = 0; r < run->num_ranks && rc == ERR_OK; r++)
    if (wait_edges(dag, r, &l)) rc = error_set(err, ERR_NOMEM, "trace DAG: out of memory");
  if (rc == ERR_OK && sync_edges(dag, &l)) rc = error_set(err, ERR_NOMEM, "trace DAG: out of memory");
  dag->edges = l.e;
  dag->num_edges = l.n;
  if (rc == ERR_OK && (build_adjacency(dag, 1, &dag->in_begin, &dag->in_edges) ||
                       build_adjacency(dag, 0, &dag->out_begin, &dag->out_edges)))
    rc = error_set(err, ERR_NOMEM, "trace DAG: out of memory");
  if (rc != ERR_OK) trace_dag_free(dag);
  return rc;
}
