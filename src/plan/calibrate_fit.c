/* Calibration fits (calibrate_fit.h): weighted line fits for alpha-beta,
 * the binned GEMM efficiency curve, the local-machine default spec and the
 * spec writer. */
#include "plan/calibrate_fit.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/program.h"

#define GIB 1073741824.0

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double calib_median(double *v, int n) {
  if (n <= 0) return 0.0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int calib_fit_line(const double *x, const double *t, int n, double *intercept, double *slope, Error *err) {
  if (n < 2) return error_set(err, ERR_ARG, "calibration fit: needs at least 2 measurements, got %d", n);
  /* Weights 1/t^2: a 10 us message and a 10 ms one inform the fit equally,
   * as they inform relative prediction error. */
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0, xmin = INFINITY, xmax = -INFINITY;
  for (int i = 0; i < n; i++) {
    if (!(t[i] > 0) || !isfinite(t[i]) || !(x[i] >= 0) || !isfinite(x[i]))
      return error_set(err, ERR_ARG, "calibration fit: measurement %d (x %g, time %g s) is not usable: expected x >= 0 "
                       "and a time > 0", i, x[i], t[i]);
    double w = 1.0 / (t[i] * t[i]);
    sw += w, sx += w * x[i], st += w * t[i], sxx += w * x[i] * x[i], sxt += w * x[i] * t[i];
    xmin = fmin(xmin, x[i]), xmax = fmax(xmax, x[i]);
  }
  if (!(xmax > xmin)) return error_set(err, ERR_ARG, "calibration fit: needs at least 2 distinct sizes");
  double det = sw * sxx - sx * sx;
  double b = (sw * sxt - sx * st) / det;
  double a = (st - b * sx) / sw;
  if (a < 0) {
    a = 0;
    b = sxt / sxx; /* through the origin */
  }
  if (!(b > 0) || !isfinite(b))
    return error_set(err, ERR_ARG, "calibration fit: time does not grow with size (slope %g); the measurements are "
                     "too noisy to fit", b);
  *intercept = a;
  *slope = b;
  return ERR_OK;
}

void calib_collective_terms(PlanCollective kind, int n, double *ca, double *cb) {
  double f = n > 1 ? (double)(n - 1) : 1.0, share = n > 1 ? f / n : 1.0;
  switch (kind) {
    case PLAN_COLL_ALL_REDUCE: *ca = 2 * f, *cb = 2 * share; break;
    case PLAN_COLL_REDUCE_SCATTER:
    case PLAN_COLL_ALL_GATHER:
    case PLAN_COLL_ALL_TO_ALL: *ca = f, *cb = share; break;
    default: *ca = 1, *cb = 1; break;
  }
}

int calib_fit_collective(PlanCollective kind, int n, const double *bytes, const double *seconds, int count,
                         PlanLink *out, Error *err) {
  double a, b, ca, cb;
  int rc = calib_fit_line(bytes, seconds, count, &a, &b, err);
  if (rc) return error_wrap(err, "%s on %d ranks", plan_collective_name(kind), n);
  calib_collective_terms(kind, n, &ca, &cb);
  out->latency = a / ca;
  out->bandwidth = cb / b;
  return ERR_OK;
}

typedef struct FlopsEff {
  double log_flops, eff;
} FlopsEff;

static int cmp_flops(const void *a, const void *b) {
  double x = ((const FlopsEff *)a)->log_flops, y = ((const FlopsEff *)b)->log_flops;
  return (x > y) - (x < y);
}

int calib_fit_gemm_curve(const CalibGemmSample *s, int count, double peak, double bin, PlanCurve *out, Error *err) {
  if (count < 1) return error_set(err, ERR_ARG, "GEMM curve: no measurements");
  if (!(peak > 0)) return error_set(err, ERR_ARG, "GEMM curve: peak FLOP/s must be > 0, got %g", peak);
  if (!(bin > 0)) bin = 0.5;
  FlopsEff *p = malloc((size_t)count * sizeof *p);
  double *eff = malloc((size_t)count * sizeof *eff);
  if (!p || !eff) {
    free(p);
    free(eff);
    return error_set(err, ERR_NOMEM, "GEMM curve: out of memory");
  }
  for (int i = 0; i < count; i++) {
    double flops = 2.0 * s[i].m * s[i].n * s[i].k;
    if (!(flops > 0) || !(s[i].seconds > 0)) {
      free(p);
      free(eff);
      return error_set(err, ERR_ARG, "GEMM curve: sample %d (%g x %g x %g, %g s) needs positive sizes and time", i,
                       s[i].m, s[i].n, s[i].k, s[i].seconds);
    }
    p[i].log_flops = log10(flops);
    p[i].eff = flops / (peak * s[i].seconds);
  }
  qsort(p, (size_t)count, sizeof *p, cmp_flops);
  memset(out, 0, sizeof *out);
  int i = 0;
  while (i < count) {
    /* A bin starts at its smallest sample and holds what lies within bin decades. */
    int j = i;
    double sum_log = 0;
    while (j < count && p[j].log_flops < p[i].log_flops + bin) {
      eff[j - i] = p[j].eff;
      sum_log += p[j].log_flops;
      j++;
    }
    if (out->n == PLAN_MAX_CURVE_POINTS) {
      free(p);
      free(eff);
      return error_set(err, ERR_ARG, "GEMM curve: the shapes span more than %d bins of %g decades; use wider bins",
                       PLAN_MAX_CURVE_POINTS, bin);
    }
    double y = calib_median(eff, j - i);
    out->x[out->n] = pow(10.0, sum_log / (j - i));
    out->y[out->n] = fmin(1.0, fmax(y, 1e-6));
    out->n++;
    i = j;
  }
  free(p);
  free(eff);
  return ERR_OK;
}

void calib_spec_local_default(ClusterSpec *s, int devices) {
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "local");
  snprintf(s->origin, sizeof s->origin, "<calibrate>");
  s->nodes = 1;
  s->devices_per_node = devices > 0 ? devices : 1;
  cluster_spec_default_compute(s);
  for (int d = 0; d < PLAN_NUM_DTYPES; d++) s->peak_flops[d] = 0;
  s->peak_flops[PLAN_DTYPE_BF16] = s->peak_flops[PLAN_DTYPE_FP32] = 1e11;
  s->memory_capacity = 16 * GIB;
  s->memory_reserved = 0.5 * GIB;
  s->memory_bandwidth = 10e9;
  s->memory_efficiency = 1.0;
  /* Ranks of one machine talk through shared memory; between machines the
   * default is commodity Ethernet. */
  s->link[PLAN_LEVEL_INTRA] = (PlanLink){5e9, 2e-6};
  s->link[PLAN_LEVEL_INTER] = (PlanLink){10e9 / 8, 30e-6};
  s->link_efficiency[0] = s->link_efficiency[1] = 1.0;
}

void calib_runtime_facts_cpu(PlanRuntimeFacts *rt, const char *host) {
  memset(rt, 0, sizeof *rt);
  rt->given = 1;
  snprintf(rt->device, sizeof rt->device, "cpu");
  if (host) snprintf(rt->host, sizeof rt->host, "%s", host);
  rt->dtype = PLAN_DTYPE_FP32;
  rt->moe_tp_replicated = 1;
  rt->async_progress = 0;
  rt->device_sync = 0;
  rt->dropless_sync = 0.0;
  rt->bucket_bytes = 25.0 * 1024 * 1024;
  rt->bucket_max_share = 0.25;
}

static const char *const LEVEL_KEYS[PLAN_NUM_LEVELS] = {"intra_node", "inter_node"};

static cJSON *link_json(PlanLink l, double efficiency, int with_efficiency) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddNumberToObject(o, "bandwidth_GBps", l.bandwidth / 1e9);
  cJSON_AddNumberToObject(o, "latency_us", l.latency * 1e6);
  if (with_efficiency) cJSON_AddNumberToObject(o, "efficiency", efficiency);
  return o;
}

/* [[x, y], ...] of a curve. */
static cJSON *curve_json(const PlanCurve *c) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < c->n; i++) {
    const double pt[2] = {c->x[i], c->y[i]};
    cJSON_AddItemToArray(a, cJSON_CreateDoubleArray(pt, 2));
  }
  return a;
}

static cJSON *matrix_json(const double *m, int n, double scale) {
  cJSON *rows = cJSON_CreateArray();
  for (int r = 0; rows && r < n; r++) {
    cJSON *row = cJSON_CreateArray();
    if (!row) break;
    for (int c = 0; c < n; c++) cJSON_AddItemToArray(row, cJSON_CreateNumber(m[(size_t)r * n + c] * scale));
    cJSON_AddItemToArray(rows, row);
  }
  return rows;
}

cJSON *calib_spec_to_json(const ClusterSpec *s, const char *description) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  cJSON_AddStringToObject(root, "name", s->name[0] ? s->name : "local");
  if (description) cJSON_AddStringToObject(root, "description", description);
  cJSON_AddNumberToObject(root, "nodes", s->nodes);
  cJSON_AddNumberToObject(root, "devices_per_node", s->devices_per_node);
  cJSON *peak = cJSON_AddObjectToObject(root, "peak_tflops");
  for (int d = 0; peak && d < PLAN_NUM_DTYPES; d++)
    if (s->peak_flops[d] > 0) cJSON_AddNumberToObject(peak, plan_dtype_name((PlanDtype)d), s->peak_flops[d] / 1e12);
  cJSON *mem = cJSON_AddObjectToObject(root, "memory");
  if (mem) {
    cJSON_AddNumberToObject(mem, "capacity_GiB", s->memory_capacity / GIB);
    cJSON_AddNumberToObject(mem, "reserved_GiB", s->memory_reserved / GIB);
    cJSON_AddNumberToObject(mem, "bandwidth_GBps", s->memory_bandwidth / 1e9);
    cJSON_AddNumberToObject(mem, "efficiency", s->memory_efficiency);
  }
  for (int l = 0; l < PLAN_NUM_LEVELS; l++)
    cJSON_AddItemToObject(root, LEVEL_KEYS[l], link_json(s->link[l], s->link_efficiency[l], 1));
  cJSON *comp = cJSON_AddObjectToObject(root, "compute");
  if (comp) {
    cJSON_AddItemToObject(comp, "gemm_efficiency", curve_json(&s->gemm_efficiency));
    const PlanCurve *more_curves[3] = {&s->gemm_efficiency_bf16, &s->gemm_efficiency_bf16_rows_vary,
                                       &s->gemm_efficiency_rows_vary};
    static const char *const curve_names[3] = {"gemm_efficiency_bf16", "gemm_efficiency_bf16_rows_vary",
                                              "gemm_efficiency_rows_vary"};
    for (int k = 0; k < 3; k++)
      if (more_curves[k]->n > 0) cJSON_AddItemToObject(comp, curve_names[k], curve_json(more_curves[k]));
    const PlanConvCurves *convs[2] = {&s->conv_efficiency, &s->conv_efficiency_bf16};
    static const char *const conv_names[2] = {"conv_efficiency", "conv_efficiency_bf16"};
    for (int v = 0; v < 2; v++) {
      if (convs[v]->n <= 0) continue;
      cJSON *list = cJSON_AddArrayToObject(comp, conv_names[v]);
      for (int b = 0; list && b < convs[v]->n; b++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "batch", convs[v]->batch[b]);
        cJSON_AddItemToObject(e, "curve", curve_json(&convs[v]->curve[b]));
        if (convs[v]->per_pass) {
          cJSON_AddItemToObject(e, "data", curve_json(&convs[v]->data[b]));
          cJSON_AddItemToObject(e, "weights", curve_json(&convs[v]->weights[b]));
        }
        cJSON_AddItemToArray(list, e);
      }
    }
    if (s->num_layer_seconds > 0) {
      cJSON *ls = cJSON_AddObjectToObject(comp, "layer_seconds");
      for (int i = 0; ls && i < s->num_layer_seconds; i++) {
        cJSON *pt = cJSON_CreateArray();
        if (s->layer_seconds[i].sizes == 0) {
          cJSON_AddItemToArray(pt, cJSON_CreateNumber(s->layer_seconds[i].fwd));
          cJSON_AddItemToArray(pt, cJSON_CreateNumber(s->layer_seconds[i].bwd));
        }
        for (int j = 0; j < s->layer_seconds[i].sizes; j++) {
          const double at[3] = {s->layer_seconds[i].elements[j], s->layer_seconds[i].fwd_at[j],
                                s->layer_seconds[i].bwd_at[j]};
          cJSON_AddItemToArray(pt, cJSON_CreateDoubleArray(at, 3));
        }
        cJSON_AddItemToObject(ls, s->layer_seconds[i].kind, pt);
      }
    }
    cJSON *att = cJSON_AddObjectToObject(comp, "attention_efficiency");
    if (att) {
      cJSON_AddNumberToObject(att, "forward", s->attention_fwd_efficiency);
      cJSON_AddNumberToObject(att, "backward", s->attention_bwd_efficiency);
      if (s->attention_bf16_fwd_efficiency > 0 && s->attention_bf16_bwd_efficiency > 0) {
        cJSON_AddNumberToObject(att, "forward_bf16", s->attention_bf16_fwd_efficiency);
        cJSON_AddNumberToObject(att, "backward_bf16", s->attention_bf16_bwd_efficiency);
      }
      cJSON_AddNumberToObject(att, "reference_tokens", s->attention_ref_tokens);
      cJSON_AddNumberToObject(att, "length_exponent", s->attention_length_exponent);
      if (s->attention_ring_fwd_efficiency > 0 && s->attention_ring_bwd_efficiency > 0) {
        cJSON_AddNumberToObject(att, "ring_forward", s->attention_ring_fwd_efficiency);
        cJSON_AddNumberToObject(att, "ring_backward", s->attention_ring_bwd_efficiency);
        cJSON_AddNumberToObject(att, "ring_query_tokens", s->attention_ring_query_tokens);
      }
    }
    cJSON_AddNumberToObject(comp, "kernel_floor_us", s->kernel_floor * 1e6);
    if (s->optimizer_per_param > 0) cJSON_AddNumberToObject(comp, "optimizer_ns_per_param", s->optimizer_per_param * 1e9);
  }
  int any = 0;
  for (int k = 0; k < PLAN_NUM_COLLECTIVES; k++)
    for (int l = 0; l < PLAN_NUM_LEVELS; l++) any |= s->has_collective[k][l];
  if (any) {
    cJSON *coll = cJSON_AddObjectToObject(root, "collectives");
    for (int k = 0; coll && k < PLAN_NUM_COLLECTIVES; k++) {
      if (!s->has_collective[k][0] && !s->has_collective[k][1]) continue;
      cJSON *ko = cJSON_AddObjectToObject(coll, plan_collective_name((PlanCollective)k));
      for (int l = 0; ko && l < PLAN_NUM_LEVELS; l++)
        if (s->has_collective[k][l]) cJSON_AddItemToObject(ko, LEVEL_KEYS[l], link_json(s->collective[k][l], 1, 0));
    }
  }
  /* Tiers: what was given (calibrate marks a measured multi-node machine
   * tiered with none of them, so that the planner places groups device by
   * device and searches the mapping there by default). */
  const PlanTiers *t = &s->tiers;
  cJSON *topo = t->given ? cJSON_AddObjectToObject(root, "topology") : NULL;
  if (topo) {
    if (t->nodes_per_switch > 0) {
      cJSON_AddNumberToObject(topo, "nodes_per_switch", t->nodes_per_switch);
      cJSON_AddItemToObject(topo, "inter_switch", link_json(t->inter_switch, 1, 0));
    }
    if (t->devices_per_island > 0) {
      cJSON_AddNumberToObject(topo, "devices_per_island", t->devices_per_island);
      cJSON_AddItemToObject(topo, "cross_island", link_json(t->cross_island, 1, 0));
    }
    if (t->devices_per_nic > 0) cJSON_AddNumberToObject(topo, "devices_per_nic", t->devices_per_nic);
    cJSON *slow = t->num_slow_nodes > 0 ? cJSON_AddArrayToObject(topo, "slow_nodes") : NULL;
    for (int i = 0; slow && i < t->num_slow_nodes; i++) {
      cJSON *e = link_json(t->slow_link[i], 1, 0);
      if (e) cJSON_AddNumberToObject(e, "node", t->slow_node[i]);
      cJSON_AddItemToArray(slow, e);
    }
  }
  const PlanRuntimeFacts *rt = &s->runtime;
  cJSON *run = rt->given ? cJSON_AddObjectToObject(root, "runtime") : NULL;
  if (run) {
    cJSON_AddStringToObject(run, "device", rt->device);
    if (rt->host[0]) cJSON_AddStringToObject(run, "host", rt->host);
    cJSON_AddStringToObject(run, "dtype", plan_dtype_name(rt->dtype));
    cJSON_AddBoolToObject(run, "moe_tp_replicated", rt->moe_tp_replicated);
    cJSON_AddBoolToObject(run, "async_progress", rt->async_progress);
    cJSON_AddBoolToObject(run, "device_sync", rt->device_sync);
    cJSON_AddNumberToObject(run, "dropless_sync_us", rt->dropless_sync * 1e6);
    if (rt->bucket_bytes > 0) cJSON_AddNumberToObject(run, "bucket_MB", rt->bucket_bytes / 1e6);
    if (rt->bucket_max_share > 0) cJSON_AddNumberToObject(run, "bucket_max_share", rt->bucket_max_share);
    if (rt->bucket_overhead > 0) cJSON_AddNumberToObject(run, "bucket_overhead_us", rt->bucket_overhead * 1e6);
    if (rt->grad_reduce_factor.n > 0) {
      PlanCurve mb = rt->grad_reduce_factor;
      for (int i = 0; i < mb.n; i++) mb.x[i] /= 1e6;
      cJSON_AddItemToObject(run, "grad_reduce_factor", curve_json(&mb));
    }
  }
  cJSON *cores = s->cores_per_node > 0 ? cJSON_AddObjectToObject(root, "cores") : NULL;
  if (cores) {
    cJSON_AddNumberToObject(cores, "per_node", s->cores_per_node);
    cJSON_AddNumberToObject(cores, "threads_per_device", s->threads_per_device > 0 ? s->threads_per_device : 1);
    cJSON_AddNumberToObject(cores, "share", s->core_share > 0 ? s->core_share : 1.0);
    if (s->core_waiting_load > 0) cJSON_AddNumberToObject(cores, "waiting_load", s->core_waiting_load);
  }
  if (s->link_devices > 0 && s->link_bandwidth && s->link_latency) {
    cJSON *links = cJSON_AddObjectToObject(root, "links");
    if (links) {
      cJSON_AddItemToObject(links, "bandwidth_GBps", matrix_json(s->link_bandwidth, s->link_devices, 1e-9));
      cJSON_AddItemToObject(links, "latency_us", matrix_json(s->link_latency, s->link_devices, 1e6));
    }
  }
  return root;
}

int calib_spec_write(const ClusterSpec *s, const char *description, const char *path, Error *err) {
  cJSON *root = calib_spec_to_json(s, description);
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) return error_set(err, ERR_NOMEM, "%s: out of memory writing the cluster spec", path);
  size_t len = strlen(text);
  char *line = malloc(len + 2);
  if (!line) {
    cJSON_free(text);
    return error_set(err, ERR_NOMEM, "%s: out of memory writing the cluster spec", path);
  }
  memcpy(line, text, len);
  memcpy(line + len, "\n", 2);
  cJSON_free(text);
  int rc = sched_write_text_file(path, line, err);
  free(line);
  return rc;
}
