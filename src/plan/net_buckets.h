/* Gradient-tensor fusion for the feed-forward networks of nets/: the
 * runtime's uniform bucket size searched with the nets' simulator
 * (net_sim.h), by the same method as the transformer's
 * (buckets.h, plan_buckets_search_sizes): every size at which the bucket
 * count changes (up to 64 buckets), each a full plan_net_simulate, then a
 * golden-section refinement between the best count's neighbours. A nets
 * gradient is one segment (one chunk, one parameter group), so every
 * count is ceil(total / k). The default (the runtime's: a quarter of the
 * gradient) is kept unless a size beats it. */
#ifndef FIVEFOLD_PLAN_NET_BUCKETS_H
#define FIVEFOLD_PLAN_NET_BUCKETS_H

#include <stdio.h>

#include "plan/net_sim.h"

typedef struct PlanNetBucketChoice {
  double default_params, default_step_time; /* elements, s: the options' size */
  int default_buckets;
  double bucket_params; /* the chosen size, elements (whole blocks of dp) */
  double bucket_mb;     /* the same as --bucket-mb (fp32 gradients) */
  double step_time;     /* s, with the chosen size */
  int buckets;
  double reduce;        /* s: the chosen size's exposed reduction */
  int num_candidates;
  long simulations;
} PlanNetBucketChoice;

/* Searches the bucket size of a data-parallel run (cfg->dp > 1; with one
 * rank there is nothing to reduce and the default is returned). */
int plan_net_search_buckets(const PlanNetLayer *layers, int num_layers, const ClusterSpec *cluster,
                            const PlanOptions *opt, const PlanNetConfig *cfg, PlanNetBucketChoice *out, Error *err);

/* The --bucket-mb that makes the runtime cut buckets of `elements` floats:
 * it takes floor(MB x 1e6 / 4) floats, so a few bytes over the exact size
 * keep the decimal round trip from losing one. */
double plan_net_bucket_mb(double elements);

/* What the search bought, for simulate's output. */
void plan_net_bucket_explain(const PlanNetBucketChoice *c, const PlanNetConfig *cfg, FILE *f);

#endif
