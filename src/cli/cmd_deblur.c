/* `fivefold deblur --checkpoint RUN --input BLURRED --out SHARP
 * [--reference IMG]`: the generator of a GAN checkpoint (nets/gan.h) on an
 * image of any size. The generator is fully convolutional, so the network
 * is built for the image itself: padded (borders replicated) up to the
 * multiple of the encoder's stride, run, and cropped back. PNG or PGM in
 * and out (base/image_io.h); an RGB image for a grey model is taken as its
 * luma. With --reference the PSNR and SSIM of the input and of the output
 * against that sharp image are printed. */
#include "cli/cmd_deblur.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/image_io.h"
#include "base/json_util.h"
#include "base/options.h"
#include "ckpt/checkpoint.h"
#include "cli/cli_util.h"
#include "kern/image_metrics.h"
#include "nets/gan.h"

static void deblur_help(FILE *f) {
  fprintf(f,
          "usage: fivefold deblur --checkpoint RUN --input BLURRED --out SHARP [--reference IMG]\n\n"
          "Runs the generator of a trained deblurring GAN (model.family \"gan\") on one image of any\n"
          "size and writes the result (PGM when SHARP ends in .pgm, else PNG). The image is padded\n"
          "(borders replicated) to a multiple of the generator's stride and cropped back.\n\n"
          "options:\n"
          "  --checkpoint RUN   a checkpoint directory, or a run directory (its newest checkpoint)\n"
          "  --input BLURRED    the blurred image (PNG, PGM or JPEG; RGB is taken as grey for a grey model)\n"
          "  --out SHARP        the deblurred image\n"
          "  --reference IMG    the sharp image, to print the PSNR and SSIM of input and output\n"
          "  -h, --help         show this help\n");
}

/* The GAN config a checkpoint's run config records. */
static int read_gan_config(const char *ckpt, GanConfig *cfg, Error *err) {
  cJSON *run = NULL;
  int rc = checkpoint_read_train_config(ckpt, &run, err);
  if (rc) return rc;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(run, "model");
  const cJSON *family = cJSON_GetObjectItemCaseSensitive(model, "family");
  if (!cJSON_IsString(family) || strcmp(family->valuestring, "gan"))
    rc = error_set(err, ERR_CONFIG, "%s: model.family: expected \"gan\" (a deblurring GAN's checkpoint), got %s", ckpt,
                   cJSON_IsString(family) ? family->valuestring : "no family (a transformer)");
  else rc = gan_config_from_json(cfg, model, ckpt, err);
  cJSON_Delete(run);
  return rc;
}

/* dst [c, ph, pw] = src with its last row and column repeated. */
static void pad_replicate(const Image *src, int ph, int pw, float *dst) {
  for (int c = 0; c < src->channels; c++)
    for (int y = 0; y < ph; y++)
      for (int x = 0; x < pw; x++) {
        int sy = y < src->height ? y : src->height - 1, sx = x < src->width ? x : src->width - 1;
        dst[((size_t)c * ph + y) * pw + x] = src->data[((size_t)c * src->height + sy) * src->width + sx];
      }
}

static int deblur(const char *ckpt_path, const char *input, const char *out_path, const char *reference,
                  Error *err) {
  char ckpt[4096];
  GanConfig cfg;
  int rc = checkpoint_resolve(ckpt_path, ckpt, sizeof ckpt, err);
  if (!rc) rc = read_gan_config(ckpt, &cfg, err);
  if (rc) return rc;
  Image in = {0}, grey = {0}, result = {0}, ref = {0};
  if ((rc = image_read(input, &in, err))) return rc;
  if (in.channels == 3 && cfg.channels == 1) {
    rc = image_to_grey(&in, &grey, err);
    image_free(&in);
    if (rc) return rc;
    in = grey;
  }
  if (in.channels != cfg.channels) {
    image_free(&in);
    return error_set(err, ERR_ARG, "%s: %d channel(s), the model takes %d", input, in.channels, cfg.channels);
  }
  const int stride = gan_stride(&cfg);
  const int ph = (in.height + stride - 1) / stride * stride, pw = (in.width + stride - 1) / stride * stride;
  Network net = {0};
  float *padded = malloc((size_t)cfg.channels * ph * pw * sizeof(float) * 2);
  cJSON *record = gan_config_to_json(&cfg);
  if (!padded || !record) rc = error_set(err, ERR_NOMEM, "out of memory");
  if (!rc) rc = gan_create(&net, &cfg, ph, pw, 1, err);
  if (!rc) {
    json_shorten_floats(record); /* as the checkpoint records it */
    rc = checkpoint_load_weights(ckpt, &net, record, err);
  }
  float *made = padded ? padded + (size_t)cfg.channels * ph * pw : NULL;
  if (!rc) {
    pad_replicate(&in, ph, pw, padded);
    rc = gan_generate(&net, padded, 1, made, err);
  }
  if (!rc) rc = image_alloc(&result, in.channels, in.height, in.width, err);
  if (!rc) {
    for (int c = 0; c < in.channels; c++)
      for (int y = 0; y < in.height; y++)
        memcpy(result.data + ((size_t)c * in.height + y) * in.width, made + ((size_t)c * ph + y) * pw,
               (size_t)in.width * sizeof(float));
    rc = image_write(out_path, &result, err);
  }
  if (!rc)
    printf("deblur: %s (%d x %d, %d channel%s) -> %s with the generator of %s (padded to %d x %d)\n", input,
           in.width, in.height, in.channels, in.channels == 1 ? "" : "s", out_path, ckpt, pw, ph);
  if (!rc && reference) {
    double psnr_in = 0, psnr_out = 0, ssim_in = NAN, ssim_out = NAN;
    rc = image_read(reference, &ref, err);
    if (!rc && ref.channels == 3 && cfg.channels == 1) {
      Image g;
      if (!(rc = image_to_grey(&ref, &g, err))) image_free(&ref), ref = g;
    }
    if (!rc && (ref.channels != in.channels || ref.height != in.height || ref.width != in.width))
      rc = error_set(err, ERR_ARG, "%s: %d x %d x %d, expected the input's %d x %d x %d", reference, ref.channels,
                     ref.height, ref.width, in.channels, in.height, in.width);
    size_t n = image_numel(&in);
    if (!rc) rc = image_psnr(in.data, ref.data, n, 1.0, &psnr_in, err);
    if (!rc) rc = image_psnr(result.data, ref.data, n, 1.0, &psnr_out, err);
    if (!rc && in.height >= SSIM_WINDOW && in.width >= SSIM_WINDOW) {
      rc = image_ssim(in.data, ref.data, in.channels, in.height, in.width, 1.0, &ssim_in, err);
      if (!rc) rc = image_ssim(result.data, ref.data, in.channels, in.height, in.width, 1.0, &ssim_out, err);
    }
    if (!rc)
      printf("deblur: against %s: input PSNR %.2f dB SSIM %.4f, output PSNR %.2f dB SSIM %.4f\n", reference, psnr_in,
             ssim_in, psnr_out, ssim_out);
  }
  cJSON_Delete(record);
  if (net.ops) network_free(&net);
  free(padded);
  image_free(&in), image_free(&result), image_free(&ref);
  return rc;
}

int cmd_deblur(int argc, char **argv) {
  static const char *const KNOWN[] = {"--checkpoint", "--input", "--out", "--reference", "--help"};
  const char *ckpt = NULL, *input = NULL, *out = NULL, *reference = NULL;
  OptionParser op;
  Error err = {0};
  option_parser_init(&op, "deblur", argc, argv, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]));
  while (option_next(&op)) {
    if (option_is_help(&op)) {
      deblur_help(stdout);
      return 0;
    }
    const char **slot = option_is(&op, "--checkpoint") ? &ckpt
                        : option_is(&op, "--input")    ? &input
                        : option_is(&op, "--out")      ? &out
                        : option_is(&op, "--reference") ? &reference
                                                       : NULL;
    if (!slot) return cli_fail("deblur", 2, "%s", (option_unknown(&op, &err), err.msg));
    if (option_value(&op, slot, &err)) return cli_fail("deblur", 2, "%s", err.msg);
  }
  if (!ckpt) return cli_fail("deblur", 2, "no checkpoint given (--checkpoint RUN)");
  if (!input) return cli_fail("deblur", 2, "no input image given (--input BLURRED)");
  if (!out) return cli_fail("deblur", 2, "no output image given (--out SHARP)");
  int rc = deblur(ckpt, input, out, reference, &err);
  return rc ? cli_fail("deblur", rc == ERR_ARG ? 2 : 1, "%s", err.msg) : 0;
}
