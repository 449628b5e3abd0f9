/* Reads a trace file written by chrome_writer.c back into a TraceRun: the
 * program and rank coordinates from otherData, the events from the "X"
 * slices (flow and metadata events are the writer's view; the analyzer
 * derives its own edges). Also the TraceRun helpers of run.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/file_text.h"
#include "trace/chrome_writer.h"

static int get_int(const cJSON *obj, const char *key, int fallback) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsNumber(v) ? (int)v->valuedouble : fallback;
}

static int64_t get_i64(const cJSON *obj, const char *key, int64_t fallback) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsNumber(v) ? (int64_t)llround(v->valuedouble) : fallback;
}

static int64_t us_to_ns(double us) { return (int64_t)llround(us * 1000.0); }

TraceRankInfo trace_rank_info_make(int world_rank, int pipeline_rank) {
  TraceRankInfo info;
  memset(&info, 0, sizeof info);
  info.world_rank = world_rank;
  info.pipeline_rank = pipeline_rank;
  info.tp = info.cp = info.dp = info.etp = info.ep = info.edp = -1;
  info.pp = pipeline_rank;
  return info;
}

void trace_run_free(TraceRun *run) {
  if (!run) return;
  sched_program_free(run->program);
  free(run->ranks);
  free(run->event_pool);
  cJSON_Delete(run->other_data);
  memset(run, 0, sizeof *run);
}

int trace_run_iteration_range(const TraceRun *run, int *first, int *last) {
  int any = 0;
  for (int r = 0; r < run->num_ranks; r++)
    for (size_t i = 0; i < run->ranks[r].count; i++) {
      const TraceEvent *e = &run->ranks[r].events[i];
      if (e->type != TRACE_EVENT_ACTION || e->iteration < 0) continue;
      if (!any || e->iteration < *first) *first = e->iteration;
      if (!any || e->iteration > *last) *last = e->iteration;
      any = 1;
    }
  return any ? 0 : -1;
}

static void read_rank_info(const cJSON *x, TraceRankBuffer *b, int r) {
  b->info = trace_rank_info_make(r, get_int(x, "pipeline_rank", r));
  b->info.tp = get_int(x, "tp", -1);
  b->info.cp = get_int(x, "cp", -1);
  b->info.dp = get_int(x, "dp", -1);
  b->info.pp = get_int(x, "pp", b->info.pipeline_rank);
  b->info.etp = get_int(x, "etp", -1);
  b->info.ep = get_int(x, "ep", -1);
  b->info.edp = get_int(x, "edp", -1);
  const cJSON *host = cJSON_GetObjectItemCaseSensitive(x, "host");
  if (cJSON_IsString(host)) snprintf(b->info.host, sizeof b->info.host, "%s", host->valuestring);
  b->dropped = (uint64_t)get_i64(x, "dropped", 0);
}

/* Fills e from one "X" slice; returns 0, or -1 when it is not one of ours. */
static int read_slice(const cJSON *ev, TraceEvent *e) {
  const cJSON *ts = cJSON_GetObjectItemCaseSensitive(ev, "ts"), *dur = cJSON_GetObjectItemCaseSensitive(ev, "dur");
  const cJSON *cat = cJSON_GetObjectItemCaseSensitive(ev, "cat"), *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
  if (!cJSON_IsNumber(ts) || !cJSON_IsObject(args)) return -1;
  memset(e, 0, sizeof *e);
  e->begin = (uint64_t)us_to_ns(ts->valuedouble);
  e->end = e->begin + (uint64_t)(cJSON_IsNumber(dur) ? us_to_ns(dur->valuedouble) : 0);
  if (cJSON_IsString(cat) && !strcmp(cat->valuestring, "op")) {
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(args, "kind");
    TraceOpKind k;
    if (!cJSON_IsString(kind) || trace_op_kind_from_name(kind->valuestring, &k) != 0) return -1;
    e->type = TRACE_EVENT_OP;
    e->id = (int32_t)k;
  } else {
    e->type = TRACE_EVENT_ACTION;
    e->id = get_int(args, "id", -1);
    if (e->id < 0) return -1;
  }
  e->iteration = get_int(args, "iter", -1);
  e->microbatch = get_int(args, "mb", -1);
  e->layer = get_int(args, "layer", -1);
  e->peer = get_int(args, "peer", -1);
  e->bytes = get_i64(args, "bytes", -1);
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(args, "group");
  e->group = cJSON_IsString(g) ? trace_group_from_name(g->valuestring) : -1;
  e->group_id = get_int(args, "group_id", -1);
  e->m = get_int(args, "m", -1);
  e->n = get_int(args, "n", -1);
  e->k = get_int(args, "k", -1);
  const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(args, "oncpu_us");
  e->oncpu_ns = cJSON_IsNumber(cpu) ? us_to_ns(cpu->valuedouble) : -1;
  return 0;
}

static int is_slice(const cJSON *ev, int *pid) {
  const cJSON *ph = cJSON_GetObjectItemCaseSensitive(ev, "ph"), *p = cJSON_GetObjectItemCaseSensitive(ev, "pid");
  if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X") || !cJSON_IsNumber(p)) return 0;
  *pid = (int)p->valuedouble;
  return *pid >= 0;
}

int trace_chrome_from_json(const cJSON *root, const char *origin, TraceRun *out, Error *err) {
  memset(out, 0, sizeof *out);
  const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
  if (!cJSON_IsArray(events))
    return error_set(err, ERR_FORMAT, "%s: no \"traceEvents\" array (expected a Chrome trace JSON object)", origin);
  const cJSON *other = cJSON_GetObjectItemCaseSensitive(root, "otherData");
  if (!cJSON_IsObject(other)) other = cJSON_GetObjectItemCaseSensitive(root, "metadata");
  if (!cJSON_IsObject(other)) other = NULL;
  const cJSON *ranks_json = other ? cJSON_GetObjectItemCaseSensitive(other, "ranks") : NULL;
  int num_ranks = cJSON_IsArray(ranks_json) ? cJSON_GetArraySize(ranks_json) : 0;
  size_t total = 0;
  const cJSON *ev;
  cJSON_ArrayForEach(ev, events) {
    int pid;
    if (!is_slice(ev, &pid)) continue;
    total++;
    if (pid + 1 > num_ranks) num_ranks = pid + 1;
  }
  out->ranks = calloc((size_t)(num_ranks ? num_ranks : 1), sizeof *out->ranks);
  out->event_pool = malloc((total ? total : 1) * sizeof *out->event_pool);
  size_t *fill = calloc((size_t)(num_ranks ? num_ranks : 1), sizeof *fill);
  if (!out->ranks || !out->event_pool || !fill) {
    free(fill);
    trace_run_free(out);
    return error_set(err, ERR_NOMEM, "%s: out of memory for %zu events", origin, total);
  }
  out->num_ranks = num_ranks;
  for (int r = 0; r < num_ranks; r++) {
    const cJSON *x = ranks_json ? cJSON_GetArrayItem(ranks_json, r) : NULL;
    if (x)
      read_rank_info(x, &out->ranks[r], r);
    else
      out->ranks[r].info = trace_rank_info_make(r, r);
  }
  cJSON_ArrayForEach(ev, events) {
    int pid;
    if (is_slice(ev, &pid)) out->ranks[pid].count++;
  }
  size_t offset = 0;
  for (int r = 0; r < num_ranks; r++) {
    out->ranks[r].events = out->event_pool + offset;
    offset += out->ranks[r].count;
    out->ranks[r].count = 0;
  }
  cJSON_ArrayForEach(ev, events) {
    int pid;
    if (!is_slice(ev, &pid)) continue;
    TraceEvent *e = (TraceEvent *)&out->ranks[pid].events[out->ranks[pid].count];
    if (read_slice(ev, e) == 0) out->ranks[pid].count++;
  }
  free(fill);
  snprintf(out->source, sizeof out->source, "recorder");
  if (other) {
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(other, "source");
    if (cJSON_IsString(src)) snprintf(out->source, sizeof out->source, "%s", src->valuestring);
    out->origin_ns = get_i64(other, "origin_ns", 0);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(other, "grid");
    out->grid = (TraceGridSizes){get_int(g, "world", num_ranks), get_int(g, "tp", 0), get_int(g, "cp", 0),
                                 get_int(g, "dp", 0),          get_int(g, "pp", 0), get_int(g, "etp", 0),
                                 get_int(g, "ep", 0),          get_int(g, "edp", 0)};
    const cJSON *prog = cJSON_GetObjectItemCaseSensitive(other, "program");
    if (prog && sched_program_from_json(prog, &out->program, err) != ERR_OK) {
      trace_run_free(out);
      return error_wrap(err, "%s: otherData.program", origin);
    }
    out->other_data = cJSON_Duplicate(other, 1);
  }
  if (out->program)
    for (int r = 0; r < num_ranks; r++)
      if (out->ranks[r].info.pipeline_rank < 0 || out->ranks[r].info.pipeline_rank >= out->program->num_ranks) {
        int bad = out->ranks[r].info.pipeline_rank;
        trace_run_free(out);
        return error_set(err, ERR_FORMAT, "%s: otherData.ranks[%d].pipeline_rank = %d, the program has %d ranks",
                         origin, r, bad, out->program ? out->program->num_ranks : 0);
      }
  return ERR_OK;
}

int trace_chrome_read(const char *path, TraceRun *out, Error *err) {
  memset(out, 0, sizeof *out);
  char *text = NULL;
  size_t n = 0;
  int rc = file_read_text(path, "trace", (size_t)1 << 32, &text, &n, err);
  if (rc) return rc;
  cJSON *root = cJSON_ParseWithLength(text, n);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    long pos = at && at >= text && at <= text + n ? (long)(at - text) : -1;
    free(text);
    return error_set(err, ERR_FORMAT, "%s: not valid JSON (parse error near byte %ld)", path, pos);
  }
  free(text);
  rc = trace_chrome_from_json(root, path, out, err);
  cJSON_Delete(root);
  return rc;
}
