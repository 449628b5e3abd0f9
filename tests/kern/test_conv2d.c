/* conv2d and conv_transpose2d on oneDNN: every pass against the direct
 * double-precision reference over a grid of shapes (stride, padding,
 * dilation, groups, odd sizes, 1x1 kernels, batch 1 and 3), once with the
 * few-channel shapes on the direct kernels and once with every shape on
 * oneDNN, the accumulate contract, channels-last (NHWC) tensors in every
 * combination of x and y layouts (oneDNN's kernels on the caller's memory,
 * views, the bias gradient), finite-difference gradient checks of all
 * three passes in both directions, bf16 within an element-wise error
 * bound, the primitive cache (repeated calls create nothing; concurrent
 * calls), and the errors for shapes that are not convolutions. Under
 * ONEDNN_MAX_CPU_ISA=AVX2 (ctest kern.conv2d_avx2) the same checks run on
 * oneDNN's AVX2 kernels and bf16 must be refused. The direct kernels have
 * their own test (test_conv2d_direct.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

#include "kern/conv2d.h"
#include "kern/conv2d_test_util.h"
#include "kern/kern_test_util.h"

typedef struct ConvTensors {
  Conv2dShape s;
  size_t nx, ny, nw;
  float *x, *w, *b, *y, *r;
} ConvTensors;

static void tensors_init(ConvTensors *t, const Conv2dShape *s, uint64_t seed) {
  t->s = *s;
  t->nx = conv2d_input_count(s), t->ny = conv2d_output_count(s), t->nw = conv2d_weight_count(s);
  assert_true(t->nx > 0 && t->ny > 0 && t->nw > 0);
  t->x = test_alloc(t->nx), t->w = test_alloc(t->nw), t->b = test_alloc(s->out_channels);
  t->y = test_alloc(t->ny), t->r = test_alloc(t->ny);
  test_fill_normal(t->x, t->nx, seed, 1.0f);
  test_fill_normal(t->w, t->nw, seed + 1, 0.5f);
  test_fill_normal(t->b, s->out_channels, seed + 2, 1.0f);
  test_fill_normal(t->r, t->ny, seed + 3, 1.0f);
}

static void tensors_free(ConvTensors *t) { free(t->x), free(t->w), free(t->b), free(t->y), free(t->r); }

static void describe(const Conv2dShape *s, char *buf, size_t n) {
  snprintf(buf, n, "%s N%d C%d->%d %dx%d k%dx%d s%d p%d d%d g%d op%d", s->transposed ? "convT" : "conv", s->batch,
           s->in_channels, s->out_channels, s->in_h, s->in_w, s->kernel_h, s->kernel_w, s->stride_h, s->pad_h,
           s->dilation_h, s->groups, s->output_pad_h);
}

static void must_ok(int rc, const Error *err, const Conv2dShape *s) {
  if (rc) {
    char d[160];
    describe(s, d, sizeof d);
    fail_msg("%s: %s", d, err->msg);
  }
}

/* All three passes of one shape in fp32 against the reference; with
 * `accumulate`, the backward passes also add onto a prior value. */
static double check_shape_fp32(const Conv2dShape *s, uint64_t seed, int accumulate) {
  ConvTensors t;
  tensors_init(&t, s, seed);
  Error err = {0};
  double *ry = test_alloc_d(t.ny), *rdx = test_alloc_d(t.nx), *rdw = test_alloc_d(t.nw);
  double *rdb = test_alloc_d(s->out_channels);
  float *dx = test_alloc(t.nx), *dw = test_alloc(t.nw), *db = test_alloc(s->out_channels);
  float *dx0 = test_alloc(t.nx), *dw0 = test_alloc(t.nw), *db0 = test_alloc(s->out_channels);
  test_fill_normal(dx0, t.nx, seed + 10, 1.0f);
  test_fill_normal(dw0, t.nw, seed + 11, 1.0f);
  test_fill_normal(db0, s->out_channels, seed + 12, 1.0f);
  memcpy(dx, dx0, t.nx * sizeof *dx), memcpy(dw, dw0, t.nw * sizeof *dw);
  memcpy(db, db0, s->out_channels * sizeof *db);
  must_ok(conv2d_forward(s, CONV2D_FP32, t.y, t.x, t.w, t.b, &err), &err, s);
  must_ok(conv2d_backward_data(s, CONV2D_FP32, dx, t.r, t.w, accumulate, &err), &err, s);
  must_ok(conv2d_backward_weights(s, CONV2D_FP32, dw, db, t.r, t.x, accumulate, &err), &err, s);
  must_ok(conv2d_ref_forward(s, ry, t.x, t.w, t.b, &err), &err, s);
  must_ok(conv2d_ref_backward_data(s, rdx, t.r, t.w, &err), &err, s);
  must_ok(conv2d_ref_backward_weights(s, rdw, rdb, t.r, t.x, &err), &err, s);
  if (accumulate) {
    for (size_t i = 0; i < t.nx; i++) rdx[i] += dx0[i];
    for (size_t i = 0; i < t.nw; i++) rdw[i] += dw0[i];
    for (int i = 0; i < s->out_channels; i++) rdb[i] += db0[i];
  }
  double e[4] = {test_rel_err(t.y, ry, t.ny, 1.0), test_rel_err(dx, rdx, t.nx, 1.0),
                 test_rel_err(dw, rdw, t.nw, 1.0), test_rel_err(db, rdb, s->out_channels, 1.0)};
  double worst = 0.0;
  for (int i = 0; i < 4; i++) worst = e[i] > worst || isnan(e[i]) ? (isnan(e[i]) ? INFINITY : e[i]) : worst;
  if (worst > 1e-5) {
    char d[160];
    describe(s, d, sizeof d);
    print_message("%s acc %d: y %.3g dx %.3g dw %.3g db %.3g\n", d, accumulate, e[0], e[1], e[2], e[3]);
  }
  tensors_free(&t);
  free(ry), free(rdx), free(rdw), free(rdb), free(dx), free(dw), free(db), free(dx0), free(dw0), free(db0);
  return worst;
}

static Conv2dShape make_shape(int transposed, int k_h, int k_w, int stride, int pad, int dil, int groups,
                              int batch) {
  Conv2dShape s = conv2d_shape_default();
  s.transposed = transposed, s.batch = batch, s.groups = groups;
  s.in_channels = transposed ? 8 : 4, s.out_channels = transposed ? 4 : 8;
  s.in_h = transposed ? 4 : 9, s.in_w = transposed ? 5 : 6; /* odd and even, not square */
  s.kernel_h = k_h, s.kernel_w = k_w, s.stride_h = s.stride_w = stride, s.pad_h = s.pad_w = pad;
  s.dilation_h = s.dilation_w = dil;
  /* Output padding where the transposed shape allows one: PyTorch's way
   * to pick among the input sizes a strided conv maps to one output. */
  if (transposed && (stride > 1 || dil > 1)) s.output_pad_h = 1;
  return s;
}

static void test_conv2d_matches_reference_over_shapes(void **state) {
  (void)state;
  static const int kernels[][2] = {{3, 3}, {1, 1}, {2, 3}};
  for (int direct = 1; direct >= 0; direct--) {
  conv2d_set_direct(direct);
  int cases = 0, on_direct = 0;
  double worst = 0.0;
  for (int tr = 0; tr < 2; tr++)
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++)
      for (int stride = 1; stride <= 2; stride++)
        for (int pad = 0; pad <= 2; pad++)
          for (int dil = 1; dil <= 2; dil++)
            for (int groups = 1; groups <= 4; groups *= 2) {
              int batch = 1 + 2 * (cases % 2);
              Conv2dShape s = make_shape(tr, kernels[k][0], kernels[k][1], stride, pad, dil, groups, batch);
              if (conv2d_output_count(&s) == 0) continue; /* padding not below the kernel extent */
              double e = check_shape_fp32(&s, 100 + cases, cases % 3 == 0);
              if (e > worst) worst = e;
              on_direct += conv2d_uses_direct(&s, CONV2D_FP32, CONV2D_PASS_BACKWARD_DATA);
              cases++;
            }
  print_message("conv2d fp32 vs reference: %d shapes (%d on the direct kernels), worst rel err %.3g\n", cases,
                on_direct, worst);
  assert_true(cases > 150);
  assert_true(worst < 1e-5);
  /* the few-channel stride-1 shapes go direct, and only while allowed */
  assert_true(direct ? on_direct > 10 : on_direct == 0);
  }
  conv2d_set_direct(1);
}

/* Channels-last and blocked tensors on oneDNN's kernels: every
 * combination of x and y layouts (blocked where a side has a multiple of
 * 16 channels) over convolutions and transposed convolutions (strided, a
 * view of the big side, groups), with the bias and the accumulate
 * contract. */
static void test_conv2d_layouts(void **state) {
  (void)state;
  conv2d_set_direct(0); /* the few-channel shapes too: oneDNN's own NHWC paths */
  Conv2dShape shapes[7];
  shapes[0] = make_shape(0, 3, 3, 1, 1, 1, 1, 2);
  shapes[0].in_channels = 16, shapes[0].out_channels = 32, shapes[0].in_h = 7, shapes[0].in_w = 6;
  shapes[1] = make_shape(0, 3, 3, 2, 1, 1, 1, 3); /* floor skips the last row: a view of x */
  shapes[2] = make_shape(1, 3, 3, 2, 1, 1, 2, 2); /* output padding: a view of y */
  shapes[3] = make_shape(0, 7, 7, 1, 3, 1, 1, 2);
  shapes[3].in_channels = 32, shapes[3].out_channels = 1, shapes[3].in_h = shapes[3].in_w = 9;
  shapes[4] = make_shape(0, 2, 3, 1, 0, 2, 1, 1);
  shapes[5] = shapes[1]; /* a view of a blocked x */
  shapes[5].in_channels = 16, shapes[5].out_channels = 32;
  shapes[6] = shapes[2]; /* a view of a blocked y */
  shapes[6].in_channels = 32, shapes[6].out_channels = 16;
  int cases = 0, blocked = 0;
  double worst = 0.0;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int xl = CONV2D_NCHW; xl <= CONV2D_NCHW16C; xl++)
      for (int yl = CONV2D_NCHW; yl <= CONV2D_NCHW16C; yl++) {
        Conv2dShape s = shapes[i];
        s.x_layout = xl, s.y_layout = yl;
        if ((xl == CONV2D_NCHW16C && s.in_channels % 16) || (yl == CONV2D_NCHW16C && s.out_channels % 16)) continue;
        double e = conv_test_check_layouts(&s, 800 + 10 * i + 3 * xl + yl, (xl + yl) % 2);
        worst = e > worst ? e : worst;
        blocked += xl == CONV2D_NCHW16C || yl == CONV2D_NCHW16C;
        cases++;
      }
  conv2d_set_direct(1);
  print_message("conv2d NHWC and blocked layouts on oneDNN: %d cases (%d blocked), worst rel err %.3g\n", cases,
                blocked, worst);
  assert_true(blocked >= 15);
  assert_true(worst < 1e-5);
}

/* The forward's epilogue (the sum and ReLU post-ops) on oneDNN: every
 * combination over convolutions (Winograd too) and a transposed one whose
 * view leaves rows no tap reaches, in NCHW, NHWC and blocked tensors. */
static void test_conv2d_forward_epilogue(void **state) {
  (void)state;
  conv2d_set_direct(0);
  Conv2dShape shapes[3];
  shapes[0] = make_shape(0, 3, 3, 1, 1, 1, 1, 2);
  shapes[0].in_channels = 16, shapes[0].out_channels = 32, shapes[0].in_h = 9, shapes[0].in_w = 8;
  shapes[1] = shapes[0];
  shapes[1].winograd = 1;
  shapes[2] = make_shape(1, 3, 3, 2, 1, 1, 1, 2); /* output padding: rows outside the view */
  shapes[2].in_channels = 16, shapes[2].out_channels = 16;
  double worst = 0.0;
  int cases = 0;
  for (int i = 0; i < 3; i++)
    for (int layout = CONV2D_NCHW; layout <= CONV2D_NCHW16C; layout++)
      for (int e = 1; e < 4; e++) {
        Conv2dShape s = shapes[i];
        s.x_layout = s.y_layout = layout;
        double err = conv_test_check_epilogue(&s, 1200 + 12 * i + 4 * layout + e, (Conv2dEpilogue){e & 1, e >> 1});
        worst = err > worst ? err : worst;
        cases++;
      }
  conv2d_set_direct(1);
  print_message("conv2d forward epilogue on oneDNN: %d cases, worst rel err %.3g\n", cases, worst);
  assert_true(worst < 1e-5);
}

/* Winograd F(4x4, 3x3): every pass against the reference, in every
 * layout, within a bound looser than the direct kernels' (the transforms
 * round terms of different sizes); that the shapes really ran Winograd
 * (the bound would not tell), and that one without it ignores the hint.
 * Under the AVX2 cap oneDNN has no Winograd: every shape runs direct. */
/* Whether oneDNN can run Winograd here: AVX-512, and not capped to AVX2. */
static int winograd_possible(void) {
  const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
  return !(cap && !strcmp(cap, "AVX2")) && __builtin_cpu_supports("avx512f");
}

static void test_conv2d_winograd(void **state) {
  (void)state;
  Conv2dShape shapes[3];
  shapes[0] = make_shape(0, 3, 3, 1, 1, 1, 1, 2);
  shapes[0].in_channels = 32, shapes[0].out_channels = 32, shapes[0].in_h = 32, shapes[0].in_w = 32;
  shapes[1] = make_shape(0, 3, 3, 1, 0, 1, 1, 3); /* no padding, sizes not multiples of the 4x4 tile */
  shapes[1].in_channels = 16, shapes[1].out_channels = 48, shapes[1].in_h = 11, shapes[1].in_w = 14;
  shapes[2] = shapes[0];
  shapes[2].stride_h = 2; /* not a Winograd shape: direct */
  size_t before = conv2d_winograd_calls();
  double worst = 0.0, direct_worst = 0.0;
  for (int i = 0; i < 3; i++)
    for (int layout = CONV2D_NCHW; layout <= CONV2D_NCHW16C; layout++) {
      Conv2dShape s = shapes[i];
      s.x_layout = s.y_layout = layout, s.winograd = 1;
      double e = conv_test_check_layouts(&s, 900 + 3 * i + layout, layout % 2);
      Conv2dShape d = s;
      d.winograd = 0;
      /* Without Winograd the request ran the direct kernel: no second run. */
      double ed = winograd_possible() ? conv_test_check_layouts(&d, 900 + 3 * i + layout, layout % 2) : e;
      worst = e > worst ? e : worst;
      direct_worst = ed > direct_worst ? ed : direct_worst;
    }
  size_t ran = conv2d_winograd_calls() - before;
  int avx512 = winograd_possible();
  print_message("conv2d winograd: %zu passes on Winograd, worst rel err %.3g (direct %.3g)\n", ran, worst,
                direct_worst);
  /* 2 Winograd shapes x 2 layouts (NCHW reordered, blocked; oneDNN has no
   * channels-last Winograd) x 3 passes (2: no backward-weights on more
   * than one thread), or none without AVX-512 */
  assert_int_equal(ran, avx512 ? (omp_get_max_threads() > 1 ? 8 : 12) : 0);
  assert_true(worst < 1e-5);
  assert_true(direct_worst < 1e-5);
}

/* DeblurGAN-like layers: a 7x7 stem with reflection-free zero padding, a
 * strided 3x3 down-sampler, a transposed up-sampler, a depthwise conv. */
static void test_conv2d_network_like_shapes(void **state) {
  (void)state;
  Conv2dShape a = make_shape(0, 7, 7, 1, 3, 1, 1, 2);
  a.in_channels = 3, a.out_channels = 16, a.in_h = 20, a.in_w = 17;
  Conv2dShape b = make_shape(0, 3, 3, 2, 1, 1, 1, 1);
  b.in_channels = 16, b.out_channels = 32, b.in_h = 15, b.in_w = 16;
  Conv2dShape c = make_shape(1, 3, 3, 2, 1, 1, 1, 2);
  c.in_channels = 32, c.out_channels = 16, c.in_h = 6, c.in_w = 7, c.output_pad_h = c.output_pad_w = 1;
  Conv2dShape d = make_shape(0, 3, 3, 1, 1, 1, 16, 3);
  d.in_channels = 16, d.out_channels = 16, d.in_h = 9, d.in_w = 9;
  const Conv2dShape *shapes[] = {&a, &b, &c, &d};
  for (int i = 0; i < 4; i++) assert_true(check_shape_fp32(shapes[i], 500 + i, i % 2) < 1e-5);
}

/* Finite differences of the double loss sum(y r), y from the oneDNN
 * forward, against backward-data, backward-weights and the bias gradient. */
static double conv_loss(void *ctx) {
  ConvTensors *t = ctx;
  Error err = {0};
  if (conv2d_forward(&t->s, CONV2D_FP32, t->y, t->x, t->w, t->b, &err)) fail_msg("%s", err.msg);
  return test_dot_loss(t->y, t->r, t->ny);
}

/* Finite-difference probes per tensor. */
static int g_probes = 300;

static void gradcheck_shape(const Conv2dShape *s, uint64_t seed) {
  ConvTensors t;
  tensors_init(&t, s, seed);
  Error err = {0};
  float *dx = test_alloc(t.nx), *dw = test_alloc(t.nw), *db = test_alloc(s->out_channels);
  must_ok(conv2d_backward_data(s, CONV2D_FP32, dx, t.r, t.w, 0, &err), &err, s);
  must_ok(conv2d_backward_weights(s, CONV2D_FP32, dw, db, t.r, t.x, 0, &err), &err, s);
  double ex = test_gradcheck(t.x, dx, t.nx, conv_loss, &t, 1e-2f, g_probes);
  double ew = test_gradcheck(t.w, dw, t.nw, conv_loss, &t, 1e-2f, g_probes);
  double eb = test_gradcheck(t.b, db, s->out_channels, conv_loss, &t, 1e-2f, g_probes);
  char d[160];
  describe(s, d, sizeof d);
  print_message("gradcheck %s: dx %.3g dw %.3g db %.3g\n", d, ex, ew, eb);
  assert_true(ex < 1e-3);
  assert_true(ew < 1e-3);
  assert_true(eb < 1e-3);
  tensors_free(&t);
  free(dx), free(dw), free(db);
}

static void test_conv2d_gradcheck(void **state) {
  (void)state;
  gradcheck_shape(&(Conv2dShape){.batch = 2, .in_channels = 4, .in_h = 7, .in_w = 6, .out_channels = 6,
                                 .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 2,
                                 .dilation_h = 1, .dilation_w = 2, .groups = 2},
                  1);
  gradcheck_shape(&(Conv2dShape){.batch = 1, .in_channels = 3, .in_h = 5, .in_w = 5, .out_channels = 2,
                                 .kernel_h = 1, .kernel_w = 1, .stride_h = 2, .stride_w = 2, .dilation_h = 1,
                                 .dilation_w = 1, .groups = 1},
                  2);
}

/* Winograd's three passes agree with finite differences of its forward. */
static void test_conv2d_winograd_gradcheck(void **state) {
  (void)state;
  size_t before = conv2d_winograd_calls();
  /* Without Winograd this checks the blocked layout's direct kernel, which
   * oneDNN runs slowly when capped to AVX2: fewer probes there. */
  g_probes = winograd_possible() ? 300 : 60;
  gradcheck_shape(&(Conv2dShape){.batch = 2, .in_channels = 16, .in_h = 6, .in_w = 7, .out_channels = 16,
                                 .kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1,
                                 .dilation_h = 1, .dilation_w = 1, .groups = 1, .x_layout = CONV2D_NCHW16C,
                                 .y_layout = CONV2D_NCHW16C, .winograd = 1},
                  5);
  g_probes = 300;
  if (winograd_possible()) assert_true(conv2d_winograd_calls() > before);
}

static void test_conv_transpose2d_gradcheck(void **state) {
  (void)state;
  gradcheck_shape(&(Conv2dShape){.batch = 2, .in_channels = 4, .in_h = 4, .in_w = 3, .out_channels = 6,
                                 .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1,
                                 .dilation_h = 1, .dilation_w = 1, .groups = 2, .transposed = 1,
                                 .output_pad_h = 1, .output_pad_w = 0},
                  3);
  gradcheck_shape(&(Conv2dShape){.batch = 1, .in_channels = 3, .in_h = 3, .in_w = 4, .out_channels = 2,
                                 .kernel_h = 2, .kernel_w = 3, .stride_h = 1, .stride_w = 2, .pad_h = 0, .pad_w = 2,
                                 .dilation_h = 2, .dilation_w = 1, .groups = 1, .transposed = 1,
                                 .output_pad_h = 1, .output_pad_w = 1},
                  4);
}

/* bf16 rounds x, w and dy to 8 significant bits (unit roundoff u = 2^-8),
 * so a product is off by at most (2u + u^2) |a||b|; fp32 accumulation of
 * K terms adds at most K 2^-24 of the sum of |terms|. Element by element:
 *   |out - ref| <= (2u + u^2 + K 2^-23) * sum |a||b|
 * where sum |a||b| is the reference pass run on |a| and |b|. */
static void abs_copy(float *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = fabsf(src[i]);
}

static int within_bf16_bound(const float *got, const double *ref, const double *abs_ref, size_t n, double k_terms,
                             double *ratio) {
  const double u = 1.0 / 256.0;
  double bound = 2.0 * u + u * u + k_terms * ldexp(1.0, -23), worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double allowed = bound * abs_ref[i] + 1e-30;
    double r = fabs((double)got[i] - ref[i]) / allowed;
    if (r > worst || isnan(r)) worst = isnan(r) ? INFINITY : r;
  }
  *ratio = worst;
  return worst <= 1.0;
}

static void bf16_shape(const Conv2dShape *s, uint64_t seed) {
  ConvTensors t;
  tensors_init(&t, s, seed);
  Error err = {0};
  float *dx = test_alloc(t.nx), *dw = test_alloc(t.nw), *ax = test_alloc(t.nx), *aw = test_alloc(t.nw);
  float *ar = test_alloc(t.ny);
  double *ry = test_alloc_d(t.ny), *rdx = test_alloc_d(t.nx), *rdw = test_alloc_d(t.nw);
  double *ay = test_alloc_d(t.ny), *adx = test_alloc_d(t.nx), *adw = test_alloc_d(t.nw);
  abs_copy(ax, t.x, t.nx), abs_copy(aw, t.w, t.nw), abs_copy(ar, t.r, t.ny);
  must_ok(conv2d_forward(s, CONV2D_BF16, t.y, t.x, t.w, NULL, &err), &err, s);
  must_ok(conv2d_backward_data(s, CONV2D_BF16, dx, t.r, t.w, 0, &err), &err, s);
  must_ok(conv2d_backward_weights(s, CONV2D_BF16, dw, NULL, t.r, t.x, 0, &err), &err, s);
  must_ok(conv2d_ref_forward(s, ry, t.x, t.w, NULL, &err), &err, s);
  must_ok(conv2d_ref_backward_data(s, rdx, t.r, t.w, &err), &err, s);
  must_ok(conv2d_ref_backward_weights(s, rdw, NULL, t.r, t.x, &err), &err, s);
  must_ok(conv2d_ref_forward(s, ay, ax, aw, NULL, &err), &err, s);
  must_ok(conv2d_ref_backward_data(s, adx, ar, aw, &err), &err, s);
  must_ok(conv2d_ref_backward_weights(s, adw, NULL, ar, ax, &err), &err, s);
  int oh, ow;
  conv2d_output_size(s, &oh, &ow, NULL);
  double k_fwd = (double)(s->transposed ? s->out_channels : s->in_channels) / s->groups * s->kernel_h * s->kernel_w;
  double k_w = (double)s->batch * (s->transposed ? s->in_h * s->in_w : oh * ow);
  double k_x = (double)(s->transposed ? s->in_channels : s->out_channels) / s->groups * s->kernel_h * s->kernel_w;
  double r1, r2, r3;
  int ok = within_bf16_bound(t.y, ry, ay, t.ny, k_fwd, &r1) & within_bf16_bound(dx, rdx, adx, t.nx, k_x, &r2) &
           within_bf16_bound(dw, rdw, adw, t.nw, k_w, &r3);
  /* The bound must not be loose enough to pass fp32-sized errors only:
   * bf16 really rounds (an fp32 result would sit far inside it). */
  double plain = test_rel_err(t.y, ry, t.ny, 1.0);
  char d[160];
  describe(s, d, sizeof d);
  print_message("bf16 %s: error / bound y %.3f dx %.3f dw %.3f (y rel err %.2g)\n", d, r1, r2, r3, plain);
  assert_true(ok);
  assert_true(plain > 1e-5);
  tensors_free(&t);
  free(dx), free(dw), free(ax), free(aw), free(ar), free(ry), free(rdx), free(rdw), free(ay), free(adx), free(adw);
}

static void test_conv2d_bf16(void **state) {
  (void)state;
  char why[160];
  Conv2dShape s = make_shape(0, 3, 3, 2, 1, 1, 2, 3);
  s.in_channels = 16, s.out_channels = 32, s.in_h = 13, s.in_w = 11;
  if (!conv2d_bf16_supported(why, sizeof why)) {
    /* Refused with a message that names the missing feature. */
    ConvTensors t;
    tensors_init(&t, &s, 9);
    Error err = {0};
    assert_int_equal(conv2d_forward(&s, CONV2D_BF16, t.y, t.x, t.w, NULL, &err), ERR_UNSUPPORTED);
    print_message("bf16 refused: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "AVX-512 BF16"));
    tensors_free(&t);
    return;
  }
  bf16_shape(&s, 20);
  Conv2dShape t = make_shape(1, 4, 4, 2, 1, 1, 1, 2);
  t.in_channels = 32, t.out_channels = 16, t.in_h = 6, t.in_w = 5;
  t.output_pad_h = 0;
  bf16_shape(&t, 21);
  Conv2dShape u = make_shape(0, 1, 1, 1, 0, 1, 4, 1);
  u.in_channels = 32, u.out_channels = 64;
  bf16_shape(&u, 22);
}

/* The ISA cap of the _avx2 run must really reach oneDNN. */
static void test_conv2d_isa_cap_honoured(void **state) {
  (void)state;
  const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
  if (!cap || strcmp(cap, "AVX2")) skip();
  assert_false(conv2d_bf16_supported(NULL, 0));
}

/* The cache belongs to the oneDNN path: its tests run every shape there. */
static void test_conv2d_cache_reuses_primitives(void **state) {
  (void)state;
  conv2d_set_direct(0);
  Conv2dShape s = make_shape(0, 3, 3, 1, 1, 1, 1, 2);
  s.in_h = 31; /* a shape no other test uses */
  ConvTensors t;
  tensors_init(&t, &s, 30);
  Error err = {0};
  float *dx = test_alloc(t.nx), *dw = test_alloc(t.nw), *db = test_alloc(s.out_channels);
  assert_int_equal(conv2d_forward(&s, CONV2D_FP32, t.y, t.x, t.w, t.b, &err), 0);
  assert_int_equal(conv2d_backward_data(&s, CONV2D_FP32, dx, t.r, t.w, 0, &err), 0);
  assert_int_equal(conv2d_backward_weights(&s, CONV2D_FP32, dw, db, t.r, t.x, 1, &err), 0);
  size_t created = conv2d_cache_creations();
  for (int i = 0; i < 5; i++) {
    assert_int_equal(conv2d_forward(&s, CONV2D_FP32, t.y, t.x, t.w, t.b, &err), 0);
    assert_int_equal(conv2d_backward_data(&s, CONV2D_FP32, dx, t.r, t.w, 0, &err), 0);
    assert_int_equal(conv2d_backward_weights(&s, CONV2D_FP32, dw, db, t.r, t.x, 1, &err), 0);
  }
  assert_int_equal(conv2d_cache_creations(), created);
  /* A different pass flavour (no bias) is a new primitive. */
  assert_int_equal(conv2d_forward(&s, CONV2D_FP32, t.y, t.x, t.w, NULL, &err), 0);
  assert_int_equal(conv2d_cache_creations(), created + 1);
  conv2d_cache_clear();
  assert_int_equal(conv2d_cache_entries(), 0);
  assert_true(check_shape_fp32(&s, 31, 0) < 1e-5); /* works again after a clear */
  tensors_free(&t);
  free(dx), free(dw), free(db);
  conv2d_set_direct(1);
}

/* More shapes than the cache holds: it stays bounded, evicts the least
 * recently used entry, and an evicted shape is rebuilt and still right. */
static void test_conv2d_cache_evicts(void **state) {
  (void)state;
  conv2d_set_direct(0);
  conv2d_cache_clear();
  Conv2dShape first = make_shape(0, 1, 1, 1, 0, 1, 1, 1);
  first.in_h = 3, first.in_w = 3;
  assert_true(check_shape_fp32(&first, 70, 0) < 1e-5);
  size_t peak = 0;
  for (int i = 0; i < 40; i++) {
    Conv2dShape s = first;
    s.in_w = 4 + i; /* three passes each: 120 entries wanted */
    assert_true(check_shape_fp32(&s, 71 + i, 0) < 1e-5);
    if (conv2d_cache_entries() > peak) peak = conv2d_cache_entries();
  }
  print_message("conv2d cache: at most %zu entries held\n", peak);
  assert_true(peak <= 64);
  assert_true(peak >= 60);
  size_t created = conv2d_cache_creations();
  assert_true(check_shape_fp32(&first, 70, 0) < 1e-5); /* evicted long ago: rebuilt */
  assert_true(conv2d_cache_creations() > created);
  conv2d_set_direct(1);
}

typedef struct ThreadJob {
  Conv2dShape s;
  uint64_t seed;
  double err;
} ThreadJob;

static void *thread_main(void *arg) {
  ThreadJob *j = arg;
  j->err = 0.0;
  for (int i = 0; i < 4; i++) {
    double e = check_shape_fp32(&j->s, j->seed + i, i % 2);
    if (e > j->err) j->err = e;
  }
  return NULL;
}

/* Two threads on the same and on different shapes at once. */
static void test_conv2d_cache_thread_safe(void **state) {
  (void)state;
  ThreadJob jobs[3] = {{make_shape(0, 3, 3, 1, 1, 1, 1, 1), 40, 0}, {make_shape(0, 3, 3, 1, 1, 1, 1, 1), 50, 0},
                       {make_shape(1, 3, 3, 2, 1, 1, 2, 1), 60, 0}};
  pthread_t th[3];
  for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 3; i++) assert_true(jobs[i].err < 1e-5);
}

static void expect_arg_error(Conv2dShape s, const char *needle) {
  Error err = {0};
  int oh, ow;
  assert_int_equal(conv2d_output_size(&s, &oh, &ow, &err), ERR_ARG);
  if (!strstr(err.msg, needle)) fail_msg("expected '%s' in: %s", needle, err.msg);
  float buf[4096] = {0};
  assert_int_equal(conv2d_forward(&s, CONV2D_FP32, buf, buf, buf, NULL, &err), ERR_ARG);
  assert_int_equal(conv2d_input_count(&s), 0);
}

static void test_conv2d_rejects_bad_shapes(void **state) {
  (void)state;
  Conv2dShape s = make_shape(0, 3, 3, 1, 1, 1, 1, 1);
  Conv2dShape bad = s;
  bad.groups = 3;
  expect_arg_error(bad, "groups 3 must divide");
  bad = s, bad.stride_w = 0;
  expect_arg_error(bad, "stride_w");
  bad = s, bad.kernel_h = 12, bad.pad_h = 1;
  expect_arg_error(bad, "smaller than the dilated kernel extent");
  bad = s, bad.pad_w = 3;
  expect_arg_error(bad, "pad_w");
  bad = s, bad.output_pad_h = 1;
  expect_arg_error(bad, "output_pad_h");
  bad = make_shape(1, 3, 3, 2, 1, 1, 1, 1), bad.output_pad_w = 2;
  expect_arg_error(bad, "max(stride, dilation)");
  bad = s, bad.batch = 0;
  expect_arg_error(bad, "batch");
  bad = s, bad.transposed = 2;
  expect_arg_error(bad, "transposed");
  Error err = {0};
  float buf[4096] = {0};
  assert_int_equal(conv2d_forward(&s, CONV2D_FP32, NULL, buf, buf, NULL, &err), ERR_ARG);
  assert_int_equal(conv2d_backward_weights(&s, (Conv2dPrecision)7, buf, NULL, buf, buf, 0, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "precision"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv2d_matches_reference_over_shapes),
      cmocka_unit_test(test_conv2d_network_like_shapes),
      cmocka_unit_test(test_conv2d_layouts),
      cmocka_unit_test(test_conv2d_winograd),
      cmocka_unit_test(test_conv2d_forward_epilogue),
      cmocka_unit_test(test_conv2d_gradcheck),
      cmocka_unit_test(test_conv2d_winograd_gradcheck),
      cmocka_unit_test(test_conv_transpose2d_gradcheck),
      cmocka_unit_test(test_conv2d_bf16),
      cmocka_unit_test(test_conv2d_isa_cap_honoured),
      cmocka_unit_test(test_conv2d_cache_reuses_primitives),
      cmocka_unit_test(test_conv2d_cache_evicts),
      cmocka_unit_test(test_conv2d_cache_thread_safe),
      cmocka_unit_test(test_conv2d_rejects_bad_shapes),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  conv2d_cache_clear();
  return rc;
}
