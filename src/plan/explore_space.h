/* Plan spaces with per-layer choices, and the explorers that search them.
 *
 * Around one finished configuration (the layout: TP, PP, micro-batch, ...)
 * a plan is a vector of decisions:
 *   - one recomputation per layer group (plan_config_layer_recompute): a
 *     group is one layer, a run of consecutive layers, or every layer of one
 *     kind (dense or MoE) in mixed models; recomputation adds the forward
 *     work again in backward (cost model) and frees stored activations
 *     (memory model);
 *   - one offset per pipeline stage boundary: the boundary moves up to
 *     max_shift layers from where the layout's own partition puts it, so
 *     stages hold uneven numbers of layers.
 * One evaluation is one simulation (simulate.h) with the memory check:
 * plans whose peak does not fit are infeasible and never become the best.
 * Decision vectors that leave a stage without a layer are invalid and cost
 * no simulation. Results are cached, so a plan visited again is free and
 * the budget counts distinct simulations.
 *
 * Explorers (each records into the space, which keeps the best feasible):
 *   exact  every decision vector in odometer order (small spaces);
 *   sa     simulated annealing (explore_sa.c);
 *   dqn    a deep Q-network choosing decision after decision as in Auto-MAP
 *          (explore_dqn.c). */
#ifndef FIVEFOLD_PLAN_EXPLORE_SPACE_H
#define FIVEFOLD_PLAN_EXPLORE_SPACE_H

#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "plan/simulate.h"

#define PLAN_EXPLORE_MAX_DECISIONS (MODEL_MAX_LAYERS + PLAN_MAX_STAGES)

typedef enum PlanExploreGroups {
  PLAN_EXPLORE_GROUP_LAYER = 0, /* one choice per layer (or per run of group_size layers) */
  PLAN_EXPLORE_GROUP_KIND       /* one choice for the dense layers, one for the MoE layers */
} PlanExploreGroups;

typedef struct PlanExploreSpec {
  PlanExploreGroups groups;
  int group_size;                              /* layers per group with GROUP_LAYER (0 or 1: per layer) */
  int allow_recompute[PLAN_NUM_RECOMPUTE];     /* the choices of every group */
  int max_shift;                               /* layers a stage boundary may move (0: the partition stays) */
  long budget;                                 /* simulations at most */
  uint64_t seed;                               /* sa and dqn */
} PlanExploreSpec;

/* Per-layer recomputation none or full, boundaries moving up to 2 layers,
 * 1000 simulations, seed 1. */
void plan_explore_spec_default(PlanExploreSpec *spec);

typedef struct PlanExploreEval {
  int valid;          /* 0: a stage would hold no layer (nothing simulated) */
  int fits;
  double step_time;   /* s */
  double peak_memory; /* bytes */
} PlanExploreEval;

typedef struct PlanExploreCacheEntry PlanExploreCacheEntry;

typedef struct PlanExploreSpace {
  const ModelConfig *model;
  const ClusterSpec *cluster;
  const PlanOptions *opt;
  PlanConfig base; /* the layout as simulated (partition filled in) */
  PlanExploreSpec spec;
  int num_layers, num_stages, num_groups;
  int group_of_layer[MODEL_MAX_LAYERS];
  PlanRecompute choice[PLAN_NUM_RECOMPUTE]; /* the values a group decision indexes */
  int num_choices;
  int num_decisions; /* num_groups, then num_stages - 1 boundaries */
  int arity[PLAN_EXPLORE_MAX_DECISIONS];
  int max_arity;
  unsigned char uniform[PLAN_EXPLORE_MAX_DECISIONS]; /* the layout's own plan */
  PlanExploreEval uniform_eval;
  /* what the explorers have done */
  long evaluations; /* simulations spent */
  long visits;      /* evaluations asked for, cached or not */
  int have_best;
  unsigned char best[PLAN_EXPLORE_MAX_DECISIONS];
  PlanExploreEval best_eval;
  long best_at; /* evaluations when the best was found */
  PlanExploreCacheEntry *cache;
  long cache_cap, cache_count;
} PlanExploreSpace;

/* Builds the space around cfg (which must pass plan_config_finish with
 * vpp 1 and no stage replication); simulates the layout's own plan once
 * (counted). */
int plan_explore_space_init(PlanExploreSpace *sp, const ModelConfig *model, const ClusterSpec *cluster,
                            const PlanOptions *opt, const PlanConfig *cfg, const PlanExploreSpec *spec, Error *err);
void plan_explore_space_free(PlanExploreSpace *sp);

/* Decision vectors, valid or not (the product of the arities; capped at
 * 2^62). */
double plan_explore_space_size(const PlanExploreSpace *sp);
int plan_explore_exhausted(const PlanExploreSpace *sp);

/* Evaluates a decision vector (cached). With the budget spent, a vector not
 * in the cache comes back invalid and *spent (may be NULL) is set. */
int plan_explore_evaluate(PlanExploreSpace *sp, const unsigned char *decisions, PlanExploreEval *out, int *spent,
                          Error *err);

/* The configuration a decision vector stands for; 0, or -1 when invalid. */
int plan_explore_config(const PlanExploreSpace *sp, const unsigned char *decisions, PlanConfig *out);

/* The explorers. exact stops at the budget (then *complete = 0). */
int plan_explore_exact(PlanExploreSpace *sp, int *complete, Error *err);
int plan_explore_sa(PlanExploreSpace *sp, Error *err);
int plan_explore_dqn(PlanExploreSpace *sp, long *episodes, Error *err);

/* The best plan against the uniform one; with explain, what each decision
 * that differs from the layout bought (the best with that one decision
 * put back, simulated outside the budget). */
int plan_explore_report(PlanExploreSpace *sp, const char *method, int explain, FILE *f, Error *err);

/* The command line's --explore: builds the space around cfg, runs method
 * ("sa", "dqn" or "exact") and prints the report. */
int plan_explore_run(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                     const PlanConfig *cfg, const char *method, const PlanExploreSpec *spec, int explain, FILE *f,
                     Error *err);

#endif
