/* A small real executor for tests of the trace module: runs a sched
 * program with one thread per pipeline rank in this process, recording
 * with the real recorder, so the analyzer's results can be checked against
 * known timings.
 *
 *  - FWD / BWD / OPTIM sleep for their configured time (nanosleep to an
 *    absolute deadline: on a loaded machine sleeping threads do not fight
 *    for the cores, and a late wake-up shows up as a longer action, which is
 *    what a trace should show); FWD and BWD record two sub-operations each;
 *  - SEND deposits a message in the receiver's mailbox (mutex + condition
 *    variable) and returns (a buffered send);
 *  - RECV is posted when the thread reaches it in list order and does not
 *    block (the p2p stream of program.h); the first action that depends on
 *    it waits for the message. Its event runs from the post to the
 *    message's arrival (the sender's deposit), recorded with
 *    trace_record_at;
 *  - GRAD_REDUCE is a non-blocking barrier over all ranks (like
 *    MPI_Ibarrier): the thread arrives and moves on, the reduction completes
 *    when the last rank arrives, and the thread waits for it before any
 *    action that depends on it. Its event runs from the arrival to that
 *    completion, recorded with trace_record_at;
 *  - rank 0 opens each iteration (a gate the others wait at) once its first
 *    action has begun, as the first stage's data loader starts a step; so
 *    the iteration's first stamp is rank 0's, however the threads are
 *    scheduled.
 * A delay can be injected into one action of one rank and iteration.
 *
 * Header-only (static functions): included by the cmocka tests and by the
 * trace_pipeline helper program used under bpftrace. */
#ifndef FIVEFOLD_TESTS_TRACE_PIPELINE_DRIVER_H
#define FIVEFOLD_TESTS_TRACE_PIPELINE_DRIVER_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "sched/program.h"
#include "trace/chrome_writer.h"
#include "trace/recorder.h"

typedef struct DriverConfig {
  const SchedProgram *prog;
  int iterations;
  int first_step, last_step; /* recorder window (last < 0: to the end) */
  double fwd_ms, bwd_ms, optim_ms;
  int64_t message_bytes;
  /* Injected delay: extra sleep inside one action (all -1 / 0: none). */
  int delay_rank, delay_action, delay_iteration;
  double delay_ms;
  size_t capacity; /* recorder events per rank; 0: default */
  int record;      /* 0: probes only (no recorder), for eBPF runs */
} DriverConfig;

typedef struct DriverResult {
  int num_ranks;
  TraceRecorder **recs;
  TraceRankBuffer *buffers;
} DriverResult;

typedef struct DriverShared {
  const DriverConfig *cfg;
  int num_ranks, num_actions;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  uint64_t *arrived_at;     /* [iteration * num_actions + recv id]: ticks of deposit, 0 while pending */
  int *reduce_arrivals;     /* [iteration] */
  uint64_t *reduce_done_at; /* [iteration]: ticks of completion, 0 while pending */
  int gate;                 /* iterations opened by rank 0 */
  TraceRecorder **recs;
  int failed;
} DriverShared;

typedef struct DriverRank {
  DriverShared *sh;
  int rank;
  TraceEvent *posted;      /* [action id]: posted receives (id -1 when none) */
  TraceEvent reduce;       /* the pending GRAD_REDUCE (id -1 when none) */
  int gate_pending;        /* rank 0: open the gate after the next stamp */
} DriverRank;

static void driver_open_gate(DriverRank *dr, int it) {
  if (!dr->gate_pending) return;
  dr->gate_pending = 0;
  pthread_mutex_lock(&dr->sh->lock);
  dr->sh->gate = it + 1;
  pthread_cond_broadcast(&dr->sh->cond);
  pthread_mutex_unlock(&dr->sh->lock);
}

static void driver_sleep_until(int64_t deadline_ns) {
  struct timespec ts = {(time_t)(deadline_ns / 1000000000), (long)(deadline_ns % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static void driver_sleep_ms(double ms) {
  driver_sleep_until(trace_clock_monotonic_ns() + (int64_t)(ms * 1e6));
}

/* Sleeps for ms in two recorded sub-operations. */
static void driver_compute(const SchedAction *a, double ms, int backward) {
  TRACE_OP_BEGIN(main_op, backward ? TRACE_OP_ATTN_BWD : TRACE_OP_GEMM, a->stage, a->microbatch);
  driver_sleep_ms(ms * 0.75);
  if (backward)
    TRACE_OP_END(main_op);
  else
    TRACE_OP_END_GEMM(main_op, 512, 1024, 256);
  TRACE_OP_BEGIN(norm, TRACE_OP_NORM, a->stage, a->microbatch);
  driver_sleep_ms(ms * 0.25);
  TRACE_OP_END(norm);
}

/* Waits for what `a` depends on that completes off the host: posted
 * receives (their events end at the message's arrival) and the pending
 * reduction (it ends when the last rank arrived). */
static void driver_complete_deps(DriverRank *dr, int it, const SchedAction *a) {
  DriverShared *sh = dr->sh;
  for (int d = 0; d < a->num_deps; d++) {
    const SchedAction *dep = &sh->cfg->prog->actions[a->deps[d]];
    TraceEvent *span = NULL;
    uint64_t *done_at = NULL;
    if (sched_kind_is_recv(dep->kind) && dr->posted[dep->id].id >= 0) {
      span = &dr->posted[dep->id];
      done_at = &sh->arrived_at[(size_t)it * sh->num_actions + dep->id];
    } else if (dep->kind == SCHED_GRAD_REDUCE && dr->reduce.id == dep->id) {
      span = &dr->reduce;
      done_at = &sh->reduce_done_at[it];
    } else {
      continue;
    }
    pthread_mutex_lock(&sh->lock);
    while (!*done_at) pthread_cond_wait(&sh->cond, &sh->lock);
    uint64_t done = *done_at;
    pthread_mutex_unlock(&sh->lock);
    FIVEFOLD_PROBE_ACTION_END(span->id, it, span->bytes, span->peer, span->group, span->group_id);
    uint64_t begin = span->begin;
    trace_record_at(span, begin, done > begin ? done : begin);
    span->id = -1;
  }
}

static void driver_run_action(DriverRank *dr, int it, const SchedAction *a) {
  DriverShared *sh = dr->sh;
  const DriverConfig *cfg = sh->cfg;
  driver_complete_deps(dr, it, a);
  if (sched_kind_is_recv(a->kind) || a->kind == SCHED_GRAD_REDUCE) {
    /* Posted: stamp the post (always, so the probes-only run has it too)
     * and move on. */
    TraceEvent span = trace_action_begin(a->id, a->microbatch, a->layer);
    if (!span.begin) span.begin = trace_clock_ticks();
    driver_open_gate(dr, it);
    if (a->kind == SCHED_GRAD_REDUCE) {
      span.group = TRACE_GROUP_WORLD;
      span.group_id = 0;
      dr->reduce = span;
      pthread_mutex_lock(&sh->lock);
      if (++sh->reduce_arrivals[it] == sh->num_ranks) {
        sh->reduce_done_at[it] = trace_clock_ticks();
        pthread_cond_broadcast(&sh->cond);
      }
      pthread_mutex_unlock(&sh->lock);
    } else {
      span.peer = a->peer;
      span.bytes = cfg->message_bytes;
      dr->posted[a->id] = span;
    }
    return;
  }
  TraceEvent span = trace_action_begin(a->id, a->microbatch, a->layer);
  driver_open_gate(dr, it);
  int64_t start = trace_clock_monotonic_ns();
  switch (a->kind) {
  case SCHED_FWD: driver_compute(a, cfg->fwd_ms, 0); break;
  case SCHED_BWD: driver_compute(a, cfg->bwd_ms, 1); break;
  case SCHED_OPTIM: driver_sleep_ms(cfg->optim_ms); break;
  case SCHED_SEND_ACT:
  case SCHED_SEND_GRAD: {
    TRACE_OP_BEGIN(send_op, TRACE_OP_SEND, a->stage, a->microbatch);
    pthread_mutex_lock(&sh->lock);
    sh->arrived_at[(size_t)it * sh->num_actions + a->match] = trace_clock_ticks();
    pthread_cond_broadcast(&sh->cond);
    pthread_mutex_unlock(&sh->lock);
    TRACE_OP_END_COMM(send_op, TRACE_GROUP_PP, cfg->message_bytes, a->peer);
    span.peer = a->peer;
    span.bytes = cfg->message_bytes;
    break;
  }
  default: break;
  }
  if (dr->rank == cfg->delay_rank && a->id == cfg->delay_action && it == cfg->delay_iteration)
    driver_sleep_until(start + (int64_t)((a->kind == SCHED_FWD ? cfg->fwd_ms : a->kind == SCHED_BWD ? cfg->bwd_ms : 0) * 1e6 +
                                         cfg->delay_ms * 1e6));
  trace_action_end(&span);
}

static void *driver_rank_main(void *arg) {
  DriverRank *dr = arg;
  DriverShared *sh = dr->sh;
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake on time: 50 µs default slack per sleep */
  trace_bind(sh->recs ? sh->recs[dr->rank] : NULL, dr->rank, dr->rank, sh->num_ranks);
  int count;
  const SchedAction *list = sched_program_rank_actions(sh->cfg->prog, dr->rank, &count);
  for (int it = 0; it < sh->cfg->iterations; it++) {
    trace_begin_iteration(it);
    if (dr->rank == 0) {
      dr->gate_pending = 1;
    } else {
      pthread_mutex_lock(&sh->lock);
      while (sh->gate <= it) pthread_cond_wait(&sh->cond, &sh->lock);
      pthread_mutex_unlock(&sh->lock);
    }
    for (int i = 0; i < count; i++) driver_run_action(dr, it, &list[i]);
    driver_open_gate(dr, it); /* an empty list */
  }
  trace_begin_iteration(-1);
  return NULL;
}

static void driver_result_free(DriverResult *res) {
  if (!res) return;
  for (int r = 0; res->recs && r < res->num_ranks; r++) trace_recorder_free(res->recs[r]);
  free(res->recs);
  free(res->buffers);
  memset(res, 0, sizeof *res);
}

/* Runs the program; returns 0 or -1 (allocation or thread failure). */
static int driver_run(const DriverConfig *cfg, DriverResult *res) {
  memset(res, 0, sizeof *res);
  const SchedProgram *prog = cfg->prog;
  int R = prog->num_ranks;
  DriverShared sh = {.cfg = cfg, .num_ranks = R, .num_actions = prog->num_actions};
  pthread_mutex_init(&sh.lock, NULL);
  pthread_cond_init(&sh.cond, NULL);
  sh.arrived_at = calloc((size_t)cfg->iterations * prog->num_actions, sizeof *sh.arrived_at);
  sh.reduce_arrivals = calloc((size_t)cfg->iterations, sizeof *sh.reduce_arrivals);
  sh.reduce_done_at = calloc((size_t)cfg->iterations, sizeof *sh.reduce_done_at);
  res->num_ranks = R;
  res->recs = calloc((size_t)R, sizeof *res->recs);
  res->buffers = calloc((size_t)R, sizeof *res->buffers);
  DriverRank *ranks = calloc((size_t)R, sizeof *ranks);
  pthread_t *threads = calloc((size_t)R, sizeof *threads);
  int rc = sh.arrived_at && sh.reduce_arrivals && sh.reduce_done_at && res->recs && res->buffers && ranks && threads ? 0 : -1;
  TraceRecorderConfig rcfg = {cfg->capacity, cfg->first_step, cfg->last_step};
  for (int r = 0; rc == 0 && cfg->record && r < R; r++) {
    res->recs[r] = trace_recorder_new(&rcfg, NULL);
    if (!res->recs[r]) rc = -1;
  }
  if (cfg->record) sh.recs = res->recs;
  for (int r = 0; rc == 0 && r < R; r++) {
    ranks[r] = (DriverRank){.sh = &sh, .rank = r, .posted = malloc((size_t)prog->num_actions * sizeof(TraceEvent))};
    if (!ranks[r].posted) rc = -1;
    for (int i = 0; ranks[r].posted && i < prog->num_actions; i++) ranks[r].posted[i].id = -1;
    ranks[r].reduce.id = -1;
  }
  /* A rank that cannot start would leave the others waiting for it. */
  int started = 0;
  for (int r = 0; rc == 0 && r < R; r++) {
    if (pthread_create(&threads[r], NULL, driver_rank_main, &ranks[r]) != 0) {
      fprintf(stderr, "pipeline driver: cannot start rank %d\n", r);
      abort();
    }
    started++;
  }
  for (int r = 0; r < started; r++) pthread_join(threads[r], NULL);
  for (int r = 0; rc == 0 && r < R; r++) {
    res->buffers[r].info = trace_rank_info_make(r, r);
    if (!cfg->record) continue;
    trace_recorder_stop(res->recs[r]);
    res->buffers[r].events = trace_recorder_events(res->recs[r], &res->buffers[r].count);
    res->buffers[r].dropped = trace_recorder_dropped(res->recs[r]);
  }
  free(sh.arrived_at);
  free(sh.reduce_arrivals);
  free(sh.reduce_done_at);
  for (int r = 0; ranks && r < R; r++) free(ranks[r].posted);
  free(ranks);
  free(threads);
  pthread_mutex_destroy(&sh.lock);
  pthread_cond_destroy(&sh.cond);
  if (rc) driver_result_free(res);
  return rc;
}

/* Writes the recorded run as a trace file with its program and a small
 * configuration object. */
static int driver_write_trace(const DriverConfig *cfg, const DriverResult *res, const char *path, Error *err) {
  cJSON *config = cJSON_CreateObject();
  cJSON_AddStringToObject(config, "driver", "tests/trace/pipeline_driver.h");
  cJSON_AddNumberToObject(config, "fwd_ms", cfg->fwd_ms);
  cJSON_AddNumberToObject(config, "bwd_ms", cfg->bwd_ms);
  cJSON_AddNumberToObject(config, "iterations", cfg->iterations);
  TraceRunMeta meta = {.program = cfg->prog, .config = config};
  meta.grid = (TraceGridSizes){res->num_ranks, 1, 1, 1, res->num_ranks, 1, 1, 1};
  int rc = trace_chrome_write(path, &meta, res->buffers, res->num_ranks, err);
  cJSON_Delete(config);
  return rc;
}

#endif
