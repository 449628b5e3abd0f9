/* The analysis report (stats.h): per-iteration DAG, critical path, bubble,
 * exposed communication and straggler; per-kind timing statistics; the
 * text rendering `fivefold trace analyze` prints. */
#include "trace/stats.h"

#include <stdlib.h>
#include <string.h>

static void stats_add_oncpu(TraceTimeStats *s, const TraceEvent *e) {
  if (e->oncpu_ns < 0) return;
  s->oncpu_count++;
  s->oncpu_total += (double)e->oncpu_ns;
}

static void stats_add(TraceTimeStats *s, double v) {
  if (s->count == 0 || v < s->best) s->best = v;
  if (s->count == 0 || v > s->worst) s->worst = v;
  s->total += v;
  s->count++;
  s->mean = s->total / s->count;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

int64_t trace_typical_duration(const TraceRun *run, int rank, SchedActionKind kind, int chunk) {
  if (!run->program || rank < 0 || rank >= run->num_ranks) return -1;
  const TraceRankBuffer *b = &run->ranks[rank];
  int64_t *d = malloc((b->count ? b->count : 1) * sizeof *d);
  if (!d) return -1;
  size_t n = 0;
  for (size_t i = 0; i < b->count; i++) {
    const TraceEvent *e = &b->events[i];
    if (e->type != TRACE_EVENT_ACTION) continue;
    const SchedAction *a = sched_program_action(run->program, e->id);
    if (a && a->kind == kind && a->chunk == chunk) d[n++] = (int64_t)(e->end - e->begin);
  }
  int64_t median = -1;
  if (n) {
    qsort(d, n, sizeof *d, cmp_i64);
    median = n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
  }
  free(d);
  return median;
}

/* Typical durations, computed once per (rank, kind, chunk) on demand. */
typedef struct Typical {
  const TraceRun *run;
  int max_chunk;
  int64_t *value; /* -2: not computed */
} Typical;

static int64_t typical_get(Typical *t, int rank, SchedActionKind kind, int chunk) {
  if (chunk < -1 || chunk > t->max_chunk) return trace_typical_duration(t->run, rank, kind, chunk);
  size_t i = ((size_t)rank * SCHED_NUM_ACTION_KINDS + kind) * (size_t)(t->max_chunk + 2) + (size_t)(chunk + 1);
  if (t->value[i] == -2) t->value[i] = trace_typical_duration(t->run, rank, kind, chunk);
  return t->value[i];
}

static int cmp_interval(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Busy time and exposed communication of one rank in one iteration. */
static int rank_busy_exposed(const TraceDag *dag, int rank, int64_t *busy, int64_t *exposed) {
  const SchedProgram *prog = dag->program;
  int n = 0;
  for (int i = 0; i < dag->num_nodes; i++) n += dag->nodes[i].rank == rank;
  int64_t(*iv)[2] = malloc((size_t)(n ? n : 1) * sizeof *iv);
  if (!iv) return -1;
  int m = 0;
  for (int i = 0; i < dag->num_nodes; i++) {
    const TraceNode *nd = &dag->nodes[i];
    if (nd->rank != rank || !sched_kind_is_compute(prog->actions[nd->action].kind)) continue;
    *busy += nd->end - nd->begin;
    iv[m][0] = nd->begin;
    iv[m][1] = nd->end;
    m++;
  }
  qsort(iv, (size_t)m, sizeof *iv, cmp_interval);
  int merged = 0;
  for (int i = 0; i < m; i++) {
    if (merged && iv[i][0] <= iv[merged - 1][1]) {
      if (iv[i][1] > iv[merged - 1][1]) iv[merged - 1][1] = iv[i][1];
    } else {
      iv[merged][0] = iv[i][0];
      iv[merged][1] = iv[i][1];
      merged++;
    }
  }
  for (int i = 0; i < dag->num_nodes; i++) {
    const TraceNode *nd = &dag->nodes[i];
    SchedActionKind kind = prog->actions[nd->action].kind;
    if (nd->rank != rank || sched_kind_is_compute(kind)) continue;
    /* A posted receive counts only from when the rank began to wait. */
    int64_t from = nd->wait_begin > nd->begin ? nd->wait_begin : nd->begin;
    int64_t covered = 0;
    for (int k = 0; k < merged; k++) {
      int64_t lo = iv[k][0] > from ? iv[k][0] : from, hi = iv[k][1] < nd->end ? iv[k][1] : nd->end;
      if (hi > lo) covered += hi - lo;
    }
    exposed[kind] += nd->end - from - covered;
  }
  free(iv);
  return 0;
}

static int analyze_iteration(const TraceRun *run, Typical *typ, TraceIterationReport *it, Error *err) {
  int rc = trace_dag_build(run, it->iteration, &it->dag, err);
  if (rc) return rc;
  rc = trace_critical_path(&it->dag, &it->path, err);
  if (rc) return rc;
  const TraceDag *dag = &it->dag;
  it->time = dag->end - dag->begin;
  int64_t busy = 0;
  for (int r = 0; r < run->num_ranks; r++)
    if (rank_busy_exposed(dag, r, &busy, it->exposed)) return error_set(err, ERR_NOMEM, "trace stats: out of memory");
  it->bubble_fraction = it->time > 0 ? 1.0 - (double)busy / ((double)run->num_ranks * (double)it->time) : 0;
  it->rank_excess = calloc((size_t)run->num_ranks, sizeof *it->rank_excess);
  if (!it->rank_excess) return error_set(err, ERR_NOMEM, "trace stats: out of memory");
  int64_t *node_excess = calloc((size_t)dag->num_nodes + 1, sizeof *node_excess);
  int64_t *node_typical = calloc((size_t)dag->num_nodes + 1, sizeof *node_typical);
  if (!node_excess || !node_typical) {
    free(node_excess);
    free(node_typical);
    return error_set(err, ERR_NOMEM, "trace stats: out of memory");
  }
  for (int i = 0; i < it->path.num_segments; i++) {
    const TraceSegment *s = &it->path.segments[i];
    int64_t len = s->end - s->begin;
    if (s->kind == TRACE_SEGMENT_ACTION) {
      const SchedAction *a = &dag->program->actions[dag->nodes[s->node].action];
      int64_t t = typical_get(typ, s->rank, a->kind, a->chunk);
      node_typical[s->node] = t;
      if (t >= 0 && len > t) {
        node_excess[s->node] += len - t;
        it->rank_excess[s->rank] += len - t;
      }
    } else if (s->kind == TRACE_SEGMENT_START) {
      it->rank_excess[s->rank] += len; /* started late */
    } else {
      const TraceEdge *e = &dag->edges[s->edge];
      int same_rank = dag->nodes[e->from].rank == dag->nodes[e->to].rank;
      if (same_rank && e->kind != TRACE_EDGE_COLLECTIVE && e->kind != TRACE_EDGE_MESSAGE) it->rank_excess[s->rank] += len;
    }
  }
  it->straggler = -1;
  it->straggler_node = -1;
  for (int r = 0; r < run->num_ranks; r++)
    if (it->rank_excess[r] > 0 && (it->straggler < 0 || it->rank_excess[r] > it->straggler_excess)) {
      it->straggler = r;
      it->straggler_excess = it->rank_excess[r];
    }
  for (int i = 0; i < dag->num_nodes && it->straggler >= 0; i++)
    if (dag->nodes[i].rank == it->straggler && node_excess[i] > 0 &&
        (it->straggler_node < 0 || node_excess[i] > node_excess[it->straggler_node])) {
      it->straggler_node = i;
      it->straggler_node_typical = node_typical[i];
    }
  free(node_excess);
  free(node_typical);
  return ERR_OK;
}

void trace_report_free(TraceReport *report) {
  if (!report) return;
  for (int i = 0; i < report->num_iterations; i++) {
    trace_dag_free(&report->iters[i].dag);
    trace_critical_path_free(&report->iters[i].path);
    free(report->iters[i].rank_excess);
  }
  free(report->iters);
  memset(report, 0, sizeof *report);
}

const TraceIterationReport *trace_report_iteration(const TraceReport *report, int iteration) {
  for (int i = 0; i < report->num_iterations; i++)
    if (report->iters[i].iteration == iteration) return &report->iters[i];
  return NULL;
}

int trace_analyze(const TraceRun *run, int iteration, TraceReport *out, Error *err) {
  int first = iteration, last = iteration;
  if (iteration < 0) trace_run_iteration_range(run, &first, &last); /* none recorded: the range call says so */
  return trace_analyze_range(run, first, last, out, err);
}

int trace_analyze_range(const TraceRun *run, int first, int last, TraceReport *out, Error *err) {
  memset(out, 0, sizeof *out);
  out->run = run;
  if (!run->program)
    return error_set(err, ERR_FORMAT,
                     "the trace has no schedule program (otherData.program), so its DAG cannot be rebuilt; the "
                     "executor writes it, and eBPF recordings need --program FILE");
  int lo = 0, hi = -1;
  if (trace_run_iteration_range(run, &lo, &hi) != 0)
    return error_set(err, ERR_FORMAT, "the trace has no recorded actions (was the step window empty?)");
  if (first < lo || last > hi || first > last) {
    if (first == last)
      return error_set(err, ERR_ARG, "iteration %d is not in the trace (it holds iterations %d..%d)", first, lo, hi);
    return error_set(err, ERR_ARG, "iterations %d..%d are not in the trace (it holds iterations %d..%d)", first, last,
                     lo, hi);
  }
  int max_chunk = 0;
  for (int i = 0; i < run->program->num_actions; i++)
    if (run->program->actions[i].chunk > max_chunk) max_chunk = run->program->actions[i].chunk;
  size_t ntyp = (size_t)run->num_ranks * SCHED_NUM_ACTION_KINDS * (size_t)(max_chunk + 2);
  Typical typ = {run, max_chunk, malloc(ntyp * sizeof(int64_t))};
  out->iters = calloc((size_t)(last - first + 1), sizeof *out->iters);
  if (!typ.value || !out->iters) {
    free(typ.value);
    free(out->iters);
    out->iters = NULL;
    return error_set(err, ERR_NOMEM, "trace stats: out of memory");
  }
  for (size_t i = 0; i < ntyp; i++) typ.value[i] = -2;
  int rc = ERR_OK;
  for (int itn = first; itn <= last && rc == ERR_OK; itn++) {
    TraceIterationReport *it = &out->iters[out->num_iterations];
    it->iteration = itn;
    int has_any = 0;
    for (int r = 0; r < run->num_ranks && !has_any; r++)
      for (size_t k = 0; k < run->ranks[r].count && !has_any; k++)
        has_any = run->ranks[r].events[k].type == TRACE_EVENT_ACTION && run->ranks[r].events[k].iteration == itn;
    if (!has_any) continue;
    out->num_iterations++;
    rc = analyze_iteration(run, &typ, it, err);
    if (rc) {
      error_wrap(err, "iteration %d", itn);
      break;
    }
    stats_add(&out->iteration_time, (double)it->time);
    out->missing_actions += it->dag.num_missing_actions;
    out->missing_edges += it->dag.num_missing_edges;
    for (int n = 0; n < it->dag.num_nodes; n++) {
      const TraceNode *nd = &it->dag.nodes[n];
      TraceTimeStats *st = &out->action_kind[run->program->actions[nd->action].kind];
      stats_add(st, (double)(nd->end - nd->begin));
      stats_add_oncpu(st, &run->ranks[nd->rank].events[nd->event]);
    }
  }
  free(typ.value);
  if (rc) {
    trace_report_free(out);
    return rc;
  }
  for (int r = 0; r < run->num_ranks; r++) {
    out->dropped += run->ranks[r].dropped;
    for (size_t k = 0; k < run->ranks[r].count; k++) {
      const TraceEvent *e = &run->ranks[r].events[k];
      if (e->type == TRACE_EVENT_OP && e->id >= 0 && e->id < TRACE_NUM_OP_KINDS && e->iteration >= first &&
          e->iteration <= last) {
        stats_add(&out->op_kind[e->id], (double)(e->end - e->begin));
        stats_add_oncpu(&out->op_kind[e->id], e);
      }
    }
  }
  return ERR_OK;
}

/* ---- text ---- */

static double ms(double ns) { return ns / 1e6; }

static void print_path(const TraceReport *rep, const TraceIterationReport *it, FILE *f, int max_lines) {
  const TraceDag *dag = &it->dag;
  int ranks_seen = 0;
  char *seen = calloc((size_t)rep->run->num_ranks, 1);
  for (int i = 0; seen && i < it->path.num_segments; i++)
    if (!seen[it->path.segments[i].rank]) {
      seen[it->path.segments[i].rank] = 1;
      ranks_seen++;
    }
  fprintf(f, "  critical path: %d actions on %d rank%s (", it->path.num_actions, ranks_seen, ranks_seen == 1 ? "" : "s");
  for (int r = 0, k = 0; seen && r < rep->run->num_ranks; r++)
    if (seen[r]) fprintf(f, "%s%d", k++ ? " " : "", r);
  fprintf(f, "); %.3f ms running actions", ms((double)it->path.action_time));
  for (int k = 0; k < TRACE_NUM_EDGE_KINDS; k++)
    if (it->path.edge_time[k] > 0)
      fprintf(f, ", %.3f ms on %s edges", ms((double)it->path.edge_time[k]), trace_edge_kind_name((TraceEdgeKind)k));
  fprintf(f, "\n");
  free(seen);
  int lines = 0;
  for (int i = 0; i < it->path.num_segments; i++) {
    const TraceSegment *s = &it->path.segments[i];
    if (s->end == s->begin && s->kind != TRACE_SEGMENT_ACTION) continue;
    if (max_lines > 0 && lines >= max_lines) {
      fprintf(f, "    ... (%d segments in all; --all-path lists every one)\n", it->path.num_segments);
      break;
    }
    lines++;
    char label[48];
    const TraceNode *nd = &dag->nodes[s->node];
    sched_action_label(dag->program, &dag->program->actions[nd->action], label, sizeof label);
    double at = ms((double)(s->begin - dag->begin));
    if (s->kind == TRACE_SEGMENT_ACTION) {
      fprintf(f, "    %9.3f ms  rank %-3d %-10s ran      %8.3f ms\n", at, s->rank, label, ms((double)(s->end - s->begin)));
    } else if (s->kind == TRACE_SEGMENT_START) {
      fprintf(f, "    %9.3f ms  rank %-3d %-10s started  %8.3f ms after the iteration's first action\n", at, s->rank,
              label, ms((double)(s->end - s->begin)));
    } else {
      const TraceEdge *e = &dag->edges[s->edge];
      char from[48];
      const TraceNode *fn = &dag->nodes[e->from];
      sched_action_label(dag->program, &dag->program->actions[fn->action], from, sizeof from);
      fprintf(f, "    %9.3f ms  rank %-3d %-10s waited   %8.3f ms on %s from rank %d %s", at, s->rank, label,
              ms((double)(s->end - s->begin)), trace_edge_kind_name(e->kind), fn->rank, from);
      if (e->kind == TRACE_EDGE_SYNC) /* which collective the ranks met in */
        fprintf(f, " (%s inside both)", trace_op_kind_name((TraceOpKind)e->op_kind));
      fprintf(f, "\n");
    }
  }
}

static void print_iteration(const TraceReport *rep, const TraceIterationReport *it, FILE *f, int max_lines) {
  const SchedConfig *cfg = &rep->run->program->config;
  double pct = it->time > 0 ? 100.0 * (double)it->path.length / (double)it->time : 0;
  fprintf(f, "iteration %d: %.3f ms measured, critical path %.3f ms (%.2f%%", it->iteration, ms((double)it->time),
          ms((double)it->path.length), pct);
  if (it->path.start_skew > 0)
    fprintf(f, "; rank %d started %.3f ms late", it->path.segments[0].rank, ms((double)it->path.start_skew));
  fprintf(f, ")\n");
  fprintf(f, "  bubble: %.1f%% of rank-time outside compute (FWD/BWD/BWD_WEIGHT/OPTIM)", 100.0 * it->bubble_fraction);
  if (cfg->schedule == SCHED_SCHEDULE_1F1B || cfg->schedule == SCHED_SCHEDULE_GPIPE) {
    double p = cfg->pp, m = cfg->microbatches;
    fprintf(f, " (textbook %s with free communication: %.1f%%)", sched_schedule_name(cfg->schedule),
            100.0 * (p - 1) / (m + p - 1));
  }
  fprintf(f, "\n  exposed communication:");
  int any = 0;
  for (int k = 0; k < SCHED_NUM_ACTION_KINDS; k++)
    if (it->exposed[k] > 0) {
      fprintf(f, "%s %s %.3f ms", any ? "," : "", sched_action_kind_name((SchedActionKind)k), ms((double)it->exposed[k]));
      any = 1;
    }
  fprintf(f, "%s (summed over ranks)\n", any ? "" : " none");
  if (it->straggler >= 0) {
    fprintf(f, "  straggler: rank %d, %.3f ms beyond its usual times on the critical path", it->straggler,
            ms((double)it->straggler_excess));
    if (it->straggler_node >= 0) {
      const TraceNode *nd = &it->dag.nodes[it->straggler_node];
      char label[48];
      sched_action_label(it->dag.program, &it->dag.program->actions[nd->action], label, sizeof label);
      fprintf(f, " (mostly %s: %.3f ms, usually %.3f ms)", label, ms((double)(nd->end - nd->begin)),
              ms((double)it->straggler_node_typical));
    }
    if ((double)it->straggler_excess < 0.02 * (double)it->time) fprintf(f, "; under 2%% of the iteration: no real straggler");
    fprintf(f, "\n");
  } else {
    fprintf(f, "  straggler: none (every rank ran at its usual pace on the critical path)\n");
  }
  print_path(rep, it, f, max_lines);
}

static void print_stats_line(FILE *f, const char *name, const TraceTimeStats *s) {
  fprintf(f, "  %-20s %7d  %10.3f %10.3f %10.3f", name, s->count, ms(s->best), ms(s->mean), ms(s->worst));
  if (s->oncpu_count) fprintf(f, " %10.3f", ms(s->oncpu_total / s->oncpu_count));
  fprintf(f, "\n");
}

void trace_report_print(const TraceReport *rep, FILE *f, int max_path_lines) {
  const TraceRun *run = rep->run;
  const SchedConfig *cfg = &run->program->config;
  size_t events = 0;
  for (int r = 0; r < run->num_ranks; r++) events += run->ranks[r].count;
  fprintf(f, "trace: %d ranks, %s program (pp %d, vpp %d, %d micro-batches, %d actions), %zu events from the %s",
          run->num_ranks, sched_schedule_name(cfg->schedule), cfg->pp, cfg->vpp, cfg->microbatches,
          run->program->num_actions, events, run->source);
  fprintf(f, ", %llu dropped\n", (unsigned long long)rep->dropped);
  if (rep->missing_actions)
    fprintf(f, "warning: %d program actions were not recorded (%d edges left out); results are partial\n",
            rep->missing_actions, rep->missing_edges);
  for (int i = 0; i < rep->num_iterations; i++) print_iteration(rep, &rep->iters[i], f, max_path_lines);
  int oncpu = 0;
  for (int k = 0; k < SCHED_NUM_ACTION_KINDS; k++) oncpu |= rep->action_kind[k].oncpu_count > 0;
  fprintf(f, "timing over %d iteration%s (ms):     count        best       mean      worst%s\n", rep->num_iterations,
          rep->num_iterations == 1 ? "" : "s", oncpu ? " on-CPU mean" : "");
  print_stats_line(f, "iteration", &rep->iteration_time);
  for (int k = 0; k < SCHED_NUM_ACTION_KINDS; k++)
    if (rep->action_kind[k].count) print_stats_line(f, sched_action_kind_name((SchedActionKind)k), &rep->action_kind[k]);
  for (int k = 0; k < TRACE_NUM_OP_KINDS; k++)
    if (rep->op_kind[k].count) {
      char name[40];
      snprintf(name, sizeof name, "op %s", trace_op_kind_name((TraceOpKind)k));
      print_stats_line(f, name, &rep->op_kind[k]);
    }
}
