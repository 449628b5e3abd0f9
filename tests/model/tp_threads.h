/* Test helper: ModelParallelOps for t "TP ranks" that are t pthreads of
 * one process. Each collective publishes the caller's buffer, meets the
 * others at a barrier, computes its own result from every rank's buffer
 * (sums in rank order, so every rank gets bit-identical results), meets
 * them again so nobody still reads a buffer it is about to overwrite, and
 * only then writes. Header-only so any model test can include it. */
#ifndef FIVEFOLD_TESTS_MODEL_TP_THREADS_H
#define FIVEFOLD_TESTS_MODEL_TP_THREADS_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

#define TP_THREADS_MAX 8

/* kern/attention.c keeps a per-thread scratch cache for the life of the
 * thread (runtime threads never exit); the rank threads here do exit, so
 * LeakSanitizer would report each cache. Only that allocation is excused. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:scratch_get\n"; }

typedef struct TpGroup {
  int t;
  pthread_barrier_t barrier;
  const float *published[TP_THREADS_MAX];
} TpGroup;

typedef struct TpRank {
  TpGroup *group;
  int rank;
  float *tmp; /* result staging, grown on demand */
  size_t tmp_len;
  ModelParallelOps ops;
} TpRank;

static float *tp_tmp(TpRank *r, size_t n) {
  if (n > r->tmp_len) {
    free(r->tmp);
    r->tmp = malloc(n * sizeof *r->tmp);
    r->tmp_len = n;
  }
  return r->tmp;
}

static void tp_publish(TpRank *r, const float *buf) {
  r->group->published[r->rank] = buf;
  pthread_barrier_wait(&r->group->barrier);
}

static void tp_done_reading(TpRank *r) { pthread_barrier_wait(&r->group->barrier); }

static void tp_allreduce(void *ctx, float *buf, size_t n, int is_max) {
  TpRank *r = ctx;
  tp_publish(r, buf);
  float *acc = tp_tmp(r, n);
  memcpy(acc, r->group->published[0], n * sizeof *acc);
  for (int k = 1; k < r->group->t; k++) {
    const float *src = r->group->published[k];
    for (size_t i = 0; i < n; i++) acc[i] = is_max ? (src[i] > acc[i] ? src[i] : acc[i]) : acc[i] + src[i];
  }
  tp_done_reading(r);
  memcpy(buf, acc, n * sizeof *buf);
}

static void tp_allreduce_sum(void *ctx, float *buf, size_t n) { tp_allreduce(ctx, buf, n, 0); }
static void tp_allreduce_max(void *ctx, float *buf, size_t n) { tp_allreduce(ctx, buf, n, 1); }

static void tp_allgather(void *ctx, float *out, const float *in, size_t count) {
  TpRank *r = ctx;
  tp_publish(r, in);
  float *acc = tp_tmp(r, count * (size_t)r->group->t);
  for (int k = 0; k < r->group->t; k++) memcpy(acc + (size_t)k * count, r->group->published[k], count * sizeof *acc);
  tp_done_reading(r);
  memcpy(out, acc, count * (size_t)r->group->t * sizeof *out);
}

static void tp_reduce_scatter(void *ctx, float *out, const float *in, size_t count) {
  TpRank *r = ctx;
  tp_publish(r, in);
  float *acc = tp_tmp(r, count);
  memcpy(acc, r->group->published[0] + (size_t)r->rank * count, count * sizeof *acc);
  for (int k = 1; k < r->group->t; k++) {
    const float *src = r->group->published[k] + (size_t)r->rank * count;
    for (size_t i = 0; i < count; i++) acc[i] += src[i];
  }
  tp_done_reading(r);
  memcpy(out, acc, count * sizeof *out);
}

static void tp_group_init(TpGroup *g, TpRank *ranks, int t) {
  memset(g, 0, sizeof *g);
  g->t = t;
  pthread_barrier_init(&g->barrier, NULL, (unsigned)t);
  for (int k = 0; k < t; k++) {
    memset(&ranks[k], 0, sizeof ranks[k]);
    ranks[k].group = g;
    ranks[k].rank = k;
    ranks[k].ops.ctx = &ranks[k];
    ranks[k].ops.allreduce_sum = tp_allreduce_sum;
    ranks[k].ops.allreduce_max = tp_allreduce_max;
    ranks[k].ops.allgather = tp_allgather;
    ranks[k].ops.reduce_scatter = tp_reduce_scatter;
  }
}

static void tp_group_destroy(TpGroup *g, TpRank *ranks) {
  for (int k = 0; k < g->t; k++) free(ranks[k].tmp);
  pthread_barrier_destroy(&g->barrier);
}

/* Runs fn(rank index, arg) on t threads and waits for all. */
static void tp_run(int t, void *(*fn)(void *), void **args) {
  pthread_t th[TP_THREADS_MAX];
  for (int k = 0; k < t; k++) pthread_create(&th[k], NULL, fn, args[k]);
  for (int k = 0; k < t; k++) pthread_join(th[k], NULL);
}

#endif
