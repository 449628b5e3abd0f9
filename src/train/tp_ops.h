/* The tensor-parallel collectives the model calls (ModelParallelOps,
 * model/model.h), bound to the TP group of the rank grid. The model never
 * links MPI; the runtime hands it these callbacks. */
#ifndef FIVEFOLD_TRAIN_TP_OPS_H
#define FIVEFOLD_TRAIN_TP_OPS_H

#include <stddef.h>

#include "comm/comm.h"
#include "model/model.h"

typedef struct TpOps {
  ModelParallelOps ops; /* ops.ctx points back at this struct: keep it in place */
  const CommGroup *group;
  float *scratch; /* for calls whose input overlaps their output; grows to the largest seen */
  size_t scratch_len;
} TpOps;

/* group: the TP group (its size is tp). */
void tp_ops_init(TpOps *t, const CommGroup *group);
void tp_ops_free(TpOps *t);

#endif
