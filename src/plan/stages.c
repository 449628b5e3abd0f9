/* Pipeline partition choice (rules in stages.h): the balanced split for
 * uniform blocks, a min-max dynamic program over layers otherwise. */
#include "plan/stages.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int plan_stages_dp(const double *cost, int L, int S, double first_extra, double last_extra, int *layers, Error *err) {
  if (S < 1 || L < S) return error_set(err, ERR_CONFIG, "partition: %d layers cannot fill %d stages", L, S);
  size_t cells = (size_t)(S + 1) * (L + 1);
  double *best = malloc(cells * sizeof *best), *sq = malloc(cells * sizeof *sq), *prefix = malloc(((size_t)L + 1) * sizeof *prefix);
  int *from = malloc(cells * sizeof *from);
  if (!best || !sq || !prefix || !from) {
    free(best), free(sq), free(prefix), free(from);
    return error_set(err, ERR_NOMEM, "partition: out of memory");
  }
  prefix[0] = 0;
  for (int i = 0; i < L; i++) prefix[i + 1] = prefix[i] + cost[i];
#define AT(s, i) ((size_t)(s) * (L + 1) + (i))
  for (size_t c = 0; c < cells; c++) best[c] = INFINITY, sq[c] = INFINITY, from[c] = -1;
  best[AT(0, 0)] = 0;
  sq[AT(0, 0)] = 0;
  /* best[s][i]: heaviest stage when the first i layers fill the first s stages. */
  for (int s = 1; s <= S; s++) {
    double extra = (s == 1 ? first_extra : 0) + (s == S ? last_extra : 0);
    int lo = s, hi = L - (S - s); /* leave one layer for each later stage */
    for (int i = lo; i <= hi; i++) {
      for (int j = s - 1; j < i; j++) {
        if (isinf(best[AT(s - 1, j)])) continue;
        double stage = prefix[i] - prefix[j] + extra;
        double m = fmax(best[AT(s - 1, j)], stage), q = sq[AT(s - 1, j)] + stage * stage;
        double cur = best[AT(s, i)];
        if (m < cur * (1 - 1e-12) || (m <= cur * (1 + 1e-12) && q < sq[AT(s, i)])) {
          best[AT(s, i)] = m;
          sq[AT(s, i)] = q;
          from[AT(s, i)] = j;
        }
      }
    }
  }
  int i = L;
  for (int s = S; s >= 1; s--) {
    int j = from[AT(s, i)];
    layers[s - 1] = i - j;
    i = j;
  }
#undef AT
  free(best), free(sq), free(prefix), free(from);
  return ERR_OK;
}

int plan_stages_choose(const PlanCostModel *cm, SchedPartition *out, Error *err) {
  const PlanConfig *cfg = cm->cfg;
  const ModelConfig *m = cm->model;
  int S = cfg->par.pp * cfg->par.vpp, L = m->num_layers;
  SchedPartitionSpec spec;
  memset(&spec, 0, sizeof spec);
  spec.num_layers = L;
  spec.pp = cfg->par.pp;
  spec.vpp = cfg->par.vpp;
  if (cfg->num_given_layers) {
    spec.layers_per_stage = cfg->layers_per_stage;
    spec.num_given = cfg->num_given_layers;
    return sched_partition_make(&spec, out, err);
  }
  double first = cm->embedding.fwd_total + cm->embedding.bwd_total;
  double last = cm->head.fwd_total + cm->head.bwd_total;
  double unit = 0;
  int uniform = 1;
  for (int l = 0; l < L; l++) {
    const PlanPassCost *c = plan_layer_cost(cm, l);
    double v = c->fwd_total + c->bwd_total;
    if (l == 0) unit = v;
    else if (fabs(v - unit) > 1e-12 * unit) uniform = 0;
  }
  if (uniform && unit > 0) {
    spec.embedding_weight = first / unit;
    spec.head_weight = last / unit;
    return sched_partition_make(&spec, out, err);
  }
  double *cost = malloc((size_t)L * sizeof *cost);
  int *layers = malloc((size_t)S * sizeof *layers);
  if (!cost || !layers) {
    free(cost), free(layers);
    return error_set(err, ERR_NOMEM, "partition: out of memory");
  }
  for (int l = 0; l < L; l++) {
    const PlanPassCost *c = plan_layer_cost(cm, l);
    cost[l] = c->fwd_total + c->bwd_total;
  }
  int rc = plan_stages_dp(cost, L, S, first, last, layers, err);
  if (!rc) {
    spec.layers_per_stage = layers;
    spec.num_given = S;
    rc = sched_partition_make(&spec, out, err);
  }
  free(cost);
  free(layers);
  return rc;
}
