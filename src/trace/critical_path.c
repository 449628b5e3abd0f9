/* The backward walk that finds the critical path (critical_path.h), and the
 * DOT writer that draws the DAG with the path on it. */
#include "trace/critical_path.h"

#include <stdlib.h>
#include <string.h>

void trace_critical_path_free(TraceCriticalPath *path) {
  if (!path) return;
  free(path->segments);
  free(path->node_on_path);
  free(path->edge_on_path);
  memset(path, 0, sizeof *path);
}


/* The edge into `node`'s end (at_end) or begin that released it, or -1 when
 * nothing did (for an end: its own begin). Only causal edges count, those
 * whose source point is no later than the point: an edge the measurement
 * contradicts did not hold in this run (posted receives overlap on their
 * stream; a receiver can wake before its sender returns). When every edge
 * is contradicted (clock skew between hosts), the least contradicted one
 * releases the point with no gap. *when receives the release time. */
static int releasing_edge(const TraceDag *dag, int node, int at_end, int64_t *when) {
  const TraceNode *n = &dag->nodes[node];
  int64_t point = at_end ? n->end : n->begin;
  int best = -1, late = -1;
  int64_t best_t = at_end ? n->begin : INT64_MIN, late_t = INT64_MAX;
  for (int k = dag->in_begin[node]; k < dag->in_begin[node + 1]; k++) {
    const TraceEdge *e = &dag->edges[dag->in_edges[k]];
    if (e->kind == TRACE_EDGE_SYNC || trace_edge_to_end(e->kind) != at_end) continue;
    int64_t t = trace_edge_source_time(dag, e);
    if (t > point) {
      if (t < late_t) {
        late = dag->in_edges[k];
        late_t = t;
      }
      continue;
    }
    int same_rank = dag->nodes[e->from].rank == n->rank;
    int best_same = best >= 0 && dag->nodes[dag->edges[best].from].rank == n->rank;
    /* Strictly later wins; on a tie an edge from the same rank beats one
     * from another (no rank jump without cause), and an end keeps its own
     * run. */
    if (t > best_t || (t == best_t && best >= 0 && same_rank && !best_same)) {
      best = dag->in_edges[k];
      best_t = t;
    }
  }
  if (best < 0 && !at_end && late >= 0) {
    best = late;
    best_t = point;
  }
  *when = best_t;
  return best;
}

/* The SYNC edge that released a point at time t inside `node`: of the
 * collective operations that ended there by t and for which this rank
 * waited (a member began its call after this rank began its own), the
 * latest, with its last arriver; -1 when none. */
static int releasing_sync(const TraceDag *dag, int node, int64_t t) {
  int best = -1;
  for (int k = dag->in_begin[node]; k < dag->in_begin[node + 1]; k++) {
    int i = dag->in_edges[k];
    const TraceEdge *e = &dag->edges[i];
    if (e->kind != TRACE_EDGE_SYNC || e->to_time > t || e->from_time <= e->self_time || e->from_time > e->to_time)
      continue;
    const TraceEdge *b = best >= 0 ? &dag->edges[best] : NULL;
    if (!b || e->to_time > b->to_time || (e->to_time == b->to_time && e->from_time > b->from_time)) best = i;
  }
  return best;
}

int trace_critical_path(const TraceDag *dag, TraceCriticalPath *path, Error *err) {
  memset(path, 0, sizeof *path);
  path->iteration = dag->iteration;
  int max_steps = 2 * (dag->num_nodes + dag->num_edges) + 3;
  path->segments = malloc((size_t)max_steps * sizeof *path->segments);
  path->node_on_path = calloc((size_t)dag->num_nodes + 1, sizeof *path->node_on_path);
  path->edge_on_path = calloc((size_t)dag->num_edges + 1, sizeof *path->edge_on_path);
  if (!path->segments || !path->node_on_path || !path->edge_on_path) {
    trace_critical_path_free(path);
    return error_set(err, ERR_NOMEM, "critical path: out of memory");
  }
  int node = 0;
  for (int i = 1; i < dag->num_nodes; i++)
    if (dag->nodes[i].end > dag->nodes[node].end) node = i;
  /* The walk's point: a node's begin, or a time t inside it or at its end
   * (where a SYNC edge leaves a collective operation inside an action). */
  int at_begin = 0;
  int64_t t = dag->nodes[node].end;
  int n = 0;
  for (;;) {
    if (n + 2 > max_steps) {
      trace_critical_path_free(path);
      return error_set(err, ERR_FORMAT,
                       "critical path of iteration %d: the walk does not end (the program's dependencies form a cycle)",
                       dag->iteration);
    }
    const TraceNode *cur = &dag->nodes[node];
    int64_t when;
    if (at_begin) {
      int edge = releasing_edge(dag, node, 0, &when);
      if (edge < 0) {
        /* Nothing released this begin: the rank started here. */
        if (cur->begin > dag->begin)
          path->segments[n++] = (TraceSegment){TRACE_SEGMENT_START, node, -1, cur->rank, dag->begin, cur->begin};
        break;
      }
      const TraceEdge *e = &dag->edges[edge];
      path->segments[n++] = (TraceSegment){TRACE_SEGMENT_EDGE, node, edge, cur->rank, when, cur->begin};
      node = e->from;
      at_begin = !trace_edge_from_end(e->kind);
      t = at_begin ? dag->nodes[node].begin : dag->nodes[node].end;
      continue;
    }
    /* At t inside or at the end of cur: an edge into the end, a collective
     * operation inside that waited for another rank, or cur's own run,
     * whichever released latest. */
    int end_edge = t == cur->end ? releasing_edge(dag, node, 1, &when) : -1;
    int sync = releasing_sync(dag, node, t);
    if (end_edge >= 0 && (sync < 0 || when >= dag->edges[sync].to_time)) {
      const TraceEdge *e = &dag->edges[end_edge];
      path->segments[n++] = (TraceSegment){TRACE_SEGMENT_EDGE, node, end_edge, cur->rank, when, t};
      node = e->from;
      at_begin = !trace_edge_from_end(e->kind);
      t = at_begin ? dag->nodes[node].begin : dag->nodes[node].end;
    } else if (sync >= 0) {
      const TraceEdge *e = &dag->edges[sync];
      if (e->to_time < t)
        path->segments[n++] = (TraceSegment){TRACE_SEGMENT_ACTION, node, -1, cur->rank, e->to_time, t};
      path->segments[n++] = (TraceSegment){TRACE_SEGMENT_EDGE, node, sync, cur->rank, e->from_time, e->to_time};
      node = e->from;
      at_begin = 0;
      t = e->from_time;
    } else {
      path->segments[n++] = (TraceSegment){TRACE_SEGMENT_ACTION, node, -1, cur->rank, cur->begin, t};
      at_begin = 1;
    }
  }
  /* Collected backwards; put them in time order. */
  for (int i = 0; i < n / 2; i++) {
    TraceSegment t = path->segments[i];
    path->segments[i] = path->segments[n - 1 - i];
    path->segments[n - 1 - i] = t;
  }
  path->num_segments = n;
  path->begin = n ? path->segments[0].begin : dag->nodes[node].begin;
  path->end = n ? path->segments[n - 1].end : dag->nodes[node].end;
  for (int i = 0; i < n; i++) {
    const TraceSegment *s = &path->segments[i];
    int64_t len = s->end - s->begin;
    path->length += len;
    if (s->kind == TRACE_SEGMENT_ACTION) {
      path->action_time += len;
      path->num_actions++;
      path->node_on_path[s->node] = 1;
    } else if (s->kind == TRACE_SEGMENT_START) {
      path->start_skew = len;
    } else {
      path->edge_time[dag->edges[s->edge].kind] += len;
      path->edge_on_path[s->edge] = 1;
    }
  }
  path->iteration_time = dag->end - dag->begin;
  return ERR_OK;
}

/* ---- DOT ---- */

static const char *edge_style(TraceEdgeKind kind) {
  switch (kind) {
  case TRACE_EDGE_STREAM: return "color=gray40";
  case TRACE_EDGE_ISSUE: return "color=gray60, style=dotted";
  case TRACE_EDGE_DATA: return "color=black";
  case TRACE_EDGE_MESSAGE: return "color=blue, penwidth=1.5";
  case TRACE_EDGE_COLLECTIVE: return "color=darkorange, style=dashed, arrowhead=none";
  case TRACE_EDGE_WAIT: return "color=gray60, style=dashed";
  case TRACE_EDGE_SYNC: return "color=darkorange, style=dotted";
  default: return "";
  }
}

int trace_dag_write_dot(const TraceDag *dag, const TraceCriticalPath *path, int critical_only, FILE *f, Error *err) {
  if (critical_only && !path) return error_set(err, ERR_ARG, "DOT: --critical-only needs the critical path");
  int *keep = calloc((size_t)dag->num_nodes + 1, sizeof *keep);
  if (!keep) return error_set(err, ERR_NOMEM, "DOT: out of memory");
  for (int i = 0; i < dag->num_nodes; i++) keep[i] = !critical_only || path->node_on_path[i];
  if (critical_only)
    for (int i = 0; i < dag->num_edges; i++)
      if (path->edge_on_path[i]) keep[dag->edges[i].from] = keep[dag->edges[i].to] = 1;
  fprintf(f, "digraph trace {\n  rankdir=LR;\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n");
  fprintf(f, "  label=\"iteration %d: %.3f ms", dag->iteration, (double)(dag->end - dag->begin) / 1e6);
  if (path) fprintf(f, ", critical path %.3f ms (red)", (double)path->length / 1e6);
  fprintf(f, "\";\n");
  for (int r = 0; r < dag->run->num_ranks; r++) {
    int any = 0;
    for (int i = 0; i < dag->num_nodes; i++) {
      const TraceNode *nd = &dag->nodes[i];
      if (nd->rank != r || !keep[i]) continue;
      if (!any) fprintf(f, "  subgraph cluster_rank%d {\n    label=\"rank %d\";\n", r, r);
      any = 1;
      char label[48];
      sched_action_label(dag->program, sched_program_action(dag->program, nd->action), label, sizeof label);
      int red = path && path->node_on_path[i];
      fprintf(f, "    n%d [label=\"%s\\n%.3f ms\"%s];\n", i, label, (double)(nd->end - nd->begin) / 1e6,
              red ? ", color=red, penwidth=2" : "");
    }
    if (any) fprintf(f, "  }\n");
  }
  for (int i = 0; i < dag->num_edges; i++) {
    const TraceEdge *e = &dag->edges[i];
    int red = path && path->edge_on_path[i];
    if (critical_only && !red) continue;
    if (!keep[e->from] || !keep[e->to]) continue;
    fprintf(f, "  n%d -> n%d [%s%s];\n", e->from, e->to, edge_style(e->kind), red ? ", color=red, penwidth=2.5" : "");
  }
  fprintf(f, "}\n");
  free(keep);
  return ferror(f) ? error_set(err, ERR_IO, "DOT: write failed") : ERR_OK;
}
