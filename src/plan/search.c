/* The configuration search (rules and pruning in search.h): enumerate
 * layouts, price each variant (virtual stages, micro-batch size,
 * recomputation, optimizer sharding) and check its memory, order the
 * survivors by a lower bound on their step time and simulate until the
 * bound cannot beat the K-th best. */
#include "plan/search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void plan_search_space_default(PlanSearchSpace *s, int gpus, int seq_len, int global_batch_size) {
  memset(s, 0, sizeof *s);
  s->gpus = gpus;
  s->seq_len = seq_len;
  s->global_batch_size = global_batch_size;
  s->dtype = PLAN_DTYPE_BF16;
  s->max_vpp = 8;
  s->allow_folding = 1;
  for (int r = 0; r < PLAN_NUM_RECOMPUTE; r++) s->allow_recompute[r] = 1;
  s->allow_distributed_optimizer = 1;
}

void plan_search_result_free(PlanSearchResult *r) {
  if (!r) return;
  for (int i = 0; i < r->num_top; i++) plan_result_free(&r->top[i]);
  free(r->top);
  memset(r, 0, sizeof *r);
}

/* A configuration that passed the memory checks, waiting for simulation. */
typedef struct Candidate {
  PlanParallel par;
  int mbs;
  unsigned char recompute, distopt;
  double bound;
} Candidate;

typedef struct Search {
  const ModelConfig *model;
  const ClusterSpec *cluster;
  const PlanOptions *opt;
  const PlanSearchSpace *space;
  PlanTopoCache cache;
  Candidate *cand;
  long num_cand, cap_cand;
  PlanSearchStats stats;
} Search;

static int push_candidate(Search *S, const Candidate *c) {
  if (S->num_cand == S->cap_cand) {
    long cap = S->cap_cand ? 2 * S->cap_cand : 1024;
    Candidate *grown = realloc(S->cand, (size_t)cap * sizeof *grown);
    if (!grown) return -1;
    S->cand = grown;
    S->cap_cand = cap;
  }
  S->cand[S->num_cand++] = *c;
  return 0;
}

static int cmp_candidate(const void *pa, const void *pb) {
  const Candidate *a = pa, *b = pb;
  if (a->bound != b->bound) return a->bound < b->bound ? -1 : 1;
  return 0;
}

/* Model-state bytes of the average pipeline rank, before any partition: a
 * lower bound on the fullest rank's. */
static double state_lower_bound(const Search *S, const PlanConfig *cfg, int distopt) {
  const ModelConfig *m = S->model;
  PlanParams total = plan_embedding_params(m, cfg);
  PlanParams head = plan_head_params(m, cfg);
  total.dense += head.dense;
  for (int l = 0; l < m->num_layers; l++) {
    PlanParams p = plan_layer_params(m, cfg, l);
    total.dense += p.dense;
    total.expert += p.expert;
  }
  double pp = cfg->par.pp;
  double d_dense = (double)cfg->par.dp * cfg->par.cp;
  return (plan_bytes_per_param(cfg->dtype, distopt, d_dense) * total.dense +
          plan_bytes_per_param(cfg->dtype, distopt, cfg->par.edp) * total.expert) / pp +
         S->cluster->memory_reserved;
}

static int micro_batch_sizes(const PlanSearchSpace *sp, int *out) {
  static const int defaults[] = {1, 2, 4, 8};
  if (sp->num_micro_batch_sizes <= 0) {
    memcpy(out, defaults, sizeof defaults);
    return 4;
  }
  int n = sp->num_micro_batch_sizes > 8 ? 8 : sp->num_micro_batch_sizes;
  memcpy(out, sp->micro_batch_sizes, (size_t)n * sizeof *out);
  return n;
}

/* Every variant (vpp, recompute, distopt) of one layout and micro-batch size. */
static int explore_layout(Search *S, PlanConfig *cfg, int mbs, Error *err) {
  const PlanSearchSpace *sp = S->space;
  const ModelConfig *m = S->model;
  int P = cfg->par.pp, L = m->num_layers;
  int max_vpp = P > 1 ? L / P : 1;
  if (sp->max_vpp > 0 && max_vpp > sp->max_vpp) max_vpp = sp->max_vpp;
  int dist_options[2], nd = 0;
  if (sp->allow_distributed_optimizer) dist_options[nd++] = 1;
  if (!sp->require_distributed_optimizer) dist_options[nd++] = 0;
  int nr = 0;
  for (int r = 0; r < PLAN_NUM_RECOMPUTE; r++) nr += sp->allow_recompute[r] != 0;
  cfg->micro_batch_size = mbs;
  for (int vpp = 1; vpp <= max_vpp; vpp++) {
    cfg->par.vpp = vpp;
    cfg->distributed_optimizer = 0;
    cfg->recompute = PLAN_RECOMPUTE_NONE;
    cfg->schedule = SCHED_SCHEDULE_NONE;
    cfg->num_given_layers = 0;
    cfg->par.dp = 0;
    if (plan_config_finish(cfg, m, S->cluster, sp->gpus, NULL)) continue;
    S->stats.considered += (long)nr * nd;
    int found = 0; /* a variant fits: the rest are dominated */
    for (int r = 0; r < PLAN_NUM_RECOMPUTE; r++) {
      if (!sp->allow_recompute[r]) continue;
      if (found) {
        S->stats.pruned_dominated += nd;
        continue;
      }
      cfg->recompute = (PlanRecompute)r;
      PlanCostModel cm;
      int priced = 0;
      for (int k = 0; k < nd; k++) {
        if (found) {
          S->stats.pruned_dominated++;
          continue;
        }
        cfg->distributed_optimizer = dist_options[k];
        if (plan_runtime_check(sp->runtime, m, cfg, NULL)) {
          S->stats.pruned_runtime++;
          continue;
        }
        if (state_lower_bound(S, cfg, dist_options[k]) > plan_memory_capacity(S->cluster)) {
          S->stats.pruned_memory_lb++;
          continue;
        }
        if (!priced) {
          int rc = plan_cost_model_init(&cm, m, S->cluster, S->opt, cfg, &S->cache, err);
          if (rc) return rc;
          priced = 1;
        }
        PlanStageCosts sc;
        int rc = plan_stage_costs_build(&cm, &sc, err);
        if (rc) return rc;
        PlanRankMemory *mem = malloc((size_t)P * sizeof *mem);
        if (!mem) {
          plan_stage_costs_free(&sc);
          return error_set(err, ERR_NOMEM, "search: out of memory");
        }
        rc = plan_memory_estimate(m, S->cluster, cfg, &sc.part, cm.expert_load, mem, err);
        double peak = 0;
        for (int i = 0; !rc && i < P; i++) peak = fmax(peak, mem[i].total);
        free(mem);
        if (rc) {
          plan_stage_costs_free(&sc);
          return rc;
        }
        if (peak > plan_memory_capacity(S->cluster)) {
          S->stats.pruned_memory++;
          plan_stage_costs_free(&sc);
          continue;
        }
        Candidate c;
        c.par = cfg->par;
        c.mbs = mbs;
        c.recompute = (unsigned char)r;
        c.distopt = (unsigned char)dist_options[k];
        c.bound = plan_stage_costs_lower_bound(&sc, cfg->microbatches);
        plan_stage_costs_free(&sc);
        if (push_candidate(S, &c)) return error_set(err, ERR_NOMEM, "search: out of memory");
        found = 1;
      }
    }
  }
  return ERR_OK;
}

static int enumerate(Search *S, Error *err) {
  const PlanSearchSpace *sp = S->space;
  const ModelConfig *m = S->model;
  int G = sp->gpus, D = S->cluster->devices_per_node;
  int mbs_list[8], n_mbs = micro_batch_sizes(sp, mbs_list);
  int moe = m->num_experts > 0;
  for (int pp = 1; pp <= G && pp <= m->num_layers; pp++) {
    if (G % pp || (sp->max_pp > 0 && pp > sp->max_pp) || pp < sp->min_pp) continue;
    for (int tp = 1; tp <= G / pp && tp <= D; tp++) {
      if ((G / pp) % tp || (sp->max_tp > 0 && tp > sp->max_tp)) continue;
      for (int cp = 1; cp <= G / (pp * tp); cp++) {
        if ((G / (pp * tp)) % cp || (sp->max_cp > 0 && cp > sp->max_cp)) continue;
        if (sp->seq_len % (2 * cp)) continue;
        /* Below a thousand tokens per rank CP only adds ring latency. */
        if (cp > 1 && sp->seq_len / cp < 1024) continue;
        int max_ep = moe ? m->num_experts : 1;
        for (int ep = 1; ep <= max_ep; ep++) {
          if (moe && m->num_experts % ep) continue;
          if (sp->max_ep > 0 && ep > sp->max_ep) continue;
          for (int etp = 1; etp <= (moe ? D : 1); etp++) {
            if (sp->max_etp > 0 && etp > sp->max_etp) continue;
            if (moe && m->moe_intermediate_size % etp) continue;
            if ((G / pp) % (ep * etp)) continue;
            PlanConfig cfg;
            plan_config_init(&cfg, sp->seq_len, sp->global_batch_size, 1);
            cfg.dtype = sp->dtype;
            cfg.recompute_modules = sp->recompute_modules;
            /* A dense model's MoE grid mirrors attention (parallel.h). */
            cfg.par.tp = tp, cfg.par.cp = cp, cfg.par.pp = pp, cfg.par.ep = ep, cfg.par.etp = moe ? etp : tp;
            cfg.par.dp = G / (pp * tp * cp);
            if (!sp->allow_folding && plan_config_is_folded(&cfg)) continue;
            for (int i = 0; i < n_mbs; i++) {
              int rc = explore_layout(S, &cfg, mbs_list[i], err);
              if (rc) return rc;
            }
          }
        }
      }
    }
  }
  return ERR_OK;
}

static void candidate_config(const Search *S, const Candidate *c, PlanConfig *cfg) {
  plan_config_init(cfg, S->space->seq_len, S->space->global_batch_size, c->mbs);
  cfg->dtype = S->space->dtype;
  cfg->par = c->par;
  cfg->par.dp = 0;
  cfg->recompute = (PlanRecompute)c->recompute;
  cfg->recompute_modules = S->space->recompute_modules;
  cfg->distributed_optimizer = c->distopt;
}

int plan_search(const ModelConfig *m, const ClusterSpec *cl, const PlanOptions *opt, const PlanSearchSpace *space,
                int top_k, PlanSearchResult *out, Error *err) {
  memset(out, 0, sizeof *out);
  if (top_k < 1) top_k = 1;
  if (space->gpus < 1 || space->gpus > cluster_spec_total_devices(cl))
    return error_set(err, ERR_CONFIG, "search: %d GPUs requested, cluster %s has %d", space->gpus, cl->name,
                     cluster_spec_total_devices(cl));
  Search *S = calloc(1, sizeof *S);
  if (!S) return error_set(err, ERR_NOMEM, "search: out of memory");
  S->model = m;
  S->cluster = cl;
  S->opt = opt;
  S->space = space;
  int rc = enumerate(S, err);
  PlanResult *top = rc ? NULL : calloc((size_t)top_k, sizeof *top);
  if (!rc && !top) rc = error_set(err, ERR_NOMEM, "search: out of memory");
  int n_top = 0;
  if (!rc) {
    if (S->num_cand) qsort(S->cand, (size_t)S->num_cand, sizeof *S->cand, cmp_candidate);
    for (long i = 0; i < S->num_cand; i++) {
      if (n_top == top_k && S->cand[i].bound >= top[n_top - 1].step_time) {
        S->stats.pruned_bound += S->num_cand - i;
        break;
      }
      PlanConfig cfg;
      candidate_config(S, &S->cand[i], &cfg);
      rc = plan_config_finish(&cfg, m, cl, space->gpus, err);
      PlanResult r;
      PlanSimOptions sim = {.exposed_p2p = 1}; /* measure exposed transfers: the table names the bottleneck */
      if (!rc) rc = plan_simulate(m, cl, opt, &cfg, &sim, &S->cache, &r, err);
      if (rc) break;
      S->stats.simulated++;
      if (!r.fits) { /* cannot happen: the same partition passed the memory check */
        S->stats.pruned_memory++;
        plan_result_free(&r);
        continue;
      }
      /* Insert by step time, keeping the best top_k. */
      int pos = n_top;
      while (pos > 0 && r.step_time < top[pos - 1].step_time) pos--;
      if (pos >= top_k) {
        plan_result_free(&r);
        continue;
      }
      if (n_top == top_k) plan_result_free(&top[top_k - 1]);
      else n_top++;
      memmove(&top[pos + 1], &top[pos], (size_t)(n_top - 1 - pos) * sizeof *top);
      top[pos] = r;
    }
  }
  out->top = top;
  out->num_top = n_top;
  out->stats = S->stats;
  free(S->cand);
  free(S);
  if (!rc && n_top == 0)
    rc = error_set(err, ERR_CONFIG,
                   "no configuration fits: %ld considered, %ld over memory; try more GPUs, a smaller micro-batch or "
                   "global batch, or a cluster with more memory per device",
                   out->stats.considered, out->stats.pruned_memory + out->stats.pruned_memory_lb);
  if (rc) {
    PlanSearchStats stats = out->stats;
    plan_search_result_free(out);
    out->stats = stats; /* the counts still say what was tried */
  }
  return rc;
}
