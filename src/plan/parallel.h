/* One training configuration as the planner sees it (parallel sizes,
 * batch, recomputation, optimizer sharding, schedule, partition), the
 * software assumptions it is priced under, and where each parallel group
 * lands on the cluster.
 *
 * Ranks map to devices one to one (rank r runs on device r, node r /
 * devices_per_node, unless the cluster carries a mapping: plan/mapping.h). Both grids cover the same ranks (DESIGN.md):
 *   attention  tp-cp-dp-pp   rank = tp_i + tp (cp_i + cp (dp_i + dp pp_i))
 *   MoE        etp-ep-edp-pp rank = etp_i + etp (ep_i + ep (edp_i + edp pp_i))
 * so TP and ETP are the fastest-varying (densest, inside a node first) and
 * pipeline groups agree. Dense gradients reduce over DP x CP, expert
 * gradients over EDP. */
#ifndef FIVEFOLD_PLAN_PARALLEL_H
#define FIVEFOLD_PLAN_PARALLEL_H

#include "base/error.h"
#include "model/config.h"
#include "plan/cluster.h"
#include "sched/program.h"

typedef enum PlanRecompute {
  PLAN_RECOMPUTE_NONE = 0,
  PLAN_RECOMPUTE_SELECTIVE, /* the attention core (softmax(QK^T)V) is recomputed in backward */
  PLAN_RECOMPUTE_FULL,      /* every block's forward is recomputed from its input */
  PLAN_NUM_RECOMPUTE
} PlanRecompute;

const char *plan_recompute_name(PlanRecompute r); /* "none", "selective", "full" */
int plan_recompute_from_name(const char *name, PlanRecompute *r);

/* Megatron's --recompute-modules for selective recomputation (a bit set;
 * 0 means Megatron's default, the attention core alone): what each block
 * rebuilds in backward instead of storing. mla_up_proj is not listed: no
 * model fivefold reads has multi-latent attention. */
enum {
  PLAN_RECOMPUTE_CORE_ATTN = 1 << 0, /* softmax(QK^T)V */
  PLAN_RECOMPUTE_LAYERNORM = 1 << 1, /* the two pre-norms: their outputs are not stored */
  PLAN_RECOMPUTE_MLP = 1 << 2,       /* a dense block's MLP (fc1 and activation outputs) */
  PLAN_RECOMPUTE_MOE_ACT = 1 << 3,   /* the experts' SwiGLU: its output is not stored */
  PLAN_RECOMPUTE_MOE = 1 << 4,       /* the whole MoE part: router, dispatch, experts, combine */
  PLAN_RECOMPUTE_SHARED_EXPERTS = 1 << 5
};

/* "core_attn,moe_act" -> bits; -1 with a message naming the bad entry. */
int plan_recompute_modules_parse(const char *list, unsigned *modules, Error *err);
/* "core_attn,layernorm" into buf. */
const char *plan_recompute_modules_describe(unsigned modules, char *buf, size_t size);


typedef struct PlanParallel {
  int tp, cp, dp, pp, vpp; /* attention grid (+ virtual stages per pipeline rank) */
  int ep, etp, edp;        /* MoE grid; edp = world / (etp ep pp) */
} PlanParallel;

#define PLAN_MAX_STAGES 1024

typedef struct PlanConfig {
  PlanParallel par;
  int seq_len;
  int micro_batch_size;  /* sequences per micro-batch per data-parallel replica */
  int global_batch_size; /* sequences per iteration */
  int microbatches;      /* derived: global / (dp x micro) */
  PlanRecompute recompute;
  int distributed_optimizer; /* ZeRO-1: optimizer state sharded over the data-parallel group */
  PlanDtype dtype;           /* training precision: bf16 (mixed) or fp32 */
  SchedScheduleKind schedule; /* derived by plan_config_finish unless given (or set to gpipe) */
  int schedule_given;         /* 1: `schedule` was asked for: kept and checked against pp, vpp */
  int num_given_layers;       /* entries in layers_per_stage; 0 = the planner chooses */
  int layers_per_stage[PLAN_MAX_STAGES];
  /* Stage replication (DAPPLE, plan/replicate.h): pipeline stage s runs on
   * stage_width[s] data-parallel replicas, each taking 1/width of every
   * micro-batch. 0 entries: every stage on one replica per DP rank as
   * above. Only with tp = cp = dp = ep = 1 and vpp 1; the devices are
   * sum(stage_width), stage s on the next stage_width[s] of them. */
  int num_stage_widths;
  int stage_width[PLAN_MAX_STAGES];
  /* Per-layer recomputation (plan/explore_space.h): when num_layer_recompute
   * is the model's layer count, layer l is priced and stored under
   * layer_recompute[l] (a PlanRecompute) and `recompute` is ignored for the
   * blocks; 0: every block under `recompute`. */
  int num_layer_recompute;
  unsigned char layer_recompute[PLAN_MAX_STAGES];
  unsigned recompute_modules; /* PLAN_RECOMPUTE_* bits for selective; 0 = the attention core */
  /* Full recomputation's method (Megatron's --recompute-method and
   * --recompute-num-layers): uniform (0) checkpoints the input of every
   * group of recompute_num_layers blocks (0 or 1: every block) and rebuilds
   * a group at a time; block (1) recomputes only the first
   * recompute_num_layers blocks of every virtual stage, expressed as
   * per-layer choices by plan_recompute_block_apply (stages.h). */
  int recompute_method;
  int recompute_num_layers;
  /* Warm-up depth per pipeline rank of the 1F1B family (1f1b, zb-h1;
   * SchedConfig.warmup): with warmup_set, rank r runs warmup[r] forwards
   * before its first backward; 0: the schedule's own p - r - 1. */
  int warmup_set;
  int warmup[SCHED_MAX_WARMUP_RANKS];
  /* The relative forward/backward durations the schedule builder places
   * sends and receives by (SchedConfig.order_fwd_cost/order_bwd_cost): they
   * decide the program, so the program priced is the program trained only
   * when both build with the same two. order_given 0 (a search): priced by
   * plan_simulate as 1 and the stages' backward/forward time, and recorded
   * in PlanResult.cfg (the plan file carries them, `train --plan` builds
   * with them); 1: the two as set, 0 meaning the scheduler's defaults
   * (1 and 2, what `fivefold train` builds without a plan). */
  int order_given;
  double order_fwd_cost, order_bwd_cost;
} PlanConfig;

static inline unsigned plan_config_recompute_modules(const PlanConfig *cfg) {
  return cfg->recompute_modules ? cfg->recompute_modules : (unsigned)PLAN_RECOMPUTE_CORE_ATTN;
}

/* The schedule part of cfg as a sched configuration (schedule, pp, vpp,
 * micro-batches, warm-up depths, order costs); groups left 0. */
void plan_config_sched(const PlanConfig *cfg, SchedConfig *out);

/* The recomputation block `layer` runs under. */
static inline PlanRecompute plan_config_layer_recompute(const PlanConfig *cfg, int layer) {
  if (cfg->num_layer_recompute > 0 && layer >= 0 && layer < cfg->num_layer_recompute)
    return (PlanRecompute)cfg->layer_recompute[layer];
  return cfg->recompute;
}

typedef enum PlanCollAlgo {
  PLAN_ALGO_AUTO = 0, /* the fastest of the three, as a tuned library would pick */
  PLAN_ALGO_RING,
  PLAN_ALGO_TREE,
  PLAN_ALGO_HIERARCHICAL,
  PLAN_NUM_ALGOS
} PlanCollAlgo;

const char *plan_algo_name(PlanCollAlgo algo);

/* Software assumptions (how the runtime overlaps and balances), separate
 * from the hardware in ClusterSpec. Defaults: plan_options_default, each
 * explained in docs/planner.md. Overlap fractions are in [0, 1]: the share
 * of a communication that hides behind independent compute. */
typedef struct PlanOptions {
  double moe_imbalance;       /* busiest expert's load / mean load (dropless routing) */
  const double *expert_load;  /* optional measured tokens per expert: one row of num_experts per MoE
                                 layer (the run's metrics.jsonl "expert_tokens"), or one for all */
  int num_expert_load;        /* entries in expert_load (a multiple of num_experts when given) */
  double tp_overlap;          /* TP all-gather / reduce-scatter behind GEMMs */
  double cp_overlap;          /* CP ring K/V exchange behind the attention blocks */
  double ep_overlap;          /* MoE all-to-all behind expert compute */
  double dp_overlap;          /* gradient buckets reduced behind the backward pass */
  double param_gather_overlap; /* distributed optimizer: parameter all-gather behind the next forward */
  int grad_reduce_bytes;      /* bytes per gradient element in the reduction (4: fp32) */
  double bucket_overhead;     /* s: each gradient bucket's cost beyond its collective (the runtime's, calibrated) */
  /* The runtime's bucket reduction against the collective's price, by
   * bucket bytes (n 0: 1; PlanRuntimeFacts.grad_reduce_factor). */
  PlanCurve grad_reduce_factor;
  double bucket_params;       /* gradient bucket size in parameters */
  double bucket_max_share;    /* buckets at most this share of a rank's gradient (0: no cap; the runtime's 0.25) */
  double dropless_sync;       /* s: host synchronisation per dropless MoE layer and pass */
  double send_overhead;       /* s: compute-stream time to post one pipeline send */
  PlanCollAlgo algo;          /* collective algorithm */
  /* How the runtime lays out MoE work (defaults: 0, Megatron-Core's):
   * moe_tp_replicated: with tp > 1 and no MoE grid (ep = etp = cp = 1) every
   *   TP rank runs the MoE on the all-gathered sequence with all experts and
   *   keeps its own rows (fivefold's CPU runtime, model.h "sharding"); 0:
   *   each TP rank routes its own sequence-parallel rows to local experts.
   * moe_allgather: the all-gather dispatcher (every rank of EP x ETP sees
   *   every token of the group, partial outputs reduce-scattered back)
   *   instead of the all-to-all. */
  int moe_tp_replicated;
  int moe_allgather;
  /* attention_unfused: the attention core as Megatron-LM ran it before
   * flash attention (arXiv 2104.04473): two batched GEMMs over the full
   * s x s scores (no causal skipping) with a fused scale-mask-softmax and
   * the attention dropout between them, each reading and writing the
   * scores; 0: a flash kernel that skips the masked half. */
  int attention_unfused;
  /* no_sequence_parallel: TP without sequence parallelism (Megatron-LM
   * before arXiv 2205.05198): the same all-reduce volume as the gather /
   * scatter pair, but norms, residuals and dropouts between the blocks run
   * on the whole sequence on every TP rank; pipeline messages stay split
   * over TP (the scatter/gather optimisation of 2104.04473). */
  int no_sequence_parallel;
  /* moe_node_dedup: the all-to-all as DeepEP-style dispatchers run it when
   * EP spans nodes: a token crosses the network once per remote node that
   * holds one of its experts (RDMA) and is forwarded to their GPUs over
   * NVLink there; inside the node it goes over NVLink directly. */
  int moe_node_dedup;
  /* fp32_activations: a low precision covers only the GEMM inputs (and
   * attention's matmuls); activations, communication, gradients and the
   * optimizer stay fp32 (fivefold's CPU runtime, kern/precision.h). 0: the
   * mixed precision of Megatron-Core (bf16 activations and messages, a
   * bf16 copy of the weights). Set from a spec's runtime facts ("cpu"). */
  int fp32_activations;
  /* Fused elementwise kernels (kern/fusion.h; default 1, the runtime's
   * default). 0 prices the unfused chain by its extra memory traffic, each
   * intermediate written and read again (cost_layer.c): SwiGLU 2 elements
   * of [tokens, ffn] forward and 8 backward (its chain and the recomputed
   * activation), bias + GeLU 1 forward and 1 backward. fuse_norm_residual
   * 0: each of a block's two residual adds and the norm after it as
   * separate kernels, 1 element of [tokens, hidden] more forward each (3
   * with a projection bias, its own pass: GPT-2 has two), and in backward
   * both norms' input gradients written and read back before their residual
   * adds, 2 each. */
  int fuse_swiglu, fuse_bias_gelu, fuse_norm_residual;
} PlanOptions;

void plan_options_default(PlanOptions *opt);

/* Which options a command line set explicitly (they win over a spec's facts). */
enum {
  PLAN_GIVEN_DTYPE = 1 << 0,
  PLAN_GIVEN_MOE_TP = 1 << 1,
  PLAN_GIVEN_DP_OVERLAP = 1 << 2,
  PLAN_GIVEN_PARAM_GATHER = 1 << 3,
  PLAN_GIVEN_DROPLESS_SYNC = 1 << 4,
  PLAN_GIVEN_BUCKET = 1 << 5,
  PLAN_GIVEN_CP_OVERLAP = 1 << 6
};

/* The defaults a calibrated spec's runtime facts (cluster.h) imply, set in
 * opt and *dtype except where `given` has the option's bit: the runtime's
 * precision, MoE placement under TP, dp, parameter-gather and CP-ring
 * overlap 1 with asynchronous progress and 0 without, the dropless sync, the default
 * bucket and its cap. Nothing changes when the spec has no facts. */
void plan_options_from_runtime(const PlanRuntimeFacts *rt, unsigned given, PlanOptions *opt, PlanDtype *dtype);

/* "fivefold CPU runtime on host: fp32, MoE replicated over TP, ..." for
 * the commands' output; "" when the spec has no facts. */
const char *plan_runtime_facts_describe(const PlanRuntimeFacts *rt, char *buf, size_t size);

/* Fills defaults into a config: dp, microbatches, edp, schedule (none for
 * pp 1, interleaved for vpp > 1, else 1f1b, unless schedule_given or
 * gpipe: then the schedule asked for, refused when it does not fit),
 * and checks it against the model, the GPU count and the cluster: every
 * size divides what it must, the batch splits into micro-batches, the
 * schedule can be built, TP divides the heads, EP the experts, ETP the
 * expert FFN, CP the sequence into 2 CP chunks. The message says what to
 * change. */
int plan_config_finish(PlanConfig *cfg, const ModelConfig *model, const ClusterSpec *cluster, int gpus, Error *err);

/* A config with all sizes 1 and the given batch; dtype bf16. */
void plan_config_init(PlanConfig *cfg, int seq_len, int global_batch, int micro_batch);

int plan_config_world(const PlanConfig *cfg);
/* Devices the configuration occupies: the world, or the sum of the stage
 * widths under stage replication. */
int plan_config_devices(const PlanConfig *cfg);

/* 1 when the MoE grid is not the one the attention grid implies (expert TP
 * differs from TP, or EP is not a sub-group of DP): MoE parallel folding. */
int plan_config_is_folded(const PlanConfig *cfg);

/* "tp2 cp1 dp8 pp8 vpp7 | ep8 etp1 edp2 | mbs1 interleaved, recompute none, distopt". */
const char *plan_config_describe(const PlanConfig *cfg, char *buf, size_t size);

/* ---- groups on the cluster ---- */

typedef enum PlanGroupKind {
  PLAN_GROUP_TP = 0,
  PLAN_GROUP_CP,
  PLAN_GROUP_DP,
  PLAN_GROUP_DPCP, /* dense gradient reduction */
  PLAN_GROUP_PP,
  PLAN_GROUP_ETP,
  PLAN_GROUP_EP,
  PLAN_GROUP_EDP,
  PLAN_NUM_GROUP_KINDS
} PlanGroupKind;

const char *plan_group_name(PlanGroupKind kind);

/* Where one kind of group lands. Groups of a kind are congruent on regular
 * clusters; when they are not, the worst one is described (most nodes,
 * fewest members on a node, slowest links). */
typedef struct PlanGroupTopo {
  int size;       /* ranks per group */
  int stride;     /* rank distance between consecutive members */
  int nodes;      /* nodes the worst group spans */
  int per_node;   /* fewest members on one of its nodes */
  PlanLink intra; /* slowest nominal link between ring neighbours on one node */
  PlanLink inter; /* slowest nominal link between ring neighbours on different nodes */
} PlanGroupTopo;

/* Members of a group are base + i x stride, i < size. */
void plan_group_shape(const PlanConfig *cfg, PlanGroupKind kind, int *size, int *stride);
int plan_group_topology(const ClusterSpec *cluster, const PlanConfig *cfg, PlanGroupKind kind, PlanGroupTopo *out);

/* Rank (= device) of attention-grid coordinates. */
int plan_attention_rank(const PlanParallel *par, int tp_i, int cp_i, int dp_i, int pp_i);

#endif
