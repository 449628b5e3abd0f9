/* The simulator (simulate.h): stage costs from the cost model, the program
 * from sched_build, prices per action, max-plus evaluation, and the
 * critical rank's breakdown. */
#include "plan/simulate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/flops.h"
#include "plan/buckets.h"
#include "plan/core_share.h"
#include "plan/link_share.h"
#include "plan/replicate.h"
#include "plan/stages.h"
#include "sched/builders.h"
#include "sched/evaluate.h"
#include "sched/evaluate_shared.h"
#include "sched/trace_json.h"

void plan_stage_costs_free(PlanStageCosts *sc) {
  if (!sc) return;
  sched_partition_free(&sc->part);
  free(sc->stage);
  free(sc->grad_reduce);
  free(sc->grad_reduce_full);
  free(sc->buckets);
  free(sc->optim_compute);
  free(sc->optim_comm);
  free(sc->link_next);
  free(sc->link_prev);
  free(sc->bwd_weight);
  memset(sc, 0, sizeof *sc);
}

/* Stage s's gradient reduction bucket by bucket (buckets.h): the whole
 * reduction, its part exposed after the stage's last backward, and the
 * bucket count. */
static int stage_reduction(const PlanCostModel *cm, const SchedPartition *part, int s, double bucket,
                           PlanBucketPrice *price, Error *err) {
  PlanGradLayer *layers = malloc((2 * (size_t)part->layers[s] + 2) * sizeof *layers);
  if (!layers) return error_set(err, ERR_NOMEM, "simulate: out of memory");
  int n = plan_stage_grad_layers(cm, part, s, layers);
  PlanBucketModel bm = {layers, n, cm->opt->dp_overlap, plan_stage_reduce_time, cm};
  int rc = plan_buckets_price_uniform(&bm, bucket, price, err);
  free(layers);
  return rc;
}

/* The bucket size the runtime uses: bucket_params, capped at
 * bucket_max_share of the smallest pipeline rank's gradient (every stage
 * buckets alike, so that a tied embedding splits the same on both ends). */
static double effective_bucket(const PlanCostModel *cm, const SchedPartition *part) {
  const PlanOptions *o = cm->opt;
  double bucket = o->bucket_params;
  if (!(o->bucket_max_share > 0)) return bucket;
  int P = cm->cfg->par.pp, S = P * cm->cfg->par.vpp;
  double smallest = 0;
  for (int r = 0; r < P; r++) {
    double local = 0;
    for (int s = r; s < S; s += P) {
      PlanParams p = plan_stage_params(cm->model, cm->cfg, part, s);
      local += p.dense + p.expert;
    }
    if (r == 0 || local < smallest) smallest = local;
  }
  double cap = o->bucket_max_share * smallest;
  return bucket > 0 && bucket < cap ? bucket : cap;
}

/* The runtime rounds a bucket up to whole blocks of the reducing group, so
 * that reduce-scatter splits it evenly (dp_grads_create). */
static double runtime_bucket(const PlanCostModel *cm, double bucket) {
  double d = (double)cm->cfg->par.dp * cm->cfg->par.cp;
  if (!(bucket > 0) || d <= 1) return bucket;
  return ceil(bucket / d) * d;
}

int plan_stage_costs_build(const PlanCostModel *cm, PlanStageCosts *sc, Error *err) {
  memset(sc, 0, sizeof *sc);
  const PlanConfig *cfg = cm->cfg;
  const ModelConfig *m = cm->model;
  const PlanOptions *o = cm->opt;
  int P = cfg->par.pp, V = cfg->par.vpp, S = P * V;
  sc->pp = P;
  sc->vpp = V;
  sc->num_stages = S;
  sc->send_overhead = o->send_overhead;
  sc->min_time_scale = plan_core_share_floor(cm->cluster);
  int rc = plan_stages_choose(cm, &sc->part, err);
  if (rc) return rc;
  sc->stage = calloc((size_t)S, sizeof *sc->stage);
  sc->grad_reduce = calloc((size_t)S, sizeof *sc->grad_reduce);
  sc->grad_reduce_full = calloc((size_t)S, sizeof *sc->grad_reduce_full);
  sc->buckets = calloc((size_t)S, sizeof *sc->buckets);
  sc->optim_compute = calloc((size_t)P, sizeof *sc->optim_compute);
  sc->optim_comm = calloc((size_t)P, sizeof *sc->optim_comm);
  sc->link_next = calloc((size_t)P, sizeof *sc->link_next);
  sc->link_prev = calloc((size_t)P, sizeof *sc->link_prev);
  sc->bwd_weight = calloc((size_t)S, sizeof *sc->bwd_weight);
  if (!sc->stage || !sc->grad_reduce || !sc->grad_reduce_full || !sc->buckets || !sc->optim_compute || !sc->optim_comm ||
      !sc->link_next || !sc->link_prev || !sc->bwd_weight) {
    plan_stage_costs_free(sc);
    return error_set(err, ERR_NOMEM, "simulate: out of memory");
  }
  double d_dense = (double)cfg->par.dp * cfg->par.cp, d_expert = cfg->par.edp;
  int mixed = cfg->dtype != PLAN_DTYPE_FP32 && cfg->dtype != PLAN_DTYPE_TF32 && !o->fp32_activations;
  /* Adam streams per local parameter: grad read, master, m and v read and
   * written, and (mixed precision) the low-precision copy written. */
  double update_bytes = mixed ? 4 + 3 * 8 + 2 : 4 + 3 * 8;
  double elt = plan_activation_bytes(o, cfg->dtype);
  double bucket = runtime_bucket(cm, effective_bucket(cm, &sc->part));
  sc->bucket_params = bucket;
  for (int s = 0; s < S; s++) {
    PlanPassCost *pc = &sc->stage[s];
    for (int l = sc->part.first_layer[s]; l < sc->part.first_layer[s] + sc->part.layers[s]; l++) {
      const PlanPassCost *lc = plan_layer_cost(cm, l);
      plan_breakdown_add(&pc->fwd, &lc->fwd, 1.0);
      plan_breakdown_add(&pc->bwd, &lc->bwd, 1.0);
    }
    if (s == 0) {
      plan_breakdown_add(&pc->fwd, &cm->embedding.fwd, 1.0);
      plan_breakdown_add(&pc->bwd, &cm->embedding.bwd, 1.0);
    }
    if (s == S - 1) {
      plan_breakdown_add(&pc->fwd, &cm->head.fwd, 1.0);
      plan_breakdown_add(&pc->bwd, &cm->head.bwd, 1.0);
    }
    pc->fwd_total = plan_breakdown_total(&pc->fwd);
    pc->bwd_total = plan_breakdown_total(&pc->bwd);
    /* A weight-gradient GEMM costs its forward GEMM (backward GEMMs are
     * priced at twice the forward: data and weight gradients). */
    if (cfg->par.tp == 1)
      sc->bwd_weight[s] = pc->fwd.t[PLAN_COMP_ATTN_GEMM] + (m->gpt2 ? 0.0 : pc->fwd.t[PLAN_COMP_MLP_GEMM]);

    PlanParams params = plan_stage_params(m, cfg, &sc->part, s);
    PlanBucketPrice price;
    rc = stage_reduction(cm, &sc->part, s, bucket, &price, err);
    if (rc) {
      plan_stage_costs_free(sc);
      return rc;
    }
    int buckets = price.buckets > 0 ? price.buckets : 1;
    sc->buckets[s] = buckets;
    double full = price.reduce, exposed = price.exposed;
    /* Tied embeddings across stages: the first and last stage add their
     * copies' gradients (two messages over the pipeline link). */
    if (m->tie_word_embeddings && S > 1 && (s == 0 || s == S - 1)) {
      double tied = 2 * plan_pp_transfer_time(cm, 0, P - 1, plan_embedding_params(m, cfg).dense * o->grad_reduce_bytes);
      full += tied;
      exposed += tied;
    }
    sc->grad_reduce_full[s] = full;
    sc->grad_reduce[s] = exposed;

    int r = s % P;
    double local = cfg->distributed_optimizer ? params.dense / d_dense + params.expert / d_expert
                                              : params.dense + params.expert;
    sc->optim_compute[r] += plan_optimizer_time(cm->cluster, local, update_bytes);
    if (cfg->distributed_optimizer) {
      double gather = plan_collective_time(cm->cluster, &cm->group[PLAN_GROUP_DPCP], PLAN_COLL_ALL_GATHER,
                                           params.dense * elt, o->algo, NULL) +
                      plan_collective_time(cm->cluster, &cm->group[PLAN_GROUP_EDP], PLAN_COLL_ALL_GATHER,
                                           params.expert * elt, o->algo, NULL);
      /* Buckets gather while the next step's forward runs; the first waits. */
      sc->optim_comm[r] += gather * (1.0 - o->param_gather_overlap * (1.0 - 1.0 / buckets));
    }
  }
  for (int r = 0; r < P; r++) {
    sc->link_next[r] = plan_pp_transfer_time(cm, r, (r + 1) % P, cm->p2p_bytes);
    sc->link_prev[r] = plan_pp_transfer_time(cm, r, (r + P - 1) % P, cm->p2p_bytes);
  }
  return ERR_OK;
}

double plan_stage_costs_lower_bound(const PlanStageCosts *sc, int m) {
  int P = sc->pp, V = sc->vpp;
  double best = 0, prefix = 0; /* prefix: forward + backward of chunk-0 stages before rank r */
  for (int r = 0; r < P; r++) {
    double busy = 0;
    for (int c = 0; c < V; c++) busy += sc->stage[c * P + r].fwd_total + sc->stage[c * P + r].bwd_total;
    double bound = prefix + m * busy + sc->optim_compute[0] + sc->optim_comm[0];
    if (bound > best) best = bound;
    prefix += sc->stage[r].fwd_total + sc->stage[r].bwd_total;
  }
  return best * sc->min_time_scale;
}

/* ---- pricing callbacks ---- */

static int action_stage(const PlanStageCosts *sc, const SchedAction *a) {
  if (a->stage >= 0) return a->stage;
  int chunk = a->chunk >= 0 ? a->chunk : a->bucket;
  return chunk >= 0 ? chunk * sc->pp + a->rank : -1;
}

static double action_cost(const SchedAction *a, void *ctx) {
  const PlanStageCosts *sc = ctx;
  int s = action_stage(sc, a);
  switch (a->kind) {
    case SCHED_FWD: return s >= 0 && s < sc->num_stages ? sc->stage[s].fwd_total : 0.0;
    case SCHED_BWD:
      if (s < 0 || s >= sc->num_stages) return 0.0;
      return sc->split_backward ? sc->stage[s].bwd_total - sc->bwd_weight[s] : sc->stage[s].bwd_total;
    case SCHED_BWD_WEIGHT: return s >= 0 && s < sc->num_stages ? sc->bwd_weight[s] : 0.0;
    case SCHED_SEND_ACT:
    case SCHED_SEND_GRAD: return sc->send_overhead;
    case SCHED_GRAD_REDUCE: return s >= 0 && s < sc->num_stages ? sc->grad_reduce[s] : 0.0;
    case SCHED_OPTIM: { /* a replicated stage's OPTIM names its stage (sched/replicated.h) */
      int r = a->stage >= 0 ? a->stage : a->rank;
      return sc->optim_compute[r] + sc->optim_comm[r];
    }
    default: return 0.0;
  }
}

/* The compute components of a breakdown: what runs on the rank's core. */
static double cpu_part(const PlanBreakdown *b) {
  double t = 0;
  for (int c = 0; c < PLAN_NUM_COMPONENTS; c++)
    if (c != PLAN_COMP_BUBBLE && !plan_component_is_comm((PlanComponent)c)) t += b->t[c];
  return t;
}

/* The CPU part of an action's price (sched/evaluate_shared.h): its compute
 * components and the optimizer's update; communication inside a forward or
 * backward, the parameter gather, send overheads, reductions and transfers
 * are waits, during which the rank leaves its core to the others. */
static double action_work(const SchedAction *a, void *ctx) {
  const PlanStageCosts *sc = ctx;
  int s = action_stage(sc, a), valid = s >= 0 && s < sc->num_stages;
  switch (a->kind) {
    case SCHED_FWD: return valid ? cpu_part(&sc->stage[s].fwd) : 0.0;
    case SCHED_BWD:
      if (!valid) return 0.0;
      return sc->split_backward ? cpu_part(&sc->stage[s].bwd) - sc->bwd_weight[s] : cpu_part(&sc->stage[s].bwd);
    case SCHED_BWD_WEIGHT: return valid ? sc->bwd_weight[s] : 0.0;
    case SCHED_OPTIM: return sc->optim_compute[a->stage >= 0 ? a->stage : a->rank];
    default: return 0.0;
  }
}

/* Under processor sharing: the critical rank's CPU time as it ran over the
 * CPU time its actions are priced at (1 at the fixed share). */
static double cpu_time_ratio(const SchedProgram *prog, const SchedEval *ev, const PlanStageCosts *sc, int rank) {
  int n;
  const SchedAction *list = sched_program_rank_actions(prog, rank, &n);
  double priced = 0, ran = 0;
  for (int i = 0; i < n; i++) {
    const SchedAction *a = &list[i];
    double cpu = a->stream == SCHED_STREAM_COMPUTE ? action_work(a, (void *)sc) : 0.0;
    if (!(cpu > 0)) continue;
    priced += cpu;
    ran += (ev->finish[a->id] - ev->start[a->id]) - (action_cost(a, (void *)sc) - cpu);
  }
  return priced > 0 ? ran / priced : 1.0;
}

static double transfer_cost(const SchedAction *send, const SchedAction *recv, void *ctx) {
  const PlanStageCosts *sc = ctx;
  if (recv->rank == (send->rank + 1) % sc->pp) return sc->link_next[send->rank];
  return sc->link_prev[send->rank];
}

/* ---- results ---- */

void plan_result_free(PlanResult *r) {
  if (!r) return;
  free(r->stage);
  free(r->memory);
  free(r->device_of_rank);
  r->stage = NULL;
  r->memory = NULL;
  r->device_of_rank = NULL;
}

int plan_result_copy(PlanResult *dst, const PlanResult *src) {
  *dst = *src;
  dst->stage = malloc((size_t)src->num_stages * sizeof *dst->stage);
  dst->memory = malloc((size_t)src->pp * sizeof *dst->memory);
  dst->device_of_rank = NULL;
  if (src->device_of_rank) {
    dst->device_of_rank = malloc((size_t)src->num_mapped * sizeof *dst->device_of_rank);
    if (dst->device_of_rank)
      memcpy(dst->device_of_rank, src->device_of_rank, (size_t)src->num_mapped * sizeof *dst->device_of_rank);
  }
  if (!dst->stage || !dst->memory || (src->device_of_rank && !dst->device_of_rank)) {
    plan_result_free(dst);
    return ERR_NOMEM;
  }
  memcpy(dst->stage, src->stage, (size_t)src->num_stages * sizeof *dst->stage);
  memcpy(dst->memory, src->memory, (size_t)src->pp * sizeof *dst->memory);
  return ERR_OK;
}

/* The largest part of the critical rank's step, whatever it is: the GEMMs
 * count as much as communication or bubbles, so "expert GEMM 71%" says the
 * step is compute-bound on the experts. Ties go to the earlier component. */
const char *plan_result_bottleneck(const PlanResult *r, char *buf, size_t size) {
  int worst = 0;
  for (int c = 1; c < PLAN_NUM_COMPONENTS; c++)
    if (r->breakdown.t[c] > r->breakdown.t[worst]) worst = c;
  double total = plan_breakdown_total(&r->breakdown);
  if (!(total > 0) || !(r->breakdown.t[worst] > 0))
    snprintf(buf, size, "none");
  else
    snprintf(buf, size, "%s %.0f%%", plan_component_name((PlanComponent)worst), 100.0 * r->breakdown.t[worst] / total);
  return buf;
}

/* The critical rank's step, component by component. */
static void critical_breakdown(const SchedProgram *prog, const SchedEval *ev, const PlanStageCosts *sc, int rank,
                               double exposed_p2p, double cpu_ratio, PlanBreakdown *out) {
  memset(out, 0, sizeof *out);
  int n;
  const SchedAction *list = sched_program_rank_actions(prog, rank, &n);
  int prev_compute = -1;
  for (int i = 0; i < n; i++) {
    const SchedAction *a = &list[i];
    int s = action_stage(sc, a);
    switch (a->kind) {
      case SCHED_FWD: plan_breakdown_add(out, &sc->stage[s].fwd, 1.0); break;
      case SCHED_BWD: plan_breakdown_add(out, &sc->stage[s].bwd, 1.0); break;
      case SCHED_SEND_ACT:
      case SCHED_SEND_GRAD: out->t[PLAN_COMP_PP_COMM] += sc->send_overhead; break;
      case SCHED_OPTIM:
        out->t[PLAN_COMP_OPTIMIZER] += sc->optim_compute[a->stage >= 0 ? a->stage : rank];
        out->t[PLAN_COMP_DP_COMM] += sc->optim_comm[a->stage >= 0 ? a->stage : rank];
        /* OPTIM waits for the reductions: a gap after the last compute is
         * reduction time that did not hide behind the backward. */
        if (prev_compute >= 0) {
          double gap = ev->start[a->id] - ev->finish[prev_compute];
          if (gap > 0) out->t[PLAN_COMP_DP_COMM] += gap;
        }
        break;
      default: break;
    }
    if (a->stream == SCHED_STREAM_COMPUTE) prev_compute = a->id;
  }
  /* Processor sharing ran the compute at another speed than priced. */
  if (cpu_ratio != 1.0)
    for (int c = 0; c < PLAN_NUM_COMPONENTS; c++)
      if (c != PLAN_COMP_BUBBLE && !plan_component_is_comm((PlanComponent)c)) out->t[c] *= cpu_ratio;
  out->t[PLAN_COMP_PP_COMM] += exposed_p2p;
  double makespan = ev->rank_finish[rank];
  double idle = makespan - plan_breakdown_total(out);
  if (idle < 0) {
    /* The exposed-transfer estimate came from another evaluation; never let
     * it push the sum past the step. */
    out->t[PLAN_COMP_PP_COMM] = fmax(0.0, out->t[PLAN_COMP_PP_COMM] + idle);
    idle = makespan - plan_breakdown_total(out);
  }
  out->t[PLAN_COMP_BUBBLE] = idle > 0 ? idle : 0.0;
}

int plan_simulate(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *opt, const PlanConfig *cfg_in,
                  const PlanSimOptions *sim, PlanTopoCache *cache, PlanResult *out, Error *err) {
  memset(out, 0, sizeof *out);
  PlanSimOptions none;
  memset(&none, 0, sizeof none);
  if (!sim) sim = &none;
  out->cfg = *cfg_in;
  out->fuse_swiglu = opt->fuse_swiglu, out->fuse_bias_gelu = opt->fuse_bias_gelu;
  out->fuse_norm_residual = opt->fuse_norm_residual;
  PlanConfig *cfg = &out->cfg;
  PlanCostModel cm;
  int rc = cfg->num_stage_widths ? plan_replication_validate(cfg, m, cl, err) : 0;
  if (rc) return rc;
  rc = plan_cost_model_init(&cm, m, cl, opt, cfg, cache, err);
  if (rc) return rc;
  PlanStageCosts sc;
  rc = plan_stage_costs_build(&cm, &sc, err);
  if (rc) return rc;
  if (cfg->num_stage_widths) {
    rc = plan_stage_costs_replicate(&cm, &sc, err);
    if (rc) {
      plan_stage_costs_free(&sc);
      return rc;
    }
  }
  int P = sc.pp, S = sc.num_stages;
  cfg->num_given_layers = S;
  for (int s = 0; s < S; s++) cfg->layers_per_stage[s] = sc.part.layers[s];

  /* A search places sends for the costs the program is priced with, and
   * records them (the plan file carries them to the trainer). */
  if (!cfg->order_given) {
    double fsum = 0, bsum = 0;
    for (int s = 0; s < S; s++) fsum += sc.stage[s].fwd_total, bsum += sc.stage[s].bwd_total;
    cfg->order_fwd_cost = fsum > 0 && bsum > 0 ? 1.0 : 0.0;
    cfg->order_bwd_cost = fsum > 0 && bsum > 0 ? bsum / fsum : 0.0;
  }
  SchedConfig sched;
  plan_config_sched(cfg, &sched);
  sched.pp = P;
  sched.vpp = sc.vpp;
  SchedProgram *prog = NULL;
  /* Stage replication: the program of every replica, its transfers in
   * pieces priced by their sequences (replicate.h). */
  PlanReplicaTransfer pieces = {.cluster = cl, .p2p_bytes = cm.p2p_bytes, .sequences = cfg->micro_batch_size};
  rc = cfg->num_stage_widths ? plan_replicated_program(cfg, &sched, &prog, err) : sched_build(&sched, &prog, err);
  if (rc) {
    plan_stage_costs_free(&sc);
    return rc;
  }
  sc.split_backward = prog->config.split_backward;
  SchedEvalOptions eo;
  memset(&eo, 0, sizeof eo);
  eo.cost = action_cost;
  eo.cost_ctx = &sc;
  eo.transfer = cfg->num_stage_widths ? plan_replicated_transfer : transfer_cost;
  eo.transfer_ctx = cfg->num_stage_widths ? (void *)&pieces : (void *)&sc;
  eo.send_mode = SCHED_SEND_EAGER;
  SchedEval ev;
  memset(&ev, 0, sizeof ev);
  /* Ranks sharing cores: a rank computes faster while others wait. */
  PlanCoreShare share;
  rc = plan_core_share_init(&share, cl, cfg, prog, action_work, &sc, err);
  /* Devices sharing a network port: the transfers that cross one run on
   * it inside the evaluation (link_share.h); else each on an idle link. */
  PlanLinkShare links;
  memset(&links, 0, sizeof links);
  if (!rc) rc = plan_link_share_init(&links, cl, cfg, prog, cm.p2p_bytes, err);
  if (!rc && links.active)
    rc = plan_link_share_evaluate(&links, prog, &eo, share.active ? &share.opts : NULL, action_work, &sc, &ev, err);
  else if (!rc)
    rc = share.active ? sched_evaluate_shared(prog, &eo, &share.opts, &ev, err) : sched_evaluate(prog, &eo, &ev, err);
  double exposed_p2p = 0;
  if (!rc && sim->exposed_p2p) {
    SchedEvalOptions free_links = eo;
    free_links.transfer = NULL;
    SchedEval ev_free;
    rc = share.active ? sched_evaluate_shared(prog, &free_links, &share.opts, &ev_free, err)
                      : sched_evaluate(prog, &free_links, &ev_free, err);
    if (!rc) exposed_p2p = fmax(0.0, ev.makespan - ev_free.makespan);
    sched_eval_free(&ev_free);
  }
  if (!rc && sim->trace_path) rc = sched_trace_write(prog, &ev, 1e6, sim->trace_path, err);
  if (!rc && sim->program_path) rc = sched_program_write_json(prog, sim->program_path, err);
  if (rc) goto done;

  out->step_time = ev.makespan;
  if (share.active) out->core_capacity = share.opts.capacity[0], out->core_share = share.opts.priced_share;
  out->bubble_fraction = ev.bubble_fraction;
  out->pp = P;
  out->num_stages = S;
  int critical = 0;
  for (int r = 1; r < prog->num_ranks; r++)
    if (ev.rank_finish[r] > ev.rank_finish[critical]) critical = r;
  critical_breakdown(prog, &ev, &sc, critical, exposed_p2p,
                     share.active ? cpu_time_ratio(prog, &ev, &sc, critical) : 1.0, &out->breakdown);
  /* Reported as a pipeline rank: a replicated stage's replicas share one. */
  out->critical_rank = cfg->num_stage_widths ? prog->actions[prog->rank_begin[critical]].stage : critical;
  int gpus = plan_config_devices(cfg);
  out->model_flops = model_flops_per_sequence(m, cfg->seq_len) * cfg->global_batch_size;
  out->mfu = out->step_time > 0 ? out->model_flops / (out->step_time * gpus * plan_peak_flops(cl, cfg->dtype)) : 0;
  out->tokens_per_s = out->step_time > 0 ? (double)cfg->global_batch_size * cfg->seq_len / out->step_time : 0;

  out->stage = malloc((size_t)S * sizeof *out->stage);
  out->memory = malloc((size_t)P * sizeof *out->memory);
  if (!out->stage || !out->memory) {
    rc = error_set(err, ERR_NOMEM, "simulate: out of memory");
    goto done;
  }
  memcpy(out->stage, sc.stage, (size_t)S * sizeof *out->stage);
  out->dense_layer = cm.dense_layer;
  out->moe_layer = cm.moe_layer;
  out->embedding = cm.embedding;
  out->head = cm.head;
  rc = plan_memory_estimate(m, cl, cfg, &sc.part, cm.expert_load, out->memory, err);
  if (rc) goto done;
  if (cfg->num_stage_widths) plan_memory_replicate(cfg, out->memory);
  out->peak_memory = 0;
  for (int r = 0; r < P; r++)
    if (out->memory[r].total > out->peak_memory) out->peak_memory = out->memory[r].total;
  out->fits = out->peak_memory <= plan_memory_capacity(cl);
  plan_result_bottleneck(out, out->bottleneck, sizeof out->bottleneck);
done:
  plan_link_share_free(&links);
  plan_core_share_free(&share);
  sched_eval_free(&ev);
  sched_program_free(prog);
  plan_stage_costs_free(&sc);
  if (rc) plan_result_free(out);
  return rc;
}
