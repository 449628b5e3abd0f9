/* Event index, message peers and collective grouping (match.h). */
#include "trace/match.h"

#include <stdlib.h>
#include <string.h>

int trace_index_build(const TraceRankBuffer *ranks, int num_ranks, const SchedProgram *prog, TraceIndex *ix,
                      Error *err) {
  memset(ix, 0, sizeof *ix);
  ix->ranks = ranks;
  ix->num_ranks = num_ranks;
  ix->program = prog;
  int first = 0, last = -1, any = 0;
  for (int r = 0; r < num_ranks; r++)
    for (size_t i = 0; i < ranks[r].count; i++) {
      const TraceEvent *e = &ranks[r].events[i];
      if (e->type != TRACE_EVENT_ACTION || e->iteration < 0) continue;
      if (!any || e->iteration < first) first = e->iteration;
      if (!any || e->iteration > last) last = e->iteration;
      any = 1;
    }
  ix->first_iteration = first;
  ix->num_iterations = any ? last - first + 1 : 0;
  size_t n = (size_t)num_ranks * (size_t)ix->num_iterations * (size_t)prog->num_actions;
  ix->slot = malloc((n ? n : 1) * sizeof *ix->slot);
  if (!ix->slot) return error_set(err, ERR_NOMEM, "trace index: out of memory for %zu slots", n);
  for (size_t i = 0; i < n; i++) ix->slot[i] = -1;
  for (int r = 0; r < num_ranks; r++) {
    int pipe = ranks[r].info.pipeline_rank;
    for (size_t i = 0; i < ranks[r].count; i++) {
      const TraceEvent *e = &ranks[r].events[i];
      if (e->type != TRACE_EVENT_ACTION || e->iteration < 0) continue;
      const SchedAction *a = sched_program_action(prog, e->id);
      if (!a || a->rank != pipe) {
        ix->num_unknown++;
        continue;
      }
      int *s = &ix->slot[((size_t)r * ix->num_iterations + (size_t)(e->iteration - first)) * prog->num_actions + e->id];
      if (*s >= 0)
        ix->num_duplicates++;
      else
        *s = (int)i;
    }
  }
  return ERR_OK;
}

void trace_index_free(TraceIndex *ix) {
  if (!ix) return;
  free(ix->slot);
  memset(ix, 0, sizeof *ix);
}

int trace_index_event(const TraceIndex *ix, int rank, int iteration, int action) {
  if (rank < 0 || rank >= ix->num_ranks || action < 0 || action >= ix->program->num_actions) return -1;
  int it = iteration - ix->first_iteration;
  if (it < 0 || it >= ix->num_iterations) return -1;
  return ix->slot[((size_t)rank * ix->num_iterations + (size_t)it) * ix->program->num_actions + action];
}

int trace_peer_world_rank(const TraceRankBuffer *ranks, int num_ranks, int rank, int peer_pipeline, int recorded) {
  if (recorded >= 0) return recorded < num_ranks ? recorded : -1;
  if (rank < 0 || rank >= num_ranks) return -1;
  const TraceRankInfo *me = &ranks[rank].info;
  int found = -1;
  for (int r = 0; r < num_ranks; r++) {
    const TraceRankInfo *o = &ranks[r].info;
    if (o->pipeline_rank != peer_pipeline) continue;
    if (o->tp != me->tp || o->cp != me->cp || o->dp != me->dp) continue;
    if (found >= 0) return -1; /* ambiguous: the coordinates do not tell */
    found = r;
  }
  return found;
}

typedef struct CollKey {
  int group, group_id, call;
  TraceParticipant part;
} CollKey;

static int cmp_key(const void *pa, const void *pb) {
  const CollKey *a = pa, *b = pb;
  if (a->group != b->group) return a->group < b->group ? -1 : 1;
  if (a->group_id != b->group_id) return a->group_id < b->group_id ? -1 : 1;
  if (a->call != b->call) return a->call < b->call ? -1 : 1;
  return a->part.rank < b->part.rank ? -1 : a->part.rank > b->part.rank;
}

/* Appends rank r's collective actions of the iteration to keys, each with
 * its position among the rank's calls on the same group. */
static int collect_rank(const TraceIndex *ix, int iteration, int r, CollKey **keys, size_t *n, size_t *cap) {
  int count;
  const SchedAction *list = sched_program_rank_actions(ix->program, ix->ranks[r].info.pipeline_rank, &count);
  if (!list) return 0;
  size_t first = *n;
  for (int i = 0; i < count; i++) {
    const SchedAction *a = &list[i];
    if (sched_kind_is_send(a->kind) || sched_kind_is_recv(a->kind)) continue;
    int ev = trace_index_event(ix, r, iteration, a->id);
    if (ev < 0) continue;
    const TraceEvent *e = &ix->ranks[r].events[ev];
    if (e->group < 0) continue;
    int call = 0;
    for (size_t j = first; j < *n; j++)
      if ((*keys)[j].group == e->group && (*keys)[j].group_id == e->group_id) call++;
    if (*n == *cap) {
      size_t grown = *cap ? 2 * *cap : 64;
      CollKey *p = realloc(*keys, grown * sizeof *p);
      if (!p) return -1;
      *keys = p;
      *cap = grown;
    }
    (*keys)[(*n)++] = (CollKey){e->group, e->group_id, call, {r, a->id, ev}};
  }
  return 0;
}

int trace_collectives_find(const TraceIndex *ix, int iteration, TraceCollectives *out, Error *err) {
  memset(out, 0, sizeof *out);
  size_t cap = 0, n = 0;
  CollKey *keys = NULL;
  for (int r = 0; r < ix->num_ranks; r++)
    if (collect_rank(ix, iteration, r, &keys, &n, &cap) != 0) {
      free(keys);
      return error_set(err, ERR_NOMEM, "trace: out of memory grouping collectives");
    }
  if (n) qsort(keys, n, sizeof *keys, cmp_key);
  out->parts = malloc((n ? n : 1) * sizeof *out->parts);
  out->begin = malloc((n + 1) * sizeof *out->begin);
  if (!out->parts || !out->begin) {
    free(keys);
    trace_collectives_free(out);
    return error_set(err, ERR_NOMEM, "trace: out of memory grouping collectives");
  }
  for (size_t i = 0; i < n; i++) {
    int same = i > 0 && keys[i - 1].group == keys[i].group && keys[i - 1].group_id == keys[i].group_id &&
               keys[i - 1].call == keys[i].call;
    if (!same) out->begin[out->count++] = (int)i;
    out->parts[i] = keys[i].part;
  }
  out->begin[out->count] = (int)n;
  free(keys);
  return ERR_OK;
}

void trace_collectives_free(TraceCollectives *c) {
  if (!c) return;
  free(c->begin);
  free(c->parts);
  memset(c, 0, sizeof *c);
}
