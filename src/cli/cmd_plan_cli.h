/* The state `fivefold plan` and `fivefold simulate` share between their
 * files: the parsed command line (PlanCli), its parser and help
 * (cmd_plan_args.c) and the printing of results (cmd_plan_print.c); the
 * commands themselves live in cmd_plan.c. Internal to src/cli/. */
#ifndef FIVEFOLD_CLI_CMD_PLAN_CLI_H
#define FIVEFOLD_CLI_CMD_PLAN_CLI_H

#include <stdio.h>

#include "base/error.h"
#include "cli/cmd_plan_accuracy.h"
#include "plan/buckets.h"
#include "plan/fusion.h"
#include "plan/plan_file.h"
#include "plan/search.h"
#include "plan/simulate.h"

#define MAX_EXPERT_LOAD 65536 /* E per MoE layer: 94 layers of 512 experts fit */

typedef struct PlanCli {
  const char *cmd;
  const char *model, *cluster;
  int gpus, seq, global_batch;
  PlanDtype dtype;
  PlanOptions opt;
  unsigned given; /* PLAN_GIVEN_* bits: options the command line set (they win over the spec's runtime facts) */
  double expert_load[MAX_EXPERT_LOAD];
  /* simulate */
  PlanConfig cfg;
  const char *trace_path, *layers_list, *plan_path, *widths_list;
  const char *program_path; /* simulate --program */
  PlanAccuracyOptions accuracy; /* simulate's layout, recomputation and FLOPs options */
  PlanChoice plan; /* --plan FILE: its model and cluster names live here */
  int explain, quiet;
  /* plan */
  int top;
  const char *out_path;
  PlanSearchSpace space;
  const char *mbs_list, *recompute_list;
  int no_folding, no_distopt, force_distopt;
  int map_devices; /* 1 / -1: --map-devices / --no-map-devices; 0: when the cluster is irregular */
  int no_refine_partition, no_search_order, replicate_stages, no_bucket_search, search_buckets;
  PlanBucketChoice buckets;
  int have_buckets;
  /* operator fusion: --fuse-swiglu / --fuse-bias-gelu (or a --plan's) fix the switches; else plan searches them */
  int fusion_given;
  PlanFusionChoice fusion;
  /* --explore: per-layer plans around the best layout (explore_space.h) */
  const char *explore, *explore_groups, *explore_recompute;
  int explore_budget, explore_seed, explore_shift;
} PlanCli;

/* Defaults for cmd ("plan" or "simulate"). */
void plan_cli_init(PlanCli *c, const char *cmd);
/* Returns 0, 1 for --help, or -1 on a usage error (reported). */
int plan_cli_parse_args(int argc, char **argv, PlanCli *c, int simulate);
/* plan: --mbs-list, --recompute-list and the optimizer flags into c->space; -1 reported. */
int plan_cli_parse_search_lists(PlanCli *c);
void plan_cli_simulate_usage(FILE *f);
void plan_cli_plan_usage(FILE *f);

/* A calibrated spec says what its machine's runtime does; what the command
 * line did not set follows it (printed to f unless NULL). */
void plan_cli_apply_runtime_facts(PlanCli *c, const ClusterSpec *cluster, FILE *f);
void plan_cli_print_summary(const PlanResult *r, FILE *f);
/* The `fivefold simulate` command that prices best alone. */
void plan_cli_print_simulate_line(const PlanCli *c, const PlanConfig *best);
int plan_cli_explain_best(const PlanCli *c, const PlanResult *best, double unreplicated, const ModelConfig *model,
                          const ClusterSpec *cluster, Error *err);

#endif
