/* `fivefold blur --input IMG --out IMG [--seed S --kernel-size K --noise
 * SIGMA ...]`: one motion-blurred copy of a user's image (kern/motion_blur.h)
 * and, beside it, the kernel as a picture (OUT.kernel.png, scaled so its
 * largest value is white) and as numbers with every parameter that made it
 * (OUT.kernel.json), so that the pair can be reproduced and a deconvolution
 * can be given the true kernel. */
#include "cli/cmd_blur.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/image_io.h"
#include "base/json_util.h"
#include "base/options.h"
#include "cli/cli_util.h"
#include "kern/image_metrics.h"
#include "kern/motion_blur.h"

static void blur_help(FILE *f) {
  fprintf(f,
          "usage: fivefold blur --input IMG --out IMG [--seed S] [--kernel-size K] [--noise SIGMA]\n"
          "                     [--length L] [--anxiety A] [--exposure E] [--samples N]\n\n"
          "Blurs an image (PNG or PGM; grey or RGB) by a random camera-shake kernel after Boracchi and\n"
          "Foi (2012), as DeblurGAN makes its training pairs, and writes the blurred image to OUT\n"
          "(PGM when OUT ends in .pgm, else PNG), the kernel as a picture to OUT.kernel.png (scaled\n"
          "so its largest value is white) and its values and parameters to OUT.kernel.json. The\n"
          "same seed and options give the same kernel and the same image, byte for byte.\n\n"
          "The blur is a convolution with replicated borders, then Gaussian noise, clamped to 0..1.\n\n"
          "options:\n"
          "  --input IMG        the sharp image\n"
          "  --out IMG          the blurred image\n"
          "  --seed S           seed of every random draw (default 1)\n"
          "  --kernel-size K    odd kernel side in pixels, 3..%d (default 13)\n"
          "  --noise SIGMA      standard deviation of the added noise, image values 0..1 (default 0)\n"
          "  --length L         path length of the camera shake in pixels (default K - 1)\n"
          "  --anxiety A        jerkiness of the path (default: drawn in 0.003..0.01)\n"
          "  --exposure E       fraction of the path the shutter sees, (0, 1] (default: drawn from\n"
          "                     0.1, 0.5, 1)\n"
          "  --samples N        points on the path (default 2000)\n"
          "  -h, --help         show this help\n",
          MOTION_BLUR_MAX_KERNEL);
}

/* OUT.kernel.json: the parameters resolved, the draws, and the values. */
static int write_kernel_json(const char *path, const MotionBlurInfo *info, uint64_t seed, double noise,
                             const float *kernel, Error *err) {
  const int K = info->params.kernel_size;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "generator",
                          "camera-shake trajectory (Boracchi and Foi 2012), fivefold kern/motion_blur");
  cJSON_AddNumberToObject(root, "seed", (double)seed);
  cJSON_AddNumberToObject(root, "kernel_size", K);
  cJSON_AddNumberToObject(root, "length", info->params.length);
  cJSON_AddNumberToObject(root, "anxiety", info->params.anxiety);
  cJSON_AddNumberToObject(root, "exposure", info->params.exposure);
  cJSON_AddNumberToObject(root, "samples", info->params.samples);
  cJSON_AddNumberToObject(root, "centripetal", info->centripetal);
  cJSON_AddNumberToObject(root, "gaussian_shake", info->gaussian_shake);
  cJSON_AddNumberToObject(root, "big_shake_probability", info->big_shake);
  cJSON_AddNumberToObject(root, "initial_angle_deg", info->initial_angle_deg);
  cJSON_AddNumberToObject(root, "big_shakes", info->big_shakes);
  cJSON_AddNumberToObject(root, "fit_scale", info->fit_scale);
  cJSON_AddNumberToObject(root, "noise_sigma", noise);
  cJSON_AddStringToObject(root, "border", "replicate");
  cJSON_AddStringToObject(root, "operation", "convolution (kernel flipped), then noise, clamped to 0..1");
  cJSON *rows = cJSON_AddArrayToObject(root, "kernel");
  for (int y = 0; y < K; y++) {
    cJSON *row = cJSON_CreateArray();
    for (int x = 0; x < K; x++) cJSON_AddItemToArray(row, cJSON_CreateNumber(json_float_value(kernel[y * K + x])));
    cJSON_AddItemToArray(rows, row);
  }
  int rc = json_write_file(path, root, err);
  cJSON_Delete(root);
  return rc;
}

int cmd_blur(int argc, char **argv) {
  static const char *const KNOWN[] = {"--input",  "--out",     "--seed",     "--kernel-size", "--noise",
                                      "--length", "--anxiety", "--exposure", "--samples",     "--help"};
  const char *input = NULL, *out = NULL;
  MotionBlurParams p = motion_blur_params_default();
  double seed = 1, noise = 0, kernel_size = p.kernel_size, samples = 0;
  OptionParser op;
  Error err = {0};
  option_parser_init(&op, "blur", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    if (option_is_help(&op)) {
      blur_help(stdout);
      return 0;
    }
    const char *v;
    int is_input = option_is(&op, "--input"), is_out = option_is(&op, "--out");
    double *num = option_is(&op, "--seed")          ? &seed
                  : option_is(&op, "--kernel-size") ? &kernel_size
                  : option_is(&op, "--noise")       ? &noise
                  : option_is(&op, "--length")      ? &p.length
                  : option_is(&op, "--anxiety")     ? &p.anxiety
                  : option_is(&op, "--exposure")    ? &p.exposure
                  : option_is(&op, "--samples")     ? &samples
                                                    : NULL;
    if (!is_input && !is_out && !num) return cli_fail("blur", 2, "%s", (option_unknown(&op, &err), err.msg));
    if (option_value(&op, &v, &err)) return cli_fail("blur", 2, "%s", err.msg);
    if (is_input) input = v;
    else if (is_out) out = v;
    else {
      const int integer = num == &seed || num == &kernel_size || num == &samples;
      const double hi = num == &seed          ? 9007199254740992.0
                        : num == &kernel_size ? MOTION_BLUR_MAX_KERNEL
                        : num == &samples     ? 1000000
                        : num == &p.length    ? 100.0 * MOTION_BLUR_MAX_KERNEL
                                              : 1.0;
      if (cli_parse_number(&op, v, 0, hi, integer, num, &err)) return cli_fail("blur", 2, "%s", err.msg);
    }
  }
  if (!input) return cli_fail("blur", 2, "no input image given (--input IMG)");
  if (!out) return cli_fail("blur", 2, "no output image given (--out IMG)");
  p.kernel_size = (int)kernel_size, p.samples = (int)samples;
  Image sharp, blurred = {0}, kimage = {0};
  if (image_read(input, &sharp, &err)) return cli_fail("blur", 1, "%s", err.msg);
  const int K = p.kernel_size;
  float *kernel = malloc(sizeof(float) * (size_t)K * (size_t)K);
  MotionBlurInfo info;
  int rc = kernel ? 0 : error_set(&err, ERR_NOMEM, "out of memory for the kernel");
  if (!rc) rc = motion_blur_kernel(&p, (uint64_t)seed, kernel, &info, &err);
  if (!rc) rc = image_alloc(&blurred, sharp.channels, sharp.height, sharp.width, &err);
  /* The noise has its own seed derived from the kernel's, so that changing
   * --noise never changes the kernel. */
  if (!rc)
    rc = motion_blur_apply(sharp.data, sharp.channels, sharp.height, sharp.width, kernel, K, noise,
                           (uint64_t)seed ^ 0x6e6f697365ULL, blurred.data, &err);
  if (!rc) rc = image_write(out, &blurred, &err);
  char kpath[4096];
  if (!rc && (size_t)snprintf(kpath, sizeof kpath, "%s.kernel.png", out) >= sizeof kpath)
    rc = error_set(&err, ERR_ARG, "--out '%s' is too long a path", out);
  if (!rc) rc = image_alloc(&kimage, 1, K, K, &err);
  if (!rc) {
    float peak = 0.0f;
    for (int i = 0; i < K * K; i++) peak = kernel[i] > peak ? kernel[i] : peak;
    for (int i = 0; i < K * K; i++) kimage.data[i] = kernel[i] / peak;
    rc = image_write(kpath, &kimage, &err);
  }
  if (!rc) {
    snprintf(kpath, sizeof kpath, "%s.kernel.json", out);
    rc = write_kernel_json(kpath, &info, (uint64_t)seed, noise, kernel, &err);
  }
  double psnr = 0.0;
  if (!rc) rc = image_psnr(blurred.data, sharp.data, image_numel(&sharp), 1.0, &psnr, &err);
  if (!rc)
    printf(
        "blur: %s (%d x %d, %d channel%s) -> %s: kernel %d x %d (seed %.0f, length %g px, anxiety %.4f, "
        "exposure %g%s), noise %g; PSNR against the input %.2f dB; kernel in %s.kernel.png/.json\n",
        input, sharp.width, sharp.height, sharp.channels, sharp.channels == 1 ? "" : "s", out, K, K, seed,
        info.params.length * info.fit_scale, info.params.anxiety, info.params.exposure,
        info.fit_scale < 1.0 ? ", shrunk to fit" : "", noise, psnr, out);
  image_free(&sharp), image_free(&blurred), image_free(&kimage);
  free(kernel);
  return rc ? cli_fail("blur", rc == ERR_ARG ? 2 : 1, "%s", err.msg) : 0;
}
