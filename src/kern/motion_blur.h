/* Reproducible motion blur: random camera-shake trajectories in the manner
 * of Boracchi and Foi (2012), with the parameter ranges DeblurGAN draws
 * from, rasterised into a K x K kernel, and the blur of an image by that
 * kernel with optional Gaussian noise. Every draw comes from base/rng.h
 * keyed by the seed, so one (seed, parameters) pair gives the same kernel
 * and the same blurred image on every machine and at every thread count.
 *
 * It lives in kern/ because it is array arithmetic on plain buffers with
 * no file, image-format or model knowledge (like the other kernels), so
 * the data loaders and the GAN trainer above can make pairs on the fly,
 * and the `fivefold blur` command is only file handling around it.
 *
 * The trajectory. A particle starts at the origin with a random direction
 * and moves `samples` - 1 steps of equal length (`length` / (samples - 1)
 * pixels: the path length is exactly `length`). Per trajectory, three
 * strengths are drawn uniformly: a pull back toward the start
 * (centripetal, 0..0.7), a random-impulse scale (gaussian shake, 0..10)
 * and the chance of a sudden jerk (big shake, 0..0.2). At each step the
 * velocity gains anxiety * (shake * N(0,1) complex - centripetal * position)
 * * step, plus, with probability big-shake * anxiety, a jerk of twice the
 * velocity turned back by about 180 degrees; then it is rescaled to the
 * step length. Anxiety (jerkiness) small gives a near-straight streak,
 * large a curled one.
 *
 * The kernel. The shutter is open for the first `exposure` fraction of the
 * trajectory (DeblurGAN's PSFs at 1/100, 1/10, 1/2, 1): those samples,
 * with equal weight (equal time each), are splatted bilinearly (sub-pixel:
 * each sample's weight shared by its four neighbouring pixels) after the
 * path is centred (the middle of its bounding box at the kernel's centre
 * pixel). A path wider than the kernel is shrunk about its centre to fit
 * (the shrink is reported), so no mass is clipped. The kernel is then
 * divided by its sum: non-negative, sums to 1.
 *
 * The blur. dst = src (*) k, a true convolution (the kernel is flipped:
 * a kernel whose only tap is one pixel right of centre moves the image one
 * pixel right) with replicated borders, per channel, then + N(0, sigma^2)
 * noise per value and clamped to 0..1 (images are 0..1). */
#ifndef FIVEFOLD_KERN_MOTION_BLUR_H
#define FIVEFOLD_KERN_MOTION_BLUR_H

#include <stdint.h>

#include "base/error.h"

#define MOTION_BLUR_MAX_KERNEL 255

/* What a kernel is drawn from. A field at its "draw" value (< 0, or 0 for
 * samples) is drawn from the seed (or defaulted) and reported resolved. */
typedef struct MotionBlurParams {
  int kernel_size; /* K, odd, 3..MOTION_BLUR_MAX_KERNEL */
  double length;   /* path length in pixels; < 0: K - 1 */
  double anxiety;  /* jerkiness; < 0: drawn uniform in [0.003, 0.01] (DeblurGAN's range) */
  double exposure; /* fraction of the path the shutter sees, (0, 1]; < 0: drawn from {0.1, 0.5, 1} */
  int samples;     /* points on the path, >= 2; 0: 2000 (DeblurGAN's) */
} MotionBlurParams;

/* Kernel size 13, everything else drawn. */
MotionBlurParams motion_blur_params_default(void);

/* What one kernel was made with: the params resolved, the per-trajectory
 * strengths drawn, and the shrink applied to fit the kernel (1 = none). */
typedef struct MotionBlurInfo {
  MotionBlurParams params;
  double centripetal, gaussian_shake, big_shake, initial_angle_deg;
  double fit_scale;
  int big_shakes; /* jerks that happened within the exposure */
} MotionBlurInfo;

/* kernel[K * K] (row-major) from the seed. ERR_ARG names the bad field. */
int motion_blur_kernel(const MotionBlurParams *p, uint64_t seed, float *kernel, MotionBlurInfo *info, Error *err);

/* dst[c, h, w] = src blurred by kernel[K * K] (see above), plus noise of
 * standard deviation noise_sigma (0: none) drawn from noise_seed; dst must
 * not alias src. */
int motion_blur_apply(const float *src, int channels, int height, int width, const float *kernel, int kernel_size,
                      double noise_sigma, uint64_t noise_seed, float *dst, Error *err);

#endif
