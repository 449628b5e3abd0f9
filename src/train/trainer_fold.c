/* MoE parallel folding and context parallelism in the trainer: sizes and
 * coordinates from both grids, the shard, the MPI callbacks, expert
 * gradient buckets on the EDP group and the folded gradient norm. See
 * trainer_fold.h. */
#include "train/trainer_fold.h"

#include <stdlib.h>
#include <string.h>

static int at_least_one(int v) { return v > 0 ? v : 1; }

void trainer_fold_sizes(Trainer *tr) {
  const TrainConfig *cfg = tr->cfg;
  tr->cp = at_least_one(cfg->cp);
  tr->ep = at_least_one(cfg->ep);
  tr->etp = at_least_one(cfg->etp);
  tr->folded = tr->cp > 1 || tr->ep > 1 || tr->etp > 1;
  long long world = (long long)tr->tp * tr->cp * tr->dp * tr->pp;
  tr->edp = (int)(world / ((long long)tr->ep * tr->etp * tr->pp));
  if (tr->edp < 1) tr->edp = 1;
}

void trainer_fold_coords(Trainer *tr) {
  const GridCoords *c = &tr->grid->coords;
  tr->cp_rank = c->cp;
  tr->ep_rank = c->ep;
  tr->etp_rank = c->etp;
  tr->edp_rank = c->edp;
  tr->edp_group = comm_grid_group(tr->grid, GRID_GROUP_EDP);
}

void trainer_fold_shard(const Trainer *tr, ModelShard *shard) {
  shard->cp_size = tr->cp;
  shard->cp_rank = tr->cp_rank;
  shard->ep_size = tr->ep;
  shard->ep_rank = tr->ep_rank;
  shard->etp_size = tr->etp;
  shard->etp_rank = tr->etp_rank;
  shard->moe_dispatcher = train_config_moe_dispatcher(tr->cfg);
}

const ModelParallelOps *trainer_fold_ops(Trainer *tr, Error *err) {
  if (!tr->folded) return tr->tp > 1 ? &tr->tp_ops.ops : NULL;
  /* tp_ops_init zeroes the struct, so the folding callbacks go in after it. */
  tp_ops_init(&tr->tp_ops, tr->tp_group);
  int rc = fold_ops_init(&tr->fold_ops, comm_grid_group(tr->grid, GRID_GROUP_EP),
                         comm_grid_group(tr->grid, GRID_GROUP_ETP), comm_grid_group(tr->grid, GRID_GROUP_TP_CP),
                         comm_grid_group(tr->grid, GRID_GROUP_CP), err);
  if (rc) return NULL;
  tr->tp_ops.ops.moe = &tr->fold_ops.moe;
  tr->tp_ops.ops.cp = tr->cp > 1 ? &tr->fold_ops.cp : NULL;
  return &tr->tp_ops.ops;
}

void trainer_fold_need_reduction(Trainer *tr) {
  int dense = tr->dp_group && tr->dp_group->size > 1;
  int experts = tr->folded && tr->edp > 1 && network_has_reduce_group(&tr->net, NET_REDUCE_EXPERT);
  tr->reduce_grads = dense || experts;
}

/* The buckets over the network's gradient buffer: the program's cuts plus
 * the edges of every tensor that reduces over the expert group, which is
 * where those ranges are routed. */
int trainer_fold_grads_create(Trainer *tr, const size_t *cuts, int num_cuts, double bucket_bytes, Error *err) {
  const Network *net = &tr->net;
  size_t *all = malloc(((size_t)num_cuts + 2 * (size_t)net->num_tensors) * sizeof *all);
  size_t *begin = malloc(((size_t)net->num_tensors + 1) * sizeof *begin);
  size_t *end = malloc(((size_t)net->num_tensors + 1) * sizeof *end);
  if (!all || !begin || !end) {
    free(all);
    free(begin);
    free(end);
    return error_set(err, ERR_NOMEM, "trainer: out of memory for the gradient cuts");
  }
  int n = 0;
  for (int i = 0; i < num_cuts; i++) all[n++] = cuts[i];
  int r = network_reduce_ranges(net, NET_REDUCE_EXPERT, begin, end, net->num_tensors + 1);
  for (int i = 0; i < r; i++) {
    all[n++] = begin[i];
    all[n++] = end[i];
  }
  int rc = dp_grads_create(&tr->dp_grads, tr->dp_group, net->grads, net->num_values, all, n, bucket_bytes, tr->zero,
                           err);
  if (!rc && r) rc = dp_grads_route_ranges(&tr->dp_grads, tr->edp_group, begin, end, r, err);
  free(all);
  free(begin);
  free(end);
  return rc;
}

/* Sum over the world in rank order, so that every rank gets the same bits
 * (the clipping factor must agree everywhere). */
int trainer_fold_sumsq(Trainer *tr, double *sumsq, Error *err) {
  const CommGroup *w = comm_world();
  double mine = optimizer_local_sumsq_world(&tr->net, tr->dp_group ? tr->dp_group->size : 1, tr->edp);
  double *all = malloc((size_t)w->size * sizeof *all);
  if (!all) return error_set(err, ERR_NOMEM, "out of memory");
  int64_t bits;
  memcpy(&bits, &mine, sizeof bits);
  int rc = comm_allgather_i64(w, &bits, (int64_t *)all, 1, NULL, err);
  if (!rc) {
    double s = 0;
    for (int i = 0; i < w->size; i++) s += all[i];
    *sumsq = s;
  }
  free(all);
  return rc;
}
