/* Max-plus evaluation of a program: the core the simulator (plan/) and the
 * deadlock checker share. Given a duration for every action and a transfer
 * time for every send/receive pair, each action starts at
 *   max(finish of the previous action on its stream,
 *       finish of the previous compute-stream action, for non-compute streams,
 *       finish of each dependency, + transfer for a RECV's SEND)
 * and finishes its duration later (program.h states the execution model).
 * The evaluation is a longest-path sweep over the DAG those rules define; an
 * action that can never start (a cycle, or a send/receive with no partner)
 * is a deadlock and is reported by name.
 *
 * Two send semantics:
 *  - EAGER: a SEND completes on its own (buffered); its RECV starts no earlier
 *    than the SEND's finish plus the transfer time. This is the pricing model.
 *  - RENDEZVOUS: a SEND and its RECV start together, when both have been
 *    reached, and finish together after both actions' durations plus the
 *    transfer time; never earlier than under EAGER. This is what a
 *    blocking MPI_Send may do, so a program that completes under it is safe
 *    under any MPI implementation.
 * With `serial` set, streams are ignored and every action waits for the one
 * before it in its rank's list: the strictest executor, blocking calls only.
 * sched_check proves deadlock freedom with RENDEZVOUS + serial, which implies
 * it for every weaker executor. */
#ifndef FIVEFOLD_SCHED_EVALUATE_H
#define FIVEFOLD_SCHED_EVALUATE_H

#include <stdio.h>

#include "base/error.h"
#include "sched/program.h"

/* Duration of one action in seconds (>= 0). */
typedef double (*SchedCostFn)(const SchedAction *action, void *ctx);
/* Transfer time of one matched send/receive pair in seconds (>= 0). */
typedef double (*SchedTransferFn)(const SchedAction *send, const SchedAction *recv, void *ctx);

typedef enum SchedSendMode { SCHED_SEND_EAGER = 0, SCHED_SEND_RENDEZVOUS } SchedSendMode;

typedef struct SchedEvalOptions {
  SchedCostFn cost;         /* required */
  void *cost_ctx;
  SchedTransferFn transfer; /* NULL: transfers are free */
  void *transfer_ctx;
  SchedSendMode send_mode;
  int serial; /* 1: ignore streams, run each list strictly in order */
} SchedEvalOptions;

typedef struct SchedEval {
  int num_actions, num_ranks;
  double *start, *finish; /* by action id; NAN for an action that never started */
  double makespan;        /* latest finish (the program starts at 0) */
  double *busy;           /* per rank: time in compute kinds (FWD, BWD, OPTIM) */
  double *comm;           /* per rank: time in all other actions */
  double *rank_finish;    /* per rank: finish of its last action */
  /* 1 - sum(busy) / (num_ranks * makespan): the share of rank-time spent
   * idle or communicating. With free communication this is the pipeline
   * bubble, (p-1)/(m+p-1) for 1F1B and GPipe. */
  double bubble_fraction;
  int deadlocked;
  int num_stuck;
  int *stuck; /* ids of actions that never started, by rank then position */
} SchedEval;

/* Evaluates prog. Returns ERR_OK when every action ran; on a deadlock it
 * returns ERR_CONFIG with a message naming, for each blocked rank, the action
 * it is stuck at and what that action waits for, and still fills *out (with
 * deadlocked = 1). Always call sched_eval_free afterwards. */
int sched_evaluate(const SchedProgram *prog, const SchedEvalOptions *opts, SchedEval *out, Error *err);
void sched_eval_free(SchedEval *eval);

/* Per-rank idle time (makespan - busy). */
double sched_eval_rank_idle(const SchedEval *eval, int rank);

/* The evaluated program as a chart: one column per rank, one row per time
 * slot (the shortest compute), each cell the compute running on that rank in
 * the middle of the slot; blank cells are bubbles or communication. */
void sched_eval_print_timeline(const SchedProgram *prog, const SchedEval *eval, FILE *f);

/* ---- a cost model with one number per kind, for the CLI and tests ---- */

typedef struct SchedUnitCosts {
  double fwd, bwd;           /* per FWD/BWD action, before stage scaling */
  double send, recv;         /* local cost of a SEND/RECV action */
  double transfer;           /* per matched pair */
  double grad_reduce, optim; /* per action */
  double other;              /* any other kind */
  /* A BWD_WEIGHT action; when split_backward is set (the program's
   * config.split_backward), a BWD costs bwd - bwd_weight: the two halves
   * of one backward. */
  double bwd_weight;
  int split_backward;
  /* Optional per-virtual-stage multiplier for FWD/BWD (e.g. relative layer
   * weight of uneven stages); NULL means 1 for every stage. */
  const double *stage_scale;
  int num_stages;
} SchedUnitCosts;

/* fwd 1, bwd 2 (split: B 1, W 1), everything else 0: the textbook setting. */
SchedUnitCosts sched_unit_costs_default(void);
double sched_unit_cost(const SchedAction *action, void *ctx);                            /* ctx: SchedUnitCosts* */
double sched_unit_transfer(const SchedAction *send, const SchedAction *recv, void *ctx); /* ctx: SchedUnitCosts* */
/* Options using those callbacks with ctx = costs. */
SchedEvalOptions sched_unit_eval_options(const SchedUnitCosts *costs, SchedSendMode mode);

#endif
