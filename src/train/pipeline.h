/* The pipeline side of one rank's step: the executor handlers for FWD, BWD,
 * SEND_ACT, RECV_ACT, SEND_GRAD and RECV_GRAD of a sched program
 * (sched/program.h), over the model's chunk API (model/model.h) and the
 * pipeline group.
 *
 * A rank holds vpp chunks; chunk c is virtual stage c*pp + rank. Each
 * micro-batch of a chunk takes an activation slot at its forward and gives
 * it back when its input gradient has been sent (at its backward on the
 * first stage); slots per chunk = the most micro-batches of one chunk in
 * flight in this rank's list (pipeline_slots_needed, computed from the
 * program before the model is created). Received activations and gradients
 * land in small per-chunk buffer pools sized the same way: a buffer is
 * taken when the receive is posted (non-blocking, on the program's p2p
 * stream) and returned when the backward that used it is done. Sends are
 * non-blocking too; a slot's sends are waited for before the slot is used
 * again, and all of them at the end of the step. Messages are tagged by
 * (link between two stages, micro-batch, direction), so any order of
 * arrival matches.
 *
 * Nothing here decides order: the handlers do what their action says, in
 * the order the executor hands them over.
 *
 * Tracing (train/trace_session.h): a receive is posted work; its
 * completion is stamped where it is waited for, which pipeline_prepare does
 * before the FWD or BWD that consumes it (the executor's prepare handler),
 * so the wait is not counted as compute time. */
#ifndef FIVEFOLD_TRAIN_PIPELINE_H
#define FIVEFOLD_TRAIN_PIPELINE_H

#include "base/error.h"
#include "comm/comm.h"
#include "model/model.h"
#include "sched/program.h"
#include "train/dp_grads.h"

typedef struct PipeBufferPool {
  int count;        /* buffers */
  float *data;      /* [count][len] */
  int *buf_of_mb;   /* [m]: buffer holding the micro-batch's tensor, -1 when none */
  int *free_list;   /* [count] */
  int num_free;
  CommRequest *req; /* [count] the receive into each buffer */
  const SchedAction **recv_of; /* [count] the RECV action posted into each buffer (its trace completion) */
} PipeBufferPool;

typedef struct Pipeline {
  Model *model;
  const SchedProgram *prog;
  int rank, pp, vpp, m, B, T;
  int num_stages;
  const CommGroup *group; /* the pipeline group (NULL when pp = 1) */
  size_t act_len;         /* floats of one activation passed between chunks: rows x hidden */
  int num_slots;
  int *slot_of[MODEL_MAX_CHUNKS];    /* [m] slot of each micro-batch, -1 when none */
  int *free_slots[MODEL_MAX_CHUNKS]; /* [num_slots] */
  int num_free[MODEL_MAX_CHUNKS];
  PipeBufferPool act_in[MODEL_MAX_CHUNKS], grad_in[MODEL_MAX_CHUNKS];
  CommRequest *send_act[MODEL_MAX_CHUNKS], *send_grad[MODEL_MAX_CHUNKS]; /* [num_slots] */
  /* this step */
  const int *tokens, *targets; /* [m][B*T] */
  float grad_scale;
  DpGrads *dp_grads;              /* started from each chunk's last backward; NULL: none */
  const unsigned char *last_backward; /* by list index (executor.h) */
  struct TraceSession *trace;         /* receives' completions are stamped here; NULL: tracing off */
  /* what the step's forwards accumulated */
  double lm_sum, aux_sum, z_sum;
  int loss_nonfinite; /* a micro-batch's loss of this step was not finite (the guard decides) */
  long tokens_counted;
  long *expert_counts; /* [num_layers * num_experts] or NULL for dense models */
  size_t num_counts;
  struct PipeReplicated *repl; /* stage replication's piece-wise transfers (pipeline_replicated.h); NULL: off */
} Pipeline;

/* Activation slots the rank's list needs per chunk (the maximum over its
 * chunks), >= 1. */
int pipeline_slots_needed(const SchedProgram *prog, int rank);

/* model: created with pipeline_slots_needed slots. group: the pipeline
 * group when pp > 1. */
int pipeline_create(Pipeline *p, Model *model, const SchedProgram *prog, int rank, const CommGroup *group, int B,
                    int T, Error *err);
void pipeline_free(Pipeline *p);

/* Starts a step over the micro-batches tokens/targets [m][B*T]; zeroes the
 * accumulators. */
void pipeline_begin_step(Pipeline *p, const int *tokens, const int *targets, float grad_scale);
/* Handlers: the action's kind must be the function's. */
int pipeline_forward(Pipeline *p, const SchedAction *a, Error *err);
int pipeline_backward(Pipeline *p, const SchedAction *a, Error *err);
/* BWD_WEIGHT of a program with a split backward (SchedConfig.split_backward;
 * its BWD then computes only the input gradient): the weight gradients of
 * the micro-batch, which complete the chunk's gradient at its last one. */
int pipeline_backward_weights(Pipeline *p, const SchedAction *a, Error *err);
int pipeline_send(Pipeline *p, const SchedAction *a, Error *err); /* SEND_ACT, SEND_GRAD */
int pipeline_recv(Pipeline *p, const SchedAction *a, Error *err); /* RECV_ACT, RECV_GRAD */
/* Prepare handler of FWD and BWD: waits for the received tensor the action
 * consumes (none on the first / last stage) and stamps the receive's
 * completion. The handler itself would wait too; this only moves the wait
 * in front of the action's span. */
int pipeline_prepare(Pipeline *p, const SchedAction *a, Error *err);
/* Waits for every send of the step (collective only in effect: peers wait
 * for the matching receives). */
int pipeline_end_step(Pipeline *p, Error *err);

/* Forward-only pass of one batch [B, T] through every stage (validation):
 * blocking sends and receives stage by stage. loss receives lm and tokens
 * on the rank holding the head (zero elsewhere). */
int pipeline_eval_forward(Pipeline *p, const int *tokens, const int *targets, ModelLoss *loss, Error *err);

#endif
