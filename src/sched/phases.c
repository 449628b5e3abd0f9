/* The phased program of a network whose parameter groups step separately
 * (program.h, SchedConfig.param_groups): the one-group program of the same
 * config repeated once per phase on every rank, each copy naming its group
 * and its phase; a group with phase_repeats r runs r phases in a row.
 * Only the phases' own data flow links them (the dependencies and
 * send/receive matches of each copy stay inside it): the list order of each
 * rank already puts a phase after the previous one's OPTIM. */
#include <stdlib.h>

#include "sched/builders.h"

static int repeats_of(const SchedConfig *c, int g) { return c->phase_repeats[g] > 1 ? c->phase_repeats[g] : 1; }

int sched_config_num_phases(const SchedConfig *c) {
  if (c->param_groups <= 1) return 1;
  int n = 0;
  for (int g = 0; g < c->param_groups && g < SCHED_MAX_PARAM_GROUPS; g++) n += repeats_of(c, g);
  return n;
}

int sched_config_phase_group(const SchedConfig *c, int phase) {
  if (c->param_groups <= 1) return -1;
  for (int g = 0; g < c->param_groups && g < SCHED_MAX_PARAM_GROUPS; g++) {
    if (phase < repeats_of(c, g)) return g;
    phase -= repeats_of(c, g);
  }
  return -1;
}

/* Where action `id` of the one-group program goes in phase p. */
static SchedActionRef phase_ref(const SchedProgram *one, int id, int p) {
  const SchedAction *a = &one->actions[id];
  int n = one->rank_begin[a->rank + 1] - one->rank_begin[a->rank];
  SchedActionRef ref = {a->rank, p * n + a->index};
  return ref;
}

int sched_program_phases(const SchedProgram *one, const SchedConfig *phased, SchedProgram **out, Error *err) {
  *out = NULL;
  int groups = phased->param_groups, phases = sched_config_num_phases(phased);
  if (groups < 2 || groups > SCHED_MAX_PARAM_GROUPS)
    return error_set(err, ERR_CONFIG, "schedule: %d parameter groups, expected 2..%d for a phased program", groups,
                     SCHED_MAX_PARAM_GROUPS);
  for (int g = 0; g < groups; g++)
    if (phased->phase_repeats[g] < 0)
      return error_set(err, ERR_CONFIG, "schedule: group %d repeats its phase %d times, expected 0 or more", g,
                       phased->phase_repeats[g]);
  if (phases > SCHED_MAX_PHASES)
    return error_set(err, ERR_CONFIG, "schedule: %d phases per iteration, at most %d", phases, SCHED_MAX_PHASES);
  SchedConfig cfg = one->config;
  cfg.param_groups = groups;
  for (int g = 0; g < SCHED_MAX_PARAM_GROUPS; g++) cfg.phase_repeats[g] = g < groups ? phased->phase_repeats[g] : 0;
  SchedBuilder *b = sched_builder_new(&cfg, one->num_ranks);
  if (!b) return error_set(err, ERR_NOMEM, "schedule: out of memory building %d phases", phases);
  int rc = 0;
  for (int r = 0; r < one->num_ranks && !rc; r++) {
    int n;
    const SchedAction *list = sched_program_rank_actions(one, r, &n);
    for (int p = 0; p < phases && !rc; p++)
      for (int i = 0; i < n && !rc; i++) {
        SchedAction a = list[i];
        a.group = sched_config_phase_group(&cfg, p);
        a.phase = p;
        rc = sched_builder_append(b, r, &a, NULL, err);
      }
  }
  for (int p = 0; p < phases && !rc; p++)
    for (int id = 0; id < one->num_actions && !rc; id++) {
      const SchedAction *a = &one->actions[id];
      SchedActionRef self = phase_ref(one, id, p);
      for (int d = 0; d < a->num_deps && !rc; d++)
        rc = sched_builder_add_dep(b, self, phase_ref(one, a->deps[d], p), err);
      if (!rc && a->match >= 0) rc = sched_builder_set_match(b, self, phase_ref(one, a->match, p), err);
    }
  if (!rc) rc = sched_builder_finish(b, out, err);
  sched_builder_free(b);
  return rc;
}
