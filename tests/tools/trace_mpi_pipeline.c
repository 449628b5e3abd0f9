/* Helper program for the tracer's multi-rank tests (tests/trace/
 * mpi_trace_test.sh). Two modes:
 *
 *   mpirun -np W trace_mpi_pipeline run --trace FILE [options]
 *     runs a 1F1B program (pp = W unless --pp) with train/executor.h's
 *     Executor and synthetic handlers, traced with train/trace_session.h:
 *       FWD / BWD / OPTIM  a fixed time of "work" (--compute sleep: sleep to
 *                          an absolute deadline, the default; spin: busy-wait
 *                          on the wall clock; cpu: busy-wait until the thread
 *                          used that much CPU time)
 *       SEND_*             MPI_Send of --bytes to the peer (blocking, on the
 *                          compute stream as program.h has it)
 *       RECV_*             MPI_Irecv posted when reached (the p2p stream);
 *                          the action that needs the data waits for it
 *                          before its own span begins
 *       GRAD_REDUCE        MPI_Iallreduce over the world, posted; OPTIM waits
 *     Sleep is the default because W ranks share fewer cores: a sleeping
 *     rank leaves the core to one that must run, so durations stay near
 *     nominal; spinning ranks fight for cores and overrun by time slices.
 *     While working, every 0.1 ms, the posted requests are tested (as a
 *     trainer tests its requests now and then), so a receive's end is
 *     stamped within about that of the data's arrival; waits poll MPI_Test
 *     with short sleeps rather than spinning in MPI_Wait. With --delay
 *     RANK:KIND:MB:ITER:MS the action KIND (FWD or BWD) of micro-batch MB on
 *     pipeline rank RANK (data-parallel replica 0) sleeps MS more in
 *     iteration ITER.
 *
 *   trace_mpi_pipeline check FILE [--pp P] [--microbatches M] [--fwd-ms ..]
 *                                 [--bwd-ms ..] [--optim-ms ..] [--delay ...]
 *                                 [--reduce-group dp|world]
 *     (--reduce-group dp: GRAD_REDUCE is the data-parallel reduction of a
 *     real trainer's trace, joining only the ranks of one dp group; the
 *     default is this driver's all-reduce over the world)
 *     (no MPI) reads the trace back and checks:
 *       - its program is the 1F1B program of (P, M), action by action;
 *       - every recorded iteration's DAG has exactly the edges the program
 *         implies, derived here from sched's lists and the grid arithmetic
 *         (not from the analyzer's code), nothing dropped or missing;
 *       - every message ends after its send began (clock offsets right);
 *       - the critical path tiles the iteration and its length equals the
 *         measured iteration time within 1%;
 *       - with --delay: in that iteration the delayed action is on the
 *         critical path, it ran at least the nominal time plus the delay,
 *         about the delay longer than usual, its rank is the straggler by
 *         about the delay, and the iteration got about that much longer.
 *     Exit 0: passed; 1: a check failed; 2: usage; 3: the machine disturbed
 *     the run by more than a quarter of the delay (another action on the
 *     path ran that much over its nominal time), so the delay checks cannot
 *     tell; record again. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "comm/world.h"
#include "sched/builders.h"
#include "sched/evaluate.h"
#include "trace/chrome_writer.h"
#include "trace/critical_path.h"
#include "trace/stats.h"
#include "train/executor.h"
#include "train/trace_session.h"

typedef enum ComputeMode { COMPUTE_SLEEP = 0, COMPUTE_SPIN, COMPUTE_CPU } ComputeMode;

typedef struct Options {
  int pp, microbatches, iterations;
  double fwd_ms, bwd_ms, optim_ms;
  ComputeMode compute;
  int bytes;
  const char *trace, *steps;
  int apply_offsets;
  int reduce_dp; /* check: GRAD_REDUCE joins the dp group (a trainer's), not the world */
  int delay_rank, delay_mb, delay_iteration;
  SchedActionKind delay_kind;
  double delay_ms;
} Options;

static Options options_default(void) {
  return (Options){.pp = 0, .microbatches = 8, .iterations = 3, .fwd_ms = 2, .bwd_ms = 4, .optim_ms = 1,
                   .compute = COMPUTE_SLEEP, .bytes = 1024, .steps = "1:", .delay_rank = -1, .delay_mb = -1,
                   .delay_iteration = -1, .delay_kind = SCHED_FWD};
}

static int parse_delay(const char *v, Options *o) {
  char kind[16];
  if (sscanf(v, "%d:%15[A-Z]:%d:%d:%lf", &o->delay_rank, kind, &o->delay_mb, &o->delay_iteration, &o->delay_ms) != 5 ||
      sched_action_kind_from_name(kind, &o->delay_kind) || (o->delay_kind != SCHED_FWD && o->delay_kind != SCHED_BWD) ||
      o->delay_ms <= 0) {
    fprintf(stderr, "trace_mpi_pipeline: --delay '%s': expected RANK:FWD|BWD:MB:ITERATION:MS\n", v);
    return -1;
  }
  return 0;
}

/* Options shared by both modes; returns 0, or 2 on a usage error. */
static int parse_options(int argc, char **argv, Options *o, const char **file) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--apply-offsets")) {
      o->apply_offsets = 1;
      continue;
    }
    if (a[0] != '-') {
      if (*file) {
        fprintf(stderr, "trace_mpi_pipeline: one trace file ('%s' is extra)\n", a);
        return 2;
      }
      *file = a;
      continue;
    }
    if (!v) {
      fprintf(stderr, "trace_mpi_pipeline: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--pp")) o->pp = atoi(v);
    else if (!strcmp(a, "--microbatches")) o->microbatches = atoi(v);
    else if (!strcmp(a, "--iterations")) o->iterations = atoi(v);
    else if (!strcmp(a, "--fwd-ms")) o->fwd_ms = atof(v);
    else if (!strcmp(a, "--bwd-ms")) o->bwd_ms = atof(v);
    else if (!strcmp(a, "--optim-ms")) o->optim_ms = atof(v);
    else if (!strcmp(a, "--bytes")) o->bytes = atoi(v);
    else if (!strcmp(a, "--trace")) o->trace = v;
    else if (!strcmp(a, "--trace-steps")) o->steps = v;
    else if (!strcmp(a, "--reduce-group")) {
      if (strcmp(v, "dp") && strcmp(v, "world")) {
        fprintf(stderr, "trace_mpi_pipeline: --reduce-group '%s': expected dp or world\n", v);
        return 2;
      }
      o->reduce_dp = !strcmp(v, "dp");
    }
    else if (!strcmp(a, "--delay")) {
      if (parse_delay(v, o)) return 2;
    } else if (!strcmp(a, "--compute")) {
      if (!strcmp(v, "sleep")) o->compute = COMPUTE_SLEEP;
      else if (!strcmp(v, "spin")) o->compute = COMPUTE_SPIN;
      else if (!strcmp(v, "cpu")) o->compute = COMPUTE_CPU;
      else {
        fprintf(stderr, "trace_mpi_pipeline: --compute '%s': expected sleep, spin or cpu\n", v);
        return 2;
      }
    } else {
      fprintf(stderr, "trace_mpi_pipeline: unknown option %s\n", a);
      return 2;
    }
  }
  if (o->microbatches < 1 || o->iterations < 1 || o->bytes < 1 || o->fwd_ms < 0 || o->bwd_ms < 0) {
    fprintf(stderr, "trace_mpi_pipeline: --microbatches, --iterations and --bytes must be >= 1, times >= 0\n");
    return 2;
  }
  return 0;
}

static int build_program(const Options *o, SchedProgram **prog, Error *err) {
  SchedConfig sc = {.schedule = SCHED_SCHEDULE_1F1B, .pp = o->pp, .vpp = 1, .microbatches = o->microbatches};
  return sched_build(&sc, prog, err);
}

/* ---- run ---- */

typedef struct Driver {
  const Options *o;
  const SchedProgram *prog;
  TraceSession *ts;
  GridSizes sizes;
  GridCoords coords;
  int pipeline_rank, iteration;
  int num_actions;            /* this rank's list */
  const SchedAction *actions; /* this rank's list */
  MPI_Request *req;           /* per list position: posted receive or reduction */
  char **recv_buf, *send_buf;
  float reduce_in[256], reduce_out[256];
} Driver;

static int64_t mono_ns(void) { return trace_clock_monotonic_ns(); }

static int64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_until(int64_t deadline_ns) {
  struct timespec ts = {(time_t)(deadline_ns / 1000000000), (long)(deadline_ns % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* Tests every posted request; a completed one ends its event now. Called
 * every PROGRESS_NS while working, as a trainer tests its requests now and
 * then: MPI moves messages mostly inside MPI calls, and the receive's end
 * stamp is only as precise as the last look. */
#define PROGRESS_NS 100000
static void progress(Driver *d) {
  for (int i = 0; i < d->num_actions; i++) {
    if (d->req[i] == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Test(&d->req[i], &done, MPI_STATUS_IGNORE);
    if (done) trace_session_complete(d->ts, &d->actions[i]);
  }
}

/* ms of work, testing the posted requests as it goes. */
static void work(Driver *d, ComputeMode mode, double ms) {
  int64_t (*clock)(void) = mode == COMPUTE_CPU ? cpu_ns : mono_ns;
  int64_t end = clock() + (int64_t)(ms * 1e6), next = 0;
  for (;;) {
    int64_t now = clock();
    if (now >= end) return;
    if (now >= next) {
      progress(d);
      next = now + PROGRESS_NS;
    }
    if (mode == COMPUTE_SLEEP) sleep_until(mono_ns() + (end - now < PROGRESS_NS ? end - now : PROGRESS_NS));
  }
}

/* Waits for a posted request without spinning a core. */
static void wait_for(Driver *d, int index) {
  while (d->req[index] != MPI_REQUEST_NULL) {
    progress(d);
    if (d->req[index] == MPI_REQUEST_NULL) return;
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

/* Completes the posted receives and reduction that `a` needs, before its
 * span begins: their events end when the data is here. */
static void complete_deps(Driver *d, const SchedAction *a) {
  for (int k = 0; k < a->num_deps; k++) {
    const SchedAction *dep = &d->prog->actions[a->deps[k]];
    if (dep->rank != d->pipeline_rank || (!sched_kind_is_recv(dep->kind) && dep->kind != SCHED_GRAD_REDUCE)) continue;
    wait_for(d, dep->index);
  }
}

static int peer_world(const Driver *d, int peer_pipeline) {
  return grid_attention_rank(&d->sizes, d->coords.tp, d->coords.cp, d->coords.dp, peer_pipeline);
}

static int on_compute(void *ctx, const SchedAction *a, Error *err) {
  (void)err;
  Driver *d = ctx;
  const Options *o = d->o;
  complete_deps(d, a);
  TraceEvent span = trace_session_action_begin(d->ts, a);
  double ms = a->kind == SCHED_FWD ? o->fwd_ms : a->kind == SCHED_BWD ? o->bwd_ms : o->optim_ms;
  work(d, o->compute, ms);
  if (a->kind == o->delay_kind && a->rank == o->delay_rank && a->microbatch == o->delay_mb &&
      d->iteration == o->delay_iteration && d->coords.dp == 0)
    work(d, COMPUTE_SLEEP, o->delay_ms);
  trace_session_action_end(d->ts, &span);
  return 0;
}

static int on_send(void *ctx, const SchedAction *a, Error *err) {
  Driver *d = ctx;
  complete_deps(d, a);
  TraceEvent span = trace_session_action_begin(d->ts, a);
  /* Tag = the receive's action id: unique per (sender, receiver) pair in
   * an iteration, and MPI keeps order between iterations. */
  int rc = MPI_Send(d->send_buf, d->o->bytes, MPI_BYTE, peer_world(d, a->peer), a->match, MPI_COMM_WORLD);
  span.bytes = d->o->bytes;
  trace_session_action_end(d->ts, &span);
  return comm_check(rc, "MPI_Send", comm_world(), err);
}

static int on_recv(void *ctx, const SchedAction *a, Error *err) {
  Driver *d = ctx;
  trace_session_post(d->ts, a);
  int rc = MPI_Irecv(d->recv_buf[a->index], d->o->bytes, MPI_BYTE, peer_world(d, a->peer), a->id, MPI_COMM_WORLD,
                     &d->req[a->index]);
  return comm_check(rc, "MPI_Irecv", comm_world(), err);
}

static int on_reduce(void *ctx, const SchedAction *a, Error *err) {
  Driver *d = ctx;
  complete_deps(d, a);
  trace_session_post(d->ts, a);
  int rc = MPI_Iallreduce(d->reduce_in, d->reduce_out, 256, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &d->req[a->index]);
  return comm_check(rc, "MPI_Iallreduce", comm_world(), err);
}

static cJSON *run_config_json(const Options *o, int world) {
  static const char *const MODES[3] = {"sleep", "spin", "cpu"};
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "driver", "tests/tools/trace_mpi_pipeline.c");
  cJSON_AddStringToObject(c, "schedule", "1f1b");
  cJSON_AddNumberToObject(c, "world", world);
  cJSON_AddNumberToObject(c, "pp", o->pp);
  cJSON_AddNumberToObject(c, "microbatches", o->microbatches);
  cJSON_AddNumberToObject(c, "iterations", o->iterations);
  cJSON_AddNumberToObject(c, "fwd_ms", o->fwd_ms);
  cJSON_AddNumberToObject(c, "bwd_ms", o->bwd_ms);
  cJSON_AddNumberToObject(c, "optim_ms", o->optim_ms);
  cJSON_AddStringToObject(c, "compute", MODES[o->compute]);
  cJSON_AddNumberToObject(c, "message_bytes", o->bytes);
  if (o->delay_rank >= 0) {
    cJSON *dl = cJSON_AddObjectToObject(c, "delay");
    cJSON_AddNumberToObject(dl, "rank", o->delay_rank);
    cJSON_AddStringToObject(dl, "kind", sched_action_kind_name(o->delay_kind));
    cJSON_AddNumberToObject(dl, "mb", o->delay_mb);
    cJSON_AddNumberToObject(dl, "iteration", o->delay_iteration);
    cJSON_AddNumberToObject(dl, "ms", o->delay_ms);
  }
  return c;
}

static int run_iterations(Driver *d, Executor *ex, Error *err) {
  for (int it = 0; it < d->o->iterations; it++) {
    d->iteration = it;
    trace_session_begin_iteration(d->ts, it);
    if (executor_run(ex, err)) return err->code ? err->code : ERR_INTERNAL;
    /* Every posted request has a dependent action; this only guards
     * against a program that leaves one behind. */
    for (int i = 0; i < d->num_actions; i++) wait_for(d, i);
  }
  return ERR_OK;
}

static int cmd_run(Options *o) {
  Error err = {0, ""};
  if (comm_init(NULL, NULL, &err)) {
    fprintf(stderr, "trace_mpi_pipeline: %s\n", err.msg);
    return 1;
  }
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake on time: the default slack is 50 µs per sleep */
  int world = comm_world_size(), me = comm_world_rank();
  if (o->pp == 0) o->pp = world;
  if (!o->trace) comm_abort(2, "trace_mpi_pipeline run: --trace FILE is required");
  SchedProgram *prog = NULL;
  if (build_program(o, &prog, &err)) comm_abort(2, "%s", err.msg);
  Driver d = {.o = o, .prog = prog};
  d.sizes = (GridSizes){.world = world, .tp = 1, .cp = 1, .dp = 0, .pp = o->pp, .etp = 1, .ep = 1, .edp = 0};
  if (grid_sizes_resolve(&d.sizes, &err)) comm_abort(2, "%s", err.msg);
  grid_coords_of_rank(&d.sizes, me, &d.coords);
  d.pipeline_rank = d.coords.pp;
  TraceSessionOptions topt = trace_session_options_default();
  topt.path = o->trace;
  topt.num_steps = o->iterations;
  topt.grad_reduce_group = TRACE_GROUP_WORLD; /* the synthetic reduction spans every rank */
  topt.apply_same_host_offsets = o->apply_offsets;
  if (trace_session_parse_steps(o->steps, o->iterations, &topt, &err)) comm_abort(2, "%s", err.msg);
  if (trace_session_create(&topt, prog, &d.sizes, &d.ts, &err)) comm_abort(1, "%s", err.msg);
  Executor ex;
  if (executor_create(&ex, prog, d.pipeline_rank, &d, &err)) comm_abort(1, "%s", err.msg);
  d.num_actions = ex.num_actions;
  d.actions = ex.actions;
  d.req = malloc((size_t)(d.num_actions + 1) * sizeof *d.req);
  d.recv_buf = calloc((size_t)(d.num_actions + 1), sizeof *d.recv_buf);
  d.send_buf = calloc((size_t)o->bytes, 1);
  if (!d.req || !d.recv_buf || !d.send_buf) comm_abort(1, "trace_mpi_pipeline: out of memory");
  for (int i = 0; i < d.num_actions; i++) {
    d.req[i] = MPI_REQUEST_NULL;
    if (sched_kind_is_recv(ex.actions[i].kind) && !(d.recv_buf[i] = malloc((size_t)o->bytes)))
      comm_abort(1, "trace_mpi_pipeline: out of memory");
  }
  for (int i = 0; i < 256; i++) d.reduce_in[i] = (float)me;
  executor_set_handler(&ex, SCHED_FWD, on_compute);
  executor_set_handler(&ex, SCHED_BWD, on_compute);
  executor_set_handler(&ex, SCHED_OPTIM, on_compute);
  executor_set_handler(&ex, SCHED_SEND_ACT, on_send);
  executor_set_handler(&ex, SCHED_SEND_GRAD, on_send);
  executor_set_handler(&ex, SCHED_RECV_ACT, on_recv);
  executor_set_handler(&ex, SCHED_RECV_GRAD, on_recv);
  executor_set_handler(&ex, SCHED_GRAD_REDUCE, on_reduce);
  if (run_iterations(&d, &ex, &err)) comm_abort(1, "%s", err.msg);
  /* The reduction really reduced: sum of ranks 0..W-1. */
  if (d.reduce_out[0] != (float)(world * (world - 1) / 2))
    comm_abort(1, "trace_mpi_pipeline: the all-reduce gave %g, expected %d", d.reduce_out[0], world * (world - 1) / 2);
  cJSON *config = run_config_json(o, world);
  int rc = trace_session_finish(d.ts, config, NULL, &err);
  cJSON_Delete(config);
  if (rc) comm_abort(1, "%s", err.msg);
  if (me == 0) {
    int n;
    const TraceClockSync *sync = trace_session_clock_sync(d.ts, &n);
    printf("trace_mpi_pipeline: %d ranks, %d iterations, trace written to %s\n", world, o->iterations, o->trace);
    for (int r = 0; r < n; r++)
      printf("  rank %d: clock offset measured %+.3f us (round trip %.3f us), applied %+.3f us\n", r,
             sync[r].measured_offset_ns / 1e3, sync[r].round_trip_ns / 1e3, sync[r].applied_offset_ns / 1e3);
  }
  for (int i = 0; i < d.num_actions; i++) free(d.recv_buf[i]);
  free(d.recv_buf);
  free(d.send_buf);
  free(d.req);
  executor_free(&ex);
  trace_session_free(d.ts);
  sched_program_free(prog);
  if (comm_finalize(&err)) {
    fprintf(stderr, "trace_mpi_pipeline: %s\n", err.msg);
    return 1;
  }
  return 0;
}

/* ---- check ---- */

static int failures;
#define CHECK(cond, ...)                 \
  do {                                   \
    if (!(cond)) {                       \
      failures++;                        \
      printf("FAIL: " __VA_ARGS__);      \
      printf("\n");                      \
    }                                    \
  } while (0)

static int same_action(const SchedAction *a, const SchedAction *b) {
  if (a->rank != b->rank || a->index != b->index || a->kind != b->kind || a->stream != b->stream ||
      a->microbatch != b->microbatch || a->chunk != b->chunk || a->peer != b->peer || a->match != b->match ||
      a->num_deps != b->num_deps)
    return 0;
  for (int k = 0; k < a->num_deps; k++)
    if (a->deps[k] != b->deps[k]) return 0;
  return 1;
}

typedef struct EdgeKey {
  int from_rank, from_action, to_rank, to_action, kind;
} EdgeKey;

static int cmp_edge(const void *pa, const void *pb) {
  const int *a = pa, *b = pb;
  for (int i = 0; i < 5; i++)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

/* The edges the program implies on the world of `sizes`, from sched's
 * lists: program order per stream, the host issuing off-compute actions,
 * data dependencies (a receive's on its send is the message), and the
 * GRAD_REDUCE all-reduce over the world joining every pair of ranks. */
static int expected_edges(const SchedProgram *prog, const GridSizes *sizes, int reduce_dp, EdgeKey *out) {
  int n = 0;
  for (int w = 0; w < sizes->world; w++) {
    GridCoords c;
    grid_coords_of_rank(sizes, w, &c);
    int count;
    const SchedAction *list = sched_program_rank_actions(prog, c.pp, &count);
    for (int i = 0; i < count; i++) {
      const SchedAction *a = &list[i];
      int prev_same = -1, prev_compute = -1;
      for (int j = i - 1; j >= 0; j--) {
        if (prev_same < 0 && list[j].stream == a->stream) prev_same = list[j].id;
        if (prev_compute < 0 && list[j].stream == SCHED_STREAM_COMPUTE) prev_compute = list[j].id;
      }
      if (prev_same >= 0) out[n++] = (EdgeKey){w, prev_same, w, a->id, TRACE_EDGE_STREAM};
      if (a->stream != SCHED_STREAM_COMPUTE && prev_compute >= 0 && prev_compute != prev_same)
        out[n++] = (EdgeKey){w, prev_compute, w, a->id, TRACE_EDGE_ISSUE};
      for (int k = 0; k < a->num_deps; k++) {
        const SchedAction *dep = &prog->actions[a->deps[k]];
        int from = dep->rank == c.pp ? w : grid_attention_rank(sizes, c.tp, c.cp, c.dp, dep->rank);
        int message = sched_kind_is_recv(a->kind) && dep->id == a->match;
        out[n++] = (EdgeKey){from, dep->id, w, a->id, message ? TRACE_EDGE_MESSAGE : TRACE_EDGE_DATA};
      }
      if (a->kind == SCHED_GRAD_REDUCE)
        for (int q = 0; q < sizes->world; q++) {
          if (q == w) continue;
          GridCoords cq;
          grid_coords_of_rank(sizes, q, &cq);
          if (reduce_dp && (cq.tp != c.tp || cq.cp != c.cp || cq.pp != c.pp)) continue;
          out[n++] = (EdgeKey){q, sched_program_find(prog, cq.pp, SCHED_GRAD_REDUCE, -1, a->chunk), w, a->id,
                               TRACE_EDGE_COLLECTIVE};
        }
    }
  }
  return n;
}

static void check_edges(const SchedProgram *prog, const GridSizes *sizes, int reduce_dp, const TraceIterationReport *it) {
  const TraceDag *dag = &it->dag;
  CHECK(dag->num_missing_actions == 0 && dag->num_missing_edges == 0,
        "iteration %d: %d actions and %d edges missing", it->iteration, dag->num_missing_actions,
        dag->num_missing_edges);
  CHECK(dag->num_nodes == prog->num_actions * sizes->world / prog->num_ranks, "iteration %d: %d nodes, expected %d",
        it->iteration, dag->num_nodes, prog->num_actions * sizes->world / prog->num_ranks);
  size_t cap = (size_t)sizes->world * (size_t)(prog->num_actions + 1) * 8 + 64;
  EdgeKey *want = malloc(cap * sizeof *want), *got = malloc(((size_t)dag->num_edges + 1) * sizeof *got);
  if (!want || !got) {
    CHECK(0, "out of memory");
    free(want);
    free(got);
    return;
  }
  int nwant = expected_edges(prog, sizes, reduce_dp, want);
  int ngot = 0; /* the program's edges; the measured kinds (WAIT, SYNC) come on top */
  for (int i = 0; i < dag->num_edges; i++) {
    if (dag->edges[i].kind >= TRACE_EDGE_WAIT) continue;
    const TraceNode *f = &dag->nodes[dag->edges[i].from], *t = &dag->nodes[dag->edges[i].to];
    got[ngot++] = (EdgeKey){f->rank, f->action, t->rank, t->action, (int)dag->edges[i].kind};
  }
  qsort(want, (size_t)nwant, sizeof *want, cmp_edge);
  qsort(got, (size_t)ngot, sizeof *got, cmp_edge);
  int same = nwant == ngot;
  for (int i = 0; same && i < nwant; i++) same = !cmp_edge(&want[i], &got[i]);
  CHECK(same, "iteration %d: the DAG has %d program edges, the program implies %d, and they differ", it->iteration,
        ngot, nwant);
  if (same) printf("iteration %d: the DAG has exactly the %d edges the program implies\n", it->iteration, nwant);
  free(want);
  free(got);
}

static void check_path(const TraceIterationReport *it) {
  const TraceCriticalPath *p = &it->path;
  int tiles = p->num_segments > 0 && p->begin == it->dag.begin && p->end == it->dag.end;
  for (int i = 1; tiles && i < p->num_segments; i++) tiles = p->segments[i].begin == p->segments[i - 1].end;
  CHECK(tiles, "iteration %d: the critical path does not tile the iteration", it->iteration);
  double rel = it->time > 0 ? fabs((double)(p->length - it->time)) / (double)it->time : 1;
  printf("iteration %d: measured %.3f ms, critical path %.3f ms (%.4f%% apart)\n", it->iteration,
         (double)it->time / 1e6, (double)p->length / 1e6, 100 * rel);
  CHECK(rel <= 0.01, "iteration %d: critical path %.3f ms vs iteration %.3f ms: more than 1%% apart", it->iteration,
        (double)p->length / 1e6, (double)it->time / 1e6);
}

/* Largest round trip / 2 of the clock sync when measured offsets were
 * applied: the most an offset can be off. 0 when none was applied. */
static int64_t offset_slack(const TraceRun *run) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(run->other_data, "session");
  if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "same_host_offsets_applied"))) return 0;
  int64_t worst = 0;
  const cJSON *r;
  cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(s, "ranks")) {
    const cJSON *rtt = cJSON_GetObjectItemCaseSensitive(r, "round_trip_ns");
    if (cJSON_IsNumber(rtt) && rtt->valuedouble / 2 > worst) worst = (int64_t)(rtt->valuedouble / 2) + 1;
  }
  return worst;
}

static void check_messages(const TraceIterationReport *it, int64_t slack) {
  int bad = 0;
  for (int k = 0; k < it->dag.num_edges; k++) {
    const TraceEdge *e = &it->dag.edges[k];
    if (e->kind == TRACE_EDGE_MESSAGE &&
        trace_edge_source_time(&it->dag, e) > trace_edge_target_time(&it->dag, e) + slack)
      bad++;
  }
  CHECK(bad == 0, "iteration %d: %d messages end before their send began (slack %.3f us)", it->iteration, bad,
        slack / 1e3);
}

/* How far the machine strayed from the nominal run on the critical paths:
 * the most an action ran over its nominal time (the injected one's
 * includes the delay) or a gap on the path lasted, in ms. */
static double disturbance_ms(const Options *o, const SchedProgram *prog, const TraceReport *rep, int delay_it,
                             int delay_node) {
  double worst = 0;
  for (int i = 0; i < rep->num_iterations; i++) {
    const TraceIterationReport *it = &rep->iters[i];
    for (int k = 0; k < it->path.num_segments; k++) {
      const TraceSegment *s = &it->path.segments[k];
      double len = (double)(s->end - s->begin) / 1e6, nominal = 0;
      if (s->kind == TRACE_SEGMENT_ACTION) {
        SchedActionKind kind = prog->actions[it->dag.nodes[s->node].action].kind;
        nominal = kind == SCHED_FWD ? o->fwd_ms : kind == SCHED_BWD ? o->bwd_ms : kind == SCHED_OPTIM ? o->optim_ms : 0;
        if (it->iteration == delay_it && s->node == delay_node) nominal += o->delay_ms;
      }
      worst = fmax(worst, len - nominal);
    }
  }
  return worst;
}

/* The iteration time of the program with the nominal times and free
 * messages (max-plus evaluation, sched/evaluate.h), ms. */
/* The iteration time of the program with the nominal times and free
 * messages (max-plus evaluation, sched/evaluate.h), ms. With these times
 * in the builder's 1:2 ratio the receives sit where they cost nothing, so
 * a measured iteration (sleeps never end early) is no shorter. */
static double ideal_iteration_ms(const Options *o, const SchedProgram *prog) {
  SchedUnitCosts costs = {.fwd = o->fwd_ms, .bwd = o->bwd_ms, .optim = o->optim_ms};
  SchedEvalOptions eo = sched_unit_eval_options(&costs, SCHED_SEND_EAGER);
  SchedEval ev;
  Error err = {0, ""};
  double t = sched_evaluate(prog, &eo, &ev, &err) == ERR_OK ? ev.makespan : 0;
  sched_eval_free(&ev);
  return t;
}

/* The injected delay's checks; returns 1 when the run was too disturbed
 * to judge them. */
static int check_delay(const Options *o, const SchedProgram *prog, const GridSizes *sizes, const TraceRun *run,
                       const TraceReport *rep) {
  const TraceIterationReport *it = trace_report_iteration(rep, o->delay_iteration);
  CHECK(it != NULL, "the delayed iteration %d is not in the trace", o->delay_iteration);
  if (!it) return 0;
  int world = grid_attention_rank(sizes, 0, 0, 0, o->delay_rank);
  int action = sched_program_find(prog, o->delay_rank, o->delay_kind, o->delay_mb, 0);
  int node = trace_dag_node(&it->dag, world, action);
  CHECK(node >= 0, "the delayed action was not recorded");
  if (node < 0) return 0;
  const TraceNode *nd = &it->dag.nodes[node];
  double nominal = o->delay_kind == SCHED_FWD ? o->fwd_ms : o->bwd_ms;
  double dur = (double)(nd->end - nd->begin) / 1e6;
  double typical = (double)trace_typical_duration(run, world, o->delay_kind, 0) / 1e6;
  double extra = dur - typical, excess = (double)it->straggler_excess / 1e6;
  double others = 0;
  int n_others = 0;
  for (int i = 0; i < rep->num_iterations; i++)
    if (rep->iters[i].iteration != o->delay_iteration) {
      others += (double)rep->iters[i].time / 1e6;
      n_others++;
    }
  double slower = n_others ? (double)it->time / 1e6 - others / n_others : 0;
  printf("delayed %s mb %d on rank %d: %.3f ms (usually %.3f ms): +%.3f ms for %.1f ms injected; on the critical "
         "path: %s\n",
         sched_action_kind_name(o->delay_kind), o->delay_mb, world, dur, typical, extra, o->delay_ms,
         it->path.node_on_path[node] ? "yes" : "no");
  printf("straggler: rank %d by %.3f ms; iteration %.3f ms, %.3f ms longer than the others' mean\n", it->straggler,
         excess, (double)it->time / 1e6, slower);
  /* What no load can change: a sleep never ends early. */
  CHECK(dur >= nominal + o->delay_ms, "the delayed action ran %.3f ms, less than %.3f + %.3f ms", dur, nominal,
        o->delay_ms);
  double ideal = ideal_iteration_ms(o, prog);
  /* The rest needs a run the machine left alone: actions near their
   * nominal times, and undelayed iterations near the nominal iteration
   * (they are the yardstick of "longer"). */
  double noise = disturbance_ms(o, prog, rep, o->delay_iteration, node);
  for (int i = 0; i < rep->num_iterations; i++)
    if (rep->iters[i].iteration != o->delay_iteration)
      noise = fmax(noise, (double)rep->iters[i].time / 1e6 - ideal);
  printf("nominal iteration %.3f ms; the machine added up to %.3f ms to actions, gaps or undelayed iterations\n", ideal,
         noise);
  if (noise > 0.25 * o->delay_ms) {
    printf("that is over a quarter of the delay: the delay checks cannot tell; record again\n");
    return 1;
  }
  CHECK(it->path.node_on_path[node], "the delayed action is not on the critical path");
  CHECK(extra >= 0.9 * o->delay_ms && extra <= 1.5 * o->delay_ms,
        "the delayed action took %.3f ms more than usual, expected about %.1f", extra, o->delay_ms);
  CHECK(it->straggler == world, "the straggler is rank %d, expected rank %d", it->straggler, world);
  CHECK(it->straggler_node == node, "the straggler's worst action is not the delayed one");
  CHECK(excess >= 0.75 * o->delay_ms && excess <= 1.5 * o->delay_ms,
        "the straggler's excess is %.3f ms, expected about %.1f", excess, o->delay_ms);
  CHECK(n_others > 0, "no undelayed iteration to compare with");
  CHECK(slower >= 0.75 * o->delay_ms, "the delayed iteration is only %.3f ms longer than the others", slower);
  return 0;
}

static int cmd_check(Options *o, const char *file) {
  if (!file) {
    fprintf(stderr, "trace_mpi_pipeline check: no trace file given\n");
    return 2;
  }
  Error err = {0, ""};
  TraceRun run;
  if (trace_chrome_read(file, &run, &err)) {
    printf("FAIL: %s\n", err.msg);
    return 1;
  }
  if (o->pp == 0) o->pp = run.num_ranks;
  SchedProgram *prog = NULL;
  if (build_program(o, &prog, &err)) {
    fprintf(stderr, "trace_mpi_pipeline check: %s\n", err.msg);
    trace_run_free(&run);
    return 2;
  }
  GridSizes sizes = {.world = run.num_ranks, .tp = 1, .cp = 1, .dp = 0, .pp = o->pp, .etp = 1, .ep = 1, .edp = 0};
  int quiet_rc = 0;
  CHECK(run.program && run.program->num_actions == prog->num_actions, "the trace's program is not 1F1B pp %d m %d",
        o->pp, o->microbatches);
  for (int i = 0; run.program && i < prog->num_actions && i < run.program->num_actions; i++)
    CHECK(same_action(&prog->actions[i], &run.program->actions[i]), "action %d differs from the program", i);
  CHECK(grid_sizes_resolve(&sizes, &err) == ERR_OK, "%s", err.msg);
  for (int r = 0; r < run.num_ranks && !failures; r++) {
    GridCoords c;
    grid_coords_of_rank(&sizes, r, &c);
    CHECK(run.ranks[r].info.pipeline_rank == c.pp && run.ranks[r].info.dp == c.dp,
          "rank %d: pipeline rank %d dp %d, the grid says %d and %d", r, run.ranks[r].info.pipeline_rank,
          run.ranks[r].info.dp, c.pp, c.dp);
    CHECK(run.ranks[r].dropped == 0, "rank %d dropped %llu events", r, (unsigned long long)run.ranks[r].dropped);
  }
  TraceReport rep;
  if (!failures && trace_analyze(&run, -1, &rep, &err)) CHECK(0, "%s", err.msg);
  else if (!failures) {
    trace_report_print(&rep, stdout, 0);
    int64_t slack = offset_slack(&run);
    for (int i = 0; i < rep.num_iterations; i++) {
      check_edges(prog, &sizes, o->reduce_dp, &rep.iters[i]);
      check_path(&rep.iters[i]);
      check_messages(&rep.iters[i], slack);
    }
    if (o->delay_rank >= 0) quiet_rc = check_delay(o, prog, &sizes, &run, &rep);
    trace_report_free(&rep);
  }
  sched_program_free(prog);
  trace_run_free(&run);
  if (failures) {
    printf("%d check%s failed\n", failures, failures == 1 ? "" : "s");
    return 1;
  }
  if (quiet_rc) return 3;
  printf("all checks passed\n");
  return 0;
}

int main(int argc, char **argv) {
  Options o = options_default();
  const char *file = NULL;
  if (argc < 2) {
    fprintf(stderr, "usage: trace_mpi_pipeline run --trace FILE [options] | check FILE [options]\n");
    return 2;
  }
  int rc = parse_options(argc - 2, argv + 2, &o, &file);
  if (rc) return rc;
  if (!strcmp(argv[1], "run")) return cmd_run(&o);
  if (!strcmp(argv[1], "check")) return cmd_check(&o, file);
  fprintf(stderr, "trace_mpi_pipeline: unknown mode '%s' (run or check)\n", argv[1]);
  return 2;
}
