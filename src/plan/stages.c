/* Pipeline partition choice (rules in stages.h): the balanced split for
 * uniform blocks, a min-max dynamic program over layers otherwise. */
#include "plan/stages.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int plan_stages_dp(const double *cost, int L, int S, double first_extra, double last_extra, int *layers, Error *err) {
  if (S < 1 || L < 0 || L + 2 < S)
    return error_set(err, ERR_CONFIG, "partition: %d layers cannot fill %d stages (at most two may be empty)", L, S);
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
  /* With fewer layers than stages some stage must stay empty. */
  int least = L < S ? 0 : 1;
  for (int s = 1; s <= S; s++) {
    double extra = (s == 1 ? first_extra : 0) + (s == S ? last_extra : 0);
    int lo = s * least, hi = L - (S - s) * least; /* leave the least for each later stage */
    for (int i = lo; i <= hi; i++) {
      for (int j = (s - 1) * least; j <= i - least; j++) {
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
  spec.allow_empty = L < S || cfg->num_given_layers;
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

int plan_megatron_layout(int L, int pp, int vpp, int first, int last, int account_embedding, int account_loss,
                         int *layers, Error *err) {
  int S = pp * vpp;
  if (pp < 1 || vpp < 1) return error_set(err, ERR_CONFIG, "pp and vpp must be >= 1");
  if ((first >= 0 || last >= 0) && (account_embedding || account_loss))
    return error_set(err, ERR_CONFIG,
                     "first/last pipeline-stage layers and accounting for the embedding or loss cannot be combined");
  if (first >= 0 || last >= 0) {
    int given = (first >= 0) + (last >= 0);
    int rest = L - (first > 0 ? first : 0) - (last > 0 ? last : 0), middle = pp - given;
    if (rest < 0)
      return error_set(err, ERR_CONFIG, "first (%d) and last (%d) stage layers exceed the model's %d layers", first,
                       last, L);
    if (middle <= 0 ? rest != 0 : rest % middle)
      return error_set(err, ERR_CONFIG, "%d layers left after the first/last stage do not split evenly over the %d "
                       "other pipeline ranks", rest, middle);
    for (int r = 0; r < pp; r++) {
      int here = r == 0 && first >= 0 ? first : r == pp - 1 && last >= 0 ? last : rest / (middle > 0 ? middle : 1);
      if (here % vpp)
        return error_set(err, ERR_CONFIG, "pipeline rank %d's %d layers do not split evenly over vpp %d chunks", r,
                         here, vpp);
      for (int c = 0; c < vpp; c++) layers[c * pp + r] = here / vpp;
    }
    return ERR_OK;
  }
  int units = L + (account_embedding ? 1 : 0) + (account_loss ? 1 : 0);
  if (units % S)
    return error_set(err, ERR_CONFIG, "%d layers%s%s do not split evenly over pp %d x vpp %d = %d virtual stages", L,
                     account_embedding ? " + the embedding" : "", account_loss ? " + the loss" : "", pp, vpp, S);
  for (int s = 0; s < S; s++) layers[s] = units / S;
  if (account_embedding) layers[0]--;
  if (account_loss) layers[S - 1]--;
  if (layers[0] < 0 || layers[S - 1] < 0)
    return error_set(err, ERR_CONFIG, "the embedding and the loss would need a stage of their own each: use fewer stages");
  return ERR_OK;
}

int plan_pipeline_split_layers(const char *spec, int num_layers, PlanConfig *cfg, Error *err) {
  int first = -1, last = -1, embedding = 0, loss = 0;
  char buf[128];
  if (strlen(spec) >= sizeof buf) return error_set(err, ERR_ARG, "too long");
  strcpy(buf, spec);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int *target = !strncmp(tok, "first=", 6) ? &first : !strncmp(tok, "last=", 5) ? &last : NULL;
    if (target) {
      char *end;
      long v = strtol(strchr(tok, '=') + 1, &end, 10);
      if (*end || end == strchr(tok, '=') + 1 || v < 0 || v > num_layers)
        return error_set(err, ERR_ARG, "\"%s\": expected a layer count in [0, %d]", tok, num_layers);
      *target = (int)v;
    } else if (!strcmp(tok, "embedding")) embedding = 1;
    else if (!strcmp(tok, "loss")) loss = 1;
    else return error_set(err, ERR_ARG, "\"%s\": expected first=N, last=N, embedding or loss", tok);
  }
  int S = cfg->par.pp * cfg->par.vpp;
  if (S > PLAN_MAX_STAGES) return error_set(err, ERR_ARG, "more than %d stages", PLAN_MAX_STAGES);
  int rc = plan_megatron_layout(num_layers, cfg->par.pp, cfg->par.vpp, first, last, embedding, loss,
                                cfg->layers_per_stage, err);
  if (!rc) cfg->num_given_layers = S;
  return rc;
}

int plan_recompute_block_apply(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *o, PlanConfig *cfg, int n,
                               Error *err) {
  if (n < 0) return error_set(err, ERR_CONFIG, "recompute_num_layers must be >= 0 (got %d)", n);
  if (m->num_layers > PLAN_MAX_STAGES)
    return error_set(err, ERR_CONFIG, "per-layer recomputation handles at most %d layers", PLAN_MAX_STAGES);
  PlanConfig plain = *cfg;
  plain.recompute = PLAN_RECOMPUTE_NONE;
  plain.num_layer_recompute = 0;
  PlanCostModel cm;
  int rc = plan_cost_model_init(&cm, m, cl, o, &plain, NULL, err);
  SchedPartition part;
  if (!rc) rc = plan_stages_choose(&cm, &part, err);
  if (rc) return rc;
  int S = part.num_stages;
  for (int s = 0; s < S; s++) {
    cfg->layers_per_stage[s] = part.layers[s];
    for (int i = 0; i < part.layers[s]; i++)
      cfg->layer_recompute[part.first_layer[s] + i] = i < n ? PLAN_RECOMPUTE_FULL : PLAN_RECOMPUTE_NONE;
  }
  cfg->num_given_layers = S;
  cfg->num_layer_recompute = m->num_layers;
  cfg->recompute = PLAN_RECOMPUTE_FULL;
  cfg->recompute_method = 1;
  cfg->recompute_num_layers = n;
  sched_partition_free(&part);
  return ERR_OK;
}
