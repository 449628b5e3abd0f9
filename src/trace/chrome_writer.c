/* Chrome trace JSON writer (format in chrome_writer.h). Events are streamed
 * with fprintf rather than built as a cJSON tree: a long run has millions
 * of them. Only the otherData object goes through cJSON. */
#include "trace/chrome_writer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "trace/match.h"

/* Writes ns as µs with three decimals, exactly. */
static const char *fmt_us(char *buf, size_t size, int64_t ns) {
  const char *sign = ns < 0 ? "-" : "";
  uint64_t v = ns < 0 ? (uint64_t)(-ns) : (uint64_t)ns;
  snprintf(buf, size, "%s%llu.%03llu", sign, (unsigned long long)(v / 1000), (unsigned long long)(v % 1000));
  return buf;
}

typedef struct Writer {
  FILE *f;
  const TraceRankBuffer *ranks;
  int num_ranks;
  const SchedProgram *prog;
  int64_t origin;
  long flow_id;
  int first; /* no event written yet (comma handling) */
} Writer;

static void sep(Writer *w) {
  if (!w->first) fputs(",\n", w->f);
  w->first = 0;
}

static int64_t stamp(const Writer *w, int rank, uint64_t t) {
  return (int64_t)t + w->ranks[rank].clock_offset_ns - w->origin;
}

static void int_arg(FILE *f, const char *key, long long v) {
  if (v >= 0) fprintf(f, ",\"%s\":%lld", key, v);
}

static void common_args(FILE *f, const TraceEvent *e) {
  int_arg(f, "mb", e->microbatch);
  int_arg(f, "layer", e->layer);
  int_arg(f, "peer", e->peer);
  int_arg(f, "bytes", e->bytes);
  const char *g = trace_group_name(e->group);
  if (g) fprintf(f, ",\"group\":\"%s\"", g);
  int_arg(f, "group_id", e->group_id);
  if (e->oncpu_ns >= 0) {
    char b[32];
    fprintf(f, ",\"oncpu_us\":%s", fmt_us(b, sizeof b, e->oncpu_ns));
  }
}

static void write_metadata(Writer *w) {
  static const char *const THREADS[4] = {"compute", "p2p", "collective", "ops"};
  for (int r = 0; r < w->num_ranks; r++) {
    const TraceRankInfo *in = &w->ranks[r].info;
    sep(w);
    fprintf(w->f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d (pipeline %d)\"}}",
            r, r, in->pipeline_rank);
    sep(w);
    fprintf(w->f, "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}", r,
            r);
    for (int t = 0; t < 4; t++) {
      sep(w);
      fprintf(w->f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}", r, t,
              THREADS[t]);
    }
  }
}

static void write_action(Writer *w, int rank, const TraceEvent *e) {
  const SchedAction *a = w->prog ? sched_program_action(w->prog, e->id) : NULL;
  char label[48], b1[32], b2[32];
  if (a)
    sched_action_label(w->prog, a, label, sizeof label);
  else
    snprintf(label, sizeof label, "action %d", e->id);
  int64_t t0 = stamp(w, rank, e->begin), t1 = stamp(w, rank, e->end);
  sep(w);
  fprintf(w->f, "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%s,\"dur\":%s", label,
          a ? sched_action_kind_name(a->kind) : "action", rank, a ? (int)a->stream : 0, fmt_us(b1, sizeof b1, t0),
          fmt_us(b2, sizeof b2, t1 > t0 ? t1 - t0 : 0));
  fprintf(w->f, ",\"args\":{\"id\":%d,\"iter\":%d", e->id, e->iteration);
  if (a) {
    int_arg(w->f, "chunk", a->chunk);
    int_arg(w->f, "stage", a->stage);
    int_arg(w->f, "bucket", a->bucket);
  }
  common_args(w->f, e);
  fputs("}}", w->f);
}

static void write_op(Writer *w, int rank, const TraceEvent *e) {
  char b1[32], b2[32];
  int64_t t0 = stamp(w, rank, e->begin), t1 = stamp(w, rank, e->end);
  const char *kind = trace_op_kind_name((TraceOpKind)e->id);
  sep(w);
  fprintf(w->f, "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"op\",\"pid\":%d,\"tid\":%d,\"ts\":%s,\"dur\":%s", kind, rank,
          TRACE_TID_OPS, fmt_us(b1, sizeof b1, t0), fmt_us(b2, sizeof b2, t1 > t0 ? t1 - t0 : 0));
  fprintf(w->f, ",\"args\":{\"kind\":\"%s\",\"iter\":%d", kind, e->iteration);
  int_arg(w->f, "m", e->m);
  int_arg(w->f, "n", e->n);
  int_arg(w->f, "k", e->k);
  common_args(w->f, e);
  fputs("}}", w->f);
}

/* A point inside the slice, so "bp":"e" binds the arrow to it: 1 ns before
 * its end (or its begin for an empty slice). */
static int64_t inside(const Writer *w, int rank, const TraceEvent *e) {
  int64_t t0 = stamp(w, rank, e->begin), t1 = stamp(w, rank, e->end);
  return t1 - 1 > t0 ? t1 - 1 : t0;
}

static void write_flow(Writer *w, const char *cat, int from_rank, const TraceEvent *from, int to_rank,
                       const TraceEvent *to) {
  const SchedAction *fa = sched_program_action(w->prog, from->id), *ta = sched_program_action(w->prog, to->id);
  char b[32];
  long id = ++w->flow_id;
  sep(w);
  fprintf(w->f, "{\"ph\":\"s\",\"name\":\"%s\",\"cat\":\"%s\",\"id\":%ld,\"pid\":%d,\"tid\":%d,\"ts\":%s,\"bp\":\"e\"}",
          cat, cat, id, from_rank, (int)fa->stream, fmt_us(b, sizeof b, inside(w, from_rank, from)));
  sep(w);
  fprintf(w->f, "{\"ph\":\"f\",\"name\":\"%s\",\"cat\":\"%s\",\"id\":%ld,\"pid\":%d,\"tid\":%d,\"ts\":%s,\"bp\":\"e\"}",
          cat, cat, id, to_rank, (int)ta->stream, fmt_us(b, sizeof b, inside(w, to_rank, to)));
}

static int write_flows(Writer *w, Error *err) {
  TraceIndex ix;
  int rc = trace_index_build(w->ranks, w->num_ranks, w->prog, &ix, err);
  if (rc) return rc;
  for (int it = ix.first_iteration; it < ix.first_iteration + ix.num_iterations && !rc; it++) {
    for (int r = 0; r < w->num_ranks; r++) {
      int count;
      const SchedAction *list = sched_program_rank_actions(w->prog, w->ranks[r].info.pipeline_rank, &count);
      for (int i = 0; list && i < count; i++) {
        const SchedAction *a = &list[i];
        if (!sched_kind_is_send(a->kind) || a->match < 0) continue;
        int ev = trace_index_event(&ix, r, it, a->id);
        if (ev < 0) continue;
        const TraceEvent *send = &w->ranks[r].events[ev];
        int peer = trace_peer_world_rank(w->ranks, w->num_ranks, r, a->peer, send->peer);
        int rev = trace_index_event(&ix, peer, it, a->match);
        if (rev >= 0) write_flow(w, "p2p", r, send, peer, &w->ranks[peer].events[rev]);
      }
    }
    TraceCollectives coll;
    rc = trace_collectives_find(&ix, it, &coll, err);
    for (int c = 0; !rc && c < coll.count; c++) {
      int b = coll.begin[c], e = coll.begin[c + 1];
      if (e - b < 2) continue;
      int late = b;
      for (int p = b + 1; p < e; p++) {
        const TraceParticipant *q = &coll.parts[p], *l = &coll.parts[late];
        if (stamp(w, q->rank, w->ranks[q->rank].events[q->event].begin) >
            stamp(w, l->rank, w->ranks[l->rank].events[l->event].begin))
          late = p;
      }
      const TraceParticipant *l = &coll.parts[late];
      for (int p = b; p < e; p++) {
        if (p == late) continue;
        const TraceParticipant *q = &coll.parts[p];
        write_flow(w, "collective", l->rank, &w->ranks[l->rank].events[l->event], q->rank,
                   &w->ranks[q->rank].events[q->event]);
      }
    }
    trace_collectives_free(&coll);
  }
  trace_index_free(&ix);
  return rc;
}

static cJSON *other_data(const Writer *w, const TraceRunMeta *meta) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "format", "fivefold.trace");
  cJSON_AddNumberToObject(o, "version", 1);
  cJSON_AddStringToObject(o, "source", meta->source ? meta->source : "recorder");
  cJSON_AddStringToObject(o, "clock", meta->clock ? meta->clock : trace_clock_source_name(trace_clock_source()));
  cJSON_AddNumberToObject(o, "origin_ns", (double)w->origin);
  cJSON *g = cJSON_AddObjectToObject(o, "grid");
  const TraceGridSizes *s = &meta->grid;
  const char *names[8] = {"world", "tp", "cp", "dp", "pp", "etp", "ep", "edp"};
  int vals[8] = {s->world ? s->world : w->num_ranks, s->tp, s->cp, s->dp, s->pp, s->etp, s->ep, s->edp};
  for (int i = 0; g && i < 8; i++)
    if (vals[i] > 0) cJSON_AddNumberToObject(g, names[i], vals[i]);
  cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
  for (int r = 0; ranks && r < w->num_ranks; r++) {
    const TraceRankBuffer *b = &w->ranks[r];
    cJSON *x = cJSON_CreateObject();
    if (!x || !cJSON_AddItemToArray(ranks, x)) {
      cJSON_Delete(x);
      cJSON_Delete(o);
      return NULL;
    }
    const char *keys[9] = {"world_rank", "pipeline_rank", "tp", "cp", "dp", "pp", "etp", "ep", "edp"};
    int v[9] = {r, b->info.pipeline_rank, b->info.tp, b->info.cp, b->info.dp, b->info.pp, b->info.etp, b->info.ep,
                b->info.edp};
    for (int k = 0; k < 9; k++)
      if (v[k] >= 0) cJSON_AddNumberToObject(x, keys[k], v[k]);
    if (b->info.host[0]) cJSON_AddStringToObject(x, "host", b->info.host);
    cJSON_AddNumberToObject(x, "clock_offset_ns", (double)b->clock_offset_ns);
    cJSON_AddNumberToObject(x, "events", (double)b->count);
    cJSON_AddNumberToObject(x, "dropped", (double)b->dropped);
  }
  if (meta->config) cJSON_AddItemToObject(o, "config", cJSON_Duplicate(meta->config, 1));
  if (meta->model) cJSON_AddItemToObject(o, "model", cJSON_Duplicate(meta->model, 1));
  if (meta->session) cJSON_AddItemToObject(o, "session", cJSON_Duplicate(meta->session, 1));
  if (meta->plan) cJSON_AddItemToObject(o, "plan", cJSON_Duplicate(meta->plan, 1));
  if (w->prog) {
    cJSON *p = sched_program_to_json(w->prog);
    if (!p) {
      cJSON_Delete(o);
      return NULL;
    }
    cJSON_AddItemToObject(o, "program", p);
  }
  return o;
}

int trace_chrome_write_stream(FILE *f, const TraceRunMeta *meta, const TraceRankBuffer *ranks, int num_ranks,
                              Error *err) {
  const SchedProgram *prog = meta ? meta->program : NULL;
  TraceRunMeta empty = {0};
  if (!meta) meta = &empty;
  for (int r = 0; r < num_ranks; r++) {
    if (ranks[r].info.world_rank != r)
      return error_set(err, ERR_ARG, "trace writer: buffer %d holds world rank %d (expected buffers in rank order)", r,
                       ranks[r].info.world_rank);
    if (prog && (ranks[r].info.pipeline_rank < 0 || ranks[r].info.pipeline_rank >= prog->num_ranks))
      return error_set(err, ERR_ARG, "trace writer: rank %d runs pipeline rank %d, the program has %d", r,
                       ranks[r].info.pipeline_rank, prog->num_ranks);
  }
  Writer w = {.f = f, .ranks = ranks, .num_ranks = num_ranks, .prog = prog, .first = 1};
  int any = 0;
  for (int r = 0; r < num_ranks; r++)
    for (size_t i = 0; i < ranks[r].count; i++) {
      int64_t t = (int64_t)ranks[r].events[i].begin + ranks[r].clock_offset_ns;
      if (!any || t < w.origin) w.origin = t;
      any = 1;
    }
  fputs("{\"traceEvents\":[\n", f);
  write_metadata(&w);
  for (int r = 0; r < num_ranks; r++)
    for (size_t i = 0; i < ranks[r].count; i++) {
      const TraceEvent *e = &ranks[r].events[i];
      if (e->type == TRACE_EVENT_ACTION)
        write_action(&w, r, e);
      else
        write_op(&w, r, e);
    }
  if (prog) {
    int rc = write_flows(&w, err);
    if (rc) return rc;
  }
  cJSON *o = other_data(&w, meta);
  char *text = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  if (!text) return error_set(err, ERR_NOMEM, "trace writer: out of memory serialising otherData");
  fprintf(f, "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":%s}\n", text);
  cJSON_free(text);
  return ferror(f) ? error_set(err, ERR_IO, "trace writer: write failed: %s", error_errno_text(errno)) : ERR_OK;
}

int trace_chrome_write(const char *path, const TraceRunMeta *meta, const TraceRankBuffer *ranks, int num_ranks,
                       Error *err) {
  size_t n = strlen(path);
  char *tmp = malloc(n + 5);
  if (!tmp) return error_set(err, ERR_NOMEM, "%s: out of memory", path);
  memcpy(tmp, path, n);
  memcpy(tmp + n, ".tmp", 5);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    int rc = error_set(err, ERR_IO, "cannot write %s: %s", tmp, error_errno_text(errno));
    free(tmp);
    return rc;
  }
  int rc = trace_chrome_write_stream(f, meta, ranks, num_ranks, err);
  if (fclose(f) != 0 && rc == ERR_OK) rc = error_set(err, ERR_IO, "cannot write %s: %s", tmp, error_errno_text(errno));
  if (rc == ERR_OK && rename(tmp, path) != 0) rc = error_set(err, ERR_IO, "cannot rename %s to %s: %s", tmp, path, error_errno_text(errno));
  if (rc != ERR_OK) {
    remove(tmp);
    if (err) error_wrap(err, "writing trace %s", path);
  }
  free(tmp);
  return rc;
}
