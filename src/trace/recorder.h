/* The event recorder: what really ran on one rank, with begin/end stamps, in
 * a buffer sized once before the run (DESIGN.md: trace/).
 *
 * Two kinds of events:
 *  - actions of the schedule program (sched/program.h), by action id and
 *    iteration: the nodes of the measured DAG (dag.h);
 *  - operations inside a layer that the cost model prices (attention, GEMMs
 *    with their shape, norms, the router, each MoE dispatcher phase, each
 *    collective with its group, bytes and peer), by layer and micro-batch:
 *    what calibration fits the cost model to.
 *
 * Plugging it into an executor takes a few calls:
 *   rec = trace_recorder_new(&cfg, err);      once, before the run
 *   trace_bind(rec, world_rank, pipe_rank, W); on the thread that runs the
 *                                               program (rec may be NULL:
 *                                               probes only)
 *   trace_begin_iteration(it);                 at the top of each iteration
 *   TraceEvent a = trace_action_begin(id, mb, layer);
 *   ... run the action ...  (a.peer / a.bytes / a.group may be set here)
 *   trace_action_end(&a);
 *   TRACE_OP_BEGIN(op, TRACE_OP_GEMM, layer, mb); gemm(...);
 *   TRACE_OP_END_GEMM(op, M, N, K);
 *   trace_recorder_stop(rec);                  after the run: stamps -> ns
 * then hand trace_recorder_events() to the Chrome writer (chrome_writer.h).
 *
 * Hot path: when no recorder is recording anywhere in the process, a span
 * costs one load of a global flag and a never-taken branch (plus a nop for
 * the USDT probe, probes.h). When recording: two clock reads (rdtsc when
 * the CPU has an invariant TSC, else clock_gettime; FIVEFOLD_TRACE_CLOCK=
 * monotonic|tsc overrides), a few stores and one copy into the buffer. No
 * I/O, no allocation, no locks; a full buffer counts drops instead.
 *
 * The recorder a span lands in is the calling thread's (trace_bind), so a
 * test can run several ranks as threads in one process. */
#ifndef FIVEFOLD_TRACE_RECORDER_H
#define FIVEFOLD_TRACE_RECORDER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/op_probe.h"
#include "trace/probes.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define TRACE_HAVE_TSC 1
#else
#define TRACE_HAVE_TSC 0
#endif

/* ---- what an operation is ---- */

/* The numbering is base/op_probe.h's, so an operation the model reports
 * through the hook lands here as the same kind. */
typedef enum TraceOpKind {
  TRACE_OP_ATTN_FWD = OP_PROBE_ATTN_FWD,   /* flash attention core, forward */
  TRACE_OP_ATTN_BWD = OP_PROBE_ATTN_BWD,       /* flash attention core, backward */
  TRACE_OP_GEMM = OP_PROBE_GEMM,           /* one GEMM: m, n, k */
  TRACE_OP_NORM = OP_PROBE_NORM,           /* RMSNorm forward or backward */
  TRACE_OP_ROPE = OP_PROBE_ROPE,
  TRACE_OP_SWIGLU = OP_PROBE_SWIGLU,
  TRACE_OP_ROUTER = OP_PROBE_ROUTER,         /* router logits, scores, top-k */
  TRACE_OP_MOE_PERMUTE = OP_PROBE_MOE_PERMUTE,    /* local permute of tokens by expert */
  TRACE_OP_MOE_COUNTS = OP_PROBE_MOE_COUNTS,     /* exchange of per-expert counts (dropless) */
  TRACE_OP_MOE_A2A = OP_PROBE_MOE_A2A,        /* dispatch all-to-all over EP */
  TRACE_OP_MOE_ALLGATHER = OP_PROBE_MOE_ALLGATHER,  /* all-gather of dispatched tokens over ETP */
  TRACE_OP_MOE_SORT = OP_PROBE_MOE_SORT,       /* sort by local expert */
  TRACE_OP_MOE_EXPERTS = OP_PROBE_MOE_EXPERTS,    /* the grouped expert GEMMs */
  TRACE_OP_MOE_UNSORT = OP_PROBE_MOE_UNSORT,     /* reverse of the sort */
  TRACE_OP_MOE_REDUCE_SCATTER = OP_PROBE_MOE_REDUCE_SCATTER, /* reverse of the ETP all-gather */
  TRACE_OP_MOE_A2A_COMBINE = OP_PROBE_MOE_A2A_COMBINE,    /* combine all-to-all over EP */
  TRACE_OP_MOE_UNPERMUTE = OP_PROBE_MOE_UNPERMUTE,  /* unpermute with the probability-weighted sum */
  TRACE_OP_EMBEDDING = OP_PROBE_EMBEDDING,
  TRACE_OP_LM_HEAD = OP_PROBE_LM_HEAD,        /* output GEMM and loss */
  TRACE_OP_ALLREDUCE = OP_PROBE_ALLREDUCE,      /* collectives: group, bytes (peer -1) */
  TRACE_OP_REDUCE_SCATTER = OP_PROBE_REDUCE_SCATTER,
  TRACE_OP_ALLGATHER = OP_PROBE_ALLGATHER,
  TRACE_OP_ALLTOALL = OP_PROBE_ALLTOALL,
  TRACE_OP_BCAST = OP_PROBE_BCAST,
  TRACE_OP_BARRIER = OP_PROBE_BARRIER,
  TRACE_OP_SEND = OP_PROBE_SEND,           /* point to point: group, bytes, peer */
  TRACE_OP_RECV = OP_PROBE_RECV,
  TRACE_OP_OPTIMIZER = OP_PROBE_OPTIMIZER,
  TRACE_OP_OTHER = OP_PROBE_OTHER,
  TRACE_NUM_OP_KINDS = OP_PROBE_NUM_KINDS
} TraceOpKind;

const char *trace_op_kind_name(TraceOpKind kind); /* "attn_fwd", "gemm", "moe_a2a", ... */
int trace_op_kind_from_name(const char *name, TraceOpKind *kind); /* 0 or -1 */
int trace_op_kind_is_comm(TraceOpKind kind);

/* Process-group names, in the order of comm/grid_math.h's GridGroupKind (so
 * the executor passes (int)kind), plus the whole world. */
typedef enum TraceGroup {
  TRACE_GROUP_TP = 0, TRACE_GROUP_CP, TRACE_GROUP_DP, TRACE_GROUP_PP, TRACE_GROUP_DP_CP,
  TRACE_GROUP_TP_CP, TRACE_GROUP_TP_PP, TRACE_GROUP_ETP, TRACE_GROUP_EP, TRACE_GROUP_EDP,
  TRACE_GROUP_EP_ETP, TRACE_GROUP_ETP_EP_PP, TRACE_GROUP_WORLD, TRACE_NUM_GROUPS
} TraceGroup;

const char *trace_group_name(int group); /* "tp", ..., "world"; NULL when out of range */
int trace_group_from_name(const char *name); /* -1 when unknown */

/* ---- events ---- */

typedef enum TraceEventType { TRACE_EVENT_ACTION = 0, TRACE_EVENT_OP = 1 } TraceEventType;

/* One recorded interval. Every optional field is -1 when not applicable.
 * A span under way is a TraceEvent too (begin set, end not yet). */
typedef struct TraceEvent {
  uint64_t begin, end; /* clock ticks while recording; ns after trace_recorder_stop */
  int64_t bytes;       /* payload of a message or collective */
  int64_t oncpu_ns;    /* time on a CPU within [begin, end] when known (eBPF) */
  int32_t type;        /* TraceEventType */
  int32_t id;          /* ACTION: action id; OP: TraceOpKind */
  int32_t iteration;
  int32_t microbatch, layer;
  int32_t peer;     /* world rank of the other side of a message */
  int32_t group;    /* TraceGroup of a collective */
  int32_t group_id; /* which group of that kind (e.g. its lowest world rank) */
  int32_t m, n, k;  /* GEMM shape */
  int32_t reserved;
} TraceEvent;

/* ---- the clock ---- */

typedef enum TraceClockSource { TRACE_CLOCK_MONOTONIC = 0, TRACE_CLOCK_TSC = 1 } TraceClockSource;

/* Picks the source (idempotent, thread safe). trace_recorder_new calls it. */
void trace_clock_init(void);
TraceClockSource trace_clock_source(void);
const char *trace_clock_source_name(TraceClockSource source); /* "tsc", "monotonic" */
int64_t trace_clock_monotonic_ns(void);
/* Ticks -> CLOCK_MONOTONIC ns. For the TSC the rate is fitted between the
 * anchor taken at init and now (waiting up to 10 ms on the first call if the
 * run was shorter), so longer runs convert more precisely. */
int64_t trace_clock_ticks_to_ns(uint64_t ticks);

extern int trace_clock_use_tsc_; /* set once by trace_clock_init */

static inline uint64_t trace_clock_ticks(void) {
#if TRACE_HAVE_TSC
  if (__builtin_expect(trace_clock_use_tsc_, 1)) return __rdtsc();
#endif
  return (uint64_t)trace_clock_monotonic_ns();
}

/* ---- the recorder ---- */

typedef struct TraceRecorderConfig {
  size_t capacity; /* events; 0 means TRACE_DEFAULT_CAPACITY */
  /* Iterations recorded, inclusive (--trace-steps a:b). last_step < 0: no
   * end. Defaults (trace_recorder_config_default): every iteration. */
  int first_step, last_step;
} TraceRecorderConfig;

#define TRACE_DEFAULT_CAPACITY ((size_t)1 << 16)

TraceRecorderConfig trace_recorder_config_default(void);

/* "a:b" (inclusive), "a:" (from a on), "a" (only a), ":" (all). */
int trace_steps_parse(const char *text, int *first_step, int *last_step, Error *err);

/* The fields are read by the inline hot path below; treat them as private. */
typedef struct TraceRecorder {
  TraceEvent *events;
  size_t capacity, count;
  uint64_t dropped;
  int first_step, last_step;
  int recording;   /* inside the step window now */
  int stopped;     /* stamps converted to ns; records no more */
  int world_rank, pipeline_rank;
} TraceRecorder;

/* Allocates and touches the whole buffer (no page faults while recording). */
TraceRecorder *trace_recorder_new(const TraceRecorderConfig *config, Error *err);
void trace_recorder_free(TraceRecorder *rec);

/* Makes rec the calling thread's recorder (NULL: none) and announces the
 * thread's ranks to outside tracers (the `rank` probe). */
void trace_bind(TraceRecorder *rec, int world_rank, int pipeline_rank, int num_world_ranks);
TraceRecorder *trace_bound_recorder(void);

/* Starts iteration `iteration` on the calling thread: later spans carry it,
 * and the bound recorder records while it lies in its step window. */
void trace_begin_iteration(int iteration);

/* Stops recording and converts every stamp to CLOCK_MONOTONIC ns. After
 * this the events can be written; the recorder records nothing more. */
void trace_recorder_stop(TraceRecorder *rec);
const TraceEvent *trace_recorder_events(const TraceRecorder *rec, size_t *count);
uint64_t trace_recorder_dropped(const TraceRecorder *rec);
/* Grows the buffer to capacity events (never shrinks). Only between
 * recorded spans on the recording thread: it may move the buffer. */
int trace_recorder_reserve(TraceRecorder *rec, size_t capacity, Error *err);
size_t trace_recorder_count(const TraceRecorder *rec);

/* Operations the model and the collectives report (base/op_probe.h) go to
 * the calling thread's recorder while its window records. The hook is
 * process wide and counted: installed by the first user, removed by the
 * last, so sessions on several threads can share it. */
void trace_op_hook_acquire(void);
void trace_op_hook_release(void);
/* 1 while the calling thread runs an action: operations are recorded only
 * then, so each nests under one (train/trace_session.c opens and closes it). */
void trace_op_gate(int open);

/* ---- the hot path ---- */

/* Number of recorders inside their step window, process wide. */
extern atomic_int trace_active_recorders_;
extern _Thread_local TraceRecorder *trace_tls_recorder_;
extern _Thread_local int trace_tls_iteration_;

/* The global "is tracing on" flag. */
static inline int trace_on(void) {
  return __builtin_expect(atomic_load_explicit(&trace_active_recorders_, memory_order_relaxed) != 0, 0);
}

static inline TraceEvent trace_span_make(TraceEventType type, int id, int microbatch, int layer) {
  TraceEvent s;
  s.begin = s.end = 0;
  s.bytes = -1;
  s.oncpu_ns = -1;
  s.type = type;
  s.id = id;
  s.iteration = trace_tls_iteration_;
  s.microbatch = microbatch;
  s.layer = layer;
  s.peer = s.group = s.group_id = -1;
  s.m = s.n = s.k = -1;
  s.reserved = 0;
  return s;
}

/* Copies a finished span into the thread's recorder. */
static inline void trace_commit(const TraceEvent *span) {
  TraceRecorder *rec = trace_tls_recorder_;
  if (!rec || !rec->recording) return;
  if (rec->count < rec->capacity)
    rec->events[rec->count++] = *span;
  else
    rec->dropped++;
}

/* Records a span with stamps taken by the caller (trace_clock_ticks), for
 * work whose completion is noticed later, like a posted receive. */
static inline void trace_record_at(TraceEvent *span, uint64_t begin_ticks, uint64_t end_ticks) {
  if (!trace_on()) return;
  span->begin = begin_ticks;
  span->end = end_ticks;
  trace_commit(span);
}

static inline TraceEvent trace_action_begin(int action_id, int microbatch, int layer) {
  TraceEvent s = trace_span_make(TRACE_EVENT_ACTION, action_id, microbatch, layer);
  FIVEFOLD_PROBE_ACTION_BEGIN(s.id, s.iteration, s.microbatch, s.layer);
  if (trace_on()) s.begin = trace_clock_ticks();
  return s;
}

static inline void trace_action_end(TraceEvent *s) {
  uint64_t end = s->begin ? trace_clock_ticks() : 0;
  FIVEFOLD_PROBE_ACTION_END(s->id, s->iteration, s->bytes, s->peer, s->group, s->group_id);
  if (__builtin_expect(s->begin != 0, 0)) {
    s->end = end;
    trace_commit(s);
  }
}

static inline TraceEvent trace_op_begin(TraceOpKind kind, int layer, int microbatch) {
  TraceEvent s = trace_span_make(TRACE_EVENT_OP, (int)kind, microbatch, layer);
  FIVEFOLD_PROBE_OP_BEGIN(s.id, s.layer, s.microbatch);
  if (trace_on()) s.begin = trace_clock_ticks();
  return s;
}

static inline void trace_op_end(TraceEvent *s) {
  uint64_t end = s->begin ? trace_clock_ticks() : 0;
  if (s->m >= 0) FIVEFOLD_PROBE_OP_SHAPE(s->m, s->n, s->k);
  FIVEFOLD_PROBE_OP_END(s->id, s->layer, s->microbatch, s->bytes, s->peer, s->group);
  if (__builtin_expect(s->begin != 0, 0)) {
    s->end = end;
    trace_commit(s);
  }
}

/* Sub-operation spans. TRACE_OP_BEGIN declares the span variable `span`:
 *   TRACE_OP_BEGIN(t, TRACE_OP_NORM, layer, mb); rmsnorm(...); TRACE_OP_END(t);
 * Each pair also fires the op_begin/op_end USDT probes. */
#define TRACE_OP_BEGIN(span, kind, layer, microbatch) TraceEvent span = trace_op_begin((kind), (layer), (microbatch))
#define TRACE_OP_END(span) trace_op_end(&(span))
#define TRACE_OP_END_GEMM(span, M, N, K) \
  do {                                   \
    (span).m = (int32_t)(M);             \
    (span).n = (int32_t)(N);             \
    (span).k = (int32_t)(K);             \
    trace_op_end(&(span));               \
  } while (0)
#define TRACE_OP_END_COMM(span, GROUP, BYTES, PEER) \
  do {                                              \
    (span).group = (int32_t)(GROUP);                \
    (span).bytes = (int64_t)(BYTES);                \
    (span).peer = (int32_t)(PEER);                  \
    trace_op_end(&(span));                          \
  } while (0)

#endif
