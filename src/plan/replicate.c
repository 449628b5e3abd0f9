/* Stage replication (replicate.h): the simulator's per-stage costs under
 * per-stage widths, the memory per replica, the pivot-stage formula, the
 * (layers, devices) dynamic program and the search over stage counts. */
#include "plan/replicate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/stages.h"
#include "sched/replicated.h"

int plan_replication_validate(const PlanConfig *c, const ModelConfig *m, const ClusterSpec *cl, Error *err) {
  const PlanParallel *p = &c->par;
  if (c->num_stage_widths != p->pp)
    return error_set(err, ERR_CONFIG, "stage replication: %d stage widths for pp %d", c->num_stage_widths, p->pp);
  if (p->vpp != 1 || p->tp != 1 || p->cp != 1 || p->dp != 1 || p->ep != 1 || p->etp != 1)
    return error_set(err, ERR_CONFIG,
                     "stage replication is planned for pipeline x per-stage data parallelism only: tp, cp, dp, ep, "
                     "etp and vpp must be 1 (got tp %d cp %d dp %d ep %d etp %d vpp %d)",
                     p->tp, p->cp, p->dp, p->ep, p->etp, p->vpp);
  for (int s = 0; s < c->num_stage_widths; s++)
    if (c->stage_width[s] < 1)
      return error_set(err, ERR_CONFIG, "stage replication: stage %d has width %d; every stage needs >= 1", s,
                       c->stage_width[s]);
  /* The replicated program expands a gpipe or 1f1b pipeline at its own
   * warm-up (sched/replicated.c), as the runtime runs it; anything else
   * would price a program `train` refuses. */
  if (c->schedule == SCHED_SCHEDULE_ZB_H1 || c->schedule == SCHED_SCHEDULE_INTERLEAVED)
    return error_set(err, ERR_CONFIG,
                     "stage replication: schedule %s: a replicated pipeline runs the gpipe or 1f1b order",
                     sched_schedule_name(c->schedule));
  if (c->warmup_set)
    return error_set(err, ERR_CONFIG,
                     "stage replication: warm-up depths: a replicated pipeline runs its schedule's own warm-up "
                     "(leave --warmup out)");
  /* The runtime ties the embedding over replicated stages without ZeRO-1
   * only (train/trainer_replicated.c): the two ends' shards differ. */
  if (m && m->tie_word_embeddings && c->num_stage_widths > 1 && c->distributed_optimizer)
    return error_set(err, ERR_CONFIG,
                     "stage replication: tied embeddings run without the distributed optimizer only (leave "
                     "--distributed-optimizer out, or untie the embeddings)");
  if (cl && plan_config_devices(c) > cluster_spec_total_devices(cl))
    return error_set(err, ERR_CONFIG, "stage replication needs %d devices, cluster %s has %d", plan_config_devices(c),
                     cl->name, cluster_spec_total_devices(cl));
  return ERR_OK;
}

int plan_replicated_program(const PlanConfig *c, const SchedConfig *stage_sched, SchedProgram **out, Error *err) {
  SchedReplication r;
  memset(&r, 0, sizeof r);
  if (c->num_stage_widths > SCHED_MAX_REPLICATED_STAGES)
    return error_set(err, ERR_CONFIG, "stage replication: %d stages, at most %d", c->num_stage_widths,
                     SCHED_MAX_REPLICATED_STAGES);
  r.stages = c->num_stage_widths;
  r.sequences = c->micro_batch_size;
  for (int s = 0; s < r.stages; s++) r.width[s] = c->stage_width[s];
  return sched_build_replicated(stage_sched, &r, out, err);
}

double plan_replicated_transfer(const SchedAction *send, const SchedAction *recv, void *ctx) {
  const PlanReplicaTransfer *t = ctx;
  double share = send->seq_count > 0 && t->sequences > 0 ? (double)send->seq_count / t->sequences : 1.0;
  return plan_p2p_time(t->cluster, send->rank, recv->rank, t->p2p_bytes * share);
}

static int slower(PlanLink a, PlanLink b) {
  return a.bandwidth < b.bandwidth || (a.bandwidth == b.bandwidth && a.latency > b.latency);
}

/* The replicas of one stage: devices first .. first + w - 1 (as ranks, so
 * a mapping in the cluster applies). */
static PlanGroupTopo replica_group(const ClusterSpec *cl, int first, int w) {
  PlanGroupTopo g;
  memset(&g, 0, sizeof g);
  g.size = w;
  g.stride = 1;
  g.intra = cl->link[PLAN_LEVEL_INTRA];
  g.inter = cl->link[PLAN_LEVEL_INTER];
  int have_intra = 0, have_inter = 0, nodes = 0, per_node = w;
  for (int i = 0; i < w; i++) {
    int node = cluster_spec_node_of(cl, first + i), seen_before = 0, count = 0;
    for (int j = 0; j < w; j++) {
      int other = cluster_spec_node_of(cl, first + j);
      if (other == node) count++;
      if (j < i && other == node) seen_before = 1;
    }
    if (!seen_before) {
      nodes++;
      if (count < per_node) per_node = count;
    }
    int next = first + (i + 1) % w;
    if (w < 2) break;
    PlanLink l = cluster_spec_device_link(cl, first + i, next);
    if (cluster_spec_node_of(cl, next) == node) {
      if (!have_intra || slower(l, g.intra)) g.intra = l;
      have_intra = 1;
    } else {
      if (!have_inter || slower(l, g.inter)) g.inter = l;
      have_inter = 1;
    }
  }
  g.nodes = nodes;
  g.per_node = per_node;
  return g;
}

static double replica_transfer(const ClusterSpec *cl, const int *off, const int *width, int a, int b, double bytes) {
  int wa = width[a], wb = width[b], n = wa > wb ? wa : wb;
  double piece = bytes / (wa < wb ? wa : wb), worst = 0;
  for (int i = 0; i < n; i++) {
    double t = plan_p2p_time(cl, off[a] + i % wa, off[b] + i % wb, piece);
    if (t > worst) worst = t;
  }
  return worst;
}

int plan_stage_costs_replicate(const PlanCostModel *cm, PlanStageCosts *sc, Error *err) {
  const PlanConfig *cfg = cm->cfg;
  const PlanOptions *o = cm->opt;
  const ClusterSpec *cl = cm->cluster;
  int P = sc->pp;
  if (sc->vpp != 1 || cfg->num_stage_widths != P)
    return error_set(err, ERR_INTERNAL, "stage replication: widths for %d stages, program has %d x %d", 
                     cfg->num_stage_widths, P, sc->vpp);
  int *off = malloc((size_t)P * sizeof *off);
  if (!off) return error_set(err, ERR_NOMEM, "stage replication: out of memory");
  int mixed = cfg->dtype != PLAN_DTYPE_FP32 && cfg->dtype != PLAN_DTYPE_TF32 && !o->fp32_activations;
  double update_bytes = mixed ? 4 + 3 * 8 + 2 : 4 + 3 * 8;
  double elt = plan_activation_bytes(o, cfg->dtype);
  for (int s = 0, at = 0; s < P; s++) {
    off[s] = at;
    at += cfg->stage_width[s];
  }
  for (int s = 0; s < P; s++) {
    int w = cfg->stage_width[s];
    PlanPassCost *pc = &sc->stage[s];
    PlanBreakdown f, b;
    memset(&f, 0, sizeof f);
    memset(&b, 0, sizeof b);
    plan_breakdown_add(&f, &pc->fwd, 1.0 / w);
    plan_breakdown_add(&b, &pc->bwd, 1.0 / w);
    pc->fwd = f;
    pc->bwd = b;
    pc->fwd_total /= w;
    pc->bwd_total /= w;
    PlanParams params = plan_stage_params(cm->model, cfg, &sc->part, s);
    double total = params.dense + params.expert;
    PlanGroupTopo g = replica_group(cl, off[s], w);
    PlanCollective kind = cfg->distributed_optimizer ? PLAN_COLL_REDUCE_SCATTER : PLAN_COLL_ALL_REDUCE;
    double nb = ceil(total / (o->bucket_params > 0 ? o->bucket_params : 1e300));
    int buckets = nb < 1 ? 1 : (int)fmin(nb, 1e6);
    /* Each bucket reduced as the runtime reduces it, one after the other. */
    double full = buckets * plan_bucket_reduce_time(cl, o, &g, kind, total * o->grad_reduce_bytes / buckets);
    double hidden = o->dp_overlap * (1.0 - 1.0 / buckets) * pc->bwd_total;
    sc->grad_reduce_full[s] = full;
    sc->grad_reduce[s] = full > 0 ? fmax(full - hidden, full / buckets) : 0;
    double local = cfg->distributed_optimizer ? total / w : total;
    sc->optim_compute[s] = plan_optimizer_time(cl, local, update_bytes);
    sc->optim_comm[s] = 0;
    if (cfg->distributed_optimizer && w > 1) {
      double gather = plan_collective_time(cl, &g, PLAN_COLL_ALL_GATHER, total * elt, o->algo, NULL);
      sc->optim_comm[s] = gather * (1.0 - o->param_gather_overlap * (1.0 - 1.0 / buckets));
    }
  }
  for (int s = 0; s < P; s++) {
    sc->link_next[s] = replica_transfer(cl, off, cfg->stage_width, s, (s + 1) % P, cm->p2p_bytes);
    sc->link_prev[s] = replica_transfer(cl, off, cfg->stage_width, s, (s + P - 1) % P, cm->p2p_bytes);
  }
  free(off);
  return ERR_OK;
}

void plan_memory_replicate(const PlanConfig *cfg, PlanRankMemory *mem) {
  for (int s = 0; s < cfg->num_stage_widths; s++) {
    double w = cfg->stage_width[s];
    PlanRankMemory *r = &mem[s];
    r->activations /= w;
    r->transient /= w;
    if (cfg->distributed_optimizer) r->optimizer /= w;
    r->total = r->weights + r->grads + r->optimizer + r->activations + r->transient + r->reserved;
  }
}

double plan_pivot_latency(const double *fwd, const double *bwd, const double *reduce, int S, int M, int *pivot) {
  double total = 0;
  for (int s = 0; s < S; s++) total += fwd[s] + bwd[s];
  double best = -INFINITY;
  int q = 0;
  for (int s = 0; s < S; s++) {
    double v = total + (M - 1) * (fwd[s] + bwd[s]);
    if (v > best) best = v, q = s;
  }
  double tail = 0, earlier_bwd = 0;
  for (int s = 0; s < S; s++) {
    double exposed = (reduce ? reduce[s] : 0) - earlier_bwd;
    if (exposed > tail) tail = exposed;
    earlier_bwd += bwd[s];
  }
  if (pivot) *pivot = q;
  return best + tail;
}

double plan_stage_costs_pivot_latency(const PlanStageCosts *sc, int M, int *pivot) {
  int S = sc->num_stages;
  double *f = malloc((size_t)S * 3 * sizeof *f);
  if (!f) return NAN;
  double *b = f + S, *r = f + 2 * S;
  for (int s = 0; s < S; s++) {
    f[s] = sc->stage[s].fwd_total;
    b[s] = sc->stage[s].bwd_total;
    /* The reduction and then the optimizer step close every stage. */
    r[s] = sc->grad_reduce[s] + (s < sc->pp ? sc->optim_compute[s] + sc->optim_comm[s] : 0);
  }
  double t = plan_pivot_latency(f, b, r, S, M, pivot);
  /* The first micro-batch's trip to the pivot and the last one's back cross
   * every boundary once each way. */
  for (int s = 0; s + 1 < S; s++) t += sc->link_next[s] + sc->link_prev[s + 1];
  free(f);
  return t;
}

double plan_replication_stage_cost(const PlanReplicationTerms *t, int L, int s, int S, int w, int first, int end,
                                   double compute) {
  double cost = compute / w;
  if (!t) return cost;
  double grad = 0, act = 0;
  for (int l = first; l < end; l++) {
    grad += t->grad_bytes ? t->grad_bytes[l] : 0;
    act += t->act_bytes ? t->act_bytes[l] : 0;
  }
  if (first == 0) grad += t->first_grad, act += t->first_act;
  if (end == L) grad += t->last_grad, act += t->last_act;
  if (t->capacity > 0) {
    int M = t->microbatches > 0 ? t->microbatches : 1, in_flight = S - s < M ? S - s : M;
    if (t->state_per_grad_byte * grad + act / w * in_flight > t->capacity) return INFINITY;
  }
  if (s < S - 1 && t->transfer) cost += 2 * t->transfer(t->boundary_bytes / w, t->ctx);
  if (w > 1 && t->reduce) cost += t->reduce(grad, w, t->ctx) / (t->microbatches > 0 ? t->microbatches : 1);
  return cost;
}

double plan_replication_dp(const double *cost, int L, double first, double last, int G, int S, int split,
                           const PlanReplicationTerms *terms, int *layers, int *width) {
  if (S < 1 || S > L || S > G) return INFINITY;
  size_t cells = (size_t)(S + 1) * (L + 1) * (G + 1);
  double *best = malloc(cells * sizeof *best), *prefix = malloc(((size_t)L + 1) * sizeof *prefix);
  int *from_l = malloc(cells * sizeof *from_l), *from_w = malloc(cells * sizeof *from_w);
  if (!best || !prefix || !from_l || !from_w) {
    free(best), free(prefix), free(from_l), free(from_w);
    return NAN;
  }
#define AT(s, l, g) (((size_t)(s) * (L + 1) + (l)) * (G + 1) + (g))
  for (size_t i = 0; i < cells; i++) best[i] = INFINITY, from_l[i] = from_w[i] = -1;
  prefix[0] = 0;
  for (int i = 0; i < L; i++) prefix[i + 1] = prefix[i] + cost[i];
  best[AT(0, 0, 0)] = 0;
  for (int s = 1; s <= S; s++)
    for (int l = s; l <= L - (S - s); l++)
      for (int g = s; g <= G - (S - s); g++)
        for (int j = s - 1; j < l; j++)
          for (int w = 1; w <= g - (s - 1); w++) {
            if (split > 0 && split % w) continue; /* the micro-batch must split evenly */
            double prev = best[AT(s - 1, j, g - w)];
            if (isinf(prev)) continue;
            double seg = prefix[l] - prefix[j] + (j == 0 ? first : 0) + (l == L ? last : 0);
            double v = fmax(prev, plan_replication_stage_cost(terms, L, s - 1, S, w, j, l, seg));
            if (isinf(v)) continue;
            if (v < best[AT(s, l, g)] * (1 - 1e-12)) {
              best[AT(s, l, g)] = v;
              from_l[AT(s, l, g)] = j;
              from_w[AT(s, l, g)] = w;
            }
          }
  double result = best[AT(S, L, G)];
  if (!isinf(result)) {
    int l = L, g = G;
    for (int s = S; s >= 1; s--) {
      int j = from_l[AT(s, l, g)], w = from_w[AT(s, l, g)];
      layers[s - 1] = l - j;
      width[s - 1] = w;
      l = j;
      g -= w;
    }
  }
#undef AT
  free(best), free(prefix), free(from_l), free(from_w);
  return result;
}

/* The search's terms price transfers and reductions on the cluster's first
 * devices: where the stages will sit is chosen after the partition. */
typedef struct TermsCtx {
  const ClusterSpec *cl;
  const PlanOptions *opt;
  int distributed;
} TermsCtx;

static double terms_transfer(double bytes, void *ctx) {
  const TermsCtx *c = ctx;
  return cluster_spec_total_devices(c->cl) > 1 ? plan_p2p_time(c->cl, 0, 1, bytes) : 0;
}

static double terms_reduce(double bytes, int width, void *ctx) {
  const TermsCtx *c = ctx;
  PlanGroupTopo g = replica_group(c->cl, 0, width);
  return plan_bucket_reduce_time(c->cl, c->opt, &g, c->distributed ? PLAN_COLL_REDUCE_SCATTER : PLAN_COLL_ALL_REDUCE,
                                 bytes);
}

int plan_replication_search(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *opt,
                            const PlanConfig *base, int devices, int max_stages, PlanReplicationCandidate *out,
                            int *best, Error *err) {
  int L = m->num_layers;
  if (max_stages <= 0 || max_stages > L) max_stages = L;
  if (max_stages > devices) max_stages = devices;
  if (max_stages > PLAN_MAX_STAGES) max_stages = PLAN_MAX_STAGES;
  *best = -1;
  /* Per-layer costs on one device (they do not depend on the stage count). */
  PlanConfig one = *base;
  memset(&one.par, 0, sizeof one.par);
  one.par.tp = one.par.cp = one.par.dp = one.par.pp = one.par.vpp = one.par.ep = one.par.etp = 1;
  one.num_given_layers = one.num_stage_widths = 0;
  one.schedule_given = 0;
  one.schedule = SCHED_SCHEDULE_NONE;
  one.warmup_set = 0; /* a replicated pipeline runs its schedule's own warm-up */
  int rc = plan_config_finish(&one, m, cl, 1, err);
  if (rc) return rc;
  PlanCostModel cm;
  rc = plan_cost_model_init(&cm, m, cl, opt, &one, NULL, err);
  if (rc) return rc;
  double *cost = malloc((size_t)L * 3 * sizeof *cost);
  int *layers = malloc((size_t)max_stages * 2 * sizeof *layers);
  if (!cost || !layers) {
    free(cost), free(layers);
    return error_set(err, ERR_NOMEM, "stage replication: out of memory");
  }
  /* Transfers, the replicas' reduction and the memory limit (DAPPLE's
   * objective), from the one-device cost and memory models. */
  double *grad = cost + L, *act = cost + 2 * L;
  for (int l = 0; l < L; l++) {
    PlanParams p = plan_layer_params(m, &one, l);
    grad[l] = (p.dense + p.expert) * opt->grad_reduce_bytes;
    act[l] = plan_layer_activation_bytes(m, &one, l, cm.expert_load);
  }
  PlanParams pe = plan_embedding_params(m, &one), ph = plan_head_params(m, &one);
  double elt = plan_activation_bytes(opt, one.dtype), tokens = (double)one.micro_batch_size * one.seq_len;
  TermsCtx tctx = {.cl = cl, .opt = opt, .distributed = base->distributed_optimizer};
  PlanReplicationTerms terms = {
      .microbatches = one.microbatches,
      .grad_bytes = grad,
      .first_grad = (pe.dense + pe.expert) * opt->grad_reduce_bytes,
      .last_grad = (ph.dense + ph.expert) * opt->grad_reduce_bytes,
      .act_bytes = act,
      .last_act = elt * 2 * tokens * m->hidden_size, /* the final norm's input and output */
      .state_per_grad_byte = plan_bytes_per_param(one.dtype, base->distributed_optimizer, 1) / opt->grad_reduce_bytes,
      .capacity = plan_memory_capacity(cl) - cl->memory_reserved,
      .boundary_bytes = cm.p2p_bytes,
      .transfer = terms_transfer,
      .reduce = terms_reduce,
      .ctx = &tctx,
  };
  int *width = layers + max_stages;
  for (int l = 0; l < L; l++) cost[l] = plan_layer_cost(&cm, l)->fwd_total + plan_layer_cost(&cm, l)->bwd_total;
  double first = cm.embedding.fwd_total + cm.embedding.bwd_total, last = cm.head.fwd_total + cm.head.bwd_total;
  for (int S = 1; S <= max_stages && !rc; S++) {
    PlanReplicationCandidate *c = &out[S - 1];
    memset(c, 0, sizeof *c);
    c->step_time = INFINITY;
    c->dp_objective =
        plan_replication_dp(cost, L, first, last, devices, S, base->micro_batch_size, &terms, layers, width);
    if (isinf(c->dp_objective) || isnan(c->dp_objective)) continue;
    PlanConfig *cfg = &c->cfg;
    *cfg = one;
    cfg->par.pp = S;
    cfg->par.edp = 0;
    cfg->schedule = S == 1 ? SCHED_SCHEDULE_NONE : base->schedule == SCHED_SCHEDULE_GPIPE ? SCHED_SCHEDULE_GPIPE
                                                                                           : SCHED_SCHEDULE_1F1B;
    cfg->schedule_given = S > 1;
    cfg->num_given_layers = S;
    cfg->num_stage_widths = S;
    for (int s = 0; s < S; s++) cfg->layers_per_stage[s] = layers[s], cfg->stage_width[s] = width[s];
    if (m->tie_word_embeddings && S > 1) cfg->distributed_optimizer = 0; /* as the runtime ties them */
    rc = plan_config_finish(cfg, m, cl, S, err);
    if (rc) break;
    PlanResult r;
    rc = plan_simulate(m, cl, opt, cfg, NULL, NULL, &r, err);
    if (rc) break;
    c->step_time = r.step_time;
    c->fits = r.fits;
    plan_result_free(&r);
    PlanCostModel scm;
    PlanStageCosts sc;
    rc = plan_cost_model_init(&scm, m, cl, opt, cfg, NULL, err);
    if (!rc) rc = plan_stage_costs_build(&scm, &sc, err);
    if (!rc) {
      rc = plan_stage_costs_replicate(&scm, &sc, err);
      if (!rc) c->pivot_time = plan_stage_costs_pivot_latency(&sc, cfg->microbatches, &c->pivot);
      plan_stage_costs_free(&sc);
    }
    if (!rc && c->fits && (*best < 0 || c->step_time < out[*best].step_time * (1 - 1e-12))) *best = S - 1;
  }
  free(cost);
  free(layers);
  return rc;
}

int plan_replicate_stages_cli(PlanResult *best, const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *opt,
                              int devices, FILE *f, Error *err) {
  int max_stages = m->num_layers < devices ? m->num_layers : devices;
  if (max_stages > 64) max_stages = 64;
  PlanReplicationCandidate *cand = calloc((size_t)max_stages, sizeof *cand);
  if (!cand) return error_set(err, ERR_NOMEM, "stage replication: out of memory");
  PlanConfig base = best->cfg;
  int pick;
  int rc = plan_replication_search(m, cl, opt, &base, devices, max_stages, cand, &pick, err);
  if (rc) {
    free(cand);
    return rc;
  }
  /* Equal widths are the uniform DP x PP layouts the main search ranks
   * already (and the runtime runs): only truly replicated plans compete. */
  pick = -1;
  for (int s = 0; s < max_stages; s++) {
    const PlanReplicationCandidate *c = &cand[s];
    int uneven = 0;
    for (int k = 1; k < c->cfg.num_stage_widths; k++) uneven |= c->cfg.stage_width[k] != c->cfg.stage_width[0];
    if (!isinf(c->step_time) && c->fits && uneven && (pick < 0 || c->step_time < cand[pick].step_time)) pick = s;
  }
  fprintf(f, "\nstage replication (pipeline x per-stage data parallelism on %d devices, micro-batch %d):\n", devices,
         base.micro_batch_size);
  fprintf(f, "  stages  layers x width                          simulated   pivot formula  fits\n");
  for (int s = 0; s < max_stages; s++) {
    const PlanReplicationCandidate *c = &cand[s];
    if (isinf(c->step_time)) continue;
    char desc[48];
    int at = 0;
    for (int k = 0; k < c->cfg.par.pp && at < (int)sizeof desc - 12; k++)
      at += snprintf(desc + at, sizeof desc - (size_t)at, "%s%dx%d", k ? " " : "", c->cfg.layers_per_stage[k],
                     c->cfg.stage_width[k]);
    if (c->cfg.par.pp > 0 && at >= (int)sizeof desc - 12) snprintf(desc + at, sizeof desc - (size_t)at, " ...");
    fprintf(f, "  %6d  %-38s %9.4f s  %9.4f s     %s%s\n", s + 1, desc, c->step_time, c->pivot_time,
           c->fits ? "yes" : "no", s == pick ? "  <- best" : "");
  }
  if (pick < 0) {
    fprintf(f, "  no plan with uneven stage widths fits in memory%s\n",
           base.micro_batch_size < 2 ? " (micro-batch 1 cannot split over replicas: try --mbs-list 2,4,8)" : "");
  } else if (cand[pick].step_time < best->step_time * (1 - 1e-9) && best->fits) {
    PlanResult r;
    rc = plan_simulate(m, cl, opt, &cand[pick].cfg, NULL, NULL, &r, err);
    if (!rc) {
      fprintf(f, "  replication buys %.1f%% over the best unreplicated layout (%.4f -> %.4f s/step); the plan is the "
             "replicated one (fivefold train --plan runs it)\n",
             100 * (best->step_time / r.step_time - 1), best->step_time, r.step_time);
      plan_result_free(best);
      *best = r;
    }
  } else {
    fprintf(f, "  the best unreplicated layout (%.4f s/step) is at least as fast: kept\n", best->step_time);
  }
  free(cand);
  return rc;
}
