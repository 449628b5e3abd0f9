/* What the planner prints and writes: the ranked table, the explain view of
 * one configuration, and the plan JSON that `fivefold train --plan` reads. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_file.h"
#include "plan/buckets.h"
#include "plan/fusion.h"
#include "plan/search.h"
#include "sched/evaluate.h"
#include "sched/program.h"

#define GIB 1073741824.0

static const char *layout(const PlanConfig *c, char *buf, size_t size) {
  const PlanParallel *p = &c->par;
  int n = snprintf(buf, size, "TP%d CP%d DP%d PP%d VPP%d", p->tp, p->cp, p->dp, p->pp, p->vpp);
  /* The MoE grid is shown when it is not just the attention grid's mirror
   * (dense models, or experts that follow TP without EP). */
  if ((p->ep > 1 || p->etp != p->tp) && n > 0 && (size_t)n < size)
    snprintf(buf + n, size - (size_t)n, " | EP%d ETP%d EDP%d", p->ep, p->etp, p->edp);
  return buf;
}

void plan_result_print_header(FILE *f) {
  fprintf(f, "%4s  %-38s %4s %-11s %-9s %-7s %7s %9s %11s %8s  %s\n", "rank", "layout", "mbs", "schedule", "recompute",
          "distopt", "MFU", "step", "tok/s", "mem/GPU", "bottleneck");
}

void plan_result_print_row(const PlanResult *r, int rank, FILE *f) {
  char lay[96];
  const PlanConfig *c = &r->cfg;
  fprintf(f, "%4d  %-38s %4d %-11s %-9s %-7s %6.1f%% %7.0f ms %11.0f %4.1f GiB  %s%s\n", rank, layout(c, lay, sizeof lay),
          c->micro_batch_size, sched_schedule_name(c->schedule), plan_recompute_name(c->recompute),
          c->distributed_optimizer ? "yes" : "no", 100.0 * r->mfu, 1e3 * r->step_time, r->tokens_per_s,
          r->peak_memory / GIB, r->bottleneck, plan_config_is_folded(c) ? " (folded)" : "");
}

void plan_search_print_table(const PlanSearchResult *r, const ClusterSpec *cl, FILE *f) {
  plan_result_print_header(f);
  for (int i = 0; i < r->num_top; i++) plan_result_print_row(&r->top[i], i + 1, f);
  const PlanSearchStats *s = &r->stats;
  long pruned = s->pruned_memory_lb + s->pruned_memory + s->pruned_dominated + s->pruned_bound + s->pruned_runtime;
  fprintf(f,
          "\n%ld configurations considered, %ld pruned (%ld not run by the runtime, %ld over memory by the state "
          "bound, %ld over memory at the peak, %ld dominated, %ld by the step-time bound), %ld simulated; memory "
          "limit %.1f GiB per GPU\n",
          s->considered, pruned, s->pruned_runtime, s->pruned_memory_lb, s->pruned_memory, s->pruned_dominated,
          s->pruned_bound, s->simulated, plan_memory_capacity(cl) / GIB);
}

void plan_result_explain(const PlanResult *r, const ModelConfig *m, FILE *f) {
  char desc[256];
  fprintf(f, "configuration: %s\n", plan_config_describe(&r->cfg, desc, sizeof desc));
  fprintf(f, "layers per stage:");
  for (int s = 0; s < r->cfg.num_given_layers; s++) fprintf(f, "%s%d", s ? "," : " ", r->cfg.layers_per_stage[s]);
  fprintf(f, "\npredicted step %.1f ms, %.1f%% MFU, %.0f tokens/s, %.3g PFLOP per step (model FLOPs)\n",
          1e3 * r->step_time, 100.0 * r->mfu, r->tokens_per_s, r->model_flops / 1e15);
  if (r->core_capacity > 0)
    fprintf(f, "ranks share cores: processor sharing, a computing rank at min(1, %g / devices computing on its node) "
            "of a core (the per-block prices below are at the fixed share %.2f)\n", r->core_capacity, r->core_share);
  fprintf(f, "\nwhere the step goes (pipeline rank %d, the last to finish):\n", r->critical_rank);
  double total = 0;
  for (int c = 0; c < PLAN_NUM_COMPONENTS; c++) total += r->breakdown.t[c];
  double comm = 0;
  for (int c = 0; c < PLAN_NUM_COMPONENTS; c++) {
    double t = r->breakdown.t[c];
    if (plan_component_is_comm((PlanComponent)c)) comm += t;
    if (t <= 0) continue;
    fprintf(f, "  %-18s %10.1f ms %6.1f%%%s\n", plan_component_name((PlanComponent)c), 1e3 * t,
            total > 0 ? 100.0 * t / total : 0.0, plan_component_is_comm((PlanComponent)c) ? "  (exposed)" : "");
  }
  fprintf(f, "  %-18s %10.1f ms\n", "total", 1e3 * total);
  fprintf(f, "exposed communication %.1f ms (%.1f%%); bubble/idle %.1f%% of the critical rank; evaluator bubble "
          "fraction over all ranks %.1f%%\n",
          1e3 * comm, total > 0 ? 100.0 * comm / total : 0.0,
          total > 0 ? 100.0 * r->breakdown.t[PLAN_COMP_BUBBLE] / total : 0.0, 100.0 * r->bubble_fraction);
  /* Block types: what one block of each kind costs, and how many of each
   * the critical rank runs per step. */
  int dense = 0, moe = 0;
  for (int s = r->critical_rank; s < r->num_stages; s += r->pp) {
    int first = 0;
    for (int k = 0; k < s; k++) first += r->cfg.layers_per_stage[k];
    for (int l = first; l < first + r->cfg.layers_per_stage[s]; l++) {
      if (m && m->num_experts > 0 && m->is_moe_layer[l]) moe++;
      else dense++;
    }
  }
  int mb = r->cfg.microbatches;
  fprintf(f, "\nby block type (forward + backward of one micro-batch; the critical rank's share of the step):\n");
  if (dense)
    fprintf(f, "  %-18s %8.2f ms x %d blocks x %d micro-batches = %8.1f ms\n", "dense block",
            1e3 * (r->dense_layer.fwd_total + r->dense_layer.bwd_total), dense, mb,
            1e3 * mb * dense * (r->dense_layer.fwd_total + r->dense_layer.bwd_total));
  if (moe)
    fprintf(f, "  %-18s %8.2f ms x %d blocks x %d micro-batches = %8.1f ms\n", "MoE block",
            1e3 * (r->moe_layer.fwd_total + r->moe_layer.bwd_total), moe, mb,
            1e3 * mb * moe * (r->moe_layer.fwd_total + r->moe_layer.bwd_total));
  fprintf(f, "  %-18s %8.2f ms per micro-batch (first stage)\n", "embedding",
          1e3 * (r->embedding.fwd_total + r->embedding.bwd_total));
  fprintf(f, "  %-18s %8.2f ms per micro-batch (last stage)\n", "LM head + loss",
          1e3 * (r->head.fwd_total + r->head.bwd_total));
  fprintf(f, "\nper stage, one micro-batch (ms):\n  %5s %4s %5s %7s %9s %9s\n", "stage", "rank", "chunk", "layers",
          "forward", "backward");
  for (int s = 0; s < r->num_stages; s++)
    fprintf(f, "  %5d %4d %5d %7d %9.2f %9.2f%s%s\n", s, s % r->pp, s / r->pp, r->cfg.layers_per_stage[s],
            1e3 * r->stage[s].fwd_total, 1e3 * r->stage[s].bwd_total, s == 0 ? "  +embedding" : "",
            s == r->num_stages - 1 ? "  +LM head" : "");
  fprintf(f, "\nmemory per GPU (GiB):\n  %4s %8s %8s %9s %11s %9s %8s %8s %9s\n", "rank", "weights", "grads",
          "optimizer", "activations", "transient", "reserve", "total", "in flight");
  for (int p = 0; p < r->pp; p++) {
    const PlanRankMemory *mm = &r->memory[p];
    fprintf(f, "  %4d %8.2f %8.2f %9.2f %11.2f %9.2f %8.2f %8.2f %9d\n", p, mm->weights / GIB, mm->grads / GIB,
            mm->optimizer / GIB, mm->activations / GIB, mm->transient / GIB, mm->reserved / GIB, mm->total / GIB,
            mm->peak_inflight);
  }
  fprintf(f, "%s\n", r->fits ? "fits in memory" : "DOES NOT FIT in memory");
}

int plan_write_json(const PlanResult *r, const PlanSearchStats *stats, const char *model_name,
                    const char *cluster_name, const char *path, Error *err) {
  return plan_write_json_for_model(r, stats, model_name, NULL, cluster_name, path, err);
}

int plan_write_json_for_model(const PlanResult *r, const PlanSearchStats *stats, const char *model_name,
                              const ModelConfig *model, const char *cluster_name, const char *path, Error *err) {
  const PlanConfig *c = &r->cfg;
  const PlanParallel *p = &c->par;
  cJSON *root = cJSON_CreateObject();
  int bad = !root;
  cJSON *par = NULL, *pred = NULL, *arr = NULL, *mem = NULL, *bd = NULL;
  if (!bad) {
    cJSON_AddStringToObject(root, "format", "fivefold.plan");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "model", model_name ? model_name : "");
    cJSON_AddStringToObject(root, "cluster", cluster_name ? cluster_name : "");
    cJSON_AddNumberToObject(root, "gpus", plan_config_devices(c));
    cJSON_AddNumberToObject(root, "seq_length", c->seq_len);
    cJSON_AddStringToObject(root, "dtype", plan_dtype_name(c->dtype));
    cJSON *id = model ? cJSON_AddObjectToObject(root, "model_identity") : NULL;
    if (id) {
      char fp[PLAN_FINGERPRINT_MAX], summary[160];
      plan_model_fingerprint(model, fp);
      plan_model_summary(model, summary, sizeof summary);
      cJSON_AddStringToObject(id, "name", model_name ? model_name : "");
      cJSON_AddStringToObject(id, "fingerprint", fp);
      cJSON_AddStringToObject(id, "summary", summary);
    }
    par = cJSON_AddObjectToObject(root, "parallel");
    pred = cJSON_AddObjectToObject(root, "prediction");
    bad = !par || !pred;
  }
  if (!bad) {
    cJSON_AddNumberToObject(par, "tp", p->tp);
    cJSON_AddNumberToObject(par, "cp", p->cp);
    cJSON_AddNumberToObject(par, "dp", p->dp);
    cJSON_AddNumberToObject(par, "pp", p->pp);
    cJSON_AddNumberToObject(par, "vpp", p->vpp);
    cJSON_AddNumberToObject(par, "ep", p->ep);
    cJSON_AddNumberToObject(par, "etp", p->etp);
    cJSON_AddNumberToObject(par, "edp", p->edp);
    cJSON_AddNumberToObject(par, "micro_batch_size", c->micro_batch_size);
    cJSON_AddNumberToObject(par, "global_batch_size", c->global_batch_size);
    /* Per optimizer step and replica: the trainer's gradient accumulation. */
    cJSON_AddNumberToObject(par, "microbatches", c->microbatches);
    cJSON_AddStringToObject(par, "schedule", sched_schedule_name(c->schedule));
    cJSON_AddStringToObject(par, "recompute", plan_recompute_name(c->recompute));
    if (c->recompute == PLAN_RECOMPUTE_FULL) {
      /* Megatron's method and count, as the trainer applies them. */
      cJSON_AddStringToObject(par, "recompute_method", c->recompute_method == 1 ? "block" : "uniform");
      cJSON_AddNumberToObject(par, "recompute_num_layers", c->recompute_num_layers > 0 || c->recompute_method == 1
                                                               ? c->recompute_num_layers
                                                               : 1);
    }
    if (c->recompute == PLAN_RECOMPUTE_SELECTIVE) {
      char modules[80];
      cJSON_AddStringToObject(par, "recompute_modules",
                              plan_recompute_modules_describe(plan_config_recompute_modules(c), modules, sizeof modules));
    }
    cJSON_AddBoolToObject(par, "distributed_optimizer", c->distributed_optimizer != 0);
    arr = cJSON_AddArrayToObject(par, "layers_per_stage");
    for (int s = 0; arr && s < c->num_given_layers; s++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(c->layers_per_stage[s]));
    if (c->warmup_set) {
      /* The order search's warm-up depths (1f1b, zb-h1), one per pipeline rank. */
      cJSON *w = cJSON_AddArrayToObject(par, "warmup");
      for (int r = 0; w && r < c->warmup_set; r++) cJSON_AddItemToArray(w, cJSON_CreateNumber(c->warmup[r]));
      bad |= !w;
    }
    if (c->par.pp > 1) {
      /* The relative durations the program's sends were placed by: the
       * trainer builds with them, so it runs the program priced here. */
      SchedUnitCosts dflt = sched_unit_costs_default();
      cJSON_AddNumberToObject(par, "order_fwd_cost", c->order_fwd_cost > 0 ? c->order_fwd_cost : dflt.fwd);
      cJSON_AddNumberToObject(par, "order_bwd_cost", c->order_bwd_cost > 0 ? c->order_bwd_cost : dflt.bwd);
    }
    if (c->num_stage_widths) {
      /* Stage replication: pipeline stage s on stage_width[s] replicas. */
      cJSON *w = cJSON_AddArrayToObject(par, "stage_widths");
      for (int s = 0; w && s < c->num_stage_widths; s++) cJSON_AddItemToArray(w, cJSON_CreateNumber(c->stage_width[s]));
      bad |= !w;
    }
    cJSON_AddNumberToObject(pred, "step_time_s", r->step_time);
    cJSON_AddNumberToObject(pred, "mfu", r->mfu);
    cJSON_AddNumberToObject(pred, "tokens_per_s", r->tokens_per_s);
    cJSON_AddNumberToObject(pred, "bubble_fraction", r->bubble_fraction);
    cJSON_AddNumberToObject(pred, "peak_memory_GiB", r->peak_memory / GIB);
    mem = cJSON_AddArrayToObject(pred, "memory_GiB_per_stage");
    for (int i = 0; mem && i < r->pp; i++) cJSON_AddItemToArray(mem, cJSON_CreateNumber(r->memory[i].total / GIB));
    cJSON_AddStringToObject(pred, "bottleneck", r->bottleneck);
    bd = cJSON_AddObjectToObject(pred, "breakdown_s");
    for (int k = 0; bd && k < PLAN_NUM_COMPONENTS; k++)
      if (r->breakdown.t[k] > 0) cJSON_AddNumberToObject(bd, plan_component_name((PlanComponent)k), r->breakdown.t[k]);
    if (r->device_of_rank) {
      /* Rank r runs on device device_of_rank[r] (node d / devices_per_node,
       * slot d % devices_per_node): what a launcher's rankfile applies. */
      cJSON *mp = cJSON_AddObjectToObject(root, "mapping");
      cJSON *perm = mp ? cJSON_AddArrayToObject(mp, "device_of_rank") : NULL;
      for (int i = 0; perm && i < r->num_mapped; i++) cJSON_AddItemToArray(perm, cJSON_CreateNumber(r->device_of_rank[i]));
      if (mp) {
        cJSON_AddStringToObject(mp, "method", r->mapping_method);
        cJSON_AddNumberToObject(mp, "rank_order_step_time_s", r->rank_order_step_time);
        cJSON_AddNumberToObject(mp, "step_time_s", r->step_time);
        cJSON_AddNumberToObject(mp, "simulations", (double)r->mapping_evaluated);
      }
      bad |= !perm;
    }
    const PlanBucketChoice *bc = r->bucket_choice;
    cJSON *bk = bc ? cJSON_AddObjectToObject(root, "buckets") : NULL;
    if (bk) {
      /* The runtime's --bucket-mb: one uniform size, cut per chunk. */
      cJSON_AddNumberToObject(bk, "bucket_mb", bc->bucket_mb);
      cJSON_AddNumberToObject(bk, "bucket_params", bc->bucket_params);
      cJSON *per = cJSON_AddArrayToObject(bk, "buckets_per_stage");
      for (int s = 0; per && s < bc->num_stages; s++)
        cJSON_AddItemToArray(per, cJSON_CreateNumber(bc->buckets_per_stage[s]));
      cJSON_AddStringToObject(bk, "method", "uniform sizes: every bucket count up to 64 per segment simulated, then golden section");
      cJSON_AddNumberToObject(bk, "default_bucket_mb", bc->default_params * 4 / 1e6);
      cJSON_AddNumberToObject(bk, "default_step_time_s", bc->default_step_time);
      cJSON_AddNumberToObject(bk, "step_time_s", bc->step_time);
      cJSON_AddNumberToObject(bk, "simulations", (double)bc->simulations);
      cJSON *fb = cJSON_AddObjectToObject(bk, "free_boundaries");
      if (fb) {
        cJSON_AddNumberToObject(fb, "stage", bc->boundary_stage);
        cJSON_AddNumberToObject(fb, "uniform_exposed_s", bc->uniform_exposed);
        cJSON_AddNumberToObject(fb, "exposed_s", bc->boundary_exposed);
        cJSON_AddNumberToObject(fb, "buckets", bc->boundary_buckets);
        cJSON_AddBoolToObject(fb, "exhaustive", bc->boundary_exhaustive);
      }
      bad |= !per;
    }
    /* The fused kernels priced (train --plan sets training.fuse_*). */
    cJSON *fu = cJSON_AddObjectToObject(root, "fusion");
    if (fu) {
      cJSON_AddBoolToObject(fu, "swiglu", r->fuse_swiglu != 0);
      cJSON_AddBoolToObject(fu, "bias_gelu", r->fuse_bias_gelu != 0);
      cJSON_AddBoolToObject(fu, "norm_residual", r->fuse_norm_residual != 0);
      const PlanFusionChoice *fc = r->fusion_choice;
      if (fc) {
        cJSON_AddStringToObject(fu, "method", "every combination of the model's switches simulated; the unfused "
                                "chains priced by their extra memory traffic");
        cJSON_AddNumberToObject(fu, "step_time_s", fc->step_time);
        cJSON_AddNumberToObject(fu, "unfused_step_time_s", fc->unfused_step_time);
        cJSON_AddNumberToObject(fu, "simulations", fc->simulations);
      }
    }
    bad |= !fu;
    if (stats) {
      cJSON *s = cJSON_AddObjectToObject(root, "search");
      if (s) {
        cJSON_AddNumberToObject(s, "considered", (double)stats->considered);
        cJSON_AddNumberToObject(s, "pruned", (double)(stats->pruned_memory_lb + stats->pruned_memory +
                                                      stats->pruned_dominated + stats->pruned_bound +
                                                      stats->pruned_runtime));
        cJSON_AddNumberToObject(s, "simulated", (double)stats->simulated);
      }
    }
    bad = bad || !arr || !mem || !bd;
  }
  char *text = bad ? NULL : cJSON_Print(root);
  cJSON_Delete(root);
  if (!text) return error_set(err, ERR_NOMEM, "%s: out of memory writing the plan", path);
  size_t len = strlen(text);
  char *with_newline = malloc(len + 2);
  if (!with_newline) {
    cJSON_free(text);
    return error_set(err, ERR_NOMEM, "%s: out of memory writing the plan", path);
  }
  memcpy(with_newline, text, len);
  with_newline[len] = '\n';
  with_newline[len + 1] = '\0';
  cJSON_free(text);
  int rc = sched_write_text_file(path, with_newline, err);
  free(with_newline);
  return rc;
}
