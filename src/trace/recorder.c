/* The recorder's cold paths: names, the clock source and its calibration,
 * the step window, allocation and the conversion of stamps to ns. The hot
 * path is inline in recorder.h. */
#include "trace/recorder.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if TRACE_HAVE_TSC
#include <cpuid.h>
#endif

atomic_int trace_active_recorders_;
_Thread_local TraceRecorder *trace_tls_recorder_;
_Thread_local int trace_tls_iteration_ = -1;
int trace_clock_use_tsc_;

static const char *const OP_NAMES[TRACE_NUM_OP_KINDS] = {
    "attn_fwd",     "attn_bwd",      "gemm",           "norm",
    "rope",         "swiglu",        "router",         "moe_permute",
    "moe_counts",   "moe_a2a",       "moe_allgather",  "moe_sort",
    "moe_experts",  "moe_unsort",    "moe_reduce_scatter", "moe_a2a_combine",
    "moe_unpermute", "embedding",    "lm_head",        "allreduce",
    "reduce_scatter", "allgather",   "alltoall",       "bcast",
    "barrier",      "send",          "recv",           "optimizer",
    "other"};

static const char *const GROUP_NAMES[TRACE_NUM_GROUPS] = {"tp", "cp",  "dp",  "pp",     "dp-cp",     "tp-cp", "tp-pp",
                                                          "etp", "ep", "edp", "ep-etp", "etp-ep-pp", "world"};

const char *trace_op_kind_name(TraceOpKind kind) {
  return kind >= 0 && kind < TRACE_NUM_OP_KINDS ? OP_NAMES[kind] : "?";
}

int trace_op_kind_from_name(const char *name, TraceOpKind *kind) {
  for (int i = 0; i < TRACE_NUM_OP_KINDS; i++)
    if (!strcmp(name, OP_NAMES[i])) {
      *kind = (TraceOpKind)i;
      return 0;
    }
  return -1;
}

int trace_op_kind_is_comm(TraceOpKind kind) {
  switch (kind) {
  case TRACE_OP_MOE_COUNTS:
  case TRACE_OP_MOE_A2A:
  case TRACE_OP_MOE_ALLGATHER:
  case TRACE_OP_MOE_REDUCE_SCATTER:
  case TRACE_OP_MOE_A2A_COMBINE:
  case TRACE_OP_ALLREDUCE:
  case TRACE_OP_REDUCE_SCATTER:
  case TRACE_OP_ALLGATHER:
  case TRACE_OP_ALLTOALL:
  case TRACE_OP_BCAST:
  case TRACE_OP_BARRIER:
  case TRACE_OP_SEND:
  case TRACE_OP_RECV:
    return 1;
  default:
    return 0;
  }
}

const char *trace_group_name(int group) { return group >= 0 && group < TRACE_NUM_GROUPS ? GROUP_NAMES[group] : NULL; }

int trace_group_from_name(const char *name) {
  for (int i = 0; i < TRACE_NUM_GROUPS; i++)
    if (!strcmp(name, GROUP_NAMES[i])) return i;
  return -1;
}

/* ---- clock ---- */

static pthread_once_t clock_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t anchor_ticks; /* a (ticks, ns) pair taken at init */
static int64_t anchor_ns;

int64_t trace_clock_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Reads both clocks as close together as possible: the TSC before and after
 * clock_gettime, keeping the tightest of a few tries. */
static void read_pair(uint64_t *ticks, int64_t *ns) {
  uint64_t best_gap = UINT64_MAX;
  for (int i = 0; i < 5; i++) {
    uint64_t t0 = trace_clock_ticks();
    int64_t n = trace_clock_monotonic_ns();
    uint64_t t1 = trace_clock_ticks();
    if (t1 - t0 < best_gap) {
      best_gap = t1 - t0;
      *ticks = t0 + (t1 - t0) / 2;
      *ns = n;
    }
  }
}

/* Invariant TSC: constant rate in every P-/C-state (CPUID 0x80000007 EDX
 * bit 8), the condition for using it as a clock. */
static int tsc_is_invariant(void) {
#if TRACE_HAVE_TSC
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return 0;
  if (!__get_cpuid(0x80000007u, &a, &b, &c, &d)) return 0;
  return (d >> 8) & 1;
#else
  return 0;
#endif
}

static void clock_init_once(void) {
  const char *force = getenv("FIVEFOLD_TRACE_CLOCK");
  int use_tsc = tsc_is_invariant();
  if (force && !strcmp(force, "monotonic")) use_tsc = 0;
  if (force && !strcmp(force, "tsc") && TRACE_HAVE_TSC) use_tsc = 1;
  trace_clock_use_tsc_ = use_tsc;
  read_pair(&anchor_ticks, &anchor_ns);
}

void trace_clock_init(void) { pthread_once(&clock_once, clock_init_once); }

TraceClockSource trace_clock_source(void) {
  trace_clock_init();
  return trace_clock_use_tsc_ ? TRACE_CLOCK_TSC : TRACE_CLOCK_MONOTONIC;
}

const char *trace_clock_source_name(TraceClockSource source) {
  return source == TRACE_CLOCK_TSC ? "tsc" : "monotonic";
}

/* The last fit, reused until the baseline has doubled: recorders stopped at
 * about the same time (ranks as threads of one process) then convert with
 * the very same rate, so their stamps stay comparable to the ns. */
static double fitted_rate;
static int64_t fitted_baseline;

/* ns per tick, fitted between the init anchor and now. */
static double ns_per_tick(void) {
  pthread_mutex_lock(&clock_lock);
  uint64_t t;
  int64_t n;
  read_pair(&t, &n);
  if (fitted_rate > 0 && n - anchor_ns < 2 * fitted_baseline) {
    pthread_mutex_unlock(&clock_lock);
    return fitted_rate;
  }
  int64_t need = 10000000 - (n - anchor_ns);
  if (need > 0) {
    struct timespec ts = {0, (long)need};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    read_pair(&t, &n);
  }
  double rate = t > anchor_ticks ? (double)(n - anchor_ns) / (double)(t - anchor_ticks) : 1.0;
  fitted_rate = rate;
  fitted_baseline = n - anchor_ns;
  pthread_mutex_unlock(&clock_lock);
  return rate;
}

int64_t trace_clock_ticks_to_ns(uint64_t ticks) {
  trace_clock_init();
  if (!trace_clock_use_tsc_) return (int64_t)ticks;
  double rate = ns_per_tick();
  return anchor_ns + (int64_t)((double)(int64_t)(ticks - anchor_ticks) * rate);
}

/* ---- recorder ---- */

TraceRecorderConfig trace_recorder_config_default(void) {
  return (TraceRecorderConfig){.capacity = TRACE_DEFAULT_CAPACITY, .first_step = 0, .last_step = -1};
}

static int parse_step(const char *s, const char *end, int *out) {
  if (s == end) return 1; /* empty: open */
  char *stop;
  errno = 0;
  long v = strtol(s, &stop, 10);
  if (stop != end || errno || v < 0 || v > 1000000000) return -1;
  *out = (int)v;
  return 0;
}

int trace_steps_parse(const char *text, int *first_step, int *last_step, Error *err) {
  const char *colon = strchr(text, ':');
  int first = 0, last = -1;
  int rc;
  if (!colon) {
    rc = parse_step(text, text + strlen(text), &first);
    if (rc == 0) last = first;
  } else {
    rc = parse_step(text, colon, &first);
    int rc2 = parse_step(colon + 1, colon + strlen(colon), &last);
    rc = rc < 0 || rc2 < 0 ? -1 : 0;
  }
  if (rc != 0 || !*text || (last >= 0 && last < first))
    return error_set(err, ERR_ARG,
                     "--trace-steps '%s': expected FIRST:LAST (inclusive iteration numbers, FIRST <= LAST), "
                     "FIRST: or a single iteration",
                     text);
  *first_step = first;
  *last_step = last;
  return ERR_OK;
}

TraceRecorder *trace_recorder_new(const TraceRecorderConfig *config, Error *err) {
  trace_clock_init();
  TraceRecorderConfig cfg = config ? *config : trace_recorder_config_default();
  if (cfg.capacity == 0) cfg.capacity = TRACE_DEFAULT_CAPACITY;
  if (cfg.first_step < 0 || (cfg.last_step >= 0 && cfg.last_step < cfg.first_step)) {
    error_set(err, ERR_ARG, "trace recorder: step window %d:%d is empty (expected 0 <= first <= last)",
              cfg.first_step, cfg.last_step);
    return NULL;
  }
  TraceRecorder *rec = calloc(1, sizeof *rec);
  TraceEvent *events = rec ? malloc(cfg.capacity * sizeof *events) : NULL;
  if (!events) {
    free(rec);
    error_set(err, ERR_NOMEM, "trace recorder: cannot allocate %zu events (%.1f MB)", cfg.capacity,
              (double)(cfg.capacity * sizeof *events) / 1e6);
    return NULL;
  }
  /* Touch every page now: a first-touch fault costs microseconds and would
   * land inside the timed work. */
  memset(events, 0, cfg.capacity * sizeof *events);
  rec->events = events;
  rec->capacity = cfg.capacity;
  rec->first_step = cfg.first_step;
  rec->last_step = cfg.last_step;
  rec->world_rank = rec->pipeline_rank = -1;
  return rec;
}

static void set_recording(TraceRecorder *rec, int on) {
  if (rec->recording == on) return;
  rec->recording = on;
  atomic_fetch_add_explicit(&trace_active_recorders_, on ? 1 : -1, memory_order_relaxed);
}

void trace_recorder_free(TraceRecorder *rec) {
  if (!rec) return;
  set_recording(rec, 0);
  if (trace_tls_recorder_ == rec) trace_tls_recorder_ = NULL;
  free(rec->events);
  free(rec);
}

void trace_bind(TraceRecorder *rec, int world_rank, int pipeline_rank, int num_world_ranks) {
  trace_tls_recorder_ = rec;
  if (rec) {
    rec->world_rank = world_rank;
    rec->pipeline_rank = pipeline_rank;
  }
  FIVEFOLD_PROBE_RANK(world_rank, pipeline_rank, num_world_ranks);
  (void)num_world_ranks;
}

TraceRecorder *trace_bound_recorder(void) { return trace_tls_recorder_; }

void trace_begin_iteration(int iteration) {
  trace_tls_iteration_ = iteration;
  FIVEFOLD_PROBE_ITERATION(iteration);
  TraceRecorder *rec = trace_tls_recorder_;
  if (!rec || rec->stopped) return;
  int inside = iteration >= rec->first_step && (rec->last_step < 0 || iteration <= rec->last_step);
  set_recording(rec, inside);
}

void trace_recorder_stop(TraceRecorder *rec) {
  if (!rec || rec->stopped) return;
  set_recording(rec, 0);
  rec->stopped = 1;
  if (!trace_clock_use_tsc_) return;
  double rate = ns_per_tick();
  for (size_t i = 0; i < rec->count; i++) {
    TraceEvent *e = &rec->events[i];
    e->begin = (uint64_t)(anchor_ns + (int64_t)((double)(int64_t)(e->begin - anchor_ticks) * rate));
    e->end = (uint64_t)(anchor_ns + (int64_t)((double)(int64_t)(e->end - anchor_ticks) * rate));
  }
}

const TraceEvent *trace_recorder_events(const TraceRecorder *rec, size_t *count) {
  *count = rec->count;
  return rec->events;
}

uint64_t trace_recorder_dropped(const TraceRecorder *rec) { return rec->dropped; }

/* ---- operations reported through base/op_probe.h ---- */

/* Open while an action span of this thread runs: operations outside every
 * action (an evaluation pass between steps) have nothing to nest under. */
static _Thread_local int op_gate_open;

void trace_op_gate(int open) { op_gate_open = open; }

static uint64_t op_hook_begin(void) {
  TraceRecorder *rec = trace_tls_recorder_;
  if (!rec || !rec->recording || !op_gate_open) return 0;
  uint64_t t = trace_clock_ticks();
  return t ? t : 1;
}

static void op_hook_end(uint64_t begin, const OpProbeEvent *ev) {
  uint64_t end = trace_clock_ticks();
  TraceEvent s = trace_span_make(TRACE_EVENT_OP, ev->kind, ev->microbatch, ev->layer);
  s.begin = begin;
  s.end = end;
  s.m = ev->m;
  s.n = ev->n;
  s.k = ev->k;
  s.bytes = ev->bytes;
  s.group = ev->group;
  s.peer = ev->peer;
  trace_commit(&s);
}

static const OpProbeHooks OP_HOOKS = {op_hook_begin, op_hook_end};
static atomic_int op_hook_users;

void trace_op_hook_acquire(void) {
  if (atomic_fetch_add(&op_hook_users, 1) == 0) op_probe_install(&OP_HOOKS);
}

void trace_op_hook_release(void) {
  if (atomic_fetch_sub(&op_hook_users, 1) == 1) op_probe_install(NULL);
}

int trace_recorder_reserve(TraceRecorder *rec, size_t capacity, Error *err) {
  if (!rec || capacity <= rec->capacity) return ERR_OK;
  TraceEvent *events = realloc(rec->events, capacity * sizeof *events);
  if (!events)
    return error_set(err, ERR_NOMEM, "trace recorder: cannot grow to %zu events (%.1f MB)", capacity,
                     (double)(capacity * sizeof *events) / 1e6);
  memset(events + rec->capacity, 0, (capacity - rec->capacity) * sizeof *events); /* touched now, as in _new */
  rec->events = events;
  rec->capacity = capacity;
  return ERR_OK;
}
size_t trace_recorder_count(const TraceRecorder *rec) { return rec ? rec->count : 0; }
