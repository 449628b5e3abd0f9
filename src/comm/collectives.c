/* Collectives, point-to-point transfers and request handles over MPI. Each
 * wrapper checks its arguments (so a mistake is reported on the rank that
 * made it instead of surfacing as a hang or a truncation elsewhere), names
 * itself for the failure handler, and calls the blocking or non-blocking MPI
 * routine depending on whether a request was given (a blocking operation
 * under the collective timeout runs as the non-blocking routine waited for
 * with a deadline, comm/timeout.h). */
#include "base/op_probe.h"
#include "comm/collectives.h"
#include "comm/timeout.h"
#include "comm/waits.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The name the failure handler prints; non-blocking starts say so, because
 * their errors surface later, in comm_wait or comm_test. */
#define OP_NAME(name, req) ((req) ? name " (asynchronous, completed in comm_wait/comm_test)" : name)

/* A blocking MPI call as one operation span (base/op_probe.h), with its
 * group and payload; the arguments are evaluated only while a hook listens.
 * Posted (I-) calls are not spans: their time is the wait's. */
static int64_t payload_bytes(MPI_Datatype type, size_t count) {
  int size = 0;
  MPI_Type_size(type, &size);
  return (int64_t)size * (int64_t)count;
}
#define PROBED_MPI(kind, g, bytes, peer, call)                                                          \
  ({                                                                                                    \
    OP_PROBE_BEGIN(mpi_span_, (kind));                                                                  \
    const int mpi_rc_ = (call);                                                                         \
    OP_PROBE_END_COMM(mpi_span_, op_probe_group_from_name((g)->name), (g)->size, (bytes), (peer));      \
    mpi_rc_;                                                                                            \
  })

static int check_group(const CommGroup *g, const char *op, Error *err) {
  if (!g || g->comm == MPI_COMM_NULL || g->size < 1 || g->rank < 0 || g->rank >= g->size)
    return error_set(err, ERR_ARG,
                     "%s: the group is not set up (call comm_init, and comm_grid_create for the "
                     "grid's groups, first)",
                     op);
  return ERR_OK;
}

static int check_count(size_t count, const char *what, const char *op, const CommGroup *g,
                       Error *err) {
  if (count > (size_t)INT_MAX)
    return error_set(err, ERR_ARG,
                     "%s on group %s: %s of %zu elements exceeds MPI's int count limit (%d); "
                     "split the transfer",
                     op, g->name, what, count, INT_MAX);
  return ERR_OK;
}

static int check_buffer(const void *p, size_t count, const char *what, const char *op,
                        const CommGroup *g, Error *err) {
  if (!p && count > 0)
    return error_set(err, ERR_ARG, "%s on group %s: %s is NULL but %zu elements were asked for", op,
                     g->name, what, count);
  return ERR_OK;
}

static int check_request(const CommRequest *req, const char *op, const CommGroup *g, Error *err) {
  if (req && req->active)
    return error_set(err, ERR_ARG,
                     "%s on group %s: the request is still in flight with %s; wait for it before "
                     "reusing it",
                     op, g->name, req->operation ? req->operation : "another operation");
  return ERR_OK;
}

static int check_rank(int r, const char *what, const char *op, const CommGroup *g, Error *err) {
  if (r < 0 || r >= g->size)
    return error_set(err, ERR_ARG, "%s on group %s: %s %d is outside the group (size %d)", op,
                     g->name, what, r, g->size);
  return ERR_OK;
}

static int check_op(CommReduceOp op, MPI_Op *mpi_op, const char *name, const CommGroup *g,
                    Error *err) {
  switch (op) {
    case COMM_SUM:
      *mpi_op = MPI_SUM;
      return ERR_OK;
    case COMM_MAX:
      *mpi_op = MPI_MAX;
      return ERR_OK;
    case COMM_MIN:
      *mpi_op = MPI_MIN;
      return ERR_OK;
  }
  return error_set(err, ERR_ARG,
                   "%s on group %s: unknown reduction %d (COMM_SUM, COMM_MAX, COMM_MIN)", name,
                   g->name, (int)op);
}

/* Records a started request and converts MPI's return code. */
static int started(int mpi_rc, CommRequest *req, const char *op, const CommGroup *g, Error *err) {
  if (req) {
    req->active = mpi_rc == MPI_SUCCESS;
    req->operation = op;
    req->group = g;
  }
  return comm_check(mpi_rc, op, g, err);
}

/* MPI_Wait as a loop of tests with the pauses of comm/waits.h (waits that
 * sleep without the collective timeout armed). */
static int paced_wait(MPI_Request *req) {
  WaitPacer pacer;
  comm_wait_pacer_start(&pacer);
  for (;;) {
    int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) return rc;
    comm_wait_pace(&pacer);
  }
}

/* A blocking operation under the collective timeout, or while waits sleep:
 * the non-blocking form that was just started (start_rc) waited for with the
 * deadline, or with pauses only. */
static int polled(int start_rc, MPI_Request *r, const CommGroup *g, const char *op) {
  if (start_rc != MPI_SUCCESS) return start_rc;
  return comm_timeout_armed() ? comm_timeout_wait(r, g, op) : paced_wait(r);
}

/* A blocking collective of at least this payload, under the collective
 * timeout and without sleeping waits, first checks that every rank of its
 * group has arrived (a polled barrier, with the timeout's diagnosis) and
 * then runs as MPI's blocking call (comm/timeout.h). Open MPI's blocking
 * algorithms move a large buffer 2 to 3 times faster than the non-blocking
 * form (a 16 MB all-reduce of 2 ranks: 2.7 against 9.3 ms), while a barrier
 * costs microseconds on shared memory. */
#define COMM_ARRIVAL_CHECK_BYTES ((int64_t)256 * 1024)

static int arrived_then_blocking(const CommGroup *g, const char *op, MPI_Request *barrier) {
  int rc = polled(MPI_Ibarrier(g->comm, barrier), barrier, g, op);
  if (rc == MPI_SUCCESS) comm_timeout_blocking_begin(g, op);
  return rc;
}

/* The end every wrapper shares. With a request (req): starts the
 * non-blocking form on it. Without: the blocking call as one probe span or,
 * while the collective timeout is armed (comm/timeout.h) or waits sleep
 * (comm/waits.h), the non-blocking form on a local request waited for with
 * the deadline or the pauses, as the same span; a large collective under
 * the timeout (peer < 0, path_bytes >= COMM_ARRIVAL_CHECK_BYTES) waits for
 * every rank's arrival that way and then runs blocking, watched
 * (comm/timeout.h). Every rank of the group must take the same path (a
 * barrier on one rank against the collective itself on another is a
 * mismatch MPI reports as truncation), so path_bytes is a size all of them
 * pass: the payload for the collectives whose counts agree, and
 * COMM_PATH_UNEVEN for an all-to-all-v, whose ranks each know only their
 * own counts, which therefore always takes the arrival check.
 * The non-blocking call names its request mpi_req_; req, name and err are
 * the wrapper's. */
#define COMM_PATH_UNEVEN INT64_MAX
#define RUN_MPI(kind, g, bytes, peer, blocking_call, nonblocking_call) \
  RUN_MPI_PATH(kind, g, bytes, bytes, peer, blocking_call, nonblocking_call)
#define RUN_MPI_PATH(kind, g, bytes, path_bytes, peer, blocking_call, nonblocking_call)                 \
  ({                                                                                                   \
    MPI_Request local_req_ = MPI_REQUEST_NULL;                                                         \
    MPI_Request *const mpi_req_ = req ? &req->mpi : &local_req_;                                       \
    int run_rc_;                                                                                       \
    if (req)                                                                                           \
      run_rc_ = started((nonblocking_call), req, name, g, err);                                        \
    else if (!comm_timeout_armed() && !comm_waits_sleeping())                                          \
      run_rc_ = comm_check(PROBED_MPI(kind, g, bytes, peer, (blocking_call)), name, g, err);           \
    else if ((peer) < 0 && !comm_waits_sleeping() && (int64_t)(path_bytes) >= COMM_ARRIVAL_CHECK_BYTES) {\
      run_rc_ = comm_check(arrived_then_blocking(g, name, &local_req_), name, g, err);                 \
      if (!run_rc_) {                                                                                  \
        run_rc_ = comm_check(PROBED_MPI(kind, g, bytes, peer, (blocking_call)), name, g, err);         \
        comm_timeout_blocking_end();                                                                   \
      }                                                                                                \
    } else                                                                                             \
      run_rc_ = comm_check(PROBED_MPI(kind, g, bytes, peer, polled((nonblocking_call), mpi_req_, g, name)), \
                           name, g, err);                                                              \
    run_rc_;                                                                                           \
  })

void comm_request_init(CommRequest *req) {
  req->mpi = MPI_REQUEST_NULL;
  req->active = 0;
  req->operation = NULL;
  req->group = NULL;
}

int comm_wait(CommRequest *req, Error *err) {
  if (!req || !req->active) return ERR_OK;
  comm_set_operation(req->operation);
  int rc = comm_timeout_armed()   ? comm_timeout_wait(&req->mpi, req->group, req->operation)
           : comm_waits_sleeping() ? paced_wait(&req->mpi)
                                   : MPI_Wait(&req->mpi, MPI_STATUS_IGNORE);
  req->active = 0;
  return comm_check(rc, req->operation, NULL, err);
}

int comm_test(CommRequest *req, int *done, Error *err) {
  *done = 1;
  if (!req || !req->active) return ERR_OK;
  comm_set_operation(req->operation);
  int flag = 0;
  int rc = MPI_Test(&req->mpi, &flag, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    req->active = 0;
    return comm_check(rc, req->operation, NULL, err);
  }
  *done = flag;
  if (flag) req->active = 0;
  return ERR_OK;
}

int comm_wait_all(CommRequest *reqs, int count, Error *err) {
  int first = ERR_OK;
  for (int i = 0; i < count; i++) {
    /* Keep waiting after a failure so that no request is left in flight. */
    Error local;
    int rc = comm_wait(&reqs[i], first ? &local : err);
    if (rc && !first) first = rc;
  }
  return first;
}

static int allreduce(const CommGroup *g, void *buf, size_t count, MPI_Datatype type,
                     CommReduceOp op, CommRequest *req, const char *name, Error *err) {
  MPI_Op mpi_op = MPI_SUM;
  int rc;
  if ((rc = check_group(g, name, err)) || (rc = check_op(op, &mpi_op, name, g, err)) ||
      (rc = check_count(count, "buffer", name, g, err)) ||
      (rc = check_buffer(buf, count, "buf", name, g, err)) ||
      (rc = check_request(req, name, g, err)))
    return rc;
  comm_set_operation(name);
  return RUN_MPI(OP_PROBE_ALLREDUCE, g, payload_bytes(type, count), -1,
                 MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, type, mpi_op, g->comm),
                 MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, type, mpi_op, g->comm, mpi_req_));
}

int comm_allreduce_f32(const CommGroup *g, float *buf, size_t count, CommReduceOp op,
                       CommRequest *req, Error *err) {
  return allreduce(g, buf, count, MPI_FLOAT, op, req, OP_NAME("comm_allreduce_f32", req), err);
}

int comm_allreduce_f64(const CommGroup *g, double *buf, size_t count, CommReduceOp op,
                       CommRequest *req, Error *err) {
  return allreduce(g, buf, count, MPI_DOUBLE, op, req, OP_NAME("comm_allreduce_f64", req), err);
}

int comm_allreduce_i64(const CommGroup *g, int64_t *buf, size_t count, CommReduceOp op,
                       CommRequest *req, Error *err) {
  return allreduce(g, buf, count, MPI_INT64_T, op, req, OP_NAME("comm_allreduce_i64", req), err);
}

int comm_reduce_scatter_sum_f32(const CommGroup *g, const float *send, float *recv, size_t block,
                                CommRequest *req, Error *err) {
  const char *name = OP_NAME("comm_reduce_scatter_sum_f32", req);
  int rc;
  if ((rc = check_group(g, name, err))) return rc;
  size_t input = block * (size_t)g->size;
  if ((rc = check_count(input, "input", name, g, err)) ||
      (rc = check_buffer(recv, send ? block : input, "recv", name, g, err)) ||
      (rc = check_request(req, name, g, err)))
    return rc;
  const void *src = send ? (const void *)send : MPI_IN_PLACE;
  comm_set_operation(name);
  return RUN_MPI(OP_PROBE_REDUCE_SCATTER, g, payload_bytes(MPI_FLOAT, input), -1,
                 MPI_Reduce_scatter_block(src, recv, (int)block, MPI_FLOAT, MPI_SUM, g->comm),
                 MPI_Ireduce_scatter_block(src, recv, (int)block, MPI_FLOAT, MPI_SUM, g->comm, mpi_req_));
}

static int allgather(const CommGroup *g, const void *send, void *recv, size_t block,
                     MPI_Datatype type, CommRequest *req, const char *name, Error *err) {
  int rc;
  if ((rc = check_group(g, name, err))) return rc;
  size_t total = block * (size_t)g->size;
  if ((rc = check_count(total, "output", name, g, err)) ||
      (rc = check_buffer(recv, total, "recv", name, g, err)) ||
      (rc = check_request(req, name, g, err)))
    return rc;
  const void *src = send ? send : MPI_IN_PLACE;
  int n = send ? (int)block : 0; /* ignored by MPI for MPI_IN_PLACE */
  MPI_Datatype send_type = send ? type : MPI_DATATYPE_NULL;
  comm_set_operation(name);
  return RUN_MPI(OP_PROBE_ALLGATHER, g, payload_bytes(type, total), -1,
                 MPI_Allgather(src, n, send_type, recv, (int)block, type, g->comm),
                 MPI_Iallgather(src, n, send_type, recv, (int)block, type, g->comm, mpi_req_));
}

int comm_allgather_f32(const CommGroup *g, const float *send, float *recv, size_t block,
                       CommRequest *req, Error *err) {
  return allgather(g, send, recv, block, MPI_FLOAT, req, OP_NAME("comm_allgather_f32", req), err);
}

int comm_allgather_i64(const CommGroup *g, const int64_t *send, int64_t *recv, size_t block,
                       CommRequest *req, Error *err) {
  return allgather(g, send, recv, block, MPI_INT64_T, req, OP_NAME("comm_allgather_i64", req), err);
}

int comm_allgatherv_f32(const CommGroup *g, const float *send, int send_count, float *recv,
                        const int *recv_counts, const int *recv_displs, CommRequest *req,
                        Error *err) {
  const char *name = OP_NAME("comm_allgatherv_f32", req);
  int rc;
  if ((rc = check_group(g, name, err))) return rc;
  if (!recv_counts || !recv_displs)
    return error_set(err, ERR_ARG, "%s on group %s: recv_counts and recv_displs are required", name,
                     g->name);
  long long total = 0;
  for (int i = 0; i < g->size; i++) {
    if (recv_counts[i] < 0 || recv_displs[i] < 0)
      return error_set(err, ERR_ARG,
                       "%s on group %s: rank %d has count %d, displacement %d; "
                       "both must be >= 0",
                       name, g->name, i, recv_counts[i], recv_displs[i]);
    total += recv_counts[i];
  }
  if (send_count != recv_counts[g->rank])
    return error_set(err, ERR_ARG,
                     "%s on group %s: this rank (%d) sends %d floats but recv_counts[%d] = %d; "
                     "they must agree on every rank",
                     name, g->name, g->rank, send_count, g->rank, recv_counts[g->rank]);
  if ((rc = check_buffer(send, (size_t)send_count, "send", name, g, err)) ||
      (rc = check_buffer(recv, (size_t)total, "recv", name, g, err)) ||
      (rc = check_request(req, name, g, err)))
    return rc;
  comm_set_operation(name);
  return RUN_MPI(OP_PROBE_ALLGATHER, g, payload_bytes(MPI_FLOAT, (size_t)total), -1,
                 MPI_Allgatherv(send, send_count, MPI_FLOAT, recv, recv_counts, recv_displs, MPI_FLOAT, g->comm),
                 MPI_Iallgatherv(send, send_count, MPI_FLOAT, recv, recv_counts, recv_displs, MPI_FLOAT, g->comm, mpi_req_));
}

static int bcast(const CommGroup *g, int root, void *buf, size_t count, MPI_Datatype type,
                 CommRequest *req, const char *name, Error *err) {
  int rc;
  if ((rc = check_group(g, name, err)) || (rc = check_rank(root, "root", name, g, err)) ||
      (rc = check_count(count, "buffer", name, g, err)) ||
      (rc = check_buffer(buf, count, "buf", name, g, err)) ||
      (rc = check_request(req, name, g, err)))
    return rc;
  comm_set_operation(name);
  return RUN_MPI(OP_PROBE_BCAST, g, payload_bytes(type, count), root,
                 MPI_Bcast(buf, (int)count, type, root, g->comm),
                 MPI_Ibcast(buf, (int)count, type, root, g->comm, mpi_req_));
}

int comm_bcast_f32(const CommGroup *g, int root, float *buf, size_t count, CommRequest *req,
                   Error *err) {
  return bcast(g, root, buf, count, MPI_FLOAT, req, OP_NAME("comm_bcast_f32", req), err);
}

int comm_bcast_bytes(const CommGroup *g, int root, void *buf, size_t bytes, CommRequest *req,
                     Error *err) {
  return bcast(g, root, buf, bytes, MPI_BYTE, req, OP_NAME("comm_bcast_bytes", req), err);
}

int comm_barrier(const CommGroup *g, CommRequest *req, Error *err) {
  const char *name = OP_NAME("comm_barrier", req);
  int rc;
  if ((rc = check_group(g, name, err)) || (rc = check_request(req, name, g, err))) return rc;
  comm_set_operation(name);
  return RUN_MPI(OP_PROBE_BARRIER, g, 0, -1, MPI_Barrier(g->comm), MPI_Ibarrier(g->comm, mpi_req_));
}

static int check_p2p(const CommGroup *g, int peer, int tag, const void *buf, size_t count,
                     const CommRequest *req, const char *name, Error *err) {
  int rc;
  if ((rc = check_group(g, name, err)) || (rc = check_rank(peer, "peer", name, g, err)) ||
      (rc = check_count(count, "message", name, g, err)) ||
      (rc = check_buffer(buf, count, "buf", name, g, err)) ||
      (rc = check_request(req, name, g, err)))
    return rc;
  if (tag < 0 || tag > comm_tag_max())
    return error_set(err, ERR_ARG, "%s on group %s: tag %d is outside 0..%d", name, g->name, tag,
                     comm_tag_max());
  return ERR_OK;
}

int comm_send_f32(const CommGroup *g, int peer, int tag, const float *buf, size_t count,
                  CommRequest *req, Error *err) {
  const char *name = OP_NAME("comm_send_f32", req);
  int rc = check_p2p(g, peer, tag, buf, count, req, name, err);
  if (rc) return rc;
  comm_set_operation(name);
  return RUN_MPI(OP_PROBE_SEND, g, payload_bytes(MPI_FLOAT, count), peer,
                 MPI_Send(buf, (int)count, MPI_FLOAT, peer, tag, g->comm),
                 MPI_Isend(buf, (int)count, MPI_FLOAT, peer, tag, g->comm, mpi_req_));
}

int comm_recv_f32(const CommGroup *g, int peer, int tag, float *buf, size_t count, CommRequest *req,
                  Error *err) {
  const char *name = OP_NAME("comm_recv_f32", req);
  int rc = check_p2p(g, peer, tag, buf, count, req, name, err);
  if (rc) return rc;
  comm_set_operation(name);
  return RUN_MPI(OP_PROBE_RECV, g, payload_bytes(MPI_FLOAT, count), peer,
                 MPI_Recv(buf, (int)count, MPI_FLOAT, peer, tag, g->comm, MPI_STATUS_IGNORE),
                 MPI_Irecv(buf, (int)count, MPI_FLOAT, peer, tag, g->comm, mpi_req_));
}

int comm_counts_from_rows(const int64_t *rows, int n, int row_elems, int *counts, int *displs,
                          int64_t *total_rows, Error *err) {
  if (row_elems < 1)
    return error_set(err, ERR_ARG, "comm_counts_from_rows: row_elems must be >= 1 (got %d)",
                     row_elems);
  int64_t offset = 0, total = 0;
  for (int i = 0; i < n; i++) {
    if (rows[i] < 0)
      return error_set(err, ERR_ARG,
                       "comm_counts_from_rows: peer %d has %lld rows; counts must "
                       "be >= 0",
                       i, (long long)rows[i]);
    if (rows[i] > (INT_MAX - offset) / row_elems)
      return error_set(err, ERR_ARG,
                       "comm_counts_from_rows: peer %d: %lld rows of %d floats after %lld floats "
                       "exceed MPI's int count limit (%d); split the exchange",
                       i, (long long)rows[i], row_elems, (long long)offset, INT_MAX);
    counts[i] = (int)(rows[i] * row_elems);
    displs[i] = (int)offset;
    offset += counts[i];
    total += rows[i];
  }
  if (total_rows) *total_rows = total;
  return ERR_OK;
}

int comm_alltoallv_init(CommAlltoallv *x, int group_size, Error *err) {
  memset(x, 0, sizeof *x);
  if (group_size < 1)
    return error_set(err, ERR_ARG, "comm_alltoallv_init: group size must be >= 1 (got %d)",
                     group_size);
  x->size = group_size;
  x->row_elems = 1;
  size_t n = (size_t)group_size;
  x->send_rows = calloc(n, sizeof *x->send_rows);
  x->recv_rows = calloc(n, sizeof *x->recv_rows);
  x->send_counts = calloc(n, sizeof *x->send_counts);
  x->send_displs = calloc(n, sizeof *x->send_displs);
  x->recv_counts = calloc(n, sizeof *x->recv_counts);
  x->recv_displs = calloc(n, sizeof *x->recv_displs);
  if (!x->send_rows || !x->recv_rows || !x->send_counts || !x->send_displs || !x->recv_counts ||
      !x->recv_displs) {
    comm_alltoallv_free(x);
    return error_set(err, ERR_NOMEM, "comm_alltoallv_init: cannot allocate the layout for %d peers",
                     group_size);
  }
  return ERR_OK;
}

void comm_alltoallv_free(CommAlltoallv *x) {
  free(x->send_rows);
  free(x->recv_rows);
  free(x->send_counts);
  free(x->send_displs);
  free(x->recv_counts);
  free(x->recv_displs);
  memset(x, 0, sizeof *x);
}

int comm_alltoallv_set(CommAlltoallv *x, const int64_t *send_rows, const int64_t *recv_rows,
                       int row_elems, Error *err) {
  if (!x->send_rows)
    return error_set(err, ERR_ARG,
                     "comm_alltoallv_set: layout not initialised (comm_alltoallv_init)");
  size_t bytes = (size_t)x->size * sizeof *x->send_rows;
  memmove(x->send_rows, send_rows, bytes);
  memmove(x->recv_rows, recv_rows, bytes);
  int rc;
  if ((rc = comm_counts_from_rows(x->send_rows, x->size, row_elems, x->send_counts, x->send_displs,
                                  &x->send_total_rows, err)))
    return error_wrap(err, "all-to-all-v send side");
  if ((rc = comm_counts_from_rows(x->recv_rows, x->size, row_elems, x->recv_counts, x->recv_displs,
                                  &x->recv_total_rows, err)))
    return error_wrap(err, "all-to-all-v receive side");
  x->row_elems = row_elems;
  return ERR_OK;
}

int comm_exchange_counts_i64(const CommGroup *g, const int64_t *send_counts, int64_t *recv_counts,
                             CommRequest *req, Error *err) {
  const char *name = OP_NAME("comm_exchange_counts_i64", req);
  int rc;
  if ((rc = check_group(g, name, err)) ||
      (rc = check_buffer(send_counts, 1, "send_counts", name, g, err)) ||
      (rc = check_buffer(recv_counts, 1, "recv_counts", name, g, err)) ||
      (rc = check_request(req, name, g, err)))
    return rc;
  comm_set_operation(name);
  /* Not a probe span of its own: it is part of the all-to-all-v it sets up. */
  if (!req && !comm_timeout_armed())
    return comm_check(MPI_Alltoall(send_counts, 1, MPI_INT64_T, recv_counts, 1, MPI_INT64_T, g->comm), name, g, err);
  MPI_Request local = MPI_REQUEST_NULL;
  int started_rc =
      MPI_Ialltoall(send_counts, 1, MPI_INT64_T, recv_counts, 1, MPI_INT64_T, g->comm, req ? &req->mpi : &local);
  if (req) return started(started_rc, req, name, g, err);
  return comm_check(polled(started_rc, &local, g, name), name, g, err);
}

static int check_layout(const CommGroup *g, const CommAlltoallv *x, const char *name, Error *err) {
  if (!x || !x->send_rows)
    return error_set(err, ERR_ARG, "%s on group %s: layout not initialised (comm_alltoallv_init)",
                     name, g->name);
  if (x->size != g->size)
    return error_set(err, ERR_ARG, "%s on group %s: layout made for %d ranks, group has %d", name,
                     g->name, x->size, g->size);
  return ERR_OK;
}

int comm_alltoallv_exchange(const CommGroup *g, CommAlltoallv *x, const int64_t *send_rows,
                            int row_elems, Error *err) {
  const char *name = "comm_alltoallv_exchange";
  int rc;
  if ((rc = check_group(g, name, err)) || (rc = check_layout(g, x, name, err))) return rc;
  /* The peers' counts land in recv_rows, so keep ours in send_rows first. */
  memmove(x->send_rows, send_rows, (size_t)x->size * sizeof *x->send_rows);
  if ((rc = comm_exchange_counts_i64(g, x->send_rows, x->recv_rows, NULL, err))) return rc;
  return comm_alltoallv_set(x, x->send_rows, x->recv_rows, row_elems, err);
}

static int alltoallv(const CommGroup *g, const CommAlltoallv *x, const float *send, float *recv,
                     int reverse, CommRequest *req, const char *name, Error *err) {
  int rc;
  if ((rc = check_group(g, name, err)) || (rc = check_layout(g, x, name, err))) return rc;
  const int *sc = reverse ? x->recv_counts : x->send_counts;
  const int *sd = reverse ? x->recv_displs : x->send_displs;
  const int *rcn = reverse ? x->send_counts : x->recv_counts;
  const int *rd = reverse ? x->send_displs : x->recv_displs;
  size_t send_elems = (size_t)(reverse ? x->recv_total_rows : x->send_total_rows) * x->row_elems;
  size_t recv_elems = (size_t)(reverse ? x->send_total_rows : x->recv_total_rows) * x->row_elems;
  if ((rc = check_buffer(send, send_elems, "send", name, g, err)) ||
      (rc = check_buffer(recv, recv_elems, "recv", name, g, err)) ||
      (rc = check_request(req, name, g, err)))
    return rc;
  comm_set_operation(name);
  return RUN_MPI_PATH(OP_PROBE_ALLTOALL, g, payload_bytes(MPI_FLOAT, send_elems), COMM_PATH_UNEVEN, -1,
                      MPI_Alltoallv(send, sc, sd, MPI_FLOAT, recv, rcn, rd, MPI_FLOAT, g->comm),
                      MPI_Ialltoallv(send, sc, sd, MPI_FLOAT, recv, rcn, rd, MPI_FLOAT, g->comm, mpi_req_));
}

int comm_alltoallv_f32(const CommGroup *g, const CommAlltoallv *x, const float *send, float *recv,
                       CommRequest *req, Error *err) {
  return alltoallv(g, x, send, recv, 0, req, OP_NAME("comm_alltoallv_f32", req), err);
}

int comm_alltoallv_reverse_f32(const CommGroup *g, const CommAlltoallv *x, const float *send,
                               float *recv, CommRequest *req, Error *err) {
  return alltoallv(g, x, send, recv, 1, req, OP_NAME("comm_alltoallv_reverse_f32", req), err);
}

/* The checks and the call of an all-to-all of per_rank elements of `type`
 * to and from every rank, blocking or started on req. */
static int alltoall_typed(const CommGroup *g, const void *send, void *recv, size_t per_rank, MPI_Datatype type,
                          CommRequest *req, const char *name, Error *err) {
  int rc;
  if ((rc = check_group(g, name, err)) || (rc = check_count(per_rank, "per_rank", name, g, err)) ||
      (rc = check_buffer(send, per_rank, "send", name, g, err)) ||
      (rc = check_buffer(recv, per_rank, "recv", name, g, err)) ||
      (rc = check_request(req, name, g, err)))
    return rc;
  comm_set_operation(name);
  return RUN_MPI(OP_PROBE_ALLTOALL, g, payload_bytes(type, per_rank * (size_t)g->size), -1,
                 MPI_Alltoall(send, (int)per_rank, type, recv, (int)per_rank, type, g->comm),
                 MPI_Ialltoall(send, (int)per_rank, type, recv, (int)per_rank, type, g->comm, mpi_req_));
}

int comm_alltoall_i64(const CommGroup *g, const int64_t *send, int64_t *recv, size_t per_rank,
                      CommRequest *req, Error *err) {
  return alltoall_typed(g, send, recv, per_rank, MPI_INT64_T, req, OP_NAME("comm_alltoall_i64", req), err);
}

int comm_alltoall_f32(const CommGroup *g, const float *send, float *recv, size_t per_rank, CommRequest *req,
                      Error *err) {
  return alltoall_typed(g, send, recv, per_rank, MPI_FLOAT, req, OP_NAME("comm_alltoall_f32", req), err);
}

int comm_reduce_scatterv_sum_f32(const CommGroup *g, const float *send, float *recv,
                                 const int *recv_counts, CommRequest *req, Error *err) {
  const char *name = OP_NAME("comm_reduce_scatterv_sum_f32", req);
  int rc;
  if ((rc = check_group(g, name, err))) return rc;
  if (!recv_counts)
    return error_set(err, ERR_ARG, "%s on group %s: recv_counts is required", name, g->name);
  long long total = 0;
  for (int i = 0; i < g->size; i++) {
    if (recv_counts[i] < 0)
      return error_set(err, ERR_ARG, "%s on group %s: rank %d has count %d (must be >= 0)", name,
                       g->name, i, recv_counts[i]);
    total += recv_counts[i];
  }
  if ((rc = check_buffer(send, (size_t)total, "send", name, g, err)) ||
      (rc = check_buffer(recv, (size_t)recv_counts[g->rank], "recv", name, g, err)) ||
      (rc = check_request(req, name, g, err)))
    return rc;
  comm_set_operation(name);
  return RUN_MPI(OP_PROBE_REDUCE_SCATTER, g, payload_bytes(MPI_FLOAT, (size_t)total), -1,
                 MPI_Reduce_scatter(send, recv, recv_counts, MPI_FLOAT, MPI_SUM, g->comm),
                 MPI_Ireduce_scatter(send, recv, recv_counts, MPI_FLOAT, MPI_SUM, g->comm, mpi_req_));
}
