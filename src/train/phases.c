/* Parameter groups stepped in phases: bucket cuts and tags, entering a
 * phase, the group's reduction and norm. See phases.h. */
#include "train/phases.h"

#include <string.h>

#include "kern/vecops.h"

#define PHASES_MAX_RANGES 64

int phases_group_cuts(const Network *net, size_t *cuts, int cap) {
  int n = 0;
  for (int g = 0; g < net->num_param_groups && net->num_param_groups > 1; g++) {
    size_t begin[PHASES_MAX_RANGES], end[PHASES_MAX_RANGES];
    int k = network_group_ranges(net, g, begin, end, PHASES_MAX_RANGES);
    for (int i = 0; i < k && i < PHASES_MAX_RANGES; i++) {
      if (n < cap) cuts[n] = begin[i];
      n++;
      if (n < cap) cuts[n] = end[i];
      n++;
    }
  }
  return n;
}

int phases_tag_buckets(DpGrads *g, const Network *net, Error *err) {
  for (int group = 0; group < net->num_param_groups && net->num_param_groups > 1; group++) {
    size_t begin[PHASES_MAX_RANGES], end[PHASES_MAX_RANGES];
    int k = network_group_ranges(net, group, begin, end, PHASES_MAX_RANGES);
    if (k > PHASES_MAX_RANGES)
      return error_set(err, ERR_CONFIG, "parameter group %d is cut into %d ranges, at most %d are supported", group,
                       k, PHASES_MAX_RANGES);
    for (int i = 0; i < k; i++) {
      int rc = dp_grads_set_param_group(g, begin[i], end[i], group, err);
      if (rc) return rc;
    }
  }
  return 0;
}

void phases_enter(Trainer *tr, int phase, int group) {
  if (group < 0 || phase == tr->phase) return;
  /* The phase before stepped its group with this gradient; the next one
   * (another group's, or the same group's next repetition) starts from
   * zero, on the weights that phase left. */
  if (tr->phase >= 0) memset(tr->net.grads, 0, tr->net.num_values * sizeof(float));
  tr->phase = phase;
  if (tr->net.ops->begin_phase) tr->net.ops->begin_phase(&tr->net, group);
}

int phases_start_reduce(Trainer *tr, int group, Error *err) {
  if (!tr->reduce_grads) return 0;
  if (group < 0) return dp_grads_start_range(&tr->dp_grads, 0, tr->net.num_values, err);
  size_t begin[PHASES_MAX_RANGES], end[PHASES_MAX_RANGES];
  int k = network_group_ranges(&tr->net, group, begin, end, PHASES_MAX_RANGES);
  int rc = 0;
  for (int i = 0; i < k && i < PHASES_MAX_RANGES && !rc; i++)
    rc = dp_grads_start_range(&tr->dp_grads, begin[i], end[i], err);
  return rc;
}

int phases_finish_reduce(Trainer *tr, int group, Error *err) {
  if (!tr->reduce_grads) return 0;
  return group < 0 ? dp_grads_finish(&tr->dp_grads, err) : dp_grads_finish_group(&tr->dp_grads, group, err);
}

double phases_local_sumsq(const Trainer *tr, int group) {
  if (tr->zero) return dist_optimizer_local_sumsq_group(&tr->dist_opt, &tr->net, 0, group);
  if (group < 0) return vec_sumsq(tr->net.grads, tr->net.num_values);
  return optimizer_local_sumsq_group(&tr->net, 0, group);
}
