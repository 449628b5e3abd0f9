/* MoeCommOps and CpCommOps over MPI communicators (see fold_ops.h). The
 * row-based calls of the dispatchers become MPI element counts here; the
 * ring shift is a paired non-blocking send and receive so that a ring of
 * two (both neighbours the same rank) cannot deadlock. */
#include "train/fold_ops.h"

#include <stdlib.h>
#include <string.h>

#include "base/timer.h"

static const CommGroup *moe_group(FoldOps *f, MoeGroup g) {
  return g == MOE_GROUP_EP ? f->ep : g == MOE_GROUP_ETP ? f->etp : f->seq;
}

/* Peers are waiting inside the same collective: a failure ends the job. */
/* Seconds since `t0` into the dispatcher's communication time. */
static int timed(FoldOps *f, double t0, int rc) {
  f->dispatch_seconds += timer_now() - t0;
  return rc;
}

static int fail_wrap(int rc, Error *err, const char *what, const CommGroup *g) {
  if (rc) comm_abort(1, "MoE dispatcher %s on group %s: %s", what, g->name, err->msg);
  return rc;
}

static int fold_alltoall_i64(void *ctx, MoeGroup mg, const int64_t *send, int64_t *recv, int per_rank, Error *err) {
  FoldOps *f = ctx;
  const double t0 = timer_now();
  const CommGroup *g = moe_group(f, mg);
  return timed(f, t0, fail_wrap(comm_alltoall_i64(g, send, recv, (size_t)per_rank, NULL, err), err, "all-to-all of counts", g));
}

static int fold_alltoallv_f32(void *ctx, MoeGroup mg, const float *send, const int64_t *send_rows, float *recv,
                              const int64_t *recv_rows, int row_floats, Error *err) {
  FoldOps *f = ctx;
  const double t0 = timer_now();
  const CommGroup *g = moe_group(f, mg);
  CommAlltoallv *x = &f->layout[mg];
  int rc = comm_alltoallv_set(x, send_rows, recv_rows, row_floats, err);
  if (!rc) rc = comm_alltoallv_f32(g, x, send, recv, NULL, err);
  return timed(f, t0, fail_wrap(rc, err, "all-to-all-v", g));
}

static int fold_allgather_i64(void *ctx, MoeGroup mg, const int64_t *send, int64_t *recv, int count, Error *err) {
  FoldOps *f = ctx;
  const double t0 = timer_now();
  const CommGroup *g = moe_group(f, mg);
  return timed(f, t0, fail_wrap(comm_allgather_i64(g, send, recv, (size_t)count, NULL, err), err, "all-gather of counts", g));
}

static int fold_allgatherv_f32(void *ctx, MoeGroup mg, const float *send, float *recv, const int64_t *rows,
                               int row_floats, Error *err) {
  FoldOps *f = ctx;
  const double t0 = timer_now();
  const CommGroup *g = moe_group(f, mg);
  int rc = comm_counts_from_rows(rows, g->size, row_floats, f->counts, f->displs, NULL, err);
  if (!rc) rc = comm_allgatherv_f32(g, send, f->counts[g->rank], recv, f->counts, f->displs, NULL, err);
  return timed(f, t0, fail_wrap(rc, err, "all-gather-v", g));
}

static int fold_reduce_scatterv_f32(void *ctx, MoeGroup mg, const float *send, float *recv, const int64_t *rows,
                                    int row_floats, Error *err) {
  FoldOps *f = ctx;
  const double t0 = timer_now();
  const CommGroup *g = moe_group(f, mg);
  int rc = comm_counts_from_rows(rows, g->size, row_floats, f->counts, f->displs, NULL, err);
  if (!rc) rc = comm_reduce_scatterv_sum_f32(g, send, recv, f->counts, NULL, err);
  return timed(f, t0, fail_wrap(rc, err, "reduce-scatter-v", g));
}

static int fold_allreduce_f64(void *ctx, MoeGroup mg, double *buf, size_t n, Error *err) {
  FoldOps *f = ctx;
  const double t0 = timer_now();
  const CommGroup *g = moe_group(f, mg);
  return timed(f, t0, fail_wrap(comm_allreduce_f64(g, buf, n, COMM_SUM, NULL, err), err, "all-reduce", g));
}

/* ---- the CP ring (callbacks without an error path) ---- */

static void cp_ring_shift(void *ctx, const float *send, float *recv, size_t count) {
  FoldOps *f = ctx;
  const CommGroup *g = f->cp_group;
  Error err = {0};
  int next = (g->rank + 1) % g->size, prev = (g->rank - 1 + g->size) % g->size;
  CommRequest reqs[2];
  comm_request_init(&reqs[0]);
  comm_request_init(&reqs[1]);
  const int tag = 7; /* ring blocks travel in call order: one tag suffices */
  int rc = comm_recv_f32(g, prev, tag, recv, count, &reqs[0], &err);
  if (!rc) rc = comm_send_f32(g, next, tag, send, count, &reqs[1], &err);
  if (!rc) rc = comm_wait_all(reqs, 2, &err);
  if (rc) comm_abort(1, "context-parallel ring shift on group %s: %s", g->name, err.msg);
}

static void cp_allreduce_sum_f64(void *ctx, double *buf, size_t n) {
  FoldOps *f = ctx;
  Error err = {0};
  if (comm_allreduce_f64(f->cp_group, buf, n, COMM_SUM, NULL, &err))
    comm_abort(1, "context-parallel loss sum on group %s: %s", f->cp_group->name, err.msg);
}

int fold_ops_init(FoldOps *f, const CommGroup *ep, const CommGroup *etp, const CommGroup *seq,
                  const CommGroup *cp_group, Error *err) {
  memset(f, 0, sizeof *f);
  f->ep = ep;
  f->etp = etp;
  f->seq = seq;
  f->cp_group = cp_group;
  const CommGroup *moe[3] = {ep, etp, seq};
  f->max_size = 1;
  for (int i = 0; i < 3; i++) {
    if (moe[i]->size > f->max_size) f->max_size = moe[i]->size;
    int rc = comm_alltoallv_init(&f->layout[i], moe[i]->size, err);
    if (rc) {
      fold_ops_free(f);
      return error_wrap(err, "fold_ops_init: all-to-all layout of group %s", moe[i]->name);
    }
  }
  f->counts = calloc((size_t)f->max_size, sizeof *f->counts);
  f->displs = calloc((size_t)f->max_size, sizeof *f->displs);
  if (!f->counts || !f->displs) {
    fold_ops_free(f);
    return error_set(err, ERR_NOMEM, "fold_ops_init: out of memory");
  }
  f->moe = (MoeCommOps){f, fold_alltoall_i64, fold_alltoallv_f32, fold_allgather_i64, fold_allgatherv_f32,
                        fold_reduce_scatterv_f32, fold_allreduce_f64};
  f->cp = (CpCommOps){f, cp_ring_shift, NULL, NULL, cp_allreduce_sum_f64};
  return 0;
}

void fold_ops_free(FoldOps *f) {
  for (int i = 0; i < 3; i++) comm_alltoallv_free(&f->layout[i]);
  free(f->counts);
  free(f->displs);
  memset(f, 0, sizeof *f);
}
