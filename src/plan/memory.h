/* The memory model: what each pipeline rank holds at its peak.
 *
 * Model state (Megatron's counting, REFERENCES.md): mixed precision keeps
 * bf16 weights (2 B), fp32 gradients (4 B) and fp32 master weights plus two
 * Adam moments (12 B): 18 B per parameter, or 6 + 12/d with the optimizer
 * state sharded over d data-parallel ranks (ZeRO-1, the distributed
 * optimizer). All-fp32 training: 16 B, or 8 + 8/d. Dense parameters are split
 * by TP and sharded over DP x CP; expert parameters are split by EP and ETP
 * and sharded over EDP; norms and the router are replicated across TP.
 *
 * Activations per micro-batch follow Korthikanti et al.'s accounting for
 * TP with sequence parallelism, redone for this architecture: RMSNorm,
 * SwiGLU, grouped-query attention, flash attention (no s x s matrices), no
 * dropout. Tensors between blocks are sharded over TP and CP (s/(TP CP)
 * tokens per rank); those inside attention and the MLP over TP (heads or
 * FFN columns) and CP. MoE activations scale with the routed rows a rank
 * receives: top-k x ETP x the expert load (the busiest rank's imbalance when
 * dropless, the capacity factor when dropping with padding). Recomputation
 * stores less: selective drops what its modules rebuild (PlanConfig.
 * recompute_modules: the attention core's statistics by default; the norms'
 * outputs, a dense MLP's or the MoE part's internals, the experts'
 * activation output, the shared expert's), full keeps
 * only each block's input and rebuilds one block at a time in backward.
 *
 * How many micro-batches are in flight on a rank comes from the schedule
 * itself: the compute order of sched/builders.h is walked, adding a chunk's
 * activations at its forward and releasing them at its backward. Uneven
 * stages therefore differ, and 1F1B gives p - r micro-batches on rank r,
 * GPipe m, interleaved its longer warm-up. */
#ifndef FIVEFOLD_PLAN_MEMORY_H
#define FIVEFOLD_PLAN_MEMORY_H

#include "base/error.h"
#include "model/config.h"
#include "plan/cluster.h"
#include "plan/parallel.h"
#include "sched/partition.h"

/* Parameters one rank holds, split by how they are sharded. */
typedef struct PlanParams {
  double dense;  /* reduced over DP x CP */
  double expert; /* reduced over EDP */
} PlanParams;

PlanParams plan_layer_params(const ModelConfig *model, const PlanConfig *cfg, int layer);
PlanParams plan_embedding_params(const ModelConfig *model, const PlanConfig *cfg);
PlanParams plan_head_params(const ModelConfig *model, const PlanConfig *cfg); /* final norm + output layer */
/* Parameters of virtual stage s under a partition (embedding on stage 0,
 * head on the last stage). */
PlanParams plan_stage_params(const ModelConfig *model, const PlanConfig *cfg, const SchedPartition *part, int stage);

/* Bytes per parameter for weights + gradients + optimizer state: 18 or
 * 6 + 12/d (bf16/fp16 mixed precision), 16 or 8 + 8/d (fp32). */
double plan_bytes_per_param(PlanDtype dtype, int distributed_optimizer, double d);

typedef struct PlanStateBytes {
  double weights, grads, optimizer;
} PlanStateBytes;

PlanStateBytes plan_state_bytes(PlanDtype dtype, int distributed_optimizer, double params, double d);

/* Activation bytes one block keeps from its forward to its backward for one
 * micro-batch on one rank; expert_load as in PlanCostModel.expert_load. */
double plan_layer_activation_bytes(const ModelConfig *model, const PlanConfig *cfg, int layer, double expert_load);
/* Activation bytes of one block without recomputation (the working set a
 * fully recomputed block rebuilds during its backward). */
double plan_layer_full_activation_bytes(const ModelConfig *model, const PlanConfig *cfg, int layer,
                                        double expert_load);

/* Bytes a split backward (zb-h1) keeps for one block and one micro-batch
 * from its input-gradient pass B to its weight-gradient pass W, on top of
 * the forward's activations (which W also reads): the output gradients of
 * the GEMMs whose weight gradients wait, as fivefold's runtime defers them
 * (the attention projections and a dense SwiGLU MLP, at tp 1; MoE experts
 * and GPT-2's MLP are not deferred). 0 for other schedules and tp > 1. */
double plan_layer_split_keep_bytes(const ModelConfig *model, const PlanConfig *cfg, int layer);

typedef struct PlanRankMemory {
  double weights, grads, optimizer; /* model state */
  double activations;               /* peak of stored activations over the schedule */
  double transient;                 /* largest short-lived buffer (logits, a recomputed block) */
  double reserved;                  /* the cluster's reserve (context, libraries, fragmentation) */
  double total;
  int peak_inflight;                /* (micro-batch, chunk) pairs alive at the peak */
} PlanRankMemory;

/* Memory of every pipeline rank (out[pp]). */
int plan_memory_estimate(const ModelConfig *model, const ClusterSpec *cluster, const PlanConfig *cfg,
                         const SchedPartition *part, double expert_load, PlanRankMemory *out, Error *err);

/* Usable bytes per device (capacity - reserve is what totals are compared to:
 * totals include the reserve). */
static inline double plan_memory_capacity(const ClusterSpec *cluster) {
  return cluster->memory_capacity;
}

#endif
