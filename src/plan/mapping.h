/* Device mapping: which device each rank of a configuration runs on.
 *
 * A mapping is a permutation of the configuration's world: rank r (its
 * attention coordinates tp-cp-dp-pp, and its MoE coordinates, as
 * parallel.h defines them) runs on device device_of_rank[r], device d being
 * slot d % devices_per_node of node d / devices_per_node of the cluster.
 * The search prices each candidate by simulating the configuration with
 * every collective and pipeline transfer on the links of the devices the
 * mapped ranks sit on (ClusterSpec.device_of_rank), and keeps the fastest:
 *  - exhaustive over all permutations when the world is at most
 *    exhaustive_max_devices (the brute-force optimum);
 *  - otherwise a heuristic: rank order, then every order of the attention
 *    grid's dimensions laid onto devices (which groups fill a node first:
 *    DAPPLE's fresh-first / append-first placements are among them), the
 *    best of those refined by pairwise swaps of ranks while a swap improves
 *    the simulated step (first improvement, at most max_evaluations
 *    simulations in all).
 * Applying a mapping (docs/planner.md): `fivefold train --plan` renumbers
 * the world (comm_world_place) so that rank r is the process the launcher
 * started as rank device_of_rank[r], i.e. on device device_of_rank[r]. */
#ifndef FIVEFOLD_PLAN_MAPPING_H
#define FIVEFOLD_PLAN_MAPPING_H

#include <stdio.h>

#include "base/error.h"
#include "plan/simulate.h"

typedef struct PlanMappingOptions {
  int exhaustive_max_devices; /* worlds up to this size are enumerated (default 8) */
  long max_evaluations;       /* simulations the heuristic may spend (default 4000) */
} PlanMappingOptions;

void plan_mapping_options_default(PlanMappingOptions *mo);

typedef struct PlanMapping {
  int devices;          /* world size of the configuration */
  int *device_of_rank;  /* owned, `devices` entries */
  double step_time;     /* s: simulated under this mapping */
  double rank_order_step_time; /* s: under rank r -> device r */
  long evaluated;       /* simulations spent */
  int exhaustive;       /* 1: every permutation was simulated */
  char method[48];      /* "exhaustive", "rank order", "grid order pp-dp-cp-tp + swaps", ... */
} PlanMapping;

/* The simulated step time of cfg with rank r on device device_of_rank[r]
 * (NULL: rank order). */
int plan_mapping_step_time(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                           const PlanConfig *cfg, const int *device_of_rank, double *step_time, Error *err);

int plan_mapping_search(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                        const PlanConfig *cfg, const PlanMappingOptions *mo, PlanMapping *out, Error *err);
void plan_mapping_free(PlanMapping *m);

/* Searches a mapping for r's configuration and re-simulates r under it
 * (r's prediction then holds for the mapped devices; its device_of_rank,
 * rank_order_step_time and mapping fields are filled). A mapping no better
 * than rank order leaves device_of_rank NULL. */
int plan_result_map_devices(PlanResult *r, const ModelConfig *model, const ClusterSpec *cluster,
                            const PlanOptions *opt, const PlanMappingOptions *mo, Error *err);

/* The cluster as r's ranks see it: cluster with r's mapping applied
 * (shallow: shares the cluster's link matrix and r's mapping). */
ClusterSpec plan_result_cluster_view(const ClusterSpec *cluster, const PlanResult *r);

/* Replaces *r by `with` (a new simulation of r's configuration, which *r
 * then owns) and keeps r's mapping fields: they describe the devices, not
 * what was re-simulated. */
void plan_result_replace_keep_mapping(PlanResult *r, PlanResult *with);

/* "device mapping: rank order 0.241 s, mapped 0.224 s (7.5% faster; ...)"
 * and, for up to 64 ranks, the permutation. Nothing when none was searched. */
void plan_mapping_explain(const PlanResult *r, FILE *f);

/* 1 when map is a permutation of 0 .. n-1. */
int plan_mapping_is_permutation(const int *map, int n);

/* 1 when the mapping is rank order (or absent). */
int plan_mapping_is_identity(const int *device_of_rank, int devices);

#endif
