/* The graph a program's evaluation runs over (the execution model of
 * program.h and evaluate.h as nodes and weighted edges), built once in
 * evaluate.c and shared by the two evaluators that read it: the max-plus
 * sweep (sched_evaluate) and the processor-sharing event simulation
 * (evaluate_shared.h). Also the two ends every evaluation shares: the
 * result's allocation and its summary (busy, idle, makespan, deadlock). */
#ifndef FIVEFOLD_SCHED_EVAL_GRAPH_H
#define FIVEFOLD_SCHED_EVAL_GRAPH_H

#include "base/error.h"
#include "sched/evaluate.h"

typedef struct SchedEvalEdge {
  int to;        /* node that waits */
  double weight; /* added to the finish of the node it leaves (a receive's transfer) */
} SchedEvalEdge;

typedef struct SchedEvalGraph {
  int n;            /* actions (node ids are action ids) */
  int *node;        /* per action: its node; a rendezvous pair is one node, its SEND */
  int *indeg;       /* per node: incoming edges (+1, never released, for an unmatched receive) */
  int *edge_begin;  /* n + 1 entries: edges[edge_begin[u] .. edge_begin[u + 1]) leave node u */
  SchedEvalEdge *edges;
  double *dur;      /* per node: its duration (a rendezvous pair: both ends and the transfer) */
  int *prev_same;   /* per action: the previous action on its stream (serial: in its list), -1 */
  int *prev_compute; /* per action: the previous compute-stream action in its list, -1 */
} SchedEvalGraph;

/* Builds the graph, pricing every action with opts->cost (and transfer).
 * Errors: a missing cost callback, an unknown stream, a cost that is not
 * finite and >= 0, a dependency outside the program. Free with
 * sched_eval_graph_free, also after an error. */
int sched_eval_graph_build(const SchedProgram *prog, const SchedEvalOptions *opts, SchedEvalGraph *g, Error *err);
void sched_eval_graph_free(SchedEvalGraph *g);

/* Allocates out for prog with every start and finish NAN. */
int sched_eval_alloc(const SchedProgram *prog, SchedEval *out, Error *err);

/* Once every node that ran has its start and finish: copies a rendezvous
 * pair's times to its receive, sums busy and communication time per rank,
 * the makespan and the bubble fraction, and reports actions that never
 * started as a deadlock (ERR_CONFIG, naming what each blocked rank waits for). */
int sched_eval_finish(const SchedProgram *prog, const SchedEvalOptions *opts, const SchedEvalGraph *g, SchedEval *out,
                      Error *err);

#endif
