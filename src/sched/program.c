/* The program data model: kind/stream/schedule names, action labels, the
 * builder that turns per-rank lists into a program with dense ids, lookups
 * and the per-rank table printer. Assembly from templates and the text
 * parser live in program_assemble.c, JSON in program_json.c. */
#include "sched/program.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct KindInfo {
  const char *name;
  const char *label; /* label prefix */
  SchedStream stream;
  int is_send, is_recv, is_compute;
  SchedActionKind partner;
} KindInfo;

static const KindInfo kKinds[SCHED_NUM_ACTION_KINDS] = {
    [SCHED_FWD] = {"FWD", "F", SCHED_STREAM_COMPUTE, 0, 0, 1, SCHED_FWD},
    [SCHED_BWD] = {"BWD", "B", SCHED_STREAM_COMPUTE, 0, 0, 1, SCHED_BWD},
    [SCHED_SEND_ACT] = {"SEND_ACT", "SA", SCHED_STREAM_COMPUTE, 1, 0, 0, SCHED_RECV_ACT},
    [SCHED_RECV_ACT] = {"RECV_ACT", "RA", SCHED_STREAM_P2P, 0, 1, 0, SCHED_SEND_ACT},
    [SCHED_SEND_GRAD] = {"SEND_GRAD", "SG", SCHED_STREAM_COMPUTE, 1, 0, 0, SCHED_RECV_GRAD},
    [SCHED_RECV_GRAD] = {"RECV_GRAD", "RG", SCHED_STREAM_P2P, 0, 1, 0, SCHED_SEND_GRAD},
    [SCHED_GRAD_REDUCE] = {"GRAD_REDUCE", "AR", SCHED_STREAM_COLLECTIVE, 0, 0, 0, SCHED_GRAD_REDUCE},
    [SCHED_OPTIM] = {"OPTIM", "OPT", SCHED_STREAM_COMPUTE, 0, 0, 1, SCHED_OPTIM},
    [SCHED_A2A_DISPATCH] = {"A2A_DISPATCH", "AD", SCHED_STREAM_COMPUTE, 0, 0, 0, SCHED_A2A_DISPATCH},
    [SCHED_A2A_COMBINE] = {"A2A_COMBINE", "AC", SCHED_STREAM_COMPUTE, 0, 0, 0, SCHED_A2A_COMBINE},
    [SCHED_CP_RING_STEP] = {"CP_RING_STEP", "CP", SCHED_STREAM_COMPUTE, 0, 0, 0, SCHED_CP_RING_STEP},
    [SCHED_BWD_WEIGHT] = {"BWD_WEIGHT", "W", SCHED_STREAM_COMPUTE, 0, 0, 1, SCHED_BWD_WEIGHT},
};

static const char *const kStreamNames[SCHED_NUM_STREAMS] = {"compute", "p2p", "collective"};
static const char *const kScheduleNames[SCHED_NUM_SCHEDULES] = {"none", "gpipe", "1f1b", "interleaved",
                                                                 "custom", "zb-h1"};

static int kind_ok(SchedActionKind kind) { return (unsigned)kind < SCHED_NUM_ACTION_KINDS; }

const char *sched_action_kind_name(SchedActionKind kind) { return kind_ok(kind) ? kKinds[kind].name : "?"; }

int sched_action_kind_from_name(const char *name, SchedActionKind *kind) {
  for (int k = 0; k < SCHED_NUM_ACTION_KINDS; k++)
    if (!strcmp(name, kKinds[k].name)) {
      *kind = (SchedActionKind)k;
      return 0;
    }
  return -1;
}

const char *sched_stream_name(SchedStream stream) {
  return (unsigned)stream < SCHED_NUM_STREAMS ? kStreamNames[stream] : "?";
}

int sched_stream_from_name(const char *name, SchedStream *stream) {
  for (int s = 0; s < SCHED_NUM_STREAMS; s++)
    if (!strcmp(name, kStreamNames[s])) {
      *stream = (SchedStream)s;
      return 0;
    }
  return -1;
}

const char *sched_schedule_name(SchedScheduleKind schedule) {
  return (unsigned)schedule < SCHED_NUM_SCHEDULES ? kScheduleNames[schedule] : "?";
}

int sched_schedule_from_name(const char *name, SchedScheduleKind *schedule) {
  for (int s = 0; s < SCHED_NUM_SCHEDULES; s++)
    if (!strcmp(name, kScheduleNames[s])) {
      *schedule = (SchedScheduleKind)s;
      return 0;
    }
  return -1;
}

int sched_kind_is_send(SchedActionKind kind) { return kind_ok(kind) && kKinds[kind].is_send; }
int sched_kind_is_recv(SchedActionKind kind) { return kind_ok(kind) && kKinds[kind].is_recv; }
int sched_kind_is_compute(SchedActionKind kind) { return kind_ok(kind) && kKinds[kind].is_compute; }
SchedActionKind sched_kind_partner(SchedActionKind kind) { return kind_ok(kind) ? kKinds[kind].partner : kind; }
SchedStream sched_kind_default_stream(SchedActionKind kind) {
  return kind_ok(kind) ? kKinds[kind].stream : SCHED_STREAM_COMPUTE;
}

SchedAction sched_action_make(SchedActionKind kind) {
  SchedAction a;
  memset(&a, 0, sizeof a);
  a.id = a.rank = a.index = -1;
  a.kind = kind;
  a.stream = sched_kind_default_stream(kind);
  a.microbatch = a.chunk = a.stage = -1;
  a.peer = a.peer_chunk = a.peer_stage = a.match = -1;
  a.bucket = a.layer = a.group = a.phase = -1;
  a.seq_begin = a.seq_count = -1;
  return a;
}

const char *sched_action_label(const SchedProgram *prog, const SchedAction *a, char *buf, size_t size) {
  const char *prefix = kind_ok(a->kind) ? kKinds[a->kind].label : "?";
  int show_chunk = prog && prog->config.vpp > 1 && a->chunk >= 0;
  switch (a->kind) {
    case SCHED_GRAD_REDUCE:
      snprintf(buf, size, "%s%d", prefix, a->bucket);
      break;
    case SCHED_OPTIM:
      snprintf(buf, size, "%s", prefix);
      break;
    default: {
      char chunk[16] = "", peer[16] = "";
      if (show_chunk) snprintf(chunk, sizeof chunk, ".%d", a->chunk);
      if (sched_kind_is_send(a->kind) && a->peer >= 0) snprintf(peer, sizeof peer, ">%d", a->peer);
      if (sched_kind_is_recv(a->kind) && a->peer >= 0) snprintf(peer, sizeof peer, "<%d", a->peer);
      if (a->microbatch >= 0)
        snprintf(buf, size, "%s%d%s%s", prefix, a->microbatch, chunk, peer);
      else
        snprintf(buf, size, "%s%s%s", prefix, chunk, peer);
    }
  }
  return buf;
}

const char *sched_action_describe(const SchedAction *a, char *buf, size_t size) {
  char what[96] = "";
  size_t n = 0;
  if (a->microbatch >= 0) n += (size_t)snprintf(what + n, sizeof what - n, " mb %d", a->microbatch);
  if (n < sizeof what && (sched_kind_is_send(a->kind) || sched_kind_is_recv(a->kind)))
    n += (size_t)snprintf(what + n, sizeof what - n, " stage %d%s%d (peer rank %d)", a->stage,
                          sched_kind_is_send(a->kind) ? "->" : "<-", a->peer_stage, a->peer);
  else if (n < sizeof what && a->stage >= 0)
    n += (size_t)snprintf(what + n, sizeof what - n, " stage %d", a->stage);
  if (n < sizeof what && a->bucket >= 0) n += (size_t)snprintf(what + n, sizeof what - n, " bucket %d", a->bucket);
  if (n < sizeof what && a->group >= 0) n += (size_t)snprintf(what + n, sizeof what - n, " group %d", a->group);
  if (n < sizeof what && a->phase >= 0 && a->phase != a->group)
    n += (size_t)snprintf(what + n, sizeof what - n, " phase %d", a->phase);
  snprintf(buf, size, "rank %d #%d %s%s (id %d)", a->rank, a->index, sched_action_kind_name(a->kind), what, a->id);
  return buf;
}

/* ---- builder ---- */

typedef struct BuildAction {
  SchedAction a;
  SchedActionRef match; /* rank -1 when none */
  int dep_begin, num_deps; /* in the builder's dep list, chained per action */
} BuildAction;

typedef struct DepEdge {
  SchedActionRef dep;
  int next; /* next edge of the same action, -1 ends */
} DepEdge;

typedef struct RankList {
  BuildAction *items;
  int count, cap;
} RankList;

struct SchedBuilder {
  SchedConfig config;
  int num_ranks;
  RankList *ranks;
  DepEdge *edges;
  int num_edges, cap_edges;
};

SchedBuilder *sched_builder_new(const SchedConfig *config, int num_ranks) {
  if (num_ranks < 1) return NULL;
  SchedBuilder *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->config = *config;
  b->num_ranks = num_ranks;
  b->ranks = calloc((size_t)num_ranks, sizeof *b->ranks);
  if (!b->ranks) {
    free(b);
    return NULL;
  }
  return b;
}

void sched_builder_free(SchedBuilder *b) {
  if (!b) return;
  for (int r = 0; r < b->num_ranks; r++) free(b->ranks[r].items);
  free(b->ranks);
  free(b->edges);
  free(b);
}

static int grow(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return 0;
  int cap2 = *cap ? *cap : 16;
  while (cap2 < need) {
    if (cap2 > INT32_MAX / 2) return -1;
    cap2 *= 2;
  }
  void *q = realloc(*p, (size_t)cap2 * elem);
  if (!q) return -1;
  *p = q;
  *cap = cap2;
  return 0;
}

static BuildAction *builder_at(const SchedBuilder *b, SchedActionRef ref) {
  if (ref.rank < 0 || ref.rank >= b->num_ranks) return NULL;
  if (ref.index < 0 || ref.index >= b->ranks[ref.rank].count) return NULL;
  return &b->ranks[ref.rank].items[ref.index];
}

int sched_builder_append(SchedBuilder *b, int rank, const SchedAction *action, SchedActionRef *ref, Error *err) {
  if (rank < 0 || rank >= b->num_ranks)
    return error_set(err, ERR_ARG, "sched builder: rank %d out of range [0, %d)", rank, b->num_ranks);
  if (!kind_ok(action->kind))
    return error_set(err, ERR_ARG, "sched builder: unknown action kind %d", (int)action->kind);
  RankList *list = &b->ranks[rank];
  if (grow((void **)&list->items, &list->cap, list->count + 1, sizeof *list->items))
    return error_set(err, ERR_NOMEM, "sched builder: out of memory appending to rank %d", rank);
  BuildAction *ba = &list->items[list->count];
  ba->a = *action;
  ba->a.rank = rank;
  ba->a.index = list->count;
  ba->a.id = -1;
  ba->a.match = -1;
  ba->a.num_deps = 0;
  ba->a.deps = NULL;
  ba->match.rank = -1;
  ba->match.index = -1;
  ba->dep_begin = -1;
  ba->num_deps = 0;
  if (ref) {
    ref->rank = rank;
    ref->index = list->count;
  }
  list->count++;
  return ERR_OK;
}

int sched_builder_count(const SchedBuilder *b, int rank) {
  return rank >= 0 && rank < b->num_ranks ? b->ranks[rank].count : 0;
}

const SchedAction *sched_builder_get(const SchedBuilder *b, SchedActionRef ref) {
  BuildAction *ba = builder_at(b, ref);
  return ba ? &ba->a : NULL;
}

int sched_builder_add_dep(SchedBuilder *b, SchedActionRef action, SchedActionRef dep, Error *err) {
  BuildAction *ba = builder_at(b, action);
  if (!ba || !builder_at(b, dep))
    return error_set(err, ERR_ARG, "sched builder: dependency between (rank %d, #%d) and (rank %d, #%d) names a missing action",
                     action.rank, action.index, dep.rank, dep.index);
  if (grow((void **)&b->edges, &b->cap_edges, b->num_edges + 1, sizeof *b->edges))
    return error_set(err, ERR_NOMEM, "sched builder: out of memory adding a dependency");
  /* Prepend, then finish() reverses, so deps keep the order they were added. */
  b->edges[b->num_edges].dep = dep;
  b->edges[b->num_edges].next = ba->dep_begin;
  ba->dep_begin = b->num_edges++;
  ba->num_deps++;
  return ERR_OK;
}

int sched_builder_set_match(SchedBuilder *b, SchedActionRef action, SchedActionRef match, Error *err) {
  BuildAction *ba = builder_at(b, action);
  if (!ba || !builder_at(b, match))
    return error_set(err, ERR_ARG, "sched builder: match between (rank %d, #%d) and (rank %d, #%d) names a missing action",
                     action.rank, action.index, match.rank, match.index);
  ba->match = match;
  return ERR_OK;
}

int sched_builder_link(SchedBuilder *b, SchedActionRef send, SchedActionRef recv, Error *err) {
  int rc = sched_builder_set_match(b, send, recv, err);
  if (!rc) rc = sched_builder_set_match(b, recv, send, err);
  if (!rc) rc = sched_builder_add_dep(b, recv, send, err);
  return rc;
}

int sched_builder_finish(SchedBuilder *b, SchedProgram **out, Error *err) {
  *out = NULL;
  SchedProgram *prog = calloc(1, sizeof *prog);
  if (!prog) return error_set(err, ERR_NOMEM, "sched builder: out of memory");
  prog->config = b->config;
  prog->num_ranks = b->num_ranks;
  prog->rank_begin = calloc((size_t)b->num_ranks + 1, sizeof *prog->rank_begin);
  if (!prog->rank_begin) goto nomem;
  long total = 0;
  for (int r = 0; r < b->num_ranks; r++) {
    prog->rank_begin[r] = (int)total;
    total += b->ranks[r].count;
    if (total > INT32_MAX / 2) {
      sched_program_free(prog);
      return error_set(err, ERR_ARG, "sched builder: program too large (%ld actions)", total);
    }
  }
  prog->rank_begin[b->num_ranks] = (int)total;
  prog->num_actions = (int)total;
  prog->num_dep_pool = b->num_edges;
  prog->actions = calloc(total ? (size_t)total : 1, sizeof *prog->actions);
  prog->dep_pool = calloc(b->num_edges ? (size_t)b->num_edges : 1, sizeof *prog->dep_pool);
  if (!prog->actions || !prog->dep_pool) goto nomem;
  int pool = 0;
  for (int r = 0; r < b->num_ranks; r++) {
    for (int i = 0; i < b->ranks[r].count; i++) {
      BuildAction *ba = &b->ranks[r].items[i];
      SchedAction *a = &prog->actions[prog->rank_begin[r] + i];
      *a = ba->a;
      a->id = prog->rank_begin[r] + i;
      a->match = ba->match.rank >= 0 ? prog->rank_begin[ba->match.rank] + ba->match.index : -1;
      a->num_deps = ba->num_deps;
      a->deps = ba->num_deps ? prog->dep_pool + pool : NULL;
      int k = ba->num_deps;
      for (int e = ba->dep_begin; e >= 0; e = b->edges[e].next) {
        SchedActionRef d = b->edges[e].dep;
        prog->dep_pool[pool + --k] = prog->rank_begin[d.rank] + d.index;
      }
      pool += ba->num_deps;
    }
  }
  for (int r = 0; r < b->num_ranks; r++) {
    free(b->ranks[r].items);
    b->ranks[r].items = NULL;
    b->ranks[r].count = b->ranks[r].cap = 0;
  }
  free(b->edges);
  b->edges = NULL;
  b->num_edges = b->cap_edges = 0;
  *out = prog;
  return ERR_OK;
nomem:
  sched_program_free(prog);
  return error_set(err, ERR_NOMEM, "sched builder: out of memory finishing the program");
}

static int same_action(const SchedAction *x, const SchedAction *y) {
  if (x->rank != y->rank || x->index != y->index || x->kind != y->kind || x->stream != y->stream ||
      x->microbatch != y->microbatch || x->chunk != y->chunk || x->stage != y->stage || x->peer != y->peer ||
      x->peer_chunk != y->peer_chunk || x->peer_stage != y->peer_stage || x->match != y->match ||
      x->bucket != y->bucket || x->layer != y->layer || x->group != y->group || x->seq_begin != y->seq_begin ||
      x->seq_count != y->seq_count || x->phase != y->phase || x->num_deps != y->num_deps)
    return 0;
  for (int d = 0; d < x->num_deps; d++)
    if (x->deps[d] != y->deps[d]) return 0;
  return 1;
}

int sched_program_first_difference(const SchedProgram *a, const SchedProgram *b) {
  int n = a->num_actions < b->num_actions ? a->num_actions : b->num_actions;
  for (int i = 0; i < n; i++)
    if (!same_action(&a->actions[i], &b->actions[i])) return i;
  if (a->num_actions != b->num_actions || a->num_ranks != b->num_ranks) return n;
  return -1;
}

void sched_program_free(SchedProgram *prog) {
  if (!prog) return;
  free(prog->actions);
  free(prog->rank_begin);
  free(prog->dep_pool);
  free(prog);
}

/* ---- reading ---- */

const SchedAction *sched_program_action(const SchedProgram *prog, int id) {
  return id >= 0 && id < prog->num_actions ? &prog->actions[id] : NULL;
}

const SchedAction *sched_program_rank_actions(const SchedProgram *prog, int rank, int *count) {
  if (rank < 0 || rank >= prog->num_ranks) {
    *count = 0;
    return NULL;
  }
  *count = prog->rank_begin[rank + 1] - prog->rank_begin[rank];
  return prog->actions + prog->rank_begin[rank];
}

int sched_program_find(const SchedProgram *prog, int rank, SchedActionKind kind, int microbatch, int chunk) {
  int n;
  const SchedAction *list = sched_program_rank_actions(prog, rank, &n);
  for (int i = 0; i < n; i++)
    if (list[i].kind == kind && list[i].microbatch == microbatch && list[i].chunk == chunk) return list[i].id;
  return -1;
}

void sched_program_print_table(const SchedProgram *prog, FILE *f) {
  int rows = 0;
  for (int r = 0; r < prog->num_ranks; r++) {
    int n = prog->rank_begin[r + 1] - prog->rank_begin[r];
    if (n > rows) rows = n;
  }
  fprintf(f, "%5s", "#");
  for (int r = 0; r < prog->num_ranks; r++) fprintf(f, " | rank %-5d", r);
  fprintf(f, "\n-----");
  for (int r = 0; r < prog->num_ranks; r++) fprintf(f, "-+-----------");
  fputc('\n', f);
  for (int i = 0; i < rows; i++) {
    fprintf(f, "%5d", i);
    for (int r = 0; r < prog->num_ranks; r++) {
      int n = prog->rank_begin[r + 1] - prog->rank_begin[r];
      char label[32] = "";
      if (i < n) sched_action_label(prog, &prog->actions[prog->rank_begin[r] + i], label, sizeof label);
      fprintf(f, " | %-10s", label);
    }
    fputc('\n', f);
  }
}
