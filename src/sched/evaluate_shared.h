/* Evaluation of a program whose ranks share cores (processor sharing).
 *
 * The max-plus evaluator (evaluate.h) gives every action a fixed duration.
 * When the ranks of a node are more than its cores can run at once, the
 * costs are priced at a fixed share of a core per rank; but a rank that
 * waits (a pipeline bubble, a receive, a collective) leaves its core to the
 * others, so the ranks that compute run faster than that share. Here the
 * speed of a computing rank at each moment is
 *     min(1, capacity[node] / computing[node])
 * of its dedicated speed, where computing[node] counts the devices of the
 * ranks computing on that node at that moment (a rank standing for several
 * devices, e.g. its tensor-parallel group, counts each; a rank spread over
 * nodes runs at its slowest node's speed), plus waiting_load for each
 * device of the others (0 by default: a waiting rank takes no core); the
 * actions are re-timed whenever that set changes (an event simulation in
 * time order).
 *
 * An action's cost (SchedEvalOptions.cost, at the fixed share) is split by
 * SchedShareOptions.work into CPU work and the rest:
 *   - the CPU part c runs first, as c x priced_share seconds of a dedicated
 *     core, at the speed above (the rank counts as computing meanwhile);
 *   - the rest (cost - c: communication inside the action, waits) then
 *     takes its own time, the rank not computing.
 * Only compute-stream actions have CPU work (the others are posted
 * transfers and collectives). With every rank always computing the speed
 * is priced_share everywhere and the result is the max-plus one; with one
 * rank per core, speed 1. Every other rule (streams, dependencies,
 * transfers on a receive's edge, send modes) is the max-plus evaluator's,
 * on the same graph (eval_graph.h). */
#ifndef FIVEFOLD_SCHED_EVALUATE_SHARED_H
#define FIVEFOLD_SCHED_EVALUATE_SHARED_H

#include "base/error.h"
#include "sched/evaluate.h"

/* The CPU part of an action's cost (seconds at the priced share, 0 to cost). */
typedef double (*SchedWorkFn)(const SchedAction *action, void *ctx);

/* The evaluator's side of a transfer released by a link model: the RECV of
 * `recv_id` may start at t (its data has arrived). */
typedef void (*SchedDeliverFn)(void *arg, int recv_id, double t);

/* Transfers whose times depend on what else runs (plan/link_share.h: a
 * node's shared network port, messages held while their ranks compute).
 * For every SEND it claims (`claims`), the SEND -> RECV edge carries no
 * fixed transfer time: the evaluator tells the model when the SEND
 * finished (`sent`) and when the RECV was posted (every other dependency
 * of the RECV done: `posted`), and the model releases the RECV through
 * `advance`'s deliver callback. `computing[r]` >= 0 while rank r is in the
 * CPU part of an action (-1 otherwise); it is constant between the calls:
 * `next` returns the earliest moment the model's state changes on its own
 * under it (INFINITY: never), and `advance` runs the model to t under it,
 * delivering what arrives by then. */
typedef struct SchedLinkModel {
  void *ctx;
  int (*claims)(void *ctx, const SchedAction *send);
  void (*sent)(void *ctx, int send_id, double t);
  void (*posted)(void *ctx, int recv_id, double t);
  double (*next)(void *ctx, const int *computing);
  void (*advance)(void *ctx, double t, const int *computing, SchedDeliverFn deliver, void *arg);
} SchedLinkModel;

typedef struct SchedShareOptions {
  SchedWorkFn work; /* required */
  void *work_ctx;
  double priced_share; /* (0, 1]: the share of a core the costs are priced at */
  int num_nodes;
  const double *capacity; /* per node: how many devices its cores run at full speed (> 0) */
  /* num_ranks x num_nodes, row by rank: the devices program rank r stands
   * for on each node (>= 0; a rank with none never slows down). */
  const double *load;
  /* [0, 1]: the share of a core a device that does not compute still takes
   * (a wait that polls); 0: it leaves its core to the others entirely, 1:
   * it keeps its full share, and the speed is the fixed share throughout. */
  double waiting_load;
} SchedShareOptions;

/* Evaluates prog under processor sharing; the result and errors are those
 * of sched_evaluate (a deadlock is reported as sched_evaluate reports it).
 * Always call sched_eval_free afterwards. */
int sched_evaluate_shared(const SchedProgram *prog, const SchedEvalOptions *opts, const SchedShareOptions *share,
                          SchedEval *out, Error *err);
/* The same with a link model for the transfers it claims (NULL: none, as
 * sched_evaluate_shared). Eager sends only. */
int sched_evaluate_shared_links(const SchedProgram *prog, const SchedEvalOptions *opts, const SchedShareOptions *share,
                                const SchedLinkModel *links, SchedEval *out, Error *err);

#endif
