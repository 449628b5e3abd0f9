/* bpftrace output -> per-rank events (format in ebpf.h): parse the lines,
 * sort each thread's lines by time, pair begins with ends, attach GEMM
 * shapes, map threads to ranks, and add on-CPU time from sched_switch. */
#include <stdlib.h>
#include <string.h>

#include "trace/ebpf.h"

typedef enum LineKind { L_RANK, L_ITER, L_AB, L_AE, L_OB, L_OS, L_OE } LineKind;

typedef struct Line {
  LineKind kind;
  int tid;
  int64_t ns;
  int64_t a[6];
} Line;

typedef struct Switch {
  int64_t ns;
  int tid;
  int in; /* 1: switched in, 0: out */
} Switch;

typedef struct Vec {
  void *data;
  size_t n, cap, size;
} Vec;

static void *vec_push(Vec *v) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? 2 * v->cap : 256;
    void *p = realloc(v->data, cap * v->size);
    if (!p) return NULL;
    v->data = p;
    v->cap = cap;
  }
  return (char *)v->data + v->size * v->n++;
}

static int cmp_line(const void *pa, const void *pb) {
  const Line *a = pa, *b = pb;
  if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
  if (a->ns != b->ns) return a->ns < b->ns ? -1 : 1;
  return 0;
}

static int cmp_switch(const void *pa, const void *pb) {
  const Switch *a = pa, *b = pb;
  if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
  if (a->ns != b->ns) return a->ns < b->ns ? -1 : 1;
  return 0;
}

static int cmp_event(const void *pa, const void *pb) {
  const TraceEvent *a = pa, *b = pb;
  return a->begin < b->begin ? -1 : a->begin > b->begin;
}

/* Parses one line; returns 1 for a probe line, 2 for a switch, 0 for
 * anything else, -1 for a malformed probe line. */
static int parse_line(const char *s, Line *l, Switch *sw) {
  char tag[4];
  int used = 0;
  if (sscanf(s, "%3s%n", tag, &used) != 1) return 0;
  const char *rest = s + used;
  long long v[8];
  int n;
  memset(l, 0, sizeof *l);
  if (!strcmp(tag, "S")) {
    long long ns, cpu, prev, next;
    if (sscanf(rest, "%lld %lld %lld %lld", &ns, &cpu, &prev, &next) != 4) return -1;
    sw[0] = (Switch){ns, (int)prev, 0};
    sw[1] = (Switch){ns, (int)next, 1};
    return 2;
  }
  static const struct {
    const char *tag;
    LineKind kind;
    int args; /* after tid and ns */
  } KINDS[] = {{"AB", L_AB, 4}, {"AE", L_AE, 6}, {"OB", L_OB, 3}, {"OS", L_OS, 3}, {"OE", L_OE, 6}};
  if (!strcmp(tag, "R")) {
    n = sscanf(rest, "%lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]);
    if (n != 6) return -1;
    *l = (Line){L_RANK, (int)v[0], v[5], {v[1], v[2], v[3], v[4], 0, 0}};
    return 1;
  }
  if (!strcmp(tag, "I")) {
    n = sscanf(rest, "%lld %lld %lld", &v[0], &v[1], &v[2]);
    if (n != 3) return -1;
    *l = (Line){L_ITER, (int)v[0], v[2], {v[1], 0, 0, 0, 0, 0}};
    return 1;
  }
  for (size_t k = 0; k < sizeof KINDS / sizeof *KINDS; k++) {
    if (strcmp(tag, KINDS[k].tag)) continue;
    n = sscanf(rest, "%lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    if (n != 2 + KINDS[k].args) return -1;
    l->kind = KINDS[k].kind;
    l->tid = (int)v[0];
    l->ns = v[1];
    for (int i = 0; i < KINDS[k].args; i++) l->a[i] = v[2 + i];
    return 1;
  }
  return 0;
}

typedef struct ThreadRank {
  int tid, world, pipeline;
} ThreadRank;

static int rank_of(const ThreadRank *tr, size_t n, int tid) {
  for (size_t i = 0; i < n; i++)
    if (tr[i].tid == tid) return (int)i;
  return -1;
}

/* Time in [b, e) that a thread spent off a CPU, from its switches sorted
 * by time. It fired a probe at b, so it was running then: only the
 * switch-outs inside [b, e) count, each until the next switch-in. */
static int64_t off_cpu(const Switch *sw, size_t n, int64_t b, int64_t e) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (sw[mid].ns < b) lo = mid + 1;
    else hi = mid;
  }
  int64_t off = 0;
  for (size_t i = lo; i < n && sw[i].ns < e; i++) {
    if (sw[i].in) continue;
    int64_t back = e;
    for (size_t j = i + 1; j < n; j++)
      if (sw[j].in) {
        back = sw[j].ns < e ? sw[j].ns : e;
        break;
      }
    off += back - sw[i].ns;
  }
  return off;
}

typedef struct Open {
  int64_t ns;
  int64_t a[4];
} Open;

/* Pairs one thread's sorted lines into events appended to ev. */
static int pair_thread(const Line *l, size_t n, const TraceEbpfOptions *opt, Vec *ev, long *unmatched) {
  Vec actions = {.size = sizeof(Open)}, ops = {.size = sizeof(Open)};
  int iteration = -1;
  int64_t shape[3] = {-1, -1, -1};
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    const Line *x = &l[i];
    if (x->kind == L_ITER) {
      iteration = (int)x->a[0];
    } else if (x->kind == L_AB || x->kind == L_OB) {
      /* An operation's a[3] notes whether an action was open when it began:
       * the probes fire in every run, also in an evaluation pass between
       * steps, and (as in the built-in recorder) only operations inside an
       * action belong to the trace. */
      int64_t inside = (int64_t)(actions.n > 0);
      Open *o = vec_push(x->kind == L_AB ? &actions : &ops);
      if (!o) rc = -1;
      else *o = (Open){x->ns, {x->a[0], x->a[1], x->a[2], x->kind == L_AB ? x->a[3] : inside}};
    } else if (x->kind == L_OS) {
      memcpy(shape, x->a, sizeof shape);
    } else if (x->kind == L_AE || x->kind == L_OE) {
      Vec *open = x->kind == L_AE ? &actions : &ops;
      Open *o = open->data;
      size_t k = open->n;
      /* Actions match on (id, iteration); operations nest, so the newest
       * open one of the same kind. */
      while (k > 0 && !(o[k - 1].a[0] == x->a[0] && (x->kind == L_OE || o[k - 1].a[1] == x->a[1]))) k--;
      if (k == 0) {
        (*unmatched)++;
        continue;
      }
      Open b = o[k - 1];
      memmove(&o[k - 1], &o[k], (open->n - k) * sizeof *o);
      open->n--;
      if (x->kind == L_OE && !b.a[3]) {
        shape[0] = shape[1] = shape[2] = -1;
        continue;
      }
      TraceEvent e;
      memset(&e, 0, sizeof e);
      e.begin = (uint64_t)b.ns;
      e.end = (uint64_t)x->ns;
      e.oncpu_ns = -1;
      e.peer = e.group = e.group_id = e.m = e.n = e.k = e.layer = e.microbatch = -1;
      e.bytes = -1;
      if (x->kind == L_AE) {
        e.type = TRACE_EVENT_ACTION;
        e.id = (int32_t)b.a[0];
        e.iteration = (int32_t)b.a[1];
        e.microbatch = (int32_t)b.a[2];
        e.layer = (int32_t)b.a[3];
        e.bytes = x->a[2];
        e.peer = (int32_t)x->a[3];
        e.group = (int32_t)x->a[4];
        e.group_id = (int32_t)x->a[5];
      } else {
        e.type = TRACE_EVENT_OP;
        e.id = (int32_t)b.a[0];
        e.layer = (int32_t)b.a[1];
        e.microbatch = (int32_t)b.a[2];
        e.iteration = iteration;
        e.bytes = x->a[3];
        e.peer = (int32_t)x->a[4];
        e.group = (int32_t)x->a[5];
        e.m = (int32_t)shape[0];
        e.n = (int32_t)shape[1];
        e.k = (int32_t)shape[2];
        shape[0] = shape[1] = shape[2] = -1;
      }
      if (e.iteration < opt->first_step || (opt->last_step >= 0 && e.iteration > opt->last_step)) continue;
      TraceEvent *slot = vec_push(ev);
      if (!slot) rc = -1;
      else *slot = e;
    }
  }
  *unmatched += (long)(actions.n + ops.n);
  free(actions.data);
  free(ops.data);
  return rc;
}

void trace_ebpf_capture_free(TraceEbpfCapture *cap) {
  if (!cap) return;
  free(cap->ranks);
  free(cap->pool);
  memset(cap, 0, sizeof *cap);
}

int trace_ebpf_convert(FILE *raw, const char *origin, const TraceEbpfOptions *opt, TraceEbpfCapture *out,
                       Error *err) {
  memset(out, 0, sizeof *out);
  TraceEbpfOptions all = {0, -1};
  if (!opt) opt = &all;
  Vec lines = {.size = sizeof(Line)}, sw = {.size = sizeof(Switch)}, threads = {.size = sizeof(ThreadRank)};
  Vec events = {.size = sizeof(TraceEvent)};
  char buf[512];
  long lineno = 0;
  int rc = ERR_OK;
  while (rc == ERR_OK && fgets(buf, sizeof buf, raw)) {
    lineno++;
    Line l;
    Switch s[2];
    int kind = parse_line(buf, &l, s);
    if (kind < 0) {
      rc = error_set(err, ERR_FORMAT, "%s:%ld: malformed bpftrace line '%.60s' (see ebpf.h for the format)", origin,
                     lineno, buf);
    } else if (kind == 2) {
      Switch *a = vec_push(&sw), *b = a ? vec_push(&sw) : NULL;
      if (!b) rc = error_set(err, ERR_NOMEM, "%s: out of memory", origin);
      else {
        a = (Switch *)sw.data + sw.n - 2;
        a[0] = s[0];
        a[1] = s[1];
      }
      out->sched_switches++;
    } else if (kind == 1) {
      Line *p = vec_push(&lines);
      if (!p) rc = error_set(err, ERR_NOMEM, "%s: out of memory", origin);
      else *p = l;
      out->lines++;
      if (l.kind == L_RANK && rank_of(threads.data, threads.n, l.tid) < 0) {
        ThreadRank *t = vec_push(&threads);
        if (!t) rc = error_set(err, ERR_NOMEM, "%s: out of memory", origin);
        else *t = (ThreadRank){l.tid, (int)l.a[1], (int)l.a[2]};
        if (t && (t->world < 0 || t->pipeline < 0 || t->world > 1 << 20))
          rc = error_set(err, ERR_FORMAT, "%s:%ld: rank probe with world rank %d, pipeline rank %d", origin, lineno,
                         t->world, t->pipeline);
      }
    }
  }
  if (rc == ERR_OK && ferror(raw)) rc = error_set(err, ERR_IO, "%s: read error", origin);
  if (rc == ERR_OK && threads.n == 0)
    rc = error_set(err, ERR_FORMAT,
                   "%s: no fivefold:rank probe fired: the traced program never called trace_bind, or bpftrace did not "
                   "attach to the binary that ran (pass --binary with the program's path)",
                   origin);
  int num_ranks = 0;
  const ThreadRank *tr = threads.data;
  for (size_t i = 0; rc == ERR_OK && i < threads.n; i++)
    if (tr[i].world + 1 > num_ranks) num_ranks = tr[i].world + 1;
  if (rc == ERR_OK) {
    qsort(lines.data, lines.n, sizeof(Line), cmp_line);
    if (sw.n) qsort(sw.data, sw.n, sizeof(Switch), cmp_switch);
  }
  /* Per thread: pair, then on-CPU time, then file under its rank. */
  Vec *per_rank = rc == ERR_OK ? calloc((size_t)num_ranks, sizeof *per_rank) : NULL;
  if (rc == ERR_OK && !per_rank) rc = error_set(err, ERR_NOMEM, "%s: out of memory", origin);
  const Line *L = lines.data;
  const Switch *S = sw.data;
  for (size_t i = 0; rc == ERR_OK && i < lines.n;) {
    size_t j = i;
    while (j < lines.n && L[j].tid == L[i].tid) j++;
    int t = rank_of(tr, threads.n, L[i].tid);
    events.n = 0;
    if (pair_thread(&L[i], j - i, opt, &events, &out->unmatched)) rc = error_set(err, ERR_NOMEM, "%s: out of memory", origin);
    if (t < 0) {
      out->unranked += (long)events.n;
    } else if (rc == ERR_OK) {
      size_t s0 = 0, s1;
      while (s0 < sw.n && S[s0].tid < L[i].tid) s0++;
      for (s1 = s0; s1 < sw.n && S[s1].tid == L[i].tid;) s1++;
      Vec *dst = &per_rank[tr[t].world];
      dst->size = sizeof(TraceEvent);
      for (size_t k = 0; rc == ERR_OK && k < events.n; k++) {
        TraceEvent *e = &((TraceEvent *)events.data)[k];
        if (sw.n) e->oncpu_ns = (int64_t)(e->end - e->begin) - off_cpu(&S[s0], s1 - s0, (int64_t)e->begin, (int64_t)e->end);
        TraceEvent *d = vec_push(dst);
        if (!d) rc = error_set(err, ERR_NOMEM, "%s: out of memory", origin);
        else *d = *e;
      }
    }
    i = j;
  }
  out->have_sched = sw.n > 0;
  size_t total = 0;
  for (int r = 0; per_rank && r < num_ranks; r++) total += per_rank[r].n;
  if (rc == ERR_OK) {
    out->ranks = calloc((size_t)num_ranks, sizeof *out->ranks);
    out->pool = malloc((total ? total : 1) * sizeof *out->pool);
    if (!out->ranks || !out->pool) rc = error_set(err, ERR_NOMEM, "%s: out of memory", origin);
  }
  if (rc == ERR_OK) {
    out->num_ranks = num_ranks;
    size_t at = 0;
    for (int r = 0; r < num_ranks; r++) {
      int pipeline = r;
      for (size_t i = 0; i < threads.n; i++)
        if (tr[i].world == r) pipeline = tr[i].pipeline;
      out->ranks[r].info = trace_rank_info_make(r, pipeline);
      out->ranks[r].events = out->pool + at;
      out->ranks[r].count = per_rank[r].n;
      if (per_rank[r].n) memcpy(out->pool + at, per_rank[r].data, per_rank[r].n * sizeof(TraceEvent));
      qsort(out->pool + at, per_rank[r].n, sizeof(TraceEvent), cmp_event);
      at += per_rank[r].n;
    }
  }
  for (int r = 0; per_rank && r < num_ranks; r++) free(per_rank[r].data);
  free(per_rank);
  free(lines.data);
  free(sw.data);
  free(threads.data);
  free(events.data);
  if (rc != ERR_OK) trace_ebpf_capture_free(out);
  return rc;
}
