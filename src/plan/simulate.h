/* The simulator: one full configuration in, predicted step time, MFU,
 * bubbles, exposed communication and memory out.
 *
 * It builds the per-rank program with the sched module (builders.h, the
 * same program the executor runs), prices every action with the cost model
 * and evaluates the DAG with sched_evaluate (max-plus, buffered sends):
 *   FWD / BWD     the chunk's blocks for one micro-batch, plus the embedding
 *                 on the first stage and the LM head with the loss on the last
 *   SEND_*        the host's cost of posting the send (PlanOptions.send_overhead);
 *                 the transfer itself (alpha-beta over the pipeline link, the
 *                 slowest replica's) is the send -> receive edge, so it hides
 *                 behind whatever compute the receiver still has
 *   RECV_*        free (posted on the p2p stream; its data arrives on the edge)
 *   GRAD_REDUCE   the chunk's gradients: dense over DP x CP, experts over EDP
 *                 (reduce-scatter with the distributed optimizer, else
 *                 all-reduce), in buckets priced one by one (buckets.h: each
 *                 with its own latency, started when backward has produced
 *                 it, serialised on the link); the part still running after
 *                 the chunk's last backward
 *   OPTIM         the Adam update streamed through memory (on the shard with
 *                 the distributed optimizer) plus the exposed part of the
 *                 parameter all-gather
 * The step time is the makespan; MFU = model_flops_per_sequence x global
 * batch / (step time x GPUs x peak). The breakdown follows the critical rank
 * (the one that finishes last) and sums to the step time. */
#ifndef FIVEFOLD_PLAN_SIMULATE_H
#define FIVEFOLD_PLAN_SIMULATE_H

#include <stdio.h>

#include "base/error.h"
#include "plan/cost.h"
#include "plan/memory.h"
#include "sched/partition.h"

/* Everything the simulator prices a program with, per stage and rank. */
typedef struct PlanStageCosts {
  int pp, vpp, num_stages;
  SchedPartition part;
  PlanPassCost *stage;      /* per virtual stage, one micro-batch */
  double *grad_reduce;      /* per stage: priced GRAD_REDUCE (exposed part) */
  double *grad_reduce_full; /* per stage: the whole reduction before overlap */
  int *buckets;             /* per stage: gradient buckets */
  double bucket_params;     /* the uniform bucket size priced (elements, as the runtime rounds it) */
  double *optim_compute;    /* per pipeline rank */
  double *optim_comm;       /* per pipeline rank: exposed parameter all-gather */
  double *link_next;        /* per pipeline rank: one message to rank + 1 (wrapping) */
  double *link_prev;        /* per pipeline rank: one message to rank - 1 (wrapping) */
  double send_overhead;
  /* Per stage: the part of bwd_total a split backward (zb-h1) moves into
   * BWD_WEIGHT, the weight-gradient GEMMs of the attention projections and
   * dense MLPs (what fivefold's runtime defers: at tp 1, not GPT-2's MLP). */
  double *bwd_weight;
  int split_backward; /* the priced program splits its backward */
  /* Every action takes at least this share of its price: 1, or the core
   * share when ranks share cores and processor sharing may run the CPU work
   * faster than priced (core_share.h); scales the lower bound. */
  double min_time_scale;
} PlanStageCosts;

int plan_stage_costs_build(const PlanCostModel *cm, PlanStageCosts *out, Error *err);
void plan_stage_costs_free(PlanStageCosts *sc);

/* A lower bound on the step time valid for every schedule: rank r cannot
 * start before the first micro-batch crossed the stages before it, is then
 * busy with its own forwards and backwards, and its last backward must still
 * travel back through those stages before rank 0's optimizer step. Used by
 * the search to skip configurations that cannot beat the best found. */
double plan_stage_costs_lower_bound(const PlanStageCosts *sc, int microbatches);

typedef struct PlanSimOptions {
  int exposed_p2p;        /* evaluate again with free transfers to measure exposed pipeline transfers */
  const char *trace_path; /* write the predicted timeline as a Chrome trace */
  const char *program_path; /* write the priced program (sched_program_write_json) */
} PlanSimOptions;

typedef struct PlanResult {
  PlanConfig cfg;         /* as simulated, with the partition filled in */
  double step_time;       /* s */
  double mfu;             /* model FLOPs / (step x GPUs x peak) */
  double tokens_per_s;
  double model_flops;     /* per iteration */
  double bubble_fraction; /* evaluator: share of rank-time not in FWD/BWD/OPTIM */
  PlanBreakdown breakdown; /* critical rank, sums to step_time */
  int critical_rank;
  /* Ranks sharing cores (core_share.h): the devices a node's cores run at
   * once and the share the prices are at, when the step was priced by
   * processor sharing; 0 when it was not. */
  double core_capacity, core_share;
  int pp, num_stages;
  PlanPassCost *stage;     /* per virtual stage (owned) */
  PlanPassCost dense_layer, moe_layer, embedding, head; /* one block / extra, one micro-batch */
  PlanRankMemory *memory;  /* per pipeline rank (owned) */
  double peak_memory;      /* bytes, the fullest rank */
  int fits;                /* peak_memory <= the device capacity */
  char bottleneck[32];
  /* Device mapping (mapping.h), when one was searched: rank r runs on device
   * device_of_rank[r] (owned; NULL: rank order) and step_time is priced
   * under it; rank_order_step_time is the same configuration in rank order. */
  int *device_of_rank;
  int num_mapped;
  double rank_order_step_time;
  long mapping_evaluated;
  int mapping_exhaustive;
  char mapping_method[48];
  /* The gradient-bucket search's choice (buckets.h), when one was made;
   * not owned. The plan file records it and train --plan applies it. */
  const struct PlanBucketChoice *bucket_choice;
  /* The fused kernels priced (PlanOptions.fuse_swiglu / fuse_bias_gelu /
   * fuse_norm_residual), and the fusion search's choice when one was made
   * (fusion.h; not owned). */
  int fuse_swiglu, fuse_bias_gelu, fuse_norm_residual;
  const struct PlanFusionChoice *fusion_choice;
} PlanResult;

int plan_simulate(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt, const PlanConfig *cfg,
                  const PlanSimOptions *sim, PlanTopoCache *cache, PlanResult *out, Error *err);
void plan_result_free(PlanResult *r);
/* Deep copy (dst owns its arrays). */
int plan_result_copy(PlanResult *dst, const PlanResult *src);

/* The bottleneck: the largest component of the critical rank's breakdown
 * (GEMMs, attention, elementwise work, each exposed communication kind,
 * the optimizer, bubbles: every row of PlanComponent) with its share of the
 * step, e.g. "expert GEMM 71%"; "none" for an empty step. */
const char *plan_result_bottleneck(const PlanResult *r, char *buf, size_t size);

/* Explain mode: where the step goes (components of the critical rank with
 * shares), per-stage forward/backward times, and memory per rank. */
void plan_result_explain(const PlanResult *r, const ModelConfig *model, FILE *f);

#endif
