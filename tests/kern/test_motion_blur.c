/* Motion blur (src/kern/motion_blur.h): kernels are non-negative and sum
 * to 1 over many seeds and sizes, the same seed gives the identical kernel
 * and blurred image, different seeds differ, given parameters are kept and
 * drawn ones lie in DeblurGAN's ranges; the convolution's direction and
 * border; seeded noise of the stated strength; and blurring the fixed
 * example image (example_image) with seed 7, K = 13, exposure 1 gives the PSNR pinned
 * here (EXPECTED_BLUR_PSNR_DB), with image_metrics (kern/image_metrics.h)
 * measuring it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "kern/image_metrics.h"
#include "kern/motion_blur.h"

/* PSNR of the example image blurred with seed 7, K 13, exposure 1, against itself
 * sharp (computed once and pinned; it depends only on the draws from the
 * seed and double-precision arithmetic). */
#define EXPECTED_BLUR_PSNR_DB 20.29
#define EXPECTED_BLUR_PSNR_TOL_DB 0.05

enum { EX_H = 48, EX_W = 48 };

/* A fixed 48 x 48 picture with edges and texture: a smooth pattern, a
 * bright square and a dark bar. */
static void example_image(float *im) {
  for (int y = 0; y < EX_H; y++)
    for (int x = 0; x < EX_W; x++) {
      float v = 0.5f + 0.3f * sinf(0.7f * x) * cosf(0.45f * y);
      if (x >= 10 && x < 22 && y >= 12 && y < 30) v = 0.95f;
      if (y >= 36 && y < 40) v = 0.05f;
      im[y * EX_W + x] = v;
    }
}

static void test_kernels_normalised(void **state) {
  (void)state;
  const int sizes[] = {3, 7, 13, 31};
  for (int s = 0; s < 4; s++) {
    const int K = sizes[s];
    float *k = malloc(sizeof(float) * K * K);
    for (uint64_t seed = 1; seed <= 40; seed++) {
      MotionBlurParams p = motion_blur_params_default();
      p.kernel_size = K;
      MotionBlurInfo info;
      Error err;
      if (motion_blur_kernel(&p, seed, k, &info, &err)) fail_msg("%s", err.msg);
      double sum = 0.0;
      for (int i = 0; i < K * K; i++) {
        assert_true(k[i] >= 0.0f);
        sum += k[i];
      }
      if (fabs(sum - 1.0) > 1e-5) fail_msg("K %d seed %llu: sum %.9f", K, (unsigned long long)seed, sum);
      assert_true(info.params.anxiety >= 0.003 && info.params.anxiety <= 0.01);
      assert_true(info.params.exposure == 0.1 || info.params.exposure == 0.5 || info.params.exposure == 1.0);
      assert_true(info.params.samples == 2000 && info.params.length == K - 1);
      assert_true(info.fit_scale > 0.0 && info.fit_scale <= 1.0);
    }
    free(k);
  }
}

static void test_reproducible(void **state) {
  (void)state;
  enum { K = 13 };
  float a[K * K], b[K * K], c[K * K];
  MotionBlurParams p = motion_blur_params_default();
  Error err;
  assert_int_equal(motion_blur_kernel(&p, 5, a, NULL, &err), 0);
  assert_int_equal(motion_blur_kernel(&p, 5, b, NULL, &err), 0);
  assert_memory_equal(a, b, sizeof a);
  int differing = 0;
  for (uint64_t seed = 6; seed < 16; seed++) {
    assert_int_equal(motion_blur_kernel(&p, seed, c, NULL, &err), 0);
    differing += memcmp(a, c, sizeof a) != 0;
  }
  assert_int_equal(differing, 10);
  /* The same for the blurred, noisy image. */
  float im[EX_H * EX_W], x[EX_H * EX_W], y[EX_H * EX_W];
  example_image(im);
  assert_int_equal(motion_blur_apply(im, 1, EX_H, EX_W, a, K, 0.02, 11, x, &err), 0);
  assert_int_equal(motion_blur_apply(im, 1, EX_H, EX_W, a, K, 0.02, 11, y, &err), 0);
  assert_memory_equal(x, y, sizeof x);
  assert_int_equal(motion_blur_apply(im, 1, EX_H, EX_W, a, K, 0.02, 12, y, &err), 0);
  assert_true(memcmp(x, y, sizeof x) != 0);
}

static void test_given_params(void **state) {
  (void)state;
  enum { K = 15 };
  float k[K * K];
  MotionBlurParams p = {K, 10.0, 0.0, 1.0, 500};
  MotionBlurInfo info;
  Error err;
  /* Anxiety 0: a straight streak of length 10, so at most 12 columns or
   * rows of a bounding box are touched, and the params are kept. */
  assert_int_equal(motion_blur_kernel(&p, 3, k, &info, &err), 0);
  assert_true(info.params.anxiety == 0.0 && info.params.exposure == 1.0 && info.params.samples == 500);
  assert_true(info.fit_scale == 1.0);
  int x0 = K, x1 = -1, y0 = K, y1 = -1;
  for (int i = 0; i < K; i++)
    for (int j = 0; j < K; j++)
      if (k[i * K + j] > 0) x0 = j < x0 ? j : x0, x1 = j > x1 ? j : x1, y0 = i < y0 ? i : y0, y1 = i > y1 ? i : y1;
  const double span = hypot(x1 - x0, y1 - y0);
  if (span < 8.0 || span > 13.0) fail_msg("a straight streak of length 10 spans %g pixels", span);
  /* A path longer than the kernel is shrunk to fit. */
  p.length = 40.0;
  assert_int_equal(motion_blur_kernel(&p, 3, k, &info, &err), 0);
  assert_true(info.fit_scale < 0.4);
  /* Bad fields are named. */
  p.kernel_size = 12;
  assert_int_equal(motion_blur_kernel(&p, 3, k, &info, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "kernel_size"));
  p.kernel_size = K, p.exposure = 1.5;
  assert_int_equal(motion_blur_kernel(&p, 3, k, &info, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "exposure"));
}

static void test_convolution_direction_and_border(void **state) {
  (void)state;
  enum { H = 4, W = 5 };
  float im[H * W], out[H * W], k[9] = {0};
  for (int i = 0; i < H * W; i++) im[i] = (float)i / (H * W);
  Error err;
  k[1 * 3 + 2] = 1.0f; /* one pixel right of centre: the image moves right */
  assert_int_equal(motion_blur_apply(im, 1, H, W, k, 3, 0.0, 0, out, &err), 0);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) assert_float_equal(out[y * W + x], im[y * W + (x ? x - 1 : 0)], 0);
  memset(k, 0, sizeof k);
  k[0] = 1.0f; /* up-left tap: the image moves up and left */
  assert_int_equal(motion_blur_apply(im, 1, H, W, k, 3, 0.0, 0, out, &err), 0);
  assert_float_equal(out[1 * W + 2], im[2 * W + 3], 0);
  assert_float_equal(out[H * W - 1], im[H * W - 1], 0); /* replicated border */
}

static void test_noise(void **state) {
  (void)state;
  enum { H = 64, W = 64 };
  float *im = malloc(sizeof(float) * H * W), *out = malloc(sizeof(float) * H * W);
  for (int i = 0; i < H * W; i++) im[i] = 0.5f;
  float k[9] = {0};
  k[4] = 1.0f;
  Error err;
  assert_int_equal(motion_blur_apply(im, 1, H, W, k, 3, 0.05, 1, out, &err), 0);
  double sum = 0.0, sq = 0.0;
  for (int i = 0; i < H * W; i++) sum += out[i] - 0.5, sq += (out[i] - 0.5) * (out[i] - 0.5);
  const double mean = sum / (H * W), sd = sqrt(sq / (H * W) - mean * mean);
  if (fabs(mean) > 0.004 || fabs(sd - 0.05) > 0.003) fail_msg("noise mean %g sd %g, expected 0 and 0.05", mean, sd);
  assert_int_equal(motion_blur_apply(im, 1, H, W, k, 3, -1.0, 1, out, &err), ERR_ARG);
  free(im), free(out);
}

static void test_psnr_drop_on_example(void **state) {
  (void)state;
  enum { K = 13 };
  float k[K * K], im[EX_H * EX_W], blurred[EX_H * EX_W];
  MotionBlurParams p = motion_blur_params_default();
  p.exposure = 1.0; /* the whole path: the strongest blur of the seed */
  MotionBlurInfo info;
  Error err;
  assert_int_equal(motion_blur_kernel(&p, 7, k, &info, &err), 0);
  example_image(im);
  assert_int_equal(motion_blur_apply(im, 1, EX_H, EX_W, k, K, 0.0, 0, blurred, &err), 0);
  double psnr, ssim;
  assert_int_equal(image_psnr(blurred, im, EX_H * EX_W, 1.0, &psnr, &err), 0);
  assert_int_equal(image_ssim(blurred, im, 1, EX_H, EX_W, 1.0, &ssim, &err), 0);
  print_message("seed 7, K 13, exposure 1: anxiety %.5f exposure %g fit %.3f: PSNR %.4f dB, SSIM %.4f\n",
                info.params.anxiety, info.params.exposure, info.fit_scale, psnr, ssim);
  if (fabs(psnr - EXPECTED_BLUR_PSNR_DB) > EXPECTED_BLUR_PSNR_TOL_DB)
    fail_msg("blurred PSNR %.4f dB, expected %.2f +- %.2f", psnr, EXPECTED_BLUR_PSNR_DB, EXPECTED_BLUR_PSNR_TOL_DB);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernels_normalised),
      cmocka_unit_test(test_reproducible),
      cmocka_unit_test(test_given_params),
      cmocka_unit_test(test_convolution_direction_and_border),
      cmocka_unit_test(test_noise),
      cmocka_unit_test(test_psnr_drop_on_example),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
