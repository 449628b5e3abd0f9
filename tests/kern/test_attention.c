/* Tests of the flash attention kernels (kern/attention.h): forward and lse
 * against a naive double-precision reference, backward against the analytic
 * double reference and against central finite differences of
 * L = sum(out * r), causality, and the context-parallel block API (blocks +
 * merge reproduce whole-sequence attention and its gradients). */
#include <math.h>
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

typedef struct Shape {
  int B, T, Hq, Hkv, D;
} Shape;

/* T = 150 and 200 span several 64-wide tiles with a ragged last one; D = 20
 * exercises the micro-kernel's masked column tail. */
static const Shape kShapes[] = {
    {1, 1, 2, 1, 16},  {2, 37, 4, 4, 16}, {2, 150, 8, 2, 64}, {1, 200, 4, 1, 64},
    {3, 64, 2, 2, 64}, {2, 129, 4, 2, 16}, {1, 97, 2, 1, 20},
};
enum { NUM_SHAPES = sizeof kShapes / sizeof kShapes[0] };

static size_t q_elems(Shape s) { return (size_t)s.B * s.T * s.Hq * s.D; }
static size_t kv_elems(Shape s) { return (size_t)s.B * s.T * s.Hkv * s.D; }
static size_t lse_elems(Shape s) { return (size_t)s.B * s.Hq * s.T; }

static float *normal_tensor(size_t n, uint64_t stream, float stddev) {
  float *x = malloc(n * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < n; i++) x[i] = (float)(stddev * rng_normal(1234, stream, i));
  return x;
}

typedef struct Inputs {
  float *q, *k, *v, *r; /* r: upstream gradient dL/dout */
} Inputs;

/* q is scaled up so the softmax is peaked enough that the running max moves
 * across key tiles. */
static Inputs make_inputs(Shape s, uint64_t stream) {
  Inputs in = {normal_tensor(q_elems(s), stream * 4 + 0, 1.5f), normal_tensor(kv_elems(s), stream * 4 + 1, 1.0f),
               normal_tensor(kv_elems(s), stream * 4 + 2, 1.0f), normal_tensor(q_elems(s), stream * 4 + 3, 1.0f)};
  return in;
}

static void free_inputs(Inputs *in) {
  free(in->q);
  free(in->k);
  free(in->v);
  free(in->r);
}

static size_t q_index(Shape s, int b, int t, int h, int d) { return (((size_t)b * s.T + t) * s.Hq + h) * s.D + d; }
static size_t kv_index(Shape s, int b, int t, int h, int d) {
  return (((size_t)b * s.T + t) * s.Hkv + h) * s.D + d;
}

/* Naive causal GQA attention in double: full score rows, softmax, and (when
 * dq is non-NULL) the analytic backward with upstream gradient r. */
static void reference(Shape s, const Inputs *in, double *out, double *lse, double *dq, double *dk, double *dv) {
  const int G = s.Hq / s.Hkv;
  const double scale = 1.0 / sqrt((double)s.D);
  double *p = malloc((size_t)s.T * sizeof *p), *dp = malloc((size_t)s.T * sizeof *dp);
  if (dq) {
    memset(dq, 0, q_elems(s) * sizeof *dq);
    memset(dk, 0, kv_elems(s) * sizeof *dk);
    memset(dv, 0, kv_elems(s) * sizeof *dv);
  }
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.Hq; h++)
      for (int t = 0; t < s.T; t++) {
        const int kh = h / G;
        const float *qr = in->q + q_index(s, b, t, h, 0);
        double m = -INFINITY;
        for (int j = 0; j <= t; j++) {
          const float *kr = in->k + kv_index(s, b, j, kh, 0);
          double dot = 0;
          for (int d = 0; d < s.D; d++) dot += (double)qr[d] * kr[d];
          p[j] = dot * scale;
          if (p[j] > m) m = p[j];
        }
        double sum = 0;
        for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - m));
        for (int j = 0; j <= t; j++) p[j] /= sum;
        lse[((size_t)b * s.Hq + h) * s.T + t] = m + log(sum);
        double *o = out + q_index(s, b, t, h, 0);
        for (int d = 0; d < s.D; d++) {
          double acc = 0;
          for (int j = 0; j <= t; j++) acc += p[j] * in->v[kv_index(s, b, j, kh, d)];
          o[d] = acc;
        }
        if (!dq) continue;
        const float *rr = in->r + q_index(s, b, t, h, 0);
        double delta = 0;
        for (int j = 0; j <= t; j++) {
          double acc = 0;
          for (int d = 0; d < s.D; d++) acc += (double)rr[d] * in->v[kv_index(s, b, j, kh, d)];
          dp[j] = acc;
          delta += p[j] * acc;
        }
        for (int j = 0; j <= t; j++) {
          const double ds = p[j] * (dp[j] - delta) * scale;
          for (int d = 0; d < s.D; d++) {
            dq[q_index(s, b, t, h, d)] += ds * in->k[kv_index(s, b, j, kh, d)];
            dk[kv_index(s, b, j, kh, d)] += ds * qr[d];
            dv[kv_index(s, b, j, kh, d)] += p[j] * rr[d];
          }
        }
      }
  free(p);
  free(dp);
}

/* Largest |got - want| / (atol + rtol |want|); <= 1 passes. */
static double worst_ratio(const float *got, const double *want, size_t n, double atol, double rtol) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    const double ratio = fabs((double)got[i] - want[i]) / (atol + rtol * fabs(want[i]));
    if (!(ratio <= worst)) worst = ratio; /* NaN propagates as a failure */
  }
  return worst;
}

static void check_close(const char *what, Shape s, const float *got, const double *want, size_t n, double atol,
                        double rtol) {
  const double worst = worst_ratio(got, want, n, atol, rtol);
  if (!(worst <= 1.0))
    fail_msg("%s: shape B=%d T=%d Hq=%d Hkv=%d D=%d: error %.3g x tolerance (atol %.1e rtol %.1e)", what, s.B, s.T,
             s.Hq, s.Hkv, s.D, worst, atol, rtol);
}

static void test_forward_matches_reference(void **state) {
  (void)state;
  for (int si = 0; si < NUM_SHAPES; si++) {
    const Shape s = kShapes[si];
    Inputs in = make_inputs(s, (uint64_t)si);
    float *out = malloc(q_elems(s) * sizeof *out), *lse = malloc(lse_elems(s) * sizeof *lse);
    double *ref_out = malloc(q_elems(s) * sizeof *ref_out), *ref_lse = malloc(lse_elems(s) * sizeof *ref_lse);
    attention_forward(out, lse, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);
    reference(s, &in, ref_out, ref_lse, NULL, NULL, NULL);
    check_close("forward out", s, out, ref_out, q_elems(s), 5e-6, 5e-5);
    check_close("forward lse", s, lse, ref_lse, lse_elems(s), 3e-6, 3e-6);
    free(out);
    free(lse);
    free(ref_out);
    free(ref_lse);
    free_inputs(&in);
  }
}

static void test_backward_matches_reference(void **state) {
  (void)state;
  for (int si = 0; si < NUM_SHAPES; si++) {
    const Shape s = kShapes[si];
    Inputs in = make_inputs(s, 100 + (uint64_t)si);
    const size_t nq = q_elems(s), nkv = kv_elems(s);
    float *out = malloc(nq * 4), *lse = malloc(lse_elems(s) * 4);
    float *dq = malloc(nq * 4), *dk = malloc(nkv * 4), *dv = malloc(nkv * 4);
    double *ref_out = malloc(nq * 8), *ref_lse = malloc(lse_elems(s) * 8);
    double *rdq = malloc(nq * 8), *rdk = malloc(nkv * 8), *rdv = malloc(nkv * 8);
    /* Poison the outputs: the backward must overwrite, not accumulate. */
    for (size_t i = 0; i < nq; i++) dq[i] = 1e3f;
    for (size_t i = 0; i < nkv; i++) dk[i] = dv[i] = 1e3f;
    attention_forward(out, lse, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);
    attention_backward(dq, dk, dv, in.r, out, lse, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);
    reference(s, &in, ref_out, ref_lse, rdq, rdk, rdv);
    check_close("backward dq", s, dq, rdq, nq, 2e-5, 2e-4);
    check_close("backward dk", s, dk, rdk, nkv, 2e-5, 2e-4);
    check_close("backward dv", s, dv, rdv, nkv, 2e-5, 2e-4);
    free(out), free(lse), free(dq), free(dk), free(dv);
    free(ref_out), free(ref_lse), free(rdq), free(rdk), free(rdv);
    free_inputs(&in);
  }
}

/* L = sum(out * r) accumulated in double from the float kernel. */
static double kernel_loss(Shape s, const Inputs *in, float *out, float *lse) {
  attention_forward(out, lse, in->q, in->k, in->v, s.B, s.T, s.Hq, s.Hkv, s.D);
  double L = 0;
  for (size_t i = 0; i < q_elems(s); i++) L += (double)out[i] * in->r[i];
  return L;
}

/* The same loss from the double reference (validates the reference's own
 * backward, so the comparisons above rest on checked ground). */
static double reference_loss(Shape s, const Inputs *in, double *out, double *lse) {
  reference(s, in, out, lse, NULL, NULL, NULL);
  double L = 0;
  for (size_t i = 0; i < q_elems(s); i++) L += out[i] * in->r[i];
  return L;
}

/* Central differences on sampled elements of q, k and v: once through the
 * float kernel (eps = 1e-2; the tolerance covers float rounding of the
 * perturbed outputs, ~10x above the errors seen), once through the double
 * reference (eps = 2^-13, tight). */
static void test_backward_finite_differences(void **state) {
  (void)state;
  const Shape s = {2, 70, 4, 2, 16}; /* two key tiles, GQA group of 2 */
  Inputs in = make_inputs(s, 200);
  const size_t nq = q_elems(s), nkv = kv_elems(s);
  float *out = malloc(nq * 4), *lse = malloc(lse_elems(s) * 4);
  float *dq = malloc(nq * 4), *dk = malloc(nkv * 4), *dv = malloc(nkv * 4);
  double *rout = malloc(nq * 8), *rlse = malloc(lse_elems(s) * 8);
  double *rdq = malloc(nq * 8), *rdk = malloc(nkv * 8), *rdv = malloc(nkv * 8);
  attention_forward(out, lse, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);
  attention_backward(dq, dk, dv, in.r, out, lse, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);
  reference(s, &in, rout, rlse, rdq, rdk, rdv);

  struct {
    const char *name;
    float *x;
    const float *grad;
    const double *ref_grad;
    size_t n;
  } tensors[] = {{"dq", in.q, dq, rdq, nq}, {"dk", in.k, dk, rdk, nkv}, {"dv", in.v, dv, rdv, nkv}};
  for (int ti = 0; ti < 3; ti++) {
    for (int sample = 0; sample < 40; sample++) {
      const size_t i = (size_t)rng_u64(77, (uint64_t)ti, (uint64_t)sample) % tensors[ti].n;
      float *x = tensors[ti].x;
      const float saved = x[i];

      const float xp = saved + 1e-2f, xm = saved - 1e-2f;
      x[i] = xp;
      const double Lp = kernel_loss(s, &in, out, lse);
      x[i] = xm;
      const double Lm = kernel_loss(s, &in, out, lse);
      const double fd = (Lp - Lm) / ((double)xp - (double)xm);
      const double g = tensors[ti].grad[i];
      if (!(fabs(fd - g) <= 5e-4 + 5e-3 * fabs(g)))
        fail_msg("%s[%zu]: backward %.6g, kernel finite difference %.6g", tensors[ti].name, i, g, fd);

      /* Double reference: the inputs stay float, so the step is whatever
       * separates the two rounded floats; the denominator uses exactly that. */
      const float h = 1.0f / 8192.0f;
      x[i] = saved + h;
      const double Rp = reference_loss(s, &in, rout, rlse);
      x[i] = saved - h;
      const double Rm = reference_loss(s, &in, rout, rlse);
      const double rfd = (Rp - Rm) / ((double)(saved + h) - (double)(saved - h));
      const double rg = tensors[ti].ref_grad[i];
      if (!(fabs(rfd - rg) <= 1e-8 + 1e-7 * fabs(rg)))
        fail_msg("%s[%zu]: reference backward %.9g, reference finite difference %.9g", tensors[ti].name, i, rg,
                 rfd);
      x[i] = saved;
    }
  }
  free(out), free(lse), free(dq), free(dk), free(dv);
  free(rout), free(rlse), free(rdq), free(rdk), free(rdv);
  free_inputs(&in);
}

/* Changing the k/v of token t0 must leave every output (and dq) row before
 * t0 bit-for-bit unchanged: masked weights are exact zeros, so the future
 * cannot leak even through rounding. Rows from t0 on must change, or the
 * perturbation proved nothing. */
static void test_causality(void **state) {
  (void)state;
  const Shape s = {2, 150, 4, 2, 32};
  const int t0 = 100;
  Inputs in = make_inputs(s, 300);
  const size_t nq = q_elems(s), nkv = kv_elems(s);
  float *out1 = malloc(nq * 4), *out2 = malloc(nq * 4), *lse1 = malloc(lse_elems(s) * 4),
        *lse2 = malloc(lse_elems(s) * 4);
  float *dq1 = malloc(nq * 4), *dq2 = malloc(nq * 4), *dk = malloc(nkv * 4), *dv = malloc(nkv * 4);
  attention_forward(out1, lse1, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);
  attention_backward(dq1, dk, dv, in.r, out1, lse1, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);
  for (int b = 0; b < s.B; b++)
    for (int h = 0; h < s.Hkv; h++)
      for (int d = 0; d < s.D; d++) {
        in.k[kv_index(s, b, t0, h, d)] += 3.0f;
        in.v[kv_index(s, b, t0, h, d)] -= 5.0f;
      }
  attention_forward(out2, lse2, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);
  attention_backward(dq2, dk, dv, in.r, out2, lse2, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);
  const size_t row = (size_t)s.Hq * s.D;
  for (int b = 0; b < s.B; b++) {
    const size_t past = ((size_t)b * s.T) * row, future = ((size_t)b * s.T + t0) * row;
    assert_memory_equal(out1 + past, out2 + past, (size_t)t0 * row * sizeof(float));
    assert_memory_equal(dq1 + past, dq2 + past, (size_t)t0 * row * sizeof(float));
    for (int h = 0; h < s.Hq; h++) {
      const size_t l = ((size_t)b * s.Hq + h) * s.T;
      assert_memory_equal(lse1 + l, lse2 + l, (size_t)t0 * sizeof(float));
    }
    assert_memory_not_equal(out1 + future, out2 + future, row * sizeof(float));
  }
  free(out1), free(out2), free(lse1), free(lse2), free(dq1), free(dq2), free(dk), free(dv);
  free_inputs(&in);
}

/* Context parallelism as the ring will use it: the sequence is cut into
 * 2*R chunks, rank i holds chunks i and 2R-1-i (positions not contiguous),
 * and every rank sees every rank's K/V block. Blocks + merge must reproduce
 * whole-sequence attention, and the accumulated block gradients its
 * backward. */
static void test_context_parallel_blocks(void **state) {
  (void)state;
  const Shape s = {2, 200, 4, 2, 32};
  const int R = 2, chunk = s.T / (2 * R), local = 2 * chunk;
  Inputs in = make_inputs(s, 400);
  const size_t nq = q_elems(s), nkv = kv_elems(s), qrow = (size_t)s.Hq * s.D, kvrow = (size_t)s.Hkv * s.D;
  float *out = malloc(nq * 4), *lse = malloc(lse_elems(s) * 4);
  float *dq = malloc(nq * 4), *dk = malloc(nkv * 4), *dv = malloc(nkv * 4);
  attention_forward(out, lse, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);
  attention_backward(dq, dk, dv, in.r, out, lse, in.q, in.k, in.v, s.B, s.T, s.Hq, s.Hkv, s.D);

  /* Per rank: positions and gathered local q, k, v, r. */
  int *pos = malloc((size_t)R * local * sizeof *pos);
  float *lq = malloc((size_t)R * s.B * local * qrow * 4), *lr = malloc((size_t)R * s.B * local * qrow * 4);
  float *lk = malloc((size_t)R * s.B * local * kvrow * 4), *lv = malloc((size_t)R * s.B * local * kvrow * 4);
  for (int rank = 0; rank < R; rank++)
    for (int i = 0; i < local; i++) {
      const int c = i < chunk ? rank : 2 * R - 1 - rank;
      const int t = c * chunk + i % chunk;
      pos[rank * local + i] = t;
      for (int b = 0; b < s.B; b++) {
        const size_t dst = ((size_t)rank * s.B + b) * local + i, src = (size_t)b * s.T + t;
        memcpy(lq + dst * qrow, in.q + src * qrow, qrow * 4);
        memcpy(lr + dst * qrow, in.r + src * qrow, qrow * 4);
        memcpy(lk + dst * kvrow, in.k + src * kvrow, kvrow * 4);
        memcpy(lv + dst * kvrow, in.v + src * kvrow, kvrow * 4);
      }
    }
#define RANK_Q(x, rank) ((x) + (size_t)(rank) * s.B * local * qrow)
#define RANK_KV(x, rank) ((x) + (size_t)(rank) * s.B * local * kvrow)

  const size_t lnq = (size_t)s.B * local * qrow, lnkv = (size_t)s.B * local * kvrow;
  const size_t llse = (size_t)s.B * s.Hq * local;
  float *lout = malloc((size_t)R * lnq * 4), *llse_all = malloc((size_t)R * llse * 4);
  float *bout = malloc(lnq * 4), *blse = malloc(llse * 4);
  float *ldq = calloc((size_t)R * lnq, 4), *ldk = calloc((size_t)R * lnkv, 4), *ldv = calloc((size_t)R * lnkv, 4);
  for (int rank = 0; rank < R; rank++) {
    float *o = lout + (size_t)rank * lnq, *l = llse_all + (size_t)rank * llse;
    for (size_t i = 0; i < lnq; i++) o[i] = NAN; /* must be ignored while lse = -inf */
    for (size_t i = 0; i < llse; i++) l[i] = -INFINITY;
    for (int step = 0; step < R; step++) { /* ring order: own block first */
      const int src = (rank + R - step) % R;
      attention_forward_block(bout, blse, RANK_Q(lq, rank), pos + rank * local, local, RANK_KV(lk, src),
                              RANK_KV(lv, src), pos + src * local, local, s.B, s.Hq, s.Hkv, s.D);
      attention_merge(o, l, bout, blse, s.B, local, s.Hq, s.D);
    }
    for (int step = 0; step < R; step++) {
      const int src = (rank + R - step) % R;
      attention_backward_block(ldq + (size_t)rank * lnq, ldk + (size_t)src * lnkv, ldv + (size_t)src * lnkv,
                               RANK_Q(lr, rank), o, l, RANK_Q(lq, rank), pos + rank * local, local,
                               RANK_KV(lk, src), RANK_KV(lv, src), pos + src * local, local, s.B, s.Hq, s.Hkv,
                               s.D);
    }
  }

  /* Scatter back to global order as doubles and compare. */
  double *want = malloc(nq * 8);
  float *got = malloc(nq * 4);
  struct {
    const char *name;
    const float *local_buf;
    const float *global;
    size_t row;
  } parts[] = {{"cp out", lout, out, qrow}, {"cp dq", ldq, dq, qrow}, {"cp dk", ldk, dk, kvrow},
               {"cp dv", ldv, dv, kvrow}};
  for (int pi = 0; pi < 4; pi++) {
    const size_t row = parts[pi].row, per_rank = (size_t)s.B * local * row;
    for (int rank = 0; rank < R; rank++)
      for (int b = 0; b < s.B; b++)
        for (int i = 0; i < local; i++) {
          const int t = pos[rank * local + i];
          memcpy(got + ((size_t)b * s.T + t) * row,
                 parts[pi].local_buf + rank * per_rank + ((size_t)b * local + i) * row, row * 4);
        }
    const size_t n = (size_t)s.B * s.T * row;
    for (size_t i = 0; i < n; i++) want[i] = parts[pi].global[i];
    check_close(parts[pi].name, s, got, want, n, 1e-5, 1e-4);
  }
  for (int rank = 0; rank < R; rank++)
    for (int b = 0; b < s.B; b++)
      for (int h = 0; h < s.Hq; h++)
        for (int i = 0; i < local; i++) {
          const float g = llse_all[(size_t)rank * llse + ((size_t)b * s.Hq + h) * local + i];
          const float w = lse[((size_t)b * s.Hq + h) * s.T + pos[rank * local + i]];
          if (!(fabsf(g - w) <= 1e-5f + 1e-5f * fabsf(w))) fail_msg("cp lse: %.7g vs %.7g", g, w);
        }
#undef RANK_Q
#undef RANK_KV
  free(want), free(got), free(pos), free(lq), free(lr), free(lk), free(lv);
  free(lout), free(llse_all), free(bout), free(blse), free(ldq), free(ldk), free(ldv);
  free(out), free(lse), free(dq), free(dk), free(dv);
  free_inputs(&in);
}

/* A block none of whose keys any query can see contributes nothing: out 0,
 * lse -inf (the merge identity), and zero gradients. */
static void test_fully_masked_block(void **state) {
  (void)state;
  const int B = 1, Tq = 5, Tk = 7, Hq = 2, Hkv = 1, D = 16;
  int qpos[5] = {0, 1, 2, 3, 4}, kpos[7] = {5, 6, 7, 8, 9, 10, 11};
  const size_t nq = (size_t)B * Tq * Hq * D, nkv = (size_t)B * Tk * Hkv * D;
  float *q = normal_tensor(nq, 500, 1.0f), *r = normal_tensor(nq, 501, 1.0f);
  float *k = normal_tensor(nkv, 502, 1.0f), *v = normal_tensor(nkv, 503, 1.0f);
  float out[5 * 2 * 16], lse[2 * 5], dq[5 * 2 * 16] = {0}, dk[7 * 16] = {0}, dv[7 * 16] = {0};
  attention_forward_block(out, lse, q, qpos, Tq, k, v, kpos, Tk, B, Hq, Hkv, D);
  for (int i = 0; i < Tq * Hq * D; i++) assert_true(out[i] == 0.0f);
  for (int i = 0; i < Hq * Tq; i++) assert_true(lse[i] == -INFINITY);
  /* Pretend the rows saw other blocks (finite lse) and check the gradient of
   * this one is zero. */
  for (int i = 0; i < Hq * Tq; i++) lse[i] = 0.5f;
  attention_backward_block(dq, dk, dv, r, q, lse, q, qpos, Tq, k, v, kpos, Tk, B, Hq, Hkv, D);
  for (int i = 0; i < Tq * Hq * D; i++) assert_true(dq[i] == 0.0f);
  for (int i = 0; i < Tk * D; i++) assert_true(dk[i] == 0.0f && dv[i] == 0.0f);
  free(q), free(r), free(k), free(v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_forward_matches_reference),  cmocka_unit_test(test_backward_matches_reference),
      cmocka_unit_test(test_backward_finite_differences), cmocka_unit_test(test_causality),
      cmocka_unit_test(test_context_parallel_blocks),     cmocka_unit_test(test_fully_masked_block),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
