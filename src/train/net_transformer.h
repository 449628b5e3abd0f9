/* The transformer (model/) as a network (train/network.h): its parameter
 * table, buffers and the reduce group of every gradient, read from the
 * model's ParamTensor table. The model's chunk passes still run through
 * train/pipeline.c, which the executor's FWD/BWD handlers call; this
 * adapter is what the reductions see of the model. */
#ifndef FIVEFOLD_TRAIN_NET_TRANSFORMER_H
#define FIVEFOLD_TRAIN_NET_TRANSFORMER_H

#include "model/model.h"
#include "nets/network.h"

/* net borrows m's table and buffers: m must outlive it (network_free). */
int net_transformer_bind(Network *net, Model *m, Error *err);

#endif
