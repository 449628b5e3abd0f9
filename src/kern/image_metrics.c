/* PSNR and Gaussian-window SSIM (kern/image_metrics.h). The SSIM map is
 * needed only where the window lies inside the image, so the separable
 * Gaussian filter runs over valid positions only and no padding rule is
 * involved. */
#include "kern/image_metrics.h"

#include <math.h>
#include <stdlib.h>

int image_psnr(const float *test, const float *reference, size_t n, double data_range, double *psnr, Error *err) {
  if (n == 0) return error_set(err, ERR_ARG, "psnr: empty images");
  if (!(data_range > 0.0)) return error_set(err, ERR_ARG, "psnr: data range %g, expected > 0", data_range);
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)test[i] - (double)reference[i];
    sum += d * d;
  }
  const double mse = sum / (double)n;
  *psnr = mse == 0.0 ? INFINITY : 10.0 * log10(data_range * data_range / mse);
  return 0;
}

/* The five filtered moments of one channel: a, b, aa, bb, ab. */
enum { MOMENTS = 5 };

int image_ssim(const float *test, const float *reference, int channels, int height, int width, double data_range,
               double *ssim, Error *err) {
  const int R = SSIM_WINDOW / 2;
  if (channels < 1 || height < SSIM_WINDOW || width < SSIM_WINDOW)
    return error_set(err, ERR_ARG, "ssim: image of %d x %d x %d, expected >= 1 channel and sides >= %d", channels,
                     height, width, SSIM_WINDOW);
  if (!(data_range > 0.0)) return error_set(err, ERR_ARG, "ssim: data range %g, expected > 0", data_range);
  double g[SSIM_WINDOW], gsum = 0.0;
  for (int i = 0; i < SSIM_WINDOW; i++) {
    const double d = i - R;
    g[i] = exp(-0.5 * d * d / (SSIM_SIGMA * SSIM_SIGMA));
    gsum += g[i];
  }
  for (int i = 0; i < SSIM_WINDOW; i++) g[i] /= gsum;
  const int ow = width - 2 * R, oh = height - 2 * R;
  /* rows[m][y * ow + x]: moment m filtered along x, at every row. */
  double *rows = malloc(sizeof(double) * MOMENTS * (size_t)height * (size_t)ow);
  if (!rows) return error_set(err, ERR_NOMEM, "ssim: out of memory for a %d x %d image", height, width);
  const double c1 = (SSIM_K1 * data_range) * (SSIM_K1 * data_range);
  const double c2 = (SSIM_K2 * data_range) * (SSIM_K2 * data_range);
  double total = 0.0;
  for (int c = 0; c < channels; c++) {
    const float *a = test + (size_t)c * height * width, *b = reference + (size_t)c * height * width;
    for (int y = 0; y < height; y++)
      for (int x = 0; x < ow; x++) {
        double m[MOMENTS] = {0};
        for (int k = 0; k < SSIM_WINDOW; k++) {
          const double va = a[(size_t)y * width + x + k], vb = b[(size_t)y * width + x + k];
          m[0] += g[k] * va, m[1] += g[k] * vb;
          m[2] += g[k] * va * va, m[3] += g[k] * vb * vb, m[4] += g[k] * va * vb;
        }
        for (int q = 0; q < MOMENTS; q++) rows[((size_t)q * height + y) * ow + x] = m[q];
      }
    double channel_sum = 0.0;
    for (int y = 0; y < oh; y++)
      for (int x = 0; x < ow; x++) {
        double m[MOMENTS] = {0};
        for (int k = 0; k < SSIM_WINDOW; k++)
          for (int q = 0; q < MOMENTS; q++) m[q] += g[k] * rows[((size_t)q * height + y + k) * ow + x];
        const double va = m[2] - m[0] * m[0], vb = m[3] - m[1] * m[1], cov = m[4] - m[0] * m[1];
        channel_sum +=
            ((2.0 * m[0] * m[1] + c1) * (2.0 * cov + c2)) / ((m[0] * m[0] + m[1] * m[1] + c1) * (va + vb + c2));
      }
    total += channel_sum / ((double)oh * (double)ow);
  }
  free(rows);
  *ssim = total / channels;
  return 0;
}
