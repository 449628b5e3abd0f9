/* Test helper: one "world" of ranks that are pthreads of this process,
 * with both grids of MoE parallel folding: attention tp-cp-dp (rank =
 * tp_i + tp * (cp_i + cp * dp_i)) and MoE etp-ep-edp (rank = etp_i + etp *
 * (ep_i + ep * edp_i)). Each rank gets ModelParallelOps (TP group),
 * MoeCommOps (EP, ETP and SEQ = TP x CP groups) and CpCommOps (CP ring and
 * sum). The model is SPMD: every rank makes the same collectives in the
 * same order, so every collective meets the whole world at one barrier,
 * reads what its group's members posted, meets again (nobody overwrites a
 * posted buffer still being read) and only then writes its result. Sums run
 * in member order, so a group's members get bit-identical results.
 * Header-only. */
#ifndef FIVEFOLD_TESTS_MODEL_FOLD_THREADS_H
#define FIVEFOLD_TESTS_MODEL_FOLD_THREADS_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#define FOLD_MAX_RANKS 8

/* kern/attention.c keeps a per-thread scratch cache for the life of the
 * thread (runtime threads never exit); the rank threads here do exit, so
 * LeakSanitizer would report each cache. Only that allocation is excused. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:scratch_get\n"; }

typedef enum FoldGroup { FOLD_TP, FOLD_CP, FOLD_SEQ, FOLD_EP, FOLD_ETP } FoldGroup;

typedef struct FoldWorld {
  int size, tp, cp, dp, ep, etp;
  pthread_barrier_t barrier;
  const void *send[FOLD_MAX_RANKS];
  const int64_t *rows[FOLD_MAX_RANKS];
} FoldWorld;

typedef struct FoldRank {
  FoldWorld *w;
  int rank;
  int tp_i, cp_i, dp_i, etp_i, ep_i, edp_i;
  ModelParallelOps ops;
  MoeCommOps moe;
  CpCommOps cp;
} FoldRank;

/* Members of `rank`'s group in member order; returns how many, *me = its position. */
static int fold_members(const FoldWorld *w, int rank, FoldGroup g, int *members, int *me) {
  const int tp_i = rank % w->tp, cp_i = rank / w->tp % w->cp, dp_i = rank / (w->tp * w->cp);
  const int etp_i = rank % w->etp, ep_i = rank / w->etp % w->ep, edp_i = rank / (w->etp * w->ep);
  int n = 0;
  switch (g) {
  case FOLD_TP:
    for (int i = 0; i < w->tp; i++) members[n++] = i + w->tp * (cp_i + w->cp * dp_i);
    *me = tp_i;
    break;
  case FOLD_CP:
    for (int i = 0; i < w->cp; i++) members[n++] = tp_i + w->tp * (i + w->cp * dp_i);
    *me = cp_i;
    break;
  case FOLD_SEQ:
    for (int i = 0; i < w->tp * w->cp; i++) members[n++] = dp_i * w->tp * w->cp + i;
    *me = rank % (w->tp * w->cp);
    break;
  case FOLD_EP:
    for (int i = 0; i < w->ep; i++) members[n++] = etp_i + w->etp * (i + w->ep * edp_i);
    *me = ep_i;
    break;
  case FOLD_ETP:
    for (int i = 0; i < w->etp; i++) members[n++] = i + w->etp * (ep_i + w->ep * edp_i);
    *me = etp_i;
    break;
  }
  return n;
}

static void fold_post(FoldRank *r, const void *send, const int64_t *rows) {
  r->w->send[r->rank] = send;
  r->w->rows[r->rank] = rows;
  pthread_barrier_wait(&r->w->barrier);
}

static void fold_done(FoldRank *r) { pthread_barrier_wait(&r->w->barrier); }

static void *fold_tmp(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) abort();
  return p;
}

/* ---------------------------------------------------------------- TP */

static void fold_tp_allreduce(void *ctx, float *buf, size_t n, int is_max) {
  FoldRank *r = ctx;
  int m[FOLD_MAX_RANKS] = {0}, me = 0, k = fold_members(r->w, r->rank, FOLD_TP, m, &me);
  fold_post(r, buf, NULL);
  float *acc = fold_tmp(n * sizeof *acc);
  memcpy(acc, r->w->send[m[0]], n * sizeof *acc);
  for (int j = 1; j < k; j++) {
    const float *src = r->w->send[m[j]];
    for (size_t i = 0; i < n; i++) acc[i] = is_max ? (src[i] > acc[i] ? src[i] : acc[i]) : acc[i] + src[i];
  }
  fold_done(r);
  memcpy(buf, acc, n * sizeof *buf);
  free(acc);
}

static void fold_tp_sum(void *ctx, float *buf, size_t n) { fold_tp_allreduce(ctx, buf, n, 0); }
static void fold_tp_max(void *ctx, float *buf, size_t n) { fold_tp_allreduce(ctx, buf, n, 1); }

static void fold_tp_allgather(void *ctx, float *out, const float *in, size_t count) {
  FoldRank *r = ctx;
  int m[FOLD_MAX_RANKS] = {0}, me = 0, k = fold_members(r->w, r->rank, FOLD_TP, m, &me);
  fold_post(r, in, NULL);
  float *acc = fold_tmp(count * (size_t)k * sizeof *acc);
  for (int j = 0; j < k; j++) memcpy(acc + (size_t)j * count, r->w->send[m[j]], count * sizeof *acc);
  fold_done(r);
  memcpy(out, acc, count * (size_t)k * sizeof *out);
  free(acc);
}

static void fold_tp_reduce_scatter(void *ctx, float *out, const float *in, size_t count) {
  FoldRank *r = ctx;
  int m[FOLD_MAX_RANKS] = {0}, me = 0, k = fold_members(r->w, r->rank, FOLD_TP, m, &me);
  fold_post(r, in, NULL);
  float *acc = fold_tmp(count * sizeof *acc);
  memset(acc, 0, count * sizeof *acc);
  for (int j = 0; j < k; j++) {
    const float *src = (const float *)r->w->send[m[j]] + (size_t)me * count;
    for (size_t i = 0; i < count; i++) acc[i] += src[i];
  }
  fold_done(r);
  memcpy(out, acc, count * sizeof *out);
  free(acc);
}

/* ---------------------------------------------------------------- CP */

static void fold_cp_shift(void *ctx, const float *send, float *recv, size_t count) {
  FoldRank *r = ctx;
  int m[FOLD_MAX_RANKS] = {0}, me = 0, k = fold_members(r->w, r->rank, FOLD_CP, m, &me);
  fold_post(r, send, NULL);
  memcpy(recv, r->w->send[m[(me - 1 + k) % k]], count * sizeof *recv);
  fold_done(r);
}

static void fold_cp_sum(void *ctx, double *buf, size_t n) {
  FoldRank *r = ctx;
  int m[FOLD_MAX_RANKS] = {0}, me = 0, k = fold_members(r->w, r->rank, FOLD_CP, m, &me);
  fold_post(r, buf, NULL);
  double *acc = fold_tmp(n * sizeof *acc);
  memset(acc, 0, n * sizeof *acc);
  for (int j = 0; j < k; j++)
    for (size_t i = 0; i < n; i++) acc[i] += ((const double *)r->w->send[m[j]])[i];
  fold_done(r);
  memcpy(buf, acc, n * sizeof *buf);
  free(acc);
}

/* ---------------------------------------------------------------- MoE */

static FoldGroup fold_moe_group(MoeGroup g) {
  return g == MOE_GROUP_EP ? FOLD_EP : g == MOE_GROUP_ETP ? FOLD_ETP : FOLD_SEQ;
}

static int64_t fold_rows_before(const int64_t *rows, int i) {
  int64_t t = 0;
  for (int k = 0; k < i; k++) t += rows[k];
  return t;
}

static int fold_alltoall_i64(void *ctx, MoeGroup g, const int64_t *send, int64_t *recv, int per_rank, Error *err) {
  (void)err;
  FoldRank *r = ctx;
  int m[FOLD_MAX_RANKS] = {0}, me = 0, k = fold_members(r->w, r->rank, fold_moe_group(g), m, &me);
  fold_post(r, send, NULL);
  for (int p = 0; p < k; p++)
    memcpy(recv + (size_t)p * per_rank, (const int64_t *)r->w->send[m[p]] + (size_t)me * per_rank,
           (size_t)per_rank * sizeof *recv);
  fold_done(r);
  return 0;
}

static int fold_alltoallv_f32(void *ctx, MoeGroup g, const float *send, const int64_t *send_rows, float *recv,
                              const int64_t *recv_rows, int row_floats, Error *err) {
  FoldRank *r = ctx;
  int m[FOLD_MAX_RANKS] = {0}, me = 0, k = fold_members(r->w, r->rank, fold_moe_group(g), m, &me);
  fold_post(r, send, send_rows);
  int bad = 0;
  for (int p = 0; p < k; p++) {
    const int64_t *theirs = r->w->rows[m[p]];
    if (theirs[me] != recv_rows[p]) {
      bad = 1;
      continue;
    }
    memcpy(recv + (size_t)fold_rows_before(recv_rows, p) * row_floats,
           (const float *)r->w->send[m[p]] + (size_t)fold_rows_before(theirs, me) * row_floats,
           (size_t)theirs[me] * row_floats * sizeof *recv);
  }
  fold_done(r);
  return bad ? error_set(err, ERR_INTERNAL, "alltoallv: receive counts disagree with the senders'") : 0;
}

static int fold_allgather_i64(void *ctx, MoeGroup g, const int64_t *send, int64_t *recv, int count, Error *err) {
  (void)err;
  FoldRank *r = ctx;
  int m[FOLD_MAX_RANKS] = {0}, me = 0, k = fold_members(r->w, r->rank, fold_moe_group(g), m, &me);
  int64_t *acc = fold_tmp((size_t)k * count * sizeof *acc);
  fold_post(r, send, NULL);
  for (int p = 0; p < k; p++) memcpy(acc + (size_t)p * count, r->w->send[m[p]], (size_t)count * sizeof *acc);
  fold_done(r);
  memcpy(recv, acc, (size_t)k * count * sizeof *recv);
  free(acc);
  return 0;
}

static int fold_allgatherv_f32(void *ctx, MoeGroup g, const float *send, float *recv, const int64_t *rows,
                               int row_floats, Error *err) {
  (void)err;
  FoldRank *r = ctx;
  int m[FOLD_MAX_RANKS] = {0}, me = 0, k = fold_members(r->w, r->rank, fold_moe_group(g), m, &me);
  fold_post(r, send, NULL);
  for (int p = 0; p < k; p++)
    memcpy(recv + (size_t)fold_rows_before(rows, p) * row_floats, r->w->send[m[p]],
           (size_t)rows[p] * row_floats * sizeof *recv);
  fold_done(r);
  return 0;
}

static int fold_reduce_scatterv_f32(void *ctx, MoeGroup g, const float *send, float *recv, const int64_t *rows,
                                    int row_floats, Error *err) {
  (void)err;
  FoldRank *r = ctx;
  int m[FOLD_MAX_RANKS] = {0}, me = 0, k = fold_members(r->w, r->rank, fold_moe_group(g), m, &me);
  fold_post(r, send, NULL);
  const size_t count = (size_t)rows[me] * row_floats, at = (size_t)fold_rows_before(rows, me) * row_floats;
  float *acc = fold_tmp(count * sizeof *acc);
  for (size_t i = 0; i < count; i++) {
    float sum = 0;
    for (int p = 0; p < k; p++) sum += ((const float *)r->w->send[m[p]])[at + i];
    acc[i] = sum;
  }
  fold_done(r);
  memcpy(recv, acc, count * sizeof *recv);
  free(acc);
  return 0;
}

static int fold_allreduce_f64(void *ctx, MoeGroup g, double *buf, size_t n, Error *err) {
  (void)err;
  FoldRank *r = ctx;
  int m[FOLD_MAX_RANKS] = {0}, me = 0, k = fold_members(r->w, r->rank, fold_moe_group(g), m, &me);
  fold_post(r, buf, NULL);
  double *acc = fold_tmp(n * sizeof *acc);
  memset(acc, 0, n * sizeof *acc);
  for (int p = 0; p < k; p++)
    for (size_t i = 0; i < n; i++) acc[i] += ((const double *)r->w->send[m[p]])[i];
  fold_done(r);
  memcpy(buf, acc, n * sizeof *buf);
  free(acc);
  return 0;
}

/* ---------------------------------------------------------------- setup */

/* A world of tp*cp*dp ranks; ep*etp must divide it. */
static void fold_world_init(FoldWorld *w, FoldRank *ranks, int tp, int cp, int dp, int ep, int etp) {
  memset(w, 0, sizeof *w);
  w->size = tp * cp * dp;
  w->tp = tp;
  w->cp = cp;
  w->dp = dp;
  w->ep = ep;
  w->etp = etp;
  pthread_barrier_init(&w->barrier, NULL, (unsigned)w->size);
  for (int k = 0; k < w->size; k++) {
    FoldRank *r = &ranks[k];
    memset(r, 0, sizeof *r);
    r->w = w;
    r->rank = k;
    r->tp_i = k % tp;
    r->cp_i = k / tp % cp;
    r->dp_i = k / (tp * cp);
    r->etp_i = k % etp;
    r->ep_i = k / etp % ep;
    r->edp_i = k / (etp * ep);
    r->moe = (MoeCommOps){r, fold_alltoall_i64, fold_alltoallv_f32, fold_allgather_i64, fold_allgatherv_f32,
                          fold_reduce_scatterv_f32, fold_allreduce_f64};
    r->cp = (CpCommOps){r, fold_cp_shift, NULL, NULL, fold_cp_sum};
    r->ops = (ModelParallelOps){r, fold_tp_sum, fold_tp_max, fold_tp_allgather, fold_tp_reduce_scatter, &r->moe,
                                &r->cp};
  }
}

static void fold_world_destroy(FoldWorld *w) { pthread_barrier_destroy(&w->barrier); }

/* Runs fn(args[k]) on one thread per rank and waits for all. */
static void fold_run(int size, void *(*fn)(void *), void **args) {
  pthread_t th[FOLD_MAX_RANKS];
  for (int k = 0; k < size; k++) pthread_create(&th[k], NULL, fn, args[k]);
  for (int k = 0; k < size; k++) pthread_join(th[k], NULL);
}

#endif
