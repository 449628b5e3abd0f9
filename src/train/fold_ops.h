/* The MoE-parallel-folding collectives the model calls, over MPI: the
 * dispatchers' MoeCommOps (model/moe_dispatch_ep.h) on the EP, ETP and SEQ
 * (= TP x CP) groups of the rank grid, and the context-parallel ring's
 * CpCommOps (model/attention_cp.h) on the CP group. The callbacks run deep
 * inside a pass where peers wait in the same collective, so any failure
 * ends the job (comm_abort with the message), like every MPI failure. */
#ifndef FIVEFOLD_TRAIN_FOLD_OPS_H
#define FIVEFOLD_TRAIN_FOLD_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "model/model.h"

typedef struct FoldOps {
  MoeCommOps moe; /* moe.ctx and cp.ctx point back at this struct: keep it in place */
  CpCommOps cp;
  const CommGroup *ep, *etp, *seq, *cp_group;
  /* per-call layouts, sized for the largest group */
  CommAlltoallv layout[3]; /* one per MoeGroup */
  int *counts, *displs;    /* [max group size] */
  int max_size;
  /* Wall seconds spent inside the dispatcher's collectives (EP, ETP and
   * SEQ groups), waiting for peers included: what `make bench` reports as
   * the all-to-all share of the step. */
  double dispatch_seconds;
} FoldOps;

/* Groups: EP, ETP, TP x CP (the SEQ group) and CP of the grid; any may
 * have size 1. */
int fold_ops_init(FoldOps *f, const CommGroup *ep, const CommGroup *etp, const CommGroup *seq,
                  const CommGroup *cp_group, Error *err);
void fold_ops_free(FoldOps *f);

#endif
