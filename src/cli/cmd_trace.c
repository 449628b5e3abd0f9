/* `fivefold trace` and its subcommands:
 *   record --ebpf   run a command under bpftrace and write its trace file
 *   analyze         the measured DAG: critical path, bubble, exposed
 *                   communication, straggler, timing statistics, DOT
 *   compare         simulate the traced configuration, its ranks on the
 *                   devices the run's plan mapped them to, and print
 *                   predicted against measured time per action kind
 *   compare-ready   check that a trace holds everything needed to be laid
 *                   side by side with a prediction, action by action
 * Option parsing is hand-rolled so tests can call the command repeatedly in
 * one process. */
#include "cli/cmd_trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/file_text.h"
#include "base/options.h"
#include "model/config.h"
#include "plan/cluster.h"
#include "plan/config_paths.h"
#include "plan/mapping.h"
#include "plan/plan_file.h"
#include "plan/simulate.h"
#include "sched/evaluate.h"
#include "trace/chrome_writer.h"
#include "trace/critical_path.h"
#include "trace/dag.h"
#include "trace/ebpf.h"
#include "trace/match.h"
#include "trace/stats.h"

static void trace_usage(FILE *f) {
  fprintf(f,
          "usage: fivefold trace <subcommand> [options]\n\n"
          "subcommands:\n"
          "  record --ebpf [options] -- COMMAND [ARGS...]\n"
          "      run COMMAND with bpftrace attached to the fivefold USDT probes of its binary and to\n"
          "      sched_switch of its threads; write the same trace format as the built-in recorder\n"
          "      (fivefold train --trace-steps), with the on-CPU time of every action\n"
          "        -o, --out FILE     trace file to write (default trace.json)\n"
          "        --program FILE     schedule program JSON the run executed (fivefold schedule --json);\n"
          "                           needed to analyze the trace\n"
          "        --binary PATH      binary whose probes to attach (default: COMMAND itself; give it\n"
          "                           when COMMAND is a launcher such as mpirun)\n"
          "        --steps A:B        keep iterations A..B only\n"
          "        --raw FILE         keep bpftrace's output there (default OUT.bpftrace.txt)\n"
          "        --from-raw FILE    convert an existing bpftrace output; run nothing\n"
          "        --no-sched         do not trace sched_switch (no on-CPU times)\n"
          "        --bpftrace PATH    the bpftrace to run\n"
          "  analyze FILE [options]\n"
          "      rebuild the timing DAG of the measured run and report, per iteration, the critical\n"
          "      path against the iteration time, the pipeline bubble, exposed communication by kind\n"
          "      and the straggler; then best / mean / worst times per action and operation kind\n"
          "        --iteration N      only iteration N (default: every recorded iteration)\n"
          "        --dot FILE         write the DAG of the first analyzed iteration as Graphviz DOT\n"
          "        --critical-only    with --dot: only the critical path\n"
          "        --all-path         list every segment of the critical path (default: 40 lines)\n"
          "  compare FILE [--cluster NAME|FILE] [--plan PLAN] [--iteration N]\n"
          "      simulate the configuration the trace recorded and print, per action kind, the\n"
          "      measured and predicted mean time and the error. With a model in the trace\n"
          "      (otherData.model) the planner's simulator prices it on the cluster spec named by\n"
          "      --cluster or otherData.config.cluster; without one, sched's unit costs (FWD 1,\n"
          "      BWD 2) scaled to the measured FWD, and the output says so. The simulator uses the\n"
          "      spec's runtime facts (a spec from calibrate: fp32, MoE replicated over TP, no\n"
          "      asynchronous progress) and the run's precision, dispatcher and buckets; a spec not\n"
          "      calibrated on the trace's host gets a warning and no error column. Every rank is\n"
          "      priced on the device it ran on: the device mapping of the plan the run was trained\n"
          "      with (train --plan records it as otherData.plan), or PLAN's for a trace that records\n"
          "      none (a mapping that disagrees with the trace's is refused), else rank r on device r;\n"
          "      the cluster spec defaults to the plan's. The output prints the mapping used.\n"
          "      Measured over every recorded iteration but the run's first step (iteration 0: one-\n"
          "      time costs), or over iteration N alone\n"
          "  compare-ready FILE [--predicted PRED]\n"
          "      check that the trace can be compared with a prediction action by action: it holds\n"
          "      the program, every action of every recorded iteration on every rank, no dropped\n"
          "      events, consistent clocks; with PRED (a predicted trace from fivefold schedule\n"
          "      --trace or fivefold simulate --trace), that both are of the same program, and the\n"
          "      measured and predicted times per kind side by side. Exit 0 when ready, 1 when not.\n");
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "fivefold trace: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(run 'fivefold trace --help' for the options)\n");
  return 2;
}

static int report_failure(const Error *err) {
  fprintf(stderr, "fivefold trace: %s\n", err->msg);
  return 1;
}

static int parse_int(const char *s, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end || errno || v < 0 || v > 1000000000) return -1;
  *out = (int)v;
  return 0;
}

/* ---- record ---- */

typedef struct RecordOptions {
  int ebpf, with_sched;
  const char *out, *program, *binary, *raw, *from_raw, *bpftrace;
  int first_step, last_step;
  char **command;
} RecordOptions;

static int write_capture(const RecordOptions *o, const TraceEbpfCapture *cap, Error *err) {
  SchedProgram *prog = NULL;
  if (o->program && sched_program_read_json(o->program, &prog, err) != ERR_OK) return error_wrap(err, "--program");
  if (prog)
    for (int r = 0; r < cap->num_ranks; r++)
      if (cap->ranks[r].info.pipeline_rank >= prog->num_ranks) {
        int bad = cap->ranks[r].info.pipeline_rank;
        sched_program_free(prog);
        return error_set(err, ERR_CONFIG, "rank %d ran pipeline rank %d but %s has %d ranks: wrong --program?", r,
                         bad, o->program, prog ? prog->num_ranks : 0);
      }
  TraceRunMeta meta = {.program = prog, .source = "ebpf", .clock = "monotonic"};
  meta.grid.world = cap->num_ranks;
  int rc = trace_chrome_write(o->out, &meta, cap->ranks, cap->num_ranks, err);
  sched_program_free(prog);
  return rc;
}

static int convert_raw(const RecordOptions *o, const char *raw_path, long lost) {
  Error err = {0};
  FILE *f = fopen(raw_path, "r");
  if (!f) {
    error_set(&err, ERR_IO, "cannot open %s: %s", raw_path, error_errno_text(errno));
    return report_failure(&err);
  }
  TraceEbpfOptions opt = {o->first_step, o->last_step};
  TraceEbpfCapture cap;
  int rc = trace_ebpf_convert(f, raw_path, &opt, &cap, &err);
  fclose(f);
  if (rc) return report_failure(&err);
  rc = write_capture(o, &cap, &err);
  size_t events = 0;
  for (int r = 0; r < cap.num_ranks; r++) events += cap.ranks[r].count;
  if (rc == ERR_OK) {
    printf("trace: %zu events from %d rank%s written to %s", events, cap.num_ranks, cap.num_ranks == 1 ? "" : "s",
           o->out);
    printf(cap.have_sched ? " (with on-CPU times from %ld context switches)\n" : " (no on-CPU times)\n",
           cap.sched_switches);
    if (cap.unmatched) printf("warning: %ld probe begins or ends had no partner\n", cap.unmatched);
    if (cap.unranked) printf("warning: %ld events came from threads that never announced a rank\n", cap.unranked);
    if (lost) printf("warning: bpftrace lost %ld events (the trace has gaps)\n", lost);
    if (!o->program) printf("note: no --program given: the trace cannot be analyzed until it has one\n");
  }
  trace_ebpf_capture_free(&cap);
  return rc ? report_failure(&err) : 0;
}

static int cmd_record(int argc, char **argv) {
  RecordOptions o = {.with_sched = 1, .out = "trace.json", .first_step = 0, .last_step = -1};
  static const char *const KNOWN[] = {"--out", "-o", "--program", "--binary", "--raw", "--from-raw", "--bpftrace",
                                      "--steps", "--ebpf", "--no-sched", "--help"};
  OptionParser op;
  Error perr = {0};
  option_parser_init(&op, "trace record", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  int i = argc;
  while (option_next(&op)) {
    if (!strcmp(op.arg, "--")) {
      i = op.index + 1;
      break;
    }
    if (option_is_help(&op)) {
      trace_usage(stdout);
      return 0;
    }
    const char *v = NULL;
    if (option_is(&op, "--ebpf") || option_is(&op, "--no-sched")) {
      if (option_switch(&op, &perr)) return usage_error("record: %s", perr.msg);
      if (option_is(&op, "--ebpf")) o.ebpf = 1;
      else o.with_sched = 0;
      continue;
    }
    const char **slot = option_is(&op, "-o") || option_is(&op, "--out") ? &o.out
                        : option_is(&op, "--program")                   ? &o.program
                        : option_is(&op, "--binary")                    ? &o.binary
                        : option_is(&op, "--raw")                       ? &o.raw
                        : option_is(&op, "--from-raw")                  ? &o.from_raw
                        : option_is(&op, "--bpftrace")                  ? &o.bpftrace
                        : option_is(&op, "--steps")                     ? &v
                                                                        : NULL;
    if (!slot) return usage_error("record: %s", (option_unknown(&op, &perr), perr.msg));
    if (option_value(&op, slot, &perr)) return usage_error("record: %s", perr.msg);
    if (slot == &v && trace_steps_parse(v, &o.first_step, &o.last_step, &perr))
      return usage_error("record: %s", perr.msg);
  }
  if (!o.ebpf)
    return usage_error("%s",
                       "record: only --ebpf recording is run from here; the built-in recorder is switched on in the "
                       "run itself (fivefold train --trace-steps A:B)");
  if (o.from_raw) return convert_raw(&o, o.from_raw, 0);
  if (i >= argc) return usage_error("%s", "record: no command given (put it after --)");
  o.command = &argv[i];
  char raw_default[4200];
  if (!o.raw) {
    snprintf(raw_default, sizeof raw_default, "%s.bpftrace.txt", o.out);
    o.raw = raw_default;
  }
  TraceEbpfRun run = {.bpftrace = o.bpftrace, .binary = o.binary ? o.binary : o.command[0], .raw_path = o.raw,
                      .with_sched = o.with_sched};
  Error err = {0};
  int status;
  long lost;
  if (trace_ebpf_run(&run, o.command, &status, &lost, &err)) return report_failure(&err);
  if (status != 0) fprintf(stderr, "fivefold trace: warning: %s exited with status %d\n", o.command[0], status);
  int rc = convert_raw(&o, o.raw, lost);
  return rc ? rc : status != 0;
}

/* ---- analyze ---- */

/* The trace in file and its analysis of iteration (-1: all; with
 * after_first, all but the run's first step when the trace holds it and
 * later ones); on failure nothing is left to free. */
static int read_and_analyze(const char *file, int iteration, int after_first, TraceRun *run, TraceReport *rep,
                            Error *err) {
  int rc = trace_chrome_read(file, run, err);
  if (rc) return rc;
  int first = 0, last = 0;
  if (iteration < 0 && after_first && trace_run_iteration_range(run, &first, &last) == 0 && first == 0 && last > 0)
    rc = trace_analyze_range(run, 1, last, rep, err);
  else
    rc = trace_analyze(run, iteration, rep, err);
  if (rc) {
    error_wrap(err, "%s", file);
    trace_run_free(run);
  }
  return rc;
}

static int cmd_analyze(int argc, char **argv) {
  const char *file = NULL, *dot = NULL;
  int critical_only = 0, iteration = -1, all_path = 0;
  static const char *const KNOWN[] = {"--critical-only", "--all-path", "--dot", "--iteration", "--help"};
  OptionParser op;
  Error perr = {0};
  option_parser_init(&op, "trace analyze", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    const char *v = NULL;
    if (option_is_help(&op)) {
      trace_usage(stdout);
      return 0;
    }
    if (option_is(&op, "--critical-only") || option_is(&op, "--all-path")) {
      if (option_switch(&op, &perr)) return usage_error("analyze: %s", perr.msg);
      if (option_is(&op, "--critical-only")) critical_only = 1;
      else all_path = 1;
    } else if (option_is(&op, "--dot")) {
      if (option_value(&op, &dot, &perr)) return usage_error("analyze: %s", perr.msg);
    } else if (option_is(&op, "--iteration")) {
      if (option_value(&op, &v, &perr)) return usage_error("analyze: %s", perr.msg);
      if (parse_int(v, &iteration)) return usage_error("analyze: --iteration '%s': expected an iteration number", v);
    } else if (!option_is_positional(&op) || (op.arg[0] == '-' && op.arg[1]))
      return usage_error("analyze: %s", (option_unknown(&op, &perr), perr.msg));
    else if (file)
      return usage_error("analyze: one trace file at a time ('%s' is extra)", op.arg);
    else
      file = op.arg;
  }
  if (!file) return usage_error("%s", "analyze: no trace file given");
  if (critical_only && !dot) return usage_error("%s", "analyze: --critical-only applies to --dot FILE");
  Error err = {0};
  TraceRun run;
  TraceReport rep;
  if (read_and_analyze(file, iteration, 0, &run, &rep, &err)) return report_failure(&err);
  trace_report_print(&rep, stdout, all_path ? 0 : 40);
  int rc = 0;
  if (dot && rep.num_iterations > 0) {
    const TraceIterationReport *it = &rep.iters[0];
    FILE *f = fopen(dot, "w");
    if (!f) {
      error_set(&err, ERR_IO, "cannot write %s: %s", dot, error_errno_text(errno));
      rc = report_failure(&err);
    } else {
      int wrc = trace_dag_write_dot(&it->dag, &it->path, critical_only, f, &err);
      if (fclose(f) != 0 && !wrc) wrc = error_set(&err, ERR_IO, "cannot write %s", dot);
      if (wrc) rc = report_failure(&err);
      else
        printf("wrote %s of iteration %d to %s (render: dot -Tsvg %s -o trace.svg)\n",
               critical_only ? "the critical path" : "the DAG", it->iteration, dot, dot);
    }
  }
  trace_report_free(&rep);
  trace_run_free(&run);
  return rc;
}

/* ---- compare-ready ---- */

/* The whole of a (trace) file, or NULL. */
static char *read_text(const char *path) {
  char *text = NULL;
  return file_read_text(path, "trace", (size_t)1 << 30, &text, NULL, NULL) ? NULL : text;
}

/* Compares a predicted trace (sched/trace_json.h: pid = pipeline rank,
 * args.id = action id, cat = kind) with the program; prints the measured
 * and predicted mean duration per kind. Returns the number of problems. */
static int compare_predicted(const char *path, const TraceRun *run, const TraceReport *rep) {
  char *text = read_text(path);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  free(text);
  const cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
  if (!cJSON_IsArray(events)) {
    printf("  problem: %s is not a Chrome trace JSON file\n", path);
    cJSON_Delete(root);
    return 1;
  }
  const SchedProgram *prog = run->program;
  double sum[SCHED_NUM_ACTION_KINDS] = {0}, end = 0;
  int count[SCHED_NUM_ACTION_KINDS] = {0}, seen = 0, mismatched = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, events) {
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph"), *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X")) continue;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(args, "id"), *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(e, "pid");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts"), *dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
    if (!cJSON_IsNumber(id) || !cJSON_IsNumber(ts) || !cJSON_IsNumber(dur)) continue;
    const SchedAction *a = sched_program_action(prog, (int)id->valuedouble);
    SchedActionKind kind;
    if (!a || !cJSON_IsString(cat) || sched_action_kind_from_name(cat->valuestring, &kind) || kind != a->kind ||
        !cJSON_IsNumber(pid) || (int)pid->valuedouble != a->rank) {
      mismatched++;
      continue;
    }
    seen++;
    sum[kind] += dur->valuedouble;
    count[kind]++;
    if (ts->valuedouble + dur->valuedouble > end) end = ts->valuedouble + dur->valuedouble;
  }
  cJSON_Delete(root);
  int problems = 0;
  if (mismatched) {
    printf("  problem: %d predicted actions do not match the trace's program (id, kind or rank differ): the "
           "prediction is of another program\n",
           mismatched);
    problems++;
  }
  if (seen != prog->num_actions) {
    printf("  problem: the prediction holds %d of the program's %d actions\n", seen, prog->num_actions);
    problems++;
  }
  if (problems) return problems;
  printf("  prediction %s: same program, %d actions\n", path, seen);
  printf("  %-14s %14s %14s\n", "kind", "measured ms", "predicted ms");
  printf("  %-14s %14.3f %14.3f\n", "iteration", rep->iteration_time.mean / 1e6, end / 1e3);
  for (int k = 0; k < SCHED_NUM_ACTION_KINDS; k++)
    if (count[k] && rep->action_kind[k].count)
      printf("  %-14s %14.3f %14.3f\n", sched_action_kind_name((SchedActionKind)k), rep->action_kind[k].mean / 1e6,
             sum[k] / count[k] / 1e3);
  return 0;
}

/* Messages whose receive completed before the send began: only possible
 * when the ranks' clocks disagree. */
static int count_acausal_messages(const TraceReport *rep) {
  int bad = 0;
  for (int i = 0; i < rep->num_iterations; i++) {
    const TraceDag *dag = &rep->iters[i].dag;
    for (int k = 0; k < dag->num_edges; k++)
      if (dag->edges[k].kind == TRACE_EDGE_MESSAGE &&
          trace_edge_source_time(dag, &dag->edges[k]) > trace_edge_target_time(dag, &dag->edges[k]))
        bad++;
  }
  return bad;
}

static int cmd_compare_ready(int argc, char **argv) {
  const char *file = NULL, *predicted = NULL;
  static const char *const KNOWN[] = {"--predicted", "--help"};
  OptionParser op;
  Error perr = {0};
  option_parser_init(&op, "trace compare-ready", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    if (option_is_help(&op)) {
      trace_usage(stdout);
      return 0;
    }
    if (option_is(&op, "--predicted")) {
      if (option_value(&op, &predicted, &perr)) return usage_error("compare-ready: %s", perr.msg);
    } else if (!option_is_positional(&op) || (op.arg[0] == '-' && op.arg[1]))
      return usage_error("compare-ready: %s", (option_unknown(&op, &perr), perr.msg));
    else if (file)
      return usage_error("compare-ready: one trace file at a time ('%s' is extra)", op.arg);
    else
      file = op.arg;
  }
  if (!file) return usage_error("%s", "compare-ready: no trace file given");
  Error err = {0};
  TraceRun run;
  if (trace_chrome_read(file, &run, &err)) return report_failure(&err);
  printf("%s:\n", file);
  int problems = 0;
  if (!run.program) {
    printf("  problem: no schedule program in the file (otherData.program); eBPF recordings need --program\n");
    trace_run_free(&run);
    printf("not ready: 1 problem\n");
    return 1;
  }
  int *covered = calloc((size_t)run.program->num_ranks, sizeof *covered);
  for (int r = 0; covered && r < run.num_ranks; r++) covered[run.ranks[r].info.pipeline_rank] = 1;
  for (int p = 0; covered && p < run.program->num_ranks; p++)
    if (!covered[p]) {
      printf("  problem: no traced rank ran pipeline rank %d\n", p);
      problems++;
    }
  free(covered);
  TraceIndex ix;
  uint64_t dropped = 0;
  for (int r = 0; r < run.num_ranks; r++) dropped += run.ranks[r].dropped;
  if (dropped) {
    printf("  problem: %llu events were dropped (full buffers): raise the recorder's capacity\n",
           (unsigned long long)dropped);
    problems++;
  }
  if (trace_index_build(run.ranks, run.num_ranks, run.program, &ix, &err) == ERR_OK) {
    if (ix.num_unknown) {
      printf("  problem: %d events name actions outside the program or on another rank\n", ix.num_unknown);
      problems++;
    }
    if (ix.num_duplicates) {
      printf("  problem: %d actions were recorded twice in one iteration\n", ix.num_duplicates);
      problems++;
    }
    trace_index_free(&ix);
  }
  TraceReport rep;
  if (trace_analyze(&run, -1, &rep, &err)) {
    printf("  problem: %s\n", err.msg);
    problems++;
  } else {
    if (rep.missing_actions) {
      printf("  problem: %d program actions have no recorded event\n", rep.missing_actions);
      problems++;
    }
    int acausal = count_acausal_messages(&rep);
    if (acausal) {
      printf("  problem: %d messages complete before they were sent: the ranks' clock offsets are wrong\n", acausal);
      problems++;
    }
    printf("  %d iteration%s, %d actions each, %d world rank%s\n", rep.num_iterations,
           rep.num_iterations == 1 ? "" : "s", run.program->num_actions, run.num_ranks, run.num_ranks == 1 ? "" : "s");
    if (predicted) problems += compare_predicted(predicted, &run, &rep);
    trace_report_free(&rep);
  }
  trace_run_free(&run);
  if (problems) {
    printf("not ready: %d problem%s\n", problems, problems == 1 ? "" : "s");
    return 1;
  }
  printf("ready: every action of the program is measured and can be compared by its id\n");
  return 0;
}

/* ---- compare ---- */

/* Predicted duration of every action of the program (ms, by id) and the
 * predicted iteration (ms), with a line saying how they were priced. */
typedef struct Prediction {
  double *ms;
  double iteration_ms;
  char how[768];
  int other_machine;   /* the spec does not describe the machine the trace ran on */
  char warning[1024];
  /* With a model: "" or a line saying whether the priced program is the
   * traced one action for action (the per-kind means pair them by id). */
  char program_note[1400]; /* room for an error message (1024) and two action descriptions */
} Prediction;

/* Without a model: sched's unit costs (FWD 1, BWD 2, the rest free, free
 * transfers) evaluated on the trace's own program; one unit is set to the
 * measured mean FWD, the only number taken from the measurement. */
static int predict_unit(const TraceRun *run, const TraceReport *rep, Prediction *p, Error *err) {
  const TraceTimeStats *fwd = &rep->action_kind[SCHED_FWD];
  if (!fwd->count || fwd->mean <= 0)
    return error_set(err, ERR_FORMAT, "the trace has no measured FWD to scale unit costs by");
  SchedUnitCosts costs = sched_unit_costs_default();
  SchedEvalOptions eo = sched_unit_eval_options(&costs, SCHED_SEND_EAGER);
  SchedEval ev;
  int rc = sched_evaluate(run->program, &eo, &ev, err);
  double unit_ms = fwd->mean / 1e6;
  if (rc == ERR_OK) {
    for (int i = 0; i < run->program->num_actions; i++) p->ms[i] = (ev.finish[i] - ev.start[i]) * unit_ms;
    p->iteration_ms = ev.makespan * unit_ms;
  }
  sched_eval_free(&ev);
  snprintf(p->how, sizeof p->how,
           "the trace carries no model, so the prediction prices with unit costs (FWD 1, BWD 2, everything else and "
           "every transfer free) on the trace's program; 1 unit = the measured mean FWD (%.3f ms), so FWD agrees by "
           "construction and only the other kinds and the iteration are predictions",
           unit_ms);
  return rc;
}

/* Whether the program the simulator priced (written to path) is the
 * traced one action for action: the per-kind means pair them by id, so a
 * difference (another order of sends, say) is said, with where it starts. */
static void compare_programs(const SchedProgram *traced, const char *path, Prediction *p) {
  SchedProgram *priced = NULL;
  Error err = {0, ""};
  if (sched_program_read_json(path, &priced, &err)) {
    snprintf(p->program_note, sizeof p->program_note, "warning: the priced program could not be read back (%s)",
             err.msg);
    return;
  }
  int d = sched_program_first_difference(traced, priced);
  if (d < 0) {
    snprintf(p->program_note, sizeof p->program_note,
             "program: the priced program is the traced one, action for action (%d actions)", traced->num_actions);
  } else {
    char a[96] = "none", b[96] = "none";
    if (d < traced->num_actions) sched_action_describe(&traced->actions[d], a, sizeof a);
    if (d < priced->num_actions) sched_action_describe(&priced->actions[d], b, sizeof b);
    snprintf(p->program_note, sizeof p->program_note,
             "warning: the priced program differs from the traced one from id %d (traced %s, priced %s): the "
             "per-kind means pair actions by id",
             d, a, b);
  }
  sched_program_free(priced);
}

static int json_int(const cJSON *obj, const char *key, int fallback) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsNumber(v) ? (int)v->valuedouble : fallback;
}

static const char *json_string(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The trace was recorded by fivefold's CPU runtime (otherData.ranks[].host
 * names its host); a spec describes that machine only when calibrate wrote
 * it there (runtime facts, same host). Otherwise the comparison prices
 * another machine and its errors mean nothing. */
static void check_machine(const TraceRun *run, const ClusterSpec *cluster, Prediction *p) {
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(run->other_data, "ranks");
  const char *host = json_string(cJSON_GetArrayItem(ranks, 0), "host");
  const PlanRuntimeFacts *rt = &cluster->runtime;
  if (!rt->given)
    snprintf(p->warning, sizeof p->warning,
             "the trace was recorded by fivefold's CPU runtime%s%s, but spec %s (%s) was not calibrated on it (no "
             "runtime facts: a cluster of other devices), so the prediction is for another machine and the errors "
             "below mean nothing; calibrate this machine (fivefold calibrate --out local.json) and compare with "
             "--cluster local.json",
             host ? " on host " : "", host ? host : "", cluster->name, cluster->origin);
  else if (host && rt->host[0] && strcmp(host, rt->host))
    snprintf(p->warning, sizeof p->warning,
             "the trace was recorded on host %s, but spec %s was calibrated on host %s: the prediction is for "
             "another machine and the errors below may mean nothing",
             host, cluster->name, rt->host);
  p->other_machine = p->warning[0] != 0;
}

/* The run's own facts, recorded in its config, override the spec's: its
 * precision, the MoE dispatcher and the gradient buckets it used. */
static int apply_run_facts(const cJSON *config, PlanOptions *opt, PlanDtype *dtype, Error *err) {
  const cJSON *training = cJSON_GetObjectItemCaseSensitive(config, "training");
  const cJSON *parallel = cJSON_GetObjectItemCaseSensitive(config, "parallel");
  const char *precision = json_string(training, "precision");
  if (precision && plan_dtype_from_name(precision, dtype))
    return error_set(err, ERR_FORMAT, "otherData.config.training.precision: expected fp32 or bf16, got '%s'",
                     precision);
  const char *dispatcher = json_string(parallel, "dispatcher");
  if (dispatcher) opt->moe_allgather = !strcmp(dispatcher, "allgather");
  const cJSON *bucket = cJSON_GetObjectItemCaseSensitive(parallel, "bucket_mb");
  if (cJSON_IsNumber(bucket) && bucket->valuedouble > 0) {
    opt->bucket_params = bucket->valuedouble * 1e6 / opt->grad_reduce_bytes;
    opt->bucket_max_share = 0;
  }
  return ERR_OK;
}

/* The device mapping the traced ranks ran on: rank r on device
 * device_of_rank[r] (NULL: rank order), where it came from, and the
 * cluster spec the plan was made for. */
typedef struct RunMapping {
  int *device_of_rank;
  int n;
  char source[600];   /* "the plan the run was trained with (P, otherData.plan)", "--plan P (...)", ... */
  char cluster[4096]; /* the plan's cluster spec ("" when no plan) */
} RunMapping;

static void mapping_list(const int *map, int n, char *out, size_t size) {
  size_t len = 0;
  out[0] = '\0';
  for (int i = 0; i < n && len + 16 < size; i++)
    len += (size_t)snprintf(out + len, size - len, "%s%d", i ? " " : "", map[i]);
  if (n > 0 && len + 16 >= size) snprintf(out + len, size - len, " ...");
}

/* The mapping the run was placed by: the trace's record of its plan
 * (otherData.plan, written by `train --plan`) or, for a trace without
 * one, plan_path's; both given and not the same placement: refused, naming
 * both. Neither: rank order. */
static int resolve_mapping(const char *file, const TraceRun *run, const char *plan_path, RunMapping *m, Error *err) {
  memset(m, 0, sizeof *m);
  int world = run->grid.world > 0 ? run->grid.world : run->num_ranks;
  const cJSON *plan = cJSON_GetObjectItemCaseSensitive(run->other_data, "plan");
  if (plan && !cJSON_IsObject(plan))
    return error_set(err, ERR_FORMAT, "%s: field \"otherData.plan\": expected an object (the plan the run was "
                     "trained with)", file);
  int *given = NULL, given_n = 0;
  if (plan_path) {
    PlanChoice pc;
    if (plan_file_read(plan_path, &pc, err) || plan_file_read_mapping(plan_path, &given, &given_n, err))
      return error_wrap(err, "--plan");
    if (given && world > 0 && given_n != world) {
      free(given);
      return error_set(err, ERR_CONFIG, "--plan %s: its mapping places %d ranks, the trace %s ran %d", plan_path,
                       given_n, file, world);
    }
    snprintf(m->cluster, sizeof m->cluster, "%s", pc.cluster);
  }
  if (!plan) {
    m->device_of_rank = given;
    m->n = given_n;
    if (plan_path)
      snprintf(m->source, sizeof m->source, "--plan %s (the trace records no plan)", plan_path);
    else
      snprintf(m->source, sizeof m->source, "the trace records no plan (otherData.plan) and no --plan was given");
    return ERR_OK;
  }
  const char *recorded_file = json_string(plan, "file");
  int *rec = NULL, rec_n = 0;
  if (plan_mapping_from_json(cJSON_GetObjectItemCaseSensitive(plan, "mapping"), file,
                             "otherData.plan.mapping.device_of_rank", world, &rec, &rec_n, err)) {
    free(given);
    return err->code;
  }
  if (plan_path) {
    int rec_identity = plan_mapping_is_identity(rec, rec_n), given_identity = plan_mapping_is_identity(given, given_n);
    int same = rec_identity && given_identity;
    if (!rec_identity && !given_identity && rec_n == given_n)
      same = !memcmp(rec, given, (size_t)rec_n * sizeof *rec);
    if (!same) {
      char a[512], b[512];
      if (rec_identity) snprintf(a, sizeof a, "rank order");
      else mapping_list(rec, rec_n, a, sizeof a);
      if (given_identity) snprintf(b, sizeof b, "rank order");
      else mapping_list(given, given_n, b, sizeof b);
      error_set(err, ERR_CONFIG,
                "the run of %s was placed by plan %s with device of rank 0..%d: %s (otherData.plan), but --plan %s "
                "maps them %s: give the plan the run was trained with, or leave --plan out",
                file, recorded_file ? recorded_file : "(unnamed)", world - 1, a, plan_path, b);
      free(rec);
      free(given);
      return err->code;
    }
  }
  free(given);
  m->device_of_rank = rec;
  m->n = rec_n;
  const char *cluster = json_string(plan, "cluster");
  if (cluster) snprintf(m->cluster, sizeof m->cluster, "%s", cluster);
  snprintf(m->source, sizeof m->source, "the plan the run was trained with (%s, otherData.plan)%s%s%s",
           recorded_file ? recorded_file : "unnamed", plan_path ? "; --plan " : "", plan_path ? plan_path : "",
           plan_path ? " agrees" : "");
  return ERR_OK;
}

/* "device mapping: ..." for the output. */
static void print_mapping(const RunMapping *m, int priced) {
  if (m->device_of_rank && !plan_mapping_is_identity(m->device_of_rank, m->n)) {
    char list[1024];
    mapping_list(m->device_of_rank, m->n, list, sizeof list);
    printf("device mapping: device of rank 0..%d: %s, from %s%s.\n", m->n - 1, list, m->source,
           priced ? "" : "; not priced: unit costs price no links");
  } else {
    printf("device mapping: rank order (rank r on device r), %s%s.\n",
           m->device_of_rank ? "the mapping of " : "", m->source);
  }
}

/* With a model: the planner's simulator (plan/simulate.h) on the same
 * configuration, its predicted timeline read back action by action. */
static int predict_plan(const TraceRun *run, const cJSON *model_json, const char *cluster_name,
                        const RunMapping *mapping, Prediction *p, Error *err) {
  const cJSON *config = cJSON_GetObjectItemCaseSensitive(run->other_data, "config");
  const cJSON *training = cJSON_GetObjectItemCaseSensitive(config, "training");
  if (!cluster_name) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(config, "cluster");
    cluster_name = cJSON_IsString(c) ? c->valuestring : NULL;
  }
  int from_plan = !cluster_name && mapping->cluster[0];
  if (from_plan) cluster_name = mapping->cluster; /* the spec the plan was made for */
  if (!cluster_name)
    return error_set(err, ERR_ARG,
                     "the trace has a model but names no cluster spec (otherData.config.cluster, or the cluster of "
                     "its plan): pass --cluster NAME or FILE (configs/clusters/)");
  ModelConfig model;
  model_config_defaults(&model);
  if (model_config_from_json(&model, model_json, "otherData.model", err)) return err->code;
  ClusterSpec cluster;
  memset(&cluster, 0, sizeof cluster);
  char path[4096];
  if (plan_find_config("clusters", cluster_name, path, sizeof path, err) || cluster_spec_load(&cluster, path, err))
    return from_plan ? error_wrap(err, "the cluster spec of the run's plan (field \"cluster\" of %s); pass --cluster "
                                       "NAME or FILE", mapping->source)
                     : err->code;
  const SchedConfig *sc = &run->program->config;
  int seq = json_int(training, "seq_len", json_int(config, "seq_len", 0));
  int mbs = json_int(training, "micro_batch_size", json_int(config, "micro_batch_size", 1));
  int rc = ERR_OK;
  if (seq < 1) rc = error_set(err, ERR_FORMAT, "otherData.config.training.seq_len is missing: the simulator needs it");
  PlanConfig cfg;
  int dp = run->grid.dp > 0 ? run->grid.dp : 1;
  plan_config_init(&cfg, seq, mbs * dp * sc->microbatches, mbs);
  PlanParallel *par = &cfg.par;
  par->tp = run->grid.tp > 0 ? run->grid.tp : 1;
  par->cp = run->grid.cp > 0 ? run->grid.cp : 1;
  par->dp = dp;
  par->pp = sc->pp;
  par->vpp = sc->vpp > 0 ? sc->vpp : 1;
  par->ep = run->grid.ep > 0 ? run->grid.ep : 1;
  par->etp = run->grid.etp > 0 ? run->grid.etp : 1;
  if (sc->schedule == SCHED_SCHEDULE_GPIPE) cfg.schedule = SCHED_SCHEDULE_GPIPE;
  if (sc->schedule == SCHED_SCHEDULE_ZB_H1 || sc->warmup_set) { /* the traced order, warm-up depths included */
    cfg.schedule = sc->schedule;
    cfg.schedule_given = 1;
    cfg.warmup_set = sc->warmup_set;
    memcpy(cfg.warmup, sc->warmup, sizeof cfg.warmup);
  }
  /* The order costs the traced program was built with: the program priced
   * is then the one that ran, action for action (0: the defaults). */
  cfg.order_given = 1;
  cfg.order_fwd_cost = sc->order_fwd_cost;
  cfg.order_bwd_cost = sc->order_bwd_cost;
  PlanOptions opt;
  plan_options_default(&opt);
  plan_options_from_runtime(&cluster.runtime, 0, &opt, &cfg.dtype);
  if (!rc) rc = apply_run_facts(config, &opt, &cfg.dtype, err);
  check_machine(run, &cluster, p);
  char pred_path[64], prog_path[80];
  snprintf(pred_path, sizeof pred_path, "/tmp/fivefold-compare-%d.json", (int)getpid());
  snprintf(prog_path, sizeof prog_path, "/tmp/fivefold-compare-%d.program.json", (int)getpid());
  PlanResult res;
  memset(&res, 0, sizeof res);
  PlanSimOptions sim = {.trace_path = pred_path, .program_path = prog_path};
  if (!rc) rc = plan_config_finish(&cfg, &model, &cluster, plan_config_world(&cfg), err);
  /* Every group and transfer on the devices the ranks ran on, as
   * `simulate --plan` prices the plan's mapping. */
  if (!rc && mapping->device_of_rank && !plan_mapping_is_identity(mapping->device_of_rank, mapping->n)) {
    if (mapping->n != plan_config_world(&cfg) || mapping->n > cluster_spec_total_devices(&cluster))
      rc = error_set(err, ERR_CONFIG,
                     "the device mapping from %s places %d ranks, but the traced configuration has %d and cluster %s "
                     "%d devices",
                     mapping->source, mapping->n, plan_config_world(&cfg), cluster.name,
                     cluster_spec_total_devices(&cluster));
    cluster.device_of_rank = mapping->device_of_rank;
    cluster.num_mapped = mapping->n;
  }
  if (!rc) rc = plan_simulate(&model, &cluster, &opt, &cfg, &sim, NULL, &res, err);
  if (!rc) {
    TraceRun pred;
    /* The predicted trace has the shape of a measured one without otherData:
     * pid = pipeline rank, args.id = action id, ts/dur in µs. */
    rc = trace_chrome_read(pred_path, &pred, err);
    if (!rc) {
      int seen = 0;
      for (int r = 0; r < pred.num_ranks; r++)
        for (size_t i = 0; i < pred.ranks[r].count; i++) {
          const TraceEvent *e = &pred.ranks[r].events[i];
          const SchedAction *a = e->type == TRACE_EVENT_ACTION ? sched_program_action(run->program, e->id) : NULL;
          if (!a || a->rank != r) continue;
          p->ms[e->id] = (double)(e->end - e->begin) / 1e6;
          seen++;
        }
      if (seen != run->program->num_actions)
        rc = error_set(err, ERR_CONFIG,
                       "the simulated program has %d actions matching the trace's %d: the trace's configuration "
                       "(grid, schedule, micro-batches) is not what the planner builds",
                       seen, run->program->num_actions);
      trace_run_free(&pred);
    }
    if (!rc) compare_programs(run->program, prog_path, p);
    p->iteration_ms = res.step_time * 1e3;
    char desc[160], facts[320];
    plan_runtime_facts_describe(&cluster.runtime, facts, sizeof facts);
    snprintf(p->how, sizeof p->how,
             "the planner's simulator on the trace's configuration (%s, %s) with model otherData.model and cluster "
             "%s, %s%s; the run's precision, dispatcher and buckets from otherData.config",
             plan_config_describe(&cfg, desc, sizeof desc), plan_dtype_name(cfg.dtype), cluster.name,
             facts[0] ? "the spec's runtime facts: " : "default planner options (the spec has no runtime facts)",
             facts);
  }
  remove(pred_path);
  remove(prog_path);
  plan_result_free(&res);
  cluster.device_of_rank = NULL; /* the mapping's, not the spec's */
  cluster_spec_free(&cluster);
  return rc;
}

/* (predicted - measured) / measured in percent; under 0.05 in size it
 * prints as 0.0, not as -0.0 for a rounding below zero. */
static double percent_error(double predicted, double measured) {
  double e = 100.0 * (predicted - measured) / measured;
  return fabs(e) < 0.05 ? 0.0 : e;
}

static int cmd_compare(int argc, char **argv) {
  const char *file = NULL, *cluster = NULL, *plan = NULL;
  int iteration = -1;
  static const char *const KNOWN[] = {"--cluster", "--plan", "--iteration", "--help"};
  OptionParser op;
  Error perr = {0};
  option_parser_init(&op, "trace compare", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    const char *v = NULL;
    if (option_is_help(&op)) {
      trace_usage(stdout);
      return 0;
    }
    if (option_is(&op, "--cluster")) {
      if (option_value(&op, &cluster, &perr)) return usage_error("compare: %s", perr.msg);
    } else if (option_is(&op, "--plan")) {
      if (option_value(&op, &plan, &perr)) return usage_error("compare: %s", perr.msg);
    } else if (option_is(&op, "--iteration")) {
      if (option_value(&op, &v, &perr)) return usage_error("compare: %s", perr.msg);
      if (parse_int(v, &iteration)) return usage_error("compare: --iteration '%s': expected an iteration number", v);
    } else if (!option_is_positional(&op) || (op.arg[0] == '-' && op.arg[1]))
      return usage_error("compare: %s", (option_unknown(&op, &perr), perr.msg));
    else if (file)
      return usage_error("compare: one trace file at a time ('%s' is extra)", op.arg);
    else
      file = op.arg;
  }
  if (!file) return usage_error("%s", "compare: no trace file given");
  Error err = {0};
  TraceRun run;
  TraceReport rep;
  /* Without --iteration, a trace from the run's first step on leaves that
   * step out: it holds one-time costs (kernels set up, memory touched the
   * first time; a one-rank MoE step's forward took twice its later ones),
   * which no prediction of a step prices. */
  if (read_and_analyze(file, iteration, 1, &run, &rep, &err)) return report_failure(&err);
  Prediction p = {.ms = calloc((size_t)run.program->num_actions + 1, sizeof(double))};
  int rc = p.ms ? ERR_OK : error_set(&err, ERR_NOMEM, "out of memory");
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(run.other_data, "model");
  RunMapping mapping;
  memset(&mapping, 0, sizeof mapping);
  if (!rc) rc = resolve_mapping(file, &run, plan, &mapping, &err);
  if (!rc)
    rc = cJSON_IsObject(model) ? predict_plan(&run, model, cluster, &mapping, &p, &err)
                               : predict_unit(&run, &rep, &p, &err);
  if (rc) {
    error_wrap(&err, "%s: predicting", file);
  } else {
    printf("%s: %d iteration%s measured on %d rank%s, %s program\n", file, rep.num_iterations,
           rep.num_iterations == 1 ? "" : "s", run.num_ranks, run.num_ranks == 1 ? "" : "s",
           sched_schedule_name(run.program->config.schedule));
    printf("prediction: %s.\n", p.how);
    if (p.program_note[0]) printf("%s.\n", p.program_note);
    print_mapping(&mapping, cJSON_IsObject(model));
    if (p.other_machine) {
      printf("warning: %s.\n", p.warning);
      fprintf(stderr, "fivefold trace compare: warning: %s\n", p.warning);
    }
    int first = rep.iters[0].iteration, last = rep.iters[rep.num_iterations - 1].iteration, lo = 0, hi = 0;
    int left_out = iteration < 0 && trace_run_iteration_range(&run, &lo, &hi) == 0 && first > lo;
    char over[64];
    if (first == last) snprintf(over, sizeof over, "iteration %d", first);
    else snprintf(over, sizeof over, "iterations %d..%d", first, last);
    printf("measured: mean duration of each kind's actions over every rank and %s%s (a posted receive or reduction "
           "lasts from its post to its completion, waiting included); predicted: the mean of the same actions' "
           "durations in the prediction.\n",
           over, left_out ? " (iteration 0, the run's first step, holds one-time costs and is left out; --iteration 0 "
                            "shows it)" : "");
    printf("  %-14s %7s %13s %13s %9s\n", "kind", "count", "measured ms", "predicted ms", "error");
    double meas_it = rep.iteration_time.mean / 1e6;
    printf("  %-14s %7d %13.3f %13.3f", "iteration", rep.iteration_time.count, meas_it, p.iteration_ms);
    if (meas_it > 0 && !p.other_machine)
      printf(" %8.1f%%\n", percent_error(p.iteration_ms, meas_it));
    else
      printf(" %9s\n", p.other_machine ? "n/a" : "-");
    for (int k = 0; k < SCHED_NUM_ACTION_KINDS; k++) {
      const TraceTimeStats *st = &rep.action_kind[k];
      double sum = 0;
      int n = 0;
      for (int i = 0; i < run.program->num_actions; i++)
        if (run.program->actions[i].kind == (SchedActionKind)k) {
          sum += p.ms[i];
          n++;
        }
      if (!st->count || !n) continue;
      double meas = st->mean / 1e6, pred = sum / n;
      printf("  %-14s %7d %13.3f %13.3f", sched_action_kind_name((SchedActionKind)k), st->count, meas, pred);
      if (meas > 0 && !p.other_machine)
        printf(" %8.1f%%\n", percent_error(pred, meas));
      else
        printf(" %9s\n", p.other_machine ? "n/a" : "-");
    }
    printf("error = (predicted - measured) / measured%s\n",
           p.other_machine ? "; n/a: the spec describes another machine (see the warning)" : "");
  }
  free(p.ms);
  free(mapping.device_of_rank);
  trace_report_free(&rep);
  trace_run_free(&run);
  return rc ? report_failure(&err) : 0;
}

int cmd_trace(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
    trace_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "record")) return cmd_record(argc - 1, argv + 1);
  if (!strcmp(argv[1], "analyze")) return cmd_analyze(argc - 1, argv + 1);
  if (!strcmp(argv[1], "compare-ready")) return cmd_compare_ready(argc - 1, argv + 1);
  if (!strcmp(argv[1], "compare")) return cmd_compare(argc - 1, argv + 1);
  return usage_error("unknown subcommand '%s' (record, analyze, compare or compare-ready)", argv[1]);
}
