/* The phased program of a network whose parameter groups step separately
 * (program.h, SchedConfig.param_groups): the one-group program of the same
 * config repeated once per group on every rank, each copy naming its group.
 * Only the phases' own data flow links them (the dependencies and
 * send/receive matches of each copy stay inside it): the list order of each
 * rank already puts a phase after the previous one's OPTIM. */
#include <stdlib.h>

#include "sched/builders.h"

/* Where action `id` of the one-group program goes in phase g. */
static SchedActionRef phase_ref(const SchedProgram *one, int id, int g) {
  const SchedAction *a = &one->actions[id];
  int n = one->rank_begin[a->rank + 1] - one->rank_begin[a->rank];
  SchedActionRef ref = {a->rank, g * n + a->index};
  return ref;
}

int sched_program_phases(const SchedProgram *one, int groups, SchedProgram **out, Error *err) {
  *out = NULL;
  if (groups < 2 || groups > SCHED_MAX_PARAM_GROUPS)
    return error_set(err, ERR_CONFIG, "schedule: %d parameter groups, expected 2..%d for a phased program", groups,
                     SCHED_MAX_PARAM_GROUPS);
  SchedConfig cfg = one->config;
  cfg.param_groups = groups;
  SchedBuilder *b = sched_builder_new(&cfg, one->num_ranks);
  if (!b) return error_set(err, ERR_NOMEM, "schedule: out of memory building %d phases", groups);
  int rc = 0;
  for (int r = 0; r < one->num_ranks && !rc; r++) {
    int n;
    const SchedAction *list = sched_program_rank_actions(one, r, &n);
    for (int g = 0; g < groups && !rc; g++)
      for (int i = 0; i < n && !rc; i++) {
        SchedAction a = list[i];
        a.group = g;
        rc = sched_builder_append(b, r, &a, NULL, err);
      }
  }
  for (int g = 0; g < groups && !rc; g++)
    for (int id = 0; id < one->num_actions && !rc; id++) {
      const SchedAction *a = &one->actions[id];
      SchedActionRef self = phase_ref(one, id, g);
      for (int d = 0; d < a->num_deps && !rc; d++)
        rc = sched_builder_add_dep(b, self, phase_ref(one, a->deps[d], g), err);
      if (!rc && a->match >= 0) rc = sched_builder_set_match(b, self, phase_ref(one, a->match, g), err);
    }
  if (!rc) rc = sched_builder_finish(b, out, err);
  sched_builder_free(b);
  return rc;
}
