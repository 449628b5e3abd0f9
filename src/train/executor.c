/* Walks one rank's action list and dispatches on the action kind; times
 * every action. See executor.h. */
#include "train/executor.h"

#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "train/trace_session.h"

int executor_create(Executor *ex, const SchedProgram *prog, int rank, void *ctx, Error *err) {
  memset(ex, 0, sizeof *ex);
  if (!prog || rank < 0 || rank >= prog->num_ranks)
    return error_set(err, ERR_ARG, "executor: rank %d is not in the program (%d ranks)", rank,
                     prog ? prog->num_ranks : 0);
  ex->prog = prog;
  ex->rank = rank;
  ex->ctx = ctx;
  ex->actions = sched_program_rank_actions(prog, rank, &ex->num_actions);
  size_t n = ex->num_actions > 0 ? (size_t)ex->num_actions : 1;
  ex->last_backward = calloc(n, 1);
  ex->start = calloc(n, sizeof(double));
  ex->end = calloc(n, sizeof(double));
  if (!ex->last_backward || !ex->start || !ex->end) {
    executor_free(ex);
    return error_set(err, ERR_NOMEM, "executor: out of memory for %d actions", ex->num_actions);
  }
  /* The last backward of each chunk (of each phase, in a program whose
   * parameter groups step in phases of their own), found from the end. */
  /* With a split backward the chunk's gradient completes at its last
   * weight-gradient pass. */
  SchedActionKind completes = prog->config.split_backward ? SCHED_BWD_WEIGHT : SCHED_BWD;
  for (int i = ex->num_actions - 1; i >= 0; i--) {
    const SchedAction *a = &ex->actions[i];
    if (a->kind != completes) continue;
    int later = 0;
    for (int j = i + 1; j < ex->num_actions && !later; j++)
      later = ex->actions[j].kind == completes && ex->actions[j].chunk == a->chunk &&
              ex->actions[j].phase == a->phase;
    ex->last_backward[i] = !later;
  }
  return 0;
}

void executor_free(Executor *ex) {
  free(ex->last_backward);
  free(ex->start);
  free(ex->end);
  memset(ex, 0, sizeof *ex);
}

void executor_set_handler(Executor *ex, SchedActionKind kind, ExecutorHandler handler) {
  if ((int)kind >= 0 && kind < SCHED_NUM_ACTION_KINDS) ex->handlers[kind] = handler;
}

void executor_set_prepare(Executor *ex, SchedActionKind kind, ExecutorHandler prepare) {
  if ((int)kind >= 0 && kind < SCHED_NUM_ACTION_KINDS) ex->prepare[kind] = prepare;
}

void executor_set_posts(Executor *ex, SchedActionKind kind, int posts) {
  if ((int)kind >= 0 && kind < SCHED_NUM_ACTION_KINDS) ex->posts[kind] = posts != 0;
}

int executor_is_last_backward(const Executor *ex, const SchedAction *action) {
  if (action->rank != ex->rank || action->index < 0 || action->index >= ex->num_actions) return 0;
  return ex->last_backward[action->index];
}

int executor_run(Executor *ex, Error *err) {
  for (int i = 0; i < ex->num_actions; i++) {
    const SchedAction *a = &ex->actions[i];
    char what[128];
    ExecutorHandler h = ex->handlers[a->kind];
    if (!h)
      return error_set(err, ERR_INTERNAL, "executor: no handler for %s (this runtime cannot run %s actions yet)",
                       sched_action_describe(a, what, sizeof what), sched_action_kind_name(a->kind));
    ExecutorHandler prep = ex->prepare[a->kind];
    int rc = prep ? prep(ex->ctx, a, err) : 0;
    if (rc) return error_wrap(err, "%s", sched_action_describe(a, what, sizeof what));
    ex->start[i] = timer_now();
    if (!ex->trace) {
      rc = h(ex->ctx, a, err);
    } else if (ex->posts[a->kind]) {
      trace_session_post(ex->trace, a);
      rc = h(ex->ctx, a, err);
    } else {
      TraceEvent span = trace_session_action_begin(ex->trace, a);
      rc = h(ex->ctx, a, err);
      trace_session_action_end(ex->trace, &span);
    }
    ex->end[i] = timer_now();
    if (rc) return error_wrap(err, "%s", sched_action_describe(a, what, sizeof what));
  }
  return 0;
}
