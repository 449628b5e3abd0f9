/* The transformer (model/) as a network (nets/network.h): its parameter
 * table, buffers and the reduce group of every gradient, read from the
 * model's ParamTensor table, and its chunk passes, which run through the
 * pipeline (train/pipeline.c): forward and backward take the program's
 * action as their batch. The executor's FWD/BWD handlers call them; the
 * reductions read the table; the log line reads its metrics (the step's
 * loss, lm, aux, z) and its unit (tokens). */
#ifndef FIVEFOLD_TRAIN_NET_TRANSFORMER_H
#define FIVEFOLD_TRAIN_NET_TRANSFORMER_H

#include "model/model.h"
#include "nets/network.h"

struct Pipeline;

/* net borrows m's table and buffers: m must outlive it (network_free). */
int net_transformer_bind(Network *net, Model *m, Error *err);
/* The pipeline that runs the chunk passes (created after the model). */
void net_transformer_set_pipeline(Network *net, struct Pipeline *pipe);
/* The step's losses as the step reduced them over the stages and replicas
 * (means per micro-batch: lm over tokens, aux and z summed over the MoE
 * layers); ops->metrics reports them as loss (= lm + aux + z), lm, aux, z. */
void net_transformer_set_step_losses(Network *net, double lm, double aux, double z);

#endif
