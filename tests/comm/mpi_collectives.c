/* Every collective and point-to-point wrapper against hand-computed results,
 * run under mpirun on 2, 4 and 8 ranks and as a singleton: on the world and
 * (from 4 ranks) on grid groups of other sizes. Values are small integers in
 * floats so results must match exactly. Also: asynchronous handles really
 * are asynchronous (a receive is still pending while its rank goes on to
 * other collectives) and complete; argument errors are reported locally;
 * every wrapper again with sleeping waits (comm/waits.h), with the
 * collective timeout disarmed and armed, and a sleeping wait hands its core
 * back (its thread's CPU time is a small part of the time it waited); with
 * the timeout armed and waits not sleeping, collectives of 256 KB and more
 * (an arrival check, then the blocking call: comm/timeout.h) give the same
 * results. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "mpi_test_util.h"

/* Sum over group ranks s of (s + 1). */
static int tri(int n) { return n * (n + 1) / 2; }

static void test_allreduce(const CommGroup *g) {
  const int n = 1000, p = g->size, r = g->rank;
  float *buf = malloc(n * sizeof *buf);
  for (int op = COMM_SUM; op <= COMM_MIN; op++) {
    for (int i = 0; i < n; i++) buf[i] = (float)((r + 1) * (i % 17 + 1));
    CHECK_OK(comm_allreduce_f32(g, buf, (size_t)n, (CommReduceOp)op, NULL, err));
    int bad = 0;
    for (int i = 0; i < n; i++) {
      int unit = i % 17 + 1;
      float expect = op == COMM_SUM   ? (float)(tri(p) * unit)
                     : op == COMM_MAX ? (float)(p * unit)
                                      : (float)unit;
      bad += buf[i] != expect;
    }
    CHECK(bad == 0, "allreduce op %d on %s: %d wrong elements", op, g->name, bad);
  }
  double d[3] = {0.5 * r, 1e15 + r, -0.25};
  CHECK_OK(comm_allreduce_f64(g, d, 3, COMM_SUM, NULL, err));
  CHECK(d[0] == 0.5 * tri(p - 1) && d[1] == 1e15 * p + tri(p - 1) && d[2] == -0.25 * p,
        "f64 sum on %s: %g %g %g", g->name, d[0], d[1], d[2]);
  int64_t q[2] = {((int64_t)1 << 40) + r, -(int64_t)r};
  CHECK_OK(comm_allreduce_i64(g, q, 2, COMM_SUM, NULL, err));
  CHECK(q[0] == ((int64_t)p << 40) + tri(p - 1) && q[1] == -(int64_t)tri(p - 1),
        "i64 sum on %s: %lld %lld", g->name, (long long)q[0], (long long)q[1]);
  q[0] = ((int64_t)1 << 50) * (r % 2 ? 1 : -1) + r;
  CHECK_OK(comm_allreduce_i64(g, q, 1, COMM_MAX, NULL, err));
  int64_t expect_max = p > 1 ? ((int64_t)1 << 50) + (p % 2 ? p - 2 : p - 1) : -((int64_t)1 << 50);
  CHECK(q[0] == expect_max, "i64 max on %s: %lld, expected %lld", g->name, (long long)q[0],
        (long long)expect_max);
  CHECK_OK(comm_allreduce_f32(g, NULL, 0, COMM_SUM, NULL, err)); /* empty is fine */
  free(buf);
}

/* Payloads past the arrival check's threshold (256 KB): all-reduce,
 * reduce-scatter and all-gather of 128 K floats per rank. */
static void test_large(const CommGroup *g) {
  const int n = 1 << 17, p = g->size, r = g->rank;
  float *buf = malloc((size_t)n * p * sizeof *buf), *out = malloc((size_t)n * p * sizeof *out);
  for (int i = 0; i < n; i++) buf[i] = (float)((r + 1) * (i % 29 + 1));
  CHECK_OK(comm_allreduce_f32(g, buf, (size_t)n, COMM_SUM, NULL, err));
  int bad = 0;
  for (int i = 0; i < n; i++) bad += buf[i] != (float)(tri(p) * (i % 29 + 1));
  CHECK(bad == 0, "large allreduce on %s: %d wrong elements", g->name, bad);
  for (int j = 0; j < p; j++)
    for (int i = 0; i < n; i++) buf[(size_t)j * n + i] = (float)((r + 1) * (j + 1) + i % 7);
  CHECK_OK(comm_reduce_scatter_sum_f32(g, buf, out, (size_t)n, NULL, err));
  bad = 0;
  for (int i = 0; i < n; i++) bad += out[i] != (float)(tri(p) * (r + 1) + p * (i % 7));
  CHECK(bad == 0, "large reduce-scatter on %s: %d wrong elements", g->name, bad);
  for (int i = 0; i < n; i++) buf[i] = (float)(r * 1000 + i % 13);
  CHECK_OK(comm_allgather_f32(g, buf, out, (size_t)n, NULL, err));
  bad = 0;
  for (int j = 0; j < p; j++)
    for (int i = 0; i < n; i++) bad += out[(size_t)j * n + i] != (float)(j * 1000 + i % 13);
  CHECK(bad == 0, "large allgather on %s: %d wrong elements", g->name, bad);
  free(buf);
  free(out);
  /* An all-to-all-v whose payload is large on rank 0 only (64 K floats to
   * each peer, 16 from the others): every rank must take the same path,
   * or the barrier of one meets the exchange of another. */
  CommAlltoallv x;
  CHECK_OK(comm_alltoallv_init(&x, p, err));
  int64_t *rows = malloc((size_t)p * sizeof *rows);
  for (int q = 0; q < p; q++) rows[q] = r == 0 ? 1 << 16 : 16;
  CHECK_OK(comm_alltoallv_exchange(g, &x, rows, 1, err));
  float *send = malloc((size_t)x.send_total_rows * sizeof *send), *recv = malloc((size_t)x.recv_total_rows * sizeof *recv);
  for (int64_t i = 0; i < x.send_total_rows; i++) send[i] = (float)(r * 100000 + i % 1000);
  CHECK_OK(comm_alltoallv_f32(g, &x, send, recv, NULL, err));
  bad = 0;
  for (int q = 0, k = 0; q < p; q++)
    for (int64_t i = 0; i < x.recv_rows[q]; i++, k++)
      bad += recv[k] != (float)(q * 100000 + (r * x.recv_rows[q] + i) % 1000);
  CHECK(bad == 0, "uneven large alltoallv on %s: %d wrong elements", g->name, bad);
  CHECK_OK(comm_alltoallv_reverse_f32(g, &x, recv, send, NULL, err));
  bad = 0;
  for (int64_t i = 0; i < x.send_total_rows; i++) bad += send[i] != (float)(r * 100000 + i % 1000);
  CHECK(bad == 0, "uneven large alltoallv reverse on %s: %d wrong elements", g->name, bad);
  comm_alltoallv_free(&x);
  free(rows);
  free(send);
  free(recv);
}

static void test_reduce_scatter(const CommGroup *g) {
  const int block = 5, p = g->size, r = g->rank;
  float *send = malloc((size_t)p * block * sizeof *send), recv[5];
  for (int j = 0; j < p; j++)
    for (int i = 0; i < block; i++) send[j * block + i] = (float)((r + 1) * 10 * (j + 1) + i);
  CHECK_OK(comm_reduce_scatter_sum_f32(g, send, recv, block, NULL, err));
  /* Block r summed over senders s: sum_s (s + 1) 10 (r + 1) + p i. */
  for (int i = 0; i < block; i++)
    CHECK(recv[i] == (float)(tri(p) * 10 * (r + 1) + p * i), "reduce-scatter on %s [%d]: %g",
          g->name, i, recv[i]);
  /* In place: the input is the receive buffer, the result its first block. */
  CHECK_OK(comm_reduce_scatter_sum_f32(g, NULL, send, block, NULL, err));
  for (int i = 0; i < block; i++)
    CHECK(send[i] == (float)(tri(p) * 10 * (r + 1) + p * i),
          "in-place reduce-scatter on %s [%d]: %g", g->name, i, send[i]);
  free(send);
}

static void test_allgather(const CommGroup *g) {
  const int block = 3, p = g->size, r = g->rank;
  float send[3], *recv = malloc((size_t)p * block * sizeof *recv);
  for (int i = 0; i < block; i++) send[i] = (float)(100 * r + i);
  CHECK_OK(comm_allgather_f32(g, send, recv, block, NULL, err));
  for (int j = 0; j < p; j++)
    for (int i = 0; i < block; i++)
      CHECK(recv[j * block + i] == (float)(100 * j + i), "allgather on %s [%d][%d]: %g", g->name, j,
            i, recv[j * block + i]);
  /* In place: only this rank's own block is filled in beforehand. */
  for (int k = 0; k < p * block; k++) recv[k] = -1.0f;
  for (int i = 0; i < block; i++) recv[r * block + i] = (float)(7 * r + i);
  CHECK_OK(comm_allgather_f32(g, NULL, recv, block, NULL, err));
  for (int j = 0; j < p; j++)
    for (int i = 0; i < block; i++)
      CHECK(recv[j * block + i] == (float)(7 * j + i), "in-place allgather on %s [%d][%d]: %g",
            g->name, j, i, recv[j * block + i]);
  int64_t mine[2] = {((int64_t)r << 33) + 1, -(int64_t)r},
          *all = malloc((size_t)p * 2 * sizeof *all);
  CHECK_OK(comm_allgather_i64(g, mine, all, 2, NULL, err));
  for (int j = 0; j < p; j++)
    CHECK(all[2 * j] == ((int64_t)j << 33) + 1 && all[2 * j + 1] == -(int64_t)j,
          "i64 allgather on %s [%d]", g->name, j);
  free(recv);
  free(all);
}

/* Rank j contributes j % 3 rows of 2 floats: ranks 0, 3, 6 send nothing. */
static void test_allgatherv(const CommGroup *g) {
  const int p = g->size, r = g->rank, row = 2;
  int64_t *rows = malloc((size_t)p * sizeof *rows);
  int *counts = malloc((size_t)p * sizeof *counts), *displs = malloc((size_t)p * sizeof *displs);
  for (int j = 0; j < p; j++) rows[j] = j % 3;
  int64_t total = 0;
  CHECK_OK(comm_counts_from_rows(rows, p, row, counts, displs, &total, err));
  float send[4], *recv = malloc((size_t)(total * row + 1) * sizeof *recv);
  for (int i = 0; i < counts[r]; i++) send[i] = (float)(1000 * r + i);
  recv[total * row] = 12345.0f; /* guard: nothing may land past the end */
  CHECK_OK(comm_allgatherv_f32(g, send, counts[r], recv, counts, displs, NULL, err));
  int k = 0;
  for (int j = 0; j < p; j++)
    for (int i = 0; i < counts[j]; i++, k++)
      CHECK(recv[k] == (float)(1000 * j + i), "allgatherv on %s from %d [%d]: %g", g->name, j, i,
            recv[k]);
  CHECK(k == total * row && recv[k] == 12345.0f, "allgatherv on %s wrote past the end", g->name);
  CHECK_FAILS(ERR_ARG, "must agree on every rank",
              comm_allgatherv_f32(g, send, counts[r] + 1, recv, counts, displs, NULL, err));
  free(rows);
  free(counts);
  free(displs);
  free(recv);
}

/* Rank s sends (s + 2 p) % 3 rows of 3 floats to peer p, so some pairs
 * exchange nothing and counts are uneven; payload encodes (s, p, k). */
static int a2a_rows(int s, int p) { return (s + 2 * p) % 3; }
static float a2a_value(int s, int p, int k) { return (float)(s * 10000 + p * 100 + k); }

static void test_alltoallv(const CommGroup *g, int asynchronous) {
  const int p = g->size, r = g->rank, row = 3;
  CommAlltoallv x;
  CHECK_OK(comm_alltoallv_init(&x, p, err));
  int64_t *send_rows = malloc((size_t)p * sizeof *send_rows);
  int64_t send_total = 0, recv_total = 0;
  for (int q = 0; q < p; q++) {
    send_rows[q] = a2a_rows(r, q);
    send_total += send_rows[q];
    recv_total += a2a_rows(q, r);
  }
  CHECK_OK(comm_alltoallv_exchange(g, &x, send_rows, row, err));
  for (int q = 0; q < p; q++)
    CHECK(x.recv_rows[q] == a2a_rows(q, r), "a2a counts on %s from %d: %lld", g->name, q,
          (long long)x.recv_rows[q]);
  CHECK(x.send_total_rows == send_total && x.recv_total_rows == recv_total,
        "a2a totals on %s: %lld %lld", g->name, (long long)x.send_total_rows,
        (long long)x.recv_total_rows);
  float *send = malloc((size_t)(send_total * row + 1) * sizeof *send);
  float *recv = malloc((size_t)(recv_total * row + 1) * sizeof *recv);
  float *back = malloc((size_t)(send_total * row + 1) * sizeof *back);
  int k = 0;
  for (int q = 0; q < p; q++)
    for (int i = 0; i < a2a_rows(r, q) * row; i++) send[k++] = a2a_value(r, q, i);
  recv[recv_total * row] = back[send_total * row] = -7.0f;
  CommRequest req = {0};
  CHECK_OK(comm_alltoallv_f32(g, &x, send, recv, asynchronous ? &req : NULL, err));
  CHECK_OK(comm_wait(&req, err));
  k = 0;
  for (int q = 0; q < p; q++)
    for (int i = 0; i < a2a_rows(q, r) * row; i++, k++)
      CHECK(recv[k] == a2a_value(q, r, i), "a2a on %s from %d [%d]: %g", g->name, q, i, recv[k]);
  CHECK(recv[recv_total * row] == -7.0f, "a2a on %s wrote past the end", g->name);
  /* The reverse exchange returns every row to where it came from. */
  CHECK_OK(comm_alltoallv_reverse_f32(g, &x, recv, back, asynchronous ? &req : NULL, err));
  CHECK_OK(comm_wait(&req, err));
  CHECK(memcmp(back, send, (size_t)send_total * row * sizeof *back) == 0,
        "a2a reverse on %s did not restore the send buffer", g->name);
  CHECK(back[send_total * row] == -7.0f, "a2a reverse on %s wrote past the end", g->name);
  /* Counts are int64 on the wire: values beyond 32 bits survive. */
  int64_t *big = malloc((size_t)p * sizeof *big), *got = malloc((size_t)p * sizeof *got);
  for (int q = 0; q < p; q++) big[q] = ((int64_t)1 << 35) + r * 100 + q;
  CHECK_OK(comm_exchange_counts_i64(g, big, got, NULL, err));
  for (int q = 0; q < p; q++)
    CHECK(got[q] == ((int64_t)1 << 35) + q * 100 + r, "count exchange on %s from %d", g->name, q);
  /* A layout made for another group size is refused before MPI is entered. */
  CommAlltoallv wrong;
  CHECK_OK(comm_alltoallv_init(&wrong, p + 1, err));
  CHECK_FAILS(ERR_ARG, "layout made for", comm_alltoallv_f32(g, &wrong, send, recv, NULL, err));
  comm_alltoallv_free(&wrong);
  comm_alltoallv_free(&x);
  free(send_rows);
  free(send);
  free(recv);
  free(back);
  free(big);
  free(got);
}

static void test_bcast(const CommGroup *g) {
  const int root = g->size - 1, n = 64;
  float buf[64];
  for (int i = 0; i < n; i++) buf[i] = g->rank == root ? (float)(3 * i + 1) : 0.0f;
  CHECK_OK(comm_bcast_f32(g, root, buf, n, NULL, err));
  int bad = 0;
  for (int i = 0; i < n; i++) bad += buf[i] != (float)(3 * i + 1);
  CHECK(bad == 0, "bcast on %s: %d wrong", g->name, bad);
  char text[48] = {0};
  if (g->rank == 0) snprintf(text, sizeof text, "config from %s root", g->name);
  CHECK_OK(comm_bcast_bytes(g, 0, text, sizeof text, NULL, err));
  char expect[48] = {0};
  snprintf(expect, sizeof expect, "config from %s root", g->name);
  CHECK(memcmp(text, expect, sizeof text) == 0, "bcast bytes on %s: %s", g->name, text);
}

static void test_point_to_point(const CommGroup *g) {
  const int p = g->size, r = g->rank, n = 100;
  float out[100], in[100];
  for (int i = 0; i < n; i++) out[i] = (float)(r * 1000 + i);
  /* Blocking pairs (0,1), (2,3), ...: the even rank sends first. */
  int partner = r ^ 1;
  if (partner < p) {
    if (r % 2 == 0) {
      CHECK_OK(comm_send_f32(g, partner, 5, out, n, NULL, err));
      CHECK_OK(comm_recv_f32(g, partner, 6, in, n, NULL, err));
    } else {
      CHECK_OK(comm_recv_f32(g, partner, 5, in, n, NULL, err));
      CHECK_OK(comm_send_f32(g, partner, 6, out, n, NULL, err));
    }
    int bad = 0;
    for (int i = 0; i < n; i++) bad += in[i] != (float)(partner * 1000 + i);
    CHECK(bad == 0, "blocking send/recv on %s with %d: %d wrong", g->name, partner, bad);
  }
  /* Non-blocking ring (a rank of a singleton group talks to itself). */
  CommRequest reqs[2] = {{0}, {0}};
  int next = (r + 1) % p, prev = (r + p - 1) % p;
  CHECK_OK(comm_recv_f32(g, prev, 9, in, n, &reqs[0], err));
  CHECK_OK(comm_send_f32(g, next, 9, out, n, &reqs[1], err));
  CHECK_OK(comm_wait_all(reqs, 2, err));
  int bad = 0;
  for (int i = 0; i < n; i++) bad += in[i] != (float)(prev * 1000 + i);
  CHECK(bad == 0, "ring on %s from %d: %d wrong", g->name, prev, bad);
  CHECK(!reqs[0].active && !reqs[1].active, "ring requests still active after wait_all");
  CHECK_OK(comm_barrier(g, NULL, err));
}

/* A receive stays pending while its rank takes part in other collectives,
 * then completes with the right data; several operations in flight at once
 * all complete; a long compute phase can poll. */
static void test_async(const CommGroup *g) {
  const int p = g->size, r = g->rank;
  if (p >= 2) {
    float in[4] = {0}, out[4] = {1, 2, 3, 4};
    CommRequest rq = {0};
    int done = -1;
    if (r == 1) {
      CHECK_OK(comm_recv_f32(g, 0, 77, in, 4, &rq, err));
      CHECK_OK(comm_test(&rq, &done, err));
      /* Rank 0 sends only after the barrier below, which we have not entered. */
      CHECK(done == 0, "receive on %s completed before anything was sent", g->name);
      CHECK_FAILS(ERR_ARG, "still in flight", comm_barrier(g, &rq, err));
    }
    CHECK_OK(comm_barrier(g, NULL, err));
    float sum = (float)r;
    CHECK_OK(comm_allreduce_f32(g, &sum, 1, COMM_SUM, NULL, err));
    CHECK(sum == (float)tri(p - 1), "allreduce while a receive is pending on %s: %g", g->name, sum);
    if (r == 0) CHECK_OK(comm_send_f32(g, 1, 77, out, 4, NULL, err));
    if (r == 1) {
      CHECK_OK(comm_wait(&rq, err));
      CHECK(memcmp(in, out, sizeof in) == 0, "pending receive on %s got wrong data", g->name);
      CHECK(!rq.active, "request still active after wait");
    }
  }
  /* Everything in flight at once, overlapped with local work. */
  const int n = 1 << 14, block = 4;
  float *big = malloc(n * sizeof *big), *gathered = malloc((size_t)p * block * sizeof *gathered);
  float *scatter_in = malloc((size_t)p * block * sizeof *scatter_in), scatter_out[4], mine[4];
  float bval[8] = {0};
  for (int i = 0; i < n; i++) big[i] = (float)(r + i % 5);
  for (int i = 0; i < block; i++) mine[i] = (float)(r * 10 + i);
  for (int k = 0; k < p * block; k++) scatter_in[k] = (float)(r + 1);
  if (r == 0)
    for (int i = 0; i < 8; i++) bval[i] = (float)(i * i);
  CommRequest reqs[5] = {{0}};
  CHECK_OK(comm_allreduce_f32(g, big, n, COMM_SUM, &reqs[0], err));
  CHECK_OK(comm_allgather_f32(g, mine, gathered, block, &reqs[1], err));
  CHECK_OK(comm_reduce_scatter_sum_f32(g, scatter_in, scatter_out, block, &reqs[2], err));
  CHECK_OK(comm_bcast_f32(g, 0, bval, 8, &reqs[3], err));
  CHECK_OK(comm_barrier(g, &reqs[4], err));
  double work = 0;
  int done = 0, polls = 0;
  for (int step = 0; step < 200; step++) {
    for (int i = 0; i < 1000; i++) work += (double)i * (step + 1);
    if (!done) {
      CHECK_OK(comm_test(&reqs[0], &done, err));
      polls++;
    }
  }
  CHECK(work > 0 && polls > 0, "no overlapped work was done");
  /* Wait in reverse order of starting: completion order is MPI's business. */
  for (int i = 4; i >= 0; i--) CHECK_OK(comm_wait(&reqs[i], err));
  int bad = 0;
  for (int i = 0; i < n; i++) bad += big[i] != (float)(tri(p - 1) + p * (i % 5));
  CHECK(bad == 0, "async allreduce on %s: %d wrong", g->name, bad);
  for (int j = 0; j < p; j++)
    for (int i = 0; i < block; i++)
      CHECK(gathered[j * block + i] == (float)(j * 10 + i), "async allgather on %s", g->name);
  for (int i = 0; i < block; i++)
    CHECK(scatter_out[i] == (float)tri(p), "async reduce-scatter on %s: %g", g->name,
          scatter_out[i]);
  for (int i = 0; i < 8; i++) CHECK(bval[i] == (float)(i * i), "async bcast on %s", g->name);
  /* Poll to completion without ever calling wait. */
  CommRequest poll = {0};
  float one = 1.0f;
  CHECK_OK(comm_allreduce_f32(g, &one, 1, COMM_SUM, &poll, err));
  done = 0;
  while (!done) CHECK_OK(comm_test(&poll, &done, err));
  CHECK(one == (float)p && !poll.active, "polled allreduce on %s: %g", g->name, one);
  CHECK_OK(comm_wait(&poll, err)); /* waiting on an idle request is a no-op */
  free(big);
  free(gathered);
  free(scatter_in);
}

/* Mistakes are reported on the rank that made them, before MPI is entered. */
static void test_argument_errors(const CommGroup *g) {
  float x[4] = {0};
  CHECK_FAILS(ERR_ARG, "peer 9999 is outside the group",
              comm_send_f32(g, 9999, 0, x, 1, NULL, err));
  CHECK_FAILS(ERR_ARG, "peer -1 is outside", comm_recv_f32(g, -1, 0, x, 1, NULL, err));
  CHECK_FAILS(ERR_ARG, "tag -3 is outside", comm_send_f32(g, 0, -3, x, 1, NULL, err));
  CHECK_FAILS(ERR_ARG, "exceeds MPI's int count limit",
              comm_allreduce_f32(g, x, (size_t)1 << 33, COMM_SUM, NULL, err));
  CHECK_FAILS(ERR_ARG, "buf is NULL", comm_allreduce_f32(g, NULL, 4, COMM_SUM, NULL, err));
  CHECK_FAILS(ERR_ARG, "unknown reduction",
              comm_allreduce_f32(g, x, 4, (CommReduceOp)9, NULL, err));
  CHECK_FAILS(ERR_ARG, "root 9999 is outside", comm_bcast_f32(g, 9999, x, 1, NULL, err));
  CommGroup unset = {0};
  CHECK_FAILS(ERR_ARG, "group is not set up", comm_barrier(&unset, NULL, err));
  int counts[2], displs[2];
  int64_t rows[2] = {3, -1}, huge[2] = {1, (int64_t)1 << 40};
  CHECK_FAILS(ERR_ARG, "peer 1 has -1 rows",
              comm_counts_from_rows(rows, 2, 4, counts, displs, NULL, err));
  CHECK_FAILS(ERR_ARG, "exceed MPI's int count limit",
              comm_counts_from_rows(huge, 2, 4, counts, displs, NULL, err));
}

static void run_all(const CommGroup *g) {
  test_allreduce(g);
  test_reduce_scatter(g);
  test_allgather(g);
  test_allgatherv(g);
  test_alltoallv(g, 0);
  test_alltoallv(g, 1);
  test_bcast(g);
  test_point_to_point(g);
  test_async(g);
  test_argument_errors(g);
}

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* FIVEFOLD_WAIT_SLEEP's values, and a wait of 400 ms on a late sender: a
 * sleeping receiver's thread spends a small part of it on the CPU (a
 * spinning one spends all the core it is given). CPU time, not wall time,
 * so the check does not depend on the machine's speed or load. */
static void test_waits(const CommGroup *g) {
  WaitSleepMode mode = WAIT_SLEEP_OFF;
  CHECK_OK(comm_waits_parse(NULL, "V", &mode, err));
  CHECK(mode == WAIT_SLEEP_AUTO, "unset is auto");
  CHECK_OK(comm_waits_parse("on", "V", &mode, err));
  CHECK(mode == WAIT_SLEEP_ON, "on");
  CHECK_OK(comm_waits_parse("off", "V", &mode, err));
  CHECK(mode == WAIT_SLEEP_OFF, "off");
  CHECK_FAILS(ERR_ARG, "FIVEFOLD_WAIT_SLEEP=\"yes\": expected on, off or auto",
              comm_waits_parse("yes", "FIVEFOLD_WAIT_SLEEP", &mode, err));
  if (g->size < 2) return;
  comm_waits_set_sleeping(1);
  float v = 0;
  if (g->rank == 1) {
    struct timespec late = {0, 400 * 1000 * 1000};
    nanosleep(&late, NULL);
    v = 42;
    CHECK_OK(comm_send_f32(g, 0, 5, &v, 1, NULL, err));
  } else if (g->rank == 0) {
    double wall = clock_s(CLOCK_MONOTONIC), cpu = clock_s(CLOCK_THREAD_CPUTIME_ID);
    CHECK_OK(comm_recv_f32(g, 1, 5, &v, 1, NULL, err));
    wall = clock_s(CLOCK_MONOTONIC) - wall;
    cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - cpu;
    CHECK(v == 42, "late receive got %g", v);
    CHECK(wall > 0.3 && cpu < 0.25 * wall, "a sleeping wait of %.3f s took %.3f s of CPU", wall, cpu);
  }
  comm_waits_set_sleeping(0);
}

int main(int argc, char **argv) {
  Error err = {0};
  if (comm_init(&argc, &argv, &err)) {
    fprintf(stderr, "mpi_collectives: %s\n", err.msg);
    return 1;
  }
  const int w = comm_world_size();
  run_all(comm_world());
  test_waits(comm_world());
  /* Sleeping waits, without and with the collective timeout. */
  comm_waits_set_sleeping(1);
  run_all(comm_world());
  if (comm_set_collective_timeout(60, &err)) comm_abort(2, "%s", err.msg);
  run_all(comm_world());
  if (comm_set_collective_timeout(0, &err)) comm_abort(2, "%s", err.msg);
  comm_waits_set_sleeping(0);
  /* Armed without sleeping waits: small collectives polled, large ones
   * checked for arrival and then blocking (3 per test_large, and its two
   * all-to-all-v exchanges, which always are; none disarmed). */
  long before = comm_timeout_blocking_calls();
  test_large(comm_world());
  CHECK(comm_timeout_blocking_calls() == before, "disarmed, %ld collectives took the arrival check",
        comm_timeout_blocking_calls() - before);
  if (comm_set_collective_timeout(60, &err)) comm_abort(2, "%s", err.msg);
  run_all(comm_world());
  before = comm_timeout_blocking_calls();
  test_large(comm_world());
  long expect = w > 1 ? 5 : 0; /* a world of one rank never arms */
  CHECK(comm_timeout_blocking_calls() - before == expect, "armed, %ld large collectives took the arrival check, "
        "expected %ld", comm_timeout_blocking_calls() - before, expect);
  if (comm_set_collective_timeout(0, &err)) comm_abort(2, "%s", err.msg);
  if (w >= 4) {
    /* Groups of other sizes and strides than the world: tp pairs of
     * neighbours, dp groups of every other rank, and (8 ranks) a 4-rank
     * expert group next to 2-rank groups. */
    GridSizes sizes = {.tp = 2, .cp = 1, .dp = 0, .pp = 1, .etp = 1, .ep = w >= 8 ? 4 : 2};
    CommGrid grid;
    if (comm_grid_create(&sizes, &grid, &err)) comm_abort(2, "%s", err.msg);
    run_all(comm_grid_group(&grid, GRID_GROUP_TP));
    run_all(comm_grid_group(&grid, GRID_GROUP_DP));
    run_all(comm_grid_group(&grid, GRID_GROUP_EP));
    run_all(comm_grid_group(&grid, GRID_GROUP_EDP));
    /* Two groups' asynchronous collectives in flight at the same time. */
    const CommGroup *tp = comm_grid_group(&grid, GRID_GROUP_TP);
    const CommGroup *dp = comm_grid_group(&grid, GRID_GROUP_DP);
    float a = (float)comm_world_rank(), b = (float)comm_world_rank();
    CommRequest ra = {0}, rb = {0};
    CHECK_OK(comm_allreduce_f32(tp, &a, 1, COMM_SUM, &ra, err));
    CHECK_OK(comm_allreduce_f32(dp, &b, 1, COMM_SUM, &rb, err));
    CHECK_OK(comm_wait(&rb, err));
    CHECK_OK(comm_wait(&ra, err));
    int me = comm_world_rank(), tp0 = me - me % 2;
    float expect_b = 0;
    for (int q = me % 2; q < w; q += 2) expect_b += (float)q;
    CHECK(a == (float)(2 * tp0 + 1), "tp allreduce with dp in flight: %g", a);
    CHECK(b == expect_b, "dp allreduce with tp in flight: %g, expected %g", b, expect_b);
    comm_grid_destroy(&grid);
  }
  return mpi_test_finish("mpi_collectives");
}
