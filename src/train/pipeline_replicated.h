/* The pipeline's transfers under stage replication (sched/replicated.h):
 * a rank holds one range of every micro-batch's sequences, and each SEND
 * or RECV of its program moves one piece of an activation or gradient
 * (SchedAction.seq_begin/seq_count) to or from one replica of the
 * neighbouring stage. The pieces of one micro-batch land at their rows of
 * one receive buffer of the pipeline's pools; a FWD or BWD waits for all
 * of them (the prepare handler), and a slot is given back after the last
 * piece of its input gradient has been sent.
 *
 * pipeline.c hands the actions that carry a piece (and, once attached,
 * the prepare of every FWD and BWD) to these functions. */
#ifndef FIVEFOLD_TRAIN_PIPELINE_REPLICATED_H
#define FIVEFOLD_TRAIN_PIPELINE_REPLICATED_H

#include "base/error.h"
#include "sched/replicated.h"
#include "train/pipeline.h"

/* After pipeline_create (over the world group, with the replica's own
 * micro-batch size): this rank's stage and range from r. */
int pipeline_replicated_attach(Pipeline *p, const SchedReplication *r, Error *err);
void pipeline_replicated_free(Pipeline *p);

int pipeline_replicated_send(Pipeline *p, const SchedAction *a, Error *err);
int pipeline_replicated_recv(Pipeline *p, const SchedAction *a, Error *err);
/* FWD and BWD: every piece of the received tensor, and the sends of the
 * slot a FWD is about to take. */
int pipeline_replicated_prepare(Pipeline *p, const SchedAction *a, Error *err);
int pipeline_replicated_end_step(Pipeline *p, Error *err);
/* pipeline_eval_forward's work: tokens and targets are the whole batch;
 * the loss is this rank's sequences' (on the last stage). */
int pipeline_replicated_eval_forward(Pipeline *p, const int *tokens, const int *targets, ModelLoss *loss,
                                     Error *err);

#endif
