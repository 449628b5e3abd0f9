/* Simulated annealing over the per-layer plan space (explore_space.h).
 *
 * State: a decision vector, starting from the layout's own plan. A move
 * changes one decision to another of its values (with probability 1/4 two
 * decisions at once, so a recomputed layer can swap with its neighbour's
 * choice in one step). Energy: the simulated step time relative to the
 * uniform plan's; a plan that does not fit costs 2 + its overflow (peak /
 * capacity - 1), so the walk is pulled towards fitting plans and an
 * infeasible plan never beats a feasible one. A move is accepted when it
 * lowers the energy, else with probability exp(-dE / T).
 * Schedule: geometric, T = 0.05 x (0.0005 / 0.05)^p, where p is the share
 * of the budget spent (simulations, or proposals over 20 x budget when
 * cached plans repeat); after budget / 8 proposals without a new best the
 * walk restarts from the best. Deterministic given the seed. */
#include <math.h>
#include <string.h>

#include "base/rng.h"
#include "plan/explore_space.h"

static double energy(const PlanExploreSpace *sp, const PlanExploreEval *ev, double ref) {
  if (ev->fits) return ev->step_time / ref;
  double cap = sp->cluster->memory_capacity > 0 ? sp->cluster->memory_capacity : 1;
  return 2.0 + ev->peak_memory / cap - 1.0;
}

int plan_explore_sa(PlanExploreSpace *sp, Error *err) {
  const double t_start = 0.05, t_end = 0.0005;
  const int n = sp->num_decisions;
  const long max_proposals = 20 * sp->spec.budget;
  Rng rng = rng_make(sp->spec.seed, rng_stream_id("plan.explore.sa"));
  double ref = sp->uniform_eval.step_time > 0 ? sp->uniform_eval.step_time : 1;
  unsigned char cur[PLAN_EXPLORE_MAX_DECISIONS], next[PLAN_EXPLORE_MAX_DECISIONS];
  memcpy(cur, sp->uniform, (size_t)n);
  double e_cur = energy(sp, &sp->uniform_eval, ref);
  long since_best = 0, best_seen_at = sp->best_at;
  for (long k = 0; k < max_proposals && !plan_explore_exhausted(sp); k++) {
    memcpy(next, cur, (size_t)n);
    int changes = rng_next_uniform(&rng) < 0.25 ? 2 : 1;
    for (int c = 0; c < changes; c++) {
      int i = (int)rng_next_below(&rng, (uint64_t)n);
      if (sp->arity[i] < 2) continue;
      int v = (int)rng_next_below(&rng, (uint64_t)sp->arity[i] - 1);
      next[i] = (unsigned char)(v >= next[i] ? v + 1 : v);
    }
    PlanExploreEval ev;
    int spent;
    int rc = plan_explore_evaluate(sp, next, &ev, &spent, err);
    if (rc) return rc;
    if (spent) break;
    if (!ev.valid) continue;
    double p = fmax((double)sp->evaluations / sp->spec.budget, (double)k / max_proposals);
    double temp = t_start * pow(t_end / t_start, p);
    double e_next = energy(sp, &ev, ref);
    if (e_next <= e_cur || rng_next_uniform(&rng) < exp(-(e_next - e_cur) / temp)) {
      memcpy(cur, next, (size_t)n);
      e_cur = e_next;
    }
    if (sp->best_at != best_seen_at) {
      best_seen_at = sp->best_at;
      since_best = 0;
    } else if (++since_best > sp->spec.budget / 8 + 1 && sp->have_best) {
      memcpy(cur, sp->best, (size_t)n);
      e_cur = energy(sp, &sp->best_eval, ref);
      since_best = 0;
    }
  }
  return 0;
}
