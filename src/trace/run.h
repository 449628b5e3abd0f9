/* A measured run as the trace module passes it around: the schedule
 * program, and for every world rank its place in both rank grids and the
 * events it recorded. The Chrome writer takes the ranks' buffers (gathered
 * to rank 0 by the executor, or converted from eBPF output) and writes one
 * file; the reader turns that file back into a TraceRun, from which the
 * analyzer (dag.h, critical_path.h, stats.h) rebuilds the timing DAG. */
#ifndef FIVEFOLD_TRACE_RUN_H
#define FIVEFOLD_TRACE_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "sched/program.h"
#include "trace/recorder.h"

typedef struct cJSON cJSON;

/* Where a world rank sits. Coordinates are -1 when unknown; a run whose
 * world is just the pipeline leaves them -1 and sets pp = pipeline_rank. */
typedef struct TraceRankInfo {
  int world_rank;
  int pipeline_rank; /* which rank's list of the program it runs */
  int tp, cp, dp, pp;  /* attention grid (comm/grid_math.h) */
  int etp, ep, edp;    /* MoE grid */
  char host[64];
} TraceRankInfo;

/* A rank's info with every coordinate -1 but pp = pipeline_rank. */
TraceRankInfo trace_rank_info_make(int world_rank, int pipeline_rank);

/* One rank's events, stamps in ns of that rank's CLOCK_MONOTONIC. */
typedef struct TraceRankBuffer {
  TraceRankInfo info;
  const TraceEvent *events;
  size_t count;
  uint64_t dropped;
  /* Added to this rank's stamps to put them on rank 0's clock (measured by
   * the executor, e.g. with a ping-pong against rank 0); 0 on one host. */
  int64_t clock_offset_ns;
} TraceRankBuffer;

/* Sizes of both grids; 0 when unknown. */
typedef struct TraceGridSizes {
  int world, tp, cp, dp, pp, etp, ep, edp;
} TraceGridSizes;

/* What the trace file says about the run besides the events. */
typedef struct TraceRunMeta {
  const SchedProgram *program; /* required to analyze the file */
  const cJSON *config;         /* run configuration (any JSON), may be NULL */
  const cJSON *model;          /* model configuration, may be NULL */
  const cJSON *session;        /* how the recording went (clock sync, window), may be NULL */
  const cJSON *plan;           /* the plan file the run was laid out and placed by (its path, cluster and
                                  device mapping: what `trace compare` prices it with), may be NULL */
  TraceGridSizes grid;
  const char *source;          /* "recorder" or "ebpf"; NULL = "recorder" */
  const char *clock;           /* clock the stamps came from; NULL = this process's */
} TraceRunMeta;

/* A trace file read back (chrome_writer.h: trace_chrome_read). Stamps are
 * ns since the file's time origin, clock offsets already applied. */
typedef struct TraceRun {
  SchedProgram *program; /* NULL when the file has none */
  int num_ranks;
  TraceRankBuffer *ranks; /* by world rank */
  TraceEvent *event_pool; /* storage behind every rank's events */
  TraceGridSizes grid;
  int64_t origin_ns;  /* CLOCK_MONOTONIC ns of time 0 on rank 0's clock */
  char source[32];
  cJSON *other_data;  /* the file's "otherData" object (config, model, ...) */
} TraceRun;

void trace_run_free(TraceRun *run);

/* Iterations present in the run's action events: *first..*last (inclusive);
 * returns 0, or -1 when there are no action events. */
int trace_run_iteration_range(const TraceRun *run, int *first, int *last);

#endif
