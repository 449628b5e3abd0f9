/* image_metrics_dump: fivefold's PSNR and SSIM (src/kern/image_metrics.h)
 * of two raw float32 images, for the scikit-image parity test
 * (tests/torch_ref/image_metrics_parity.py).
 *
 *   image_metrics_dump CHANNELS HEIGHT WIDTH DATA_RANGE TEST.f32 REFERENCE.f32
 *
 * Each file holds CHANNELS x HEIGHT x WIDTH little-endian float32 values
 * (CHW). Prints "psnr <dB>" and "ssim <value>", 17 significant digits. */
#include <stdio.h>
#include <stdlib.h>

#include "kern/image_metrics.h"

static float *read_floats(const char *path, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  float *v = malloc(n * sizeof(float));
  size_t got = v ? fread(v, sizeof(float), n, f) : 0;
  int extra = fgetc(f);
  fclose(f);
  if (got != n || extra != EOF) {
    free(v);
    return NULL;
  }
  return v;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: image_metrics_dump C H W DATA_RANGE TEST.f32 REFERENCE.f32\n");
    return 2;
  }
  const int c = atoi(argv[1]), h = atoi(argv[2]), w = atoi(argv[3]);
  const double range = atof(argv[4]);
  if (c < 1 || h < 1 || w < 1) {
    fprintf(stderr, "image_metrics_dump: bad shape %s x %s x %s\n", argv[1], argv[2], argv[3]);
    return 2;
  }
  const size_t n = (size_t)c * (size_t)h * (size_t)w;
  float *a = read_floats(argv[5], n), *b = read_floats(argv[6], n);
  if (!a || !b) {
    fprintf(stderr, "image_metrics_dump: %s or %s is not %zu float32 values\n", argv[5], argv[6], n);
    return 1;
  }
  double psnr, ssim;
  Error err;
  if (image_psnr(a, b, n, range, &psnr, &err) || image_ssim(a, b, c, h, w, range, &ssim, &err)) {
    fprintf(stderr, "image_metrics_dump: %s\n", err.msg);
    return 1;
  }
  printf("psnr %.17g\nssim %.17g\n", psnr, ssim);
  free(a), free(b);
  return 0;
}
