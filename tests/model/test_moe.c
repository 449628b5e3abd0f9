/* The MoE layer against docs/moe-semantics.md:
 *  - moe_layer_forward equals a plain double-precision transcription of the
 *    document (router orders, sigmoid, scaling, aux and z losses, capacity
 *    and both drop policies, shared expert);
 *  - the capacity rule (kept set, expert-major row order, padding) equals a
 *    simple reference, including exact ties in the routing weights;
 *  - padding to capacity changes no output, loss or gradient of the model. */
#include <math.h>
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
#include "model/model.h"
#include "model/moe.h"

/* ------------------------------------------------------------ buffers */

typedef struct LayerBufs {
  MoeLayerActs acts;
  MoeScratch scratch;
} LayerBufs;

static void *zalloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  assert_non_null(p);
  return p;
}

static void layer_alloc(LayerBufs *b, const MoeSpec *s, int N) {
  const size_t rows = moe_max_rows(s, N), E = s->E, K = s->K, C = s->C;
  size_t ffn = rows * s->Fe > (size_t)N * s->Fs ? rows * s->Fe : (size_t)N * s->Fs;
  MoeLayerActs *a = &b->acts;
  a->routing.logits = zalloc(N * E * sizeof(float));
  a->routing.scores = zalloc(N * E * sizeof(float));
  a->routing.lse = zalloc(N * sizeof(float));
  a->routing.topk_idx = zalloc(N * K * sizeof(int));
  a->routing.topk_w = zalloc(N * K * sizeof(float));
  a->routing.counts = zalloc(E * sizeof(long));
  a->routing.prob_sum = zalloc(E * sizeof(double));
  a->routing.aux_dq = zalloc(E * sizeof(double));
  a->perm.row_of = zalloc(N * K * sizeof(int));
  a->perm.token_of_row = zalloc(rows * sizeof(int));
  a->perm.expert_offset = zalloc((E + 1) * sizeof(int));
  a->perm.kept = zalloc(E * sizeof(int));
  a->xp = zalloc(rows * C * sizeof(float));
  a->h = zalloc(rows * 2 * s->Fe * sizeof(float));
  a->y = zalloc(rows * C * sizeof(float));
  a->shared_h = zalloc((size_t)N * 2 * s->Fs * sizeof(float));
  b->scratch.a = zalloc(ffn * sizeof(float));
  b->scratch.da = zalloc(ffn * sizeof(float));
  b->scratch.dh = zalloc(2 * ffn * sizeof(float));
  b->scratch.dy = zalloc(rows * C * sizeof(float));
  b->scratch.dxp = zalloc(rows * C * sizeof(float));
  b->scratch.dtopk_w = zalloc(N * K * sizeof(float));
  b->scratch.dz = zalloc(N * E * sizeof(float));
  b->scratch.dscore = zalloc(N * E * sizeof(float));
  b->scratch.plan = zalloc(moe_plan_scratch_bytes(s, N));
}

static void layer_free(LayerBufs *b) {
  MoeLayerActs *a = &b->acts;
  void *ptrs[] = {a->routing.logits,
                  a->routing.scores,
                  a->routing.lse,
                  a->routing.topk_idx,
                  a->routing.topk_w,
                  a->routing.counts,
                  a->routing.prob_sum,
                  a->routing.aux_dq,
                  a->perm.row_of,
                  a->perm.token_of_row,
                  a->perm.expert_offset,
                  a->perm.kept,
                  a->xp,
                  a->h,
                  a->y,
                  a->shared_h,
                  b->scratch.a,
                  b->scratch.da,
                  b->scratch.dh,
                  b->scratch.dy,
                  b->scratch.dxp,
                  b->scratch.dtopk_w,
                  b->scratch.dz,
                  b->scratch.dscore,
                  b->scratch.plan};
  for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) free(ptrs[i]);
}

static float *random_array(size_t n, float std, uint64_t stream) {
  float *p = zalloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = (float)(std * rng_normal(42, stream, i));
  return p;
}

/* ------------------------------------------------- plain capacity rule */

/* kept[a] for every assignment, from the routing's idx and w. */
static long reference_keep(const MoeSpec *s, int N, const int *idx, const float *w, int *kept) {
  const int K = s->K, E = s->E;
  long dropped = 0;
  int cap = s->capacity_factor > 0 ? (int)ceil((double)N * K * (double)s->capacity_factor / E) : N * K;
  for (int e = 0; e < E; e++) {
    int taken = 0;
    for (int a = 0; a < N * K; a++)
      if (idx[a] == e) kept[a] = 0;
    if (s->policy == DROP_POLICY_POSITION) {
      for (int a = 0; a < N * K; a++)
        if (idx[a] == e && taken < cap) kept[a] = 1, taken++;
    } else {
      /* Repeatedly take the largest weight; ties go to the smaller (n, j). */
      for (;;) {
        int best = -1;
        for (int a = 0; a < N * K; a++)
          if (idx[a] == e && !kept[a] && (best < 0 || w[a] > w[best])) best = a;
        if (best < 0 || taken == cap) break;
        kept[best] = 1;
        taken++;
      }
    }
    for (int a = 0; a < N * K; a++)
      if (idx[a] == e && !kept[a]) dropped++;
  }
  return dropped;
}

/* The permutation p is the one the document describes for kept[]. */
static void check_permutation(const MoeSpec *s, int N, const int *idx, const int *kept, const MoePermutation *p) {
  const int K = s->K, E = s->E;
  int cap = s->capacity_factor > 0 ? (int)ceil((double)N * K * (double)s->capacity_factor / E) : 0;
  assert_int_equal(p->capacity, cap);
  int row = 0;
  for (int e = 0; e < E; e++) {
    assert_int_equal(p->expert_offset[e], row);
    for (int a = 0; a < N * K; a++) {
      if (idx[a] != e) continue;
      if (!kept[a]) {
        assert_int_equal(p->row_of[a], -1);
        continue;
      }
      assert_int_equal(p->row_of[a], row);
      assert_int_equal(p->token_of_row[row], a / K);
      row++;
    }
    assert_int_equal(p->kept[e], row - p->expert_offset[e]);
    if (s->pad_to_capacity && cap > 0)
      for (; row < p->expert_offset[e] + cap; row++) assert_int_equal(p->token_of_row[row], -1);
  }
  assert_int_equal(p->expert_offset[E], row);
  assert_int_equal(p->rows, row);
}

/* ------------------------------------- the document, in double precision */

static void silu_mlp_ref(double *out, const float *x, const float *wgu, const float *wd, int C, int F, double scale) {
  double *a = zalloc((size_t)F * sizeof(double));
  for (int f = 0; f < F; f++) {
    double g = 0, u = 0;
    for (int c = 0; c < C; c++)
      g += (double)wgu[(size_t)f * C + c] * x[c], u += (double)wgu[(size_t)(F + f) * C + c] * x[c];
    a[f] = g / (1 + exp(-g)) * u;
  }
  for (int c = 0; c < C; c++) {
    double y = 0;
    for (int f = 0; f < F; f++) y += (double)wd[(size_t)c * F + f] * a[f];
    out[c] += scale * y;
  }
  free(a);
}

static void reference_layer(const MoeSpec *s, int N, const float *x, const MoeLayerParams *p, double *out, double *aux,
                            double *zl, int *idx, double *w, int *kept, long *dropped) {
  const int E = s->E, K = s->K, C = s->C;
  double *z = zalloc((size_t)E * sizeof(double)), *q = zalloc((size_t)E * sizeof(double));
  double *Psum = zalloc((size_t)E * sizeof(double));
  long *count = zalloc((size_t)E * sizeof(long));
  double zsum = 0;
  for (int n = 0; n < N; n++) {
    const float *xn = x + (size_t)n * C;
    for (int e = 0; e < E; e++) {
      z[e] = 0;
      for (int c = 0; c < C; c++) z[e] += (double)p->router[(size_t)e * C + c] * xn[c];
    }
    double mx = z[0];
    for (int e = 1; e < E; e++) mx = fmax(mx, z[e]);
    double se = 0;
    for (int e = 0; e < E; e++) se += exp(z[e] - mx);
    double lse = mx + log(se);
    zsum += lse * lse;
    /* score used for top-k, and q for the aux loss */
    double score[64];
    double qs = 0;
    for (int e = 0; e < E; e++) {
      if (s->score == ROUTER_SCORE_SIGMOID) {
        score[e] = 1 / (1 + exp(-z[e]));
        qs += score[e];
      } else {
        q[e] = exp(z[e] - lse);
        score[e] = s->order == ROUTER_TOPK_THEN_SOFTMAX ? z[e] : q[e];
      }
    }
    if (s->score == ROUTER_SCORE_SIGMOID)
      for (int e = 0; e < E; e++) q[e] = score[e] / qs;
    for (int e = 0; e < E; e++) Psum[e] += q[e];
    /* top-k: descending, ties to the lower index */
    int used[64] = {0};
    for (int j = 0; j < K; j++) {
      int best = -1;
      for (int e = 0; e < E; e++)
        if (!used[e] && (best < 0 || score[e] > score[best])) best = e;
      used[best] = 1;
      idx[n * K + j] = best;
      count[best]++;
    }
    double *wn = w + (size_t)n * K, sum = 0;
    for (int j = 0; j < K; j++) wn[j] = score[idx[n * K + j]];
    if (s->score == ROUTER_SCORE_SOFTMAX && s->order == ROUTER_TOPK_THEN_SOFTMAX) {
      const double mx = wn[0];
      for (int j = 0; j < K; j++) sum += (wn[j] = exp(wn[j] - mx));
      for (int j = 0; j < K; j++) wn[j] /= sum;
    } else if ((s->score == ROUTER_SCORE_SOFTMAX && s->norm_topk_prob) || (s->score == ROUTER_SCORE_SIGMOID && K > 1)) {
      for (int j = 0; j < K; j++) sum += wn[j];
      for (int j = 0; j < K; j++) wn[j] /= sum;
    }
    for (int j = 0; j < K; j++) wn[j] *= s->scaling;
  }
  *aux = 0;
  for (int e = 0; e < E; e++) *aux += (double)count[e] / ((double)N * K) * (Psum[e] / N);
  *aux *= (double)s->aux_coeff * E;
  *zl = s->z_coeff * zsum / N;

  float *wf = zalloc((size_t)N * K * sizeof(float));
  for (int a = 0; a < N * K; a++) wf[a] = (float)w[a];
  *dropped = reference_keep(s, N, idx, wf, kept);
  free(wf);

  memset(out, 0, (size_t)N * C * sizeof(double));
  for (int n = 0; n < N; n++) {
    for (int j = 0; j < K; j++) {
      int a = n * K + j, e = idx[a];
      if (!kept[a]) continue;
      silu_mlp_ref(out + (size_t)n * C, x + (size_t)n * C, p->w_gate_up + (size_t)e * 2 * s->Fe * C,
                   p->w_down + (size_t)e * C * s->Fe, C, s->Fe, w[a]);
    }
    if (s->Fs > 0)
      silu_mlp_ref(out + (size_t)n * C, x + (size_t)n * C, p->shared_gate_up, p->shared_down, C, s->Fs, 1.0);
  }
  free(z);
  free(q);
  free(Psum);
  free(count);
}

static void base_spec(MoeSpec *s) {
  memset(s, 0, sizeof *s);
  s->C = 24;
  s->E = 6;
  s->K = 2;
  s->Fe = 20;
  s->score = ROUTER_SCORE_SOFTMAX;
  s->order = ROUTER_SOFTMAX_THEN_TOPK;
  s->norm_topk_prob = 1;
  s->scaling = 1.0f;
  s->aux_coeff = 0.01f;
  s->z_coeff = 0.001f;
}

static void compare_layer_n(const MoeSpec *s, const char *label, int N) {
  const int C = s->C, E = s->E, K = s->K;
  LayerBufs b;
  layer_alloc(&b, s, N);
  float *x = random_array((size_t)N * C, 1.0f, 1);
  float *router = random_array((size_t)E * C, 0.5f, 2);
  float *wgu = random_array((size_t)E * 2 * s->Fe * C, 0.3f, 3);
  float *wd = random_array((size_t)E * C * s->Fe, 0.3f, 4);
  float *sgu = random_array((size_t)2 * s->Fs * C + 1, 0.3f, 5);
  float *sd = random_array((size_t)C * s->Fs + 1, 0.3f, 6);
  MoeLayerParams p = {router, wgu, wd, s->Fs ? sgu : NULL, s->Fs ? sd : NULL};
  float *out = random_array((size_t)N * C, 1.0f, 7); /* the layer adds to it */
  float *before = zalloc((size_t)N * C * sizeof(float));
  memcpy(before, out, (size_t)N * C * sizeof(float));
  double aux = -1, z = -1;
  moe_layer_forward(out, &b.acts, &b.scratch, x, &p, N, s, &aux, &z);

  double *ref = zalloc((size_t)N * C * sizeof(double)), *w = zalloc((size_t)N * K * sizeof(double));
  int *idx = zalloc((size_t)N * K * sizeof(int)), *kept = zalloc((size_t)N * K * sizeof(int));
  double ref_aux, ref_z;
  long ref_dropped;
  reference_layer(s, N, x, &p, ref, &ref_aux, &ref_z, idx, w, kept, &ref_dropped);

  for (int a = 0; a < N * K; a++) {
    if (b.acts.routing.topk_idx[a] != idx[a])
      fail_msg("%s: assignment %d: expert %d, expected %d", label, a, b.acts.routing.topk_idx[a], idx[a]);
    if (fabs(b.acts.routing.topk_w[a] - w[a]) > 1e-5 * (1 + fabs(w[a])))
      fail_msg("%s: weight %d: %.8g, expected %.8g", label, a, b.acts.routing.topk_w[a], w[a]);
  }
  assert_int_equal(b.acts.perm.dropped, ref_dropped);
  check_permutation(s, N, idx, kept, &b.acts.perm);
  /* Relative to the output's scale: float sums of C and Fe terms. */
  double max_err = 0, scale = 0;
  for (size_t i = 0; i < (size_t)N * C; i++) scale = fmax(scale, fabs(ref[i]));
  for (size_t i = 0; i < (size_t)N * C; i++) {
    double err = fabs((out[i] - before[i]) - ref[i]) / (1 + scale);
    if (err > max_err) max_err = err;
  }
  if (max_err > 1e-5) fail_msg("%s: output differs from the reference by %.3g", label, max_err);
  if (fabs(aux - ref_aux) > 1e-6 * (1 + ref_aux)) fail_msg("%s: aux %.9g, expected %.9g", label, aux, ref_aux);
  if (fabs(z - ref_z) > 1e-6 * (1 + ref_z)) fail_msg("%s: z %.9g, expected %.9g", label, z, ref_z);
  long total = 0;
  for (int e = 0; e < E; e++) total += b.acts.routing.counts[e];
  assert_int_equal(total, N * K);
  printf("  %-32s dropped %3ld of %d, max error %.2g\n", label, ref_dropped, N * K, max_err);

  free(x), free(router), free(wgu), free(wd), free(sgu), free(sd), free(out), free(before);
  free(ref), free(w), free(idx), free(kept);
  layer_free(&b);
}

static void compare_layer(const MoeSpec *s, const char *label) { compare_layer_n(s, label, 40); }

static void test_layer_matches_document(void **state) {
  (void)state;
  MoeSpec s;
  base_spec(&s);
  compare_layer(&s, "softmax_then_topk, renormalised");
  s.norm_topk_prob = 0;
  s.scaling = 2.5f;
  compare_layer(&s, "softmax_then_topk, raw, scaled");
  base_spec(&s);
  s.order = ROUTER_TOPK_THEN_SOFTMAX;
  s.K = 3;
  compare_layer(&s, "topk_then_softmax, top-3");
  base_spec(&s);
  s.score = ROUTER_SCORE_SIGMOID;
  compare_layer(&s, "sigmoid, top-2");
  s.K = 1;
  compare_layer(&s, "sigmoid, top-1");
  base_spec(&s);
  s.Fs = 16;
  compare_layer(&s, "shared expert");
  base_spec(&s);
  s.capacity_factor = 0.8f;
  s.policy = DROP_POLICY_PROBS;
  compare_layer(&s, "capacity 0.8, probs");
  s.policy = DROP_POLICY_POSITION;
  compare_layer(&s, "capacity 0.8, position");
  s.pad_to_capacity = 1;
  s.capacity_factor = 0.9f;
  compare_layer(&s, "capacity 0.9, position, padded");
  s.policy = DROP_POLICY_PROBS;
  s.capacity_factor = 1.5f;
  compare_layer(&s, "capacity 1.5, probs, padded");
  /* Large enough for every loop of the layer to run multi-threaded. */
  base_spec(&s);
  s.C = 64;
  s.E = 8;
  s.Fe = 32;
  s.Fs = 24;
  s.capacity_factor = 0.9f;
  compare_layer_n(&s, "1200 tokens, capacity 0.9, probs", 1200);
}

/* Forward and backward of a layer big enough to use the thread pool give
 * the same results on one thread and on several. */
static void test_threads_agree(void **state) {
  (void)state;
  MoeSpec s;
  base_spec(&s);
  s.C = 64;
  s.E = 8;
  s.Fe = 32;
  s.Fs = 24;
  s.capacity_factor = 0.9f;
  s.score = ROUTER_SCORE_SIGMOID;
  const int N = 1200, C = s.C, E = s.E;
  float *x = random_array((size_t)N * C, 1.0f, 11);
  float *router = random_array((size_t)E * C, 0.5f, 12);
  float *wgu = random_array((size_t)E * 2 * s.Fe * C, 0.3f, 13);
  float *wd = random_array((size_t)E * C * s.Fe, 0.3f, 14);
  float *sgu = random_array((size_t)2 * s.Fs * C, 0.3f, 15);
  float *sd = random_array((size_t)C * s.Fs, 0.3f, 16);
  float *dout = random_array((size_t)N * C, 1.0f, 17);
  MoeLayerParams p = {router, wgu, wd, sgu, sd};
  const size_t sizes[6] = {(size_t)N * C, (size_t)E * C, (size_t)E * 2 * s.Fe * C, (size_t)E * C * s.Fe,
                           (size_t)2 * s.Fs * C, (size_t)C * s.Fs};
  float *res[2][7];
  int max_threads = omp_get_max_threads();
  for (int run = 0; run < 2; run++) {
    omp_set_num_threads(run == 0 ? 1 : (max_threads > 1 ? max_threads : 2));
    LayerBufs b;
    layer_alloc(&b, &s, N);
    float *out = zalloc(sizeof(float) * N * C);
    for (int i = 0; i < 6; i++) res[run][i] = zalloc(sizeof(float) * sizes[i]);
    MoeLayerGrads g = {res[run][1], res[run][2], res[run][3], res[run][4], res[run][5]};
    double aux, z;
    moe_layer_forward(out, &b.acts, &b.scratch, x, &p, N, &s, &aux, &z);
    moe_layer_backward(res[run][0], &g, &b.scratch, dout, &b.acts, x, &p, N, &s, 1.0f);
    res[run][6] = out;
    layer_free(&b);
  }
  omp_set_num_threads(max_threads);
  /* Thread counts may change the order of GEMM reductions: compare to the
   * scale of each array. */
  for (int i = 0; i < 7; i++) {
    size_t n = i < 6 ? sizes[i] : (size_t)N * C;
    float scale = 0, diff = 0;
    for (size_t j = 0; j < n; j++) {
      scale = fmaxf(scale, fabsf(res[0][i][j]));
      diff = fmaxf(diff, fabsf(res[0][i][j] - res[1][i][j]));
    }
    printf("  array %d: max |difference| %.3g, max |value| %.3g\n", i, diff, scale);
    if (!(scale > 0) || diff > 1e-5f * scale) fail_msg("array %d: one thread and several differ by %.3g", i, diff);
    free(res[0][i]), free(res[1][i]);
  }
  free(x), free(router), free(wgu), free(wd), free(sgu), free(sd), free(dout);
}

/* Synthetic routing with many exact ties in the weights. */
static void test_capacity_rule_with_ties(void **state) {
  (void)state;
  const int N = 50;
  for (int policy = 0; policy < 2; policy++) {
    for (int pad = 0; pad < 2; pad++) {
      MoeSpec s;
      base_spec(&s);
      s.E = 5;
      s.K = 2;
      s.capacity_factor = 0.7f;
      s.policy = policy ? DROP_POLICY_POSITION : DROP_POLICY_PROBS;
      s.pad_to_capacity = pad;
      LayerBufs b;
      layer_alloc(&b, &s, N);
      MoeRouting *r = &b.acts.routing;
      Rng rng = rng_make(5, (uint64_t)(policy * 2 + pad));
      for (int e = 0; e < s.E; e++) r->counts[e] = 0;
      for (int n = 0; n < N; n++) {
        /* Skewed towards low experts so some overflow; weights on a coarse
         * grid so ties are common. */
        int e0 = (int)rng_next_below(&rng, 3), e1 = (e0 + 1 + (int)rng_next_below(&rng, 4)) % s.E;
        r->topk_idx[n * 2] = e0;
        r->topk_idx[n * 2 + 1] = e1;
        r->topk_w[n * 2] = 0.5f + 0.1f * (float)rng_next_below(&rng, 3);
        r->topk_w[n * 2 + 1] = 0.1f * (float)rng_next_below(&rng, 4);
        r->counts[e0]++;
        r->counts[e1]++;
      }
      moe_permute_plan(&b.acts.perm, r, N, &s, b.scratch.plan);
      int kept[2 * 50];
      long dropped = reference_keep(&s, N, r->topk_idx, r->topk_w, kept);
      assert_true(dropped > 0);
      assert_int_equal(b.acts.perm.dropped, dropped);
      check_permutation(&s, N, r->topk_idx, kept, &b.acts.perm);
      layer_free(&b);
    }
  }
  MoeSpec s;
  base_spec(&s);
  s.E = 8;
  s.K = 2;
  s.capacity_factor = 1.25f;
  assert_int_equal(moe_capacity(&s, 100), 32); /* ceil(100*2*1.25/8) = ceil(31.25) */
  s.capacity_factor = 1.0f;
  assert_int_equal(moe_capacity(&s, 64), 16);
  s.capacity_factor = 0;
  assert_int_equal(moe_capacity(&s, 64), 0);
}

/* ------------------------------------------- padding at the model level */

static void test_padding_changes_nothing(void **state) {
  (void)state;
  ModelConfig c;
  model_config_defaults(&c);
  c.vocab_size = 48;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_experts = 4;
  c.top_k = 2;
  c.moe_intermediate_size = 16;
  c.shared_expert_intermediate_size = 8;
  model_config_set_moe_layer_freq(&c, 1);
  c.init_std = 0.2f;
  c.aux_loss_coeff = 0.01f;
  c.z_loss_coeff = 0.001f;
  c.capacity_factor = 0.9f;
  enum { BB = 2, TT = 16 };
  int tokens[BB * TT], targets[BB * TT];
  for (int n = 0; n < BB * TT; n++) tokens[n] = (n * 7 + 3) % 48, targets[n] = (n * 5 + 1) % 48;
  for (int policy = 0; policy < 2; policy++) {
    c.drop_policy = policy ? DROP_POLICY_POSITION : DROP_POLICY_PROBS;
    Model m[2];
    ModelLoss loss[2];
    float *logits[2];
    Error err = {0};
    for (int pad = 0; pad < 2; pad++) {
      c.pad_to_capacity = pad;
      if (model_create(&m[pad], &c, BB, TT, &err)) fail_msg("%s", err.msg);
      model_init_weights(&m[pad], 7);
      model_zero_grad(&m[pad]);
      if (model_forward(&m[pad], tokens, targets, BB, TT, 1, 1.0f, &loss[pad], &err)) fail_msg("%s", err.msg);
      if (model_backward(&m[pad], &err)) fail_msg("%s", err.msg);
      logits[pad] = zalloc((size_t)BB * TT * 48 * sizeof(float));
      if (model_logits(&m[pad], tokens, BB, TT, logits[pad], &err)) fail_msg("%s", err.msg);
    }
    assert_true(m[0].dropped_assignments > 0);
    assert_int_equal(m[0].dropped_assignments, m[1].dropped_assignments);
    for (int i = 0; i < 2 * 4; i++) assert_int_equal(m[0].expert_counts[i], m[1].expert_counts[i]);
    assert_true(fabs(loss[0].lm - loss[1].lm) <= 1e-6 * loss[0].lm);
    assert_true(fabs(loss[0].aux - loss[1].aux) <= 1e-9);
    assert_true(fabs(loss[0].z - loss[1].z) <= 1e-9);
    for (size_t i = 0; i < (size_t)BB * TT * 48; i++) assert_true(fabsf(logits[0][i] - logits[1][i]) <= 1e-5f);
    for (size_t i = 0; i < m[0].num_params; i++)
      if (fabsf(m[0].grads[i] - m[1].grads[i]) > 1e-6f + 1e-4f * fabsf(m[0].grads[i]))
        fail_msg("gradient %zu: %.8g unpadded, %.8g padded", i, m[0].grads[i], m[1].grads[i]);
    for (int pad = 0; pad < 2; pad++) model_free(&m[pad]), free(logits[pad]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layer_matches_document),
      cmocka_unit_test(test_capacity_rule_with_ties),
      cmocka_unit_test(test_threads_agree),
      cmocka_unit_test(test_padding_changes_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
