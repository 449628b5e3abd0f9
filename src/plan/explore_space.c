/* The per-layer plan space (explore_space.h): decoding decision vectors into
 * configurations, the cached evaluation, the exact enumerator and the
 * report. */
#include "plan/explore_space.h"

#include <stdlib.h>
#include <string.h>

struct PlanExploreCacheEntry {
  uint64_t hash; /* 0: empty */
  unsigned char *decisions;
  PlanExploreEval eval;
};

void plan_explore_spec_default(PlanExploreSpec *spec) {
  memset(spec, 0, sizeof *spec);
  spec->groups = PLAN_EXPLORE_GROUP_LAYER;
  spec->group_size = 1;
  spec->allow_recompute[PLAN_RECOMPUTE_NONE] = 1;
  spec->allow_recompute[PLAN_RECOMPUTE_FULL] = 1;
  spec->max_shift = 2;
  spec->budget = 1000;
  spec->seed = 1;
}

static uint64_t hash_decisions(const unsigned char *d, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; i++) h = (h ^ d[i]) * 1099511628211ull;
  return h ? h : 1;
}

static PlanExploreCacheEntry *cache_find(PlanExploreSpace *sp, const unsigned char *d, uint64_t h) {
  for (long i = (long)(h & (uint64_t)(sp->cache_cap - 1));; i = (i + 1) & (sp->cache_cap - 1)) {
    PlanExploreCacheEntry *e = &sp->cache[i];
    if (!e->hash || (e->hash == h && !memcmp(e->decisions, d, (size_t)sp->num_decisions))) return e;
  }
}

static int cache_grow(PlanExploreSpace *sp, Error *err) {
  long old_cap = sp->cache_cap;
  PlanExploreCacheEntry *old = sp->cache;
  sp->cache_cap = old_cap ? old_cap * 2 : 1024;
  sp->cache = calloc((size_t)sp->cache_cap, sizeof *sp->cache);
  if (!sp->cache) {
    sp->cache = old;
    sp->cache_cap = old_cap;
    return error_set(err, ERR_NOMEM, "explore: out of memory for the evaluation cache");
  }
  for (long i = 0; i < old_cap; i++)
    if (old[i].hash) *cache_find(sp, old[i].decisions, old[i].hash) = old[i];
  free(old);
  return 0;
}

int plan_explore_config(const PlanExploreSpace *sp, const unsigned char *d, PlanConfig *out) {
  const int S = sp->num_stages, L = sp->num_layers, K = sp->spec.max_shift;
  *out = sp->base;
  int prev = 0;
  for (int b = 0; b < S; b++) {
    int end = L;
    if (b < S - 1) {
      end = 0;
      for (int s = 0; s <= b; s++) end += sp->base.layers_per_stage[s];
      end += (int)d[sp->num_groups + b] - K;
    }
    if (end - prev < 1) return -1;
    out->layers_per_stage[b] = end - prev;
    prev = end;
  }
  out->num_given_layers = S;
  out->num_layer_recompute = L;
  for (int l = 0; l < L; l++) out->layer_recompute[l] = (unsigned char)sp->choice[d[sp->group_of_layer[l]]];
  return 0;
}

static int simulate_decisions(PlanExploreSpace *sp, const unsigned char *d, PlanExploreEval *out, Error *err) {
  memset(out, 0, sizeof *out);
  PlanConfig cfg;
  if (plan_explore_config(sp, d, &cfg)) return 0;
  PlanResult r;
  int rc = plan_simulate(sp->model, sp->cluster, sp->opt, &cfg, NULL, NULL, &r, err);
  if (rc) return rc;
  out->valid = 1;
  out->fits = r.fits;
  out->step_time = r.step_time;
  out->peak_memory = r.peak_memory;
  plan_result_free(&r);
  return 0;
}

int plan_explore_exhausted(const PlanExploreSpace *sp) {
  return sp->evaluations >= sp->spec.budget;
}

int plan_explore_evaluate(PlanExploreSpace *sp, const unsigned char *d, PlanExploreEval *out, int *spent, Error *err) {
  if (spent) *spent = 0;
  sp->visits++;
  uint64_t h = hash_decisions(d, sp->num_decisions);
  PlanExploreCacheEntry *e = cache_find(sp, d, h);
  if (e->hash) {
    *out = e->eval;
    return 0;
  }
  PlanConfig probe;
  if (plan_explore_config(sp, d, &probe)) {
    memset(out, 0, sizeof *out); /* invalid: free, and not worth caching */
    return 0;
  }
  if (plan_explore_exhausted(sp)) {
    memset(out, 0, sizeof *out);
    if (spent) *spent = 1;
    return 0;
  }
  int rc = simulate_decisions(sp, d, out, err);
  if (rc) return rc;
  sp->evaluations++;
  if ((sp->cache_count + 1) * 2 > sp->cache_cap) {
    if ((rc = cache_grow(sp, err))) return rc;
    e = cache_find(sp, d, h);
  }
  e->decisions = malloc((size_t)sp->num_decisions);
  if (!e->decisions) return error_set(err, ERR_NOMEM, "explore: out of memory for the evaluation cache");
  memcpy(e->decisions, d, (size_t)sp->num_decisions);
  e->hash = h;
  e->eval = *out;
  sp->cache_count++;
  if (out->valid && out->fits && (!sp->have_best || out->step_time < sp->best_eval.step_time)) {
    sp->have_best = 1;
    memcpy(sp->best, d, (size_t)sp->num_decisions);
    sp->best_eval = *out;
    sp->best_at = sp->evaluations;
  }
  return 0;
}

int plan_explore_space_init(PlanExploreSpace *sp, const ModelConfig *model, const ClusterSpec *cluster,
                            const PlanOptions *opt, const PlanConfig *cfg, const PlanExploreSpec *spec, Error *err) {
  memset(sp, 0, sizeof *sp);
  sp->model = model;
  sp->cluster = cluster;
  sp->opt = opt;
  sp->spec = *spec;
  if (cfg->par.vpp != 1 || cfg->num_stage_widths > 0)
    return error_set(err, ERR_CONFIG, "explore: the layout must have vpp 1 and no stage replication (got vpp %d)",
                     cfg->par.vpp);
  if (spec->max_shift < 0 || spec->max_shift > 100)
    return error_set(err, ERR_CONFIG, "explore: max_shift %d: expected 0..100", spec->max_shift);
  if (spec->budget < 1) return error_set(err, ERR_CONFIG, "explore: budget %ld: expected at least 1", spec->budget);
  PlanConfig layout = *cfg;
  layout.num_layer_recompute = 0;
  PlanResult r;
  int rc = plan_simulate(model, cluster, opt, &layout, NULL, NULL, &r, err);
  if (rc) return rc;
  sp->base = r.cfg;
  plan_result_free(&r);
  sp->num_layers = model->num_layers;
  sp->num_stages = sp->base.par.pp;

  sp->spec.allow_recompute[sp->base.recompute] = 1; /* the layout's own plan is in the space */
  for (int c = 0; c < PLAN_NUM_RECOMPUTE; c++)
    if (sp->spec.allow_recompute[c]) sp->choice[sp->num_choices++] = (PlanRecompute)c;
  int gs = spec->group_size > 1 ? spec->group_size : 1;
  int mixed = 0;
  for (int l = 0; l < sp->num_layers; l++) mixed |= model->num_experts > 0 && model->is_moe_layer[l] != model->is_moe_layer[0];
  if (spec->groups == PLAN_EXPLORE_GROUP_KIND) {
    for (int l = 0; l < sp->num_layers; l++)
      sp->group_of_layer[l] = mixed ? (model->num_experts > 0 && model->is_moe_layer[l]) : 0;
    sp->num_groups = mixed ? 2 : 1;
  } else {
    for (int l = 0; l < sp->num_layers; l++) sp->group_of_layer[l] = l / gs;
    sp->num_groups = (sp->num_layers + gs - 1) / gs;
  }
  int base_choice = 0;
  for (int c = 0; c < sp->num_choices; c++)
    if (sp->choice[c] == sp->base.recompute) base_choice = c;
  sp->num_decisions = sp->num_groups + sp->num_stages - 1;
  for (int g = 0; g < sp->num_groups; g++) {
    sp->arity[g] = sp->num_choices;
    sp->uniform[g] = (unsigned char)base_choice;
  }
  for (int b = 0; b < sp->num_stages - 1; b++) {
    sp->arity[sp->num_groups + b] = 2 * spec->max_shift + 1;
    sp->uniform[sp->num_groups + b] = (unsigned char)spec->max_shift;
  }
  sp->max_arity = 1;
  for (int i = 0; i < sp->num_decisions; i++)
    if (sp->arity[i] > sp->max_arity) sp->max_arity = sp->arity[i];
  if ((rc = cache_grow(sp, err))) return rc;
  return plan_explore_evaluate(sp, sp->uniform, &sp->uniform_eval, NULL, err);
}

void plan_explore_space_free(PlanExploreSpace *sp) {
  for (long i = 0; i < sp->cache_cap; i++) free(sp->cache[i].decisions);
  free(sp->cache);
  sp->cache = NULL;
  sp->cache_cap = sp->cache_count = 0;
}

double plan_explore_space_size(const PlanExploreSpace *sp) {
  double n = 1;
  for (int i = 0; i < sp->num_decisions && n < 4.6e18; i++) n *= sp->arity[i];
  return n < 4.6e18 ? n : 4.6e18;
}

int plan_explore_exact(PlanExploreSpace *sp, int *complete, Error *err) {
  unsigned char d[PLAN_EXPLORE_MAX_DECISIONS];
  memset(d, 0, sizeof d);
  *complete = 0;
  for (;;) {
    PlanExploreEval ev;
    int spent;
    int rc = plan_explore_evaluate(sp, d, &ev, &spent, err);
    if (rc) return rc;
    if (spent) return 0;
    int i = 0;
    while (i < sp->num_decisions && ++d[i] == sp->arity[i]) d[i++] = 0;
    if (i == sp->num_decisions) break;
  }
  *complete = 1;
  return 0;
}

static void print_plan(const PlanExploreSpace *sp, const unsigned char *d, FILE *f) {
  PlanConfig cfg;
  if (plan_explore_config(sp, d, &cfg)) return;
  fprintf(f, "    layers per stage:");
  for (int s = 0; s < sp->num_stages; s++) fprintf(f, " %d", cfg.layers_per_stage[s]);
  fprintf(f, "\n    recompute per layer:");
  for (int l = 0; l < sp->num_layers; l++) fprintf(f, " %c", plan_recompute_name(cfg.layer_recompute[l])[0]);
  fprintf(f, "  (n none, s selective, f full)\n");
}

static void describe_decision(const PlanExploreSpace *sp, int i, const unsigned char *d, char *buf, size_t size) {
  if (i < sp->num_groups) {
    int first = -1, last = -1;
    for (int l = 0; l < sp->num_layers; l++)
      if (sp->group_of_layer[l] == i) {
        if (first < 0) first = l;
        last = l;
      }
    const char *what = sp->spec.groups == PLAN_EXPLORE_GROUP_KIND && sp->num_groups == 2
                           ? (i ? "MoE layers" : "dense layers")
                           : (first == last ? "layer" : "layers");
    if (first == last && strcmp(what, "layer") == 0)
      snprintf(buf, size, "%s %d recompute %s", what, first, plan_recompute_name(sp->choice[d[i]]));
    else
      snprintf(buf, size, "%s %d..%d recompute %s", what, first, last, plan_recompute_name(sp->choice[d[i]]));
  } else {
    int b = i - sp->num_groups;
    snprintf(buf, size, "boundary %d|%d moved %+d layer(s)", b, b + 1, (int)d[i] - sp->spec.max_shift);
  }
}

static double gib(double bytes) {
  return bytes / (1024.0 * 1024.0 * 1024.0);
}

int plan_explore_report(PlanExploreSpace *sp, const char *method, int explain, FILE *f, Error *err) {
  const PlanExploreEval *u = &sp->uniform_eval;
  fprintf(f, "explore (%s): %d layers, %d stages, %d groups x %d recomputation choices, boundaries +-%d: %.3g plans\n",
          method, sp->num_layers, sp->num_stages, sp->num_groups, sp->num_choices, sp->spec.max_shift,
          plan_explore_space_size(sp));
  fprintf(f, "  simulations %ld of budget %ld (%ld evaluations asked for, the rest cached or invalid)\n",
          sp->evaluations, sp->spec.budget, sp->visits);
  fprintf(f, "  uniform plan: %.4f s/step, peak %.2f GiB, %s\n", u->step_time, gib(u->peak_memory),
          u->fits ? "fits" : "does not fit");
  print_plan(sp, sp->uniform, f);
  if (!sp->have_best) {
    fprintf(f, "  no plan that fits in memory was found\n");
    return 0;
  }
  const PlanExploreEval *b = &sp->best_eval;
  fprintf(f, "  best plan: %.4f s/step, peak %.2f GiB, found after %ld simulations", b->step_time, gib(b->peak_memory),
          sp->best_at);
  if (u->fits) fprintf(f, " (%.1f%% faster than uniform)", 100.0 * (u->step_time - b->step_time) / u->step_time);
  fprintf(f, "\n");
  print_plan(sp, sp->best, f);
  if (!explain) return 0;
  fprintf(f, "  what each choice bought (step and peak of the best plan minus those with that one choice put back\n"
             "  to the layout's; negative = saved):\n");
  int any = 0;
  for (int i = 0; i < sp->num_decisions; i++) {
    if (sp->best[i] == sp->uniform[i]) continue;
    unsigned char d[PLAN_EXPLORE_MAX_DECISIONS];
    memcpy(d, sp->best, (size_t)sp->num_decisions);
    d[i] = sp->uniform[i];
    PlanExploreEval ev;
    int rc = simulate_decisions(sp, d, &ev, err);
    if (rc) return rc;
    char what[96];
    describe_decision(sp, i, sp->best, what, sizeof what);
    any = 1;
    if (!ev.valid) {
      fprintf(f, "    %-40s needed: without it a stage has no layer\n", what);
      continue;
    }
    fprintf(f, "    %-40s %+8.2f ms/step, %+7.3f GiB peak%s\n", what, 1e3 * (b->step_time - ev.step_time),
            gib(b->peak_memory - ev.peak_memory), ev.fits ? "" : " (without it the plan does not fit)");
  }
  if (!any) fprintf(f, "    nothing: the best plan is the layout's own\n");
  return 0;
}

int plan_explore_run(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                     const PlanConfig *cfg, const char *method, const PlanExploreSpec *spec, int explain, FILE *f,
                     Error *err) {
  if (strcmp(method, "sa") && strcmp(method, "dqn") && strcmp(method, "exact"))
    return error_set(err, ERR_ARG, "--explore: \"%s\": expected sa, dqn or exact", method);
  PlanExploreSpace *sp = malloc(sizeof *sp);
  if (!sp) return error_set(err, ERR_NOMEM, "explore: out of memory");
  int rc = plan_explore_space_init(sp, model, cluster, opt, cfg, spec, err);
  long episodes = 0;
  int complete = 1;
  if (!rc) {
    if (!strcmp(method, "sa")) rc = plan_explore_sa(sp, err);
    else if (!strcmp(method, "dqn")) rc = plan_explore_dqn(sp, &episodes, err);
    else rc = plan_explore_exact(sp, &complete, err);
  }
  if (!rc) {
    char label[64];
    if (!strcmp(method, "dqn")) snprintf(label, sizeof label, "dqn, seed %llu, %ld episodes",
                                         (unsigned long long)spec->seed, episodes);
    else if (!strcmp(method, "sa")) snprintf(label, sizeof label, "sa, seed %llu", (unsigned long long)spec->seed);
    else snprintf(label, sizeof label, "exact, %s", complete ? "every plan" : "stopped at the budget");
    rc = plan_explore_report(sp, label, explain, f, err);
  }
  plan_explore_space_free(sp);
  free(sp);
  return rc;
}
