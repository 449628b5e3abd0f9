/* The device-mapping search (mapping.h): pricing a permutation by
 * simulation, exhaustive enumeration for small worlds, grid-order
 * candidates and pairwise swaps for large ones. */
#include "plan/mapping.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void plan_mapping_options_default(PlanMappingOptions *mo) {
  mo->exhaustive_max_devices = 8;
  mo->max_evaluations = 4000;
}

void plan_mapping_free(PlanMapping *m) {
  if (!m) return;
  free(m->device_of_rank);
  memset(m, 0, sizeof *m);
}

int plan_mapping_is_identity(const int *map, int n) {
  if (!map) return 1;
  for (int r = 0; r < n; r++)
    if (map[r] != r) return 0;
  return 1;
}

int plan_mapping_step_time(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                           const PlanConfig *cfg, const int *map, double *step_time, Error *err) {
  ClusterSpec mapped = *cluster; /* shallow: shares the link matrix, adds the mapping */
  mapped.device_of_rank = map;
  mapped.num_mapped = map ? plan_config_world(cfg) : 0;
  PlanSimOptions sim;
  memset(&sim, 0, sizeof sim);
  PlanResult r;
  int rc = plan_simulate(model, &mapped, opt, cfg, &sim, NULL, &r, err);
  if (rc) return rc;
  *step_time = r.step_time;
  plan_result_free(&r);
  return ERR_OK;
}

typedef struct Search {
  const ModelConfig *model;
  const ClusterSpec *cluster;
  const PlanOptions *opt;
  const PlanConfig *cfg;
  int n;
  long evaluated;
  Error *err;
} Search;

static int evaluate(Search *s, const int *map, double *t) {
  s->evaluated++;
  return plan_mapping_step_time(s->model, s->cluster, s->opt, s->cfg, map, t, s->err);
}

/* Strictly better beyond rounding, so ties keep the earlier (simpler) mapping. */
static int better(double a, double b) {
  return a < b * (1.0 - 1e-12);
}

/* Every permutation (Heap's algorithm, iterative). */
static int exhaustive(Search *s, int *best, double *best_t) {
  int n = s->n;
  int *perm = malloc((size_t)n * sizeof *perm), *c = calloc((size_t)n, sizeof *c);
  if (!perm || !c) {
    free(perm);
    free(c);
    return error_set(s->err, ERR_NOMEM, "mapping search: out of memory");
  }
  for (int i = 0; i < n; i++) perm[i] = i;
  int rc = 0;
  for (int i = 1; i < n && !rc;) {
    if (c[i] < i) {
      int j = i % 2 ? c[i] : 0;
      int tmp = perm[j];
      perm[j] = perm[i];
      perm[i] = tmp;
      double t;
      rc = evaluate(s, perm, &t);
      if (!rc && better(t, *best_t)) {
        *best_t = t;
        memcpy(best, perm, (size_t)n * sizeof *perm);
      }
      c[i]++;
      i = 1;
    } else {
      c[i] = 0;
      i++;
    }
  }
  free(perm);
  free(c);
  return rc;
}

int plan_mapping_is_permutation(const int *map, int n) {
  unsigned char *seen = calloc((size_t)n, 1);
  int ok = seen != NULL;
  for (int r = 0; r < n && ok; r++) {
    ok = map[r] >= 0 && map[r] < n && !seen[map[r]];
    if (ok) seen[map[r]] = 1;
  }
  free(seen);
  return ok;
}

static const char DIM_NAMES[4][3] = {"tp", "cp", "dp", "pp"};

/* Rank r's attention coordinates laid onto devices with dimension order[0]
 * varying fastest. */
static void grid_order_map(const PlanParallel *p, const int order[4], int n, int *map) {
  int size[4] = {p->tp, p->cp, p->dp, p->pp};
  for (int r = 0; r < n; r++) {
    int coord[4] = {r % p->tp, (r / p->tp) % p->cp, (r / (p->tp * p->cp)) % p->dp, r / (p->tp * p->cp * p->dp)};
    int dev = 0, scale = 1;
    for (int k = 0; k < 4; k++) {
      dev += coord[order[k]] * scale;
      scale *= size[order[k]];
    }
    map[r] = dev;
  }
}

/* Grid orders, then first-improvement pairwise swaps from the best. */
static int heuristic(Search *s, long budget, int *best, double *best_t, char *method, size_t method_size) {
  int n = s->n;
  int *cand = malloc((size_t)n * sizeof *cand);
  if (!cand) return error_set(s->err, ERR_NOMEM, "mapping search: out of memory");
  int rc = 0;
  static const int perms[24][4] = {
      {0, 1, 2, 3}, {0, 1, 3, 2}, {0, 2, 1, 3}, {0, 2, 3, 1}, {0, 3, 1, 2}, {0, 3, 2, 1}, {1, 0, 2, 3}, {1, 0, 3, 2},
      {1, 2, 0, 3}, {1, 2, 3, 0}, {1, 3, 0, 2}, {1, 3, 2, 0}, {2, 0, 1, 3}, {2, 0, 3, 1}, {2, 1, 0, 3}, {2, 1, 3, 0},
      {2, 3, 0, 1}, {2, 3, 1, 0}, {3, 0, 1, 2}, {3, 0, 2, 1}, {3, 1, 0, 2}, {3, 1, 2, 0}, {3, 2, 0, 1}, {3, 2, 1, 0}};
  const PlanParallel *p = &s->cfg->par;
  int size[4] = {p->tp, p->cp, p->dp, p->pp};
  for (int k = 1; k < 24 && !rc; k++) { /* order 0 is rank order, priced already */
    /* Orders that differ only in where size-1 dimensions sit give the same map. */
    int dup = 0;
    for (int j = 0; j < k && !dup; j++) {
      int a = 0, b = 0, same = 1;
      while (same) {
        while (a < 4 && size[perms[k][a]] == 1) a++;
        while (b < 4 && size[perms[j][b]] == 1) b++;
        if (a == 4 || b == 4) {
          same = a == 4 && b == 4;
          break;
        }
        same = perms[k][a++] == perms[j][b++];
      }
      dup = same;
    }
    if (dup) continue;
    grid_order_map(p, perms[k], n, cand);
    double t;
    rc = evaluate(s, cand, &t);
    if (!rc && better(t, *best_t)) {
      *best_t = t;
      memcpy(best, cand, (size_t)n * sizeof *cand);
      snprintf(method, method_size, "grid order %s-%s-%s-%s", DIM_NAMES[perms[k][0]], DIM_NAMES[perms[k][1]],
               DIM_NAMES[perms[k][2]], DIM_NAMES[perms[k][3]]);
    }
  }
  /* Local search. Two moves: exchange two ranks' devices, and exchange the
   * whole contents of two nodes slot by slot, which moves a TP group or a
   * stage off a slow node in one step where single swaps would first have
   * to split it. */
  int swaps = 0, D = s->cluster->devices_per_node, nodes = (n + D - 1) / D;
  for (int improved = 1; improved && !rc && s->evaluated < budget;) {
    improved = 0;
    for (int a = 0; a < nodes && !rc && s->evaluated < budget; a++)
      for (int b = a + 1; b < nodes && !rc && s->evaluated < budget; b++) {
        for (int r = 0; r < n; r++) {
          int node = best[r] / D, slot = best[r] % D;
          cand[r] = node == a ? b * D + slot : node == b ? a * D + slot : best[r];
          if (cand[r] >= n) cand[r] = best[r]; /* a partial last node keeps its devices */
        }
        if (!plan_mapping_is_permutation(cand, n)) continue; /* nodes of unequal occupancy */
        double t;
        rc = evaluate(s, cand, &t);
        if (!rc && better(t, *best_t)) {
          *best_t = t;
          memcpy(best, cand, (size_t)n * sizeof *cand);
          improved = 1;
          swaps++;
        }
      }
    for (int i = 0; i < n && !rc && s->evaluated < budget; i++)
      for (int j = i + 1; j < n && !rc && s->evaluated < budget; j++) {
        memcpy(cand, best, (size_t)n * sizeof *cand);
        cand[i] = best[j];
        cand[j] = best[i];
        double t;
        rc = evaluate(s, cand, &t);
        if (!rc && better(t, *best_t)) {
          *best_t = t;
          memcpy(best, cand, (size_t)n * sizeof *cand);
          improved = 1;
          swaps++;
        }
      }
  }
  if (swaps) {
    size_t len = strlen(method);
    snprintf(method + len, method_size - len, " + %d move%s", swaps, swaps == 1 ? "" : "s");
  }
  free(cand);
  return rc;
}

int plan_mapping_search(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                        const PlanConfig *cfg, const PlanMappingOptions *mo_in, PlanMapping *out, Error *err) {
  memset(out, 0, sizeof *out);
  PlanMappingOptions mo;
  if (mo_in) mo = *mo_in;
  else plan_mapping_options_default(&mo);
  int n = plan_config_world(cfg);
  if (n > cluster_spec_total_devices(cluster))
    return error_set(err, ERR_CONFIG, "mapping: the configuration needs %d devices, cluster %s has %d", n,
                     cluster->name, cluster_spec_total_devices(cluster));
  out->devices = n;
  out->device_of_rank = malloc((size_t)n * sizeof *out->device_of_rank);
  if (!out->device_of_rank) return error_set(err, ERR_NOMEM, "mapping search: out of memory");
  for (int r = 0; r < n; r++) out->device_of_rank[r] = r;
  Search s = {model, cluster, opt, cfg, n, 0, err};
  double t0;
  int rc = evaluate(&s, NULL, &t0);
  if (rc) {
    plan_mapping_free(out);
    return rc;
  }
  out->rank_order_step_time = t0;
  double best_t = t0;
  snprintf(out->method, sizeof out->method, "rank order");
  if (n <= mo.exhaustive_max_devices) {
    out->exhaustive = 1;
    rc = exhaustive(&s, out->device_of_rank, &best_t);
    if (!rc && !plan_mapping_is_identity(out->device_of_rank, n))
      snprintf(out->method, sizeof out->method, "exhaustive");
  } else {
    rc = heuristic(&s, mo.max_evaluations, out->device_of_rank, &best_t, out->method, sizeof out->method);
  }
  if (rc) {
    plan_mapping_free(out);
    return rc;
  }
  out->step_time = best_t;
  out->evaluated = s.evaluated;
  return ERR_OK;
}

ClusterSpec plan_result_cluster_view(const ClusterSpec *cluster, const PlanResult *r) {
  ClusterSpec view = *cluster;
  if (r->device_of_rank) {
    view.device_of_rank = r->device_of_rank;
    view.num_mapped = r->num_mapped;
  }
  return view;
}

void plan_result_replace_keep_mapping(PlanResult *r, PlanResult *with) {
  int *map = r->device_of_rank;
  r->device_of_rank = NULL;
  PlanResult keep = *r;
  plan_result_free(r);
  *r = *with;
  r->device_of_rank = map;
  r->num_mapped = keep.num_mapped;
  r->rank_order_step_time = keep.rank_order_step_time;
  r->mapping_evaluated = keep.mapping_evaluated;
  r->mapping_exhaustive = keep.mapping_exhaustive;
  memcpy(r->mapping_method, keep.mapping_method, sizeof r->mapping_method);
  r->bucket_choice = keep.bucket_choice;
  r->fusion_choice = keep.fusion_choice;
}

int plan_result_map_devices(PlanResult *r, const ModelConfig *model, const ClusterSpec *cluster,
                            const PlanOptions *opt, const PlanMappingOptions *mo, Error *err) {
  PlanMapping map;
  PlanConfig cfg = r->cfg;
  int rc = plan_mapping_search(model, cluster, opt, &cfg, mo, &map, err);
  if (rc) return rc;
  int identity = plan_mapping_is_identity(map.device_of_rank, map.devices);
  PlanResult mapped;
  ClusterSpec view = *cluster;
  view.device_of_rank = identity ? NULL : map.device_of_rank;
  view.num_mapped = identity ? 0 : map.devices;
  rc = plan_simulate(model, &view, opt, &cfg, NULL, NULL, &mapped, err);
  if (rc) {
    plan_mapping_free(&map);
    return rc;
  }
  plan_result_free(r);
  *r = mapped;
  r->rank_order_step_time = map.rank_order_step_time;
  r->mapping_evaluated = map.evaluated;
  r->mapping_exhaustive = map.exhaustive;
  snprintf(r->mapping_method, sizeof r->mapping_method, "%s", map.method);
  r->num_mapped = map.devices;
  if (identity) {
    plan_mapping_free(&map);
  } else {
    r->device_of_rank = map.device_of_rank; /* ownership moves to r */
    map.device_of_rank = NULL;
  }
  return ERR_OK;
}

void plan_mapping_explain(const PlanResult *r, FILE *f) {
  if (!r->mapping_evaluated) return;
  double t0 = r->rank_order_step_time, t = r->step_time;
  fprintf(f, "device mapping: rank order %.4f s/step, chosen %.4f s/step (%.1f%% faster; %s, %ld simulations%s)\n",
          t0, t, t > 0 ? 100.0 * (t0 / t - 1.0) : 0.0, r->device_of_rank ? r->mapping_method : "rank order is best",
          r->mapping_evaluated, r->mapping_exhaustive ? ", every permutation" : ", heuristic");
  if (r->device_of_rank && r->num_mapped <= 64) {
    fprintf(f, "  device of rank 0..%d:", r->num_mapped - 1);
    for (int i = 0; i < r->num_mapped; i++) fprintf(f, " %d", r->device_of_rank[i]);
    fprintf(f, "\n");
  }
}
