/* Pipeline partition: balanced split with embedding/head weights, explicit
 * lists with validation, and the "2,3,3" list parser (rules in partition.h). */
#include "sched/partition.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PARTITION_MAX_STAGES 65536
#define PARTITION_MAX_LAYERS 1000000

void sched_partition_free(SchedPartition *p) {
  if (!p) return;
  free(p->first_layer);
  free(p->layers);
  free(p->weight);
  memset(p, 0, sizeof *p);
}

/* Blocks stage s may hold when no stage may weigh more than t. */
static long stage_cap(double t, double extra) {
  double c = floor(t - extra + 1e-9);
  return c < 0 ? -1 : (long)c;
}

static int feasible(double t, const double *extra, int S, long lo, long L) {
  long total = 0;
  for (int s = 0; s < S; s++) {
    long c = stage_cap(t, extra[s]);
    if (c < lo) return 0;
    total += c < L ? c : L;
  }
  return total >= L;
}

static void balance(const double *extra, int S, long lo, long L, int *layers) {
  double hi = 0;
  for (int s = 0; s < S; s++)
    if (extra[s] > hi) hi = extra[s];
  hi += (double)L + 1;
  double low = 0;
  /* Feasibility only changes at the points extra[s] + k, so bisection lands
   * just above the optimum and the caps below recover it exactly. */
  for (int it = 0; it < 200 && hi - low > 1e-12 * (1 + hi); it++) {
    double mid = 0.5 * (low + hi);
    if (feasible(mid, extra, S, lo, L))
      hi = mid;
    else
      low = mid;
  }
  long total = 0;
  for (int s = 0; s < S; s++) {
    long c = stage_cap(hi, extra[s]);
    if (c > L) c = L;
    layers[s] = (int)c;
    total += c;
  }
  for (; total > L; total--) {
    int pick = -1;
    for (int s = 0; s < S; s++)
      if (layers[s] > lo && (pick < 0 || extra[s] + layers[s] >= extra[pick] + layers[pick])) pick = s;
    layers[pick]--;
  }
}

int sched_partition_make(const SchedPartitionSpec *spec, SchedPartition *out, Error *err) {
  memset(out, 0, sizeof *out);
  if (spec->pp < 1 || spec->vpp < 1 || (long)spec->pp * spec->vpp > PARTITION_MAX_STAGES)
    return error_set(err, ERR_CONFIG, "partition: pp (%d) and vpp (%d) must be >= 1 with at most %d stages", spec->pp,
                     spec->vpp, PARTITION_MAX_STAGES);
  if (!(spec->embedding_weight >= 0) || !(spec->head_weight >= 0) || isinf(spec->embedding_weight) ||
      isinf(spec->head_weight))
    return error_set(err, ERR_CONFIG, "partition: embedding and head weights must be finite and >= 0 (got %g, %g)",
                     spec->embedding_weight, spec->head_weight);
  int S = spec->pp * spec->vpp;
  long lo = spec->allow_empty ? 0 : 1;
  long L = spec->num_layers;
  if (L < 0 || L > PARTITION_MAX_LAYERS)
    return error_set(err, ERR_CONFIG, "partition: num_layers must be in [0, %d], got %ld", PARTITION_MAX_LAYERS, L);
  if (spec->layers_per_stage) {
    if (spec->num_given != S)
      return error_set(err, ERR_CONFIG,
                       "partition: %d layer counts given for %d stages (pp %d x vpp %d); list one count per stage in "
                       "stage order (stage = chunk * pp + rank)",
                       spec->num_given, S, spec->pp, spec->vpp);
    long sum = 0;
    for (int s = 0; s < S; s++) {
      int v = spec->layers_per_stage[s];
      if (v < 0) return error_set(err, ERR_CONFIG, "partition: stage %d has %d layers; counts must be >= 0", s, v);
      if (v < lo)
        return error_set(err, ERR_CONFIG, "partition: stage %d (rank %d, chunk %d) has no layers; give every stage at least one",
                         s, s % spec->pp, s / spec->pp);
      sum += v;
      if (sum > PARTITION_MAX_LAYERS) return error_set(err, ERR_CONFIG, "partition: more than %d layers in all", PARTITION_MAX_LAYERS);
    }
    if (L == 0) L = sum;
    if (sum != L)
      return error_set(err, ERR_CONFIG, "partition: the layers per stage sum to %ld but the model has %ld layers", sum, L);
  } else if (L < S * lo) {
    return error_set(err, ERR_CONFIG,
                     "partition: %ld layers cannot fill %d stages (pp %d x vpp %d) with at least one each; use fewer "
                     "stages or allow empty stages",
                     L, S, spec->pp, spec->vpp);
  }
  out->num_stages = S;
  out->pp = spec->pp;
  out->vpp = spec->vpp;
  out->num_layers = (int)L;
  out->first_layer = calloc((size_t)S, sizeof *out->first_layer);
  out->layers = calloc((size_t)S, sizeof *out->layers);
  out->weight = calloc((size_t)S, sizeof *out->weight);
  if (!out->first_layer || !out->layers || !out->weight) {
    sched_partition_free(out);
    return error_set(err, ERR_NOMEM, "partition: out of memory");
  }
  double *extra = out->weight; /* reused: extras first, full weights below */
  extra[0] += spec->embedding_weight;
  extra[S - 1] += spec->head_weight;
  if (spec->layers_per_stage)
    memcpy(out->layers, spec->layers_per_stage, (size_t)S * sizeof *out->layers);
  else
    balance(extra, S, lo, L, out->layers);
  int first = 0;
  double total = 0;
  out->max_weight = 0;
  for (int s = 0; s < S; s++) {
    out->first_layer[s] = first;
    first += out->layers[s];
    out->weight[s] += out->layers[s];
    total += out->weight[s];
    if (out->weight[s] > out->max_weight) out->max_weight = out->weight[s];
  }
  out->mean_weight = total / S;
  return ERR_OK;
}

int sched_partition_stage_of_layer(const SchedPartition *p, int layer) {
  for (int s = 0; s < p->num_stages; s++)
    if (layer >= p->first_layer[s] && layer < p->first_layer[s] + p->layers[s]) return s;
  return -1;
}

int sched_partition_parse_list(const char *text, int **values, int *count, Error *err) {
  *values = NULL;
  *count = 0;
  int n = 1;
  for (const char *c = text; *c; c++) n += *c == ',';
  int *v = malloc((size_t)n * sizeof *v);
  if (!v) return error_set(err, ERR_NOMEM, "out of memory");
  const char *p = text;
  for (int i = 0; i < n; i++) {
    while (isspace((unsigned char)*p)) p++;
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (end == p || errno || x < 0 || x > PARTITION_MAX_LAYERS) {
      free(v);
      return error_set(err, ERR_ARG, "layer list '%s': entry %d is not a count in [0, %d]", text, i + 1, PARTITION_MAX_LAYERS);
    }
    p = end;
    while (isspace((unsigned char)*p)) p++;
    if (*p != (i + 1 < n ? ',' : '\0')) {
      free(v);
      return error_set(err, ERR_ARG, "layer list '%s': expected comma-separated counts like 2,3,3", text);
    }
    if (*p) p++;
    v[i] = (int)x;
  }
  *values = v;
  *count = n;
  return ERR_OK;
}

void sched_partition_print(const SchedPartition *p, FILE *f) {
  fprintf(f, "%6s %5s %6s %7s %9s %8s\n", "stage", "rank", "chunk", "blocks", "range", "weight");
  for (int s = 0; s < p->num_stages; s++) {
    char range[32];
    if (p->layers[s])
      snprintf(range, sizeof range, "%d-%d", p->first_layer[s], p->first_layer[s] + p->layers[s] - 1);
    else
      snprintf(range, sizeof range, "-");
    fprintf(f, "%6d %5d %6d %7d %9s %8.2f%s%s\n", s, s % p->pp, s / p->pp, p->layers[s], range, p->weight[s],
            s == 0 ? "  +embedding" : "", s == p->num_stages - 1 ? "  +head/loss" : "");
  }
  fprintf(f, "heaviest stage %.2f, mean %.2f (balance %.1f%%)\n", p->max_weight, p->mean_weight,
          p->max_weight > 0 ? 100.0 * p->mean_weight / p->max_weight : 100.0);
}
