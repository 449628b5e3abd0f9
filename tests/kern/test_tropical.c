/* Tropical kernels (src/kern/tropical.h): the fast product and the six
 * tropical convolutions against the plain-loop reference over many shapes
 * (odd sizes, K = 1, fewer rows or outputs than a register tile, several K
 * blocks), with outputs, winners and gradients bit-identical; heavy-tie
 * data and planted ties for the first-index rule; finite differences on
 * tie-free dyadic data (every sum exact, so the numeric gradient is exact);
 * 1 against 2 threads bit-identical; the accumulate contract; shape errors.
 * Built three times (tests/kern/tests.cmake): native ISA, AVX2 and scalar;
 * the ISA a build must run is checked when TROPICAL_EXPECT_ISA is set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <omp.h>
#include <string.h>

#include "kern/kern_test_util.h"
#include "kern/tropical.h"

static int32_t *alloc_i32(size_t n) {
  int32_t *p = calloc(n ? n : 1, sizeof *p);
  if (!p) abort();
  return p;
}

/* Integers in [0, range): exact ties are common. */
static void fill_ints(float *x, size_t n, uint64_t seed, int range) {
  for (size_t i = 0; i < n; i++) x[i] = (float)(int)(rng_uniform(seed, 3, i) * range);
}

#define DYADIC_STEP (1.0f / 4096.0f) /* finite-difference step: a quarter of the smallest gap */

/* Tie-free data for finite differences: an integer in [0, 16) plus a
 * distinct multiple of 2^-10 per candidate index (`tag(i)`), so any two
 * candidates differ by at least 2^-10 and all sums are exact in float. */
static void fill_dyadic(float *x, size_t n, uint64_t seed, size_t tag_period) {
  for (size_t i = 0; i < n; i++) {
    float base = (float)(int)(rng_uniform(seed, 5, i) * 16.0);
    x[i] = tag_period ? base + (float)(i % tag_period) / 1024.0f : base;
  }
}

static void must_ok(int rc, const Error *err) {
  if (rc) fail_msg("%s", err->msg);
}

/* ---------------------------------------------------------------- product */

typedef struct MatCase {
  int m, n, k;
} MatCase;

static const MatCase MAT_CASES[] = {
    {1, 1, 1},    {3, 5, 1},    {1, 16, 7},   {7, 17, 33},   {8, 16, 256},  {9, 15, 257},
    {13, 31, 5},  {2, 40, 600}, {65, 40, 300}, {100, 33, 513}, {17, 8, 1000}, {33, 64, 64},
    {256, 130, 300}, /* large enough for the parallel forward and backward */
};

/* Fast forward (with winners, and value-only) and backward against the
 * reference, bit for bit. */
static void check_matmul(TropicalSemiring sr, const MatCase *c, int ties, int with_bias, uint64_t seed) {
  size_t nx = (size_t)c->m * c->k, nw = (size_t)c->n * c->k, ny = (size_t)c->m * c->n;
  float *x = test_alloc(nx), *w = test_alloc(nw), *b = test_alloc(c->n), *dy = test_alloc(ny);
  if (ties) {
    fill_ints(x, nx, seed, 3), fill_ints(w, nw, seed + 1, 3);
  } else {
    test_fill_normal(x, nx, seed, 1.0f), test_fill_normal(w, nw, seed + 1, 1.0f);
  }
  test_fill_normal(b, c->n, seed + 2, 1.0f), test_fill_normal(dy, ny, seed + 3, 1.0f);
  const float *bias = with_bias ? b : NULL;
  float *y = test_alloc(ny), *y_fast = test_alloc(ny), *ry = test_alloc(ny);
  int32_t *win = alloc_i32(ny), *rwin = alloc_i32(ny);
  float *dx = test_alloc(nx), *dw = test_alloc(nw), *db = test_alloc(c->n);
  float *rdx = test_alloc(nx), *rdw = test_alloc(nw), *rdb = test_alloc(c->n);
  Error err = {0};
  must_ok(tropical_matmul_forward(sr, c->m, c->n, c->k, x, w, bias, y, win, &err), &err);
  must_ok(tropical_matmul_forward(sr, c->m, c->n, c->k, x, w, bias, y_fast, NULL, &err), &err);
  must_ok(tropical_matmul_ref_forward(sr, c->m, c->n, c->k, x, w, bias, ry, rwin, &err), &err);
  must_ok(tropical_matmul_backward(c->m, c->n, c->k, dy, win, dx, dw, db, 0, &err), &err);
  must_ok(tropical_matmul_ref_backward(sr, c->m, c->n, c->k, x, w, dy, rdx, rdw, rdb, &err), &err);
  for (size_t i = 0; i < ny; i++) {
    if (memcmp(&y[i], &ry[i], sizeof y[i]) || memcmp(&y_fast[i], &ry[i], sizeof y[i]) || win[i] != rwin[i])
      fail_msg("%s m%d n%d k%d ties=%d bias=%d: output %zu is %g (value-only %g) winner %d, reference %g winner %d",
               sr ? "min-plus" : "max-plus", c->m, c->n, c->k, ties, with_bias, i, y[i], y_fast[i], win[i], ry[i],
               rwin[i]);
  }
  assert_memory_equal(dx, rdx, nx * sizeof *dx);
  assert_memory_equal(dw, rdw, nw * sizeof *dw);
  assert_memory_equal(db, rdb, c->n * sizeof *db);
  free(x), free(w), free(b), free(dy), free(y), free(y_fast), free(ry), free(win), free(rwin);
  free(dx), free(dw), free(db), free(rdx), free(rdw), free(rdb);
}

static void test_matmul_matches_reference(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof MAT_CASES / sizeof MAT_CASES[0]; i++)
    for (int sr = 0; sr < 2; sr++) {
      check_matmul((TropicalSemiring)sr, &MAT_CASES[i], 0, (int)(i % 2), 100 + i);
      check_matmul((TropicalSemiring)sr, &MAT_CASES[i], 1, (int)(i % 2 == 0), 200 + i);
    }
}

/* The reference's own winners obey the rule: the first k whose candidate
 * equals the output. */
static void test_matmul_first_index_rule(void **state) {
  (void)state;
  const int m = 11, n = 37, k = 45;
  float *x = test_alloc((size_t)m * k), *w = test_alloc((size_t)n * k), *y = test_alloc((size_t)m * n);
  int32_t *win = alloc_i32((size_t)m * n);
  Error err = {0};
  for (int sr = 0; sr < 2; sr++) {
    fill_ints(x, (size_t)m * k, 7, 2), fill_ints(w, (size_t)n * k, 8, 2);
    must_ok(tropical_matmul_forward((TropicalSemiring)sr, m, n, k, x, w, NULL, y, win, &err), &err);
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) {
        int first = -1;
        for (int kk = 0; kk < k && first < 0; kk++)
          if (x[i * k + kk] + w[j * k + kk] == y[i * n + j]) first = kk;
        assert_int_equal(win[i * n + j], first);
      }
    /* Planted: every candidate 0 except two equal best ones at 5 and 37. */
    memset(x, 0, (size_t)m * k * sizeof *x);
    for (int j = 0; j < n; j++)
      for (int kk = 0; kk < k; kk++) w[j * k + kk] = (kk == 5 || kk == 37) ? (sr ? -1.0f : 1.0f) : 0.0f;
    must_ok(tropical_matmul_forward((TropicalSemiring)sr, m, n, k, x, w, NULL, y, win, &err), &err);
    for (int i = 0; i < m * n; i++) assert_int_equal(win[i], 5);
    /* All equal: index 0; all -inf (max-plus): no candidate beats the start, index 0. */
    memset(w, 0, (size_t)n * k * sizeof *w);
    if (!sr)
      for (int i = 0; i < m * k; i++) x[i] = -INFINITY;
    must_ok(tropical_matmul_forward((TropicalSemiring)sr, m, n, k, x, w, NULL, y, win, &err), &err);
    for (int i = 0; i < m * n; i++) assert_int_equal(win[i], 0);
  }
  free(x), free(w), free(y), free(win);
}

/* NaN candidates never win (in every chunk position; a row of only NaN,
 * or of NaN then the start value, has winner 0): fast winners and values
 * equal the reference's. */
static void test_matmul_nan_never_wins(void **state) {
  (void)state;
  const int m = 19, n = 21, k = 77;
  float *x = test_alloc((size_t)m * k), *w = test_alloc((size_t)n * k), *y = test_alloc((size_t)m * n);
  float *ry = test_alloc((size_t)m * n);
  int32_t *win = alloc_i32((size_t)m * n), *rwin = alloc_i32((size_t)m * n);
  Error err = {0};
  for (int sr = 0; sr < 2; sr++) {
    test_fill_normal(x, (size_t)m * k, 31, 1.0f), test_fill_normal(w, (size_t)n * k, 32, 1.0f);
    for (int i = 0; i < m * k; i++)
      if (i % 5 == 0 || i / k == 3) x[i] = NAN; /* row 3: all NaN */
    for (int i = 0; i < k; i++) x[5 * k + i] = i ? (sr ? INFINITY : -INFINITY) : NAN; /* row 5: none beats the start */
    must_ok(tropical_matmul_forward((TropicalSemiring)sr, m, n, k, x, w, NULL, y, win, &err), &err);
    must_ok(tropical_matmul_ref_forward((TropicalSemiring)sr, m, n, k, x, w, NULL, ry, rwin, &err), &err);
    for (int i = 0; i < m * n; i++) {
      assert_int_equal(win[i], rwin[i]);
      assert_memory_equal(&y[i], &ry[i], sizeof y[i]);
    }
    assert_int_equal(win[3 * n], 0);
    assert_int_equal(win[5 * n], 0);
  }
  free(x), free(w), free(y), free(ry), free(win), free(rwin);
}

typedef struct MatFd {
  TropicalSemiring sr;
  int m, n, k;
  float *x, *w, *b, *y, *r;
} MatFd;

static double matmul_loss(void *ctx) {
  MatFd *f = ctx;
  Error err = {0};
  if (tropical_matmul_forward(f->sr, f->m, f->n, f->k, f->x, f->w, f->b, f->y, NULL, &err)) fail_msg("%s", err.msg);
  return test_dot_loss(f->y, f->r, (size_t)f->m * f->n);
}

static void test_matmul_gradcheck(void **state) {
  (void)state;
  for (int sr = 0; sr < 2; sr++) {
    MatFd f = {(TropicalSemiring)sr, 9, 21, 40, NULL, NULL, NULL, NULL, NULL};
    size_t nx = (size_t)f.m * f.k, nw = (size_t)f.n * f.k, ny = (size_t)f.m * f.n;
    f.x = test_alloc(nx), f.w = test_alloc(nw), f.b = test_alloc(f.n), f.y = test_alloc(ny), f.r = test_alloc(ny);
    fill_dyadic(f.x, nx, 31 + sr, 0), fill_dyadic(f.w, nw, 41 + sr, (size_t)f.k);
    fill_dyadic(f.b, f.n, 51, 0);
    test_fill_normal(f.r, ny, 61, 1.0f);
    int32_t *win = alloc_i32(ny);
    float *dx = test_alloc(nx), *dw = test_alloc(nw), *db = test_alloc(f.n);
    Error err = {0};
    must_ok(tropical_matmul_forward(f.sr, f.m, f.n, f.k, f.x, f.w, f.b, f.y, win, &err), &err);
    must_ok(tropical_matmul_backward(f.m, f.n, f.k, f.r, win, dx, dw, db, 0, &err), &err);
    double ex = test_gradcheck(f.x, dx, nx, matmul_loss, &f, DYADIC_STEP, 200);
    double ew = test_gradcheck(f.w, dw, nw, matmul_loss, &f, DYADIC_STEP, 200);
    double eb = test_gradcheck(f.b, db, f.n, matmul_loss, &f, DYADIC_STEP, 200);
    if (!(ex < 1e-5 && ew < 1e-5 && eb < 1e-5))
      fail_msg("%s finite differences: dx %.3g dw %.3g db %.3g", sr ? "min-plus" : "max-plus", ex, ew, eb);
    free(f.x), free(f.w), free(f.b), free(f.y), free(f.r), free(win), free(dx), free(dw), free(db);
  }
}

/* accumulate = 1 adds the same gradient onto what was there. */
static void test_matmul_accumulate(void **state) {
  (void)state;
  const int m = 19, n = 23, k = 29;
  size_t nx = (size_t)m * k, nw = (size_t)n * k;
  float *x = test_alloc(nx), *w = test_alloc(nw), *y = test_alloc((size_t)m * n), *dy = test_alloc((size_t)m * n);
  int32_t *win = alloc_i32((size_t)m * n);
  float *dx = test_alloc(nx), *dw = test_alloc(nw), *db = test_alloc(n);
  float *dx1 = test_alloc(nx), *dw1 = test_alloc(nw), *db1 = test_alloc(n);
  test_fill_normal(x, nx, 1, 1.0f), test_fill_normal(w, nw, 2, 1.0f), test_fill_normal(dy, (size_t)m * n, 3, 1.0f);
  test_fill_normal(dx1, nx, 4, 1.0f), test_fill_normal(dw1, nw, 5, 1.0f), test_fill_normal(db1, n, 6, 1.0f);
  Error err = {0};
  must_ok(tropical_matmul_forward(TROPICAL_MAX_PLUS, m, n, k, x, w, NULL, y, win, &err), &err);
  must_ok(tropical_matmul_backward(m, n, k, dy, win, dx, dw, db, 0, &err), &err);
  double *want_x = test_alloc_d(nx), *want_w = test_alloc_d(nw), *want_b = test_alloc_d(n);
  for (size_t i = 0; i < nx; i++) want_x[i] = (double)dx1[i] + dx[i];
  for (size_t i = 0; i < nw; i++) want_w[i] = (double)dw1[i] + dw[i];
  for (int i = 0; i < n; i++) want_b[i] = (double)db1[i] + db[i];
  must_ok(tropical_matmul_backward(m, n, k, dy, win, dx1, dw1, db1, 1, &err), &err);
  assert_true(test_rel_err(dx1, want_x, nx, 1.0) < 1e-6);
  assert_true(test_rel_err(dw1, want_w, nw, 1.0) < 1e-6);
  assert_true(test_rel_err(db1, want_b, n, 1.0) < 1e-6);
  free(want_x), free(want_w), free(want_b);
  free(x), free(w), free(y), free(dy), free(win), free(dx), free(dw), free(db), free(dx1), free(dw1), free(db1);
}

/* ------------------------------------------------------------ convolution */

typedef struct ConvCase {
  int batch, cin, h, w, cout, kh, kw, sh, sw, ph, pw;
} ConvCase;

static const ConvCase CONV_CASES[] = {
    {1, 1, 5, 5, 1, 3, 3, 1, 1, 0, 0},   {2, 3, 9, 8, 5, 3, 3, 1, 1, 1, 1},   {3, 1, 28, 28, 4, 3, 3, 2, 2, 1, 1},
    {2, 4, 14, 14, 4, 3, 3, 2, 2, 1, 1}, {1, 6, 14, 13, 16, 5, 5, 1, 1, 2, 2}, {2, 2, 7, 6, 17, 1, 1, 1, 1, 0, 0},
    {1, 5, 11, 10, 33, 5, 3, 2, 1, 2, 1}, {1, 3, 6, 9, 7, 2, 4, 3, 2, 1, 3},
};

static TropicalConvShape conv_shape(const ConvCase *c, int inner, int outer) {
  TropicalConvShape s = {c->batch, c->cin, c->h, c->w, c->cout, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw,
                         (TropicalInner)inner, (TropicalOuter)outer};
  return s;
}

typedef struct ConvBufs {
  size_t nx, nw, ny, nwin;
  float *x, *w, *y, *dy, *dx, *dw;
  int32_t *win;
} ConvBufs;

static void conv_bufs_init(ConvBufs *b, const TropicalConvShape *s) {
  b->nx = tropical_conv2d_input_count(s), b->nw = tropical_conv2d_weight_count(s);
  b->ny = tropical_conv2d_output_count(s), b->nwin = tropical_conv2d_winner_count(s);
  assert_true(b->nx && b->nw && b->ny && b->nwin);
  b->x = test_alloc(b->nx), b->w = test_alloc(b->nw), b->y = test_alloc(b->ny), b->dy = test_alloc(b->ny);
  b->dx = test_alloc(b->nx), b->dw = test_alloc(b->nw), b->win = alloc_i32(b->nwin);
}

static void conv_bufs_free(ConvBufs *b) {
  free(b->x), free(b->w), free(b->y), free(b->dy), free(b->dx), free(b->dw), free(b->win);
}

static void describe(const TropicalConvShape *s, char *buf, size_t n) {
  snprintf(buf, n, "%s N%d C%d->%d %dx%d k%dx%d s%dx%d p%dx%d", tropical_conv2d_variant_name(s->inner, s->outer),
           s->batch, s->in_channels, s->out_channels, s->in_h, s->in_w, s->kernel_h, s->kernel_w, s->stride_h,
           s->stride_w, s->pad_h, s->pad_w);
}

static void check_conv(const TropicalConvShape *s, int ties, uint64_t seed) {
  ConvBufs f, r;
  conv_bufs_init(&f, s), conv_bufs_init(&r, s);
  if (ties) {
    fill_ints(f.x, f.nx, seed, 3), fill_ints(f.w, f.nw, seed + 1, 3);
  } else {
    test_fill_normal(f.x, f.nx, seed, 1.0f), test_fill_uniform(f.w, f.nw, seed + 1, 0.0f, 1.0f);
  }
  test_fill_normal(f.dy, f.ny, seed + 2, 1.0f);
  Error err = {0};
  char d[160];
  describe(s, d, sizeof d);
  if (tropical_conv2d_forward(s, f.x, f.w, f.y, f.win, &err)) fail_msg("%s: %s", d, err.msg);
  must_ok(tropical_conv2d_backward(s, f.dy, f.win, f.dx, f.dw, 0, &err), &err);
  must_ok(tropical_conv2d_ref_forward(s, f.x, f.w, r.y, r.win, &err), &err);
  must_ok(tropical_conv2d_ref_backward(s, f.x, f.w, f.dy, r.dx, r.dw, &err), &err);
  for (size_t i = 0; i < f.ny; i++)
    if (memcmp(&f.y[i], &r.y[i], sizeof f.y[i]))
      fail_msg("%s ties=%d: y[%zu] %g, reference %g", d, ties, i, f.y[i], r.y[i]);
  for (size_t i = 0; i < f.nwin; i++)
    if (f.win[i] != r.win[i]) fail_msg("%s ties=%d: winner[%zu] %d, reference %d", d, ties, i, f.win[i], r.win[i]);
  for (size_t i = 0; i < f.nx; i++)
    if (memcmp(&f.dx[i], &r.dx[i], sizeof f.dx[i]))
      fail_msg("%s ties=%d: dx[%zu] %g, reference %g", d, ties, i, f.dx[i], r.dx[i]);
  for (size_t i = 0; i < f.nw; i++)
    if (memcmp(&f.dw[i], &r.dw[i], sizeof f.dw[i]))
      fail_msg("%s ties=%d: dw[%zu] %g, reference %g", d, ties, i, f.dw[i], r.dw[i]);
  conv_bufs_free(&f), conv_bufs_free(&r);
}

static void test_conv_matches_reference(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof CONV_CASES / sizeof CONV_CASES[0]; i++)
    for (int inner = 0; inner < 2; inner++)
      for (int outer = 0; outer < 3; outer++) {
        TropicalConvShape s = conv_shape(&CONV_CASES[i], inner, outer);
        check_conv(&s, 0, 300 + i);
        check_conv(&s, 1, 400 + i);
      }
}

/* Planted ties, x = 0 (padded taps are 0 too), 3 channels, 3x3 window:
 * channel 1 has equal best taps 4 and 7, channel 2 its best at 4 equal to
 * channel 1's, channel 0 is flat and loses an outer max/min. Inner winners
 * 0, 4, 4; outer winner channel 1, tap 4 (flat index 13). */
static void test_conv_first_index_rule(void **state) {
  (void)state;
  for (int inner = 0; inner < 2; inner++)
    for (int outer = 0; outer < 3; outer++) {
      TropicalConvShape s = {2, 3, 5, 6, 3, 3, 3, 1, 1, 1, 1, (TropicalInner)inner, (TropicalOuter)outer};
      ConvBufs b, r;
      conv_bufs_init(&b, &s), conv_bufs_init(&r, &s);
      float best = inner ? -1.0f : 1.0f;
      float flat = outer == TROPICAL_OUTER_MAX ? best - 1.0f : outer == TROPICAL_OUTER_MIN ? best + 1.0f : 0.0f;
      for (int o = 0; o < 3; o++) {
        float *wo = b.w + o * 27;
        for (int t = 0; t < 9; t++) wo[t] = flat;
        wo[9 + 4] = wo[9 + 7] = wo[18 + 4] = best;
      }
      Error err = {0};
      must_ok(tropical_conv2d_forward(&s, b.x, b.w, b.y, b.win, &err), &err);
      must_ok(tropical_conv2d_ref_forward(&s, b.x, b.w, r.y, r.win, &err), &err);
      size_t pixels = b.ny / 6;
      for (size_t i = 0; i < b.nwin; i++) {
        int want = 13;
        if (outer == TROPICAL_OUTER_SUM) want = i / b.ny == 0 ? 0 : 4; /* [c][o][q], 3 x 3 x ny / 3 */
        if (b.win[i] != want || r.win[i] != want)
          fail_msg("%s: winner[%zu] %d (reference %d), expected %d (%zu pixels)",
                   tropical_conv2d_variant_name(s.inner, s.outer), i, b.win[i], r.win[i], want, pixels);
      }
      conv_bufs_free(&b), conv_bufs_free(&r);
    }
}

typedef struct ConvFd {
  TropicalConvShape s;
  ConvBufs *b;
} ConvFd;

static double conv_loss(void *ctx) {
  ConvFd *f = ctx;
  Error err = {0};
  if (tropical_conv2d_forward(&f->s, f->b->x, f->b->w, f->b->y, f->b->win, &err)) fail_msg("%s", err.msg);
  return test_dot_loss(f->b->y, f->b->dy, f->b->ny);
}

static void test_conv_gradcheck(void **state) {
  (void)state;
  const ConvCase cases[] = {{2, 3, 7, 6, 5, 3, 3, 2, 1, 1, 1}, {1, 2, 6, 6, 17, 3, 3, 1, 1, 1, 1}};
  for (size_t ci = 0; ci < 2; ci++)
    for (int inner = 0; inner < 2; inner++)
      for (int outer = 0; outer < 3; outer++) {
        ConvFd f = {conv_shape(&cases[ci], inner, outer), NULL};
        ConvBufs b;
        conv_bufs_init(&b, &f.s);
        f.b = &b;
        int tags = f.s.in_channels * f.s.kernel_h * f.s.kernel_w;
        fill_dyadic(b.x, b.nx, 71 + ci, 0), fill_dyadic(b.w, b.nw, 81 + ci, (size_t)tags);
        test_fill_normal(b.dy, b.ny, 91, 1.0f);
        Error err = {0};
        must_ok(tropical_conv2d_forward(&f.s, b.x, b.w, b.y, b.win, &err), &err);
        must_ok(tropical_conv2d_backward(&f.s, b.dy, b.win, b.dx, b.dw, 0, &err), &err);
        double ex = test_gradcheck(b.x, b.dx, b.nx, conv_loss, &f, DYADIC_STEP, 150);
        double ew = test_gradcheck(b.w, b.dw, b.nw, conv_loss, &f, DYADIC_STEP, 150);
        char d[160];
        describe(&f.s, d, sizeof d);
        if (!(ex < 1e-5 && ew < 1e-5)) fail_msg("%s finite differences: dx %.3g dw %.3g", d, ex, ew);
        conv_bufs_free(&b);
      }
}

/* accumulate = 1 adds onto what was there. */
static void test_conv_accumulate(void **state) {
  (void)state;
  TropicalConvShape s = conv_shape(&CONV_CASES[1], 0, 0);
  for (int outer = 0; outer < 3; outer++) {
    s.outer = (TropicalOuter)outer;
    ConvBufs b;
    conv_bufs_init(&b, &s);
    test_fill_normal(b.x, b.nx, 1, 1.0f), test_fill_normal(b.w, b.nw, 2, 1.0f), test_fill_normal(b.dy, b.ny, 3, 1.0f);
    float *dx1 = test_alloc(b.nx), *dw1 = test_alloc(b.nw);
    test_fill_normal(dx1, b.nx, 4, 1.0f), test_fill_normal(dw1, b.nw, 5, 1.0f);
    double *wx = test_alloc_d(b.nx), *ww = test_alloc_d(b.nw);
    Error err = {0};
    must_ok(tropical_conv2d_forward(&s, b.x, b.w, b.y, b.win, &err), &err);
    must_ok(tropical_conv2d_backward(&s, b.dy, b.win, b.dx, b.dw, 0, &err), &err);
    for (size_t i = 0; i < b.nx; i++) wx[i] = (double)dx1[i] + b.dx[i];
    for (size_t i = 0; i < b.nw; i++) ww[i] = (double)dw1[i] + b.dw[i];
    must_ok(tropical_conv2d_backward(&s, b.dy, b.win, dx1, dw1, 1, &err), &err);
    assert_true(test_rel_err(dx1, wx, b.nx, 1.0) < 1e-6);
    assert_true(test_rel_err(dw1, ww, b.nw, 1.0) < 1e-6);
    free(dx1), free(dw1), free(wx), free(ww);
    conv_bufs_free(&b);
  }
}

/* -------------------------------------------------------- threads, errors */

static void test_threads_bit_identical(void **state) {
  (void)state;
  const int m = 256, n = 160, k = 300; /* above the backward's parallel threshold (m n > 3e4) */
  size_t nx = (size_t)m * k, nw = (size_t)n * k, ny = (size_t)m * n;
  float *x = test_alloc(nx), *w = test_alloc(nw), *b = test_alloc(n), *dy = test_alloc(ny);
  test_fill_normal(x, nx, 1, 1.0f), test_fill_normal(w, nw, 2, 1.0f), test_fill_normal(b, n, 3, 1.0f);
  test_fill_normal(dy, ny, 4, 1.0f);
  float *y[2], *dx[2], *dw[2], *db[2];
  int32_t *win[2];
  TropicalConvShape cs = {4, 3, 16, 15, 20, 3, 3, 1, 1, 1, 1, TROPICAL_INNER_MAX, TROPICAL_OUTER_SUM};
  ConvBufs cb[2];
  Error err = {0};
  int saved = omp_get_max_threads();
  for (int t = 0; t < 2; t++) {
    omp_set_num_threads(t + 1);
    y[t] = test_alloc(ny), dx[t] = test_alloc(nx), dw[t] = test_alloc(nw), db[t] = test_alloc(n);
    win[t] = alloc_i32(ny);
    must_ok(tropical_matmul_forward(TROPICAL_MIN_PLUS, m, n, k, x, w, b, y[t], win[t], &err), &err);
    must_ok(tropical_matmul_backward(m, n, k, dy, win[t], dx[t], dw[t], db[t], 0, &err), &err);
    conv_bufs_init(&cb[t], &cs);
    test_fill_normal(cb[t].x, cb[t].nx, 5, 1.0f), test_fill_normal(cb[t].w, cb[t].nw, 6, 1.0f);
    test_fill_normal(cb[t].dy, cb[t].ny, 7, 1.0f);
    must_ok(tropical_conv2d_forward(&cs, cb[t].x, cb[t].w, cb[t].y, cb[t].win, &err), &err);
    must_ok(tropical_conv2d_backward(&cs, cb[t].dy, cb[t].win, cb[t].dx, cb[t].dw, 0, &err), &err);
  }
  omp_set_num_threads(saved);
  assert_memory_equal(y[0], y[1], ny * sizeof(float));
  assert_memory_equal(win[0], win[1], ny * sizeof(int32_t));
  assert_memory_equal(dx[0], dx[1], nx * sizeof(float));
  assert_memory_equal(dw[0], dw[1], nw * sizeof(float));
  assert_memory_equal(db[0], db[1], n * sizeof(float));
  assert_memory_equal(cb[0].y, cb[1].y, cb[0].ny * sizeof(float));
  assert_memory_equal(cb[0].win, cb[1].win, cb[0].nwin * sizeof(int32_t));
  assert_memory_equal(cb[0].dx, cb[1].dx, cb[0].nx * sizeof(float));
  assert_memory_equal(cb[0].dw, cb[1].dw, cb[0].nw * sizeof(float));
  for (int t = 0; t < 2; t++) {
    free(y[t]), free(dx[t]), free(dw[t]), free(db[t]), free(win[t]);
    conv_bufs_free(&cb[t]);
  }
  free(x), free(w), free(b), free(dy);
}

static void test_errors(void **state) {
  (void)state;
  Error err = {0};
  float v = 0.0f;
  int32_t i = 0;
  assert_int_equal(tropical_matmul_forward(TROPICAL_MAX_PLUS, 1, 0, 1, &v, &v, NULL, &v, &i, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "n=0"));
  assert_int_equal(tropical_matmul_forward((TropicalSemiring)7, 1, 1, 1, &v, &v, NULL, &v, &i, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "semiring"));
  TropicalConvShape s = {1, 1, 5, 5, 1, 3, 3, 0, 1, 0, 0, TROPICAL_INNER_MAX, TROPICAL_OUTER_SUM};
  assert_int_equal(tropical_conv2d_output_size(&s, NULL, NULL, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "stride_h = 0"));
  s.stride_h = 1, s.pad_w = 3;
  assert_int_equal(tropical_conv2d_output_size(&s, NULL, NULL, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "pad"));
  s.pad_w = 0, s.in_h = 2;
  assert_int_equal(tropical_conv2d_output_size(&s, NULL, NULL, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "smaller than the kernel"));
  s.in_h = 5, s.outer = (TropicalOuter)3;
  assert_int_equal(tropical_conv2d_output_size(&s, NULL, NULL, &err), ERR_ARG);
  assert_int_equal(tropical_conv2d_output_count(&s), 0);
  s.outer = TROPICAL_OUTER_SUM;
  assert_int_equal(tropical_conv2d_forward(&s, &v, &v, &v, NULL, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "winner"));
}

int main(void) {
  const char *expect = getenv("TROPICAL_EXPECT_ISA");
  printf("tropical kernels: %s path\n", tropical_isa());
  if (expect && strcmp(expect, tropical_isa())) {
    printf("expected the %s path\n", expect);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_matches_reference), cmocka_unit_test(test_matmul_first_index_rule),
      cmocka_unit_test(test_matmul_nan_never_wins),
      cmocka_unit_test(test_matmul_gradcheck),         cmocka_unit_test(test_matmul_accumulate),
      cmocka_unit_test(test_conv_matches_reference),   cmocka_unit_test(test_conv_first_index_rule),
      cmocka_unit_test(test_conv_gradcheck),           cmocka_unit_test(test_conv_accumulate),
      cmocka_unit_test(test_threads_bit_identical),    cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
