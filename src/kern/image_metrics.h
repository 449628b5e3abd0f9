/* Image quality against a reference: PSNR and the mean SSIM of Wang et al.
 * (2004) with a Gaussian window, computed exactly as scikit-image's
 * peak_signal_noise_ratio and structural_similarity(gaussian_weights=True,
 * sigma=1.5, use_sample_covariance=False, data_range=R) compute them (the
 * tests compare the two, tests/torch_ref/image_metrics_parity.py), so that
 * the deblurring experiment's numbers mean what the literature's mean.
 *
 * Images are [channels, height, width] floats (CHW); a multi-channel
 * image's SSIM is the mean of its channels' (scikit-image's channel_axis).
 *
 * SSIM: local means, variances and covariance through an 11 x 11 Gaussian
 * window (sigma 1.5, truncated at 3.5 sigma: radius 5, normalised), the
 * population covariance, C1 = (0.01 R)^2, C2 = (0.03 R)^2, and the mean of
 * the SSIM map over the pixels whose window lies inside the image (a 5-pixel
 * border is left out, so how the border is padded never matters). Both
 * sides must be at least 11 pixels. Everything is accumulated in double. */
#ifndef FIVEFOLD_KERN_IMAGE_METRICS_H
#define FIVEFOLD_KERN_IMAGE_METRICS_H

#include <stddef.h>

#include "base/error.h"

#define SSIM_WINDOW 11
#define SSIM_SIGMA 1.5
#define SSIM_K1 0.01
#define SSIM_K2 0.03

/* 10 log10(R^2 / MSE) over n values; +inf for identical images. ERR_ARG
 * for n = 0 or R <= 0. */
int image_psnr(const float *test, const float *reference, size_t n, double data_range, double *psnr, Error *err);

/* Mean SSIM of test against reference. ERR_ARG for a side below 11 or
 * R <= 0; ERR_NOMEM. */
int image_ssim(const float *test, const float *reference, int channels, int height, int width, double data_range,
               double *ssim, Error *err);

#endif
