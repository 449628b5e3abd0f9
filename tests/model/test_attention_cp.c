/* Context-parallel ring attention (model/attention_cp.h) against one rank.
 * CP ranks are pthreads in this process; ring_shift goes through shared
 * buffers and a barrier. Proves:
 *  - gathered out, lse, dq, dk, dv of CP = 2 and 4 (B = 2, T = 16 and 32,
 *    GQA Hq = 4, Hkv = 2, D = 8) equal attention_forward/attention_backward on
 *    the whole sequence, with the blocking ring_shift and with start/wait
 *    (whose test double poisons the receive buffer and checks the send buffer
 *    stays untouched while a shift is in flight);
 *  - the CP gradients equal central finite differences of a double-precision
 *    transcription of causal attention (L = sum(out * dout));
 *  - the load-balanced split/unsplit round-trips and the positions partition
 *    the sequence; every rank computes the same number of causal
 *    (query, key) pairs over its ring (a contiguous split does not);
 *  - bad shapes, ranks and ops are rejected with a message. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "kern/attention.h"
#include "model/attention_cp.h"

enum { MAX_CP = 8, B_ = 2, HQ = 4, HKV = 2, HD = 8 };

/* fp32 CP against fp32 one-rank: only the summation order differs (merge
 * of per-block softmaxes vs one online softmax; dq summed block by block). */
static const double kTolAbs = 2e-5, kTolRel = 2e-5;

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  assert_non_null(p);
  return p;
}

static float *nan_tensor(size_t n) {
  float *x = xmalloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = NAN;
  return x;
}

static float *normal_tensor(size_t n, uint64_t stream, float stddev) {
  float *x = xmalloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = (float)(stddev * rng_normal(77, stream, i));
  return x;
}

/* Largest violation of |got - want| <= abs + rel * |want| (as a ratio to
 * the allowed error; <= 1 passes). NaN counts as a failure. */
static double worst_ratio(const float *got, const float *want, size_t n, double abs_tol, double rel_tol) {
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double allowed = abs_tol + rel_tol * fabs((double)want[i]);
    const double e = fabs((double)got[i] - (double)want[i]) / allowed;
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}

/* ------------------------------------------------------------ the ring */

typedef struct Ring {
  int cp;
  pthread_barrier_t barrier;
  const float *send[MAX_CP]; /* blocking shifts: each rank's send buffer */
  size_t count[MAX_CP];
  float *mailbox[MAX_CP]; /* start/wait: copy of the send buffer at start */
  size_t mailbox_floats;
} Ring;

typedef struct RankCtx {
  Ring *ring;
  int rank;
  int failures; /* protocol violations seen by this rank */
  int shifts;   /* completed shifts */
  /* the shift in flight (start/wait) */
  int in_flight;
  const float *pending_send;
  float *pending_recv;
  size_t pending_count;
} RankCtx;

static int prev_rank(const RankCtx *c) { return (c->rank - 1 + c->ring->cp) % c->ring->cp; }

static void shared_shift(void *ctx, const float *send, float *recv, size_t count) {
  RankCtx *c = ctx;
  Ring *r = c->ring;
  r->send[c->rank] = send;
  r->count[c->rank] = count;
  pthread_barrier_wait(&r->barrier);
  const int p = prev_rank(c);
  if (r->count[p] != count)
    c->failures++;
  else
    memcpy(recv, r->send[p], count * sizeof(float));
  pthread_barrier_wait(&r->barrier); /* nobody reuses a send buffer before it is read */
  c->shifts++;
}

/* Start snapshots the send buffer (so filling it after start would be
 * caught) and poisons the receive buffer (so reading it before wait would
 * be caught); wait delivers and checks the send buffer was left alone. */
static void shared_shift_start(void *ctx, const float *send, float *recv, size_t count) {
  RankCtx *c = ctx;
  Ring *r = c->ring;
  if (c->in_flight || count > r->mailbox_floats) {
    c->failures++;
    return;
  }
  memcpy(r->mailbox[c->rank], send, count * sizeof(float));
  r->count[c->rank] = count;
  for (size_t i = 0; i < count; i++) recv[i] = NAN;
  c->in_flight = 1;
  c->pending_send = send;
  c->pending_recv = recv;
  c->pending_count = count;
}

static void shared_shift_wait(void *ctx) {
  RankCtx *c = ctx;
  Ring *r = c->ring;
  if (!c->in_flight) c->failures++;
  pthread_barrier_wait(&r->barrier);
  const int p = prev_rank(c);
  if (c->in_flight) {
    if (r->count[p] != c->pending_count)
      c->failures++;
    else
      memcpy(c->pending_recv, r->mailbox[p], c->pending_count * sizeof(float));
    if (memcmp(c->pending_send, r->mailbox[c->rank], c->pending_count * sizeof(float)) != 0) c->failures++;
  }
  pthread_barrier_wait(&r->barrier);
  c->in_flight = 0;
  c->shifts++;
}

/* ------------------------------------------------------------ one CP run */

typedef struct Local {
  float *q, *k, *v, *dout;           /* inputs: this rank's rows */
  float *out, *lse, *dq, *dk, *dv;   /* results */
  void *workspace;
} Local;

typedef struct RankJob {
  RankCtx ctx;
  Local *loc;
  int T_local, cp, overlap;
  int rc_fwd, rc_bwd;
  int fwd_shifts; /* shifts made by the forward */
  Error err;
} RankJob;

static void *rank_main(void *arg) {
  RankJob *j = arg;
  Local *l = j->loc;
  const CpCommOps ops = {&j->ctx, shared_shift, j->overlap ? shared_shift_start : NULL,
                         j->overlap ? shared_shift_wait : NULL, NULL};
  j->rc_fwd = cp_attention_forward(l->out, l->lse, l->q, l->k, l->v, B_, j->T_local, HQ, HKV, HD, j->cp,
                                   j->ctx.rank, l->workspace, &ops, &j->err);
  j->fwd_shifts = j->ctx.shifts;
  if (j->rc_fwd) return NULL;
  j->rc_bwd = cp_attention_backward(l->dq, l->dk, l->dv, l->dout, l->out, l->lse, l->q, l->k, l->v, B_, j->T_local,
                                    HQ, HKV, HD, j->cp, j->ctx.rank, l->workspace, &ops, &j->err);
  return NULL;
}

/* The rank threads live as long as the process: the attention kernels keep
 * a per-thread scratch buffer for the thread's lifetime (never freed), so a
 * thread that exited would leave it behind for LeakSanitizer to report. The
 * pool starts MAX_CP threads once and parks them between runs. */
typedef struct Pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started; /* threads running */
  unsigned long generation; /* bumped per run */
  int active, done;         /* ranks in the current run; ranks finished */
  RankJob *jobs;
} Pool;

static Pool g_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL};

static void *pool_worker(void *arg) {
  const int me = (int)(intptr_t)arg;
  unsigned long seen = 0;
  pthread_mutex_lock(&g_pool.mu);
  for (;;) {
    while (g_pool.generation == seen) pthread_cond_wait(&g_pool.cv, &g_pool.mu);
    seen = g_pool.generation;
    if (me >= g_pool.active) continue;
    RankJob *job = &g_pool.jobs[me];
    pthread_mutex_unlock(&g_pool.mu);
    rank_main(job);
    pthread_mutex_lock(&g_pool.mu);
    g_pool.done++;
    pthread_cond_broadcast(&g_pool.cv);
  }
  return NULL;
}

/* Runs jobs[0 .. cp) on cp pool threads (ranks run concurrently: the ring
 * needs all of them at its barriers) and waits for all. */
static void pool_run(RankJob *jobs, int cp) {
  pthread_mutex_lock(&g_pool.mu);
  if (g_pool.started < MAX_CP) {
    for (int i = g_pool.started; i < MAX_CP; i++) {
      pthread_t t;
      if (pthread_create(&t, NULL, pool_worker, (void *)(intptr_t)i) != 0) {
        pthread_mutex_unlock(&g_pool.mu);
        fail_msg("cannot start rank thread %d", i);
      }
      pthread_detach(t);
      g_pool.started++;
    }
  }
  g_pool.jobs = jobs;
  g_pool.active = cp;
  g_pool.done = 0;
  g_pool.generation++;
  pthread_cond_broadcast(&g_pool.cv);
  while (g_pool.done < cp) pthread_cond_wait(&g_pool.cv, &g_pool.mu);
  pthread_mutex_unlock(&g_pool.mu);
}

typedef struct Full {
  float *q, *k, *v, *dout;
  float *out, *lse, *dq, *dk, *dv;
} Full;

static void full_free(Full *f) {
  free(f->q), free(f->k), free(f->v), free(f->dout);
  free(f->out), free(f->lse), free(f->dq), free(f->dk), free(f->dv);
}

/* Splits the inputs over `cp` threaded ranks, runs forward and backward and
 * gathers the results into `got` (inputs shared with `in`). */
static void run_cp(Full *got, const Full *in, int T, int cp, int overlap) {
  const int T_local = T / cp;
  const size_t nq = (size_t)B_ * T * HQ * HD, nkv = (size_t)B_ * T * HKV * HD, nlse = (size_t)B_ * HQ * T;
  const size_t lq = nq / cp, lkv = nkv / cp, llse = nlse / cp;
  const size_t qrow = HQ * HD * sizeof(float), kvrow = HKV * HD * sizeof(float);
  const size_t ws_bytes = cp_attention_workspace_bytes(B_, T_local, HQ, HKV, HD);
  assert_int_equal(cp_check_split(T, cp, NULL), 0);

  Ring ring = {.cp = cp, .mailbox_floats = 4 * lkv};
  assert_int_equal(pthread_barrier_init(&ring.barrier, NULL, (unsigned)cp), 0);
  Local loc[MAX_CP];
  RankJob job[MAX_CP];
  for (int r = 0; r < cp; r++) {
    Local *l = &loc[r];
    l->q = xmalloc(lq * sizeof(float)), l->k = xmalloc(lkv * sizeof(float));
    l->v = xmalloc(lkv * sizeof(float)), l->dout = xmalloc(lq * sizeof(float));
    cp_split_rows(l->q, in->q, B_, T, qrow, cp, r);
    cp_split_rows(l->k, in->k, B_, T, kvrow, cp, r);
    cp_split_rows(l->v, in->v, B_, T, kvrow, cp, r);
    cp_split_rows(l->dout, in->dout, B_, T, qrow, cp, r);
    /* NaN everywhere the code must write before reading */
    l->out = nan_tensor(lq), l->lse = nan_tensor(llse);
    l->dq = nan_tensor(lq), l->dk = nan_tensor(lkv), l->dv = nan_tensor(lkv);
    l->workspace = xmalloc(ws_bytes);
    memset(l->workspace, 0xff, ws_bytes);
    ring.mailbox[r] = xmalloc(ring.mailbox_floats * sizeof(float));
    job[r] = (RankJob){.ctx = {.ring = &ring, .rank = r}, .loc = l, .T_local = T_local, .cp = cp, .overlap = overlap};
  }
  pool_run(job, cp);
  pthread_barrier_destroy(&ring.barrier);

  got->out = nan_tensor(nq), got->lse = nan_tensor(nlse);
  got->dq = nan_tensor(nq), got->dk = nan_tensor(nkv), got->dv = nan_tensor(nkv);
  for (int r = 0; r < cp; r++) {
    RankJob *j = &job[r];
    if (j->rc_fwd || j->rc_bwd) fail_msg("rank %d: %s", r, j->err.msg);
    assert_int_equal(j->ctx.failures, 0);
    assert_int_equal(j->ctx.in_flight, 0);
    /* documented traffic: cp-1 K/V shifts forward; backward cp-1 K/V and cp
     * dK/dV shifts with start/wait, cp combined ones with ring_shift; none
     * at cp = 1 */
    assert_int_equal(j->fwd_shifts, cp - 1);
    assert_int_equal(j->ctx.shifts - j->fwd_shifts, cp == 1 ? 0 : overlap ? 2 * cp - 1 : cp);
    Local *l = &loc[r];
    cp_unsplit_rows(got->out, l->out, B_, T, qrow, cp, r);
    cp_unsplit_rows(got->lse, l->lse, B_ * HQ, T, sizeof(float), cp, r);
    cp_unsplit_rows(got->dq, l->dq, B_, T, qrow, cp, r);
    cp_unsplit_rows(got->dk, l->dk, B_, T, kvrow, cp, r);
    cp_unsplit_rows(got->dv, l->dv, B_, T, kvrow, cp, r);
    free(l->q), free(l->k), free(l->v), free(l->dout);
    free(l->out), free(l->lse), free(l->dq), free(l->dk), free(l->dv), free(l->workspace);
    free(ring.mailbox[r]);
  }
}

static Full make_inputs(int T, uint64_t stream) {
  const size_t nq = (size_t)B_ * T * HQ * HD, nkv = (size_t)B_ * T * HKV * HD;
  /* q scaled up so the softmax is peaked and the merge's rescaling matters */
  Full f = {.q = normal_tensor(nq, stream * 4, 1.5f), .k = normal_tensor(nkv, stream * 4 + 1, 1.0f),
            .v = normal_tensor(nkv, stream * 4 + 2, 1.0f), .dout = normal_tensor(nq, stream * 4 + 3, 1.0f)};
  return f;
}

static void check_against_one_rank(int T, int cp, int overlap) {
  const size_t nq = (size_t)B_ * T * HQ * HD, nkv = (size_t)B_ * T * HKV * HD, nlse = (size_t)B_ * HQ * T;
  Full in = make_inputs(T, (uint64_t)(T * 16 + cp));
  Full want = {0};
  want.out = xmalloc(nq * sizeof(float)), want.lse = xmalloc(nlse * sizeof(float));
  want.dq = xmalloc(nq * sizeof(float)), want.dk = xmalloc(nkv * sizeof(float)), want.dv = xmalloc(nkv * sizeof(float));
  attention_forward(want.out, want.lse, in.q, in.k, in.v, B_, T, HQ, HKV, HD);
  attention_backward(want.dq, want.dk, want.dv, in.dout, want.out, want.lse, in.q, in.k, in.v, B_, T, HQ, HKV, HD);

  Full got = {0};
  run_cp(&got, &in, T, cp, overlap);
  const double r_out = worst_ratio(got.out, want.out, nq, kTolAbs, kTolRel);
  const double r_lse = worst_ratio(got.lse, want.lse, nlse, kTolAbs, kTolRel);
  const double r_dq = worst_ratio(got.dq, want.dq, nq, kTolAbs, kTolRel);
  const double r_dk = worst_ratio(got.dk, want.dk, nkv, kTolAbs, kTolRel);
  const double r_dv = worst_ratio(got.dv, want.dv, nkv, kTolAbs, kTolRel);
  printf("  cp=%d T=%d %-10s error/tolerance: out %.3f lse %.3f dq %.3f dk %.3f dv %.3f\n", cp, T,
         overlap ? "start/wait" : "blocking", r_out, r_lse, r_dq, r_dk, r_dv);
  assert_true(r_out <= 1.0);
  assert_true(r_lse <= 1.0);
  assert_true(r_dq <= 1.0);
  assert_true(r_dk <= 1.0);
  assert_true(r_dv <= 1.0);
  full_free(&in), full_free(&want);
  free(got.out), free(got.lse), free(got.dq), free(got.dk), free(got.dv);
}

static void test_cp2_matches_one_rank(void **state) {
  (void)state;
  check_against_one_rank(16, 2, 0);
  check_against_one_rank(32, 2, 0);
  check_against_one_rank(16, 2, 1);
  check_against_one_rank(32, 2, 1);
}

static void test_cp4_matches_one_rank(void **state) {
  (void)state;
  check_against_one_rank(16, 4, 0);
  check_against_one_rank(32, 4, 0);
  check_against_one_rank(16, 4, 1);
  check_against_one_rank(32, 4, 1);
}

/* cp = 1 is the plain kernel; cp = 8 with T = 16 has one-token chunks. */
static void test_cp_edge_sizes(void **state) {
  (void)state;
  check_against_one_rank(16, 1, 0);
  check_against_one_rank(16, 8, 0);
  check_against_one_rank(16, 8, 1);
}

/* ------------------------------------------------------------ double reference */

/* L = sum(out * w) of causal GQA attention over the whole sequence, in
 * double; also its out and lse when asked. */
static double loss_double(const double *q, const double *k, const double *v, const double *w, int T, double *out,
                          double *lse) {
  const int G = HQ / HKV;
  const double scale = 1.0 / sqrt((double)HD);
  double L = 0.0, s[64];
  for (int b = 0; b < B_; b++)
    for (int h = 0; h < HQ; h++)
      for (int t = 0; t < T; t++) {
        const double *qr = q + (((size_t)b * T + t) * HQ + h) * HD;
        double m = -INFINITY;
        for (int j = 0; j <= t; j++) {
          const double *kr = k + (((size_t)b * T + j) * HKV + h / G) * HD;
          double d = 0.0;
          for (int e = 0; e < HD; e++) d += qr[e] * kr[e];
          s[j] = d * scale;
          if (s[j] > m) m = s[j];
        }
        double sum = 0.0;
        for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - m));
        const size_t orow = (((size_t)b * T + t) * HQ + h) * HD;
        for (int e = 0; e < HD; e++) {
          double o = 0.0;
          for (int j = 0; j <= t; j++) o += s[j] * v[(((size_t)b * T + j) * HKV + h / G) * HD + e];
          o /= sum;
          if (out) out[orow + e] = o;
          L += o * w[orow + e];
        }
        if (lse) lse[((size_t)b * HQ + h) * T + t] = m + log(sum);
      }
  return L;
}

static double *to_double(const float *x, size_t n) {
  double *d = xmalloc(n * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}

static double worst_ratio_double(const float *got, const double *want, size_t n, double abs_tol, double rel_tol) {
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double e = fabs((double)got[i] - want[i]) / (abs_tol + rel_tol * fabs(want[i]));
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  return worst;
}

/* Central differences of every input element; h = 1e-5 in double leaves
 * truncation ~1e-10, far below the fp32 CP result's own error. */
static double *fd_grad(double *x, size_t n, const double *q, const double *k, const double *v, const double *w,
                       int T) {
  const double h = 1e-5;
  double *g = xmalloc(n * sizeof *g);
  for (size_t i = 0; i < n; i++) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss_double(q, k, v, w, T, NULL, NULL);
    x[i] = x0 - h;
    const double lm = loss_double(q, k, v, w, T, NULL, NULL);
    x[i] = x0;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

static void test_cp_gradients_match_finite_differences(void **state) {
  (void)state;
  const int T = 16, cp = 2;
  const size_t nq = (size_t)B_ * T * HQ * HD, nkv = (size_t)B_ * T * HKV * HD, nlse = (size_t)B_ * HQ * T;
  Full in = make_inputs(T, 999);
  Full got = {0};
  run_cp(&got, &in, T, cp, 1);

  double *q = to_double(in.q, nq), *k = to_double(in.k, nkv), *v = to_double(in.v, nkv), *w = to_double(in.dout, nq);
  double *out = xmalloc(nq * sizeof *out), *lse = xmalloc(nlse * sizeof *lse);
  loss_double(q, k, v, w, T, out, lse);
  double *gq = fd_grad(q, nq, q, k, v, w, T), *gk = fd_grad(k, nkv, q, k, v, w, T);
  double *gv = fd_grad(v, nkv, q, k, v, w, T);
  /* fp32 against exact; gradients are sums of O(T) fp32 terms, hence 1e-4 */
  const double r_out = worst_ratio_double(got.out, out, nq, 1e-5, 1e-5);
  const double r_lse = worst_ratio_double(got.lse, lse, nlse, 1e-5, 1e-5);
  const double r_dq = worst_ratio_double(got.dq, gq, nq, 1e-4, 1e-4);
  const double r_dk = worst_ratio_double(got.dk, gk, nkv, 1e-4, 1e-4);
  const double r_dv = worst_ratio_double(got.dv, gv, nkv, 1e-4, 1e-4);
  printf("  vs double + finite differences, error/tolerance: out %.3f lse %.3f dq %.3f dk %.3f dv %.3f\n", r_out,
         r_lse, r_dq, r_dk, r_dv);
  assert_true(r_out <= 1.0);
  assert_true(r_lse <= 1.0);
  assert_true(r_dq <= 1.0);
  assert_true(r_dk <= 1.0);
  assert_true(r_dv <= 1.0);
  free(q), free(k), free(v), free(w), free(out), free(lse), free(gq), free(gk), free(gv);
  full_free(&in);
  free(got.out), free(got.lse), free(got.dq), free(got.dk), free(got.dv);
}

/* ------------------------------------------------------------ split and balance */

static void test_split_round_trips(void **state) {
  (void)state;
  const int outer = 3, T = 24, row = 5;
  const size_t n = (size_t)outer * T * row;
  int32_t *full = xmalloc(n * sizeof *full), *back = xmalloc(n * sizeof *back);
  for (size_t i = 0; i < n; i++) full[i] = (int32_t)i;
  for (int cp = 1; cp <= 6; cp++) {
    if (T % (2 * cp)) continue;
    const int T_local = T / cp, C = T / (2 * cp);
    int32_t *local = xmalloc(n / cp * sizeof *local);
    int pos[24];
    for (size_t i = 0; i < n; i++) back[i] = -1;
    for (int r = 0; r < cp; r++) {
      cp_split_rows(local, full, outer, T, row * sizeof(int32_t), cp, r);
      cp_local_positions(pos, T, cp, r);
      /* local row t of sequence o is global row pos[t] of that sequence */
      for (int o = 0; o < outer; o++)
        for (int t = 0; t < T_local; t++)
          for (int e = 0; e < row; e++)
            assert_int_equal(local[((size_t)o * T_local + t) * row + e], full[((size_t)o * T + pos[t]) * row + e]);
      assert_int_equal(pos[0], r * C);
      assert_int_equal(pos[C], (2 * cp - 1 - r) * C);
      cp_unsplit_rows(back, local, outer, T, row * sizeof(int32_t), cp, r);
    }
    assert_memory_equal(back, full, n * sizeof *full); /* every row written back, once */
    free(local);
  }
  free(full), free(back);
}

/* Pairs (query of rank r, key of the block held at each ring step) with
 * key position <= query position: the causal work the ring really does. */
static long long ring_pairs(int T, int cp, int r) {
  const int T_local = T / cp;
  int qpos[256], kpos[256];
  cp_local_positions(qpos, T, cp, r);
  long long pairs = 0;
  for (int step = 0; step < cp; step++) {
    cp_local_positions(kpos, T, cp, (r - step + cp) % cp);
    for (int i = 0; i < T_local; i++)
      for (int j = 0; j < T_local; j++) pairs += kpos[j] <= qpos[i];
  }
  return pairs;
}

static void test_causal_work_is_balanced(void **state) {
  (void)state;
  for (int cp = 1; cp <= 8; cp++) {
    const int T = 2 * cp * 5; /* chunks of 5 tokens */
    int pos[256], seen[256] = {0};
    long long total = 0;
    for (int r = 0; r < cp; r++) {
      cp_local_positions(pos, T, cp, r);
      for (int t = 0; t < T / cp; t++) {
        if (t) assert_true(pos[t] > pos[t - 1]); /* the kernels need non-decreasing */
        seen[pos[t]]++;
      }
      const long long pairs = ring_pairs(T, cp, r);
      assert_true(pairs == cp_rank_causal_pairs(T, cp, r));
      assert_true(pairs == ring_pairs(T, cp, 0));
      total += pairs;
    }
    for (int t = 0; t < T; t++) assert_int_equal(seen[t], 1);
    assert_true(total == (long long)T * (T + 1) / 2); /* every causal pair exactly once */
    if (cp > 1) {
      /* the contiguous split this replaces: rank r holds [r*T/cp, (r+1)*T/cp) */
      const long long L = T / cp, first = L * (L + 1) / 2, last = (cp - 1) * L * L + L * (L + 1) / 2;
      assert_true(last > first);
    }
  }
}

/* ------------------------------------------------------------ errors */

static void noop_shift(void *ctx, const float *send, float *recv, size_t count) {
  (void)ctx, (void)send, (void)recv, (void)count;
}
static void noop_start(void *ctx, const float *send, float *recv, size_t count) {
  (void)ctx, (void)send, (void)recv, (void)count;
}

static void test_bad_arguments_are_rejected(void **state) {
  (void)state;
  Error err = {0};
  assert_int_equal(cp_check_split(12, 4, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "2 * cp_size = 8"));
  assert_int_equal(cp_check_split(16, 0, &err), ERR_CONFIG);
  assert_int_equal(cp_check_split(16, 4, &err), ERR_OK);

  float buf[64] = {0};
  char ws[4096];
  const CpCommOps ok = {NULL, noop_shift, NULL, NULL, NULL}, half = {NULL, noop_shift, noop_start, NULL, NULL};
  /* odd T_local: a rank holds two equal chunks */
  assert_int_equal(cp_attention_forward(buf, buf, buf, buf, buf, 1, 3, 1, 1, 1, 2, 0, ws, &ok, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "T_local=3"));
  /* rank outside the group */
  assert_int_equal(cp_attention_forward(buf, buf, buf, buf, buf, 1, 2, 1, 1, 1, 2, 2, ws, &ok, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "cp_rank 2"));
  /* Hq not a multiple of Hkv */
  assert_int_equal(cp_attention_backward(buf, buf, buf, buf, buf, buf, buf, buf, buf, 1, 2, 3, 2, 1, 2, 0, ws, &ok,
                                         &err),
                   ERR_ARG);
  /* start without wait; no ops at all */
  assert_int_equal(cp_attention_forward(buf, buf, buf, buf, buf, 1, 2, 1, 1, 1, 2, 0, ws, &half, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "together"));
  assert_int_equal(cp_attention_backward(buf, buf, buf, buf, buf, buf, buf, buf, buf, 1, 2, 1, 1, 1, 2, 0, ws, NULL,
                                         &err),
                   ERR_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cp2_matches_one_rank),
      cmocka_unit_test(test_cp4_matches_one_rank),
      cmocka_unit_test(test_cp_edge_sizes),
      cmocka_unit_test(test_cp_gradients_match_finite_differences),
      cmocka_unit_test(test_split_round_trips),
      cmocka_unit_test(test_causal_work_is_balanced),
      cmocka_unit_test(test_bad_arguments_are_rejected),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
