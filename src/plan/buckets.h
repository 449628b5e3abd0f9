/* Gradient-tensor fusion (after DisCo, arXiv 2209.12769): which gradients
 * share one reduction, priced bucket by bucket, and the searches over it.
 *
 * The model works on any network given as a list of layers in the order
 * backward finishes them (for a transformer stage: LM head, blocks from the
 * last to the first, embedding; for a feed-forward net of nets/: its
 * layers from the output back), each with its backward time and its
 * gradient elements per reduction group (dense over DP x CP, experts over
 * EDP). A bucket is a contiguous run of gradient elements in that order,
 * never across a segment boundary (PlanGradLayer.starts_segment: the
 * runtime cuts at model chunks and, with an MoE grid, around every expert
 * range, dp_grads.h):
 *  - it is ready when backward has produced its last element (the end of
 *    the layer holding it);
 *  - its reduction costs its own collective, latency included, so many
 *    small buckets pay many latencies;
 *  - reductions are serialised on the link: a bucket starts at
 *    max(ready, previous bucket's finish);
 *  - with overlap f < 1 (no asynchronous progress: f = 0) a bucket's start
 *    moves towards the end of backward: ready' = ready + (1 - f)(B - ready),
 *    B the backward time.
 * Exposed time = max(0, last finish - B): what the step waits for after
 * backward. Large buckets start late (little overlap), small ones pay many
 * latencies, so the exposed time has an interior optimum whenever the
 * reductions can overlap; without overlap the largest buckets win.
 *
 * Two searches:
 *  - uniform sizes, the only layout fivefold's runtime runs (dp_grads.h:
 *    one bucket size, buckets cut from the top of each segment), driven by
 *    the simulator (plan_buckets_search_uniform: every candidate is a full
 *    plan_simulate). plan_bucket_candidate_sizes lists every size at which
 *    some stage's bucket count changes (ceil(n / k) for k buckets, up to
 *    64), all simulated: the count is searched exhaustively. Within a
 *    count the boundaries still move with the size; between the sizes
 *    where a boundary crosses a layer end the step is convex in the size
 *    (max-plus of linear terms), and a golden-section search over the
 *    sizes between the best count's neighbours refines it (checked
 *    against a sweep of 200 sizes in tests/plan/test_buckets.c);
 *  - free boundaries at layer ends (what DisCo searches; not run by the
 *    runtime, reported as what it would add): plan_buckets_search_boundaries,
 *    depth-first backtracking over "cut after this layer or not" with a
 *    bound (the remaining elements cost at least one fused reduction after
 *    the buckets so far, and the last bucket starts no earlier than its
 *    last layer's end), exact within a node budget when a reduction's time
 *    is subadditive in its elements (latency paid once per bucket). */
#ifndef FIVEFOLD_PLAN_BUCKETS_H
#define FIVEFOLD_PLAN_BUCKETS_H

#include <stdio.h>

#include "base/error.h"
#include "plan/simulate.h"

#define PLAN_BUCKET_GROUPS 2 /* 0: dense gradients over DP x CP; 1: expert gradients over EDP */

typedef struct PlanGradLayer {
  double elements[PLAN_BUCKET_GROUPS]; /* gradient elements this layer reduces over each group */
  double bwd_seconds;                  /* its backward time */
  int starts_segment; /* 1: no bucket spans from the layer before into this one (a cut of the runtime's) */
} PlanGradLayer;

/* Seconds to reduce `elements` gradient elements over `group` (latency
 * included; 0 elements cost 0). */
typedef double (*PlanReduceTimeFn)(const void *ctx, int group, double elements);

typedef struct PlanBucketModel {
  const PlanGradLayer *layer; /* in the order backward finishes them */
  int num_layers;
  double overlap; /* share of the reduction that may run behind backward (PlanOptions.dp_overlap) */
  PlanReduceTimeFn reduce_time;
  const void *ctx;
} PlanBucketModel;

typedef struct PlanBucketPrice {
  int buckets;
  double backward; /* s: the backward pass the buckets hide behind */
  double reduce;   /* s: sum of the buckets' reductions */
  double finish;   /* s: the last reduction's end, from backward's start */
  double exposed;  /* s: max(0, finish - backward) */
} PlanBucketPrice;

/* Total gradient elements of the model's layers. */
double plan_buckets_total_elements(const PlanBucketModel *bm);

/* Prices buckets ending at the cumulative element counts ends[0..n) (in
 * backward order, increasing, ends[n-1] = the total). */
int plan_buckets_price(const PlanBucketModel *bm, const double *ends, int n, PlanBucketPrice *out, Error *err);

/* Uniform buckets of `size` elements, as the runtime cuts them: each
 * segment from the first element backward produces, its remainder last. */
int plan_buckets_price_uniform(const PlanBucketModel *bm, double size, PlanBucketPrice *out, Error *err);

/* Free boundaries at layer ends: the cuts minimising the exposed time
 * (ties: fewer buckets). layer_cut[i] = 1 when a bucket ends after layer i
 * (layer_cut[num_layers - 1] is always 1). *exhaustive = 0 when the node
 * budget ran out (the best found is returned). */
int plan_buckets_search_boundaries(const PlanBucketModel *bm, long node_budget, int *layer_cut, PlanBucketPrice *best,
                                   long *nodes, int *exhaustive, Error *err);

/* Every uniform size (in elements) at which the layout of some segment of
 * segment_elements[0..n) changes: ceil(e / k) for k = 1 .. max_buckets,
 * at least min_size, sorted descending and unique. Returns the count
 * written to sizes (at most capacity). */
int plan_bucket_candidate_sizes(const double *segment_elements, int n, int max_buckets, double min_size,
                                double *sizes, int capacity);

/* The step time at uniform buckets of `size` elements, from any simulator
 * (the transformer's plan_simulate, the nets' plan_net_simulate). */
typedef int (*PlanStepAtSizeFn)(void *ctx, double size, double *step_time, Error *err);

typedef struct PlanSizeSearch {
  double best_size; /* elements; < 0 when there was no candidate */
  double best_time; /* s */
  int num_candidates;
  long simulations;
} PlanSizeSearch;

/* The uniform-size search both simulators share: every candidate size of
 * segment_elements[0..n) (plan_bucket_candidate_sizes: every bucket count
 * up to max_buckets per segment, at least min_size) priced by `step`, then
 * a golden-section search between the best candidate's neighbours (the
 * step is convex in the size between the sizes where a boundary crosses a
 * layer end). Ties go to the larger size (fewer messages). */
int plan_buckets_search_sizes(const double *segment_elements, int n, int max_buckets, double min_size,
                              PlanStepAtSizeFn step, void *ctx, PlanSizeSearch *out, Error *err);

/* ---- driven by the simulator ---- */

/* The gradient layers of stage s of a priced configuration (backward
 * order), for the bucket model: out must hold 2 x the stage's layers + 2
 * (with an MoE grid a block's experts and dense tensors are two entries). */
int plan_stage_grad_layers(const PlanCostModel *cm, const SchedPartition *part, int stage, PlanGradLayer *out);

/* Reduction time of one group for a configuration (ctx = the PlanCostModel). */
double plan_stage_reduce_time(const void *ctx, int group, double elements);

typedef struct PlanBucketChoice {
  double bucket_params;      /* the chosen uniform size (gradient elements) */
  double bucket_mb;          /* the same as the runtime's --bucket-mb (fp32 gradients) */
  double default_params;     /* the size priced before the search */
  double default_step_time;  /* s */
  double step_time;          /* s, with the chosen size */
  int buckets_per_stage[PLAN_MAX_STAGES];
  int num_stages;
  long simulations;
  int num_candidates;
  /* Free layer boundaries on the critical stage (not run by the runtime):
   * its exposed reduction with the chosen uniform size and with the best
   * boundaries. */
  int boundary_stage;
  double uniform_exposed, boundary_exposed;
  int boundary_buckets;
  int boundary_exhaustive;
} PlanBucketChoice;

/* Searches the uniform bucket size of cfg by simulation (every candidate
 * size, plan_bucket_candidate_sizes, up to 64 buckets per stage, then the
 * golden-section refinement above), and sets
 * opt_out->bucket_params to the winner (bucket_max_share 0: the size is
 * explicit). Ties go to the larger size (fewer messages). */
int plan_buckets_search_uniform(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                                const PlanConfig *cfg, PlanBucketChoice *out, PlanOptions *opt_out, Error *err);

/* What the search bought, for plan's output and --explain. */
void plan_bucket_explain(const PlanBucketChoice *c, FILE *f);

#endif
