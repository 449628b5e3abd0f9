/* The tracer on real MPI ranks: one recording session per rank of a
 * multi-rank run (issue "Tracer"). Each rank stamps the actions of the
 * schedule program it executes into its own recorder (trace/recorder.h);
 * at the end rank 0 measures every rank's clock offset, gathers all
 * buffers and writes one Chrome trace (trace/chrome_writer.h) that
 * `fivefold trace analyze` and `trace compare` read.
 *
 * An executor integrates it with five calls (ts may be NULL everywhere:
 * tracing off, nothing recorded, each call a test and a return):
 *
 *   1. before the run, on every rank (collective; sizes the buffer once):
 *        trace_session_create(&opt, prog, &grid.sizes, &ts, &err);
 *   2. at the top of each iteration (step number as the trainer counts):
 *        trace_session_begin_iteration(ts, step);
 *   3. around each action the host runs to completion:
 *        TraceEvent span = trace_session_action_begin(ts, a);
 *        rc = handler(ctx, a, err);
 *        trace_session_action_end(ts, &span);
 *      a handler that only posts work (an MPI_Irecv for a RECV on the p2p
 *      stream, an MPI_Iallreduce for a GRAD_REDUCE) calls instead
 *        trace_session_post(ts, a);             when it posts it
 *        trace_session_complete(ts, a);         when its wait returns
 *      and whoever waits for posted work should do so before the span of
 *      the action that needs it begins, so the wait is not counted as
 *      that action's own time;
 *   4. after the last iteration, on every rank (collective):
 *        trace_session_finish(ts, config_json, model_json, &err);
 *        trace_session_free(ts);
 *
 * Peers and groups are filled in from the program and the grid: a SEND or
 * RECV carries the world rank of the other side (same coordinates, the
 * pipeline rank the program names), a GRAD_REDUCE the group
 * opt.grad_reduce_group with its lowest world rank as id, so the analyzer
 * pairs messages and collectives without guessing.
 *
 * While stepping nothing here allocates, locks or does I/O: two clock
 * reads and a few stores per action. Without MPI (comm_init never called)
 * the process is a world of one: create needs no agreement and finish
 * writes the file itself. Otherwise create and finish talk MPI on the
 * world communicator; only the thread that called comm_init may call them,
 * and the per-action calls must come from the thread that called create. */
#ifndef FIVEFOLD_TRAIN_TRACE_SESSION_H
#define FIVEFOLD_TRAIN_TRACE_SESSION_H

#include "base/error.h"
#include "comm/grid_math.h"
#include "sched/program.h"
#include "trace/recorder.h"

typedef struct cJSON cJSON;

typedef struct TraceSessionOptions {
  const char *path;      /* trace file rank 0 writes (required) */
  int first_step;        /* iterations recorded, inclusive (--trace-steps a:b) */
  int last_step;         /* < 0: to the end of the run */
  int num_steps;         /* iterations the run executes; 0 when unknown (sizes the buffer) */
  int extra_events_per_step; /* sub-operation spans per iteration on this rank, beyond the actions */
  int grad_reduce_group; /* TraceGroup of GRAD_REDUCE (default TRACE_GROUP_DP_CP) */
  int ping_pong_rounds;  /* clock-offset rounds per rank (default 16; the shortest round trip wins) */
  /* Ranks on rank 0's host read the same CLOCK_MONOTONIC, so their true
   * offset is 0 and a measured one is only noise: by default they get 0
   * (the measurement is still written to the trace). 1 applies it anyway. */
  int apply_same_host_offsets;
} TraceSessionOptions;

TraceSessionOptions trace_session_options_default(void);

/* Parses --trace-steps "a:b", "a:", "a" or ":" into opt, and checks the
 * window against the run's num_steps (when > 0) so that a window the run
 * never reaches is an error before any work starts. */
int trace_session_parse_steps(const char *text, int num_steps, TraceSessionOptions *opt, Error *err);

typedef struct TraceSession TraceSession;

/* Collective over the world. sizes: the run's grid (resolved, world = the
 * MPI world); NULL means a pure pipeline run (world = k x prog->num_ranks,
 * data parallel over the rest). The rank's pipeline rank is its pp
 * coordinate. Every rank fails or none does. */
int trace_session_create(const TraceSessionOptions *opt, const SchedProgram *prog, const GridSizes *sizes,
                         TraceSession **out, Error *err);

/* A session that records nothing and writes no file, for a run without
 * --trace: the executor's calls still fire the USDT probes (rank,
 * iteration, every action with its peer and group; trace/probes.h), so
 * `fivefold trace record --ebpf` can trace a run that was not started for
 * tracing. Not collective; NULL when out of memory (the run then has no
 * action probes, nothing else changes). */
TraceSession *trace_session_create_probes(const SchedProgram *prog, const GridSizes *sizes);
/* 1 when ts records (a --trace session), 0 for NULL or probes only. */
int trace_session_records(const TraceSession *ts);

/* Test hook: FIVEFOLD_TEST_DELAY_ACTION="RANK:KIND:MB:ITER:MS[:end],..."
 * makes world rank RANK sleep MS ms inside its action KIND (FWD, BWD,
 * OPTIM, ...) of micro-batch MB (-1: any) in iteration ITER, before the
 * handler or, with ":end", after it: a straggler with a known cause for
 * the analysis tests (tests/trace/pp2_path_test.sh). Read at create; up to
 * 4 entries. Only tests set it. */
#define TRACE_SESSION_DELAY_ENV "FIVEFOLD_TEST_DELAY_ACTION"

void trace_session_begin_iteration(TraceSession *ts, int iteration);
TraceEvent trace_session_action_begin(TraceSession *ts, const SchedAction *a);
void trace_session_action_end(TraceSession *ts, TraceEvent *span);
void trace_session_post(TraceSession *ts, const SchedAction *a);
void trace_session_complete(TraceSession *ts, const SchedAction *a);

/* This rank's pipeline rank and world rank (for executor_create). */
int trace_session_pipeline_rank(const TraceSession *ts);
int trace_session_world_rank(const TraceSession *ts);

/* Collective: stops recording, measures clock offsets against rank 0 by
 * ping-pong, gathers every rank's events to rank 0, which writes the
 * Chrome trace with config and model (either may be NULL) as metadata.
 * Every rank returns rank 0's verdict. */
int trace_session_finish(TraceSession *ts, const cJSON *config, const cJSON *model, Error *err);

/* The plan file the run was laid out and placed by (its path, cluster and
 * device mapping: TraceRunMeta.plan), written as otherData.plan by finish
 * on rank 0. Not copied: it must live until finish. NULL: none. */
void trace_session_set_plan(TraceSession *ts, const cJSON *plan);

/* What finish measured (valid on rank 0 after finish; 0 elsewhere). */
typedef struct TraceClockSync {
  int64_t measured_offset_ns; /* add to the rank's stamps to get rank 0's clock */
  int64_t round_trip_ns;      /* of the round the estimate came from */
  int64_t applied_offset_ns;  /* what the trace file uses */
} TraceClockSync;
const TraceClockSync *trace_session_clock_sync(const TraceSession *ts, int *num_ranks);

void trace_session_free(TraceSession *ts);

#endif
