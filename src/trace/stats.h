/* What a measured run says, iteration by iteration and over all of them:
 * the critical path against the iteration time, the pipeline bubble, the
 * exposed communication by kind, the straggler, and per-kind timing
 * statistics of actions and sub-operations. `fivefold trace analyze`
 * prints this report.
 *
 * Definitions (all per iteration, over every world rank):
 *  - iteration time: latest end - earliest begin of its actions;
 *  - bubble fraction: 1 - busy / (ranks x iteration time), busy = time in
 *    compute kinds (FWD, BWD, OPTIM), as sched_evaluate defines it, so
 *    measured and predicted bubbles compare directly;
 *  - exposed communication of a kind: the time its actions run while no
 *    compute action runs on the same rank (waiting included), summed over
 *    ranks; a posted receive only from when the rank began to wait for it
 *    (its node's wait_begin, dag.h), not from its post;
 *  - straggler: the rank whose time on the critical path exceeds what that
 *    rank normally takes for the same work the most: for each action on the
 *    path its duration less the median duration of the same kind and chunk
 *    on that rank over the run, plus the gaps on the path in which that
 *    rank had nothing to wait for. Everyone waited for that excess. */
#ifndef FIVEFOLD_TRACE_STATS_H
#define FIVEFOLD_TRACE_STATS_H

#include <stdio.h>

#include "trace/critical_path.h"
#include "trace/dag.h"

typedef struct TraceTimeStats {
  int count;
  double best, mean, worst, total; /* ns */
  int oncpu_count;                 /* events whose on-CPU time is known (eBPF) */
  double oncpu_total;              /* ns */
} TraceTimeStats;

typedef struct TraceIterationReport {
  int iteration;
  TraceDag dag;
  TraceCriticalPath path;
  int64_t time;             /* iteration time, ns */
  double bubble_fraction;
  int64_t exposed[SCHED_NUM_ACTION_KINDS]; /* ns, summed over ranks */
  int64_t *rank_excess;     /* per world rank, ns on the critical path beyond typical */
  int straggler;            /* world rank, -1 when no rank has any excess */
  int64_t straggler_excess; /* ns */
  int straggler_node;       /* the straggler's action on the path with the largest excess, -1 */
  int64_t straggler_node_typical; /* that action's typical duration, ns */
} TraceIterationReport;

typedef struct TraceReport {
  const TraceRun *run;
  int num_iterations;
  TraceIterationReport *iters;
  TraceTimeStats iteration_time;
  TraceTimeStats action_kind[SCHED_NUM_ACTION_KINDS];
  TraceTimeStats op_kind[TRACE_NUM_OP_KINDS];
  uint64_t dropped;     /* events lost to full buffers, all ranks */
  int missing_actions;  /* over every iteration */
  int missing_edges;
} TraceReport;

/* Analyzes every iteration with recorded actions (only `iteration` when it
 * is >= 0). */
int trace_analyze(const TraceRun *run, int iteration, TraceReport *out, Error *err);
/* The same over iterations first..last (each within the trace's). */
int trace_analyze_range(const TraceRun *run, int first, int last, TraceReport *out, Error *err);
void trace_report_free(TraceReport *report);

/* The iteration's report, or NULL. */
const TraceIterationReport *trace_report_iteration(const TraceReport *report, int iteration);

/* The text report. max_path_lines bounds the critical-path listing per
 * iteration (<= 0: all). */
void trace_report_print(const TraceReport *report, FILE *f, int max_path_lines);

/* Median duration of (world rank, action kind, chunk) over the run, ns;
 * -1 when never recorded. */
int64_t trace_typical_duration(const TraceRun *run, int rank, SchedActionKind kind, int chunk);

#endif
