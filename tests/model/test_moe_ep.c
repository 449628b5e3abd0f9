/* The expert-parallel MoE dispatchers (moe_dispatch_ep.h) against the
 * one-rank layer. Ranks are threads of this process; the collectives of
 * MoeCommOps are shared-buffer implementations around a barrier. For each
 * layout (EP, ETP, EDP replicas, ranks sharing a micro-batch) and both
 * dispatchers:
 *  - dropless: every rank's outputs and dx equal moe_layer_forward /
 *    moe_layer_backward over its whole micro-batch, its aux and z losses
 *    equal that micro-batch's, expert gradients summed over EDP replicas
 *    equal the one-rank shard, router and shared-expert gradients summed
 *    over all ranks equal the one-rank sums;
 *  - dropping: the dropped (token, choice) pairs of each rank equal a plain
 *    capacity rule on that rank's tokens alone (both policies), results
 *    equal the one-rank layer run on each rank's tokens, and padding to
 *    capacity changes nothing but shapes;
 *  - the two dispatchers agree with each other;
 *  - central differences of (sum dout . out + each micro-batch's aux and z)
 *    along random directions in inputs and all parameters equal the
 *    returned gradients after the runtime's sums (router and shared over
 *    all ranks, experts over EDP).
 * Tolerance: |a - b| <= 1e-5 * max |reference| per array (fp32; the
 * parallel path sums expert contributions and ETP partial sums in another
 * order). */
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
#include <omp.h>

#include "base/rng.h"
#include "model/moe.h"
#include "model/moe_dispatch_ep.h"

enum { MAX_RANKS = 8 };
static const double TOLERANCE = 1e-5;

static void *zalloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  assert_non_null(p);
  return p;
}

static float *random_array(size_t n, float std, uint64_t stream) {
  float *p = zalloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = (float)(std * rng_normal(7, stream, i));
  return p;
}

/* ------------------------------------------------ the threaded "world" */

/* Rank r: micro-batch r / seq, position r % seq in it; MoE grid
 * etp-ep-edp: etp index r % etp, ep index (r / etp) % ep. */
typedef struct World {
  int size, seq, ep, etp;
  pthread_barrier_t barrier;
  const void *send[MAX_RANKS];
  const int64_t *rows[MAX_RANKS];
} World;

typedef struct RankComm {
  World *w;
  int rank;
} RankComm;

/* Members of rank's group in member order; returns the count, *me = rank's index. */
static int group_members(const World *w, int rank, MoeGroup g, int *members, int *me) {
  const int etp_i = rank % w->etp, ep_i = (rank / w->etp) % w->ep, edp_i = rank / (w->etp * w->ep);
  int n = 0;
  if (g == MOE_GROUP_EP) {
    for (int q = 0; q < w->ep; q++) members[n++] = etp_i + w->etp * (q + w->ep * edp_i);
    *me = ep_i;
  } else if (g == MOE_GROUP_ETP) {
    for (int i = 0; i < w->etp; i++) members[n++] = i + w->etp * (ep_i + w->ep * edp_i);
    *me = etp_i;
  } else {
    for (int i = 0; i < w->seq; i++) members[n++] = rank / w->seq * w->seq + i;
    *me = rank % w->seq;
  }
  return n;
}

/* Every collective: post this rank's buffers, wait, read the peers', wait
 * again so nobody reuses a posted buffer while it is being read. */
static void post(RankComm *rc, const void *send, const int64_t *rows) {
  rc->w->send[rc->rank] = send;
  rc->w->rows[rc->rank] = rows;
  pthread_barrier_wait(&rc->w->barrier);
}

static void done(RankComm *rc) { pthread_barrier_wait(&rc->w->barrier); }

static int64_t rows_before(const int64_t *rows, int i) {
  int64_t t = 0;
  for (int k = 0; k < i; k++) t += rows[k];
  return t;
}

static int t_alltoall_i64(void *ctx, MoeGroup g, const int64_t *send, int64_t *recv, int per_rank, Error *err) {
  (void)err;
  RankComm *rc = ctx;
  int m[MAX_RANKS], me, n = group_members(rc->w, rc->rank, g, m, &me);
  post(rc, send, NULL);
  for (int p = 0; p < n; p++)
    memcpy(recv + (size_t)p * per_rank, (const int64_t *)rc->w->send[m[p]] + (size_t)me * per_rank,
           (size_t)per_rank * sizeof(int64_t));
  done(rc);
  return 0;
}

static int t_alltoallv_f32(void *ctx, MoeGroup g, const float *send, const int64_t *send_rows, float *recv,
                           const int64_t *recv_rows, int row_floats, Error *err) {
  RankComm *rc = ctx;
  int m[MAX_RANKS], me, n = group_members(rc->w, rc->rank, g, m, &me);
  post(rc, send, send_rows);
  int bad = 0;
  for (int p = 0; p < n; p++) {
    const int64_t *their = rc->w->rows[m[p]];
    if (their[me] != recv_rows[p]) bad = 1;
    memcpy(recv + (size_t)rows_before(recv_rows, p) * row_floats,
           (const float *)rc->w->send[m[p]] + (size_t)rows_before(their, me) * row_floats,
           (size_t)their[me] * row_floats * sizeof(float));
  }
  done(rc);
  return bad ? error_set(err, ERR_INTERNAL, "alltoallv: receive counts disagree with the senders'") : 0;
}

static int t_allgather_i64(void *ctx, MoeGroup g, const int64_t *send, int64_t *recv, int count, Error *err) {
  (void)err;
  RankComm *rc = ctx;
  int m[MAX_RANKS], me, n = group_members(rc->w, rc->rank, g, m, &me);
  post(rc, send, NULL);
  for (int p = 0; p < n; p++)
    memcpy(recv + (size_t)p * count, rc->w->send[m[p]], (size_t)count * sizeof(int64_t));
  done(rc);
  return 0;
}

static int t_allgatherv_f32(void *ctx, MoeGroup g, const float *send, float *recv, const int64_t *rows,
                            int row_floats, Error *err) {
  (void)err;
  RankComm *rc = ctx;
  int m[MAX_RANKS], me, n = group_members(rc->w, rc->rank, g, m, &me);
  post(rc, send, NULL);
  for (int p = 0; p < n; p++)
    memcpy(recv + (size_t)rows_before(rows, p) * row_floats, rc->w->send[m[p]],
           (size_t)rows[p] * row_floats * sizeof(float));
  done(rc);
  return 0;
}

static int t_reduce_scatterv_f32(void *ctx, MoeGroup g, const float *send, float *recv, const int64_t *rows,
                                 int row_floats, Error *err) {
  (void)err;
  RankComm *rc = ctx;
  int m[MAX_RANKS], me, n = group_members(rc->w, rc->rank, g, m, &me);
  post(rc, send, NULL);
  const size_t count = (size_t)rows[me] * row_floats, at = (size_t)rows_before(rows, me) * row_floats;
  for (size_t i = 0; i < count; i++) {
    float sum = 0;
    for (int p = 0; p < n; p++) sum += ((const float *)rc->w->send[m[p]])[at + i];
    recv[i] = sum;
  }
  done(rc);
  return 0;
}

static int t_allreduce_f64(void *ctx, MoeGroup g, double *buf, size_t count, Error *err) {
  (void)err;
  RankComm *rc = ctx;
  int m[MAX_RANKS], me, n = group_members(rc->w, rc->rank, g, m, &me);
  double *sum = zalloc(count * sizeof(double));
  post(rc, buf, NULL);
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < count; i++) sum[i] += ((const double *)rc->w->send[m[p]])[i];
  done(rc); /* everyone has read buf: now it may change */
  memcpy(buf, sum, count * sizeof(double));
  free(sum);
  return 0;
}

/* ----------------------------------------------------------- the cases */

typedef struct Case {
  const char *label;
  int size, seq, ep, etp;
  int tokens[MAX_RANKS];
} Case;

typedef struct Params {
  float *router, *wgu, *wd, *sgu, *sd;
} Params;

/* Everything compared, in full (unsharded) form; token arrays in rank
 * order, which is micro-batch order. */
typedef struct Results {
  float *out, *dx;
  double aux[MAX_RANKS], z[MAX_RANKS];
  float *router, *wgu, *wd, *sgu, *sd;
  int *dropped; /* [assignments] 1 when dropped */
  int *topk;    /* [assignments] chosen expert */
} Results;

static size_t total_tokens(const Case *c) {
  size_t t = 0;
  for (int r = 0; r < c->size; r++) t += (size_t)c->tokens[r];
  return t;
}

static size_t token_offset(const Case *c, int rank) {
  size_t t = 0;
  for (int r = 0; r < rank; r++) t += (size_t)c->tokens[r];
  return t;
}

static void results_alloc(Results *res, const Case *c, const MoeSpec *s) {
  const size_t T = total_tokens(c), C = s->C, E = s->E;
  memset(res, 0, sizeof *res);
  res->out = zalloc(T * C * sizeof(float));
  res->dx = zalloc(T * C * sizeof(float));
  res->router = zalloc(E * C * sizeof(float));
  res->wgu = zalloc(E * 2 * s->Fe * C * sizeof(float));
  res->wd = zalloc(E * C * s->Fe * sizeof(float));
  res->sgu = zalloc((2 * (size_t)s->Fs * C + 1) * sizeof(float));
  res->sd = zalloc((C * (size_t)s->Fs + 1) * sizeof(float));
  res->dropped = zalloc(T * s->K * sizeof(int));
  res->topk = zalloc(T * s->K * sizeof(int));
}

static void results_free(Results *res) {
  free(res->out), free(res->dx), free(res->router), free(res->wgu), free(res->wd), free(res->sgu), free(res->sd);
  free(res->dropped), free(res->topk);
}

/* ------------------------------------------------- one-rank reference */

/* moe_layer_forward/backward over tokens [first, first + N) of the case. */
static void reference_unit(Results *res, const MoeSpec *s, const Params *w, const float *x, const float *dout,
                           size_t first, int N, double *aux, double *z) {
  const size_t rows = moe_max_rows(s, N), E = s->E, K = s->K, C = s->C;
  size_t ffn = rows * s->Fe > (size_t)N * s->Fs ? rows * s->Fe : (size_t)N * s->Fs;
  MoeLayerActs a = {0};
  MoeScratch sc = {0};
  void *ptrs[32];
  int np = 0;
#define TAKE(field, bytes) (ptrs[np++] = (field) = zalloc(bytes))
  TAKE(a.routing.logits, N * E * sizeof(float));
  TAKE(a.routing.scores, N * E * sizeof(float));
  TAKE(a.routing.lse, N * sizeof(float));
  TAKE(a.routing.topk_idx, N * K * sizeof(int));
  TAKE(a.routing.topk_w, N * K * sizeof(float));
  TAKE(a.routing.counts, E * sizeof(long));
  TAKE(a.routing.prob_sum, E * sizeof(double));
  TAKE(a.routing.aux_dq, E * sizeof(double));
  TAKE(a.perm.row_of, N * K * sizeof(int));
  TAKE(a.perm.token_of_row, rows * sizeof(int));
  TAKE(a.perm.expert_offset, (E + 1) * sizeof(int));
  TAKE(a.perm.kept, E * sizeof(int));
  TAKE(a.xp, rows * C * sizeof(float));
  TAKE(a.h, rows * 2 * s->Fe * sizeof(float));
  TAKE(a.y, rows * C * sizeof(float));
  TAKE(a.shared_h, (size_t)N * 2 * s->Fs * sizeof(float));
  TAKE(sc.a, ffn * sizeof(float));
  TAKE(sc.da, ffn * sizeof(float));
  TAKE(sc.dh, 2 * ffn * sizeof(float));
  TAKE(sc.dy, rows * C * sizeof(float));
  TAKE(sc.dxp, rows * C * sizeof(float));
  TAKE(sc.dtopk_w, N * K * sizeof(float));
  TAKE(sc.dz, N * E * sizeof(float));
  TAKE(sc.dscore, N * E * sizeof(float));
  TAKE(sc.plan, moe_plan_scratch_bytes(s, N));
#undef TAKE
  MoeLayerParams p = {w->router, w->wgu, w->wd, s->Fs ? w->sgu : NULL, s->Fs ? w->sd : NULL};
  MoeLayerGrads g = {res->router, res->wgu, res->wd, res->sgu, res->sd};
  moe_layer_forward(res->out + first * C, &a, &sc, x + first * C, &p, N, s, aux, z);
  moe_layer_backward(res->dx + first * C, &g, &sc, dout + first * C, &a, x + first * C, &p, N, s, 1.0f);
  for (size_t i = 0; i < (size_t)N * K; i++) res->dropped[first * K + i] = a.perm.row_of[i] < 0;
  for (int i = 0; i < np; i++) free(ptrs[i]);
}

/* Dropless: one unit per micro-batch. Dropping: one per rank (the
 * capacity rule is per source rank). */
static void reference(Results *res, const Case *c, const MoeSpec *s, const Params *w, const float *x,
                      const float *dout, int per_rank) {
  results_alloc(res, c, s);
  MoeSpec unpadded = *s;
  unpadded.pad_to_capacity = 0;
  const int unit = per_rank ? 1 : c->seq;
  for (int r0 = 0; r0 < c->size; r0 += unit) {
    int N = 0;
    for (int r = r0; r < r0 + unit; r++) N += c->tokens[r];
    double aux, z;
    reference_unit(res, &unpadded, w, x, dout, token_offset(c, r0), N, &aux, &z);
    for (int r = r0; r < r0 + unit; r++) res->aux[r] = aux, res->z[r] = z;
  }
}

/* ------------------------------------------------ the parallel layer */

typedef struct RankJob {
  const Case *c;
  const MoeSpec *s;
  const Params *w;
  const float *x, *dout;
  Results *res;
  World *world;
  int rank, allgather, rc;
  /* This rank's gradients, summed by the main thread after the join. */
  float *g_router, *g_sgu, *g_sd, *g_gu, *g_d;
  MoeEpLayout layout;
  Error err;
} RankJob;

/* Local gradient shard added into full-layout arrays. */
static void add_unshard(float *wgu, float *wd, const float *gu_local, const float *d_local, const MoeSpec *s,
                        const MoeEpLayout *l) {
  const int El = s->E / l->ep, Fl = s->Fe / l->etp, C = s->C, Fe = s->Fe;
  for (int le = 0; le < El; le++) {
    const int e = l->ep_rank * El + le;
    for (int half = 0; half < 2; half++)
      for (int f = 0; f < Fl; f++)
        for (int k = 0; k < C; k++)
          wgu[((size_t)e * 2 * Fe + half * Fe + l->etp_rank * Fl + f) * C + k] +=
              gu_local[((size_t)le * 2 * Fl + half * Fl + f) * C + k];
    for (int k = 0; k < C; k++)
      for (int f = 0; f < Fl; f++)
        wd[((size_t)e * C + k) * Fe + l->etp_rank * Fl + f] += d_local[((size_t)le * C + k) * Fl + f];
  }
}

static int max_tokens(const Case *c) {
  int m = 0;
  for (int r = 0; r < c->size; r++) m = c->tokens[r] > m ? c->tokens[r] : m;
  return m;
}

static void *rank_main(void *arg) {
  RankJob *job = arg;
  const Case *c = job->c;
  const MoeSpec *s = job->s;
  omp_set_num_threads(1); /* ranks are the parallelism here */
  const int r = job->rank, N = c->tokens[r], Nmax = max_tokens(c);
  const size_t C = s->C, first = token_offset(c, r);
  MoeEpLayout l = {c->ep, (r / c->etp) % c->ep, c->etp, r % c->etp};
  RankComm comm = {job->world, r};
  MoeCommOps ops = {&comm, t_alltoall_i64, t_alltoallv_f32, t_allgather_i64, t_allgatherv_f32, t_reduce_scatterv_f32,
                    t_allreduce_f64};
  const int El = s->E / l.ep, Fl = s->Fe / l.etp;
  float *gu = zalloc((size_t)El * 2 * Fl * C * sizeof(float)), *d = zalloc((size_t)El * C * Fl * sizeof(float));
  moe_ep_shard_experts(gu, d, job->w->wgu, job->w->wd, s, &l);
  MoeLayerParams p = {job->w->router, gu, d, s->Fs ? job->w->sgu : NULL, s->Fs ? job->w->sd : NULL};
  job->layout = l;
  job->g_router = zalloc((size_t)s->E * C * sizeof(float));
  job->g_sgu = zalloc((2 * (size_t)s->Fs * C + 1) * sizeof(float));
  job->g_sd = zalloc((C * s->Fs + 1) * sizeof(float));
  job->g_gu = zalloc((size_t)El * 2 * Fl * C * sizeof(float));
  job->g_d = zalloc((size_t)El * C * Fl * sizeof(float));
  MoeLayerGrads g = {job->g_router, job->g_gu, job->g_d, job->g_sgu, job->g_sd};
  /* out accumulates: start it at 1 and take 1 away afterwards. dx is
   * overwritten: start it with garbage. */
  float *out = zalloc((size_t)(N ? N : 1) * C * sizeof(float)), *dx = zalloc((size_t)(N ? N : 1) * C * sizeof(float));
  for (size_t i = 0; i < (size_t)N * C; i++) out[i] = 1.0f, dx[i] = 1e6f;
  const float *x = job->x + first * C, *dout = job->dout + first * C;
  double aux = -1, z = -1;
  void *acts_mem, *scratch_mem;
  const int *row_of, *topk;
  if (job->allgather) {
    MoeAgSizes sz = moe_ag_sizes(s, &l, Nmax);
    MoeAgActs a;
    MoeAgScratch sc;
    acts_mem = zalloc(sz.acts_bytes), scratch_mem = zalloc(sz.scratch_bytes);
    moe_ag_bind_acts(&a, acts_mem, s, &l, Nmax);
    moe_ag_bind_scratch(&sc, scratch_mem, s, &l, Nmax);
    job->rc = moe_ag_forward(out, &a, &sc, x, &p, N, s, &l, &ops, &aux, &z, &job->err);
    if (!job->rc) job->rc = moe_ag_backward(dx, &g, &sc, dout, &a, x, &p, N, s, &l, &ops, 1.0f, &job->err);
    row_of = a.perm.row_of, topk = a.routing.topk_idx;
  } else {
    MoeA2aSizes sz = moe_a2a_sizes(s, &l, Nmax);
    MoeA2aActs a;
    MoeA2aScratch sc;
    acts_mem = zalloc(sz.acts_bytes), scratch_mem = zalloc(sz.scratch_bytes);
    moe_a2a_bind_acts(&a, acts_mem, s, &l, Nmax);
    moe_a2a_bind_scratch(&sc, scratch_mem, s, &l, Nmax);
    job->rc = moe_a2a_forward(out, &a, &sc, x, &p, N, s, &l, &ops, &aux, &z, &job->err);
    if (!job->rc) job->rc = moe_a2a_backward(dx, &g, &sc, dout, &a, x, &p, N, s, &l, &ops, 1.0f, &job->err);
    row_of = a.perm.row_of, topk = a.routing.topk_idx;
  }
  /* Results go to disjoint token ranges; the summed gradients are added by
   * the main thread after the join. */
  for (size_t i = 0; i < (size_t)N * C; i++) job->res->out[first * C + i] = out[i] - 1.0f;
  memcpy(job->res->dx + first * C, dx, (size_t)N * C * sizeof(float));
  for (size_t i = 0; i < (size_t)N * s->K; i++)
    job->res->dropped[first * s->K + i] = row_of[i] < 0, job->res->topk[first * s->K + i] = topk[i];
  job->res->aux[r] = aux, job->res->z[r] = z;
  free(acts_mem), free(scratch_mem), free(out), free(dx), free(gu), free(d);
  return NULL;
}

static void run_parallel(Results *res, const Case *c, const MoeSpec *s, const Params *w, const float *x,
                         const float *dout, int allgather) {
  results_alloc(res, c, s);
  World world = {.size = c->size, .seq = c->seq, .ep = c->ep, .etp = c->etp};
  assert_int_equal(c->size % (c->ep * c->etp), 0);
  assert_int_equal(c->size % c->seq, 0);
  assert_int_equal(pthread_barrier_init(&world.barrier, NULL, (unsigned)c->size), 0);
  RankJob jobs[MAX_RANKS];
  pthread_t threads[MAX_RANKS];
  for (int r = 0; r < c->size; r++) {
    jobs[r] = (RankJob){.c = c, .s = s, .w = w, .x = x, .dout = dout, .res = res, .world = &world, .rank = r,
                        .allgather = allgather};
    assert_int_equal(pthread_create(&threads[r], NULL, rank_main, &jobs[r]), 0);
  }
  for (int r = 0; r < c->size; r++) assert_int_equal(pthread_join(threads[r], NULL), 0);
  pthread_barrier_destroy(&world.barrier);
  const size_t C = s->C;
  for (int r = 0; r < c->size; r++) {
    RankJob *j = &jobs[r];
    if (j->rc) fail_msg("%s, rank %d: %s", c->label, r, j->err.msg);
    /* What the runtime does: router and shared grads over all ranks
     * (DP x CP x TP), expert shards over EDP. */
    for (size_t i = 0; i < (size_t)s->E * C; i++) res->router[i] += j->g_router[i];
    for (size_t i = 0; i < 2 * (size_t)s->Fs * C; i++) res->sgu[i] += j->g_sgu[i];
    for (size_t i = 0; i < C * s->Fs; i++) res->sd[i] += j->g_sd[i];
    add_unshard(res->wgu, res->wd, j->g_gu, j->g_d, s, &j->layout);
    free(j->g_router), free(j->g_sgu), free(j->g_sd), free(j->g_gu), free(j->g_d);
  }
}

/* ------------------------------------------------------- comparisons */

static double compare_array(const char *what, const float *want, const float *got, size_t n) {
  double scale = 0, diff = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
  for (size_t i = 0; i < n; i++) diff = fmax(diff, fabs((double)want[i] - got[i]));
  if (!(diff <= TOLERANCE * scale)) fail_msg("%s: max |difference| %.3g, max |value| %.3g", what, diff, scale);
  return scale > 0 ? diff / scale : 0;
}

/* Returns the worst relative difference over the arrays. */
static double compare_results(const char *label, const char *against, const Results *want, const Results *got,
                              const Case *c, const MoeSpec *s) {
  const size_t T = total_tokens(c), C = s->C, E = s->E;
  char what[256];
  double worst = 0;
#define CMP(field, n)                                                          \
  do {                                                                         \
    snprintf(what, sizeof what, "%s vs %s: %s", label, against, #field);       \
    worst = fmax(worst, compare_array(what, want->field, got->field, (n)));    \
  } while (0)
  CMP(out, T * C);
  CMP(dx, T * C);
  CMP(router, E * C);
  CMP(wgu, E * 2 * s->Fe * C);
  CMP(wd, E * C * s->Fe);
  if (s->Fs) {
    CMP(sgu, 2 * (size_t)s->Fs * C);
    CMP(sd, C * s->Fs);
  }
#undef CMP
  for (int r = 0; r < c->size; r++) {
    if (fabs(want->aux[r] - got->aux[r]) > 1e-9 + 1e-6 * fabs(want->aux[r]))
      fail_msg("%s vs %s: rank %d aux loss %.10g, expected %.10g", label, against, r, got->aux[r], want->aux[r]);
    if (fabs(want->z[r] - got->z[r]) > 1e-9 + 1e-6 * fabs(want->z[r]))
      fail_msg("%s vs %s: rank %d z loss %.10g, expected %.10g", label, against, r, got->z[r], want->z[r]);
  }
  for (size_t a = 0; a < T * s->K; a++)
    if (want->dropped[a] != got->dropped[a])
      fail_msg("%s vs %s: assignment %zu dropped %d, expected %d", label, against, a, got->dropped[a],
               want->dropped[a]);
  return worst;
}

/* The capacity rule of docs/moe-semantics.md on one rank's tokens, plainly:
 * dropped[a] for its N*K assignments. */
static long plain_capacity_rule(const MoeSpec *s, int N, const int *idx, const float *w, int *dropped) {
  const int K = s->K, E = s->E;
  const int cap = (int)ceil((double)N * K * (double)s->capacity_factor / E);
  long count = 0;
  for (int a = 0; a < N * K; a++) dropped[a] = 1;
  for (int e = 0; e < E; e++) {
    for (int taken = 0; taken < cap; taken++) {
      int best = -1;
      for (int a = 0; a < N * K; a++) {
        if (idx[a] != e || !dropped[a]) continue;
        if (best < 0 || (s->policy == DROP_POLICY_PROBS && w[a] > w[best])) best = a;
        if (s->policy == DROP_POLICY_POSITION) break; /* the first not yet kept */
      }
      if (best < 0) break;
      dropped[best] = 0;
    }
  }
  for (int a = 0; a < N * K; a++) count += dropped[a];
  return count;
}

/* Routes each rank's tokens as the dispatcher's source rank does and
 * checks the kept set of a run against the plain rule. */
static long check_dropped_sets(const Results *got, const Case *c, const MoeSpec *s, const Params *w, const float *x) {
  long total = 0;
  const size_t E = s->E, K = s->K;
  for (int r = 0; r < c->size; r++) {
    const int N = c->tokens[r];
    const size_t first = token_offset(c, r);
    MoeRouting rt = {0};
    rt.logits = zalloc(N * E * sizeof(float));
    rt.scores = zalloc(N * E * sizeof(float));
    rt.lse = zalloc(N * sizeof(float) + 1);
    rt.topk_idx = zalloc(N * K * sizeof(int));
    rt.topk_w = zalloc(N * K * sizeof(float));
    rt.counts = zalloc(E * sizeof(long));
    rt.prob_sum = zalloc(E * sizeof(double));
    rt.aux_dq = zalloc(E * sizeof(double));
    moe_router_forward(&rt, x + first * s->C, w->router, N, s);
    int *dropped = zalloc(N * K * sizeof(int));
    total += plain_capacity_rule(s, N, rt.topk_idx, rt.topk_w, dropped);
    for (size_t a = 0; a < (size_t)N * K; a++)
      if (dropped[a] != got->dropped[first * K + a])
        fail_msg("%s: rank %d assignment %zu: dropped %d, the capacity rule says %d", c->label, r, a,
                 got->dropped[first * K + a], dropped[a]);
    free(dropped), free(rt.logits), free(rt.scores), free(rt.lse), free(rt.topk_idx), free(rt.topk_w);
    free(rt.counts), free(rt.prob_sum), free(rt.aux_dq);
  }
  return total;
}

/* --------------------------------------------------------------- tests */

static void tiny_spec(MoeSpec *s) {
  memset(s, 0, sizeof *s);
  s->C = 24;
  s->E = 8;
  s->K = 2;
  s->Fe = 16;
  s->score = ROUTER_SCORE_SOFTMAX;
  s->order = ROUTER_SOFTMAX_THEN_TOPK;
  s->norm_topk_prob = 1;
  s->scaling = 1.0f;
  s->aux_coeff = 0.01f;
  s->z_coeff = 0.001f;
}

/* One case: reference, both dispatchers, all compared. */
static void check_case(const Case *c, const MoeSpec *s, int dropping) {
  const size_t T = total_tokens(c), C = s->C, E = s->E;
  Params w;
  w.router = random_array(E * C, 0.5f, 1);
  w.wgu = random_array(E * 2 * s->Fe * C, 0.3f, 2);
  w.wd = random_array(E * C * s->Fe, 0.3f, 3);
  w.sgu = random_array(2 * (size_t)s->Fs * C + 1, 0.3f, 4);
  w.sd = random_array(C * s->Fs + 1, 0.3f, 5);
  float *x = random_array(T * C, 1.0f, 6), *dout = random_array(T * C, 1.0f, 7);
  Results ref, run[2];
  reference(&ref, c, s, &w, x, dout, dropping);
  double worst[2];
  long dropped = 0;
  for (int ag = 0; ag < 2; ag++) {
    run_parallel(&run[ag], c, s, &w, x, dout, ag);
    worst[ag] = compare_results(c->label, ag ? "all-gather vs one rank" : "all-to-all vs one rank", &ref, &run[ag],
                                c, s);
    if (dropping) dropped = check_dropped_sets(&run[ag], c, s, &w, x);
  }
  compare_results(c->label, "all-to-all vs all-gather", &run[0], &run[1], c, s);
  if (dropping) assert_true(dropped > 0); /* the rule was exercised */
  printf("  %-46s max rel. difference a2a %.2g, all-gather %.2g, dropped %ld of %zu\n", c->label, worst[0], worst[1],
         dropped, T * s->K);
  results_free(&ref), results_free(&run[0]), results_free(&run[1]);
  free(w.router), free(w.wgu), free(w.wd), free(w.sgu), free(w.sd), free(x), free(dout);
}

static const Case LAYOUTS[] = {
    {"EP2, 2 ranks share the micro-batch", 2, 2, 2, 1, {13, 19}},
    {"EP2, one micro-batch per rank", 2, 1, 2, 1, {15, 11}},
    {"EP4, 4 ranks share the micro-batch", 4, 4, 4, 1, {9, 17, 12, 14}},
    {"ETP2 only", 2, 2, 1, 2, {10, 16}},
    {"EP2xETP2, 4 ranks share the micro-batch", 4, 4, 2, 2, {11, 8, 15, 12}},
    {"EP2xETP2, 2 micro-batches of 2 ranks", 4, 2, 2, 2, {14, 9, 12, 16}},
    {"EP4xETP1, 2 micro-batches of 2 ranks", 4, 2, 4, 1, {12, 12, 7, 18}},
    {"EP2xETP2xEDP2, 4 micro-batches of 2 ranks", 8, 2, 2, 2, {9, 13, 11, 10, 14, 8, 12, 10}},
    {"EP4, a rank without tokens", 4, 4, 4, 1, {0, 13, 9, 11}},
};
enum { NUM_LAYOUTS = sizeof LAYOUTS / sizeof LAYOUTS[0] };

static void test_dropless_matches_one_rank(void **state) {
  (void)state;
  for (int i = 0; i < NUM_LAYOUTS; i++) {
    MoeSpec s;
    tiny_spec(&s);
    /* Vary the router and the shared expert across layouts. */
    if (i % 3 == 1) s.score = ROUTER_SCORE_SIGMOID;
    if (i % 3 == 2) s.order = ROUTER_TOPK_THEN_SOFTMAX;
    if (i % 2 == 1) s.Fs = 12;
    if (i == 4) s.C = 32;
    check_case(&LAYOUTS[i], &s, 0);
  }
}

static void test_router_and_shared_variants(void **state) {
  (void)state;
  const Case *c = &LAYOUTS[5]; /* EP2xETP2 over two micro-batches */
  for (int v = 0; v < 4; v++) {
    MoeSpec s;
    tiny_spec(&s);
    s.score = v & 1 ? ROUTER_SCORE_SIGMOID : ROUTER_SCORE_SOFTMAX;
    s.Fs = v & 2 ? 16 : 0;
    s.scaling = 1.5f;
    s.norm_topk_prob = 0;
    check_case(c, &s, 0);
  }
}

static void test_dropping_is_local_per_rank(void **state) {
  (void)state;
  const Case *layouts[] = {&LAYOUTS[4], &LAYOUTS[6]};
  for (int li = 0; li < 2; li++)
    for (int policy = 0; policy < 2; policy++)
      for (int pad = 0; pad < 2; pad++) {
        MoeSpec s;
        tiny_spec(&s);
        /* The losses use the whole micro-batch's statistics while the
         * reference runs per rank: leave them out here (the dropless test
         * covers them; they do not depend on dropping). */
        s.aux_coeff = 0, s.z_coeff = 0;
        s.capacity_factor = policy ? 0.75f : 1.0f;
        s.policy = policy ? DROP_POLICY_POSITION : DROP_POLICY_PROBS;
        s.pad_to_capacity = pad;
        s.Fs = pad ? 8 : 0;
        char label[160];
        snprintf(label, sizeof label, "%s, cap %.2f %s%s", layouts[li]->label, s.capacity_factor,
                 policy ? "position" : "probs", pad ? ", padded" : "");
        Case c = *layouts[li];
        c.label = label;
        check_case(&c, &s, 1);
      }
}

/* The objective of a parallel run: sum over tokens of dout . out, plus
 * each micro-batch's aux and z losses once. */
static double parallel_objective(Results *res, const Case *c, const MoeSpec *s, const Params *w, const float *x,
                                 const float *dout, int allgather) {
  run_parallel(res, c, s, w, x, dout, allgather);
  const size_t n = total_tokens(c) * s->C;
  double L = 0;
  for (size_t i = 0; i < n; i++) L += (double)dout[i] * res->out[i];
  for (int r = 0; r < c->size; r += c->seq) L += res->aux[r] + res->z[r];
  return L;
}

static void axpy(float *dst, const float *a, const float *v, float t, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = a[i] + t * v[i];
}

/* Central differences of the objective along random directions in
 * (x, all parameters) against the gradients the dispatchers return, after
 * the runtime's sums. Directions that change a routing choice between the
 * two evaluations are skipped (not differentiable there). */
static void test_finite_differences(void **state) {
  (void)state;
  const Case *c = &LAYOUTS[5]; /* EP2xETP2, two micro-batches of 2 ranks */
  MoeSpec s;
  tiny_spec(&s);
  s.Fs = 8;
  s.aux_coeff = 0.5f, s.z_coeff = 0.05f; /* large enough to matter in the sum */
  const size_t T = total_tokens(c), C = s.C, E = s.E;
  const size_t n[6] = {T * C, E * C, E * 2 * s.Fe * C, E * C * s.Fe, 2 * (size_t)s.Fs * C, C * s.Fs};
  float *base[6], *dir[6], *moved[6];
  for (int k = 0; k < 6; k++) {
    base[k] = random_array(n[k], k == 0 ? 1.0f : 0.3f, 20 + (uint64_t)k);
    moved[k] = zalloc(n[k] * sizeof(float));
  }
  float *dout = random_array(T * C, 0.5f, 30);
  for (int ag = 0; ag < 2; ag++) {
    Params w = {base[1], base[2], base[3], base[4], base[5]};
    Results g;
    parallel_objective(&g, c, &s, &w, base[0], dout, ag);
    const float *grad[6] = {g.dx, g.router, g.wgu, g.wd, g.sgu, g.sd};
    int checked = 0;
    for (uint64_t seed = 0; checked < 3 && seed < 12; seed++) {
      double analytic = 0;
      for (int k = 0; k < 6; k++) {
        dir[k] = random_array(n[k], 1.0f, 100 + 6 * seed + (uint64_t)k);
        for (size_t i = 0; i < n[k]; i++) analytic += (double)grad[k][i] * dir[k][i];
      }
      const float eps = 1e-3f;
      double L[2];
      Results r[2];
      for (int side = 0; side < 2; side++) {
        for (int k = 0; k < 6; k++) axpy(moved[k], base[k], dir[k], side ? -eps : eps, n[k]);
        Params wm = {moved[1], moved[2], moved[3], moved[4], moved[5]};
        L[side] = parallel_objective(&r[side], c, &s, &wm, moved[0], dout, ag);
      }
      const int same = !memcmp(r[0].topk, r[1].topk, T * s.K * sizeof(int)) &&
                       !memcmp(r[0].topk, g.topk, T * s.K * sizeof(int));
      results_free(&r[0]), results_free(&r[1]);
      for (int k = 0; k < 6; k++) free(dir[k]);
      if (!same) continue;
      const double numeric = (L[0] - L[1]) / (2.0 * eps);
      printf("  %s direction %d: analytic %.6g, central difference %.6g\n", ag ? "all-gather" : "all-to-all",
             (int)seed, analytic, numeric);
      /* An fp32 objective of ~1e3 terms of size ~1: ~1e-4 noise over 2e-3. */
      if (fabs(analytic - numeric) > 2e-3 * fabs(analytic) + 0.05)
        fail_msg("direction %d: analytic %.8g, central difference %.8g", (int)seed, analytic, numeric);
      checked++;
    }
    assert_int_equal(checked, 3);
    results_free(&g);
  }
  for (int k = 0; k < 6; k++) free(base[k]), free(moved[k]);
  free(dout);
}

/* Layouts that cannot hold the experts, and more tokens than the buffers
 * hold, are refused with a message naming the size. */
static void test_layout_checks(void **state) {
  (void)state;
  MoeSpec s;
  tiny_spec(&s);
  MoeEpLayout l = {3, 0, 1, 0};
  Error err = {0};
  assert_int_equal(moe_ep_check(&s, &l, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "ep 3"));
  l = (MoeEpLayout){2, 0, 3, 0};
  assert_int_equal(moe_ep_check(&s, &l, &err), ERR_CONFIG);
  assert_non_null(strstr(err.msg, "etp 3"));
  l = (MoeEpLayout){2, 2, 1, 0};
  assert_int_equal(moe_ep_check(&s, &l, &err), ERR_ARG);

  /* More local tokens than the buffers were sized for: refused before any
   * buffer is touched or any collective entered (no callbacks given). */
  l = (MoeEpLayout){2, 0, 1, 0};
  const int max_tokens = 4, N = 5;
  MoeCommOps none = {0};
  float *x = random_array((size_t)N * s.C, 1.0f, 40), *out = zalloc((size_t)N * s.C * sizeof(float));
  float *wgu = random_array((size_t)s.E * 2 * s.Fe * s.C, 0.3f, 41);
  float *wd = random_array((size_t)s.E * s.C * s.Fe, 0.3f, 42);
  float *router = random_array((size_t)s.E * s.C, 0.3f, 43);
  MoeLayerParams p = {router, wgu, wd, NULL, NULL};
  double aux, z;
  MoeA2aSizes za = moe_a2a_sizes(&s, &l, max_tokens);
  MoeA2aActs aa;
  MoeA2aScratch sa;
  void *m1 = zalloc(za.acts_bytes), *m2 = zalloc(za.scratch_bytes);
  moe_a2a_bind_acts(&aa, m1, &s, &l, max_tokens);
  moe_a2a_bind_scratch(&sa, m2, &s, &l, max_tokens);
  assert_int_equal(moe_a2a_forward(out, &aa, &sa, x, &p, N, &s, &l, &none, &aux, &z, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "5 local tokens"));
  free(m1), free(m2);
  MoeAgSizes zg = moe_ag_sizes(&s, &l, max_tokens);
  MoeAgActs ga;
  MoeAgScratch sg;
  m1 = zalloc(zg.acts_bytes), m2 = zalloc(zg.scratch_bytes);
  moe_ag_bind_acts(&ga, m1, &s, &l, max_tokens);
  moe_ag_bind_scratch(&sg, m2, &s, &l, max_tokens);
  assert_int_equal(moe_ag_forward(out, &ga, &sg, x, &p, N, &s, &l, &none, &aux, &z, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "5 local tokens"));
  free(m1), free(m2), free(x), free(out), free(wgu), free(wd), free(router);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dropless_matches_one_rank),
      cmocka_unit_test(test_router_and_shared_variants),
      cmocka_unit_test(test_dropping_is_local_per_rank),
      cmocka_unit_test(test_finite_differences),
      cmocka_unit_test(test_layout_checks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
