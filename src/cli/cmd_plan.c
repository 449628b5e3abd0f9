/* `fivefold plan` and `fivefold simulate`: command-line front ends to the
 * planner (src/plan/). simulate predicts one configuration (step time, MFU,
 * where the time goes, memory per stage, optionally a Chrome trace);
 * plan searches all configurations for a model on a cluster, prints the
 * best as a table and writes the plan JSON `fivefold train --plan` reads.
 * This file runs the two commands; their options and help are in
 * cmd_plan_args.c, what they print about results in cmd_plan_print.c. */
#include "cli/cmd_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd_plan_cli.h"
#include "plan/config_paths.h"
#include "plan/explore_space.h"
#include "plan/mapping.h"
#include "plan/order.h"
#include "plan/plan_file.h"
#include "plan/refine.h"
#include "plan/replicate.h"
#include "sched/partition.h"

/* Loads the model and cluster named on the command line. */
static int load_inputs(const PlanCli *c, ModelConfig *model, ClusterSpec *cluster) {
  char path[4096];
  Error err = {0, ""};
  if (plan_find_config("models", c->model, path, sizeof path, &err) || plan_load_model(path, model, NULL, &err)) {
    fprintf(stderr, "fivefold %s: %s\n", c->cmd, err.msg);
    return -1;
  }
  if (plan_find_config("clusters", c->cluster, path, sizeof path, &err) || cluster_spec_load(cluster, path, &err)) {
    fprintf(stderr, "fivefold %s: %s\n", c->cmd, err.msg);
    return -1;
  }
  int E = model->num_experts, rows = E > 0 ? c->opt.num_expert_load / E : 0;
  if (c->opt.num_expert_load && (E <= 0 || c->opt.num_expert_load % E || rows > model_config_num_moe_layers(model))) {
    fprintf(stderr,
            "fivefold %s: --expert-load has %d entries; expected the model's %d experts, or one row of them per MoE "
            "layer (at most %d rows)\n",
            c->cmd, c->opt.num_expert_load, E, model_config_num_moe_layers(model));
    return -1;
  }
  return 0;
}

/* The best configuration simulated again with the options a search chose
 * (its device mapping kept). */
static int resimulate_best(const PlanCli *c, PlanResult *best, const ModelConfig *model, const ClusterSpec *view,
                           Error *err) {
  PlanSimOptions sim = {.exposed_p2p = 1};
  PlanResult r;
  PlanConfig cfg = best->cfg;
  int rc = plan_simulate(model, view, &c->opt, &cfg, &sim, NULL, &r, err);
  if (rc) return rc;
  plan_result_replace_keep_mapping(best, &r);
  return 0;
}

/* The bucket search on the best configuration (buckets.h), when it reduces
 * gradients at all: the chosen size replaces the options' for what follows
 * (explain, the simulate line, the plan file) and the best is simulated
 * again with it, keeping its device mapping. */
static int plan_search_buckets_cli(PlanCli *c, PlanResult *best, const ModelConfig *model, const ClusterSpec *cluster,
                                   Error *err) {
  const PlanParallel *p = &best->cfg.par;
  if (p->dp * p->cp <= 1 && p->edp <= 1) return 0;
  ClusterSpec view = plan_result_cluster_view(cluster, best);
  PlanOptions chosen;
  int rc = plan_buckets_search_uniform(model, &view, &c->opt, &best->cfg, &c->buckets, &chosen, err);
  if (rc) return rc;
  c->opt = chosen;
  c->have_buckets = 1;
  if ((rc = resimulate_best(c, best, model, &view, err))) return rc;
  best->bucket_choice = &c->buckets;
  printf("\n");
  plan_bucket_explain(&c->buckets, stdout);
  return 0;
}

/* The fusion search on the best configuration (fusion.h), unless the
 * command line fixed the switches: the chosen kernels replace the
 * options' and the best is simulated again with them. */
static int plan_search_fusion_cli(PlanCli *c, PlanResult *best, const ModelConfig *model, const ClusterSpec *cluster,
                                  Error *err) {
  ClusterSpec view = plan_result_cluster_view(cluster, best);
  PlanOptions chosen;
  int rc = plan_fusion_search(model, &view, &c->opt, &best->cfg, &c->fusion, &chosen, err);
  if (rc) return rc;
  c->opt = chosen;
  if ((rc = resimulate_best(c, best, model, &view, err))) return rc;
  best->fusion_choice = &c->fusion;
  printf("\n");
  plan_fusion_explain(&c->fusion, stdout);
  return 0;
}

/* --plan FILE (either form) sets what the plan chose before parse_args
 * reads the command line, so that options given as well override it. */
static int apply_plan_option(int argc, char **argv, PlanCli *c) {
  const char *path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--plan") && i + 1 < argc) path = argv[i + 1];
    else if (!strncmp(argv[i], "--plan=", 7)) path = argv[i] + 7;
  }
  if (!path) return 0;
  Error err = {0, ""};
  PlanChoice *pc = &c->plan;
  if (plan_file_read(path, pc, &err)) {
    fprintf(stderr, "fivefold simulate: --plan: %s\n", err.msg);
    return -1;
  }
  if (!strcmp(pc->family, "vision")) {
    fprintf(stderr, "fivefold simulate: --plan %s: a vision network's plan (field \"family\"); price it with "
            "fivefold simulate --net %s\n", path, pc->model[0] ? pc->model : "FILE");
    return -1;
  }
  if (!pc->model[0]) {
    fprintf(stderr, "fivefold simulate: --plan %s: the plan names no model (field \"model\"); give --model\n", path);
    return -1;
  }
  c->model = pc->model;
  c->cluster = pc->cluster;
  c->gpus = pc->gpus;
  c->seq = pc->seq_len;
  c->global_batch = pc->global_batch_size;
  c->dtype = pc->dtype;
  PlanParallel *p = &c->cfg.par;
  p->tp = pc->tp, p->cp = pc->cp, p->pp = pc->pp, p->vpp = pc->vpp, p->ep = pc->ep, p->etp = pc->etp;
  c->cfg.micro_batch_size = pc->micro_batch_size;
  c->cfg.recompute = pc->recompute;
  if (pc->recompute == PLAN_RECOMPUTE_SELECTIVE) c->cfg.recompute_modules = pc->recompute_modules; /* as priced */
  if (pc->recompute == PLAN_RECOMPUTE_FULL) { /* the method and count the trainer applies */
    c->cfg.recompute_method = pc->recompute_method;
    c->cfg.recompute_num_layers = pc->recompute_num_layers;
  }
  c->cfg.distributed_optimizer = pc->distributed_optimizer;
  c->cfg.schedule = pc->schedule;
  c->cfg.schedule_given = 1;
  c->cfg.warmup_set = pc->num_warmup;
  memcpy(c->cfg.warmup, pc->warmup, sizeof c->cfg.warmup);
  /* The order costs the plan's program was built with (0: the defaults). */
  c->cfg.order_given = 1;
  c->cfg.order_fwd_cost = pc->order_fwd_cost;
  c->cfg.order_bwd_cost = pc->order_bwd_cost;
  c->cfg.num_given_layers = pc->num_stages < PLAN_MAX_STAGES ? pc->num_stages : PLAN_MAX_STAGES;
  memcpy(c->cfg.layers_per_stage, pc->layers_per_stage, (size_t)c->cfg.num_given_layers * sizeof(int));
  c->cfg.num_stage_widths = pc->num_stage_widths;
  memcpy(c->cfg.stage_width, pc->stage_width, (size_t)pc->num_stage_widths * sizeof(int));
  if (pc->fuse_swiglu >= 0) c->opt.fuse_swiglu = pc->fuse_swiglu, c->fusion_given = 1;
  if (pc->fuse_bias_gelu >= 0) c->opt.fuse_bias_gelu = pc->fuse_bias_gelu, c->fusion_given = 1;
  if (pc->fuse_norm_residual >= 0) c->opt.fuse_norm_residual = pc->fuse_norm_residual, c->fusion_given = 1;
  return 0;
}

int cmd_simulate(int argc, char **argv) {
  PlanCli *c = calloc(1, sizeof *c);
  if (!c) return 1;
  plan_cli_init(c, "simulate");
  if (apply_plan_option(argc, argv, c)) {
    free(c);
    return 1;
  }
  int rc = plan_cli_parse_args(argc, argv, c, 1);
  if (rc) {
    if (rc > 0) plan_cli_simulate_usage(stdout);
    free(c);
    return rc > 0 ? 0 : 2;
  }
  ModelConfig model;
  ClusterSpec cluster;
  memset(&cluster, 0, sizeof cluster);
  int exit_code = 1, *mapping = NULL, mapped = 0;
  Error err = {0, ""};
  if (load_inputs(c, &model, &cluster)) goto out;
  plan_cli_apply_runtime_facts(c, &cluster, c->quiet ? NULL : stdout);
  c->cfg.seq_len = c->seq;
  c->cfg.global_batch_size = c->global_batch;
  c->cfg.dtype = c->dtype;
  if (plan_accuracy_apply_split(&c->accuracy, &model, &c->cfg)) {
    exit_code = 2;
    goto out;
  }
  if (c->layers_list) {
    int *vals = NULL, n = 0;
    if (sched_partition_parse_list(c->layers_list, &vals, &n, &err)) {
      fprintf(stderr, "fivefold simulate: --layers-per-stage: %s\n", err.msg);
      exit_code = 2;
      goto out;
    }
    if (n > PLAN_MAX_STAGES) n = PLAN_MAX_STAGES;
    memcpy(c->cfg.layers_per_stage, vals, (size_t)n * sizeof *vals);
    c->cfg.num_given_layers = n;
    free(vals);
  }
  if (c->widths_list) {
    int *vals = NULL, n = 0;
    if (sched_partition_parse_list(c->widths_list, &vals, &n, &err) || n > PLAN_MAX_STAGES) {
      fprintf(stderr, "fivefold simulate: --stage-widths: %s\n", n > PLAN_MAX_STAGES ? "too many stages" : err.msg);
      free(vals);
      exit_code = 2;
      goto out;
    }
    memcpy(c->cfg.stage_width, vals, (size_t)n * sizeof *vals);
    c->cfg.num_stage_widths = n;
    free(vals);
  }
  /* Stage replication: the grids are planned for the stages, the devices
   * are the widths' sum (plan/replicate.h). */
  int grid_gpus = c->gpus;
  if (c->cfg.num_stage_widths) {
    int sum = 0;
    for (int s = 0; s < c->cfg.num_stage_widths; s++) sum += c->cfg.stage_width[s];
    if (sum != c->gpus) {
      fprintf(stderr, "fivefold simulate: --stage-widths sum to %d devices but --gpus is %d\n", sum, c->gpus);
      exit_code = 2;
      goto out;
    }
    if (c->cfg.par.pp <= 1) c->cfg.par.pp = c->cfg.num_stage_widths;
    grid_gpus = (c->cfg.par.tp > 0 ? c->cfg.par.tp : 1) * (c->cfg.par.cp > 0 ? c->cfg.par.cp : 1) * c->cfg.par.pp;
  }
  if (plan_config_finish(&c->cfg, &model, &cluster, grid_gpus, &err)) {
    fprintf(stderr, "fivefold simulate: %s\n", err.msg);
    exit_code = 2;
    goto out;
  }
  /* A plan's device mapping: every group and transfer priced on the
   * devices its ranks run on, as `train --plan` places them. */
  if (c->plan_path) {
    if (plan_file_read_mapping(c->plan_path, &mapping, &mapped, &err)) {
      fprintf(stderr, "fivefold simulate: --plan: %s\n", err.msg);
      goto out;
    }
    if (mapping && !plan_mapping_is_identity(mapping, mapped)) {
      if (mapped > cluster_spec_total_devices(&cluster)) {
        fprintf(stderr, "fivefold simulate: --plan %s: its mapping places %d ranks, the cluster has %d devices\n",
                c->plan_path, mapped, cluster_spec_total_devices(&cluster));
        goto out;
      }
      cluster.device_of_rank = mapping;
      cluster.num_mapped = mapped;
      if (!c->quiet) {
        printf("device mapping of %s: device of rank 0..%d:", c->plan_path, mapped - 1);
        for (int i = 0; i < mapped && i < 64; i++) printf(" %d", mapping[i]);
        printf("\n");
      }
    }
  }
  if (plan_accuracy_apply_block(&model, &cluster, &c->opt, &c->cfg)) goto out;
  PlanSimOptions sim = {.exposed_p2p = 1, .trace_path = c->trace_path, .program_path = c->program_path};
  PlanResult r;
  if (plan_simulate(&model, &cluster, &c->opt, &c->cfg, &sim, NULL, &r, &err)) {
    fprintf(stderr, "fivefold simulate: %s\n", err.msg);
    goto out;
  }
  if (c->quiet) {
    plan_cli_print_summary(&r, stdout);
  } else {
    printf("model %s on %d x %s, sequence %d, global batch %d, %s\n\n", c->model, c->gpus, cluster.name, c->seq,
           c->global_batch, plan_dtype_name(c->dtype));
    plan_result_explain(&r, &model, stdout);
    printf("\n");
    plan_cli_print_summary(&r, stdout);
  }
  plan_accuracy_print_mfu(&c->accuracy, &r, &model, &cluster, c->gpus);
  if (c->trace_path) printf("trace written to %s\n", c->trace_path);
  if (c->program_path) printf("program written to %s\n", c->program_path);
  plan_result_free(&r);
  if (c->search_buckets) {
    PlanOptions chosen;
    if (plan_buckets_search_uniform(&model, &cluster, &c->opt, &c->cfg, &c->buckets, &chosen, &err)) {
      fprintf(stderr, "fivefold simulate: %s\n", err.msg);
      goto out;
    }
    plan_bucket_explain(&c->buckets, stdout);
  }
  exit_code = 0;
out:
  cluster.device_of_rank = NULL;
  free(mapping);
  cluster_spec_free(&cluster);
  free(c);
  return exit_code;
}

/* --explore: per-layer plans around the best layout with vpp 1. */
static int explore_cli(const PlanCli *c, const PlanSearchResult *res, const ModelConfig *model,
                       const ClusterSpec *cluster, Error *err) {
  PlanExploreSpec spec;
  plan_explore_spec_default(&spec);
  if (c->explore_budget) spec.budget = c->explore_budget;
  spec.seed = (uint64_t)(c->explore_seed ? c->explore_seed : 1);
  if (c->explore_shift >= 0) spec.max_shift = c->explore_shift;
  if (c->explore_groups && !strcmp(c->explore_groups, "kind")) spec.groups = PLAN_EXPLORE_GROUP_KIND;
  else if (c->explore_groups && strcmp(c->explore_groups, "layer")) {
    char *end;
    long n = strtol(c->explore_groups, &end, 10);
    if (*end || n < 1)
      return error_set(err, ERR_ARG, "--explore-groups: \"%s\": expected layer, kind or a layer count", c->explore_groups);
    spec.group_size = (int)n;
  }
  if (c->explore_recompute) {
    for (int r = 0; r < PLAN_NUM_RECOMPUTE; r++) spec.allow_recompute[r] = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", c->explore_recompute);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
      PlanRecompute r;
      if (plan_recompute_from_name(tok, &r))
        return error_set(err, ERR_ARG, "--explore-recompute: \"%s\": expected none, selective or full", tok);
      spec.allow_recompute[r] = 1;
    }
  }
  const PlanResult *layout = NULL;
  for (int k = 0; k < res->num_top && !layout; k++)
    if (res->top[k].cfg.par.vpp == 1 && res->top[k].cfg.num_stage_widths == 0) layout = &res->top[k];
  if (!layout) return error_set(err, ERR_CONFIG, "--explore: no listed layout has vpp 1 (try --max-vpp 1)");
  char desc[256];
  printf("\nexploring per-layer plans around %s\n", plan_config_describe(&layout->cfg, desc, sizeof desc));
  ClusterSpec view = plan_result_cluster_view(cluster, layout);
  return plan_explore_run(model, &view, &c->opt, &layout->cfg, c->explore, &spec, c->explain, stdout, err);
}

int cmd_plan(int argc, char **argv) {
  PlanCli *c = calloc(1, sizeof *c);
  if (!c) return 1;
  plan_cli_init(c, "plan");
  PlanSearchSpace limits;
  memset(&limits, 0, sizeof limits);
  c->space = limits;
  c->space.max_vpp = -1;
  c->space.runtime = PLAN_RUNTIME_FIVEFOLD;
  int rc = plan_cli_parse_args(argc, argv, c, 0);
  if (rc) {
    if (rc > 0) plan_cli_plan_usage(stdout);
    free(c);
    return rc > 0 ? 0 : 2;
  }
  PlanSearchSpace given = c->space;
  plan_search_space_default(&c->space, c->gpus, c->seq, c->global_batch);
  c->space.dtype = c->dtype;
  c->space.max_tp = given.max_tp;
  c->space.max_cp = given.max_cp;
  c->space.max_pp = given.max_pp;
  c->space.min_pp = given.min_pp;
  if (given.max_vpp > 0) c->space.max_vpp = given.max_vpp;
  c->space.max_ep = given.max_ep;
  c->space.max_etp = given.max_etp;
  c->space.runtime = given.runtime;
  if (plan_cli_parse_search_lists(c)) {
    free(c);
    return 2;
  }
  ModelConfig model;
  ClusterSpec cluster;
  memset(&cluster, 0, sizeof cluster);
  int exit_code = 1;
  Error err = {0, ""};
  PlanSearchResult res;
  memset(&res, 0, sizeof res);
  if (load_inputs(c, &model, &cluster)) goto out;
  plan_cli_apply_runtime_facts(c, &cluster, stdout);
  c->space.dtype = c->dtype;
  printf("planning %s on %d x %s, sequence %d, global batch %d, %s, for the %s runtime\n\n", c->model, c->gpus,
         cluster.name, c->seq, c->global_batch, plan_dtype_name(c->dtype), plan_runtime_name(c->space.runtime));
  if (plan_search(&model, &cluster, &c->opt, &c->space, c->top, &res, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  plan_search_print_table(&res, &cluster, stdout);
  if (c->map_devices > 0 || (c->map_devices == 0 && cluster_spec_is_irregular(&cluster))) {
    if (plan_result_map_devices(&res.top[0], &model, &cluster, &c->opt, NULL, &err)) {
      fprintf(stderr, "fivefold plan: %s\n", err.msg);
      goto out;
    }
    printf("\n");
    plan_mapping_explain(&res.top[0], stdout);
  }
  if (!c->no_refine_partition) {
    ClusterSpec view = plan_result_cluster_view(&cluster, &res.top[0]);
    PlanRefineStats refine;
    if (plan_partition_refine(&res.top[0], &model, &view, &c->opt, &refine, &err)) {
      fprintf(stderr, "fivefold plan: %s\n", err.msg);
      goto out;
    }
    if (refine.simulated) printf("\n");
    plan_refine_explain(&refine, &res.top[0], stdout);
  }
  if (!c->no_search_order && plan_order_search_explained(&res.top[0], &model, &cluster, &c->opt, stdout, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  if (!c->no_bucket_search && plan_search_buckets_cli(c, &res.top[0], &model, &cluster, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  if (res.num_top > 0 && !c->fusion_given && plan_search_fusion_cli(c, &res.top[0], &model, &cluster, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  double unreplicated = res.num_top > 0 ? res.top[0].step_time : 0;
  if (c->replicate_stages && plan_replicate_stages_cli(&res.top[0], &model, &cluster, &c->opt, c->gpus, stdout, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  if (c->explore && explore_cli(c, &res, &model, &cluster, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  if (res.num_top > 0) plan_cli_print_simulate_line(c, &res.top[0].cfg);
  if (c->explain && plan_cli_explain_best(c, &res.top[0], unreplicated, &model, &cluster, &err)) {
    fprintf(stderr, "fivefold plan: %s\n", err.msg);
    goto out;
  }
  if (c->out_path) {
    if (plan_write_json_for_model(&res.top[0], &res.stats, c->model, &model, cluster.name, c->out_path, &err)) {
      fprintf(stderr, "fivefold plan: %s\n", err.msg);
      goto out;
    }
    printf("\nplan written to %s (use: fivefold train --plan %s; price it: fivefold simulate --plan %s)\n",
           c->out_path, c->out_path, c->out_path);
  }
  exit_code = 0;
out:
  plan_search_result_free(&res);
  cluster_spec_free(&cluster);
  free(c);
  return exit_code;
}
