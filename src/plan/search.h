/* The search: which parallel configuration to book.
 *
 * It enumerates TP, CP, PP, VPP (DP derived), EP and ETP (EDP derived;
 * folding lets the MoE grid differ from the attention grid over the same
 * ranks, PP shared), micro-batch size, recomputation and the distributed
 * optimizer, keeps what divides (parallel.h's rules) and fits in memory, and
 * ranks the rest by simulated step time (simulate.h). TP and ETP stay inside
 * a node.
 *
 * Pruning, in order:
 *  - runtime: variants the runtime planned for does not run (space.runtime);
 *  - memory lower bound: the model state of the average pipeline rank
 *    (before any partition is chosen) must fit;
 *  - memory: the chosen partition's peak over the schedule must fit;
 *  - dominated: among variants of one layout that fit, more recomputation
 *    and an unsharded optimizer are never faster under this cost model, so
 *    only the one with the least recomputation and sharding (when allowed)
 *    goes on;
 *  - bound: candidates are simulated in order of a lower bound on their step
 *    time (plan_stage_costs_lower_bound) and the rest are dropped once the
 *    bound reaches the K-th best simulated time.
 * The survivors' programs come from sched/ exactly as the executor would run
 * them, so the ranking accounts for bubbles, exposed transfers and uneven
 * stages, not just a formula. */
#ifndef FIVEFOLD_PLAN_SEARCH_H
#define FIVEFOLD_PLAN_SEARCH_H

#include <stdio.h>

#include "base/error.h"
#include "plan/runtime_caps.h"
#include "plan/simulate.h"

typedef struct PlanSearchSpace {
  int gpus, seq_len, global_batch_size;
  PlanDtype dtype;
  int max_tp, max_cp, max_pp, max_vpp, max_ep, max_etp; /* 0: no limit beyond the rules */
  int min_pp;                /* 0: no lower limit (a layout study: pipelines of at least this many stages) */
  int micro_batch_sizes[8];
  int num_micro_batch_sizes; /* 0: 1, 2, 4, 8 */
  int allow_folding;         /* 0: ETP = TP and EP a sub-group of DP (the coupled layout) */
  int allow_recompute[PLAN_NUM_RECOMPUTE];
  int allow_distributed_optimizer; /* 1: may shard; 0: never */
  int require_distributed_optimizer;
  PlanRuntime runtime; /* variants this runtime does not run are dropped (runtime_caps.h) */
  unsigned recompute_modules; /* selective variants' PLAN_RECOMPUTE_* bits (0: the attention core) */
} PlanSearchSpace;

void plan_search_space_default(PlanSearchSpace *space, int gpus, int seq_len, int global_batch_size);

typedef struct PlanSearchStats {
  long considered;       /* complete configurations that satisfy the divisibility rules */
  long pruned_memory_lb; /* dropped by the model-state lower bound */
  long pruned_memory;    /* dropped because the peak does not fit */
  long pruned_dominated; /* more recomputation or an unsharded optimizer than a variant that fits */
  long pruned_bound;     /* lower bound no better than the K-th best */
  long pruned_runtime;   /* the runtime planned for does not run them (runtime_caps.h) */
  long simulated;
} PlanSearchStats;

typedef struct PlanSearchResult {
  PlanResult *top; /* best first */
  int num_top;
  PlanSearchStats stats;
} PlanSearchResult;

int plan_search(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                const PlanSearchSpace *space, int top_k, PlanSearchResult *out, Error *err);
void plan_search_result_free(PlanSearchResult *r);

/* ---- output (search_output.c) ---- */

/* The ranked table: rank, layout, schedule, predicted MFU, step time,
 * tokens/s, peak memory per GPU, bottleneck; then how many were considered
 * and pruned. */
void plan_search_print_table(const PlanSearchResult *r, const ClusterSpec *cluster, FILE *f);

/* One-line header for a configuration table and a row (shared with simulate). */
void plan_result_print_header(FILE *f);
void plan_result_print_row(const PlanResult *r, int rank, FILE *f);

/* The plan file `fivefold train --plan` reads:
 * {"format": "fivefold.plan", "version": 1, "model", "cluster", "gpus", "seq_length",
 *  "parallel": {tp, cp, dp, pp, vpp, ep, etp, edp, micro_batch_size, global_batch_size,
 *               schedule, recompute, distributed_optimizer, layers_per_stage},
 *  "prediction": {step_time_s, mfu, tokens_per_s, bubble_fraction, peak_memory_GiB,
 *                 memory_GiB_per_stage, bottleneck, breakdown_s},
 *  "search": {considered, pruned, simulated} (when a search produced it),
 *  "mapping": {device_of_rank, method, rank_order_step_time_s, step_time_s,
 *              simulations} (when the result carries a device mapping);
 *  parallel.stage_widths under stage replication (plan/replicate.h)} */
int plan_write_json(const PlanResult *best, const PlanSearchStats *stats, const char *model_name,
                    const char *cluster_name, const char *path, Error *err);
/* The same with "model_identity" (plan_file.h): the name, the model's
 * fingerprint and summary, which `fivefold train --plan` checks. */
int plan_write_json_for_model(const PlanResult *best, const PlanSearchStats *stats, const char *model_name,
                              const ModelConfig *model, const char *cluster_name, const char *path, Error *err);

#endif
