/* What `fivefold plan` and `fivefold simulate` print about results: the
 * one-line summary, the runtime facts a calibrated spec brought, the
 * simulate command line of the best configuration and --explain's
 * breakdown of the winner. */
#include <stdio.h>

#include "cli/cmd_plan_cli.h"
#include "plan/mapping.h"
#include "plan/order.h"

/* A calibrated spec says what its machine's runtime does; what the command
 * line did not set follows it. */
void plan_cli_apply_runtime_facts(PlanCli *c, const ClusterSpec *cluster, FILE *f) {
  plan_options_from_runtime(&cluster->runtime, c->given, &c->opt, &c->dtype);
  char facts[320];
  if (f && cluster->runtime.given)
    fprintf(f, "runtime (from %s, flags override): %s\n", cluster->name,
            plan_runtime_facts_describe(&cluster->runtime, facts, sizeof facts));
}

/* The `fivefold simulate` command that prices the best configuration
 * alone, so a user can vary it by hand. */
void plan_cli_print_simulate_line(const PlanCli *c, const PlanConfig *best) {
  const PlanParallel *p = &best->par;
  printf("\nsimulate the best: fivefold simulate --model %s --cluster %s --gpus %d --seq %d --global-batch %d "
         "--dtype %s --tp %d --cp %d --pp %d --vpp %d --ep %d --etp %d --mbs %d --schedule %s",
         c->model, c->cluster, c->gpus, c->seq, c->global_batch, plan_dtype_name(c->dtype), p->tp, p->cp, p->pp,
         p->vpp, p->ep, p->etp, best->micro_batch_size, sched_schedule_name(best->schedule));
  if (best->recompute != PLAN_RECOMPUTE_NONE) printf(" --recompute %s", plan_recompute_name(best->recompute));
  if (best->distributed_optimizer) printf(" --distributed-optimizer");
  plan_order_print_flags(best, stdout);
  /* The partition the plan chose (refined by simulation), not a rebalanced one. */
  for (int s = 0; s < best->num_given_layers && best->num_given_layers > 1; s++)
    printf("%s%d", s ? "," : " --layers-per-stage ", best->layers_per_stage[s]);
  for (int s = 0; s < best->num_stage_widths; s++)
    printf("%s%d", s ? "," : " --stage-widths ", best->stage_width[s]);
  if (c->have_buckets) printf(" --bucket-params %.0f", c->buckets.bucket_params);
  /* Unfused kernels, when that is what was priced (fused is the default). */
  if (!c->opt.fuse_swiglu) printf(" --fuse-swiglu 0");
  if (!c->opt.fuse_bias_gelu) printf(" --fuse-bias-gelu 0");
  if (!c->opt.fuse_norm_residual) printf(" --fuse-norm-residual 0");
  printf("\n");
}

void plan_cli_print_summary(const PlanResult *r, FILE *f) {
  fprintf(f, "predicted: step %.1f ms, %.1f%% MFU, %.0f tokens/s, peak memory %.1f GiB per GPU (%s), bottleneck: %s\n",
          1e3 * r->step_time, 100.0 * r->mfu, r->tokens_per_s, r->peak_memory / 1073741824.0,
          r->fits ? "fits" : "DOES NOT FIT", r->bottleneck);
}


/* --explain after the searches: the winner simulated again with the
 * exposed-transfer measurement, broken down, with what stage replication
 * and the bucket search bought. */
int plan_cli_explain_best(const PlanCli *c, const PlanResult *best, double unreplicated, const ModelConfig *model,
                          const ClusterSpec *cluster, Error *err) {
  /* Simulate the winner again with the exposed-transfer measurement. */
  PlanSimOptions sim = {.exposed_p2p = 1};
  PlanResult r;
  PlanConfig cfg = best->cfg;
  ClusterSpec view = plan_result_cluster_view(cluster, best);
  if (plan_simulate(model, &view, &c->opt, &cfg, &sim, NULL, &r, err)) {
    return -1;
  }
  printf("\nbest configuration, explained:\n");
  plan_result_explain(&r, model, stdout);
  if (c->replicate_stages) {
    const PlanConfig *b = &best->cfg;
    if (b->num_stage_widths > 0) {
      printf("  stage replication bought %.1f%% (%.4f -> %.4f s/step) with widths", 100 * (unreplicated / r.step_time - 1),
             unreplicated, r.step_time);
      for (int s = 0; s < b->num_stage_widths; s++) printf("%s%d", s ? "," : " ", b->stage_width[s]);
      printf(" over the best layout with one data-parallel width\n");
    } else {
      printf("  stage replication bought nothing: no plan with uneven stage widths beat the best layout\n");
    }
  }
  if (c->have_buckets) plan_bucket_explain(&c->buckets, stdout);
  plan_result_free(&r);
  return 0;
}
