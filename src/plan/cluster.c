/* Cluster spec: defaults, JSON parsing with messages that name the file and
 * the field, validation, and the lookups the cost model uses (effective
 * collective alpha-beta, device-to-device links). */
#include "plan/cluster.h"

#include "base/file_text.h"
#include "base/json_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define GIB 1073741824.0

static const char *const DTYPE_NAMES[PLAN_NUM_DTYPES] = {"bf16", "fp16", "tf32", "fp32", "fp8"};
static const char *const COLLECTIVE_NAMES[PLAN_NUM_COLLECTIVES] = {"all_reduce", "reduce_scatter", "all_gather",
                                                                   "all_to_all", "p2p"};
static const char *const LEVEL_NAMES[PLAN_NUM_LEVELS] = {"intra_node", "inter_node"};

const char *plan_dtype_name(PlanDtype dtype) {
  return (unsigned)dtype < PLAN_NUM_DTYPES ? DTYPE_NAMES[dtype] : "?";
}

int plan_dtype_from_name(const char *name, PlanDtype *dtype) {
  for (int i = 0; i < PLAN_NUM_DTYPES; i++)
    if (!strcmp(name, DTYPE_NAMES[i])) {
      *dtype = (PlanDtype)i;
      return 0;
    }
  return -1;
}

const char *plan_collective_name(PlanCollective kind) {
  return (unsigned)kind < PLAN_NUM_COLLECTIVES ? COLLECTIVE_NAMES[kind] : "?";
}

double plan_curve_eval(const PlanCurve *c, double x) {
  if (c->n <= 0) return 1.0;
  if (c->n == 1 || x <= c->x[0]) return c->y[0];
  if (x >= c->x[c->n - 1]) return c->y[c->n - 1];
  int i = 1;
  while (i < c->n - 1 && x > c->x[i]) i++;
  double t = (log(x) - log(c->x[i - 1])) / (log(c->x[i]) - log(c->x[i - 1]));
  return c->y[i - 1] + t * (c->y[i] - c->y[i - 1]);
}

/* The default GEMM curve: the fraction of dense bf16 peak a cuBLAS-class GEMM
 * sustains in a training loop, by its FLOPs (2 m n k). Large GEMMs level off
 * at about two thirds of the marketing peak: that is what H100 SXM sustains
 * under its power limit (docs/planner.md, "Calibration"); small ones are
 * dominated by launch and tail effects. The published MFU comparisons in
 * tests/plan/test_published.c check the whole model against it. */
void cluster_spec_default_compute(ClusterSpec *s) {
  static const double xs[] = {1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13};
  static const double ys[] = {0.02, 0.08, 0.25, 0.45, 0.58, 0.64, 0.66};
  s->gemm_efficiency.n = COUNT(xs);
  for (int i = 0; i < COUNT(xs); i++) {
    s->gemm_efficiency.x[i] = xs[i];
    s->gemm_efficiency.y[i] = ys[i];
  }
  /* Fused (flash) attention reaches less of peak than a plain GEMM: the
   * softmax between the two products, and backward recomputes the scores. */
  s->attention_fwd_efficiency = 0.50;
  s->attention_bwd_efficiency = 0.40;
  /* Short attention kernels (a context-parallel rank's chunks) fill the GPU
   * less well; FlashAttention-2's causal throughput falls by roughly a
   * sixth per halving of the sequence below 4K tokens. */
  s->attention_ref_tokens = 4096;
  s->attention_length_exponent = 0.25;
  s->kernel_floor = 3e-6;
}

/* ------------------------------------------------------------ JSON helpers */

typedef struct Ctx {
  const char *origin;
  Error *err;
} Ctx;

/* Rejects keys of obj not in allowed; path is the object's name ("" = top). */
static int check_fields(const Ctx *c, const cJSON *obj, const char *path, const char *const *allowed, int n) {
  const cJSON *item;
  cJSON_ArrayForEach(item, obj) {
    const char *key = item->string ? item->string : "";
    int ok = 0;
    for (int i = 0; i < n && !ok; i++) ok = !strcmp(key, allowed[i]);
    if (!ok) {
      char list[512];
      size_t used = 0;
      list[0] = '\0';
      for (int i = 0; i < n && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", allowed[i]);
      return error_set(c->err, ERR_CONFIG, "%s: unknown field \"%s%s%s\"; expected one of: %s", c->origin, path,
                       *path ? "." : "", key, list);
    }
  }
  return 0;
}

/* Reads a number field > lo (or >= lo when !open) and <= hi; absent is fine
 * unless required. */
static int get_number(const Ctx *c, const cJSON *obj, const char *path, const char *key, double lo, int open,
                      double hi, int required, double *out, int *given) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (given) *given = 0;
  if (!v) {
    if (required)
      return error_set(c->err, ERR_CONFIG, "%s: missing required field \"%s%s%s\"", c->origin, path, *path ? "." : "",
                       key);
    return 0;
  }
  if (!cJSON_IsNumber(v))
    return error_set(c->err, ERR_CONFIG, "%s: field \"%s%s%s\": expected a number, got %s", c->origin, path,
                     *path ? "." : "", key, json_type_name(v));
  double d = v->valuedouble;
  if (!isfinite(d) || d < lo || (open && d == lo) || d > hi) {
    if (hi < 1e300)
      return error_set(c->err, ERR_CONFIG, "%s: field \"%s%s%s\": %g is out of range, expected a value in %s%g, %g]",
                       c->origin, path, *path ? "." : "", key, d, open ? "(" : "[", lo, hi);
    return error_set(c->err, ERR_CONFIG, "%s: field \"%s%s%s\": %g is out of range, expected a value %s %g", c->origin,
                     path, *path ? "." : "", key, d, open ? ">" : ">=", lo);
  }
  *out = d;
  if (given) *given = 1;
  return 0;
}

static int get_object(const Ctx *c, const cJSON *obj, const char *key, int required, const cJSON **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  *out = NULL;
  if (!v) {
    if (required) return error_set(c->err, ERR_CONFIG, "%s: missing required field \"%s\"", c->origin, key);
    return 0;
  }
  if (!cJSON_IsObject(v))
    return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": expected an object, got %s", c->origin, key, json_type_name(v));
  *out = v;
  return 0;
}

#define TRY(x)                  \
  do {                          \
    if ((x) != 0) return c->err ? c->err->code : ERR_CONFIG; \
  } while (0)

/* {bandwidth_GBps | bandwidth_Gbps, latency_us [, efficiency]} */
static int parse_link(const Ctx *c, const cJSON *obj, const char *path, int with_efficiency, PlanLink *link,
                      double *efficiency) {
  static const char *const with_eff[] = {"bandwidth_GBps", "bandwidth_Gbps", "latency_us", "efficiency"};
  TRY(check_fields(c, obj, path, with_eff, with_efficiency ? 4 : 3));
  double gbytes = 0, gbits = 0, lat = 0;
  int has_bytes, has_bits;
  TRY(get_number(c, obj, path, "bandwidth_GBps", 0, 1, 1e300, 0, &gbytes, &has_bytes));
  TRY(get_number(c, obj, path, "bandwidth_Gbps", 0, 1, 1e300, 0, &gbits, &has_bits));
  if (has_bytes == has_bits)
    return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": give exactly one of bandwidth_GBps (bytes) and "
                     "bandwidth_Gbps (bits)", c->origin, path);
  TRY(get_number(c, obj, path, "latency_us", 0, 0, 1e300, 1, &lat, NULL));
  link->bandwidth = has_bytes ? gbytes * 1e9 : gbits * 1e9 / 8.0;
  link->latency = lat * 1e-6;
  if (with_efficiency) {
    *efficiency = 1.0;
    TRY(get_number(c, obj, path, "efficiency", 0, 1, 1.0, 0, efficiency, NULL));
  }
  return 0;
}

/* [[x, y], ...] with x > 0 increasing and y in (0, y_max]; x_name and
 * y_name word the messages. */
static int parse_curve_of(const Ctx *c, const cJSON *v, const char *path, const char *x_name, const char *y_name,
                          double y_max, PlanCurve *curve) {
  if (!cJSON_IsArray(v))
    return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": expected an array of [%s, %s] pairs, got %s", c->origin,
                     path, x_name, y_name, json_type_name(v));
  int n = cJSON_GetArraySize(v);
  if (n < 1 || n > PLAN_MAX_CURVE_POINTS)
    return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": expected 1 to %d points, got %d", c->origin, path,
                     PLAN_MAX_CURVE_POINTS, n);
  int i = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, v) {
    const cJSON *x = cJSON_IsArray(p) && cJSON_GetArraySize(p) == 2 ? cJSON_GetArrayItem(p, 0) : NULL;
    const cJSON *y = x ? cJSON_GetArrayItem(p, 1) : NULL;
    if (!x || !cJSON_IsNumber(x) || !cJSON_IsNumber(y) || !(x->valuedouble > 0) || !(y->valuedouble > 0) ||
        y->valuedouble > y_max || !isfinite(x->valuedouble))
      return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": point %d must be [%s > 0, %s in (0, %g]]", c->origin,
                       path, i, x_name, y_name, y_max);
    if (i > 0 && !(x->valuedouble > curve->x[i - 1]))
      return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": point %d: %s must increase from point to point",
                       c->origin, path, i, x_name);
    curve->x[i] = x->valuedouble;
    curve->y[i] = y->valuedouble;
    i++;
  }
  curve->n = n;
  return 0;
}

static int parse_curve(const Ctx *c, const cJSON *v, const char *path, PlanCurve *curve) {
  return parse_curve_of(c, v, path, "flops", "efficiency", 1.0, curve);
}

/* [{batch, curve[, data, weights]}, ...] with increasing batches; the two
 * gradient passes' curves come together or not at all, alike in every entry. */
static int parse_conv_curves(const Ctx *c, const cJSON *v, const char *path, PlanConvCurves *out) {
  out->n = 0;
  out->per_pass = 0;
  if (!v) return 0;
  int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
  if (n < 1 || n > PLAN_MAX_CONV_BATCHES)
    return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": expected an array of 1 to %d {batch, curve} objects",
                     c->origin, path, PLAN_MAX_CONV_BATCHES);
  const cJSON *e;
  cJSON_ArrayForEach(e, v) {
    char where[96];
    snprintf(where, sizeof where, "%s[%d]", path, out->n);
    static const char *const fields[] = {"batch", "curve", "data", "weights"};
    if (!cJSON_IsObject(e))
      return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": expected an object {batch, curve}", c->origin, where);
    TRY(check_fields(c, e, where, fields, 4));
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "batch");
    if (!cJSON_IsNumber(b) || b->valuedouble < 1 || b->valuedouble > 1e6 ||
        (out->n > 0 && !(b->valuedouble > out->batch[out->n - 1])))
      return error_set(c->err, ERR_CONFIG, "%s: field \"%s.batch\": expected an integer >= 1, larger than the "
                       "entry before", c->origin, where);
    char cpath[112];
    snprintf(cpath, sizeof cpath, "%s.curve", where);
    const cJSON *curve = cJSON_GetObjectItemCaseSensitive(e, "curve");
    if (!curve) return error_set(c->err, ERR_CONFIG, "%s: field \"%s\" is required", c->origin, cpath);
    TRY(parse_curve(c, curve, cpath, &out->curve[out->n]));
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(e, "data");
    const cJSON *weights = cJSON_GetObjectItemCaseSensitive(e, "weights");
    int here = data != NULL;
    if ((weights != NULL) != here || (out->n > 0 && here != out->per_pass))
      return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": expected both \"data\" and \"weights\" (the "
                       "gradient passes' curves) or neither, alike in every entry of \"%s\"", c->origin, where, path);
    out->per_pass = here;
    if (here) {
      snprintf(cpath, sizeof cpath, "%s.data", where);
      TRY(parse_curve(c, data, cpath, &out->data[out->n]));
      snprintf(cpath, sizeof cpath, "%s.weights", where);
      TRY(parse_curve(c, weights, cpath, &out->weights[out->n]));
    }
    out->batch[out->n++] = (int)b->valuedouble;
  }
  return 0;
}

static int rate_ok(const cJSON *x) { return cJSON_IsNumber(x) && x->valuedouble >= 0 && isfinite(x->valuedouble); }

/* compute.layer_seconds: {kind: [forward, backward]} (seconds per input
 * element at an unstated size) or {kind: [[elements, forward, backward],
 * ...]} (at 1 to PLAN_MAX_LAYER_SIZES increasing sizes). */
static int parse_layer_seconds(const Ctx *c, const cJSON *v, ClusterSpec *s) {
  s->num_layer_seconds = 0;
  if (!v) return 0;
  if (!cJSON_IsObject(v))
    return error_set(c->err, ERR_CONFIG, "%s: field \"compute.layer_seconds\": expected an object {kind: [forward, "
                     "backward]}, got %s", c->origin, json_type_name(v));
  const cJSON *k;
  cJSON_ArrayForEach(k, v) {
    if (strlen(k->string) >= sizeof s->layer_seconds[0].kind)
      return error_set(c->err, ERR_CONFIG, "%s: field \"compute.layer_seconds.%s\": kind names must be under 24 "
                       "characters", c->origin, k->string);
    if (s->num_layer_seconds >= PLAN_MAX_LAYER_KINDS)
      return error_set(c->err, ERR_CONFIG, "%s: field \"compute.layer_seconds\": at most %d kinds", c->origin,
                       PLAN_MAX_LAYER_KINDS);
    int i = s->num_layer_seconds;
    memset(&s->layer_seconds[i], 0, sizeof s->layer_seconds[i]);
    snprintf(s->layer_seconds[i].kind, sizeof s->layer_seconds[i].kind, "%s", k->string);
    int n = cJSON_IsArray(k) ? cJSON_GetArraySize(k) : 0;
    const cJSON *first = n > 0 ? cJSON_GetArrayItem(k, 0) : NULL;
    if (n == 2 && cJSON_IsNumber(first)) {
      const cJSON *b = cJSON_GetArrayItem(k, 1);
      if (!rate_ok(first) || !rate_ok(b))
        return error_set(c->err, ERR_CONFIG, "%s: field \"compute.layer_seconds.%s\": expected [forward, backward] "
                         "seconds per element >= 0", c->origin, k->string);
      s->layer_seconds[i].fwd = first->valuedouble;
      s->layer_seconds[i].bwd = b->valuedouble;
    } else {
      if (n < 1 || n > PLAN_MAX_LAYER_SIZES || !cJSON_IsArray(first))
        return error_set(c->err, ERR_CONFIG, "%s: field \"compute.layer_seconds.%s\": expected [forward, backward] "
                         "or 1 to %d [elements, forward, backward] at increasing sizes", c->origin, k->string,
                         PLAN_MAX_LAYER_SIZES);
      const cJSON *pt;
      int j = 0;
      cJSON_ArrayForEach(pt, k) {
        const cJSON *el = cJSON_IsArray(pt) && cJSON_GetArraySize(pt) == 3 ? cJSON_GetArrayItem(pt, 0) : NULL;
        if (!el || !cJSON_IsNumber(el) || !(el->valuedouble >= 1) || !isfinite(el->valuedouble) ||
            (j > 0 && !(el->valuedouble > s->layer_seconds[i].elements[j - 1])) || !rate_ok(cJSON_GetArrayItem(pt, 1)) ||
            !rate_ok(cJSON_GetArrayItem(pt, 2)))
          return error_set(c->err, ERR_CONFIG, "%s: field \"compute.layer_seconds.%s[%d]\": expected [elements >= 1, "
                           "forward, backward] (seconds per element >= 0), elements larger than the entry before",
                           c->origin, k->string, j);
        s->layer_seconds[i].elements[j] = el->valuedouble;
        s->layer_seconds[i].fwd_at[j] = cJSON_GetArrayItem(pt, 1)->valuedouble;
        s->layer_seconds[i].bwd_at[j] = cJSON_GetArrayItem(pt, 2)->valuedouble;
        j++;
      }
      s->layer_seconds[i].sizes = j;
      s->layer_seconds[i].fwd = s->layer_seconds[i].fwd_at[0];
      s->layer_seconds[i].bwd = s->layer_seconds[i].bwd_at[0];
    }
    s->num_layer_seconds++;
  }
  return 0;
}

static int parse_matrix(const Ctx *c, const cJSON *v, const char *path, int n_expected, double scale, double **out,
                        int *n_out) {
  if (!cJSON_IsArray(v))
    return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": expected a square array of arrays, got %s", c->origin,
                     path, json_type_name(v));
  int n = cJSON_GetArraySize(v);
  if (n < 1 || (n_expected > 0 && n != n_expected))
    return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": has %d rows, expected %d (one per device)", c->origin,
                     path, n, n_expected);
  double *m = malloc((size_t)n * n * sizeof *m);
  if (!m) return error_set(c->err, ERR_NOMEM, "%s: out of memory reading \"%s\"", c->origin, path);
  int r = 0;
  const cJSON *row;
  cJSON_ArrayForEach(row, v) {
    if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != n) {
      free(m);
      return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": row %d must hold %d numbers", c->origin, path, r, n);
    }
    int col = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, row) {
      if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0) || !isfinite(e->valuedouble) ||
          (r != col && scale > 1.0 && e->valuedouble == 0)) {
        free(m);
        return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": entry [%d][%d] must be a number %s", c->origin, path,
                         r, col, scale > 1.0 ? "> 0 off the diagonal" : ">= 0");
      }
      m[(size_t)r * n + col] = e->valuedouble * scale;
      col++;
    }
    r++;
  }
  *out = m;
  *n_out = n;
  return 0;
}

static int get_bool(const Ctx *c, const cJSON *obj, const char *path, const char *key, int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return 0;
  if (!cJSON_IsBool(v))
    return error_set(c->err, ERR_CONFIG, "%s: field \"%s.%s\": expected true or false, got %s", c->origin, path, key,
                     json_type_name(v));
  *out = cJSON_IsTrue(v);
  return 0;
}

static int get_string(const Ctx *c, const cJSON *obj, const char *path, const char *key, char *out, size_t size) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return 0;
  if (!cJSON_IsString(v) || strlen(v->valuestring) >= size)
    return error_set(c->err, ERR_CONFIG, "%s: field \"%s.%s\": expected a string of at most %zu characters",
                     c->origin, path, key, size - 1);
  snprintf(out, size, "%s", v->valuestring);
  return 0;
}

/* "runtime": the facts of the runtime calibrated on this machine. Absent
 * fields take the values of fivefold's CPU runtime, which is what
 * calibrate measures. */
static int parse_runtime(const Ctx *c, const cJSON *o, PlanRuntimeFacts *rt) {
  static const char *const fields[] = {"device",       "host",          "dtype",
                                       "moe_tp_replicated", "async_progress", "device_sync",
                                       "dropless_sync_us",  "bucket_MB",      "bucket_max_share",
                                       "bucket_overhead_us", "grad_reduce_factor"};
  TRY(check_fields(c, o, "runtime", fields, COUNT(fields)));
  memset(rt, 0, sizeof *rt);
  rt->given = 1;
  snprintf(rt->device, sizeof rt->device, "cpu");
  rt->dtype = PLAN_DTYPE_FP32;
  rt->moe_tp_replicated = 1;
  TRY(get_string(c, o, "runtime", "device", rt->device, sizeof rt->device));
  TRY(get_string(c, o, "runtime", "host", rt->host, sizeof rt->host));
  char dtype[16] = "fp32";
  TRY(get_string(c, o, "runtime", "dtype", dtype, sizeof dtype));
  if (plan_dtype_from_name(dtype, &rt->dtype))
    return error_set(c->err, ERR_CONFIG, "%s: field \"runtime.dtype\": expected bf16, fp16, tf32, fp32 or fp8, got '%s'",
                     c->origin, dtype);
  TRY(get_bool(c, o, "runtime", "moe_tp_replicated", &rt->moe_tp_replicated));
  TRY(get_bool(c, o, "runtime", "async_progress", &rt->async_progress));
  TRY(get_bool(c, o, "runtime", "device_sync", &rt->device_sync));
  double us = 0, mb = 0;
  TRY(get_number(c, o, "runtime", "dropless_sync_us", 0, 0, 1e6, 0, &us, NULL));
  rt->dropless_sync = us * 1e-6;
  TRY(get_number(c, o, "runtime", "bucket_MB", 0, 0, 1e6, 0, &mb, NULL));
  rt->bucket_bytes = mb * 1e6;
  TRY(get_number(c, o, "runtime", "bucket_max_share", 0, 0, 1, 0, &rt->bucket_max_share, NULL));
  double overhead_us = 0;
  TRY(get_number(c, o, "runtime", "bucket_overhead_us", 0, 0, 1e6, 0, &overhead_us, NULL));
  rt->bucket_overhead = overhead_us * 1e-6;
  const cJSON *factor = cJSON_GetObjectItemCaseSensitive(o, "grad_reduce_factor");
  if (factor) {
    TRY(parse_curve_of(c, factor, "runtime.grad_reduce_factor", "bucket MB", "factor", 100.0, &rt->grad_reduce_factor));
    for (int i = 0; i < rt->grad_reduce_factor.n; i++) rt->grad_reduce_factor.x[i] *= 1e6; /* MB: bytes */
  }
  return 0;
}

/* "cores": the cores a node's devices share (cluster.h). */
static int parse_cores(const Ctx *c, const cJSON *o, ClusterSpec *s) {
  static const char *const fields[] = {"per_node", "threads_per_device", "share", "waiting_load"};
  TRY(check_fields(c, o, "cores", fields, COUNT(fields)));
  double cores = 0, threads = 1, share = 0;
  int has_share = 0;
  TRY(get_number(c, o, "cores", "per_node", 1, 0, 1e6, 1, &cores, NULL));
  TRY(get_number(c, o, "cores", "threads_per_device", 1, 0, 1e6, 0, &threads, NULL));
  if (cores != floor(cores) || threads != floor(threads))
    return error_set(c->err, ERR_CONFIG, "%s: fields \"cores.per_node\" and \"cores.threads_per_device\" must be "
                     "integers", c->origin);
  TRY(get_number(c, o, "cores", "share", 0, 1, 1.0, 0, &share, &has_share));
  TRY(get_number(c, o, "cores", "waiting_load", 0, 0, 1.0, 0, &s->core_waiting_load, NULL));
  s->cores_per_node = (int)cores;
  s->threads_per_device = (int)threads;
  double want = (double)s->devices_per_node * s->threads_per_device;
  s->core_share = has_share ? share : (want > cores ? cores / want : 1.0);
  return 0;
}

int cluster_spec_from_json(ClusterSpec *s, const cJSON *json, const char *origin, Error *err) {
  Error local;
  Ctx cc = {origin ? origin : "<cluster>", err ? err : &local};
  const Ctx *c = &cc;
  memset(s, 0, sizeof *s);
  snprintf(s->origin, sizeof s->origin, "%s", cc.origin);
  cluster_spec_default_compute(s);
  s->memory_efficiency = 0.7;
  s->link_efficiency[0] = s->link_efficiency[1] = 1.0;
  if (!cJSON_IsObject(json)) return error_set(c->err, ERR_CONFIG, "%s: expected a JSON object", c->origin);
  static const char *const top[] = {"name", "description", "nodes", "devices_per_node", "peak_tflops", "memory",
                                    "intra_node", "inter_node", "compute", "collectives", "links",
                                    "topology", "runtime", "cores"};
  TRY(check_fields(c, json, "", top, COUNT(top)));
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(json, "name");
  if (name && !cJSON_IsString(name))
    return error_set(c->err, ERR_CONFIG, "%s: field \"name\": expected a string", c->origin);
  snprintf(s->name, sizeof s->name, "%s", name ? name->valuestring : "cluster");
  const cJSON *desc = cJSON_GetObjectItemCaseSensitive(json, "description");
  if (desc && !cJSON_IsString(desc))
    return error_set(c->err, ERR_CONFIG, "%s: field \"description\": expected a string", c->origin);

  double nodes = 0, dpn = 0;
  TRY(get_number(c, json, "", "nodes", 1, 0, 1e6, 1, &nodes, NULL));
  TRY(get_number(c, json, "", "devices_per_node", 1, 0, 1e4, 1, &dpn, NULL));
  if (nodes != floor(nodes) || dpn != floor(dpn))
    return error_set(c->err, ERR_CONFIG, "%s: fields \"nodes\" and \"devices_per_node\" must be integers", c->origin);
  s->nodes = (int)nodes;
  s->devices_per_node = (int)dpn;

  const cJSON *o;
  TRY(get_object(c, json, "peak_tflops", 1, &o));
  TRY(check_fields(c, o, "peak_tflops", DTYPE_NAMES, PLAN_NUM_DTYPES));
  for (int i = 0; i < PLAN_NUM_DTYPES; i++) {
    double tf = 0;
    TRY(get_number(c, o, "peak_tflops", DTYPE_NAMES[i], 0, 1, 1e9, i == PLAN_DTYPE_BF16, &tf, NULL));
    s->peak_flops[i] = tf * 1e12;
  }

  TRY(get_object(c, json, "memory", 1, &o));
  static const char *const mem_fields[] = {"capacity_GiB", "capacity_GB", "reserved_GiB", "bandwidth_GBps",
                                           "efficiency"};
  TRY(check_fields(c, o, "memory", mem_fields, COUNT(mem_fields)));
  double gib = 0, gb = 0, reserved = 0, bw = 0;
  int has_gib, has_gb;
  TRY(get_number(c, o, "memory", "capacity_GiB", 0, 1, 1e9, 0, &gib, &has_gib));
  TRY(get_number(c, o, "memory", "capacity_GB", 0, 1, 1e9, 0, &gb, &has_gb));
  if (has_gib == has_gb)
    return error_set(c->err, ERR_CONFIG, "%s: field \"memory\": give exactly one of capacity_GiB and capacity_GB",
                     c->origin);
  s->memory_capacity = has_gib ? gib * GIB : gb * 1e9;
  TRY(get_number(c, o, "memory", "reserved_GiB", 0, 0, 1e9, 0, &reserved, NULL));
  s->memory_reserved = reserved * GIB;
  TRY(get_number(c, o, "memory", "bandwidth_GBps", 0, 1, 1e9, 1, &bw, NULL));
  s->memory_bandwidth = bw * 1e9;
  TRY(get_number(c, o, "memory", "efficiency", 0, 1, 1.0, 0, &s->memory_efficiency, NULL));

  for (int level = 0; level < PLAN_NUM_LEVELS; level++) {
    TRY(get_object(c, json, LEVEL_NAMES[level], 1, &o));
    TRY(parse_link(c, o, LEVEL_NAMES[level], 1, &s->link[level], &s->link_efficiency[level]));
  }

  TRY(get_object(c, json, "compute", 0, &o));
  if (o) {
    static const char *const comp[] = {"gemm_efficiency", "gemm_efficiency_bf16", "gemm_efficiency_bf16_rows_vary",
                                       "gemm_efficiency_rows_vary", "attention_efficiency",
                                       "kernel_floor_us", "conv_efficiency", "conv_efficiency_bf16",
                                       "layer_seconds", "optimizer_ns_per_param"};
    TRY(check_fields(c, o, "compute", comp, COUNT(comp)));
    TRY(parse_conv_curves(c, cJSON_GetObjectItemCaseSensitive(o, "conv_efficiency"), "compute.conv_efficiency",
                          &s->conv_efficiency));
    TRY(parse_conv_curves(c, cJSON_GetObjectItemCaseSensitive(o, "conv_efficiency_bf16"),
                          "compute.conv_efficiency_bf16", &s->conv_efficiency_bf16));
    TRY(parse_layer_seconds(c, cJSON_GetObjectItemCaseSensitive(o, "layer_seconds"), s));
    const cJSON *curve = cJSON_GetObjectItemCaseSensitive(o, "gemm_efficiency");
    if (curve) TRY(parse_curve(c, curve, "compute.gemm_efficiency", &s->gemm_efficiency));
    const cJSON *curve_bf16 = cJSON_GetObjectItemCaseSensitive(o, "gemm_efficiency_bf16");
    if (curve_bf16) TRY(parse_curve(c, curve_bf16, "compute.gemm_efficiency_bf16", &s->gemm_efficiency_bf16));
    const cJSON *curve_vary = cJSON_GetObjectItemCaseSensitive(o, "gemm_efficiency_bf16_rows_vary");
    if (curve_vary)
      TRY(parse_curve(c, curve_vary, "compute.gemm_efficiency_bf16_rows_vary", &s->gemm_efficiency_bf16_rows_vary));
    const cJSON *curve_experts = cJSON_GetObjectItemCaseSensitive(o, "gemm_efficiency_rows_vary");
    if (curve_experts)
      TRY(parse_curve(c, curve_experts, "compute.gemm_efficiency_rows_vary", &s->gemm_efficiency_rows_vary));
    const cJSON *att = cJSON_GetObjectItemCaseSensitive(o, "attention_efficiency");
    if (att) {
      if (!cJSON_IsObject(att))
        return error_set(c->err, ERR_CONFIG, "%s: field \"compute.attention_efficiency\": expected an object "
                         "{forward, backward, reference_tokens, length_exponent}", c->origin);
      static const char *const fb[] = {"forward",      "backward",      "reference_tokens", "length_exponent",
                                       "ring_forward", "ring_backward", "ring_query_tokens", "forward_bf16",
                                       "backward_bf16"};
      TRY(check_fields(c, att, "compute.attention_efficiency", fb, 9));
      TRY(get_number(c, att, "compute.attention_efficiency", "forward_bf16", 0, 1, 1.0, 0,
                     &s->attention_bf16_fwd_efficiency, NULL));
      TRY(get_number(c, att, "compute.attention_efficiency", "backward_bf16", 0, 1, 1.0, 0,
                     &s->attention_bf16_bwd_efficiency, NULL));
      TRY(get_number(c, att, "compute.attention_efficiency", "ring_forward", 0, 1, 1.0, 0,
                     &s->attention_ring_fwd_efficiency, NULL));
      TRY(get_number(c, att, "compute.attention_efficiency", "ring_backward", 0, 1, 1.0, 0,
                     &s->attention_ring_bwd_efficiency, NULL));
      TRY(get_number(c, att, "compute.attention_efficiency", "ring_query_tokens", 0, 0, 1e9, 0,
                     &s->attention_ring_query_tokens, NULL));
      TRY(get_number(c, att, "compute.attention_efficiency", "reference_tokens", 1, 0, 1e9, 0,
                     &s->attention_ref_tokens, NULL));
      TRY(get_number(c, att, "compute.attention_efficiency", "length_exponent", 0, 0, 4, 0,
                     &s->attention_length_exponent, NULL));
      TRY(get_number(c, att, "compute.attention_efficiency", "forward", 0, 1, 1.0, 0, &s->attention_fwd_efficiency,
                     NULL));
      TRY(get_number(c, att, "compute.attention_efficiency", "backward", 0, 1, 1.0, 0, &s->attention_bwd_efficiency,
                     NULL));
    }
    double floor_us = s->kernel_floor * 1e6;
    TRY(get_number(c, o, "compute", "kernel_floor_us", 0, 0, 1e6, 0, &floor_us, NULL));
    s->kernel_floor = floor_us * 1e-6;
    double optim_ns = 0;
    TRY(get_number(c, o, "compute", "optimizer_ns_per_param", 0, 0, 1e6, 0, &optim_ns, NULL));
    s->optimizer_per_param = optim_ns * 1e-9;
  }

  TRY(get_object(c, json, "collectives", 0, &o));
  if (o) {
    TRY(check_fields(c, o, "collectives", COLLECTIVE_NAMES, PLAN_NUM_COLLECTIVES));
    for (int k = 0; k < PLAN_NUM_COLLECTIVES; k++) {
      const cJSON *ko = cJSON_GetObjectItemCaseSensitive(o, COLLECTIVE_NAMES[k]);
      if (!ko) continue;
      char path[96];
      snprintf(path, sizeof path, "collectives.%s", COLLECTIVE_NAMES[k]);
      if (!cJSON_IsObject(ko))
        return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": expected an object {intra_node, inter_node}",
                         c->origin, path);
      TRY(check_fields(c, ko, path, LEVEL_NAMES, PLAN_NUM_LEVELS));
      for (int level = 0; level < PLAN_NUM_LEVELS; level++) {
        const cJSON *lo = cJSON_GetObjectItemCaseSensitive(ko, LEVEL_NAMES[level]);
        if (!lo) continue;
        char lpath[128];
        snprintf(lpath, sizeof lpath, "%s.%s", path, LEVEL_NAMES[level]);
        if (!cJSON_IsObject(lo))
          return error_set(c->err, ERR_CONFIG, "%s: field \"%s\": expected an object {bandwidth_GBps, latency_us}",
                           c->origin, lpath);
        TRY(parse_link(c, lo, lpath, 0, &s->collective[k][level], NULL));
        s->has_collective[k][level] = 1;
      }
    }
  }

  TRY(get_object(c, json, "runtime", 0, &o));
  if (o) TRY(parse_runtime(c, o, &s->runtime));
  TRY(get_object(c, json, "cores", 0, &o));
  if (o) TRY(parse_cores(c, o, s));

  TRY(get_object(c, json, "links", 0, &o));
  if (o) {
    static const char *const lf[] = {"bandwidth_GBps", "latency_us"};
    TRY(check_fields(c, o, "links", lf, 2));
    const cJSON *bwm = cJSON_GetObjectItemCaseSensitive(o, "bandwidth_GBps");
    const cJSON *latm = cJSON_GetObjectItemCaseSensitive(o, "latency_us");
    if (!bwm || !latm)
      return error_set(c->err, ERR_CONFIG, "%s: field \"links\": needs both bandwidth_GBps and latency_us matrices",
                       c->origin);
    int expect = s->nodes * s->devices_per_node, n1 = 0, n2 = 0;
    int rc = parse_matrix(c, bwm, "links.bandwidth_GBps", expect, 1e9, &s->link_bandwidth, &n1);
    if (!rc) rc = parse_matrix(c, latm, "links.latency_us", expect, 1e-6, &s->link_latency, &n2);
    if (rc) {
      cluster_spec_free(s);
      return rc;
    }
    s->link_devices = n1;
  }
  TRY(get_object(c, json, "topology", 0, &o));
  if (o) {
    if (s->link_devices) {
      cluster_spec_free(s);
      return error_set(c->err, ERR_CONFIG, "%s: fields \"links\" and \"topology\": give one of them (a full matrix "
                       "or tiers), not both", c->origin);
    }
    TRY(cluster_tiers_from_json(s, o, c->err));
  }
  int rc = cluster_spec_validate(s, c->err);
  if (rc) cluster_spec_free(s);
  return rc;
}

int cluster_spec_validate(const ClusterSpec *s, Error *err) {
  const char *o = s->origin[0] ? s->origin : "<cluster>";
  if (s->nodes < 1 || s->devices_per_node < 1)
    return error_set(err, ERR_CONFIG, "%s: nodes and devices_per_node must be >= 1", o);
  if (!(s->peak_flops[PLAN_DTYPE_BF16] > 0))
    return error_set(err, ERR_CONFIG, "%s: field \"peak_tflops.bf16\" must be > 0", o);
  if (!(s->memory_capacity > 0) || !(s->memory_bandwidth > 0))
    return error_set(err, ERR_CONFIG, "%s: memory capacity and bandwidth must be > 0", o);
  if (!(s->memory_reserved >= 0) || s->memory_reserved >= s->memory_capacity)
    return error_set(err, ERR_CONFIG, "%s: field \"memory.reserved_GiB\" must be below the capacity", o);
  if (!(s->memory_efficiency > 0 && s->memory_efficiency <= 1))
    return error_set(err, ERR_CONFIG, "%s: field \"memory.efficiency\" must be in (0, 1]", o);
  for (int l = 0; l < PLAN_NUM_LEVELS; l++)
    if (!(s->link[l].bandwidth > 0) || !(s->link[l].latency >= 0) ||
        !(s->link_efficiency[l] > 0 && s->link_efficiency[l] <= 1))
      return error_set(err, ERR_CONFIG, "%s: field \"%s\": bandwidth must be > 0, latency >= 0, efficiency in (0, 1]",
                       o, LEVEL_NAMES[l]);
  if (s->gemm_efficiency.n < 1)
    return error_set(err, ERR_CONFIG, "%s: field \"compute.gemm_efficiency\" needs at least one point", o);
  if (!(s->attention_fwd_efficiency > 0) || !(s->attention_bwd_efficiency > 0))
    return error_set(err, ERR_CONFIG, "%s: field \"compute.attention_efficiency\" must be > 0", o);
  if (s->link_devices && s->link_devices != s->nodes * s->devices_per_node)
    return error_set(err, ERR_CONFIG, "%s: field \"links\": %d devices, but nodes x devices_per_node = %d", o,
                     s->link_devices, s->nodes * s->devices_per_node);
  return ERR_OK;
}

int cluster_spec_load(ClusterSpec *s, const char *path, Error *err) {
  memset(s, 0, sizeof *s);
  char *text = NULL;
  size_t len = 0;
  int read_rc = file_read_text(path, "cluster spec", (size_t)16 << 20, &text, &len, err);
  if (read_rc) return read_rc;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    int line = 1;
    for (const char *p = text; end && p < end && *p; p++) line += *p == '\n';
    free(text);
    return error_set(err, ERR_FORMAT, "%s: invalid JSON near line %d", path, line);
  }
  free(text);
  int rc = cluster_spec_from_json(s, root, path, err);
  cJSON_Delete(root);
  return rc;
}

void cluster_spec_free(ClusterSpec *s) {
  if (!s) return;
  free(s->link_bandwidth);
  free(s->link_latency);
  s->link_bandwidth = s->link_latency = NULL;
  s->link_devices = 0;
}

int cluster_spec_total_devices(const ClusterSpec *s) {
  return s->nodes * s->devices_per_node;
}

PlanLink cluster_spec_collective_link(const ClusterSpec *s, PlanCollective kind, int level) {
  if ((unsigned)kind < PLAN_NUM_COLLECTIVES && s->has_collective[kind][level]) return s->collective[kind][level];
  PlanLink l = s->link[level];
  l.bandwidth *= s->link_efficiency[level];
  return l;
}

PlanLink cluster_spec_device_link(const ClusterSpec *s, int a, int b) {
  a = cluster_spec_device_of(s, a);
  b = cluster_spec_device_of(s, b);
  if (s->link_devices && a >= 0 && b >= 0 && a < s->link_devices && b < s->link_devices) {
    PlanLink l = {s->link_bandwidth[(size_t)a * s->link_devices + b], s->link_latency[(size_t)a * s->link_devices + b]};
    return l;
  }
  if (s->tiers.given) return cluster_tiers_link(s, a, b);
  return s->link[a / s->devices_per_node == b / s->devices_per_node ? PLAN_LEVEL_INTRA : PLAN_LEVEL_INTER];
}
