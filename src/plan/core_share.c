/* When the simulator prices processor sharing, and the devices each program
 * rank stands for on each node (core_share.h). */
#include "plan/core_share.h"

#include <stdlib.h>
#include <string.h>

double plan_core_share_floor(const ClusterSpec *cl) {
  if (!(cluster_spec_node_capacity(cl) > 0)) return 1.0;
  return cl->core_share > 0 && cl->core_share < 1 ? cl->core_share : 1.0;
}

void plan_core_share_free(PlanCoreShare *cs) {
  if (!cs) return;
  free((double *)cs->opts.capacity);
  free((double *)cs->opts.load);
  memset(cs, 0, sizeof *cs);
}

int plan_core_share_init(PlanCoreShare *cs, const ClusterSpec *cl, const PlanConfig *cfg, const SchedProgram *prog,
                         SchedWorkFn work, void *ctx, Error *err) {
  memset(cs, 0, sizeof *cs);
  double capacity = cluster_spec_node_capacity(cl);
  if (!(capacity > 0)) return ERR_OK;
  int R = prog->num_ranks, N = cl->nodes > 0 ? cl->nodes : 1, world = plan_config_devices(cfg);
  if (R < 1 || world < R) return ERR_OK;
  double *cap = malloc((size_t)N * sizeof *cap);
  double *load = calloc((size_t)R * N, sizeof *load);
  double *per_node = calloc((size_t)N, sizeof *per_node);
  if (!cap || !load || !per_node) {
    free(cap);
    free(load);
    free(per_node);
    return error_set(err, ERR_NOMEM, "simulate: out of memory");
  }
  /* Replicated: one rank per device. Else pipeline rank r holds the world
   * ranks r*G .. r*G + G - 1 (pipeline coordinate slowest). */
  int group = cfg->num_stage_widths ? 1 : world / R;
  for (int r = 0; r < R; r++)
    for (int k = 0; k < group; k++) {
      int node = cluster_spec_node_of(cl, r * group + k);
      if (node < 0) node = 0;
      if (node >= N) node = N - 1;
      load[(size_t)r * N + node] += 1.0;
      per_node[node] += 1.0;
    }
  double share = plan_core_share_floor(cl);
  int crowded = share < 1;
  for (int n = 0; n < N; n++) {
    cap[n] = capacity;
    crowded |= per_node[n] > capacity;
  }
  free(per_node);
  if (!crowded) {
    free(cap);
    free(load);
    return ERR_OK;
  }
  cs->active = 1;
  cs->opts.work = work;
  cs->opts.work_ctx = ctx;
  cs->opts.priced_share = share;
  cs->opts.num_nodes = N;
  cs->opts.capacity = cap;
  cs->opts.load = load;
  cs->opts.waiting_load = cl->core_waiting_load;
  return ERR_OK;
}
