/* The timing DAG of one measured iteration: the program's graph (the one
 * sched_evaluate prices) laid over what really ran, on every world rank.
 *
 * Nodes are the executed actions, one per (world rank, action id), with
 * their measured begin and end. Every node has two time points, its begin
 * and its end, and each edge joins one point to another:
 *   STREAM      program order on a stream of one rank   end(from)   -> begin(to)
 *   ISSUE       an action off the compute stream waits
 *               for the host to reach it: the previous
 *               compute-stream action in list order      end(from)   -> begin(to)
 *   DATA        a dependency of the program              end(from)   -> begin(to)
 *   MESSAGE     a send to its matching receive: the
 *               receive cannot complete before the send
 *               started (its end may come first: the
 *               receiver can wake before the sender
 *               returns)                                 begin(send) -> end(recv)
 *   COLLECTIVE  synchronisation between the participants
 *               of one collective (zero weight): none
 *               can finish before all have begun        begin(from) -> end(to)
 * and two kinds the measurement adds to the program's graph:
 *   WAIT        a posted receive is waited for only once
 *               the host has finished the action it ran
 *               before the receive's first consumer: its
 *               time before that is the rank's own work end(pred)   -> end(recv)
 *   SYNC        a collective operation inside two actions
 *               (the all-gather of the gradient norm in
 *               OPTIM, a TP all-reduce in a FWD): the
 *               k-th call on a group on one rank cannot
 *               end before each other member began its
 *               k-th call on that group                  op begin    -> op end
 *               (times inside the actions: from_time,
 *               to_time, and self_time = the target's own
 *               op begin, before which it was not waiting)
 * The receive's dependency on its send is the MESSAGE edge (not repeated as
 * DATA). Stream and issue order skip actions that were not recorded (a
 * full buffer), and edges touching unrecorded actions are counted, not
 * built. Times are ns since the trace's origin. */
#ifndef FIVEFOLD_TRACE_DAG_H
#define FIVEFOLD_TRACE_DAG_H

#include <stdint.h>

#include "base/error.h"
#include "trace/run.h"

typedef enum TraceEdgeKind {
  TRACE_EDGE_STREAM = 0,
  TRACE_EDGE_ISSUE,
  TRACE_EDGE_DATA,
  TRACE_EDGE_MESSAGE,
  TRACE_EDGE_COLLECTIVE,
  TRACE_EDGE_WAIT, /* the kinds from here on are measured, not the program's */
  TRACE_EDGE_SYNC,
  TRACE_NUM_EDGE_KINDS
} TraceEdgeKind;

/* "stream", "issue", "data", "message", "collective", "wait", "sync" */
const char *trace_edge_kind_name(TraceEdgeKind kind);
/* Which time points an edge joins: 1 for the end, 0 for the begin (SYNC:
 * points inside both actions, 0 for both). */
int trace_edge_from_end(TraceEdgeKind kind);
int trace_edge_to_end(TraceEdgeKind kind);

typedef struct TraceNode {
  int rank;   /* world rank */
  int action; /* action id in the program */
  int event;  /* index in the rank's events */
  int64_t begin, end;
  /* When the rank began to wait for it: for a posted receive the later of
   * its post and the end of the action the host ran before its first
   * consumer (the WAIT edge's source); begin for everything else. */
  int64_t wait_begin;
} TraceNode;

typedef struct TraceEdge {
  int from, to; /* node indices */
  TraceEdgeKind kind;
  int64_t from_time, to_time, self_time; /* SYNC only (see above) */
  int op_kind;                           /* SYNC: the TraceOpKind of the collective, else -1 */
} TraceEdge;

typedef struct TraceDag {
  const TraceRun *run;
  const SchedProgram *program;
  int iteration;
  int num_nodes;
  TraceNode *nodes; /* by rank, then program order */
  int num_edges;
  TraceEdge *edges;
  int *in_begin, *in_edges;  /* edges into each node: in_edges[in_begin[n] .. in_begin[n+1]) */
  int *out_begin, *out_edges;
  int *node_of;              /* [rank * num_actions + action] -> node, -1 */
  int num_missing_actions;   /* program actions with no recorded event */
  int num_missing_edges;     /* edges of the program whose endpoint was not recorded */
  int num_unmatched_collective_ops; /* collective operations that could not be paired (SYNC) */
  int64_t begin, end;        /* earliest begin, latest end over the nodes */
} TraceDag;

/* Builds the DAG of one iteration of run (which must carry a program). */
int trace_dag_build(const TraceRun *run, int iteration, TraceDag *dag, Error *err);
void trace_dag_free(TraceDag *dag);

/* Node of action `action` on world rank `rank`, or -1. */
int trace_dag_node(const TraceDag *dag, int rank, int action);
/* Time of an edge's source point and target point. */
int64_t trace_edge_source_time(const TraceDag *dag, const TraceEdge *e);
int64_t trace_edge_target_time(const TraceDag *dag, const TraceEdge *e);

#endif
