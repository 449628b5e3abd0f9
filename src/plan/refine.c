/* Partition refinement by simulation (refine.h): steepest descent over
 * one-layer moves across stage boundaries, memory-checked. */
#include "plan/refine.h"

#include <stdio.h>
#include <string.h>

#include "plan/mapping.h"

static int simulate_partition(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                              const PlanConfig *base, const int *layers, int S, PlanResult *out, Error *err) {
  PlanConfig cfg = *base;
  cfg.num_given_layers = S;
  memcpy(cfg.layers_per_stage, layers, (size_t)S * sizeof *layers);
  return plan_simulate(model, cluster, opt, &cfg, NULL, NULL, out, err);
}

/* Memory-aware order: a partition that fits beats one that does not; among
 * fitting ones the faster wins, among the others the smaller peak (so a
 * start over the memory walks towards one that fits). */
static int improves(const PlanResult *a, const PlanResult *b) {
  if (a->fits != b->fits) return a->fits;
  if (a->fits) return a->step_time < b->step_time * (1 - 1e-12);
  return a->peak_memory < b->peak_memory * (1 - 1e-12);
}

int plan_partition_refine(PlanResult *r, const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                          PlanRefineStats *stats, Error *err) {
  PlanRefineStats local;
  if (!stats) stats = &local;
  memset(stats, 0, sizeof *stats);
  int S = r->cfg.num_given_layers;
  stats->num_stages = S;
  stats->start_step_time = r->step_time;
  stats->start_fits = r->fits;
  memcpy(stats->start_layers, r->cfg.layers_per_stage, (size_t)S * sizeof(int));
  if (S < 2) return ERR_OK;
  int cur[PLAN_MAX_STAGES];
  memcpy(cur, r->cfg.layers_per_stage, (size_t)S * sizeof *cur);
  for (;;) {
    PlanResult best;
    int have = 0, best_layers[PLAN_MAX_STAGES];
    for (int b = 0; b + 1 < S; b++)
      for (int dir = 0; dir < 2; dir++) {
        int from = dir ? b + 1 : b, to = dir ? b : b + 1;
        if (cur[from] < 2) continue;
        int cand[PLAN_MAX_STAGES];
        memcpy(cand, cur, (size_t)S * sizeof *cand);
        cand[from]--;
        cand[to]++;
        PlanResult t;
        int rc = simulate_partition(model, cluster, opt, &r->cfg, cand, S, &t, err);
        if (rc) {
          if (have) plan_result_free(&best);
          return rc;
        }
        stats->simulated++;
        if (improves(&t, have ? &best : r)) {
          if (have) plan_result_free(&best);
          best = t;
          have = 1;
          memcpy(best_layers, cand, (size_t)S * sizeof *cand);
        } else {
          plan_result_free(&t);
        }
      }
    if (!have) break;
    plan_result_replace_keep_mapping(r, &best);
    memcpy(cur, best_layers, (size_t)S * sizeof *cur);
    stats->moves++;
  }
  return ERR_OK;
}

static void print_layers(const int *layers, int S, FILE *f) {
  for (int s = 0; s < S; s++) fprintf(f, "%s%d", s ? " " : "", layers[s]);
}

void plan_refine_explain(const PlanRefineStats *st, const PlanResult *r, FILE *f) {
  if (!st->simulated) return;
  double t0 = st->start_step_time, t = r->step_time;
  fprintf(f, "partition by simulation: compute min-max [");
  print_layers(st->start_layers, st->num_stages, f);
  fprintf(f, "] %.4f s/step", t0);
  if (st->moves) {
    fprintf(f, ", refined [");
    print_layers(r->cfg.layers_per_stage, r->cfg.num_given_layers, f);
    fprintf(f, "] %.4f s/step (%.1f%% faster, %d move%s", t, t > 0 ? 100.0 * (t0 / t - 1) : 0.0, st->moves,
            st->moves == 1 ? "" : "s");
  } else {
    fprintf(f, " is already the best of its neighbours (%ld simulations)\n", st->simulated);
    return;
  }
  fprintf(f, ", %ld simulations)\n", st->simulated);
}
