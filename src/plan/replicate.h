/* Stage replication (DAPPLE, arXiv 2007.01045) in the planner and the
 * simulator: every pipeline stage may have its own data-parallel width.
 *
 * A replicated stage splits each micro-batch across its w replicas, so its
 * forward and backward per micro-batch take 1/w of one device's time (the
 * smaller GEMMs' lower efficiency is not modelled); the simulator runs
 * the program the runtime runs (sched/replicated.h: a list per device, each
 * transfer split into pieces by sequences, each piece priced as its share
 * of one micro-batch's p2p bytes between its two devices; the pivot formula
 * below takes p2p bytes / min(w_s, w_{s+1}) over the slowest pair); each stage's gradients are all-reduced (reduce-scattered
 * with the distributed optimizer) over its own replicas, placed on
 * consecutive devices; its activations and transient buffers per replica
 * shrink by w, its optimizer state by w when sharded.
 *
 * A stage's width must divide the micro-batch (its sequences split evenly
 * over the replicas, as DAPPLE splits samples).
 *
 * The planner's dynamic program runs over (layers, devices): best[s][l][g]
 * = the smallest heaviest per-replica stage time when the first l layers
 * fill s stages on g devices, with a stage of layers [j, l) on w devices
 * costing (F + B of its layers, + embedding on the first, + LM head on the
 * last) / w. For each stage count it yields one (partition, widths)
 * candidate; each is simulated (the program of sched/, priced as above)
 * and the fastest that fits in memory wins.
 *
 * The pivot-stage latency of DAPPLE cross-checks the simulator: with F_s,
 * B_s a stage's per-micro-batch forward and backward (already divided by
 * its width), M micro-batches and AR_s its gradient reduction,
 *   T = max_Q [ sum_{s != Q} (F_s + B_s) + M (F_Q + B_Q) ]
 *       + max(0, max_s (AR_s - sum_{s' < s} B_{s'}))
 * (warm-up to the pivot Q and back, Q busy with all its micro-batches, and
 * the reductions left exposed after the remaining backward of earlier
 * stages); exact for equal stages on free links. Applied to a simulator's
 * stage costs (plan_stage_costs_pivot_latency), AR_s also holds the
 * stage's optimizer step, and one transfer each way per boundary is added
 * (the first micro-batch's trip and the last one's return). */
#ifndef FIVEFOLD_PLAN_REPLICATE_H
#define FIVEFOLD_PLAN_REPLICATE_H

#include <stdio.h>

#include "base/error.h"
#include "plan/simulate.h"

/* Adjusts stage costs built for cfg (stage_width given) to replication. */
int plan_stage_costs_replicate(const PlanCostModel *cm, PlanStageCosts *sc, Error *err);
/* Scales per-rank memory (plan_memory_estimate of the unreplicated stages). */
void plan_memory_replicate(const PlanConfig *cfg, PlanRankMemory *memory);
/* Checks a configuration with stage widths: what replication supports. */
int plan_replication_validate(const PlanConfig *cfg, const ModelConfig *model, const ClusterSpec *cluster, Error *err);

/* The program the runtime runs for a replicated configuration
 * (sched/replicated.h): stage_sched (pp = the stages) on every replica,
 * the transfers in pieces by sequences. */
int plan_replicated_program(const PlanConfig *cfg, const SchedConfig *stage_sched, SchedProgram **out, Error *err);
/* The transfer time of one piece: its share (seq_count / sequences) of
 * one micro-batch's p2p bytes between the two ranks' devices. */
typedef struct PlanReplicaTransfer {
  const ClusterSpec *cluster;
  double p2p_bytes; /* one micro-batch's activation */
  int sequences;    /* of one micro-batch */
} PlanReplicaTransfer;
double plan_replicated_transfer(const SchedAction *send, const SchedAction *recv, void *ctx);

/* The pivot-stage formula on explicit per-stage costs. */
double plan_pivot_latency(const double *fwd, const double *bwd, const double *reduce, int stages, int microbatches,
                          int *pivot);
/* The pivot formula for a simulated stage cost table. */
double plan_stage_costs_pivot_latency(const PlanStageCosts *sc, int microbatches, int *pivot);

/* What the dynamic program charges a stage besides its compute, and the
 * memory it must fit in (DAPPLE's objective; every field optional). A
 * stage s of S (0-based) of width w over layers j..l-1 costs, per
 * micro-batch,
 *   compute / w
 *   + 2 transfer(boundary_bytes / w)        (s < S-1: its boundary to the
 *                                            next stage, activation out and
 *                                            its gradient back)
 *   + reduce(gradient bytes of j..l-1, w) / microbatches
 *                                           (w > 1: the replicas' gradient
 *                                            reduction, the step's tail,
 *                                            spread over its micro-batches)
 * and is infeasible where a replica's state_per_grad_byte x its gradient
 * bytes + its activation bytes / w x min(S - s, microbatches) (the
 * micro-batches 1F1B keeps in flight at that depth) exceed capacity. */
typedef struct PlanReplicationTerms {
  int microbatches;
  const double *grad_bytes; /* [L] one layer's gradient */
  double first_grad, last_grad; /* the ends' (embedding; final norm and head) */
  const double *act_bytes;  /* [L] activations one layer keeps per micro-batch */
  double first_act, last_act;
  double state_per_grad_byte; /* weights + gradients + optimizer state per gradient byte */
  double capacity;            /* bytes for them on a device; <= 0: no limit */
  double boundary_bytes;      /* one micro-batch's activation across a boundary */
  double (*transfer)(double bytes, void *ctx);
  double (*reduce)(double bytes, int width, void *ctx);
  void *ctx;
} PlanReplicationTerms;

/* One stage's cost per micro-batch under terms (NULL: compute / width
 * alone), INFINITY where it does not fit: `stage` of `stages`, `width`
 * devices, layers [first, end) with the given compute (ends included). */
double plan_replication_stage_cost(const PlanReplicationTerms *terms, int num_layers, int stage, int stages,
                                   int width, int first, int end, double compute);

/* The (layers, devices) dynamic program: exactly `stages` stages on
 * exactly `devices` devices; layer_cost[L] per device and micro-batch,
 * first_extra / last_extra on the first and last stage; a width must
 * divide `split` (the micro-batch's sequences; 0: any width). Minimises
 * the heaviest stage's plan_replication_stage_cost under terms (NULL:
 * compute alone). Fills layers[] and width[] and returns that cost
 * (INFINITY when no such partition exists or none fits). */
double plan_replication_dp(const double *layer_cost, int num_layers, double first_extra, double last_extra,
                           int devices, int stages, int split, const PlanReplicationTerms *terms, int *layers,
                           int *width);

typedef struct PlanReplicationCandidate {
  PlanConfig cfg;       /* pp = stages, stage_width and layers_per_stage filled */
  double dp_objective;  /* s: the heaviest stage's cost per micro-batch (PlanReplicationTerms) */
  double pivot_time;    /* s: the pivot formula on the simulator's stage costs */
  int pivot;
  double step_time;     /* s: simulated */
  int fits;
} PlanReplicationCandidate;

/* The replicated plan for `devices` devices of cluster: a dense model (or
 * an MoE on one EP rank), tp = cp = 1, one chunk per rank, micro-batch and
 * global batch of base (its schedule: 1F1B, or GPipe when asked). Up to
 * max_stages stages (0: the layer count). out[max_stages] receives every
 * stage count's candidate (stages - 1 indexes it); *best the fastest that
 * fits (-1: none). */
int plan_replication_search(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                            const PlanConfig *base, int devices, int max_stages, PlanReplicationCandidate *out,
                            int *best, Error *err);

/* `plan --replicate-stages`: searches replication on `devices` devices with
 * best's micro-batch, batch and precision, prints every stage count's
 * candidate (layers x width, simulated, pivot formula) and what
 * replication buys over best; when a replicated plan is faster and fits it
 * replaces best (its prediction and stage widths). */
int plan_replicate_stages_cli(PlanResult *best, const ModelConfig *model, const ClusterSpec *cluster,
                              const PlanOptions *opt, int devices, FILE *f, Error *err);

#endif
