/* Builds the measured DAG of one iteration (dag.h). */
#include "trace/dag.h"

#include <stdlib.h>
#include <string.h>

#include "trace/match.h"

static const char *const EDGE_NAMES[TRACE_NUM_EDGE_KINDS] = {"stream", "issue", "data", "message", "collective"};

const char *trace_edge_kind_name(TraceEdgeKind kind) {
  return kind >= 0 && kind < TRACE_NUM_EDGE_KINDS ? EDGE_NAMES[kind] : "?";
}

int trace_edge_from_end(TraceEdgeKind kind) { return kind != TRACE_EDGE_COLLECTIVE && kind != TRACE_EDGE_MESSAGE; }
int trace_edge_to_end(TraceEdgeKind kind) { return kind == TRACE_EDGE_MESSAGE || kind == TRACE_EDGE_COLLECTIVE; }

int64_t trace_edge_source_time(const TraceDag *dag, const TraceEdge *e) {
  const TraceNode *n = &dag->nodes[e->from];
  return trace_edge_from_end(e->kind) ? n->end : n->begin;
}

int64_t trace_edge_target_time(const TraceDag *dag, const TraceEdge *e) {
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
  l->e[l->n++] = (TraceEdge){from, to, kind};
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
      *n = (TraceNode){r, list[i].id, ev, (int64_t)e->begin, (int64_t)e->end};
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
  dag->edges = l.e;
  dag->num_edges = l.n;
  if (rc == ERR_OK && (build_adjacency(dag, 1, &dag->in_begin, &dag->in_edges) ||
                       build_adjacency(dag, 0, &dag->out_begin, &dag->out_edges)))
    rc = error_set(err, ERR_NOMEM, "trace DAG: out of memory");
  if (rc != ERR_OK) trace_dag_free(dag);
  return rc;
}
