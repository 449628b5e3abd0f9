/* Gradient buckets priced one by one, the backtracking search over layer
 * boundaries, the candidate uniform sizes, and the simulator-driven search
 * of the runtime's bucket size (buckets.h). */
#include "plan/buckets.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/memory.h"

double plan_buckets_total_elements(const PlanBucketModel *bm) {
  double n = 0;
  for (int i = 0; i < bm->num_layers; i++)
    for (int g = 0; g < PLAN_BUCKET_GROUPS; g++) n += bm->layer[i].elements[g];
  return n;
}

static double layer_elements(const PlanGradLayer *l) {
  double n = 0;
  for (int g = 0; g < PLAN_BUCKET_GROUPS; g++) n += l->elements[g];
  return n;
}

static double bucket_cost(const PlanBucketModel *bm, const double *elements) {
  double t = 0;
  for (int g = 0; g < PLAN_BUCKET_GROUPS; g++)
    if (elements[g] > 0) t += bm->reduce_time(bm->ctx, g, elements[g]);
  return t;
}

/* Walks the layers once, cutting buckets at the cumulative counts in
 * ends: each bucket takes its elements per group from the layers it spans
 * (a layer split between buckets gives each its share) and is ready when
 * the layer holding its last element has finished backward. */
int plan_buckets_price(const PlanBucketModel *bm, const double *ends, int n, PlanBucketPrice *out, Error *err) {
  memset(out, 0, sizeof *out);
  double total = plan_buckets_total_elements(bm), backward = 0;
  for (int i = 0; i < bm->num_layers; i++) backward += bm->layer[i].bwd_seconds;
  out->backward = backward;
  if (!(total > 0)) return ERR_OK;
  if (n < 1 || fabs(ends[n - 1] - total) > 1e-9 * total)
    return error_set(err, ERR_ARG, "buckets: the last bucket must end at the total (%.0f elements)", total);
  double f = bm->overlap < 0 ? 0 : bm->overlap > 1 ? 1 : bm->overlap;
  int li = 0;
  double layer_done = 0, layer_end_time = 0; /* elements of layer li already taken; li's finish time */
  if (bm->num_layers > 0) layer_end_time = bm->layer[0].bwd_seconds;
  double link_free = 0, begin = 0;
  for (int b = 0; b < n; b++) {
    if (ends[b] <= begin) return error_set(err, ERR_ARG, "buckets: bucket %d is empty or out of order", b);
    double want = ends[b] - begin, elements[PLAN_BUCKET_GROUPS] = {0}, ready = 0;
    while (want > 1e-9 * total && li < bm->num_layers) {
      const PlanGradLayer *l = &bm->layer[li];
      double in_layer = layer_elements(l), left = in_layer - layer_done;
      double take = left < want ? left : want;
      for (int g = 0; g < PLAN_BUCKET_GROUPS; g++)
        if (in_layer > 0) elements[g] += l->elements[g] * take / in_layer;
      want -= take;
      layer_done += take;
      ready = layer_end_time;
      if (layer_done >= in_layer - 1e-9 * total) {
        li++;
        layer_done = 0;
        if (li < bm->num_layers) layer_end_time += bm->layer[li].bwd_seconds;
      }
    }
    ready += (1.0 - f) * (backward - ready);
    double cost = bucket_cost(bm, elements);
    double start = ready > link_free ? ready : link_free;
    link_free = start + cost;
    out->reduce += cost;
    begin = ends[b];
  }
  out->buckets = n;
  out->finish = link_free;
  out->exposed = link_free > backward ? link_free - backward : 0.0;
  return ERR_OK;
}

int plan_buckets_price_uniform(const PlanBucketModel *bm, double size, PlanBucketPrice *out, Error *err) {
  double total = plan_buckets_total_elements(bm);
  if (!(size > 0)) size = total > 0 ? total : 1;
  /* Segment ends (cumulative), then each segment cut from its start. */
  double count = 0, seg_begin = 0, acc = 0;
  for (int i = 0; i < bm->num_layers; i++) {
    double e = layer_elements(&bm->layer[i]);
    if (i > 0 && bm->layer[i].starts_segment && acc > seg_begin) count += ceil((acc - seg_begin) / size), seg_begin = acc;
    acc += e;
  }
  if (acc > seg_begin) count += ceil((acc - seg_begin) / size);
  if (count < 1) count = 1;
  if (count > 1e6) return error_set(err, ERR_ARG, "buckets: %.0f buckets of %.0f elements is too many", count, size);
  double *ends = malloc((size_t)count * sizeof *ends);
  if (!ends) return error_set(err, ERR_NOMEM, "buckets: out of memory");
  int n = 0;
  seg_begin = acc = 0;
  for (int i = 0; i <= bm->num_layers; i++) {
    int boundary = i == bm->num_layers || (i > 0 && bm->layer[i].starts_segment);
    if (boundary && acc > seg_begin) {
      for (double at = seg_begin + size; at < acc; at += size) ends[n++] = at;
      ends[n++] = acc;
      seg_begin = acc;
    }
    if (i < bm->num_layers) acc += layer_elements(&bm->layer[i]);
  }
  if (n == 0) ends[n++] = total;
  ends[n - 1] = total;
  int rc = plan_buckets_price(bm, ends, n, out, err);
  free(ends);
  return rc;
}

/* ---- free boundaries: depth-first backtracking ---- */

typedef struct Backtrack {
  const PlanBucketModel *bm;
  double backward;
  double *ready;      /* per layer: when its bucket could start (overlap applied) */
  double *suffix_min; /* per layer i: reduction of layers i.. fused, a lower bound on what is left */
  double last_cost;   /* the last layer's reduction alone: the last bucket costs at least that */
  int *cut, *best_cut;
  double best_exposed;
  int best_buckets;
  long nodes, budget;
} Backtrack;

static int better(double exposed, int buckets, double best_exposed, int best_buckets) {
  double tol = isfinite(best_exposed) ? 1e-12 * (1.0 + fabs(best_exposed)) : 0.0;
  return exposed < best_exposed - tol || (exposed <= best_exposed + tol && buckets < best_buckets);
}

/* Layers [first, i] form the open bucket; link_free is when the buckets
 * before it finish. Decides whether a bucket ends after layer i. */
static void backtrack(Backtrack *bt, int first, int i, double link_free, int buckets, const double *open) {
  if (bt->nodes++ >= bt->budget) return;
  const PlanBucketModel *bm = bt->bm;
  double elements[PLAN_BUCKET_GROUPS];
  for (int g = 0; g < PLAN_BUCKET_GROUPS; g++) elements[g] = open[g] + bm->layer[i].elements[g];
  /* Lower bound: the open bucket and everything after it cost at least
   * their fused reduction after link_free (a reduction's latency only adds
   * when split: subadditive, as every alpha-beta algorithm is), and the
   * last bucket starts after that layer is done and costs at least its
   * reduction (monotone in the elements). */
  double bound = fmax(link_free + bt->suffix_min[first], fmax(link_free, bt->ready[bm->num_layers - 1]) + bt->last_cost);
  double bound_exposed = bound > bt->backward ? bound - bt->backward : 0.0;
  double tol = isfinite(bt->best_exposed) ? 1e-12 * (1.0 + fabs(bt->best_exposed)) : 0.0;
  if (bound_exposed > bt->best_exposed + tol) return;
  if (bound_exposed >= bt->best_exposed - tol && buckets + 1 >= bt->best_buckets) return; /* can only tie, with more */
  /* Close the bucket after layer i. */
  double start = fmax(bt->ready[i], link_free);
  double finish = start + bucket_cost(bm, elements);
  bt->cut[i] = 1;
  if (i == bm->num_layers - 1) {
    double exposed = finish > bt->backward ? finish - bt->backward : 0.0;
    if (better(exposed, buckets + 1, bt->best_exposed, bt->best_buckets)) {
      bt->best_exposed = exposed;
      bt->best_buckets = buckets + 1;
      memcpy(bt->best_cut, bt->cut, (size_t)bm->num_layers * sizeof *bt->cut);
    }
    return;
  }
  double none[PLAN_BUCKET_GROUPS] = {0};
  backtrack(bt, i + 1, i + 1, finish, buckets + 1, none);
  if (bm->layer[i + 1].starts_segment) return; /* a cut of the runtime's: the bucket must end here */
  /* Or keep it open over layer i + 1. */
  bt->cut[i] = 0;
  backtrack(bt, first, i + 1, link_free, buckets, elements);
}

int plan_buckets_search_boundaries(const PlanBucketModel *bm, long node_budget, int *layer_cut, PlanBucketPrice *best,
                                   long *nodes, int *exhaustive, Error *err) {
  int L = bm->num_layers;
  memset(best, 0, sizeof *best);
  if (L < 1) return error_set(err, ERR_ARG, "buckets: no layers to search");
  Backtrack bt = {.bm = bm, .budget = node_budget > 0 ? node_budget : 1000000};
  bt.ready = malloc((size_t)L * sizeof *bt.ready);
  bt.suffix_min = malloc((size_t)L * sizeof *bt.suffix_min);
  bt.cut = calloc((size_t)L, sizeof *bt.cut);
  bt.best_cut = calloc((size_t)L, sizeof *bt.best_cut);
  if (!bt.ready || !bt.suffix_min || !bt.cut || !bt.best_cut) {
    free(bt.ready), free(bt.suffix_min), free(bt.cut), free(bt.best_cut);
    return error_set(err, ERR_NOMEM, "buckets: out of memory");
  }
  for (int i = 0; i < L; i++) bt.backward += bm->layer[i].bwd_seconds;
  double f = bm->overlap < 0 ? 0 : bm->overlap > 1 ? 1 : bm->overlap, t = 0;
  for (int i = 0; i < L; i++) {
    t += bm->layer[i].bwd_seconds;
    bt.ready[i] = t + (1.0 - f) * (bt.backward - t);
  }
  double suffix[PLAN_BUCKET_GROUPS] = {0};
  for (int i = L - 1; i >= 0; i--) {
    for (int g = 0; g < PLAN_BUCKET_GROUPS; g++) suffix[g] += bm->layer[i].elements[g];
    bt.suffix_min[i] = bucket_cost(bm, suffix);
  }
  bt.last_cost = bucket_cost(bm, bm->layer[L - 1].elements);
  /* Start from no answer: the search always reaches one. */
  bt.best_exposed = INFINITY;
  bt.best_buckets = INT_MAX;
  double none[PLAN_BUCKET_GROUPS] = {0};
  backtrack(&bt, 0, 0, 0.0, 0, none);
  memcpy(layer_cut, bt.best_cut, (size_t)L * sizeof *layer_cut);
  *nodes = bt.nodes;
  *exhaustive = bt.nodes < bt.budget;
  /* Price the winner with the common pricer, so both searches agree on terms. */
  double *ends = malloc((size_t)L * sizeof *ends);
  int n = 0, rc = ERR_OK;
  if (!ends) rc = error_set(err, ERR_NOMEM, "buckets: out of memory");
  double acc = 0;
  for (int i = 0; !rc && i < L; i++) {
    acc += layer_elements(&bm->layer[i]);
    if (layer_cut[i] && (n == 0 || acc > ends[n - 1])) ends[n++] = acc;
  }
  if (!rc && n > 0) ends[n - 1] = plan_buckets_total_elements(bm);
  if (!rc) rc = plan_buckets_price(bm, ends, n, best, err);
  free(ends);
  free(bt.ready), free(bt.suffix_min), free(bt.cut), free(bt.best_cut);
  return rc;
}

static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

int plan_bucket_candidate_sizes(const double *segment_elements, int n, int max_buckets, double min_size,
                                double *sizes, int capacity) {
  int count = 0;
  for (int s = 0; s < n; s++)
    for (int k = 1; k <= max_buckets && count < capacity; k++) {
      double size = ceil(segment_elements[s] / k);
      if (size < min_size || size < 1) break;
      sizes[count++] = size;
    }
  qsort(sizes, (size_t)count, sizeof *sizes, cmp_desc);
  int u = 0;
  for (int i = 0; i < count; i++)
    if (u == 0 || sizes[i] != sizes[u - 1]) sizes[u++] = sizes[i];
  return u;
}

/* ---- driven by the simulator ---- */

int plan_stage_grad_layers(const PlanCostModel *cm, const SchedPartition *part, int s, PlanGradLayer *out) {
  const ModelConfig *m = cm->model;
  const PlanConfig *cfg = cm->cfg;
  const PlanParallel *par = &cfg->par;
  /* With an MoE grid the runtime routes every expert range over EDP, and
   * those ranges are cuts (trainer_fold.c): a block's experts (backward
   * finishes them first) and its dense tensors are segments of their own. */
  int expert_cuts = par->cp > 1 || par->ep > 1 || par->etp > 1;
  int n = 0;
  if (s == part->num_stages - 1) {
    PlanParams p = plan_head_params(m, cfg);
    out[n++] = (PlanGradLayer){{p.dense, p.expert}, cm->head.bwd_total, 0};
  }
  for (int l = part->first_layer[s] + part->layers[s] - 1; l >= part->first_layer[s]; l--) {
    PlanParams p = plan_layer_params(m, cfg, l);
    const PlanPassCost *c = plan_layer_cost(cm, l);
    if (expert_cuts && p.expert > 0) {
      const double *t = c->bwd.t;
      double experts = t[PLAN_COMP_EXPERT_GEMM] + t[PLAN_COMP_EP_COMM] + t[PLAN_COMP_ETP_COMM];
      out[n++] = (PlanGradLayer){{0, p.expert}, experts, 1};
      out[n++] = (PlanGradLayer){{p.dense, 0}, c->bwd_total - experts, 1};
    } else {
      out[n++] = (PlanGradLayer){{p.dense, p.expert}, c->bwd_total, 0};
    }
  }
  if (s == 0) {
    PlanParams p = plan_embedding_params(m, cfg);
    out[n++] = (PlanGradLayer){{p.dense, p.expert}, cm->embedding.bwd_total, 0};
  }
  return n;
}

double plan_stage_reduce_time(const void *ctx, int group, double elements) {
  const PlanCostModel *cm = ctx;
  PlanCollective kind = cm->cfg->distributed_optimizer ? PLAN_COLL_REDUCE_SCATTER : PLAN_COLL_ALL_REDUCE;
  const PlanGroupTopo *g = &cm->group[group == 0 ? PLAN_GROUP_DPCP : PLAN_GROUP_EDP];
  return plan_bucket_reduce_time(cm->cluster, cm->opt, g, kind, elements * cm->opt->grad_reduce_bytes);
}

#define MAX_CANDIDATES 1024
#define MAX_BUCKETS_PER_STAGE 64
#define MIN_BUCKET_ELEMENTS 1024

int plan_buckets_search_sizes(const double *segments, int num_segments, int max_buckets, double min_size,
                              PlanStepAtSizeFn step, void *ctx, PlanSizeSearch *out, Error *err) {
  memset(out, 0, sizeof *out);
  out->best_size = -1;
  double *sizes = malloc(MAX_CANDIDATES * sizeof *sizes);
  if (!sizes) return error_set(err, ERR_NOMEM, "buckets: out of memory");
  int n = plan_bucket_candidate_sizes(segments, num_segments, max_buckets, min_size, sizes, MAX_CANDIDATES);
  out->num_candidates = n;
  double best = -1, best_time = 0, t = 0;
  int best_i = -1, rc = ERR_OK;
  for (int i = 0; i < n; i++) {
    if ((rc = step(ctx, sizes[i], &t, err))) break;
    out->simulations++;
    /* Sizes come largest first: a tie keeps the larger (fewer messages). */
    if (best < 0 || t < best_time * (1 - 1e-12)) best = sizes[i], best_time = t, best_i = i;
  }
  /* Within a bucket count the boundaries still move with the size; between
   * the sizes where a boundary crosses a layer end the step is convex in
   * the size (a max-plus of linear terms), so a golden-section search over
   * the sizes between the best count's neighbours finds that stretch's
   * minimum. */
  if (!rc && best_i >= 0) {
    double lo = best_i + 1 < n ? sizes[best_i + 1] : min_size, hi = best_i > 0 ? sizes[best_i - 1] : best;
    const double phi = 0.6180339887498949;
    double a = lo, b = hi;
    for (int it = 0; it < 40 && b - a > 2; it++) {
      double x1 = round(b - phi * (b - a)), x2 = round(a + phi * (b - a)), t1 = 0, t2 = 0;
      if ((rc = step(ctx, x1, &t1, err)) || (rc = step(ctx, x2, &t2, err))) break;
      out->simulations += 2;
      if (t1 < best_time * (1 - 1e-12)) best = x1, best_time = t1;
      if (t2 < best_time * (1 - 1e-12)) best = x2, best_time = t2;
      if (t1 <= t2) b = x2;
      else a = x1;
    }
  }
  free(sizes);
  out->best_size = best;
  out->best_time = best_time;
  return rc;
}

/* Simulates cfg with buckets of `size` elements (0: the options' own). */
static int simulate_with(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *base, const PlanConfig *cfg,
                         double size, PlanResult *r, Error *err) {
  PlanOptions o = *base;
  if (size > 0) {
    o.bucket_params = size;
    o.bucket_max_share = 0;
  }
  return plan_simulate(m, cl, &o, cfg, NULL, NULL, r, err);
}

typedef struct SimulateAt {
  const ModelConfig *m;
  const ClusterSpec *cl;
  const PlanOptions *opt;
  const PlanConfig *cfg;
} SimulateAt;

static int step_at_size(void *ctx, double size, double *step_time, Error *err) {
  const SimulateAt *a = ctx;
  PlanResult r;
  int rc = simulate_with(a->m, a->cl, a->opt, a->cfg, size, &r, err);
  if (rc) return rc;
  *step_time = r.step_time;
  plan_result_free(&r);
  return ERR_OK;
}

/* The free-boundary search on the stage whose exposed reduction is the
 * largest, against the chosen uniform size there. */
static int compare_boundaries(const PlanCostModel *cm, const PlanStageCosts *sc, PlanBucketChoice *out, Error *err) {
  int worst = 0;
  for (int s = 1; s < sc->num_stages; s++)
    if (sc->grad_reduce[s] > sc->grad_reduce[worst]) worst = s;
  PlanGradLayer *layers = malloc((2 * (size_t)sc->part.layers[worst] + 2) * sizeof *layers);
  int *cut = malloc((2 * (size_t)sc->part.layers[worst] + 2) * sizeof *cut);
  int rc = layers && cut ? ERR_OK : error_set(err, ERR_NOMEM, "buckets: out of memory");
  if (!rc) {
    int n = plan_stage_grad_layers(cm, &sc->part, worst, layers);
    PlanBucketModel bm = {layers, n, cm->opt->dp_overlap, plan_stage_reduce_time, cm};
    PlanBucketPrice uniform, best;
    long nodes = 0;
    rc = plan_buckets_price_uniform(&bm, sc->bucket_params, &uniform, err);
    if (!rc) rc = plan_buckets_search_boundaries(&bm, 200000, cut, &best, &nodes, &out->boundary_exhaustive, err);
    if (!rc) {
      out->boundary_stage = worst;
      out->uniform_exposed = uniform.exposed;
      out->boundary_exposed = best.exposed;
      out->boundary_buckets = best.buckets;
    }
  }
  free(layers);
  free(cut);
  return rc;
}

int plan_buckets_search_uniform(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *opt,
                                const PlanConfig *cfg, PlanBucketChoice *out, PlanOptions *opt_out, Error *err) {
  memset(out, 0, sizeof *out);
  PlanCostModel cm;
  int rc = plan_cost_model_init(&cm, m, cl, opt, cfg, NULL, err);
  PlanStageCosts sc;
  if (!rc) rc = plan_stage_costs_build(&cm, &sc, err);
  if (rc) return rc;
  out->default_params = sc.bucket_params;
  /* Every segment the runtime cuts (chunks, expert ranges; each distinct
   * size once) and where their bucket counts change. */
  int S = sc.num_stages, max_layers = 0, num_segments = 0;
  for (int s = 0; s < S; s++) max_layers = sc.part.layers[s] > max_layers ? sc.part.layers[s] : max_layers;
  size_t seg_cap = (size_t)S * (2 * (size_t)max_layers + 2);
  double *segments = malloc(seg_cap * sizeof *segments);
  PlanGradLayer *gl = malloc((2 * (size_t)max_layers + 2) * sizeof *gl);
  if (!segments || !gl) rc = error_set(err, ERR_NOMEM, "buckets: out of memory");
  for (int s = 0; !rc && s < S; s++) {
    int nl = plan_stage_grad_layers(&cm, &sc.part, s, gl);
    double acc = 0;
    for (int i = 0; i <= nl; i++) {
      if ((i == nl || (i > 0 && gl[i].starts_segment)) && acc > 0) {
        int seen = 0;
        for (int k = 0; k < num_segments && !seen; k++) seen = segments[k] == acc;
        if (!seen) segments[num_segments++] = acc;
        acc = 0;
      }
      if (i < nl) acc += layer_elements(&gl[i]);
    }
  }
  free(gl);
  plan_stage_costs_free(&sc);
  PlanResult r;
  if (!rc) rc = simulate_with(m, cl, opt, cfg, 0, &r, err);
  if (!rc) {
    out->default_step_time = r.step_time;
    plan_result_free(&r);
  }
  SimulateAt at = {m, cl, opt, cfg};
  PlanSizeSearch found = {0};
  if (!rc) rc = plan_buckets_search_sizes(segments, num_segments, MAX_BUCKETS_PER_STAGE, MIN_BUCKET_ELEMENTS,
                                          step_at_size, &at, &found, err);
  out->num_candidates = found.num_candidates;
  out->simulations = 1 + found.simulations;
  double best = found.best_size, best_time = found.best_time;
  free(segments);
  if (rc) return rc;
  if (best < 0 || !(best_time < out->default_step_time * (1 - 1e-12))) {
    best = out->default_params; /* nothing beats the default: keep it */
    best_time = out->default_step_time;
  }
  out->bucket_params = best;
  out->bucket_mb = best * 4 / 1e6;
  out->step_time = best_time;
  *opt_out = *opt;
  opt_out->bucket_params = best;
  opt_out->bucket_max_share = 0;
  /* The winner's layout, for the plan file and the explanation. */
  rc = plan_cost_model_init(&cm, m, cl, opt_out, cfg, NULL, err);
  if (!rc) rc = plan_stage_costs_build(&cm, &sc, err);
  if (rc) return rc;
  out->num_stages = S < PLAN_MAX_STAGES ? S : PLAN_MAX_STAGES;
  for (int s = 0; s < out->num_stages; s++) out->buckets_per_stage[s] = sc.buckets[s];
  rc = compare_boundaries(&cm, &sc, out, err);
  plan_stage_costs_free(&sc);
  return rc;
}

void plan_bucket_explain(const PlanBucketChoice *c, FILE *f) {
  double gain = c->default_step_time > 0 ? 100.0 * (c->default_step_time - c->step_time) / c->default_step_time : 0;
  fprintf(f,
          "gradient buckets (uniform sizes, the runtime's only layout; %d candidate sizes, every bucket count "
          "up to 64 per segment, then golden section; %ld simulations): default %.3g MB %.4f s/step, chosen %.3g MB (--bucket-mb %.6g) "
          "%.4f s/step (%.1f%% faster)\n",
          c->num_candidates, c->simulations, c->default_params * 4 / 1e6, c->default_step_time, c->bucket_mb,
          c->bucket_mb, c->step_time, gain);
  fprintf(f, "  buckets per stage:");
  for (int s = 0; s < c->num_stages;) {
    int run = 1;
    while (s + run < c->num_stages && c->buckets_per_stage[s + run] == c->buckets_per_stage[s]) run++;
    if (run > 2) fprintf(f, " %d (x%d)", c->buckets_per_stage[s], run);
    else for (int k = 0; k < run; k++) fprintf(f, " %d", c->buckets_per_stage[s]);
    s += run;
  }
  fprintf(f, "\n  free layer boundaries (backtracking%s; not run by the runtime) on stage %d: exposed reduction "
             "%.4f s with the chosen size, %.4f s with %d bucket(s) at the best boundaries\n",
          c->boundary_exhaustive ? ", exhaustive" : ", node budget reached", c->boundary_stage, c->uniform_exposed,
          c->boundary_exposed, c->boundary_buckets);
}
