/* The bucket-size search of the nets' simulator (net_buckets.h). */
#include "plan/net_buckets.h"

#include <string.h>

#include "plan/buckets.h"

#define MAX_BUCKETS 64
#define MIN_BUCKET_ELEMENTS 64

typedef struct NetAt {
  const PlanNetLayer *layers;
  int n;
  const ClusterSpec *cl;
  const PlanOptions *opt;
  const PlanNetConfig *cfg;
} NetAt;

static int simulate_at(const NetAt *a, double size, PlanNetResult *r, Error *err) {
  PlanOptions o = *a->opt;
  if (size > 0) o.bucket_params = size, o.bucket_max_share = 0;
  return plan_net_simulate(a->layers, a->n, a->cl, &o, a->cfg, r, err);
}

static int step_at(void *ctx, double size, double *step_time, Error *err) {
  PlanNetResult r;
  int rc = simulate_at(ctx, size, &r, err);
  if (!rc) *step_time = r.step_time;
  return rc;
}

double plan_net_bucket_mb(double elements) { return (elements * 4 + 2) / 1e6; }

int plan_net_search_buckets(const PlanNetLayer *layers, int n, const ClusterSpec *cl, const PlanOptions *opt,
                            const PlanNetConfig *cfg, PlanNetBucketChoice *out, Error *err) {
  memset(out, 0, sizeof *out);
  NetAt at = {layers, n, cl, opt, cfg};
  PlanNetResult r;
  int rc = simulate_at(&at, 0, &r, err);
  if (rc) return rc;
  out->simulations = 1;
  out->default_params = r.bucket_params;
  out->default_step_time = out->step_time = r.step_time;
  out->default_buckets = out->buckets = r.buckets;
  out->bucket_params = r.bucket_params;
  out->reduce = r.reduce;
  if (cfg->dp <= 1) {
    out->bucket_mb = plan_net_bucket_mb(out->bucket_params);
    return ERR_OK;
  }
  double total = r.params;
  PlanSizeSearch found;
  rc = plan_buckets_search_sizes(&total, 1, MAX_BUCKETS, MIN_BUCKET_ELEMENTS, step_at, &at, &found, err);
  if (rc) return rc;
  out->num_candidates = found.num_candidates;
  out->simulations += found.simulations;
  if (found.best_size > 0 && found.best_time < out->default_step_time * (1 - 1e-12)) {
    if ((rc = simulate_at(&at, found.best_size, &r, err))) return rc;
    out->simulations++;
    out->bucket_params = r.bucket_params;
    out->step_time = r.step_time;
    out->buckets = r.buckets;
    out->reduce = r.reduce;
  }
  out->bucket_mb = plan_net_bucket_mb(out->bucket_params);
  return ERR_OK;
}

void plan_net_bucket_explain(const PlanNetBucketChoice *c, const PlanNetConfig *cfg, FILE *f) {
  double gain = c->default_step_time > 0 ? 100.0 * (c->default_step_time - c->step_time) / c->default_step_time : 0;
  fprintf(f,
          "gradient buckets (uniform sizes, as the runtime cuts them; %d candidate sizes, every bucket count up to "
          "%d, then golden section; %ld simulations; overlap %.2g): default %.0f elements (%d bucket(s)) %.3f ms/step, "
          "chosen %.0f elements (%d bucket(s), --bucket-mb %.9g) %.3f ms/step (%.1f%% faster), exposed reduction "
          "%.3f ms\n",
          c->num_candidates, MAX_BUCKETS, c->simulations, cfg->overlap, c->default_params, c->default_buckets,
          c->default_step_time * 1e3, c->bucket_params, c->buckets, c->bucket_mb, c->step_time * 1e3, gain,
          c->reduce * 1e3);
}
