/* The transformer (model/) as a network (nets/network.h): its parameter
 * table, buffers and the reduce group of every gradient, read from the
 * model's ParamTensor table, and its chunk passes, which run through the
 * pipeline (train/pipeline.c): forward and backward take the program's
 * action as their batch. The executor's FWD/BWD handlers call them; the
 * reductions read the table; the log line reads its metrics (the step's
 * loss, lm, aux, z) and its unit (tokens). */
#ifndef FIVEFOLD_TRAIN_NET_TRANSFORMER_H
#define FIVEFOLD_TRAIN_NET_TRANSFORMER_H

#include "ckpt/checkpoint.h"
#include "model/model.h"
#include "nets/network.h"

struct Pipeline;
struct cJSON;

/* net borrows m's table and buffers: m must outlive it (network_free). */
int net_transformer_bind(Network *net, Model *m, Error *err);
/* The pipeline that runs the chunk passes (created after the model). */
void net_transformer_set_pipeline(Network *net, struct Pipeline *pipe);
/* The step's losses as the step reduced them over the stages and replicas
 * (means per micro-batch: lm over tokens, aux and z summed over the MoE
 * layers); ops->metrics reports them as loss (= lm + aux + z), lm, aux, z. */
void net_transformer_set_step_losses(Network *net, double lm, double aux, double z);

/* What a checkpoint takes of a Model that is not trained here (sampling,
 * export, upcycling, tests): its bound network and its config record
 * (model_config_to_json). Free *record with cJSON_Delete, net with
 * network_free. */
int net_transformer_checkpoint_view(Network *net, struct cJSON **record, Model *m, Error *err);
/* checkpoint_load_weights and checkpoint_load_training into a Model,
 * through that view. */
int net_transformer_load_weights(const char *ckpt_dir, Model *m, Error *err);
int net_transformer_load_training(const char *ckpt_dir, Model *m, CheckpointOptimizer *opt, CheckpointTrainState *st,
                                  Error *err);

#endif
