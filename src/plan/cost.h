/* The cost model: what one piece of work takes on the cluster, in seconds.
 *
 *  - collectives (cost_collective.c): alpha-beta per algorithm (ring, tree,
 *    hierarchical) on a group placed by plan_group_topology, so a group that
 *    stays in a node pays NVLink prices and one that crosses nodes pays the
 *    network's; all-to-all splits its bytes into on-node and off-node parts;
 *  - compute (cost_compute.c): GEMM = FLOPs / (peak x efficiency(FLOPs)),
 *    never faster than its bytes over memory bandwidth nor the kernel floor;
 *    flash attention with its own efficiencies; bandwidth-bound kernels
 *    (norms, SwiGLU, softmax, routing, permutation) by bytes / bandwidth;
 *  - layers (cost_layer.c): the forward and backward of one transformer
 *    block (dense or MoE), the embedding and the LM head for one
 *    micro-batch on one rank under TP with sequence parallelism, CP ring
 *    attention, EP/ETP token dispatch, recomputation and the overlap
 *    assumptions of PlanOptions; every time is split into components so the
 *    simulator can explain where a step goes.
 * Every constant the model uses comes from the ClusterSpec (hardware and
 * calibration) or PlanOptions (runtime behaviour), so calibration can
 * replace them from a spec file. */
#ifndef FIVEFOLD_PLAN_COST_H
#define FIVEFOLD_PLAN_COST_H

#include "base/error.h"
#include "model/config.h"
#include "plan/cluster.h"
#include "plan/parallel.h"

/* ---- collectives ---- */

/* Time of one collective on a group, bytes per rank meaning:
 *   all_reduce      the buffer every rank holds (input = output size)
 *   reduce_scatter  the full input buffer (each rank keeps bytes / n)
 *   all_gather      the full output buffer (each rank contributes bytes / n)
 *   all_to_all      what one rank sends in all (including its own share)
 *   p2p             the message between two neighbours of the group
 * algo AUTO takes the fastest; *chosen (may be NULL) receives the pick. */
double plan_collective_time(const ClusterSpec *cluster, const PlanGroupTopo *group, PlanCollective kind, double bytes,
                            PlanCollAlgo algo, PlanCollAlgo *chosen);

/* One gradient bucket's reduction of `bytes` as the runtime runs it: the
 * collective's price times the calibrated factor for a bucket of that size
 * (PlanOptions.grad_reduce_factor), plus the runtime's own cost per bucket
 * (PlanOptions.bucket_overhead); 0 on a group of one or for no bytes. */
double plan_bucket_reduce_time(const ClusterSpec *cluster, const PlanOptions *opt, const PlanGroupTopo *group,
                               PlanCollective kind, double bytes);

/* Point-to-point time between two devices (calibrated p2p alpha-beta when
 * the spec has it, else the link x efficiency). */
double plan_p2p_time(const ClusterSpec *cluster, int device_a, int device_b, double bytes);

/* ---- compute primitives ---- */

int plan_dtype_bytes(PlanDtype dtype);
/* Bytes of an activation, message or weight copy: the dtype's, or 4 under
 * PlanOptions.fp32_activations. */
int plan_activation_bytes(const PlanOptions *opt, PlanDtype dtype);
double plan_peak_flops(const ClusterSpec *cluster, PlanDtype dtype);
/* C[m x n] = A[m x k] B[k x n]. */
double plan_gemm_time(const ClusterSpec *cluster, PlanDtype dtype, double m, double n, double k);
/* The same for a product whose row count changes every step (experts,
 * whose rows follow the routing), priced on the spec's gemm_efficiency_bf16_rows_vary in bf16
 * and gemm_efficiency_rows_vary in fp32 where the spec has them. */
double plan_gemm_time_rows_vary(const ClusterSpec *cluster, PlanDtype dtype, double m, double n, double k);
/* Fused attention with the given matmul FLOPs (the kernel's real work,
 * causal skipping included) and bytes moved, in kernels over query_tokens
 * queries (shorter kernels are less efficient, see cluster.h). */
double plan_attention_time(const ClusterSpec *cluster, PlanDtype dtype, double flops, double bytes,
                           double query_tokens, int backward);
/* Attention of a context-parallel rank (its chunks against every rank's
 * K/V block) when the spec measured the ring's block kernels; otherwise
 * returns causal_time, the causal kernel's price for the same work. */
double plan_ring_attention_time(const ClusterSpec *cluster, PlanDtype dtype, double flops, double bytes,
                                double chunk_tokens, int backward, double causal_time);
/* A bandwidth-bound kernel moving bytes (reads + writes). */
double plan_memory_time(const ClusterSpec *cluster, double bytes);
/* The per-step update of `params` local parameters: at the spec's measured
 * rate of the runtime's update (ClusterSpec.optimizer_per_param), else as
 * streaming update_bytes per parameter through memory. */
double plan_optimizer_time(const ClusterSpec *cluster, double params, double update_bytes);

/* ---- components of a step ---- */

typedef enum PlanComponent {
  PLAN_COMP_ATTN_GEMM = 0, /* QKV and output projections */
  PLAN_COMP_ATTN_CORE,     /* flash attention */
  PLAN_COMP_MLP_GEMM,      /* dense and shared-expert MLP GEMMs */
  PLAN_COMP_EXPERT_GEMM,   /* routed expert GEMMs */
  PLAN_COMP_ROUTING,       /* router, top-k, permutation, dropless sync */
  PLAN_COMP_ELEMENTWISE,   /* norms, residuals, RoPE, SwiGLU */
  PLAN_COMP_EMBEDDING,
  PLAN_COMP_LM_HEAD,       /* output GEMM and loss */
  PLAN_COMP_RECOMPUTE,     /* forward work repeated in backward */
  PLAN_COMP_TP_COMM,       /* sequence-parallel all-gather / reduce-scatter */
  PLAN_COMP_CP_COMM,       /* exposed ring K/V exchange */
  PLAN_COMP_EP_COMM,       /* MoE all-to-all */
  PLAN_COMP_ETP_COMM,      /* expert-TP all-gather / reduce-scatter */
  PLAN_COMP_PP_COMM,       /* pipeline send overhead and exposed transfers */
  PLAN_COMP_DP_COMM,       /* exposed gradient reduction and parameter gather */
  PLAN_COMP_OPTIMIZER,
  PLAN_COMP_BUBBLE,        /* idle: pipeline fill/drain and imbalance */
  PLAN_NUM_COMPONENTS
} PlanComponent;

const char *plan_component_name(PlanComponent c); /* "attention GEMM", ... */
int plan_component_is_comm(PlanComponent c);

typedef struct PlanBreakdown {
  double t[PLAN_NUM_COMPONENTS];
} PlanBreakdown;

double plan_breakdown_total(const PlanBreakdown *b);
void plan_breakdown_add(PlanBreakdown *dst, const PlanBreakdown *src, double scale);

/* Forward and backward of one piece of the model for one micro-batch. */
typedef struct PlanPassCost {
  PlanBreakdown fwd, bwd;
  double fwd_total, bwd_total;
} PlanPassCost;

/* ---- the cost model of one configuration ---- */

typedef struct PlanTopoCache PlanTopoCache;

typedef struct PlanCostModel {
  const ModelConfig *model;
  const ClusterSpec *cluster;
  const PlanOptions *opt;
  const PlanConfig *cfg;
  PlanGroupTopo group[PLAN_NUM_GROUP_KINDS];
  double expert_rank_load; /* busiest EP rank's routed tokens / the mean */
  double expert_load;      /* load the expert GEMMs and all-to-all are priced at (capacity applied) */
  PlanPassCost dense_layer, moe_layer; /* one block, one micro-batch, one rank */
  /* The same under each recomputation, for per-layer choices
   * (cfg->num_layer_recompute > 0): [0] dense, [1] MoE. */
  PlanPassCost layer_by_recompute[2][PLAN_NUM_RECOMPUTE];
  PlanPassCost embedding, head;        /* extra work of the first and the last stage */
  double p2p_bytes;                    /* one pipeline message (sequence-parallel activation) */
} PlanCostModel;

/* Prices everything for cfg (which must have passed plan_config_finish).
 * The model keeps pointers to its arguments. cache may be NULL. */
int plan_cost_model_init(PlanCostModel *cm, const ModelConfig *model, const ClusterSpec *cluster,
                         const PlanOptions *opt, const PlanConfig *cfg, PlanTopoCache *cache, Error *err);

/* The block cost of layer i (dense or MoE, under its recomputation). */
const PlanPassCost *plan_layer_cost(const PlanCostModel *cm, int layer);

/* Busiest EP rank's share of routed tokens relative to the mean, from a
 * measured distribution when given (PlanOptions.expert_load: one row of E
 * per MoE layer, or one row for all; the mean over the rows of each row's
 * busiest rank), else from the assumed per-expert
 * imbalance (1 + (imbalance - 1) sqrt((ep - 1) / (E - 1)): one expert per
 * rank sees the full imbalance, all experts on every rank none). */
double plan_expert_rank_load(const ModelConfig *model, const PlanOptions *opt, int ep);

/* Worst transfer time of one pipeline message from pipeline rank `from` to
 * `to` over all data/tensor/context replicas. */
double plan_pp_transfer_time(const PlanCostModel *cm, int from, int to, double bytes);

/* ---- topology cache: the search prices many configurations on one cluster;
 * one cache serves one cluster ---- */

struct PlanTopoCache {
  int count;
  struct {
    int size, stride, world;
    PlanGroupTopo topo;
  } entry[512];
};

int plan_group_topology_cached(PlanTopoCache *cache, const ClusterSpec *cluster, const PlanConfig *cfg,
                               PlanGroupKind kind, PlanGroupTopo *out);

#endif
