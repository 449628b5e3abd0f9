/* The order search (order.h): the schedules simulated side by side, then a
 * steepest descent on per-rank warm-up depths, memory-checked. */
#include "plan/order.h"

#include <stdlib.h>
#include <string.h>

#include "plan/mapping.h"
#include "sched/builders.h"
#include "sched/partition.h"

/* A candidate that fits beats one that does not; among fitting ones the
 * faster wins, among the others the smaller peak. */
static int improves(const PlanResult *a, const PlanResult *b) {
  if (a->fits != b->fits) return a->fits;
  if (a->fits) return a->step_time < b->step_time * (1 - 1e-9);
  return a->peak_memory < b->peak_memory * (1 - 1e-9);
}

/* Depths the scheduler accepts for kind (1F1B family: in [0, m], not
 * growing along the pipeline; interleaved: also its bounds, builders.h),
 * at most m (m v chunks) each, so a descent cannot climb past the point
 * where deeper changes nothing. */
static int valid_depths(const PlanConfig *base, SchedScheduleKind kind, const int *w) {
  int P = base->par.pp, v = kind == SCHED_SCHEDULE_INTERLEAVED ? base->par.vpp : 1, top = base->microbatches * v;
  SchedConfig sc;
  memset(&sc, 0, sizeof sc);
  sc.schedule = kind;
  sc.pp = P;
  sc.vpp = v;
  sc.microbatches = base->microbatches;
  sc.warmup_set = P;
  for (int q = 0; q < P; q++) {
    if (w[q] < 0 || w[q] > top) return 0;
    sc.warmup[q] = w[q];
  }
  return sched_config_validate(&sc, NULL) == ERR_OK;
}

static int simulate_order(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                          const PlanConfig *base, SchedScheduleKind kind, const int *warmup, PlanResult *out,
                          Error *err) {
  PlanConfig cfg = *base;
  cfg.schedule = kind;
  cfg.schedule_given = 1;
  cfg.warmup_set = warmup ? cfg.par.pp : 0;
  if (warmup) memcpy(cfg.warmup, warmup, (size_t)cfg.par.pp * sizeof *warmup);
  return plan_simulate(model, cluster, opt, &cfg, NULL, NULL, out, err);
}

/* The schedule's own depth of rank q (sched_warmup_forwards' default). */
static int default_depth(const PlanConfig *base, SchedScheduleKind kind, int q) {
  int P = base->par.pp, m = base->microbatches, v = base->par.vpp;
  int w = kind == SCHED_SCHEDULE_INTERLEAVED ? 2 * (P - q - 1) + (v - 1) * P : P - q - 1;
  int top = kind == SCHED_SCHEDULE_INTERLEAVED ? m * v : m;
  return w < top ? w : top;
}

/* Steepest descent on kind's warm-up depths from its defaults, whose
 * simulation is *walk; on return *walk is the best reached (stats->moves
 * counts the steps; 0: *walk unchanged). */
static int descend(const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                   const PlanConfig *base, SchedScheduleKind fk, int budget, PlanResult *walk, PlanOrderStats *stats,
                   Error *err) {
  int P = base->par.pp, cur[SCHED_MAX_WARMUP_RANKS];
  for (int q = 0; q < P; q++) cur[q] = default_depth(base, fk, q);
  long spent = 0;
  for (;;) {
    PlanResult step;
    int have_step = 0, step_depths[SCHED_MAX_WARMUP_RANKS];
    /* Moves: one rank's depth, or the depths of ranks 0..q together (a
     * uniformly deeper pipeline is what lets W wait), up or down by one. */
    for (int move = 0; move < 2 * P && spent < budget; move++)
      for (int d = -1; d <= 1 && spent < budget; d += 2) {
        int q = move % P, prefix = move >= P;
        if (prefix && q == 0) continue; /* the same as rank 0 alone */
        int cand[SCHED_MAX_WARMUP_RANKS];
        memcpy(cand, cur, (size_t)P * sizeof *cand);
        for (int j = prefix ? 0 : q; j <= q; j++) cand[j] += d;
        if (!valid_depths(base, fk, cand)) continue;
        PlanResult t;
        int rc = simulate_order(model, cluster, opt, base, fk, cand, &t, err);
        if (rc) {
          if (have_step) plan_result_free(&step);
          return rc;
        }
        spent++;
        stats->simulated++;
        if (improves(&t, have_step ? &step : walk)) {
          if (have_step) plan_result_free(&step);
          step = t;
          have_step = 1;
          memcpy(step_depths, cand, (size_t)P * sizeof *cand);
        } else {
          plan_result_free(&t);
        }
      }
    if (!have_step) return ERR_OK;
    plan_result_free(walk);
    *walk = step;
    memcpy(cur, step_depths, (size_t)P * sizeof *cur);
    stats->moves++;
  }
}

/* Interleaved: Megatron-Core's depths against the descended ones. */
static int search_interleaved(PlanResult *r, const ModelConfig *model, const ClusterSpec *cluster,
                              const PlanOptions *opt, int budget, PlanOrderStats *stats, Error *err) {
  const PlanConfig base = r->cfg;
  PlanResult plain;
  int rc = simulate_order(model, cluster, opt, &base, SCHED_SCHEDULE_INTERLEAVED, NULL, &plain, err);
  if (rc) return rc;
  stats->simulated++;
  stats->num_kinds = 1;
  stats->kind[0] = SCHED_SCHEDULE_INTERLEAVED;
  stats->kind_step_time[0] = plain.step_time;
  stats->kind_fits[0] = plain.fits;
  PlanResult walk;
  if (plan_result_copy(&walk, &plain)) {
    plan_result_free(&plain);
    return error_set(err, ERR_NOMEM, "order search: out of memory");
  }
  rc = descend(model, cluster, opt, &base, SCHED_SCHEDULE_INTERLEAVED, budget, &walk, stats, err);
  PlanResult *best = !rc && stats->moves && improves(&walk, &plain) ? &walk : &plain;
  if (!rc) {
    plan_result_replace_keep_mapping(r, best);
    plan_result_free(best == &walk ? &plain : &walk);
  } else {
    plan_result_free(&walk);
    plan_result_free(&plain);
  }
  return rc;
}

int plan_order_search(PlanResult *r, const ModelConfig *model, const ClusterSpec *cluster, const PlanOptions *opt,
                      int budget, PlanOrderStats *stats, Error *err) {
  PlanOrderStats local;
  if (!stats) stats = &local;
  memset(stats, 0, sizeof *stats);
  stats->start_schedule = r->cfg.schedule;
  stats->start_step_time = r->step_time;
  const PlanConfig base = r->cfg;
  int P = base.par.pp;
  if (P < 2 || base.num_stage_widths || P > SCHED_MAX_WARMUP_RANKS) return ERR_OK;
  if (budget <= 0) budget = 400;
  if (base.par.vpp != 1)
    return base.schedule == SCHED_SCHEDULE_INTERLEAVED ? search_interleaved(r, model, cluster, opt, budget, stats, err)
                                                       : ERR_OK;
  static const SchedScheduleKind kinds[PLAN_ORDER_KINDS] = {SCHED_SCHEDULE_1F1B, SCHED_SCHEDULE_GPIPE,
                                                            SCHED_SCHEDULE_ZB_H1};
  PlanResult best;
  int have = 0, family_best = -1; /* index into kinds of the best 1F1B-family schedule */
  PlanResult family[PLAN_ORDER_KINDS];
  stats->num_kinds = PLAN_ORDER_KINDS;
  for (int k = 0; k < PLAN_ORDER_KINDS; k++) {
    int rc = simulate_order(model, cluster, opt, &base, kinds[k], NULL, &family[k], err);
    if (rc) {
      for (int j = 0; j < k; j++) plan_result_free(&family[j]);
      return rc;
    }
    stats->simulated++;
    stats->kind[k] = kinds[k];
    stats->kind_step_time[k] = family[k].step_time;
    stats->kind_fits[k] = family[k].fits;
    if (kinds[k] != SCHED_SCHEDULE_GPIPE && (family_best < 0 || improves(&family[k], &family[family_best])))
      family_best = k;
  }
  /* Warm-up descent from the best schedule of the 1F1B family. */
  PlanResult walk;
  if (plan_result_copy(&walk, &family[family_best])) {
    for (int k = 0; k < PLAN_ORDER_KINDS; k++) plan_result_free(&family[k]);
    return error_set(err, ERR_NOMEM, "order search: out of memory");
  }
  int rc = descend(model, cluster, opt, &base, kinds[family_best], budget, &walk, stats, err);
  if (rc) {
    plan_result_free(&walk);
    for (int k = 0; k < PLAN_ORDER_KINDS; k++) plan_result_free(&family[k]);
    return rc;
  }
  /* The winner among the plain schedules and the descended one. */
  for (int k = 0; k < PLAN_ORDER_KINDS; k++) {
    if (!have || improves(&family[k], &best)) {
      if (have) plan_result_free(&best);
      best = family[k];
      have = 1;
    } else {
      plan_result_free(&family[k]);
    }
  }
  if (stats->moves && improves(&walk, &best)) {
    plan_result_free(&best);
    best = walk;
  } else {
    plan_result_free(&walk);
  }
  if (improves(&best, r) || best.cfg.schedule == r->cfg.schedule)
    plan_result_replace_keep_mapping(r, &best);
  else
    plan_result_free(&best);
  return ERR_OK;
}

int plan_order_search_explained(PlanResult *r, const ModelConfig *model, const ClusterSpec *cluster,
                                const PlanOptions *opt, FILE *f, Error *err) {
  ClusterSpec view = plan_result_cluster_view(cluster, r);
  PlanOrderStats st;
  int rc = plan_order_search(r, model, &view, opt, 0, &st, err);
  if (!rc && st.simulated) {
    fputc('\n', f);
    plan_order_explain(&st, r, f);
  }
  return rc;
}

void plan_order_print_flags(const PlanConfig *cfg, FILE *f) {
  for (int q = 0; q < cfg->warmup_set; q++) fprintf(f, "%s%d", q ? "," : " --warmup ", cfg->warmup[q]);
  /* The order costs the program was priced with (simulate's own are the
   * scheduler's defaults), to the last digit: they place its sends. */
  if (cfg->par.pp > 1 && cfg->order_fwd_cost > 0 && cfg->order_bwd_cost > 0)
    fprintf(f, " --order-fwd-cost %.17g --order-bwd-cost %.17g", cfg->order_fwd_cost, cfg->order_bwd_cost);
}

int plan_order_parse_warmup(const char *text, PlanConfig *cfg, Error *err) {
  int *values = NULL, n = 0;
  int rc = sched_partition_parse_list(text, &values, &n, err);
  if (!rc && (n < 1 || n > SCHED_MAX_WARMUP_RANKS))
    rc = error_set(err, ERR_ARG, "--warmup: %d depths; give one per pipeline rank (at most %d)", n,
                   SCHED_MAX_WARMUP_RANKS);
  if (!rc) {
    cfg->warmup_set = n;
    memcpy(cfg->warmup, values, (size_t)n * sizeof *values);
  }
  free(values);
  return rc;
}

void plan_order_explain(const PlanOrderStats *st, const PlanResult *r, FILE *f) {
  if (!st->simulated) return;
  fprintf(f, "pipeline order by simulation:");
  double ref = 0;
  int vpp = st->num_kinds == 1 && st->kind[0] == SCHED_SCHEDULE_INTERLEAVED;
  for (int k = 0; k < st->num_kinds; k++) {
    fprintf(f, "%s %s %.4f s/step%s", k ? "," : "", sched_schedule_name(st->kind[k]), st->kind_step_time[k],
            st->kind_fits[k] ? "" : " (does not fit)");
    if (st->kind[k] == (vpp ? SCHED_SCHEDULE_INTERLEAVED : SCHED_SCHEDULE_1F1B)) ref = st->kind_step_time[k];
  }
  fprintf(f, "; chosen %s", sched_schedule_name(r->cfg.schedule));
  if (r->cfg.warmup_set) {
    fprintf(f, " with warm-up");
    for (int q = 0; q < r->cfg.warmup_set; q++) fprintf(f, " %d", r->cfg.warmup[q]);
    fprintf(f, vpp ? " (Megatron-Core's is" : " (1F1B's is");
    for (int q = 0; q < r->cfg.warmup_set; q++)
      fprintf(f, " %d", default_depth(&r->cfg, vpp ? SCHED_SCHEDULE_INTERLEAVED : SCHED_SCHEDULE_1F1B, q));
    fprintf(f, ")");
  }
  double t = r->step_time;
  fprintf(f, " %.4f s/step (%.1f%% faster than %s; %d warm-up move%s, %ld simulations)\n", t,
          t > 0 && ref > 0 ? 100.0 * (ref / t - 1) : 0.0, vpp ? "its default warm-up" : "1f1b", st->moves,
          st->moves == 1 ? "" : "s", st->simulated);
}
