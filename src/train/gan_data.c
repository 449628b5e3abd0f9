/* The GAN's blurred/sharp pairs (train/gan_data.h): the image-set
 * directory read into memory, the seeded order and the per-pair blur. */
#include "train/gan_data.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file_text.h"
#include "base/image_io.h"
#include "base/json_util.h"
#include "base/rng.h"
#include "kern/motion_blur.h"

#define MANIFEST_MAX_BYTES (64u << 20)
#define VAL_EPOCH UINT64_C(0xfffffffffff) /* the blur "epoch" of the validation pairs */
#define AUGMENT_STREAM UINT64_C(0x6175676d656e74) /* the augmentation's draws, apart from the blur's */

void gan_data_config_defaults(GanDataConfig *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->kernel_size = 9;
  cfg->blur_seed = 1;
}

static int bad(Error *err, const char *origin, const char *field, const char *expected, const cJSON *v) {
  return error_set(err, ERR_CONFIG, "%s: data.%s: expected %s, got %s", origin, field, expected,
                   cJSON_IsNumber(v) ? "a number out of range" : json_type_name(v));
}

static int read_int(const cJSON *v, const char *field, int lo, int hi, int *out, const char *origin, Error *err) {
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
    char expected[64];
    snprintf(expected, sizeof expected, "an integer in %d..%d", lo, hi);
    return bad(err, origin, field, expected, v);
  }
  *out = (int)v->valuedouble;
  return 0;
}

int gan_data_config_from_json(GanDataConfig *cfg, const cJSON *obj, const char *origin, Error *err) {
  static const char *const FIELDS[] = {"dir",           "kernel_size", "noise_sigma", "blur_seed", "max_train_images",
                                       "max_val_images", "flip",        "shift"};
  if (!cJSON_IsObject(obj)) return bad(err, origin, "", "an object", obj);
  for (const cJSON *f = obj->child; f; f = f->next) {
    int known = 0;
    for (size_t k = 0; k < sizeof FIELDS / sizeof FIELDS[0]; k++) known |= !strcmp(f->string, FIELDS[k]);
    if (!known)
      return error_set(err, ERR_CONFIG, "%s: data.%s: unknown field of a gan run's data (expected dir, "
                       "kernel_size, noise_sigma, blur_seed, max_train_images, max_val_images, flip, shift)", origin, f->string);
  }
  const cJSON *dir = cJSON_GetObjectItemCaseSensitive(obj, "dir");
  if (!cJSON_IsString(dir) || !dir->valuestring[0] || strlen(dir->valuestring) >= sizeof cfg->dir)
    return dir ? bad(err, origin, "dir", "the path of an image-set directory (fivefold images --out)", dir)
               : error_set(err, ERR_CONFIG, "%s: data.dir: expected the image-set directory of the sharp images "
                           "(fivefold images --out DIR), got nothing (the field is required)", origin);
  snprintf(cfg->dir, sizeof cfg->dir, "%s", dir->valuestring);
  const cJSON *v;
  int rc = 0, seed = (int)cfg->blur_seed;
  if ((v = cJSON_GetObjectItemCaseSensitive(obj, "kernel_size"))) {
    rc = read_int(v, "kernel_size", 3, MOTION_BLUR_MAX_KERNEL, &cfg->kernel_size, origin, err);
    if (!rc && cfg->kernel_size % 2 == 0) rc = bad(err, origin, "kernel_size", "an odd kernel size", v);
  }
  if (!rc && (v = cJSON_GetObjectItemCaseSensitive(obj, "noise_sigma"))) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1))
      rc = bad(err, origin, "noise_sigma", "a number in 0..1", v);
    else cfg->noise_sigma = v->valuedouble;
  }
  if (!rc && (v = cJSON_GetObjectItemCaseSensitive(obj, "blur_seed")))
    rc = read_int(v, "blur_seed", 0, 2000000000, &seed, origin, err);
  cfg->blur_seed = (uint64_t)seed;
  if (!rc && (v = cJSON_GetObjectItemCaseSensitive(obj, "max_train_images")))
    rc = read_int(v, "max_train_images", 0, 1000000000, &cfg->max_train_images, origin, err);
  if (!rc && (v = cJSON_GetObjectItemCaseSensitive(obj, "max_val_images")))
    rc = read_int(v, "max_val_images", 0, 1000000000, &cfg->max_val_images, origin, err);
  if (!rc && (v = cJSON_GetObjectItemCaseSensitive(obj, "flip"))) {
    if (!cJSON_IsBool(v)) rc = bad(err, origin, "flip", "true or false", v);
    else cfg->flip = cJSON_IsTrue(v);
  }
  if (!rc && (v = cJSON_GetObjectItemCaseSensitive(obj, "shift")))
    rc = read_int(v, "shift", 0, GAN_DATA_MAX_SHIFT, &cfg->shift, origin, err);
  return rc;
}

cJSON *gan_data_config_to_json(const GanDataConfig *cfg) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "dir", cfg->dir);
  cJSON_AddNumberToObject(o, "kernel_size", cfg->kernel_size);
  cJSON_AddNumberToObject(o, "noise_sigma", cfg->noise_sigma);
  cJSON_AddNumberToObject(o, "blur_seed", (double)cfg->blur_seed);
  cJSON_AddNumberToObject(o, "max_train_images", cfg->max_train_images);
  cJSON_AddNumberToObject(o, "max_val_images", cfg->max_val_images);
  cJSON_AddBoolToObject(o, "flip", cfg->flip);
  cJSON_AddNumberToObject(o, "shift", cfg->shift);
  return o;
}

size_t gan_data_image_floats(const GanData *d) { return (size_t)d->channels * d->size * d->size; }

/* sharp blurred into blurred by the kernel of `seed`. */
static int blur_pair(const GanData *d, uint64_t seed, const float *sharp, float *blurred, Error *err) {
  float kernel[MOTION_BLUR_MAX_KERNEL * MOTION_BLUR_MAX_KERNEL];
  MotionBlurParams p = motion_blur_params_default();
  p.kernel_size = d->cfg.kernel_size;
  MotionBlurInfo info;
  int rc = motion_blur_kernel(&p, seed, kernel, &info, err);
  if (!rc) rc = motion_blur_apply(sharp, d->channels, d->size, d->size, kernel, p.kernel_size, d->cfg.noise_sigma,
                                  rng_hash64(seed), blurred, err);
  return rc;
}

static uint64_t pair_seed(const GanData *d, uint64_t epoch, uint64_t image) {
  return rng_hash64(rng_hash64(d->cfg.blur_seed ^ rng_hash64(epoch + 1)) ^ image);
}

/* Image k of the manifest's list into dst, checked against the set's shape. */
static int read_png(const GanData *d, const char *file, float *dst, Error *err) {
  char path[GAN_DATA_PATH_MAX + 160];
  snprintf(path, sizeof path, "%s/%s", d->cfg.dir, file);
  Image im;
  int rc = image_read(path, &im, err);
  if (rc) return rc;
  if (im.channels != d->channels || im.height != d->size || im.width != d->size)
    rc = error_set(err, ERR_FORMAT, "%s: %d x %d x %d, expected %d x %d x %d as manifest.json says", path,
                   im.channels, im.height, im.width, d->channels, d->size, d->size);
  else memcpy(dst, im.data, image_numel(&im) * sizeof(float));
  image_free(&im);
  return rc;
}

static int manifest_int(const cJSON *root, const char *field, const char *path, int lo, int hi, int *out, Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, field);
  if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi)
    return error_set(err, ERR_FORMAT, "%s: %s: expected an integer in %d..%d", path, field, lo, hi);
  *out = (int)v->valuedouble;
  return 0;
}

static int load_splits(GanData *d, const cJSON *images, const char *path, Error *err) {
  size_t want_train = 0, want_val = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, images) {
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(e, "split");
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(e, "file");
    if (!cJSON_IsString(split) || !cJSON_IsString(file))
      return error_set(err, ERR_FORMAT, "%s: images[]: expected objects with \"file\" and \"split\"", path);
    want_train += !strcmp(split->valuestring, "train");
    want_val += !strcmp(split->valuestring, "val");
  }
  if (d->cfg.max_train_images && want_train > (size_t)d->cfg.max_train_images) want_train = d->cfg.max_train_images;
  if (d->cfg.max_val_images && want_val > (size_t)d->cfg.max_val_images) want_val = d->cfg.max_val_images;
  if (!want_train)
    return error_set(err, ERR_CONFIG, "%s: no training images (split \"train\"); expected at least one", path);
  size_t img = gan_data_image_floats(d);
  d->train = malloc(want_train * img * sizeof(float));
  d->val_sharp = malloc((want_val ? want_val : 1) * img * sizeof(float));
  d->val_blur = malloc((want_val ? want_val : 1) * img * sizeof(float));
  if (!d->train || !d->val_sharp || !d->val_blur) return error_set(err, ERR_NOMEM, "out of memory for the images");
  int rc = 0;
  cJSON_ArrayForEach(e, images) {
    const char *split = cJSON_GetObjectItemCaseSensitive(e, "split")->valuestring;
    const char *file = cJSON_GetObjectItemCaseSensitive(e, "file")->valuestring;
    if (!strcmp(split, "train") && d->num_train < want_train)
      rc = read_png(d, file, d->train + d->num_train++ * img, err);
    else if (!strcmp(split, "val") && d->num_val < want_val) {
      size_t k = d->num_val++;
      rc = read_png(d, file, d->val_sharp + k * img, err);
      if (!rc) rc = blur_pair(d, pair_seed(d, VAL_EPOCH, k), d->val_sharp + k * img, d->val_blur + k * img, err);
    }
    if (rc) return rc;
  }
  return 0;
}

int gan_data_open(GanData *d, const GanDataConfig *cfg, Error *err) {
  memset(d, 0, sizeof *d);
  d->cfg = *cfg;
  char path[GAN_DATA_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/manifest.json", cfg->dir);
  char *text = NULL;
  int rc = file_read_text(path, "image-set manifest (fivefold images --out DIR writes it)", MANIFEST_MAX_BYTES, &text,
                          NULL, err);
  if (rc) return rc;
  cJSON *root = cJSON_Parse(text);
  free(text);
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return error_set(err, ERR_FORMAT, "%s: not a JSON object", path);
  }
  const cJSON *images = cJSON_GetObjectItemCaseSensitive(root, "images");
  rc = manifest_int(root, "size", path, 4, 4096, &d->size, err);
  if (!rc) rc = manifest_int(root, "channels", path, 1, 3, &d->channels, err);
  if (!rc && !cJSON_IsArray(images)) rc = error_set(err, ERR_FORMAT, "%s: images: expected an array", path);
  if (!rc) rc = load_splits(d, images, path, err);
  cJSON_Delete(root);
  if (rc) gan_data_close(d);
  return rc;
}

void gan_data_close(GanData *d) {
  free(d->train);
  free(d->val_sharp);
  free(d->val_blur);
  d->train = d->val_sharp = d->val_blur = NULL;
}

void gan_data_pair_info(const GanData *d, const DataLoaderState *state, uint64_t offset, GanPairInfo *info) {
  uint64_t at = state->position + offset;
  uint64_t epoch = state->epoch + at / d->num_train, pos = at % d->num_train;
  memset(info, 0, sizeof *info);
  info->image = data_loader_window_at(state->seed, epoch, pos, d->num_train);
  info->blur_seed = pair_seed(d, epoch, info->image);
  if (d->cfg.flip) info->flipped = (int)(rng_u64(info->blur_seed, AUGMENT_STREAM, 0) & 1);
  if (d->cfg.shift > 0) {
    uint64_t span = 2 * (uint64_t)d->cfg.shift + 1;
    info->dx = (int)(rng_u64(info->blur_seed, AUGMENT_STREAM, 1) % span) - d->cfg.shift;
    info->dy = (int)(rng_u64(info->blur_seed, AUGMENT_STREAM, 2) % span) - d->cfg.shift;
  }
}

static int clamp_index(int v, int n) { return v < 0 ? 0 : v >= n ? n - 1 : v; }

void gan_data_augment(const GanData *d, const float *src, int flipped, int dx, int dy, float *dst) {
  int s = d->size;
  for (int c = 0; c < d->channels; c++) {
    const float *in = src + (size_t)c * s * s;
    float *out = dst + (size_t)c * s * s;
    for (int y = 0; y < s; y++) {
      const float *row = in + (size_t)clamp_index(y - dy, s) * s;
      for (int x = 0; x < s; x++) {
        int from = clamp_index(x - dx, s);
        out[(size_t)y * s + x] = row[flipped ? s - 1 - from : from];
      }
    }
  }
}

int gan_data_train_batch(const GanData *d, const DataLoaderState *state, uint64_t offset, int n, float *sharp,
                         float *blurred, Error *err) {
  size_t img = gan_data_image_floats(d);
  for (int b = 0; b < n; b++) {
    GanPairInfo info;
    gan_data_pair_info(d, state, offset + (uint64_t)b, &info);
    float *dst = sharp + (size_t)b * img;
    const float *src = d->train + info.image * img;
    if (info.flipped || info.dx || info.dy) gan_data_augment(d, src, info.flipped, info.dx, info.dy, dst);
    else memcpy(dst, src, img * sizeof(float));
    int rc = blur_pair(d, info.blur_seed, dst, blurred + (size_t)b * img, err);
    if (rc) return rc;
  }
  return 0;
}

void gan_data_advance(const GanData *d, DataLoaderState *state, uint64_t count) {
  uint64_t at = state->position + count;
  state->epoch += at / d->num_train;
  state->position = at % d->num_train;
}
