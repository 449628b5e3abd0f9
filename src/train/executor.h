/* The executor: runs one rank's action list of a sched program (program.h)
 * in order, handing each action to the handler registered for its kind.
 *
 * The executor decides nothing about order: the program does. What each
 * kind means is up to the caller's handlers (the trainer registers FWD, BWD,
 * the pipeline's SEND_ACT, RECV_ACT, SEND_GRAD and RECV_GRAD (pipeline.h),
 * GRAD_REDUCE and OPTIM; all-to-alls and ring steps slot in as more
 * handlers). An action whose kind has no handler is an
 * error naming the action, never silently skipped. A program whose
 * parameter groups step separately (SchedConfig.param_groups) runs its
 * phases one after the other like any list; the handlers read the group
 * of the phase from each action (SchedAction.group).
 *
 * It also stamps every action with its start and end time (seconds on the
 * timer_now clock), indexed by position in the rank's list, and, when a
 * trace session is attached (train/trace_session.h), records each action
 * there: a span around the handler, or, for kinds marked as posting
 * (executor_set_posts: the handler only starts work, say an MPI_Irecv), a
 * post stamped before the handler, whose completion the code that waits
 * for the work stamps (trace_session_complete). A kind may also have a
 * prepare handler, run before the action's span begins: the place to wait
 * for posted work the action needs, so the wait is not counted as its own
 * time. With no session each action costs one pointer test more. */
#ifndef FIVEFOLD_TRAIN_EXECUTOR_H
#define FIVEFOLD_TRAIN_EXECUTOR_H

#include "base/error.h"
#include "sched/program.h"

typedef int (*ExecutorHandler)(void *ctx, const SchedAction *action, Error *err);

typedef struct Executor {
  const SchedProgram *prog;
  int rank; /* pipeline rank whose list runs */
  const SchedAction *actions;
  int num_actions;
  ExecutorHandler handlers[SCHED_NUM_ACTION_KINDS];
  ExecutorHandler prepare[SCHED_NUM_ACTION_KINDS]; /* NULL: nothing to wait for first */
  unsigned char posts[SCHED_NUM_ACTION_KINDS];     /* 1: the handler only posts work */
  struct TraceSession *trace;                      /* NULL: tracing off */
  void *ctx;
  /* For BWD actions (BWD_WEIGHT with a split backward): 1 at list
   * positions holding the last backward of their chunk (the one that
   * completes the chunk's gradient), per phase
   * when the program has several parameter groups (SchedAction.group). */
  unsigned char *last_backward;
  double *start, *end; /* [num_actions] times of the last run */
} Executor;

/* prog must outlive the executor. */
int executor_create(Executor *ex, const SchedProgram *prog, int rank, void *ctx, Error *err);
void executor_free(Executor *ex);
void executor_set_handler(Executor *ex, SchedActionKind kind, ExecutorHandler handler);
void executor_set_prepare(Executor *ex, SchedActionKind kind, ExecutorHandler prepare);
/* posts 1: actions of this kind are recorded as posted work (see above). */
void executor_set_posts(Executor *ex, SchedActionKind kind, int posts);

/* 1 if the action (of this executor's rank) is its chunk's last backward in
 * list order. */
int executor_is_last_backward(const Executor *ex, const SchedAction *action);

/* Runs the whole list once; stops at the first failing action, with its
 * description in the error. */
int executor_run(Executor *ex, Error *err);

#endif
