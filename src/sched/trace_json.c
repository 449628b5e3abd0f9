/* Chrome trace writer for evaluated programs (format in trace_json.h). */
#include "sched/trace_json.h"

#include <math.h>

#include <cjson/cJSON.h>

static cJSON *add_event(cJSON *events, const char *name, const char *ph, int pid, int tid) {
  cJSON *e = cJSON_CreateObject();
  if (!e) return NULL;
  if (!cJSON_AddItemToArray(events, e)) {
    cJSON_Delete(e);
    return NULL;
  }
  if (!cJSON_AddStringToObject(e, "name", name) || !cJSON_AddStringToObject(e, "ph", ph) ||
      !cJSON_AddNumberToObject(e, "pid", pid) || !cJSON_AddNumberToObject(e, "tid", tid))
    return NULL;
  return e;
}

static int add_metadata(cJSON *events, const char *kind, int pid, int tid, const char *value) {
  cJSON *e = add_event(events, kind, "M", pid, tid);
  cJSON *args = e ? cJSON_AddObjectToObject(e, "args") : NULL;
  return args && cJSON_AddStringToObject(args, "name", value) ? 0 : -1;
}

static int add_int_arg(cJSON *args, const char *key, int value) {
  return value < 0 || cJSON_AddNumberToObject(args, key, value) ? 0 : -1;
}

cJSON *sched_trace_to_json(const SchedProgram *prog, const SchedEval *ev, double us_per_unit) {
  cJSON *root = cJSON_CreateObject();
  cJSON *events = root ? cJSON_AddArrayToObject(root, "traceEvents") : NULL;
  int bad = !events || !cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
  for (int r = 0; !bad && r < prog->num_ranks; r++) {
    char name[48];
    snprintf(name, sizeof name, "pipeline rank %d", r);
    bad = add_metadata(events, "process_name", r, 0, name);
    for (int s = 0; !bad && s < SCHED_NUM_STREAMS; s++)
      bad = add_metadata(events, "thread_name", r, s, sched_stream_name((SchedStream)s));
  }
  for (int i = 0; !bad && i < prog->num_actions; i++) {
    const SchedAction *a = &prog->actions[i];
    if (isnan(ev->start[i])) continue;
    char label[32];
    sched_action_label(prog, a, label, sizeof label);
    cJSON *e = add_event(events, label, "X", a->rank, a->stream);
    cJSON *args = NULL;
    bad = !e || !cJSON_AddStringToObject(e, "cat", sched_action_kind_name(a->kind)) ||
          !cJSON_AddNumberToObject(e, "ts", ev->start[i] * us_per_unit) ||
          !cJSON_AddNumberToObject(e, "dur", (ev->finish[i] - ev->start[i]) * us_per_unit) ||
          !(args = cJSON_AddObjectToObject(e, "args")) || !cJSON_AddNumberToObject(args, "id", a->id) ||
          add_int_arg(args, "mb", a->microbatch) || add_int_arg(args, "chunk", a->chunk) ||
          add_int_arg(args, "stage", a->stage) || add_int_arg(args, "peer", a->peer) ||
          add_int_arg(args, "bucket", a->bucket);
    /* Flow from each SEND to its RECV; the arrow's id is the send's id. */
    if (!bad && sched_kind_is_send(a->kind) && a->match >= 0 && a->match < prog->num_actions &&
        !isnan(ev->start[a->match])) {
      const SchedAction *recv = &prog->actions[a->match];
      cJSON *s = add_event(events, "p2p", "s", a->rank, a->stream);
      cJSON *f = s ? add_event(events, "p2p", "f", recv->rank, recv->stream) : NULL;
      bad = !s || !f || !cJSON_AddStringToObject(s, "cat", "p2p") || !cJSON_AddNumberToObject(s, "id", a->id) ||
            !cJSON_AddNumberToObject(s, "ts", ev->start[i] * us_per_unit) || !cJSON_AddStringToObject(f, "cat", "p2p") ||
            !cJSON_AddNumberToObject(f, "id", a->id) || !cJSON_AddNumberToObject(f, "ts", ev->start[recv->id] * us_per_unit) ||
            !cJSON_AddStringToObject(f, "bp", "e");
    }
  }
  if (bad) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

int sched_trace_write(const SchedProgram *prog, const SchedEval *eval, double us_per_unit, const char *path, Error *err) {
  cJSON *root = sched_trace_to_json(prog, eval, us_per_unit);
  char *text = root ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  if (!text) return error_set(err, ERR_NOMEM, "%s: out of memory serialising the trace", path);
  int rc = sched_write_text_file(path, text, err);
  cJSON_free(text);
  return rc;
}
