/* Collectives and point-to-point transfers over one process group, blocking
 * or asynchronous.
 *
 * Every operation takes the group, its buffers and counts, and then
 * `CommRequest *req, Error *err`:
 *   req == NULL  the call blocks until this rank's part is done;
 *   req != NULL  the call starts the operation and returns at once; the
 *                buffers (and, for the -v variants, the count arrays) must
 *                stay untouched until comm_wait / comm_test reports it done.
 * While the collective timeout is armed (comm/timeout.h), a rank that does
 * not arrive ends the job with a message naming it; the group passed in
 * must then outlive the operation.
 * Calls return 0 or an error code with a message in err. Arguments are
 * checked before any MPI call, so a bad argument fails on the rank that
 * passed it without MPI being entered. MPI failures themselves abort the job
 * (see world.h); the checks of MPI's return codes are a second line.
 *
 * Buffers belong to the caller and should be persistent (allocated once,
 * reused every step); nothing here allocates per call beyond what MPI does
 * internally. The all-to-all-v layout is allocated once per group and
 * refilled each step.
 *
 * Payloads are float32; int64 and float64 variants exist where higher layers
 * need exact counts or loss sums. Counts are elements (not bytes) and must
 * fit MPI's int counts; larger transfers are reported, not truncated. */
#ifndef FIVEFOLD_COMM_COLLECTIVES_H
#define FIVEFOLD_COMM_COLLECTIVES_H

#include <stddef.h>
#include <stdint.h>

#include "comm/world.h"

/* An operation in flight. Zero-initialise it (or comm_request_init); it is
 * idle again once comm_wait returns or comm_test reports done. */
typedef struct CommRequest {
  MPI_Request mpi;
  int active;            /* started and not yet completed */
  const char *operation; /* what was started, for failure messages */
  const CommGroup *group; /* where it was started (the collective timeout asks its ranks) */
} CommRequest;

void comm_request_init(CommRequest *req);
/* Blocks until req is done; an idle request returns at once. */
int comm_wait(CommRequest *req, Error *err);
/* *done = 1 when req has completed (it is idle afterwards), else 0. Also
 * drives progress: MPI moves asynchronous operations forward mostly inside
 * MPI calls, so long compute phases should test now and then. */
int comm_test(CommRequest *req, int *done, Error *err);
int comm_wait_all(CommRequest *reqs, int count, Error *err);

typedef enum CommReduceOp { COMM_SUM = 0, COMM_MAX, COMM_MIN } CommReduceOp;

/* In place: every rank ends with the reduction of all ranks' buf. */
int comm_allreduce_f32(const CommGroup *g, float *buf, size_t count, CommReduceOp op,
                       CommRequest *req, Error *err);
int comm_allreduce_f64(const CommGroup *g, double *buf, size_t count, CommReduceOp op,
                       CommRequest *req, Error *err);
int comm_allreduce_i64(const CommGroup *g, int64_t *buf, size_t count, CommReduceOp op,
                       CommRequest *req, Error *err);

/* Sum, then scatter by blocks: send holds size x block floats in group-rank
 * order; this rank receives the sum of everyone's block g->rank in recv
 * (block floats). send == NULL: in place, recv holds the size x block input
 * and the result lands in its first block. */
int comm_reduce_scatter_sum_f32(const CommGroup *g, const float *send, float *recv, size_t block,
                                CommRequest *req, Error *err);

/* Every rank contributes block elements; recv (size x block) gets them in
 * group-rank order. send == NULL: in place, this rank's block is already at
 * recv + rank x block. */
int comm_allgather_f32(const CommGroup *g, const float *send, float *recv, size_t block,
                       CommRequest *req, Error *err);
int comm_allgather_i64(const CommGroup *g, const int64_t *send, int64_t *recv, size_t block,
                       CommRequest *req, Error *err);

/* Variable all-gather: rank i contributes recv_counts[i] floats (send_count
 * must equal recv_counts[g->rank]) which land at recv + recv_displs[i].
 * comm_counts_from_rows fills the two arrays from per-rank row counts. */
int comm_allgatherv_f32(const CommGroup *g, const float *send, int send_count, float *recv,
                        const int *recv_counts, const int *recv_displs, CommRequest *req,
                        Error *err);

/* root's buf is copied to every rank's buf. */
int comm_bcast_f32(const CommGroup *g, int root, float *buf, size_t count, CommRequest *req,
                   Error *err);
int comm_bcast_bytes(const CommGroup *g, int root, void *buf, size_t bytes, CommRequest *req,
                     Error *err);

int comm_barrier(const CommGroup *g, CommRequest *req, Error *err);

/* Point to point; peer is a rank in g, 0 <= tag <= comm_tag_max(). A receive
 * of fewer floats than were sent is an MPI error (truncation) and aborts. */
int comm_send_f32(const CommGroup *g, int peer, int tag, const float *buf, size_t count,
                  CommRequest *req, Error *err);
int comm_recv_f32(const CommGroup *g, int peer, int tag, float *buf, size_t count,
                  CommRequest *req, Error *err);

/* per_rank int64 values to each rank (send [size x per_rank] in rank
 * order); recv [size x per_rank] gets per_rank values from each. */
int comm_alltoall_i64(const CommGroup *g, const int64_t *send, int64_t *recv, size_t per_rank,
                      CommRequest *req, Error *err);
int comm_alltoall_f32(const CommGroup *g, const float *send, float *recv, size_t per_rank, CommRequest *req,
                      Error *err);
/* Variable reduce-scatter: send holds sum(recv_counts) floats in rank
 * blocks; this rank receives the element-wise sum over ranks of its block
 * (recv_counts[g->rank] floats). */
int comm_reduce_scatterv_sum_f32(const CommGroup *g, const float *send, float *recv,
                                 const int *recv_counts, CommRequest *req, Error *err);
/* Converts per-rank row counts (int64, as routing produces them) into MPI's
 * element counts and displacements (packed, in rank order), checking that
 * everything fits MPI's int counts. total_rows may be NULL. */
int comm_counts_from_rows(const int64_t *rows, int n, int row_elems, int *counts, int *displs,
                          int64_t *total_rows, Error *err);

/* The layout of one variable all-to-all over a group: how many rows of
 * row_elems floats go to and come from each peer, packed in peer order on
 * both sides. Allocated once per group (comm_alltoallv_init), refilled each
 * step (comm_alltoallv_set, or comm_alltoallv_exchange which learns the
 * receive side from the peers). */
typedef struct CommAlltoallv {
  int size;                 /* group size it was made for */
  int row_elems;            /* floats per row */
  int64_t *send_rows;       /* [size] rows to each peer */
  int64_t *recv_rows;       /* [size] rows from each peer */
  int64_t send_total_rows, recv_total_rows;
  int *send_counts, *send_displs; /* [size] MPI's view, in floats */
  int *recv_counts, *recv_displs;
} CommAlltoallv;

int comm_alltoallv_init(CommAlltoallv *x, int group_size, Error *err);
void comm_alltoallv_free(CommAlltoallv *x);
/* Both sides known to the caller. The row arrays may alias x's own. */
int comm_alltoallv_set(CommAlltoallv *x, const int64_t *send_rows, const int64_t *recv_rows,
                       int row_elems, Error *err);
/* send_counts[p] goes to peer p; recv_counts[p] is what peer p sends here.
 * One int64 per peer (an all-to-all of counts). */
int comm_exchange_counts_i64(const CommGroup *g, const int64_t *send_counts, int64_t *recv_counts,
                             CommRequest *req, Error *err);
/* Blocking: exchanges the counts with the peers, then sets the layout. */
int comm_alltoallv_exchange(const CommGroup *g, CommAlltoallv *x, const int64_t *send_rows,
                            int row_elems, Error *err);
/* send holds send_total_rows rows packed by destination peer; recv gets
 * recv_total_rows rows packed by source peer. */
int comm_alltoallv_f32(const CommGroup *g, const CommAlltoallv *x, const float *send, float *recv,
                       CommRequest *req, Error *err);
/* The same exchange backwards (what arrived from each peer goes back to it):
 * send holds recv_total_rows rows, recv gets send_total_rows rows. The MoE
 * combine and the backward pass of dispatch use it. */
int comm_alltoallv_reverse_f32(const CommGroup *g, const CommAlltoallv *x, const float *send,
                               float *recv, CommRequest *req, Error *err);

#endif
