/* The plan-file reader (plan_file.h): field by field, with messages that
 * name the file and the field, then the cross-field checks a trainer needs
 * before it lays out its ranks. */
#include "plan/plan_file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32.h"
#include "base/file_text.h"
#include "plan/mapping.h"
#include "sched/builders.h"

typedef struct Ctx {
  const char *origin;
  Error *err;
} Ctx;

/* An integer field >= lo; absent is an error unless optional (then *out keeps its value). */
static int get_int(const Ctx *c, const cJSON *obj, const char *section, const char *key, int lo, int optional,
                   int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  const char *dot = *section ? "." : "";
  if (!v) {
    if (optional) return 0;
    return error_set(c->err, ERR_FORMAT, "%s: missing field \"%s%s%s\" (an integer >= %d)", c->origin, section, dot,
                     key, lo);
  }
  double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (!cJSON_IsNumber(v) || d != floor(d) || d < lo || d > 1e8)
    return error_set(c->err, ERR_FORMAT, "%s: field \"%s%s%s\": expected an integer >= %d", c->origin, section, dot,
                     key, lo);
  *out = (int)d;
  return 0;
}

static int get_string(const Ctx *c, const cJSON *obj, const char *section, const char *key, int optional,
                      const char **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  const char *dot = *section ? "." : "";
  *out = NULL;
  if (!v) {
    if (optional) return 0;
    return error_set(c->err, ERR_FORMAT, "%s: missing field \"%s%s%s\" (a string)", c->origin, section, dot, key);
  }
  if (!cJSON_IsString(v))
    return error_set(c->err, ERR_FORMAT, "%s: field \"%s%s%s\": expected a string", c->origin, section, dot, key);
  *out = v->valuestring;
  return 0;
}

#define TRY(x)                                   \
  do {                                           \
    if ((x) != 0) return c->err->code;           \
  } while (0)

/* "parallel.order_fwd_cost" and "order_bwd_cost" (optional, both or
 * neither): the relative durations the pipeline program was built with
 * (sends placed by them), numbers > 0; 0 in *p when absent. */
static int read_order_costs(const Ctx *c, const cJSON *par, PlanChoice *p) {
  static const char *const keys[2] = {"order_fwd_cost", "order_bwd_cost"};
  double *dst[2] = {&p->order_fwd_cost, &p->order_bwd_cost};
  const cJSON *v[2];
  for (int k = 0; k < 2; k++) {
    *dst[k] = 0;
    v[k] = cJSON_GetObjectItemCaseSensitive(par, keys[k]);
    if (v[k] && (!cJSON_IsNumber(v[k]) || !isfinite(v[k]->valuedouble) || v[k]->valuedouble <= 0 ||
                 v[k]->valuedouble > 1e9))
      return error_set(c->err, ERR_FORMAT,
                       "%s: field \"parallel.%s\": expected a number > 0 (the %s's relative duration the "
                       "pipeline program placed its sends by)",
                       c->origin, keys[k], k ? "backward" : "forward");
  }
  for (int k = 0; k < 2; k++)
    if (v[k] && !v[1 - k])
      return error_set(c->err, ERR_FORMAT,
                       "%s: field \"parallel.%s\": missing, expected a number > 0 with parallel.%s (the two "
                       "go together)",
                       c->origin, keys[1 - k], keys[k]);
  for (int k = 0; k < 2; k++)
    if (v[k]) *dst[k] = v[k]->valuedouble;
  return 0;
}

static int read_parallel(const Ctx *c, const cJSON *par, PlanChoice *p) {
  static const char *const S = "parallel";
  TRY(get_int(c, par, S, "tp", 1, 0, &p->tp));
  TRY(get_int(c, par, S, "cp", 1, 0, &p->cp));
  TRY(get_int(c, par, S, "dp", 1, 0, &p->dp));
  TRY(get_int(c, par, S, "pp", 1, 0, &p->pp));
  TRY(get_int(c, par, S, "vpp", 1, 0, &p->vpp));
  p->ep = p->etp = 1;
  p->edp = 0;
  TRY(get_int(c, par, S, "ep", 1, 1, &p->ep));
  TRY(get_int(c, par, S, "etp", 1, 1, &p->etp));
  TRY(get_int(c, par, S, "edp", 1, 1, &p->edp));
  TRY(get_int(c, par, S, "micro_batch_size", 1, 0, &p->micro_batch_size));
  TRY(get_int(c, par, S, "global_batch_size", 1, 0, &p->global_batch_size));
  TRY(get_int(c, par, S, "microbatches", 1, 1, &p->microbatches));
  const char *name;
  TRY(get_string(c, par, S, "schedule", 0, &name));
  if (sched_schedule_from_name(name, &p->schedule) || p->schedule == SCHED_SCHEDULE_CUSTOM)
    return error_set(c->err, ERR_FORMAT,
                     "%s: field \"parallel.schedule\": \"%s\" is not a schedule; expected none, gpipe, 1f1b, zb-h1 "
                     "or interleaved", c->origin, name);
  snprintf(p->schedule_name, sizeof p->schedule_name, "%s", name);
  TRY(get_string(c, par, S, "recompute", 1, &name));
  if (name && plan_recompute_from_name(name, &p->recompute))
    return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.recompute\": \"%s\" is not one of none, selective, full",
                     c->origin, name);
  /* Full recomputation's method and count (optional: uniform, 1). */
  p->recompute_method = 0;
  p->recompute_num_layers = 1;
  TRY(get_string(c, par, S, "recompute_method", 1, &name));
  if (name && strcmp(name, "uniform") && strcmp(name, "block"))
    return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.recompute_method\": \"%s\" is not uniform or block",
                     c->origin, name);
  if (name) p->recompute_method = !strcmp(name, "block");
  TRY(get_int(c, par, S, "recompute_num_layers", 0, 1, &p->recompute_num_layers));
  /* Selective recomputation's modules (optional: the attention core). */
  p->recompute_modules = 0;
  TRY(get_string(c, par, S, "recompute_modules", 1, &name));
  if (name) {
    Error merr = {0, ""};
    if (plan_recompute_modules_parse(name, &p->recompute_modules, &merr))
      return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.recompute_modules\": %s", c->origin, merr.msg);
  }
  const cJSON *dist = cJSON_GetObjectItemCaseSensitive(par, "distributed_optimizer");
  if (dist && !cJSON_IsBool(dist))
    return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.distributed_optimizer\": expected true or false",
                     c->origin);
  p->distributed_optimizer = dist && cJSON_IsTrue(dist);
  const cJSON *lps = cJSON_GetObjectItemCaseSensitive(par, "layers_per_stage");
  if (!lps || !cJSON_IsArray(lps))
    return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.layers_per_stage\": expected an array of blocks per "
                     "virtual stage", c->origin);
  int n = cJSON_GetArraySize(lps);
  if (n > PLAN_MAX_STAGES)
    return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.layers_per_stage\": %d entries, at most %d", c->origin, n,
                     PLAN_MAX_STAGES);
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, lps) {
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 1 || e->valuedouble > 1e6)
      return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.layers_per_stage\": entry %d must be an integer >= 1",
                       c->origin, i);
    p->layers_per_stage[i++] = (int)e->valuedouble;
  }
  p->num_stages = n;
  const cJSON *wu = cJSON_GetObjectItemCaseSensitive(par, "warmup");
  if (wu) {
    int nw = cJSON_IsArray(wu) ? cJSON_GetArraySize(wu) : -1;
    if (nw < 1 || nw > SCHED_MAX_WARMUP_RANKS)
      return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.warmup\": expected an array of forwards per pipeline "
                       "rank (at most %d)", c->origin, SCHED_MAX_WARMUP_RANKS);
    int k = 0;
    cJSON_ArrayForEach(e, wu) {
      if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 || e->valuedouble > 1e6)
        return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.warmup\": entry %d must be an integer >= 0",
                         c->origin, k);
      p->warmup[k++] = (int)e->valuedouble;
    }
    p->num_warmup = nw;
  }
  TRY(read_order_costs(c, par, p));
  /* Stage replication (plan/replicate.h): one width per stage, pp x
   * per-stage data parallelism only (the trainer checks the rest). */
  const cJSON *widths = cJSON_GetObjectItemCaseSensitive(par, "stage_widths");
  p->num_stage_widths = 0;
  if (!widths) return 0;
  if (!cJSON_IsArray(widths) || cJSON_GetArraySize(widths) != p->pp)
    return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.stage_widths\": expected %d widths (one per stage, pp %d)",
                     c->origin, p->pp, p->pp);
  i = 0;
  cJSON_ArrayForEach(e, widths) {
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 1 || e->valuedouble > 1e6)
      return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.stage_widths\": entry %d must be an integer >= 1",
                       c->origin, i);
    p->stage_width[i++] = (int)e->valuedouble;
  }
  p->num_stage_widths = i;
  if (p->tp != 1 || p->cp != 1 || p->dp != 1 || p->vpp != 1)
    return error_set(c->err, ERR_FORMAT,
                     "%s: field \"parallel.stage_widths\": stage replication needs tp, cp, dp and vpp 1 (got tp %d "
                     "cp %d dp %d vpp %d)",
                     c->origin, p->tp, p->cp, p->dp, p->vpp);
  return 0;
}

/* What must hold between the fields for a trainer to lay out its ranks. */
static int check_consistent(const Ctx *c, PlanChoice *p) {
  long world = (long)p->tp * p->cp * p->dp * p->pp;
  if (p->num_stage_widths) { /* the stages' replicas fill the world */
    long sum = 0;
    for (int s = 0; s < p->num_stage_widths; s++) sum += p->stage_width[s];
    if (p->gpus && sum != p->gpus)
      return error_set(c->err, ERR_FORMAT, "%s: parallel.stage_widths sum to %ld but \"gpus\" is %d", c->origin, sum,
                       p->gpus);
    if (!p->gpus) p->gpus = (int)sum;
    p->edp = 1;
    world = (long)p->etp * p->ep * p->pp; /* the per-stage grids, before replication */
  }
  if (p->gpus && world != p->gpus && !p->num_stage_widths)
    return error_set(c->err, ERR_FORMAT, "%s: parallel.tp x cp x dp x pp = %ld but \"gpus\" is %d", c->origin, world,
                     p->gpus);
  if (!p->gpus) p->gpus = (int)world;
  long moe = (long)p->etp * p->ep * p->pp;
  if (world % moe)
    return error_set(c->err, ERR_FORMAT, "%s: parallel.etp x ep x pp = %ld does not divide the %ld ranks", c->origin, moe,
                     world);
  if (!p->edp) p->edp = (int)(world / moe);
  if ((long)p->edp * moe != world)
    return error_set(c->err, ERR_FORMAT, "%s: parallel.etp x ep x edp x pp = %ld but tp x cp x dp x pp = %ld",
                     c->origin, (long)p->edp * moe, world);
  long per_step = (long)p->dp * p->micro_batch_size;
  if (p->global_batch_size % per_step)
    return error_set(c->err, ERR_FORMAT,
                     "%s: parallel.global_batch_size %d is not a multiple of dp x micro_batch_size = %ld", c->origin,
                     p->global_batch_size, per_step);
  int m = (int)(p->global_batch_size / per_step);
  if (p->microbatches && p->microbatches != m)
    return error_set(c->err, ERR_FORMAT, "%s: parallel.microbatches is %d but global / (dp x micro) = %d", c->origin,
                     p->microbatches, m);
  p->microbatches = m;
  if (p->num_stages != p->pp * p->vpp)
    return error_set(c->err, ERR_FORMAT, "%s: parallel.layers_per_stage has %d entries, expected pp x vpp = %d",
                     c->origin, p->num_stages, p->pp * p->vpp);
  if (p->num_warmup && p->num_warmup != p->pp)
    return error_set(c->err, ERR_FORMAT, "%s: parallel.warmup has %d entries, expected pp = %d", c->origin,
                     p->num_warmup, p->pp);
  int ok = 1;
  switch (p->schedule) {
    case SCHED_SCHEDULE_NONE: ok = p->pp == 1 && p->vpp == 1; break;
    case SCHED_SCHEDULE_INTERLEAVED: ok = p->pp > 1 && p->vpp > 1; break;
    default: ok = p->pp > 1 && p->vpp == 1; break;
  }
  if (!ok)
    return error_set(c->err, ERR_FORMAT, "%s: parallel.schedule \"%s\" does not fit pp %d, vpp %d (none: pp 1; gpipe, "
                     "1f1b and zb-h1: pp > 1, vpp 1; interleaved: pp > 1, vpp > 1)", c->origin, p->schedule_name, p->pp,
                     p->vpp);
  if (p->num_warmup) {
    /* The depths the scheduler would build (for interleaved, its bounds). */
    SchedConfig sc;
    memset(&sc, 0, sizeof sc);
    sc.schedule = p->schedule;
    sc.pp = p->pp;
    sc.vpp = p->vpp;
    sc.microbatches = p->microbatches;
    int shape_ok = sched_config_validate(&sc, NULL) == ERR_OK; /* else not the depths' fault */
    sc.warmup_set = p->num_warmup;
    memcpy(sc.warmup, p->warmup, (size_t)p->num_warmup * sizeof *p->warmup);
    Error why = {0, ""};
    if (shape_ok && sched_config_validate(&sc, &why))
      return error_set(c->err, ERR_FORMAT, "%s: field \"parallel.warmup\": %s", c->origin, why.msg);
  }
  return 0;
}

int plan_mapping_from_json(const cJSON *mapping, const char *origin, const char *field, int expected, int **out,
                           int *n, Error *err) {
  *out = NULL;
  *n = 0;
  if (!mapping) return ERR_OK;
  const cJSON *perm = cJSON_IsObject(mapping) ? cJSON_GetObjectItemCaseSensitive(mapping, "device_of_rank") : NULL;
  if (!cJSON_IsArray(perm))
    return error_set(err, ERR_FORMAT, "%s: field \"%s\": expected an array giving the device of each rank", origin,
                     field);
  const int count = cJSON_GetArraySize(perm);
  if (count < 1 || (expected > 0 && count != expected))
    return error_set(err, ERR_FORMAT, "%s: field \"%s\": %d entries, expected one per rank (%d)", origin, field,
                     count, expected);
  int *map = malloc((size_t)count * sizeof *map);
  if (!map) return error_set(err, ERR_NOMEM, "%s: out of memory reading the mapping", origin);
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, perm) {
    const double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
    if (d != floor(d) || d < 0 || d >= count) break;
    map[i++] = (int)d;
  }
  if (i != count || !plan_mapping_is_permutation(map, count)) {
    free(map);
    return error_set(err, ERR_FORMAT,
                     "%s: field \"%s\": entry %d must be a device in [0, %d) that no other rank has (a permutation)",
                     origin, field, i, count);
  }
  *out = map;
  *n = count;
  return ERR_OK;
}

/* "mapping": device_of_rank must be a permutation of 0 .. gpus - 1. */
static int read_mapping(const Ctx *c, const cJSON *root, PlanChoice *p) {
  int *map = NULL, n = 0;
  int rc = plan_mapping_from_json(cJSON_GetObjectItemCaseSensitive(root, "mapping"), c->origin,
                                  "mapping.device_of_rank", p->tp * p->cp * p->dp * p->pp, &map, &n, c->err);
  if (rc || !map) return rc;
  p->has_mapping = 1;
  p->mapping_is_identity = plan_mapping_is_identity(map, n);
  free(map);
  return 0;
}

int plan_file_from_json(const cJSON *root, const char *origin, PlanChoice *p, Error *err) {
  Error local;
  Ctx cc = {origin ? origin : "<plan>", err ? err : &local};
  const Ctx *c = &cc;
  memset(p, 0, sizeof *p);
  p->dtype = PLAN_DTYPE_BF16;
  if (!cJSON_IsObject(root)) return error_set(c->err, ERR_FORMAT, "%s: expected a JSON object (a plan file)", c->origin);
  const char *s;
  TRY(get_string(c, root, "", "format", 0, &s));
  if (strcmp(s, "fivefold.plan"))
    return error_set(c->err, ERR_FORMAT, "%s: field \"format\" is \"%s\", expected \"fivefold.plan\" (written by "
                     "fivefold plan --out)", c->origin, s);
  int version = 0;
  TRY(get_int(c, root, "", "version", 1, 0, &version));
  if (version != 1)
    return error_set(c->err, ERR_FORMAT, "%s: field \"version\" is %d; this build reads version 1", c->origin, version);
  TRY(get_string(c, root, "", "model", 1, &s));
  if (s) snprintf(p->model, sizeof p->model, "%s", s);
  TRY(get_string(c, root, "", "family", 1, &s));
  if (s && strcmp(s, "transformer") && strcmp(s, "vision"))
    return error_set(c->err, ERR_FORMAT, "%s: field \"family\": \"%s\" is not one of transformer, vision", c->origin, s);
  snprintf(p->family, sizeof p->family, "%s", s ? s : "transformer");
  TRY(get_string(c, root, "", "cluster", 1, &s));
  if (s) snprintf(p->cluster, sizeof p->cluster, "%s", s);
  TRY(get_int(c, root, "", "gpus", 1, 1, &p->gpus));
  TRY(get_int(c, root, "", "seq_length", 1, !strcmp(p->family, "vision"), &p->seq_len)); /* a vision plan has none */
  TRY(get_string(c, root, "", "dtype", 1, &s));
  if (s && plan_dtype_from_name(s, &p->dtype))
    return error_set(c->err, ERR_FORMAT, "%s: field \"dtype\": \"%s\" is not one of bf16, fp16, tf32, fp32, fp8",
                     c->origin, s);
  const cJSON *par = cJSON_GetObjectItemCaseSensitive(root, "parallel");
  if (!cJSON_IsObject(par))
    return error_set(c->err, ERR_FORMAT, "%s: missing field \"parallel\" (an object with the chosen configuration)",
                     c->origin);
  TRY(read_parallel(c, par, p));
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "model_identity");
  if (id) {
    if (!cJSON_IsObject(id))
      return error_set(c->err, ERR_FORMAT, "%s: field \"model_identity\": expected an object", c->origin);
    TRY(get_string(c, id, "model_identity", "fingerprint", 0, &s));
    snprintf(p->model_fingerprint, sizeof p->model_fingerprint, "%s", s);
    TRY(get_string(c, id, "model_identity", "summary", 1, &s));
    if (s) snprintf(p->model_summary, sizeof p->model_summary, "%s", s);
    TRY(get_string(c, id, "model_identity", "name", 1, &s));
    if (s && !p->model[0]) snprintf(p->model, sizeof p->model, "%s", s);
    p->has_identity = 1;
  }
  TRY(read_mapping(c, root, p));
  const cJSON *pred = cJSON_GetObjectItemCaseSensitive(root, "prediction");
  const cJSON *st = cJSON_IsObject(pred) ? cJSON_GetObjectItemCaseSensitive(pred, "step_time_s") : NULL;
  if (cJSON_IsNumber(st) && st->valuedouble > 0) p->predicted_step_time = st->valuedouble;
  const cJSON *buckets = cJSON_GetObjectItemCaseSensitive(root, "buckets");
  if (buckets) {
    const cJSON *mb = cJSON_IsObject(buckets) ? cJSON_GetObjectItemCaseSensitive(buckets, "bucket_mb") : NULL;
    if (!cJSON_IsNumber(mb) || !(mb->valuedouble > 0) || !isfinite(mb->valuedouble))
      return error_set(c->err, ERR_CONFIG, "%s: field \"buckets.bucket_mb\": expected a number > 0 (MB of fp32 "
                       "gradients per bucket)", c->origin);
    p->bucket_mb = mb->valuedouble;
  }
  p->fuse_swiglu = p->fuse_bias_gelu = p->fuse_norm_residual = -1;
  const cJSON *fusion = cJSON_GetObjectItemCaseSensitive(root, "fusion");
  if (fusion) {
    if (!cJSON_IsObject(fusion))
      return error_set(c->err, ERR_FORMAT, "%s: field \"fusion\": expected an object", c->origin);
    static const char *const KEYS[] = {"swiglu", "bias_gelu", "norm_residual"};
    int *dst[] = {&p->fuse_swiglu, &p->fuse_bias_gelu, &p->fuse_norm_residual};
    for (int k = 0; k < 3; k++) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(fusion, KEYS[k]);
      if (!v) continue;
      if (!cJSON_IsBool(v))
        return error_set(c->err, ERR_FORMAT, "%s: field \"fusion.%s\": expected true (fused) or false", c->origin,
                         KEYS[k]);
      *dst[k] = cJSON_IsTrue(v) ? 1 : 0;
    }
  }
  return check_consistent(c, p);
}

/* The plan file parsed (NULL and err set when unreadable or not JSON). */
static cJSON *parse_plan_file(const char *path, Error *err) {
  char *text = NULL;
  size_t len = 0;
  if (file_read_text(path, "plan file", (size_t)16 << 20, &text, &len, err)) return NULL;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    int line = 1;
    for (const char *q = text; end && q < end && *q; q++) line += *q == '\n';
    error_set(err, ERR_FORMAT, "%s: invalid JSON near line %d", path, line);
  }
  free(text);
  return root;
}

int plan_file_read_mapping(const char *path, int **device_of_rank, int *n, Error *err) {
  *device_of_rank = NULL;
  *n = 0;
  cJSON *root = parse_plan_file(path, err);
  if (!root) return err->code ? err->code : ERR_FORMAT;
  PlanChoice pc;
  memset(&pc, 0, sizeof pc);
  int rc = plan_file_from_json(root, path, &pc, err);
  if (!rc && pc.has_mapping)
    rc = plan_mapping_from_json(cJSON_GetObjectItemCaseSensitive(root, "mapping"), path, "mapping.device_of_rank", 0,
                                device_of_rank, n, err);
  cJSON_Delete(root);
  return rc;
}

int plan_file_read(const char *path, PlanChoice *out, Error *err) {
  memset(out, 0, sizeof *out);
  char *text = NULL;
  size_t len = 0;
  int rc = file_read_text(path, "plan file", (size_t)16 << 20, &text, &len, err);
  if (rc) return rc;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    int line = 1;
    for (const char *q = text; end && q < end && *q; q++) line += *q == '\n';
    free(text);
    return error_set(err, ERR_FORMAT, "%s: invalid JSON near line %d", path, line);
  }
  free(text);
  rc = plan_file_from_json(root, path, out, err);
  cJSON_Delete(root);
  return rc;
}

void plan_model_fingerprint(const ModelConfig *model, char out[PLAN_FINGERPRINT_MAX]) {
  cJSON *j = model_config_to_json(model);
  char *text = j ? cJSON_PrintUnformatted(j) : NULL;
  uint32_t crc = text ? crc32_update(0, text, strlen(text)) : 0;
  snprintf(out, PLAN_FINGERPRINT_MAX, "crc32:%08x", (unsigned)crc);
  free(text);
  cJSON_Delete(j);
}

void plan_model_summary(const ModelConfig *m, char *out, size_t n) {
  int at = snprintf(out, n, "%d layers, hidden %d, %d heads", m->num_layers, m->hidden_size, m->num_heads);
  if (at > 0 && (size_t)at < n && m->num_experts > 0)
    at += snprintf(out + at, n - (size_t)at, ", %d experts top-%d", m->num_experts, m->top_k);
  if (at > 0 && (size_t)at < n) snprintf(out + at, n - (size_t)at, ", vocabulary %d", m->vocab_size);
}
