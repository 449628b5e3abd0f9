/* Finding events again: which recorded event is action a of iteration i on
 * world rank w, which rank is the other side of a message, and which
 * actions on different ranks are one collective. Shared by the Chrome
 * writer (flow arrows) and the DAG builder (edges), so both pair events the
 * same way. Module-internal. */
#ifndef FIVEFOLD_TRACE_MATCH_H
#define FIVEFOLD_TRACE_MATCH_H

#include "base/error.h"
#include "sched/program.h"
#include "trace/run.h"

typedef struct TraceIndex {
  const TraceRankBuffer *ranks;
  int num_ranks;
  const SchedProgram *program;
  int first_iteration, num_iterations; /* over every rank's action events */
  int *slot;           /* [(rank * num_iterations + it - first) * num_actions + action] -> event, -1 */
  int num_duplicates;  /* a second event for the same slot (ignored) */
  int num_unknown;     /* action ids outside the program or on the wrong rank */
} TraceIndex;

/* Indexes the action events of every rank (op events are left out). */
int trace_index_build(const TraceRankBuffer *ranks, int num_ranks, const SchedProgram *prog, TraceIndex *ix,
                      Error *err);
void trace_index_free(TraceIndex *ix);
/* Event index in ranks[rank].events, or -1 when not recorded. */
int trace_index_event(const TraceIndex *ix, int rank, int iteration, int action);

/* World rank that runs pipeline rank `peer_pipeline` next to world rank
 * `rank` (same coordinates in every other dimension); `recorded` (the
 * event's peer field) wins when >= 0. -1 when there is none. */
int trace_peer_world_rank(const TraceRankBuffer *ranks, int num_ranks, int rank, int peer_pipeline, int recorded);

/* One collective: the (rank, action) pairs that took part. */
typedef struct TraceParticipant {
  int rank, action, event;
} TraceParticipant;

typedef struct TraceCollectives {
  int count;              /* collectives */
  int *begin;             /* count + 1 offsets into parts */
  TraceParticipant *parts;
} TraceCollectives;

/* Groups the iteration's collective actions (those recorded with a group,
 * sends and receives excepted) as MPI matches collective calls: same group
 * kind, same group id, and the same position among that rank's calls on the
 * group in program order. */
int trace_collectives_find(const TraceIndex *ix, int iteration, TraceCollectives *out, Error *err);
void trace_collectives_free(TraceCollectives *c);

#endif
