/* The critical path of a measured iteration, and the DAG as Graphviz DOT.
 *
 * In a measured DAG every time point was released by one of the points
 * before it: a begin by the latest of its predecessors' ends, an end by its
 * own begin (the action ran) or, for a receive, by its send's end, or, for
 * a collective, by the last participant to arrive. Walking back from the
 * last end of the iteration, always to the point that released the current
 * one (the latest among its DAG predecessors), gives the chain of work and
 * waiting that set the iteration time, as Holistic Trace Analysis does on
 * PyTorch traces. The path is a sequence of segments, each either an
 * action's own run (begin -> end) or an edge crossed (the gap between a
 * predecessor's point and the point it released: host overhead on program
 * order, transfer time on a message, the collective's own time after the
 * last arrival). When the walk reaches an action nothing released (a
 * rank's first action) that began after the iteration's first stamp, a
 * START segment covers the difference: that rank started late, and the
 * others waited for it. Segments tile the iteration exactly, so the path's
 * length is the measured iteration time.
 * A predecessor stamped later than the point it released (clock skew
 * between hosts) counts as releasing it with no gap.
 *
 * Points inside actions: a collective operation inside an action (SYNC
 * edges, dag.h) ends no earlier than the last member began it, so where a
 * rank waited inside, say, OPTIM's all-gather for another rank, the path
 * runs back from the operation's end to that rank's call (an EDGE segment
 * of kind sync: the collective's own time after the last arrival) and goes
 * on through that rank's work; the waiting rank's action before its call
 * and after the operation are partial ACTION segments. A posted receive's
 * end is released by its message, by the end of the host's previous action
 * (WAIT: from then on the rank waited for it), or by its post, whichever
 * is latest, so a receive posted before the rank's own backward never
 * counts that backward as the receive's time. */
#ifndef FIVEFOLD_TRACE_CRITICAL_PATH_H
#define FIVEFOLD_TRACE_CRITICAL_PATH_H

#include <stdio.h>

#include "trace/dag.h"

typedef enum TraceSegmentKind { TRACE_SEGMENT_ACTION = 0, TRACE_SEGMENT_EDGE, TRACE_SEGMENT_START } TraceSegmentKind;

typedef struct TraceSegment {
  TraceSegmentKind kind;
  int node;  /* ACTION: the node that ran (all of it, or the part before or
              * after a collective operation inside it); EDGE: the node whose
              * point was released; START: the first action of the late rank */
  int edge;  /* EDGE: index in dag->edges; ACTION: -1 */
  int rank;  /* world rank the time is spent on (the released node's) */
  int64_t begin, end;
} TraceSegment;

typedef struct TraceCriticalPath {
  int iteration;
  int num_segments;
  TraceSegment *segments; /* in time order */
  int64_t begin, end;     /* path start and end (ns since the trace origin) */
  int64_t length;         /* sum of segment lengths */
  int64_t iteration_time; /* dag end - dag begin */
  int64_t start_skew;     /* the START segment's length: how late the path's first rank began */
  int64_t action_time;    /* in ACTION segments */
  int64_t edge_time[TRACE_NUM_EDGE_KINDS]; /* in EDGE segments, by kind */
  int num_actions;        /* ACTION segments */
  int *node_on_path;      /* per DAG node: 1 if it ran on the path (ACTION segment) */
  int *edge_on_path;      /* per DAG edge: 1 if crossed */
} TraceCriticalPath;

int trace_critical_path(const TraceDag *dag, TraceCriticalPath *path, Error *err);
void trace_critical_path_free(TraceCriticalPath *path);

/* Writes the DAG as DOT: one cluster per rank, nodes labelled with the
 * action and its measured duration, edges styled by kind; the critical path
 * (may be NULL) in red. critical_only keeps only the nodes and edges on it. */
int trace_dag_write_dot(const TraceDag *dag, const TraceCriticalPath *path, int critical_only, FILE *f, Error *err);

#endif
