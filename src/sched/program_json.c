/* Programs as JSON, so the planner, the tracer and tests read the very
 * program the executor runs (format in program.h), and the atomic text-file
 * writer the sched module's outputs share. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/file_text.h"
#include "sched/program.h"

#define SCHED_JSON_FORMAT "fivefold.sched.program"
#define SCHED_JSON_VERSION 1

static int add_int_if_set(cJSON *obj, const char *key, int value) {
  if (value < 0) return 0;
  return cJSON_AddNumberToObject(obj, key, value) ? 0 : -1;
}

static cJSON *action_to_json(const SchedAction *a) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  int bad = !cJSON_AddNumberToObject(o, "id", a->id) || !cJSON_AddNumberToObject(o, "index", a->index) ||
            !cJSON_AddStringToObject(o, "kind", sched_action_kind_name(a->kind)) ||
            !cJSON_AddStringToObject(o, "stream", sched_stream_name(a->stream));
  bad = bad || add_int_if_set(o, "mb", a->microbatch) || add_int_if_set(o, "chunk", a->chunk) ||
        add_int_if_set(o, "stage", a->stage) || add_int_if_set(o, "peer", a->peer) ||
        add_int_if_set(o, "peer_chunk", a->peer_chunk) || add_int_if_set(o, "peer_stage", a->peer_stage) ||
        add_int_if_set(o, "match", a->match) || add_int_if_set(o, "bucket", a->bucket) ||
        add_int_if_set(o, "layer", a->layer) || add_int_if_set(o, "group", a->group) ||
        add_int_if_set(o, "seq_begin", a->seq_begin) || add_int_if_set(o, "seq_count", a->seq_count) ||
        (a->phase != a->group && add_int_if_set(o, "phase", a->phase)); /* absent: the group's number */
  cJSON *deps = bad ? NULL : cJSON_AddArrayToObject(o, "deps");
  for (int d = 0; deps && d < a->num_deps; d++) {
    cJSON *n = cJSON_CreateNumber(a->deps[d]);
    if (!n || !cJSON_AddItemToArray(deps, n)) {
      cJSON_Delete(n);
      deps = NULL;
    }
  }
  if (!deps) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

/* config.warmup: one depth per pipeline rank. */
static int add_warmup(cJSON *cfg, const SchedConfig *c) {
  cJSON *arr = cJSON_AddArrayToObject(cfg, "warmup");
  for (int r = 0; arr && r < c->pp && r < SCHED_MAX_WARMUP_RANKS; r++) {
    cJSON *v = cJSON_CreateNumber(c->warmup[r]);
    if (!v || !cJSON_AddItemToArray(arr, v)) {
      cJSON_Delete(v);
      return 0;
    }
  }
  return arr != NULL;
}

cJSON *sched_program_to_json(const SchedProgram *prog) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  cJSON *cfg = NULL, *ranks = NULL;
  int bad = !cJSON_AddStringToObject(root, "format", SCHED_JSON_FORMAT) ||
            !cJSON_AddNumberToObject(root, "version", SCHED_JSON_VERSION) ||
            !(cfg = cJSON_AddObjectToObject(root, "config"));
  bad = bad || !cJSON_AddStringToObject(cfg, "schedule", sched_schedule_name(prog->config.schedule)) ||
        !cJSON_AddNumberToObject(cfg, "pp", prog->config.pp) || !cJSON_AddNumberToObject(cfg, "vpp", prog->config.vpp) ||
        !cJSON_AddNumberToObject(cfg, "microbatches", prog->config.microbatches) ||
        !cJSON_AddNumberToObject(cfg, "order_fwd_cost", prog->config.order_fwd_cost) ||
        !cJSON_AddNumberToObject(cfg, "order_bwd_cost", prog->config.order_bwd_cost) ||
        (prog->config.param_groups > 1 && !cJSON_AddNumberToObject(cfg, "param_groups", prog->config.param_groups)) ||
        (prog->config.split_backward && !cJSON_AddBoolToObject(cfg, "split_backward", 1)) ||
        (prog->config.warmup_set && !add_warmup(cfg, &prog->config)) ||
        (sched_config_num_phases(&prog->config) > prog->config.param_groups &&
         !cJSON_AddItemToObject(cfg, "phase_repeats",
                                cJSON_CreateIntArray(prog->config.phase_repeats, prog->config.param_groups))) ||
        !cJSON_AddNumberToObject(root, "num_actions", prog->num_actions) ||
        !(ranks = cJSON_AddArrayToObject(root, "ranks"));
  for (int r = 0; !bad && r < prog->num_ranks; r++) {
    cJSON *ro = cJSON_CreateObject();
    cJSON *list = NULL;
    if (!ro || !cJSON_AddItemToArray(ranks, ro)) {
      cJSON_Delete(ro);
      bad = 1;
      break;
    }
    bad = !cJSON_AddNumberToObject(ro, "rank", r) || !(list = cJSON_AddArrayToObject(ro, "actions"));
    int n;
    const SchedAction *acts = sched_program_rank_actions(prog, r, &n);
    for (int i = 0; !bad && i < n; i++) {
      cJSON *ao = action_to_json(&acts[i]);
      if (!ao || !cJSON_AddItemToArray(list, ao)) {
        cJSON_Delete(ao);
        bad = 1;
      }
    }
  }
  if (bad) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

int sched_write_text_file(const char *path, const char *text, Error *err) {
  size_t n = strlen(path) + 8;
  char *tmp = malloc(n);
  if (!tmp) return error_set(err, ERR_NOMEM, "%s: out of memory", path);
  snprintf(tmp, n, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    int rc = error_set(err, ERR_IO, "cannot write %s: %s", tmp, error_errno_text(errno));
    free(tmp);
    return rc;
  }
  size_t len = strlen(text);
  int ok = fwrite(text, 1, len, f) == len;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    int rc = error_set(err, ERR_IO, "cannot write %s: %s", path, error_errno_text(errno));
    unlink(tmp);
    free(tmp);
    return rc;
  }
  free(tmp);
  return ERR_OK;
}

int sched_program_write_json(const SchedProgram *prog, const char *path, Error *err) {
  cJSON *root = sched_program_to_json(prog);
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) return error_set(err, ERR_NOMEM, "%s: out of memory serialising the program", path);
  int rc = sched_write_text_file(path, text, err);
  cJSON_free(text);
  return rc;
}

/* ---- reading ---- */

/* Reads an optional integer field; absent means -1. */
static int get_int(const cJSON *obj, const char *key, int *out, int required, const char *where, Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) {
    if (required) return error_set(err, ERR_FORMAT, "%s: missing field \"%s\"", where, key);
    *out = -1;
    return ERR_OK;
  }
  if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble || v->valuedouble < -1)
    return error_set(err, ERR_FORMAT, "%s: field \"%s\" must be an integer >= -1", where, key);
  *out = (int)v->valuedouble;
  return ERR_OK;
}

int sched_program_from_json(const cJSON *json, SchedProgram **out, Error *err) {
  *out = NULL;
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(json, "format");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, SCHED_JSON_FORMAT))
    return error_set(err, ERR_FORMAT, "program JSON: \"format\" must be \"%s\"", SCHED_JSON_FORMAT);
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(json, "version");
  if (!cJSON_IsNumber(ver) || ver->valueint != SCHED_JSON_VERSION)
    return error_set(err, ERR_FORMAT, "program JSON: \"version\" must be %d", SCHED_JSON_VERSION);
  const cJSON *jc = cJSON_GetObjectItemCaseSensitive(json, "config");
  if (!cJSON_IsObject(jc)) return error_set(err, ERR_FORMAT, "program JSON: missing object \"config\"");
  SchedConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  const cJSON *js = cJSON_GetObjectItemCaseSensitive(jc, "schedule");
  if (!cJSON_IsString(js) || sched_schedule_from_name(js->valuestring, &cfg.schedule))
    return error_set(err, ERR_FORMAT, "program JSON: config.schedule must be none, gpipe, 1f1b, interleaved, zb-h1 or custom");
  int rc = get_int(jc, "pp", &cfg.pp, 1, "program JSON config", err);
  if (!rc) rc = get_int(jc, "vpp", &cfg.vpp, 1, "program JSON config", err);
  if (!rc) rc = get_int(jc, "microbatches", &cfg.microbatches, 1, "program JSON config", err);
  if (rc) return rc;
  const cJSON *fc = cJSON_GetObjectItemCaseSensitive(jc, "order_fwd_cost");
  const cJSON *bc = cJSON_GetObjectItemCaseSensitive(jc, "order_bwd_cost");
  cfg.order_fwd_cost = cJSON_IsNumber(fc) ? fc->valuedouble : 0;
  cfg.order_bwd_cost = cJSON_IsNumber(bc) ? bc->valuedouble : 0;
  const cJSON *gc = cJSON_GetObjectItemCaseSensitive(jc, "param_groups");
  cfg.param_groups = cJSON_IsNumber(gc) ? gc->valueint : 0;
  cfg.split_backward = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(jc, "split_backward"));
  const cJSON *jw = cJSON_GetObjectItemCaseSensitive(jc, "warmup");
  if (jw) {
    if (!cJSON_IsArray(jw) || cJSON_GetArraySize(jw) != cfg.pp || cfg.pp > SCHED_MAX_WARMUP_RANKS)
      return error_set(err, ERR_FORMAT, "program JSON: config.warmup must be an array of pp = %d depths", cfg.pp);
    cfg.warmup_set = cfg.pp;
    int r = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, jw) {
      if (!cJSON_IsNumber(v) || v->valueint < 0)
        return error_set(err, ERR_FORMAT, "program JSON: config.warmup[%d] must be an integer >= 0", r);
      cfg.warmup[r++] = v->valueint;
    }
  }
  const cJSON *reps = cJSON_GetObjectItemCaseSensitive(jc, "phase_repeats");
  if (reps && (!cJSON_IsArray(reps) || cJSON_GetArraySize(reps) != cfg.param_groups ||
               cfg.param_groups > SCHED_MAX_PARAM_GROUPS))
    return error_set(err, ERR_FORMAT, "program JSON: config.phase_repeats must be an array of param_groups (%d) counts",
                     cfg.param_groups);
  for (int g = 0; reps && g < cfg.param_groups; g++) {
    const cJSON *v = cJSON_GetArrayItem(reps, g);
    if (!cJSON_IsNumber(v) || v->valueint < 0 || v->valueint > SCHED_MAX_PHASES)
      return error_set(err, ERR_FORMAT, "program JSON: config.phase_repeats[%d] must be a count in 0..%d", g,
                       SCHED_MAX_PHASES);
    cfg.phase_repeats[g] = v->valueint;
  }
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(json, "ranks");
  if (!cJSON_IsArray(ranks) || cJSON_GetArraySize(ranks) < 1)
    return error_set(err, ERR_FORMAT, "program JSON: \"ranks\" must be a non-empty array");
  int R = cJSON_GetArraySize(ranks);
  int *begin = calloc((size_t)R + 1, sizeof *begin);
  SchedBuilder *b = sched_builder_new(&cfg, R);
  if (!begin || !b) {
    free(begin);
    sched_builder_free(b);
    return error_set(err, ERR_NOMEM, "program JSON: out of memory");
  }
  /* Pass 1: actions; ids in the file must be the dense ids we would assign. */
  int r = 0;
  const cJSON *ro;
  cJSON_ArrayForEach(ro, ranks) {
    const cJSON *acts = cJSON_GetObjectItemCaseSensitive(ro, "actions");
    if (!cJSON_IsArray(acts)) {
      rc = error_set(err, ERR_FORMAT, "program JSON: ranks[%d].actions must be an array", r);
      goto done;
    }
    begin[r + 1] = begin[r] + cJSON_GetArraySize(acts);
    int i = 0;
    const cJSON *ao;
    cJSON_ArrayForEach(ao, acts) {
      char where[64];
      snprintf(where, sizeof where, "program JSON ranks[%d].actions[%d]", r, i);
      const cJSON *jk = cJSON_GetObjectItemCaseSensitive(ao, "kind");
      SchedActionKind kind;
      if (!cJSON_IsString(jk) || sched_action_kind_from_name(jk->valuestring, &kind)) {
        rc = error_set(err, ERR_FORMAT, "%s: unknown or missing \"kind\"", where);
        goto done;
      }
      SchedAction a = sched_action_make(kind);
      const cJSON *jst = cJSON_GetObjectItemCaseSensitive(ao, "stream");
      if (jst && (!cJSON_IsString(jst) || sched_stream_from_name(jst->valuestring, &a.stream))) {
        rc = error_set(err, ERR_FORMAT, "%s: \"stream\" must be \"compute\", \"p2p\" or \"collective\"", where);
        goto done;
      }
      int id = -1;
      rc = get_int(ao, "id", &id, 1, where, err);
      if (!rc) rc = get_int(ao, "mb", &a.microbatch, 0, where, err);
      if (!rc) rc = get_int(ao, "chunk", &a.chunk, 0, where, err);
      if (!rc) rc = get_int(ao, "stage", &a.stage, 0, where, err);
      if (!rc) rc = get_int(ao, "peer", &a.peer, 0, where, err);
      if (!rc) rc = get_int(ao, "peer_chunk", &a.peer_chunk, 0, where, err);
      if (!rc) rc = get_int(ao, "peer_stage", &a.peer_stage, 0, where, err);
      if (!rc) rc = get_int(ao, "bucket", &a.bucket, 0, where, err);
      if (!rc) rc = get_int(ao, "layer", &a.layer, 0, where, err);
      if (!rc) rc = get_int(ao, "group", &a.group, 0, where, err);
      if (!rc) rc = get_int(ao, "seq_begin", &a.seq_begin, 0, where, err);
      if (!rc) rc = get_int(ao, "seq_count", &a.seq_count, 0, where, err);
      a.phase = a.group; /* "phase" is written only where it differs */
      if (!rc && cJSON_GetObjectItemCaseSensitive(ao, "phase")) rc = get_int(ao, "phase", &a.phase, 0, where, err);
      if (rc) goto done;
      if (id != begin[r] + i) {
        rc = error_set(err, ERR_FORMAT, "%s: id %d, expected %d (ids are positions, rank by rank)", where, id, begin[r] + i);
        goto done;
      }
      rc = sched_builder_append(b, r, &a, NULL, err);
      if (rc) goto done;
      i++;
    }
    r++;
  }
  /* Pass 2: dependencies and matches, now that every id has a place. */
  int total = begin[R];
  for (r = 0; r < R; r++) {
    const cJSON *acts = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ranks, r), "actions");
    int i = 0;
    const cJSON *ao;
    cJSON_ArrayForEach(ao, acts) {
      char where[64];
      snprintf(where, sizeof where, "program JSON ranks[%d].actions[%d]", r, i);
      SchedActionRef self = {r, i};
      int match = -1;
      rc = get_int(ao, "match", &match, 0, where, err);
      if (rc) goto done;
      const cJSON *deps = cJSON_GetObjectItemCaseSensitive(ao, "deps");
      if (deps && !cJSON_IsArray(deps)) {
        rc = error_set(err, ERR_FORMAT, "%s: \"deps\" must be an array of ids", where);
        goto done;
      }
      int nd = deps ? cJSON_GetArraySize(deps) : 0;
      for (int k = -1; k < nd; k++) {
        int id = match;
        if (k >= 0) {
          const cJSON *d = cJSON_GetArrayItem(deps, k);
          id = cJSON_IsNumber(d) ? (int)d->valuedouble : -2;
        } else if (match < 0) {
          continue;
        }
        if (id < 0 || id >= total) {
          rc = error_set(err, ERR_FORMAT, "%s: id %d in %s is not an action of this program", where, id, k < 0 ? "match" : "deps");
          goto done;
        }
        int dr = 0;
        while (begin[dr + 1] <= id) dr++;
        SchedActionRef ref = {dr, id - begin[dr]};
        rc = k < 0 ? sched_builder_set_match(b, self, ref, err) : sched_builder_add_dep(b, self, ref, err);
        if (rc) goto done;
      }
      i++;
    }
  }
  rc = sched_builder_finish(b, out, err);
done:
  free(begin);
  sched_builder_free(b);
  return rc;
}

int sched_program_read_json(const char *path, SchedProgram **out, Error *err) {
  *out = NULL;
  char *text = NULL;
  int read_rc = file_read_text(path, "program", (size_t)1 << 30, &text, NULL, err);
  if (read_rc) return read_rc;
  cJSON *json = cJSON_Parse(text);
  free(text);
  if (!json) return error_set(err, ERR_FORMAT, "%s: not valid JSON", path);
  int rc = sched_program_from_json(json, out, err);
  cJSON_Delete(json);
  if (rc) error_wrap(err, "%s", path);
  return rc;
}
