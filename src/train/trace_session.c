/* The per-rank recording session of a multi-rank run (trace_session.h):
 * sizing and binding the recorder, the per-action calls, and the collective
 * end: clock offsets by ping-pong, the gather of every rank's buffer to
 * rank 0 and the one Chrome trace it writes. A probes-only session (no
 * recorder) takes the same per-action path so that every run fires the
 * USDT probes an outside tracer attaches to. */
#include "train/trace_session.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "comm/world.h"
#include "trace/chrome_writer.h"

/* Past this many events per rank the window is too wide to hold in memory
 * (about 370 MB at 88 bytes an event): ask for a narrower one. */
#define TRACE_SESSION_MAX_EVENTS ((size_t)1 << 22)
#define TRACE_SESSION_PING_TAG 7301
/* Room for the operations inside one compute action (GEMMs, norms, MoE
 * phases, collectives: a few dozen per layer) in the first traced step,
 * before its real count is known; later steps are sized from that count. */
#define TRACE_SESSION_OPS_PER_COMPUTE 2048

/* A sleep a test injects into one action (TRACE_SESSION_DELAY_ENV). */
typedef struct InjectedDelay {
  int world_rank, kind, microbatch, iteration; /* microbatch -1: any */
  double ms;
  int at_end; /* 1: after the handler, inside the span; 0: before it */
} InjectedDelay;

#define TRACE_SESSION_MAX_DELAYS 4

struct TraceSession {
  TraceSessionOptions opt;
  InjectedDelay delays[TRACE_SESSION_MAX_DELAYS];
  int num_delays;
  char *path;
  const SchedProgram *prog;
  GridSizes sizes;
  GridCoords coords;
  int world_rank, world_size, pipeline_rank;
  int grad_reduce_group_id;
  TraceRecorder *rec;
  TraceEvent *posted; /* per position in this rank's list: a posted action's span (begin 0: not recorded) */
  unsigned char *posted_open; /* per position: posted and not yet completed (its action_end probe is due) */
  int num_rank_actions;
  TraceClockSync *sync; /* rank 0, after finish: per world rank */
  int num_compute_actions; /* FWD/BWD of this rank per iteration */
  int op_hook_held;        /* this session counts among the op hook's users */
  int first_traced;        /* iteration the window's first step ran as; -1 before */
  int sized_from_count;    /* the buffer was sized from that step's count */
  const cJSON *plan;       /* otherData.plan (trace_session_set_plan; not owned), or NULL */
};

static void load_test_delays(TraceSession *ts);

TraceSessionOptions trace_session_options_default(void) {
  return (TraceSessionOptions){.path = NULL, .first_step = 0, .last_step = -1, .num_steps = 0,
                               .extra_events_per_step = 0, .grad_reduce_group = TRACE_GROUP_DP_CP,
                               .ping_pong_rounds = 16, .apply_same_host_offsets = 0};
}

int trace_session_parse_steps(const char *text, int num_steps, TraceSessionOptions *opt, Error *err) {
  int first, last;
  if (trace_steps_parse(text, &first, &last, err)) return err ? err->code : ERR_ARG;
  if (num_steps > 0 && first >= num_steps)
    return error_set(err, ERR_ARG,
                     "--trace-steps '%s': the run has %d steps (0..%d), so iteration %d is never reached; pick a "
                     "window inside it",
                     text, num_steps, num_steps - 1, first);
  opt->first_step = first;
  opt->last_step = last;
  return ERR_OK;
}

/* Events one rank records over the window. */
static size_t window_capacity(const TraceSessionOptions *opt, int rank_actions) {
  size_t per_step = (size_t)rank_actions + (size_t)(opt->extra_events_per_step > 0 ? opt->extra_events_per_step : 0);
  long steps;
  if (opt->last_step >= 0)
    steps = (long)opt->last_step - opt->first_step + 1;
  else if (opt->num_steps > 0)
    steps = (long)opt->num_steps - opt->first_step;
  else
    return per_step > TRACE_DEFAULT_CAPACITY ? per_step : TRACE_DEFAULT_CAPACITY; /* open window, unknown run */
  if (opt->num_steps > 0 && opt->num_steps - opt->first_step < steps) steps = (long)opt->num_steps - opt->first_step;
  if (steps < 1) steps = 1;
  return per_step * (size_t)steps;
}

/* Grid, coordinates, peers and the rank's action list: what both kinds of
 * session need to annotate actions. */
static int setup_grid(TraceSession *ts, const TraceSessionOptions *opt, const SchedProgram *prog,
                      const GridSizes *sizes, Error *err) {
  if (!prog || prog->num_ranks < 1) return error_set(err, ERR_ARG, "trace session: no schedule program to trace");
  if (opt->grad_reduce_group < 0 || opt->grad_reduce_group >= TRACE_NUM_GROUPS)
    return error_set(err, ERR_ARG, "trace session: grad_reduce_group %d is not a TraceGroup", opt->grad_reduce_group);
  if (sizes) {
    ts->sizes = *sizes;
  } else {
    if (ts->world_size % prog->num_ranks)
      return error_set(err, ERR_CONFIG,
                       "trace session: %d ranks cannot run a %d-rank pipeline (the world must be a multiple of it); "
                       "pass the grid sizes",
                       ts->world_size, prog->num_ranks);
    ts->sizes = (GridSizes){.world = ts->world_size, .tp = 1, .cp = 1, .dp = 0, .pp = prog->num_ranks, .etp = 1,
                            .ep = 1, .edp = 0};
  }
  if (grid_sizes_resolve(&ts->sizes, err)) return error_wrap(err, "trace session");
  if (ts->sizes.world != ts->world_size)
    return error_set(err, ERR_CONFIG, "trace session: the grid has %d ranks but the MPI world %d", ts->sizes.world,
                     ts->world_size);
  if (ts->sizes.pp != prog->num_ranks)
    return error_set(err, ERR_CONFIG, "trace session: the grid has pp %d but the program %d pipeline ranks",
                     ts->sizes.pp, prog->num_ranks);
  grid_coords_of_rank(&ts->sizes, ts->world_rank, &ts->coords);
  ts->pipeline_rank = ts->coords.pp;
  if (opt->grad_reduce_group == TRACE_GROUP_WORLD)
    ts->grad_reduce_group_id = 0;
  else
    ts->grad_reduce_group_id = grid_group_first_rank(&ts->sizes, (GridGroupKind)opt->grad_reduce_group, ts->world_rank);
  int num_compute = 0;
  const SchedAction *mine = sched_program_rank_actions(prog, ts->pipeline_rank, &ts->num_rank_actions);
  for (int i = 0; i < ts->num_rank_actions; i++) num_compute += mine[i].kind == SCHED_FWD || mine[i].kind == SCHED_BWD || mine[i].kind == SCHED_BWD_WEIGHT;
  ts->num_compute_actions = num_compute;
  ts->first_traced = -1;
  size_t slots = (size_t)(ts->num_rank_actions > 0 ? ts->num_rank_actions : 1);
  ts->posted = calloc(slots, sizeof *ts->posted);
  ts->posted_open = calloc(slots, sizeof *ts->posted_open);
  if (!ts->posted || !ts->posted_open) return error_set(err, ERR_NOMEM, "trace session: out of memory");
  return ERR_OK;
}

static int setup_local(TraceSession *ts, const TraceSessionOptions *opt, const SchedProgram *prog,
                       const GridSizes *sizes, Error *err) {
  if (!opt->path || !*opt->path) return error_set(err, ERR_ARG, "trace session: no trace file given (--trace FILE)");
  if (opt->first_step < 0 || (opt->last_step >= 0 && opt->last_step < opt->first_step))
    return error_set(err, ERR_ARG, "trace session: step window %d:%d is empty (expected 0 <= first <= last)",
                     opt->first_step, opt->last_step);
  int rc = setup_grid(ts, opt, prog, sizes, err);
  if (rc) return rc;
  size_t capacity = window_capacity(opt, ts->num_rank_actions);
  /* The operations of the first step on top: its count sizes the rest. */
  if (opt->extra_events_per_step <= 0) capacity += (size_t)ts->num_compute_actions * TRACE_SESSION_OPS_PER_COMPUTE;
  if (capacity > TRACE_SESSION_MAX_EVENTS)
    return error_set(err, ERR_ARG,
                     "trace session: --trace-steps %d:%d needs %zu events on rank %d (%.0f MB); narrow the window "
                     "to at most %zu events",
                     opt->first_step, opt->last_step, capacity, ts->world_rank,
                     (double)(capacity * sizeof(TraceEvent)) / 1e6, TRACE_SESSION_MAX_EVENTS);
  TraceRecorderConfig rcfg = {capacity, opt->first_step, opt->last_step};
  ts->rec = trace_recorder_new(&rcfg, err);
  if (!ts->rec) return err ? err->code : ERR_NOMEM;
  ts->path = strdup(opt->path);
  if (!ts->path) return error_set(err, ERR_NOMEM, "trace session: out of memory");
  return ERR_OK;
}

/* Every rank learns whether all succeeded; a rank that did not fail itself
 * names the lowest one that did. */
static int agree(int local_rc, const char *what, Error *err) {
  if (!comm_initialized()) return local_rc; /* one rank without MPI: nobody to agree with */
  int failed = local_rc ? comm_world_rank() : INT_MAX, first_failed;
  MPI_Allreduce(&failed, &first_failed, 1, MPI_INT, MPI_MIN, comm_world()->comm);
  if (first_failed == INT_MAX) return ERR_OK;
  if (local_rc) return local_rc;
  return error_set(err, ERR_CONFIG, "trace session: rank %d could not %s (its message says why)", first_failed, what);
}

static void release_op_hook(TraceSession *ts) {
  if (!ts->op_hook_held) return;
  trace_op_hook_release();
  ts->op_hook_held = 0;
}

void trace_session_free(TraceSession *ts) {
  if (!ts) return;
  release_op_hook(ts);
  if (trace_bound_recorder() == ts->rec) trace_bind(NULL, ts->world_rank, ts->pipeline_rank, ts->world_size);
  trace_recorder_free(ts->rec);
  free(ts->posted);
  free(ts->posted_open);
  free(ts->path);
  free(ts->sync);
  free(ts);
}

int trace_session_create(const TraceSessionOptions *opt, const SchedProgram *prog, const GridSizes *sizes,
                         TraceSession **out, Error *err) {
  *out = NULL;
  /* Without MPI the process is a world of one: same recorder, same writer. */
  TraceSession *ts = calloc(1, sizeof *ts);
  int rc;
  if (!ts) {
    rc = error_set(err, ERR_NOMEM, "trace session: out of memory");
  } else {
    ts->opt = *opt;
    ts->prog = prog;
    ts->world_rank = comm_initialized() ? comm_world_rank() : 0;
    ts->world_size = comm_initialized() ? comm_world_size() : 1;
    rc = setup_local(ts, opt, prog, sizes, err);
  }
  rc = agree(rc, "set up its trace recorder", err);
  if (rc) {
    trace_session_free(ts);
    return rc;
  }
  ts->opt.path = ts->path;
  trace_bind(ts->rec, ts->world_rank, ts->pipeline_rank, ts->world_size);
  load_test_delays(ts);
  *out = ts;
  return ERR_OK;
}

/* ---- the test hook ---- */

/* Reads TRACE_SESSION_DELAY_ENV: entries "RANK:KIND:MB:ITER:MS[:end]"
 * separated by commas (KIND as sched names it: FWD, BWD, OPTIM, ...; MB -1
 * for any). A malformed entry is reported and ignored: only tests set it. */
static void load_test_delays(TraceSession *ts) {
  const char *v = getenv(TRACE_SESSION_DELAY_ENV);
  if (!v || !v[0]) return;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", v);
  char *save = NULL;
  for (char *e = strtok_r(buf, ",", &save); e && ts->num_delays < TRACE_SESSION_MAX_DELAYS;
       e = strtok_r(NULL, ",", &save)) {
    InjectedDelay d = {0};
    char kind[32], where[8] = "";
    int got = sscanf(e, "%d:%31[A-Z_]:%d:%d:%lf:%7s", &d.world_rank, kind, &d.microbatch, &d.iteration, &d.ms, where);
    SchedActionKind k;
    if (got < 5 || sched_action_kind_from_name(kind, &k) || d.ms <= 0 || (got == 6 && strcmp(where, "end"))) {
      fprintf(stderr, "%s: ignoring '%s' (expected RANK:KIND:MB:ITER:MS[:end])\n", TRACE_SESSION_DELAY_ENV, e);
      continue;
    }
    d.kind = (int)k;
    d.at_end = got == 6;
    if (d.world_rank == ts->world_rank) ts->delays[ts->num_delays++] = d;
  }
}

static void sleep_ms(double ms) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  long long ns = until.tv_nsec + (long long)(ms * 1e6);
  until.tv_sec += (time_t)(ns / 1000000000);
  until.tv_nsec = (long)(ns % 1000000000);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
  }
}

static void maybe_delay(const TraceSession *ts, const SchedAction *a, int iteration, int at_end) {
  for (int i = 0; i < ts->num_delays; i++) {
    const InjectedDelay *d = &ts->delays[i];
    if (d->at_end == at_end && d->kind == (int)a->kind && d->iteration == iteration &&
        (d->microbatch < 0 || d->microbatch == a->microbatch))
      sleep_ms(d->ms);
  }
}

TraceSession *trace_session_create_probes(const SchedProgram *prog, const GridSizes *sizes) {
  TraceSession *ts = calloc(1, sizeof *ts);
  if (!ts) return NULL;
  ts->opt = trace_session_options_default();
  ts->prog = prog;
  ts->world_rank = comm_initialized() ? comm_world_rank() : 0;
  ts->world_size = comm_initialized() ? comm_world_size() : 1;
  if (setup_grid(ts, &ts->opt, prog, sizes, NULL)) {
    trace_session_free(ts);
    return NULL;
  }
  trace_bind(NULL, ts->world_rank, ts->pipeline_rank, ts->world_size); /* the rank probe */
  load_test_delays(ts);
  return ts;
}

int trace_session_records(const TraceSession *ts) { return ts && ts->rec; }

int trace_session_pipeline_rank(const TraceSession *ts) { return ts ? ts->pipeline_rank : comm_world_rank(); }
int trace_session_world_rank(const TraceSession *ts) { return ts ? ts->world_rank : comm_world_rank(); }

static int in_window(const TraceSession *ts, int iteration) {
  return iteration >= ts->opt.first_step && (ts->opt.last_step < 0 || iteration <= ts->opt.last_step);
}

/* After the window's first step: room for the rest of the window at the
 * count that step recorded (between steps, so nothing is timed). A window
 * past the cap records what fits and counts the drops. */
static void size_from_first_step(TraceSession *ts, int iteration) {
  ts->sized_from_count = 1;
  size_t per_step = trace_recorder_count(ts->rec);
  long left;
  if (ts->opt.last_step >= 0)
    left = (long)ts->opt.last_step - iteration + 1;
  else if (ts->opt.num_steps > 0)
    left = (long)ts->opt.num_steps - iteration;
  else
    return;
  if (left < 1) return;
  size_t want = per_step + per_step * (size_t)left + per_step / 8; /* an eighth for routing that shifts */
  if (want > TRACE_SESSION_MAX_EVENTS) want = TRACE_SESSION_MAX_EVENTS;
  trace_recorder_reserve(ts->rec, want, NULL); /* out of memory: drops are counted instead */
}

void trace_session_begin_iteration(TraceSession *ts, int iteration) {
  if (!ts) return;
  if (!ts->rec) { /* probes only */
    trace_begin_iteration(iteration);
    memset(ts->posted_open, 0, (size_t)(ts->num_rank_actions > 0 ? ts->num_rank_actions : 1));
    return;
  }
  if (ts->first_traced >= 0 && !ts->sized_from_count && iteration > ts->first_traced)
    size_from_first_step(ts, iteration);
  if (in_window(ts, iteration) && ts->first_traced < 0) ts->first_traced = iteration;
  /* The operation hook listens only inside the window. */
  if (in_window(ts, iteration) && !ts->op_hook_held) {
    trace_op_hook_acquire();
    ts->op_hook_held = 1;
  } else if (!in_window(ts, iteration)) {
    release_op_hook(ts);
  }
  trace_begin_iteration(iteration);
  /* A posted action never completed in the last iteration must not end in
   * this one. */
  for (int i = 0; i < ts->num_rank_actions; i++) ts->posted[i].begin = 0, ts->posted_open[i] = 0;
}

/* The world rank on the other side of a message: same coordinates, the
 * pipeline rank the program names. */
static int peer_world_rank(const TraceSession *ts, int peer_pipeline) {
  if (peer_pipeline < 0 || peer_pipeline >= ts->sizes.pp) return -1;
  return grid_attention_rank(&ts->sizes, ts->coords.tp, ts->coords.cp, ts->coords.dp, peer_pipeline);
}

static void annotate(const TraceSession *ts, const SchedAction *a, TraceEvent *span) {
  if (sched_kind_is_send(a->kind) || sched_kind_is_recv(a->kind)) {
    span->peer = peer_world_rank(ts, a->peer);
  } else if (a->kind == SCHED_GRAD_REDUCE) {
    span->group = ts->opt.grad_reduce_group;
    span->group_id = ts->grad_reduce_group_id;
  }
}

TraceEvent trace_session_action_begin(TraceSession *ts, const SchedAction *a) {
  if (!ts) {
    TraceEvent none;
    memset(&none, 0, sizeof none);
    return none;
  }
  op_probe_set_microbatch(a->microbatch); /* the operations inside belong to it */
  TraceEvent span = trace_action_begin(a->id, a->microbatch, a->layer);
  annotate(ts, a, &span);
  trace_op_gate(1);
  if (ts->num_delays) maybe_delay(ts, a, span.iteration, 0);
  return span;
}

void trace_session_action_end(TraceSession *ts, TraceEvent *span) {
  if (!ts) return;
  if (ts->num_delays) {
    const SchedAction *a = sched_program_action(ts->prog, span->id);
    if (a) maybe_delay(ts, a, span->iteration, 1);
  }
  trace_op_gate(0);
  trace_action_end(span);
}

void trace_session_post(TraceSession *ts, const SchedAction *a) {
  if (!ts || a->rank != ts->pipeline_rank || a->index < 0 || a->index >= ts->num_rank_actions) return;
  TraceEvent span = trace_action_begin(a->id, a->microbatch, a->layer);
  annotate(ts, a, &span);
  ts->posted[a->index] = span; /* begin 0 when not recording: complete then only fires the probe */
  ts->posted_open[a->index] = 1;
}

void trace_session_complete(TraceSession *ts, const SchedAction *a) {
  if (!ts || a->rank != ts->pipeline_rank || a->index < 0 || a->index >= ts->num_rank_actions) return;
  if (!ts->posted_open[a->index]) return;
  ts->posted_open[a->index] = 0;
  TraceEvent *span = &ts->posted[a->index];
  trace_action_end(span); /* the action_end probe always; the event only when recording */
  span->begin = 0;
}

/* ---- finish ---- */

static int64_t now_ns(void) { return trace_clock_monotonic_ns(); }

/* Rank 0 against every other rank in turn: rank 0 sends its time t0, the
 * rank answers with its own time tr, rank 0 notes t1 on receipt. If the
 * two legs take equally long, tr was read at rank 0's (t0 + t1) / 2, so
 * offset = (t0 + t1) / 2 - tr, wrong by at most half the round trip; the
 * shortest of several rounds has the least room for asymmetry. */
static void measure_offsets(TraceSession *ts) {
  int rounds = ts->opt.ping_pong_rounds > 0 ? ts->opt.ping_pong_rounds : 16;
  MPI_Comm world = comm_world()->comm;
  for (int r = 1; r < ts->world_size; r++) {
    if (ts->world_rank == 0) {
      int64_t best_rtt = INT64_MAX, best_off = 0;
      for (int k = 0; k <= rounds; k++) { /* round 0 warms the path up */
        int64_t t0 = now_ns(), tr;
        MPI_Send(&t0, 1, MPI_INT64_T, r, TRACE_SESSION_PING_TAG, world);
        MPI_Recv(&tr, 1, MPI_INT64_T, r, TRACE_SESSION_PING_TAG, world, MPI_STATUS_IGNORE);
        int64_t t1 = now_ns();
        if (k > 0 && t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          best_off = t0 + (t1 - t0) / 2 - tr;
        }
      }
      ts->sync[r].measured_offset_ns = best_off;
      ts->sync[r].round_trip_ns = best_rtt;
    } else if (ts->world_rank == r) {
      for (int k = 0; k <= rounds; k++) {
        int64_t t0, tr;
        MPI_Recv(&t0, 1, MPI_INT64_T, 0, TRACE_SESSION_PING_TAG, world, MPI_STATUS_IGNORE);
        tr = now_ns();
        MPI_Send(&tr, 1, MPI_INT64_T, 0, TRACE_SESSION_PING_TAG, world);
      }
    }
  }
}

static TraceRankInfo local_info(const TraceSession *ts) {
  TraceRankInfo in = trace_rank_info_make(ts->world_rank, ts->pipeline_rank);
  in.tp = ts->coords.tp;
  in.cp = ts->coords.cp;
  in.dp = ts->coords.dp;
  in.pp = ts->coords.pp;
  in.etp = ts->coords.etp;
  in.ep = ts->coords.ep;
  in.edp = ts->coords.edp;
  if (gethostname(in.host, sizeof in.host) != 0) snprintf(in.host, sizeof in.host, "unknown");
  in.host[sizeof in.host - 1] = '\0';
  return in;
}

/* otherData.session: the window and how every rank's clock was placed. */
static cJSON *session_json(const TraceSession *ts, const TraceRankInfo *infos) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddNumberToObject(o, "first_step", ts->opt.first_step);
  cJSON_AddNumberToObject(o, "last_step", ts->opt.last_step);
  cJSON_AddStringToObject(o, "clock_sync", "ping-pong with rank 0, shortest of rounds");
  cJSON_AddNumberToObject(o, "ping_pong_rounds", ts->opt.ping_pong_rounds);
  cJSON_AddBoolToObject(o, "same_host_offsets_applied", ts->opt.apply_same_host_offsets != 0);
  cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
  for (int r = 0; ranks && r < ts->world_size; r++) {
    cJSON *x = cJSON_CreateObject();
    if (!x) break;
    cJSON_AddItemToArray(ranks, x);
    cJSON_AddNumberToObject(x, "world_rank", r);
    cJSON_AddStringToObject(x, "host", infos[r].host);
    cJSON_AddNumberToObject(x, "measured_offset_ns", (double)ts->sync[r].measured_offset_ns);
    cJSON_AddNumberToObject(x, "round_trip_ns", (double)ts->sync[r].round_trip_ns);
    cJSON_AddNumberToObject(x, "applied_offset_ns", (double)ts->sync[r].applied_offset_ns);
  }
  return o;
}

/* Rank 0: every rank's buffer in hand, writes the file. */
static int write_trace(TraceSession *ts, const TraceRankInfo *infos, const int *bytes, const char *pool,
                       const uint64_t *dropped, const cJSON *config, const cJSON *model, Error *err) {
  TraceRankBuffer *bufs = calloc((size_t)ts->world_size, sizeof *bufs);
  if (!bufs) return error_set(err, ERR_NOMEM, "trace session: out of memory");
  size_t offset = 0;
  for (int r = 0; r < ts->world_size; r++) {
    int same_host = !strcmp(infos[r].host, infos[0].host);
    TraceClockSync *s = &ts->sync[r];
    s->applied_offset_ns = r == 0 || (same_host && !ts->opt.apply_same_host_offsets) ? 0 : s->measured_offset_ns;
    bufs[r].info = infos[r];
    bufs[r].info.world_rank = r;
    bufs[r].events = (const TraceEvent *)(const void *)(pool + offset);
    bufs[r].count = (size_t)bytes[r] / sizeof(TraceEvent);
    bufs[r].dropped = dropped[r];
    bufs[r].clock_offset_ns = s->applied_offset_ns;
    offset += (size_t)bytes[r];
  }
  cJSON *session = session_json(ts, infos);
  TraceRunMeta meta = {.program = ts->prog, .config = config, .model = model, .session = session, .plan = ts->plan,
                       .source = "recorder"};
  meta.grid = (TraceGridSizes){ts->sizes.world, ts->sizes.tp, ts->sizes.cp, ts->sizes.dp,
                               ts->sizes.pp,    ts->sizes.etp, ts->sizes.ep, ts->sizes.edp};
  int rc = trace_chrome_write(ts->path, &meta, bufs, ts->world_size, err);
  cJSON_Delete(session);
  free(bufs);
  return rc;
}

void trace_session_set_plan(TraceSession *ts, const cJSON *plan) {
  if (ts) ts->plan = plan;
}

int trace_session_finish(TraceSession *ts, const cJSON *config, const cJSON *model, Error *err) {
  if (!ts || !ts->rec) return ERR_OK; /* probes only: nothing recorded, nothing to write */
  release_op_hook(ts);
  trace_recorder_stop(ts->rec);
  trace_bind(NULL, ts->world_rank, ts->pipeline_rank, ts->world_size);
  size_t count;
  const TraceEvent *events = trace_recorder_events(ts->rec, &count);
  /* Capacity is bounded at create, so the bytes fit an MPI count. */
  int my_bytes = (int)(count * sizeof(TraceEvent));
  uint64_t my_dropped = trace_recorder_dropped(ts->rec);
  TraceRankInfo my_info = local_info(ts);
  int root = ts->world_rank == 0, W = ts->world_size;
  int *bytes = NULL, *displs = NULL;
  uint64_t *dropped = NULL;
  TraceRankInfo *infos = NULL;
  char *pool = NULL;
  long long total = 0;
  int local_rc = ERR_OK;
  if (!comm_initialized()) { /* one rank without MPI: its buffer is the whole trace */
    free(ts->sync);
    ts->sync = calloc(1, sizeof *ts->sync);
    if (!ts->sync) return error_set(err, ERR_NOMEM, "trace session: out of memory");
    int one_bytes = my_bytes;
    return write_trace(ts, &my_info, &one_bytes, (const char *)events, &my_dropped, config, model, err);
  }
  if (root) {
    free(ts->sync);
    ts->sync = calloc((size_t)W, sizeof *ts->sync);
    bytes = calloc((size_t)W, sizeof *bytes);
    displs = calloc((size_t)W, sizeof *displs);
    dropped = calloc((size_t)W, sizeof *dropped);
    infos = calloc((size_t)W, sizeof *infos);
    if (!ts->sync || !bytes || !displs || !dropped || !infos)
      local_rc = error_set(err, ERR_NOMEM, "trace session: out of memory gathering %d ranks", W);
  }
  /* Rank 0 says whether it can take part before anyone talks to it. */
  int go = local_rc == ERR_OK;
  MPI_Bcast(&go, 1, MPI_INT, 0, comm_world()->comm);
  if (go) {
    measure_offsets(ts);
    MPI_Gather(&my_bytes, 1, MPI_INT, bytes, 1, MPI_INT, 0, comm_world()->comm);
    MPI_Gather(&my_dropped, 1, MPI_UINT64_T, dropped, 1, MPI_UINT64_T, 0, comm_world()->comm);
    MPI_Gather(&my_info, (int)sizeof my_info, MPI_BYTE, infos, (int)sizeof my_info, MPI_BYTE, 0, comm_world()->comm);
    if (root) {
      for (int r = 0; r < W; r++) {
        displs[r] = (int)(total < INT_MAX ? total : 0);
        total += bytes[r];
      }
      if (total > INT_MAX)
        local_rc = error_set(err, ERR_ARG,
                             "trace session: the ranks recorded %lld bytes of events, more than one gather moves "
                             "(%d); narrow --trace-steps",
                             total, INT_MAX);
      else if (!(pool = malloc(total ? (size_t)total : 1)))
        local_rc = error_set(err, ERR_NOMEM, "trace session: out of memory for %lld bytes of events", total);
    }
    go = local_rc == ERR_OK;
    MPI_Bcast(&go, 1, MPI_INT, 0, comm_world()->comm);
  }
  if (go) {
    MPI_Gatherv(events, my_bytes, MPI_BYTE, pool, bytes, displs, MPI_BYTE, 0, comm_world()->comm);
    if (root) local_rc = write_trace(ts, infos, bytes, pool, dropped, config, model, err);
  }
  /* Every rank returns rank 0's verdict, with its message. */
  struct {
    int code;
    char msg[sizeof err->msg];
  } verdict = {0, ""};
  if (root) {
    verdict.code = local_rc;
    if (local_rc && err) snprintf(verdict.msg, sizeof verdict.msg, "%s", err->msg);
  }
  MPI_Bcast(&verdict, (int)sizeof verdict, MPI_BYTE, 0, comm_world()->comm);
  free(bytes);
  free(displs);
  free(dropped);
  free(infos);
  free(pool);
  if (verdict.code && !root) return error_set(err, verdict.code, "rank 0: %s", verdict.msg);
  return verdict.code;
}

const TraceClockSync *trace_session_clock_sync(const TraceSession *ts, int *num_ranks) {
  if (num_ranks) *num_ranks = ts && ts->sync ? ts->world_size : 0;
  return ts ? ts->sync : NULL;
}
