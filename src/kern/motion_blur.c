/* Camera-shake trajectories, their rasterisation into a blur kernel and
 * the seeded blur of an image (kern/motion_blur.h). The trajectory is kept
 * in double precision: it is cheap, and a float path drifts enough over
 * 2000 steps to move kernel mass by a visible fraction of a pixel. */
#include "kern/motion_blur.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"

/* Distinct streams, so that uniform and normal draws never share indices. */
#define STREAM_PARAMS 0x6d626c7200000001ULL
#define STREAM_SHAKE 0x6d626c7200000002ULL
#define STREAM_NORMAL 0x6d626c7200000003ULL
#define STREAM_NOISE 0x6d626c7200000004ULL

MotionBlurParams motion_blur_params_default(void) {
  MotionBlurParams p = {13, -1.0, -1.0, -1.0, 0};
  return p;
}

static int resolve(const MotionBlurParams *p, uint64_t seed, MotionBlurParams *r, Error *err) {
  *r = *p;
  if (p->kernel_size < 3 || p->kernel_size > MOTION_BLUR_MAX_KERNEL || p->kernel_size % 2 == 0)
    return error_set(err, ERR_ARG, "motion blur: kernel_size %d, expected an odd number in 3..%d", p->kernel_size,
                     MOTION_BLUR_MAX_KERNEL);
  if (p->samples == 0) r->samples = 2000;
  else if (p->samples < 2 || p->samples > 1000000)
    return error_set(err, ERR_ARG, "motion blur: samples %d, expected 2..1000000 (0 for 2000)", p->samples);
  Rng rng = rng_make(seed, STREAM_PARAMS);
  const double u_anxiety = rng_next_uniform(&rng), u_exposure = rng_next_uniform(&rng);
  if (p->length < 0) r->length = p->kernel_size - 1;
  else if (!isfinite(p->length) || p->length > 100.0 * p->kernel_size)
    return error_set(err, ERR_ARG, "motion blur: length %g, expected 0..%d pixels", p->length, 100 * p->kernel_size);
  if (p->anxiety < 0) r->anxiety = 0.003 + 0.007 * u_anxiety;
  else if (!isfinite(p->anxiety) || p->anxiety > 1.0)
    return error_set(err, ERR_ARG, "motion blur: anxiety %g, expected 0..1 (DeblurGAN: 0.003..0.01)", p->anxiety);
  static const double EXPOSURES[3] = {0.1, 0.5, 1.0};
  if (p->exposure < 0) r->exposure = EXPOSURES[(int)(u_exposure * 3.0) % 3];
  else if (!(p->exposure > 0.0 && p->exposure <= 1.0))
    return error_set(err, ERR_ARG, "motion blur: exposure %g, expected a fraction in (0, 1]", p->exposure);
  return 0;
}

/* A standard normal from its own counter-based stream. */
static double next_normal(uint64_t seed, uint64_t *index) { return rng_normal(seed, STREAM_NORMAL, (*index)++); }

int motion_blur_kernel(const MotionBlurParams *p, uint64_t seed, float *kernel, MotionBlurInfo *info, Error *err) {
  MotionBlurInfo local;
  if (!info) info = &local;
  memset(info, 0, sizeof *info);
  int rc = resolve(p, seed, &info->params, err);
  if (rc) return rc;
  const MotionBlurParams *r = &info->params;
  const int K = r->kernel_size, N = r->samples;
  /* The shutter sees samples 0 .. used-1. */
  int used = (int)lround(r->exposure * (N - 1)) + 1;
  if (used < 2) used = 2;
  double *px = malloc(sizeof(double) * (size_t)used), *py = malloc(sizeof(double) * (size_t)used);
  double *acc = calloc((size_t)K * (size_t)K, sizeof(double));
  if (!px || !py || !acc) {
    free(px), free(py), free(acc);
    return error_set(err, ERR_NOMEM, "motion blur: out of memory for %d samples", N);
  }
  Rng shake = rng_make(seed, STREAM_SHAKE);
  uint64_t normal_index = 0;
  info->centripetal = 0.7 * rng_next_uniform(&shake);
  info->big_shake = 0.2 * rng_next_uniform(&shake);
  info->gaussian_shake = 10.0 * rng_next_uniform(&shake);
  info->initial_angle_deg = 360.0 * rng_next_uniform(&shake);
  const double step = r->length / (N - 1), angle = info->initial_angle_deg * M_PI / 180.0;
  double vx = step * cos(angle), vy = step * sin(angle), x = 0.0, y = 0.0;
  px[0] = 0.0, py[0] = 0.0;
  for (int t = 0; t + 1 < used; t++) {
    double dvx = 0.0, dvy = 0.0;
    if (rng_next_uniform(&shake) < info->big_shake * r->anxiety) {
      /* A jerk: twice the velocity, turned by 180 degrees +- 0.5 rad. */
      const double turn = M_PI + (rng_next_uniform(&shake) - 0.5);
      dvx = 2.0 * (vx * cos(turn) - vy * sin(turn));
      dvy = 2.0 * (vx * sin(turn) + vy * cos(turn));
      info->big_shakes++;
    }
    const double nx = next_normal(seed, &normal_index), ny = next_normal(seed, &normal_index);
    dvx += r->anxiety * (info->gaussian_shake * nx - info->centripetal * x) * step;
    dvy += r->anxiety * (info->gaussian_shake * ny - info->centripetal * y) * step;
    vx += dvx, vy += dvy;
    const double speed = hypot(vx, vy);
    if (speed > 0.0) vx *= step / speed, vy *= step / speed;
    x += vx, y += vy;
    px[t + 1] = x, py[t + 1] = y;
  }
  /* Centre the bounding box on the kernel's centre, shrinking to fit. */
  double x0 = px[0], x1 = px[0], y0 = py[0], y1 = py[0];
  for (int t = 1; t < used; t++) {
    x0 = fmin(x0, px[t]), x1 = fmax(x1, px[t]);
    y0 = fmin(y0, py[t]), y1 = fmax(y1, py[t]);
  }
  const double extent = fmax(x1 - x0, y1 - y0), room = K - 1;
  info->fit_scale = extent > room ? room / extent : 1.0;
  const double cx = 0.5 * (x0 + x1), cy = 0.5 * (y0 + y1), centre = 0.5 * (K - 1);
  for (int t = 0; t < used; t++) {
    const double sx = centre + (px[t] - cx) * info->fit_scale, sy = centre + (py[t] - cy) * info->fit_scale;
    const double fx = floor(sx), fy = floor(sy), ax = sx - fx, ay = sy - fy;
    const int ix = (int)fx, iy = (int)fy;
    const double w[4] = {(1 - ax) * (1 - ay), ax * (1 - ay), (1 - ax) * ay, ax * ay};
    const int dx[4] = {0, 1, 0, 1}, dy[4] = {0, 0, 1, 1};
    for (int k = 0; k < 4; k++) {
      const int cx_ = ix + dx[k], cy_ = iy + dy[k];
      /* Only a zero weight can fall outside (at the far edge). */
      if (cx_ >= 0 && cx_ < K && cy_ >= 0 && cy_ < K) acc[cy_ * K + cx_] += w[k];
    }
  }
  double total = 0.0;
  for (int i = 0; i < K * K; i++) total += acc[i];
  for (int i = 0; i < K * K; i++) kernel[i] = (float)(acc[i] / total);
  free(px), free(py), free(acc);
  return 0;
}

int motion_blur_apply(const float *src, int channels, int height, int width, const float *kernel, int kernel_size,
                      double noise_sigma, uint64_t noise_seed, float *dst, Error *err) {
  if (channels < 1 || height < 1 || width < 1)
    return error_set(err, ERR_ARG, "motion blur: image of %d x %d x %d, expected every size >= 1", channels, height,
                     width);
  if (kernel_size < 1 || kernel_size % 2 == 0 || kernel_size > MOTION_BLUR_MAX_KERNEL)
    return error_set(err, ERR_ARG, "motion blur: kernel_size %d, expected an odd number in 1..%d", kernel_size,
                     MOTION_BLUR_MAX_KERNEL);
  if (!(noise_sigma >= 0.0 && noise_sigma <= 1.0))
    return error_set(err, ERR_ARG, "motion blur: noise sigma %g, expected 0..1", noise_sigma);
  const int K = kernel_size, half = K / 2;
  int *col = malloc(sizeof(int) * (size_t)width * (size_t)K);
  if (!col) return error_set(err, ERR_NOMEM, "motion blur: out of memory");
  /* col[x * K + j]: the source column tap j of output column x reads. */
  for (int x = 0; x < width; x++)
    for (int j = 0; j < K; j++) {
      int sx = x + half - j;
      col[x * K + j] = sx < 0 ? 0 : sx >= width ? width - 1 : sx;
    }
#pragma omp parallel for collapse(2) schedule(static)
  for (int c = 0; c < channels; c++)
    for (int y = 0; y < height; y++) {
      const float *plane = src + (size_t)c * height * width;
      float *out = dst + ((size_t)c * height + y) * width;
      for (int x = 0; x < width; x++) out[x] = 0.0f;
      for (int i = 0; i < K; i++) {
        int sy = y + half - i;
        sy = sy < 0 ? 0 : sy >= height ? height - 1 : sy;
        const float *row = plane + (size_t)sy * width;
        for (int j = 0; j < K; j++) {
          const float w = kernel[i * K + j];
          if (w == 0.0f) continue;
          for (int x = 0; x < width; x++) out[x] += w * row[col[x * K + j]];
        }
      }
      if (noise_sigma > 0.0)
        for (int x = 0; x < width; x++) {
          const uint64_t index = ((uint64_t)c * (uint64_t)height + (uint64_t)y) * (uint64_t)width + (uint64_t)x;
          out[x] += (float)(noise_sigma * rng_normal(noise_seed, STREAM_NOISE, index));
        }
      for (int x = 0; x < width; x++) out[x] = out[x] < 0.0f ? 0.0f : out[x] > 1.0f ? 1.0f : out[x];
    }
  free(col);
  return 0;
}
