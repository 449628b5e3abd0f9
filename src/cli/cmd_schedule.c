/* `fivefold schedule`: builds the program for a pipeline configuration,
 * checks it, prints it as a table, prices it with unit costs (makespan and
 * bubble next to the textbook formula) and optionally writes the program as
 * JSON and a Chrome trace. Option parsing is hand-rolled so the command can
 * be called repeatedly in one process (tests). */
#include "cli/cmd_schedule.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "sched/builders.h"
#include "sched/check.h"
#include "sched/evaluate.h"
#include "sched/partition.h"
#include "sched/program.h"
#include "sched/trace_json.h"

/* One unit of cost is shown as one millisecond in the trace. */
#define TRACE_US_PER_UNIT 1000.0

static void schedule_usage(FILE *f) {
  fprintf(f,
          "usage: fivefold schedule --pp N [--vpp V] --microbatches M [options]\n\n"
          "Builds the per-rank program of one training iteration, checks it (every send matched,\n"
          "every forward/backward once, deadlock-free under blocking send/receive), prints it and\n"
          "prices it with unit costs.\n\n"
          "options:\n"
          "  --pp N                   pipeline ranks (default 1)\n"
          "  --vpp V                  model chunks (virtual stages) per rank (default 1)\n"
          "  --microbatches M         micro-batches per iteration (default: pp)\n"
          "  --param-groups G         parameter groups stepped in phases of their own (a GAN's generator\n"
          "                           and critic): the iteration is G phases, each FWD/BWD, GRAD_REDUCE\n"
          "                           and OPTIM naming its group (default 1)\n"
          "  --schedule S             none | gpipe | 1f1b | zb-h1 | interleaved (default: none for pp 1,\n"
          "                           interleaved for vpp > 1, else 1f1b); zb-h1 splits each backward\n"
          "                           into B (input gradient) and W (weight gradients, filling bubbles)\n"
          "  --warmup LIST            1f1b / zb-h1 / interleaved: forwards each rank runs before its first\n"
          "                           backward, one per rank, e.g. 4,2,1,0 (default p-r-1; interleaved:\n"
          "                           2(p-r-1)+(v-1)p chunk forwards, the last rank's at least (v-1)p)\n"
          "  --layers L               transformer blocks, balanced over the pp*vpp stages\n"
          "  --layers-per-stage LIST  blocks per stage in stage order (stage = chunk*pp + rank), e.g. 2,3,3\n"
          "  --embedding-weight W     cost of the embedding in blocks when balancing (default 0)\n"
          "  --head-weight W          cost of the LM head + loss in blocks when balancing (default 0)\n"
          "  --allow-empty-stages     let a stage hold no blocks\n"
          "  --layer-costs            scale each stage's forward/backward cost by its weight / mean weight\n"
          "  --fwd-cost X             cost of one forward of one chunk in units (default 1)\n"
          "  --bwd-cost X             cost of one backward of one chunk in units (default 2)\n"
          "  --weight-cost X          the part of it a split backward's W takes (default half)\n"
          "  --comm-cost X            transfer time of each send/receive in units (default 0)\n"
          "  --blocking               price sends as blocking (rendezvous) instead of buffered\n"
          "  --view actions|time      print the per-rank action lists (default) or a chart with\n"
          "                           one row per time slot\n"
          "  --trace FILE             write a Chrome trace of the priced program (1 unit = 1 ms)\n"
          "  --json FILE              write the program as JSON\n"
          "  -h, --help               show this help\n");
}

typedef struct ScheduleOptions {
  SchedConfig cfg;
  int schedule_given, microbatches_given, weight_cost_given;
  int layers;
  const char *layers_per_stage;
  double embedding_weight, head_weight;
  int allow_empty, layer_costs, blocking, time_view;
  SchedUnitCosts costs;
  const char *trace_path, *json_path;
} ScheduleOptions;

static int parse_int_arg(const char *opt, const char *s, int lo, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > 1000000000L) {
    fprintf(stderr, "fivefold schedule: %s expects an integer >= %d, got '%s'\n", opt, lo, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int parse_double_arg(const char *opt, const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !(v >= 0) || isinf(v)) {
    fprintf(stderr, "fivefold schedule: %s expects a number >= 0, got '%s'\n", opt, s);
    return -1;
  }
  *out = v;
  return 0;
}

/* Returns 0, 1 for --help, or -1 on a usage error (already reported). */
static int parse_options(int argc, char **argv, ScheduleOptions *o) {
  memset(o, 0, sizeof *o);
  o->cfg.pp = 1;
  o->cfg.vpp = 1;
  o->costs = sched_unit_costs_default();
  static const char *const kFlags[] = {"--allow-empty-stages", "--layer-costs", "--blocking"};
  static const char *const kValued[] = {"--pp",          "--vpp",         "--microbatches", "--schedule",
                                        "--layers",      "--layers-per-stage", "--embedding-weight",
                                        "--param-groups",
                                        "--head-weight", "--fwd-cost",    "--bwd-cost",     "--comm-cost",
                                        "--trace",       "--json",        "--view",         "--warmup",
                                        "--weight-cost"};
  const char *known_names[sizeof kFlags / sizeof kFlags[0] + sizeof kValued / sizeof kValued[0] + 1];
  int n_known = 0;
  for (size_t k = 0; k < sizeof kFlags / sizeof kFlags[0]; k++) known_names[n_known++] = kFlags[k];
  for (size_t k = 0; k < sizeof kValued / sizeof kValued[0]; k++) known_names[n_known++] = kValued[k];
  known_names[n_known++] = "--help";
  OptionParser op;
  Error perr = {0};
  option_parser_init(&op, "schedule", argc, argv, known_names, n_known);
  while (option_next(&op)) {
    if (option_is_help(&op)) return 1;
    const char *name = op.name, *value = NULL;
    int is_flag = 0;
    for (size_t k = 0; k < sizeof kFlags / sizeof kFlags[0]; k++) is_flag |= !strcmp(name, kFlags[k]);
    if (is_flag) {
      if (option_switch(&op, &perr)) {
        fprintf(stderr, "fivefold schedule: %s\n", perr.msg);
        return -1;
      }
      if (!strcmp(name, "--allow-empty-stages")) o->allow_empty = 1;
      if (!strcmp(name, "--layer-costs")) o->layer_costs = 1;
      if (!strcmp(name, "--blocking")) o->blocking = 1;
      continue;
    }
    int known = 0;
    for (size_t k = 0; k < sizeof kValued / sizeof kValued[0]; k++) known |= !strcmp(name, kValued[k]);
    if (!known) {
      option_unknown(&op, &perr);
      fprintf(stderr, "fivefold schedule: %s\n", perr.msg);
      return -1;
    }
    if (option_value(&op, &value, &perr)) {
      fprintf(stderr, "fivefold schedule: %s\n", perr.msg);
      return -1;
    }
    int rc = 0;
    if (!strcmp(name, "--pp")) rc = parse_int_arg(name, value, 1, &o->cfg.pp);
    else if (!strcmp(name, "--vpp")) rc = parse_int_arg(name, value, 1, &o->cfg.vpp);
    else if (!strcmp(name, "--param-groups")) rc = parse_int_arg(name, value, 1, &o->cfg.param_groups);
    else if (!strcmp(name, "--microbatches")) {
      rc = parse_int_arg(name, value, 1, &o->cfg.microbatches);
      o->microbatches_given = 1;
    } else if (!strcmp(name, "--schedule")) {
      if (sched_schedule_from_name(value, &o->cfg.schedule) || o->cfg.schedule == SCHED_SCHEDULE_CUSTOM) {
        fprintf(stderr, "fivefold schedule: --schedule must be none, gpipe, 1f1b, zb-h1 or interleaved, got '%s'\n", value);
        rc = -1;
      }
      o->schedule_given = 1;
    } else if (!strcmp(name, "--layers")) rc = parse_int_arg(name, value, 1, &o->layers);
    else if (!strcmp(name, "--layers-per-stage")) o->layers_per_stage = value;
    else if (!strcmp(name, "--embedding-weight")) rc = parse_double_arg(name, value, &o->embedding_weight);
    else if (!strcmp(name, "--head-weight")) rc = parse_double_arg(name, value, &o->head_weight);
    else if (!strcmp(name, "--fwd-cost")) rc = parse_double_arg(name, value, &o->costs.fwd);
    else if (!strcmp(name, "--bwd-cost")) rc = parse_double_arg(name, value, &o->costs.bwd);
    else if (!strcmp(name, "--comm-cost")) rc = parse_double_arg(name, value, &o->costs.transfer);
    else if (!strcmp(name, "--weight-cost")) {
      rc = parse_double_arg(name, value, &o->costs.bwd_weight);
      o->weight_cost_given = 1;
    } else if (!strcmp(name, "--warmup")) {
      int *depths = NULL, count = 0;
      if (sched_partition_parse_list(value, &depths, &count, &perr) || count > SCHED_MAX_WARMUP_RANKS) {
        fprintf(stderr, "fivefold schedule: --warmup: %s\n", count > SCHED_MAX_WARMUP_RANKS ? "too many ranks" : perr.msg);
        rc = -1;
      } else {
        o->cfg.warmup_set = count;
        memcpy(o->cfg.warmup, depths, (size_t)count * sizeof *depths);
      }
      free(depths);
    }
    else if (!strcmp(name, "--trace")) o->trace_path = value;
    else if (!strcmp(name, "--json")) o->json_path = value;
    else if (!strcmp(name, "--view")) {
      if (!strcmp(value, "time")) o->time_view = 1;
      else if (strcmp(value, "actions")) {
        fprintf(stderr, "fivefold schedule: --view must be actions or time, got '%s'\n", value);
        rc = -1;
      }
    }
    if (rc) return -1;
  }
  if (!o->microbatches_given) o->cfg.microbatches = o->cfg.pp;
  if (!o->schedule_given)
    o->cfg.schedule = o->cfg.vpp > 1 ? SCHED_SCHEDULE_INTERLEAVED : o->cfg.pp > 1 ? SCHED_SCHEDULE_1F1B : SCHED_SCHEDULE_NONE;
  if (o->layer_costs && !o->layers && !o->layers_per_stage) {
    fprintf(stderr, "fivefold schedule: --layer-costs needs --layers or --layers-per-stage\n");
    return -1;
  }
  /* Sends are placed for the costs the program will be priced with. */
  o->cfg.order_fwd_cost = o->costs.fwd > 0 ? o->costs.fwd : 0;
  o->cfg.order_bwd_cost = o->costs.bwd > 0 ? o->costs.bwd : 0;
  if (!o->weight_cost_given) o->costs.bwd_weight = o->costs.bwd / 2;
  return 0;
}

static void print_summary(const ScheduleOptions *o, const SchedProgram *prog, const SchedEval *ev, FILE *f) {
  const SchedConfig *c = &prog->config;
  int p = c->pp, v = c->vpp, m = c->microbatches;
  char split[64] = "";
  if (c->split_backward)
    snprintf(split, sizeof split, " = B %g + W %g", o->costs.bwd - o->costs.bwd_weight, o->costs.bwd_weight);
  fprintf(f, "\nmakespan %.2f units (forward %g, backward %g%s per chunk, transfer %g, %s sends)\n", ev->makespan,
          o->costs.fwd, o->costs.bwd, split, o->costs.transfer, o->blocking ? "blocking" : "buffered");
  double textbook = (double)(p - 1) / (m + p - 1);
  fprintf(f, "bubble %.2f%% of rank time (textbook (p-1)/(m+p-1) = %.2f%%", 100 * ev->bubble_fraction, 100 * textbook);
  if (v > 1) fprintf(f, ", interleaved (p-1)/(v*m+p-1) = %.2f%%", 100.0 * (p - 1) / ((double)v * m + p - 1));
  fprintf(f, ")\n");
  for (int r = 0; r < prog->num_ranks; r++)
    fprintf(f, "  rank %d: busy %.2f, idle %.2f units (%.1f%%), warm-up %d forwards\n", r, ev->busy[r],
            sched_eval_rank_idle(ev, r), ev->makespan > 0 ? 100 * sched_eval_rank_idle(ev, r) / ev->makespan : 0.0,
            sched_warmup_forwards(c, r));
}

int cmd_schedule(int argc, char **argv) {
  ScheduleOptions o;
  int prc = parse_options(argc, argv, &o);
  if (prc == 1) {
    schedule_usage(stdout);
    return 0;
  }
  if (prc < 0) return 2;
  Error err = {0, ""};
  SchedProgram *prog = NULL;
  SchedPartition part;
  memset(&part, 0, sizeof part);
  SchedEval ev;
  memset(&ev, 0, sizeof ev);
  double *stage_scale = NULL;
  int *given = NULL, num_given = 0, rc = 0;

  if (sched_config_validate(&o.cfg, &err)) {
    fprintf(stderr, "fivefold schedule: %s\n", err.msg);
    return 2;
  }
  if (o.layers || o.layers_per_stage) {
    if (o.layers_per_stage && sched_partition_parse_list(o.layers_per_stage, &given, &num_given, &err)) {
      fprintf(stderr, "fivefold schedule: --layers-per-stage: %s\n", err.msg);
      return 2;
    }
    SchedPartitionSpec spec = {o.layers, o.cfg.pp, o.cfg.vpp, given, num_given, o.embedding_weight, o.head_weight,
                               o.allow_empty};
    if (sched_partition_make(&spec, &part, &err)) {
      fprintf(stderr, "fivefold schedule: %s\n", err.msg);
      free(given);
      return 2;
    }
    printf("partition of %d layers over %d stages:\n", part.num_layers, part.num_stages);
    sched_partition_print(&part, stdout);
    putchar('\n');
    if (o.layer_costs) {
      stage_scale = malloc((size_t)part.num_stages * sizeof *stage_scale);
      if (!stage_scale) goto nomem;
      for (int s = 0; s < part.num_stages; s++)
        stage_scale[s] = part.mean_weight > 0 ? part.weight[s] / part.mean_weight : 1.0;
      o.costs.stage_scale = stage_scale;
      o.costs.num_stages = part.num_stages;
    }
  }

  if (sched_build(&o.cfg, &prog, &err)) goto fail;
  Error check_err = {0, ""};
  int check_rc = sched_check(prog, &check_err);
  printf("schedule %s: pp %d, vpp %d, %d micro-batches, %d actions; check %s\n", sched_schedule_name(o.cfg.schedule),
         o.cfg.pp, o.cfg.vpp, o.cfg.microbatches, prog->num_actions, check_rc ? "FAILED" : "passed");
  if (check_rc) {
    fprintf(stderr, "fivefold schedule: %s\n", check_err.msg);
    rc = 1;
  }
  o.costs.split_backward = prog->config.split_backward;
  SchedEvalOptions eopts = sched_unit_eval_options(&o.costs, o.blocking ? SCHED_SEND_RENDEZVOUS : SCHED_SEND_EAGER);
  int eval_rc = sched_evaluate(prog, &eopts, &ev, &err);
  if (eval_rc && eval_rc != ERR_CONFIG) goto fail;
  putchar('\n');
  if (o.time_view)
    sched_eval_print_timeline(prog, &ev, stdout);
  else
    sched_program_print_table(prog, stdout);
  if (eval_rc) {
    fprintf(stderr, "fivefold schedule: %s\n", err.msg);
    rc = 1;
  } else {
    print_summary(&o, prog, &ev, stdout);
  }
  if (o.json_path) {
    if (sched_program_write_json(prog, o.json_path, &err)) goto fail;
    printf("wrote program JSON to %s\n", o.json_path);
  }
  if (o.trace_path) {
    if (sched_trace_write(prog, &ev, TRACE_US_PER_UNIT, o.trace_path, &err)) goto fail;
    printf("wrote Chrome trace to %s (1 unit = 1 ms)\n", o.trace_path);
  }
  goto done;
nomem:
  error_set(&err, ERR_NOMEM, "out of memory");
fail:
  fprintf(stderr, "fivefold schedule: %s\n", err.msg);
  rc = 1;
done:
  sched_eval_free(&ev);
  sched_program_free(prog);
  sched_partition_free(&part);
  free(stage_scale);
  free(given);
  return rc;
}
