/* The direct convolution (kern/conv2d_direct.c), the path conv2d takes for
 * few channels on one side: all three passes against the double-precision
 * reference over narrow outputs and narrow inputs (1 to 4 channels), wide
 * sides of 1 to 40 channels (whole vectors, tails, fewer channels than a
 * vector), kernels from 1x1 to 7x7 with every padding and dilations 1 and
 * 2, images narrower and wider than a register block, x and y in NCHW or
 * NHWC and the wide side blocked (16 channels a group), the accumulate
 * contract, the forward's epilogue (accumulate onto y, ReLU); the
 * deblurring generator's first and last convolution; finite-difference
 * gradient checks of every pass; results
 * bit-identical for 1 to 4 threads; which shapes the dispatch sends here
 * (and the weight gradient of a large wide side to oneDNN).
 * tests/kern/tests.cmake builds it twice more, with the kernels compiled
 * without AVX-512 and without AVX, and each build checks that it runs the
 * instruction set it was built for. */
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "kern/conv2d.h"
#include "kern/conv2d_test_util.h"
#include "kern/kern_test_util.h"

static Conv2dShape shape_of(int batch, int cin, int cout, int h, int w, int kh, int kw, int ph, int pw, int dil) {
  Conv2dShape s = conv2d_shape_default();
  s.batch = batch, s.in_channels = cin, s.out_channels = cout, s.in_h = h, s.in_w = w;
  s.kernel_h = kh, s.kernel_w = kw, s.pad_h = ph, s.pad_w = pw, s.dilation_h = s.dilation_w = dil;
  return s;
}

/* How many of the shape's three passes run on the direct kernels. */
static size_t direct_passes(const Conv2dShape *s) {
  return (size_t)conv2d_uses_direct(s, CONV2D_FP32, CONV2D_PASS_FORWARD) +
         (size_t)conv2d_uses_direct(s, CONV2D_FP32, CONV2D_PASS_BACKWARD_DATA) +
         (size_t)conv2d_uses_direct(s, CONV2D_FP32, CONV2D_PASS_BACKWARD_WEIGHTS);
}

/* The instruction set of the kernels linked in is the one this file was
 * compiled for (the _avx2 and _scalar builds compile both alike). */
static void test_direct_isa(void **state) {
  (void)state;
#if defined(__AVX512F__)
  const char *expected = "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  const char *expected = "avx2";
#else
  const char *expected = "scalar";
#endif
  print_message("direct conv kernels: %s\n", conv2d_direct_isa());
  assert_string_equal(conv2d_direct_isa(), expected);
}

static void test_direct_matches_reference(void **state) {
  (void)state;
  static const int wides[] = {1, 5, 8, 16, 17, 40, 32};
  static const int kernels[][2] = {{3, 3}, {1, 1}, {2, 3}, {7, 7}, {4, 4}, {1, 5}};
  static const int sizes[][2] = {{5, 9}, {12, 19}, {3, 4}, {8, 17}};
  int cases = 0, blocked = 0;
  double worst = 0.0;
  size_t calls = conv2d_direct_calls(), expected = 0, on_onednn = 0;
  for (int narrow_out = 0; narrow_out < 2; narrow_out++)
    for (int narrow = 1; narrow <= CONV2D_DIRECT_NARROW; narrow++)
      for (size_t wi = 0; wi < sizeof wides / sizeof wides[0]; wi++)
        for (int layouts = 0; layouts < 6; layouts++) {
          /* 0-3: x and y NCHW or NHWC; 4, 5: the wide side blocked, the narrow one NCHW or NHWC */
          if (layouts >= 4 && wides[wi] % 16) continue;
          int c = cases;
          const int *k = kernels[c % 6], *hw = sizes[c / 6 % 4];
          int dil = 1 + c / 5 % 2;
          /* every padding from 0 to the kernel's extent - 1 along the cases */
          int ph = c % (dil * (k[0] - 1) + 1), pw = (c / 2) % (dil * (k[1] - 1) + 1);
          int h = hw[0] + dil * (k[0] - 1), w = hw[1] + dil * (k[1] - 1); /* output at least hw */
          Conv2dShape s = narrow_out ? shape_of(1 + c % 3, wides[wi], narrow, h, w, k[0], k[1], ph, pw, dil)
                                     : shape_of(1 + c % 3, narrow, wides[wi], h, w, k[0], k[1], ph, pw, dil);
          s.x_layout = layouts & 1 ? CONV2D_NHWC : CONV2D_NCHW;
          s.y_layout = layouts & 2 ? CONV2D_NHWC : CONV2D_NCHW;
          if (layouts >= 4) {
            int narrow_layout = layouts == 5 ? CONV2D_NHWC : CONV2D_NCHW;
            s.x_layout = narrow_out ? CONV2D_NCHW16C : narrow_layout;
            s.y_layout = narrow_out ? narrow_layout : CONV2D_NCHW16C;
            blocked++;
          }
          assert_true(conv2d_uses_direct(&s, CONV2D_FP32, CONV2D_PASS_BACKWARD_DATA));
          expected += direct_passes(&s);
          on_onednn += 3 - direct_passes(&s);
          double e = conv_test_check_layouts(&s, 1000 + (uint64_t)c, c % 2);
          worst = e > worst ? e : worst;
          cases++;
        }
  print_message("direct conv vs reference: %d shapes (%d with a blocked wide side, %zu of their passes on "
                "oneDNN), worst rel err %.3g\n", cases, blocked, on_onednn, worst);
  assert_int_equal(conv2d_direct_calls() - calls, expected); /* each pass where conv2d_uses_direct says */
  assert_true(expected >= 2 * (size_t)cases);
  assert_true(worst < 1e-5);
}

/* The deblurring generator's first (1 -> 32) and last (32 -> 1) 7x7
 * convolutions at full size, the wide side blocked as the generator keeps
 * it, channels-last, and NCHW (the transposed copy). */
static void test_direct_generator_shapes(void **state) {
  (void)state;
  Conv2dShape first = shape_of(2, 1, 32, 32, 32, 7, 7, 3, 3, 1), last = shape_of(2, 32, 1, 32, 32, 7, 7, 3, 3, 1);
  double worst = 0.0;
  for (int layout = CONV2D_NCHW; layout <= CONV2D_NCHW16C; layout++) {
    first.y_layout = last.x_layout = layout;
    double e1 = conv_test_check_layouts(&first, 2000 + layout, layout % 2);
    double e2 = conv_test_check_layouts(&last, 2010 + layout, 0);
    worst = e1 > worst ? e1 : worst;
    worst = e2 > worst ? e2 : worst;
  }
  print_message("generator 7x7 convolutions: worst rel err %.3g\n", worst);
  assert_true(worst < 1e-5);
}

/* The forward's epilogue (accumulate onto y, then the ReLU) in the direct
 * kernels' stores: narrow and wide outputs, the staged NCHW wide output. */
static void test_direct_forward_epilogue(void **state) {
  (void)state;
  Conv2dShape shapes[3] = {shape_of(2, 24, 2, 9, 13, 5, 3, 2, 1, 1), shape_of(2, 2, 24, 9, 13, 3, 5, 1, 2, 1),
                           shape_of(1, 1, 32, 12, 12, 7, 7, 3, 3, 1)};
  double worst = 0.0;
  size_t calls = conv2d_direct_calls(), expected = 0;
  int cases = 0;
  for (int i = 0; i < 3; i++)
    for (int layouts = 0; layouts < 3; layouts++)
      for (int e = 1; e < 4; e++) {
        Conv2dShape s = shapes[i];
        int wide = layouts == 2 && (i == 2) ? CONV2D_NCHW16C : layouts == 1 ? CONV2D_NHWC : CONV2D_NCHW;
        if (i == 0) s.x_layout = wide; else s.y_layout = wide;
        expected += (size_t)conv2d_uses_direct(&s, CONV2D_FP32, CONV2D_PASS_FORWARD);
        double err = conv_test_check_epilogue(&s, 1300 + 12 * i + 4 * layouts + e, (Conv2dEpilogue){e & 1, e >> 1});
        worst = err > worst ? err : worst;
        cases++;
      }
  print_message("direct conv forward epilogue: %d cases, worst rel err %.3g\n", cases, worst);
  assert_int_equal(conv2d_direct_calls() - calls, expected);
  assert_true(expected >= (size_t)cases * 2 / 3); /* the narrow inputs' NCHW outputs went to oneDNN */
  assert_true(worst < 1e-5);
}

typedef struct GradCase {
  Conv2dShape s;
  size_t nx, ny, nw;
  float *x, *w, *b, *y, *r, *xl, *rl;
} GradCase;

/* sum(y r) in double, y from the direct forward on x (NCHW, transposed to
 * the shape's layout each time) */
static double grad_loss(void *ctx) {
  GradCase *g = ctx;
  Error err = {0};
  int oh, ow;
  conv2d_output_size(&g->s, &oh, &ow, NULL);
  conv_test_to_layout(g->xl, g->x, g->s.batch, g->s.in_channels, g->s.in_h, g->s.in_w, g->s.x_layout);
  if (conv2d_forward(&g->s, CONV2D_FP32, g->y, g->xl, g->w, g->b, &err)) fail_msg("%s", err.msg);
  float *plain = test_alloc(g->ny);
  conv_test_from_layout(plain, g->y, g->s.batch, g->s.out_channels, oh, ow, g->s.y_layout);
  double loss = test_dot_loss(plain, g->r, g->ny);
  free(plain);
  return loss;
}

static void gradcheck(Conv2dShape s, uint64_t seed) {
  GradCase g = {.s = s, .nx = conv2d_input_count(&s), .ny = conv2d_output_count(&s), .nw = conv2d_weight_count(&s)};
  assert_int_equal(direct_passes(&s), 3);
  int oh, ow;
  conv2d_output_size(&s, &oh, &ow, NULL);
  g.x = test_alloc(g.nx), g.xl = test_alloc(g.nx), g.w = test_alloc(g.nw), g.b = test_alloc(s.out_channels);
  g.y = test_alloc(g.ny), g.r = test_alloc(g.ny), g.rl = test_alloc(g.ny);
  test_fill_normal(g.x, g.nx, seed, 1.0f);
  test_fill_normal(g.w, g.nw, seed + 1, 0.5f);
  test_fill_normal(g.b, s.out_channels, seed + 2, 1.0f);
  test_fill_normal(g.r, g.ny, seed + 3, 1.0f);
  conv_test_to_layout(g.xl, g.x, s.batch, s.in_channels, s.in_h, s.in_w, s.x_layout);
  conv_test_to_layout(g.rl, g.r, s.batch, s.out_channels, oh, ow, s.y_layout);
  float *dxl = test_alloc(g.nx), *dx = test_alloc(g.nx), *dw = test_alloc(g.nw), *db = test_alloc(s.out_channels);
  Error err = {0};
  if (conv2d_backward_data(&s, CONV2D_FP32, dxl, g.rl, g.w, 0, &err) ||
      conv2d_backward_weights(&s, CONV2D_FP32, dw, db, g.rl, g.xl, 0, &err))
    fail_msg("%s", err.msg);
  conv_test_from_layout(dx, dxl, s.batch, s.in_channels, s.in_h, s.in_w, s.x_layout);
  double ex = test_gradcheck(g.x, dx, g.nx, grad_loss, &g, 1e-2f, 200);
  double ew = test_gradcheck(g.w, dw, g.nw, grad_loss, &g, 1e-2f, 200);
  double eb = test_gradcheck(g.b, db, s.out_channels, grad_loss, &g, 1e-2f, 200);
  char d[200];
  conv_test_describe(&s, d, sizeof d);
  print_message("gradcheck %s: dx %.3g dw %.3g db %.3g\n", d, ex, ew, eb);
  assert_true(ex < 1e-3);
  assert_true(ew < 1e-3);
  assert_true(eb < 1e-3);
  free(g.x), free(g.xl), free(g.w), free(g.b), free(g.y), free(g.r), free(g.rl), free(dxl), free(dx), free(dw), free(db);
}

static void test_direct_gradcheck(void **state) {
  (void)state;
  Conv2dShape out = shape_of(2, 20, 2, 7, 11, 3, 3, 1, 2, 2); /* narrow output, dilated */
  out.x_layout = CONV2D_NHWC;
  gradcheck(out, 1);
  Conv2dShape in = shape_of(1, 3, 9, 6, 10, 4, 3, 2, 1, 1); /* narrow input, even kernel */
  in.y_layout = CONV2D_NHWC;
  gradcheck(in, 2);
  Conv2dShape blocked = shape_of(2, 2, 16, 5, 9, 3, 3, 1, 1, 1); /* the wide side blocked */
  blocked.y_layout = CONV2D_NCHW16C;
  gradcheck(blocked, 4);
  gradcheck(shape_of(2, 1, 1, 9, 9, 5, 5, 2, 2, 1), 3); /* both sides one channel */
}

/* Every output of every pass identical whatever the thread count. */
static void test_direct_bit_identical_across_threads(void **state) {
  (void)state;
  Conv2dShape shapes[3] = {shape_of(3, 32, 1, 32, 32, 7, 7, 3, 3, 1), shape_of(3, 1, 32, 32, 32, 7, 7, 3, 3, 1),
                           shape_of(2, 3, 19, 13, 21, 3, 5, 1, 2, 2)};
  shapes[0].x_layout = shapes[1].y_layout = CONV2D_NCHW16C;
  shapes[2].y_layout = CONV2D_NHWC; /* every pass direct */
  int saved = omp_get_max_threads();
  for (int i = 0; i < 3; i++) {
    const Conv2dShape *s = &shapes[i];
    assert_int_equal(direct_passes(s), 3);
    size_t nx = conv2d_input_count(s), ny = conv2d_output_count(s), nw = conv2d_weight_count(s);
    float *x = test_alloc(nx), *w = test_alloc(nw), *b = test_alloc(s->out_channels), *r = test_alloc(ny);
    test_fill_normal(x, nx, 40 + i, 1.0f);
    test_fill_normal(w, nw, 41 + i, 0.5f);
    test_fill_normal(b, s->out_channels, 42 + i, 1.0f);
    test_fill_normal(r, ny, 43 + i, 1.0f);
    float *out[4][4];
    for (int t = 0; t < 4; t++) {
      omp_set_num_threads(t + 1);
      out[t][0] = test_alloc(ny), out[t][1] = test_alloc(nx), out[t][2] = test_alloc(nw);
      out[t][3] = test_alloc(s->out_channels);
      Error err = {0};
      if (conv2d_forward(s, CONV2D_FP32, out[t][0], x, w, b, &err) ||
          conv2d_backward_data(s, CONV2D_FP32, out[t][1], r, w, 0, &err) ||
          conv2d_backward_weights(s, CONV2D_FP32, out[t][2], out[t][3], r, x, 0, &err))
        fail_msg("%s", err.msg);
    }
    size_t sizes[4] = {ny, nx, nw, (size_t)s->out_channels};
    for (int t = 1; t < 4; t++)
      for (int p = 0; p < 4; p++)
        if (memcmp(out[0][p], out[t][p], sizes[p] * sizeof(float)))
          fail_msg("shape %d pass %d: %d threads differ from 1 thread", i, p, t + 1);
    for (int t = 0; t < 4; t++)
      for (int p = 0; p < 4; p++) free(out[t][p]);
    free(x), free(w), free(b), free(r);
  }
  omp_set_num_threads(saved);
}

/* A wide side larger than CONV2D_DIRECT_WEIGHTS_MAX floats: forward and
 * backward-data run direct, the weight gradient on oneDNN; all right. */
static void test_direct_large_wide_side(void **state) {
  (void)state;
  Conv2dShape s = shape_of(3, 3, 32, 80, 80, 7, 7, 3, 3, 1); /* 3 x 32 x 80 x 80 = 614400 floats */
  s.y_layout = CONV2D_NHWC;
  assert_true((size_t)s.batch * s.out_channels * s.in_h * s.in_w > CONV2D_DIRECT_WEIGHTS_MAX);
  assert_true(conv2d_uses_direct(&s, CONV2D_FP32, CONV2D_PASS_FORWARD));
  assert_true(conv2d_uses_direct(&s, CONV2D_FP32, CONV2D_PASS_BACKWARD_DATA));
  assert_false(conv2d_uses_direct(&s, CONV2D_FP32, CONV2D_PASS_BACKWARD_WEIGHTS));
  size_t calls = conv2d_direct_calls();
  double e = conv_test_check_layouts(&s, 4000, 1);
  print_message("3 -> 32 channels at 80 x 80, 3 images: worst rel err %.3g\n", e);
  assert_int_equal(conv2d_direct_calls() - calls, 2);
  assert_true(e < 1e-5);
}

/* Which shapes go direct: few channels on one side, stride 1, groups 1,
 * not transposed, fp32, and only while allowed. */
static void test_direct_dispatch(void **state) {
  (void)state;
  Conv2dShape s = shape_of(1, 32, 4, 8, 8, 3, 3, 1, 1, 1);
  assert_int_equal(direct_passes(&s), 3);
  assert_false(conv2d_uses_direct(&s, CONV2D_BF16, CONV2D_PASS_BACKWARD_DATA));
  Conv2dShape t = s;
  t.out_channels = CONV2D_DIRECT_NARROW + 1;
  assert_int_equal(direct_passes(&t), 0);
  t = s, t.stride_w = 2;
  assert_int_equal(direct_passes(&t), 0);
  t = s, t.groups = 4, t.out_channels = 4;
  assert_int_equal(direct_passes(&t), 0);
  t = s, t.transposed = 1;
  assert_int_equal(direct_passes(&t), 0);
  t = s, t.kernel_h = 20; /* not a convolution */
  assert_int_equal(direct_passes(&t), 0);
  /* a narrow input's forward into an NCHW output (more than one channel) is oneDNN's */
  t = shape_of(1, 3, 32, 8, 8, 3, 3, 1, 1, 1);
  assert_false(conv2d_uses_direct(&t, CONV2D_FP32, CONV2D_PASS_FORWARD));
  assert_int_equal(direct_passes(&t), 2);
  t.y_layout = CONV2D_NHWC;
  assert_int_equal(direct_passes(&t), 3);
  conv2d_set_direct(0);
  assert_int_equal(direct_passes(&s), 0);
  assert_int_equal(conv2d_direct_enabled(), 0);
  size_t calls = conv2d_direct_calls();
  assert_true(conv_test_check_layouts(&s, 3000, 0) < 1e-5); /* on oneDNN now */
  assert_int_equal(conv2d_direct_calls(), calls);
  conv2d_set_direct(1);
  assert_true(conv_test_check_layouts(&s, 3001, 0) < 1e-5);
  assert_int_equal(conv2d_direct_calls(), calls + 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_direct_isa),
      cmocka_unit_test(test_direct_matches_reference),
      cmocka_unit_test(test_direct_generator_shapes),
      cmocka_unit_test(test_direct_forward_epilogue),
      cmocka_unit_test(test_direct_gradcheck),
      cmocka_unit_test(test_direct_bit_identical_across_threads),
      cmocka_unit_test(test_direct_large_wide_side),
      cmocka_unit_test(test_direct_dispatch),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  conv2d_cache_clear();
  return rc;
}
