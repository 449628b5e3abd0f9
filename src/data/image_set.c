/* Fashion-MNIST parts, pixels and training order (data/image_set.h). */
#include "data/image_set.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_util.h"
#include "base/rng.h"

#define FM_TRAIN_MEAN 0.2860
#define FM_TRAIN_STD 0.3530

static const char *const NOISE_ON[] = {"test", "eval", "train", "all", NULL};

enum { STREAM_GAUSS = 0x696d6700, STREAM_SP_WHICH = 0x696d6710, STREAM_SP_VALUE = 0x696d6720 };

const char *image_noise_on_name(int noise_on) {
  return noise_on >= 0 && noise_on <= IMAGE_NOISE_ALL ? NOISE_ON[noise_on] : "?";
}

void image_set_config_defaults(ImageSetConfig *cfg) {
  memset(cfg, 0, sizeof *cfg);
  snprintf(cfg->dir, sizeof cfg->dir, "%s", FASHION_MNIST_DIR);
  cfg->val_images = 5000;
  cfg->normalize = 1;
  cfg->mean = FM_TRAIN_MEAN;
  cfg->std = FM_TRAIN_STD;
  cfg->noise_on = IMAGE_NOISE_TEST;
  cfg->noise_seed = 1;
  cfg->test_at_end = 1;
}

static int bad(Error *err, const char *origin, const char *field, const char *expected, const cJSON *v) {
  return error_set(err, ERR_CONFIG, "%s: data.%s: expected %s, got %s", origin, field, expected,
                   cJSON_IsNumber(v) ? "a number out of range" : json_type_name(v));
}

static int read_count(const cJSON *v, const char *field, int lo, int *out, const char *origin, Error *err) {
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > 1e9)
    return bad(err, origin, field, lo ? "an integer >= 1" : "an integer >= 0", v);
  *out = (int)v->valuedouble;
  return 0;
}

static int read_unit(const cJSON *v, const char *field, double *out, const char *origin, Error *err) {
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1))
    return bad(err, origin, field, "a number in 0..1", v);
  *out = v->valuedouble;
  return 0;
}

static int read_seed(const cJSON *v, const char *field, uint64_t *out, const char *origin, Error *err) {
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 || v->valuedouble > 9e15)
    return bad(err, origin, field, "a non-negative integer", v);
  *out = (uint64_t)v->valuedouble;
  return 0;
}

int image_set_config_from_json(ImageSetConfig *cfg, const cJSON *obj, const char *origin, Error *err) {
  if (!cJSON_IsObject(obj)) return bad(err, origin, "", "an object", obj);
  int rc = 0;
  for (const cJSON *f = obj->child; f && !rc; f = f->next) {
    const char *k = f->string;
    if (!strcmp(k, "dir")) {
      if (!cJSON_IsString(f) || !f->valuestring[0] || strlen(f->valuestring) >= sizeof cfg->dir)
        rc = bad(err, origin, k, "a directory path", f);
      else snprintf(cfg->dir, sizeof cfg->dir, "%s", f->valuestring);
    } else if (!strcmp(k, "val_images")) rc = read_count(f, k, 0, &cfg->val_images, origin, err);
    else if (!strcmp(k, "split_seed")) rc = read_seed(f, k, &cfg->split_seed, origin, err);
    else if (!strcmp(k, "max_train_images")) rc = read_count(f, k, 0, &cfg->max_train_images, origin, err);
    else if (!strcmp(k, "max_val_images")) rc = read_count(f, k, 0, &cfg->max_val_images, origin, err);
    else if (!strcmp(k, "max_test_images")) rc = read_count(f, k, 0, &cfg->max_test_images, origin, err);
    else if (!strcmp(k, "normalize") || !strcmp(k, "test_at_end")) {
      if (!cJSON_IsBool(f)) rc = bad(err, origin, k, "true or false", f);
      else *(k[0] == 'n' ? &cfg->normalize : &cfg->test_at_end) = cJSON_IsTrue(f);
    } else if (!strcmp(k, "mean")) {
      if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble)) rc = bad(err, origin, k, "a number", f);
      else cfg->mean = f->valuedouble;
    } else if (!strcmp(k, "std")) {
      if (!cJSON_IsNumber(f) || !(f->valuedouble > 0 && isfinite(f->valuedouble)))
        rc = bad(err, origin, k, "a number > 0", f);
      else cfg->std = f->valuedouble;
    } else if (!strcmp(k, "noise_gaussian")) rc = read_unit(f, k, &cfg->noise_gaussian, origin, err);
    else if (!strcmp(k, "noise_salt_pepper")) rc = read_unit(f, k, &cfg->noise_salt_pepper, origin, err);
    else if (!strcmp(k, "noise_seed")) rc = read_seed(f, k, &cfg->noise_seed, origin, err);
    else if (!strcmp(k, "noise_on")) {
      int found = -1;
      for (int i = 0; cJSON_IsString(f) && NOISE_ON[i]; i++)
        if (!strcmp(f->valuestring, NOISE_ON[i])) found = i;
      if (found < 0) rc = bad(err, origin, k, "\"test\", \"eval\", \"train\" or \"all\"", f);
      else cfg->noise_on = found;
    } else {
      rc = error_set(err, ERR_CONFIG, "%s: data.%s: unknown field of a vision run's data (expected dir, val_images, "
                     "split_seed, max_train_images, max_val_images, max_test_images, normalize, mean, std, "
                     "noise_gaussian, noise_salt_pepper, noise_on, noise_seed, test_at_end)", origin, k);
    }
  }
  return rc;
}

cJSON *image_set_config_to_json(const ImageSetConfig *cfg) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "dir", cfg->dir);
  cJSON_AddNumberToObject(o, "val_images", cfg->val_images);
  cJSON_AddNumberToObject(o, "split_seed", (double)cfg->split_seed);
  cJSON_AddNumberToObject(o, "max_train_images", cfg->max_train_images);
  cJSON_AddNumberToObject(o, "max_val_images", cfg->max_val_images);
  cJSON_AddNumberToObject(o, "max_test_images", cfg->max_test_images);
  cJSON_AddBoolToObject(o, "normalize", cfg->normalize);
  cJSON_AddNumberToObject(o, "mean", cfg->mean);
  cJSON_AddNumberToObject(o, "std", cfg->std);
  cJSON_AddNumberToObject(o, "noise_gaussian", cfg->noise_gaussian);
  cJSON_AddNumberToObject(o, "noise_salt_pepper", cfg->noise_salt_pepper);
  cJSON_AddStringToObject(o, "noise_on", image_noise_on_name(cfg->noise_on));
  cJSON_AddNumberToObject(o, "noise_seed", (double)cfg->noise_seed);
  cJSON_AddBoolToObject(o, "test_at_end", cfg->test_at_end);
  return o;
}

/* A pixel byte without noise as make_image's loop computes it. */
static float clean_value(const ImageSetConfig *c, int v) {
  double u = v / 255.0;
  return (float)(c->normalize ? (u - c->mean) / c->std : u);
}

static size_t cap(size_t n, int max) { return max > 0 && (size_t)max < n ? (size_t)max : n; }

int image_set_open(ImageSet *s, const ImageSetConfig *cfg, Error *err) {
  memset(s, 0, sizeof *s);
  s->cfg = *cfg;
  int rc = fashion_mnist_read(cfg->dir, "train", &s->train_file, err);
  if (!rc) rc = fashion_mnist_read(cfg->dir, "t10k", &s->test_file, err);
  if (rc) {
    image_set_close(s);
    return rc;
  }
  size_t total = s->train_file.count;
  if ((size_t)cfg->val_images >= total) {
    image_set_close(s);
    return error_set(err, ERR_CONFIG, "data.val_images: %d of the %zu training images held out leaves none to train "
                     "on (expected fewer)", cfg->val_images, total);
  }
  size_t train_part = total - (size_t)cfg->val_images;
  s->num_train = cap(train_part, cfg->max_train_images);
  s->num_val = cap((size_t)cfg->val_images, cfg->max_val_images);
  s->num_test = cap(s->test_file.count, cfg->max_test_images);
  s->train_ids = malloc((s->num_train ? s->num_train : 1) * sizeof *s->train_ids);
  s->val_ids = malloc((s->num_val ? s->num_val : 1) * sizeof *s->val_ids);
  if (!s->train_ids || !s->val_ids) {
    image_set_close(s);
    return error_set(err, ERR_NOMEM, "out of memory for the image split");
  }
  for (size_t p = 0; p < s->num_train; p++)
    s->train_ids[p] = (uint32_t)data_loader_window_at(cfg->split_seed, 0, p, total);
  for (size_t p = 0; p < s->num_val; p++)
    s->val_ids[p] = (uint32_t)data_loader_window_at(cfg->split_seed, 0, train_part + p, total);
  for (int v = 0; v < 256; v++) s->clean[v] = clean_value(cfg, v);
  s->channels = 1;
  s->rows = s->train_file.rows;
  s->cols = s->train_file.cols;
  s->classes = FASHION_MNIST_CLASSES;
  return 0;
}

void image_set_close(ImageSet *s) {
  idx_image_set_free(&s->train_file);
  idx_image_set_free(&s->test_file);
  free(s->train_ids);
  free(s->val_ids);
  memset(s, 0, sizeof *s);
}

size_t image_set_count(const ImageSet *s, ImagePart part) {
  return part == IMAGE_PART_TRAIN ? s->num_train : part == IMAGE_PART_VAL ? s->num_val : s->num_test;
}

size_t image_set_pixels(const ImageSet *s) { return (size_t)s->channels * s->rows * s->cols; }

static int noisy(const ImageSetConfig *c, ImagePart part) {
  if (c->noise_gaussian <= 0 && c->noise_salt_pepper <= 0) return 0;
  switch (c->noise_on) {
  case IMAGE_NOISE_TEST: return part == IMAGE_PART_TEST;
  case IMAGE_NOISE_EVAL: return part != IMAGE_PART_TRAIN;
  case IMAGE_NOISE_TRAIN: return part == IMAGE_PART_TRAIN;
  default: return 1;
  }
}

/* One image's pixels into x; `counter` numbers the draw of its noise. */
static void make_image(const ImageSet *s, ImagePart part, const uint8_t *pixels, uint64_t counter, float *x) {
  const ImageSetConfig *c = &s->cfg;
  size_t n = image_set_pixels(s);
  int with_noise = noisy(c, part);
  if (!with_noise) {
    /* A clean pixel's value depends on the byte alone: the table holds the
     * same expression's result, so a lookup gives the same floats as the
     * loop below at a tenth of its cost (two divisions a pixel were 3% of
     * a LeNet-5 step). */
    for (size_t i = 0; i < n; i++) x[i] = s->clean[pixels[i]];
    return;
  }
  uint64_t stream_add = (uint64_t)part;
  for (size_t i = 0; i < n; i++) {
    double u = pixels[i] / 255.0;
    if (with_noise) {
      uint64_t at = counter * (uint64_t)n + i;
      if (c->noise_gaussian > 0) u += c->noise_gaussian * rng_normal(c->noise_seed, STREAM_GAUSS + stream_add, at);
      if (c->noise_salt_pepper > 0 &&
          rng_uniform(c->noise_seed, STREAM_SP_WHICH + stream_add, at) < c->noise_salt_pepper)
        u = rng_uniform(c->noise_seed, STREAM_SP_VALUE + stream_add, at) < 0.5 ? 0.0 : 1.0;
      u = u < 0 ? 0 : u > 1 ? 1 : u;
    }
    x[i] = (float)(c->normalize ? (u - c->mean) / c->std : u);
  }
}

void image_set_read(const ImageSet *s, ImagePart part, size_t k, float *x, int *label) {
  const IdxImageSet *file = part == IMAGE_PART_TEST ? &s->test_file : &s->train_file;
  size_t id = part == IMAGE_PART_TEST ? k : part == IMAGE_PART_VAL ? s->val_ids[k] : s->train_ids[k];
  make_image(s, part, file->pixels + id * image_set_pixels(s), k, x);
  *label = file->labels[id];
}

void image_set_train_batch(const ImageSet *s, const DataLoaderState *state, uint64_t offset, int n, float *x, int *y) {
  size_t pixels = image_set_pixels(s);
  for (int b = 0; b < n; b++) {
    uint64_t at = state->position + offset + (uint64_t)b;
    uint64_t epoch = state->epoch + at / s->num_train, pos = at % s->num_train;
    size_t id = s->train_ids[data_loader_window_at(state->seed, epoch, pos, s->num_train)];
    make_image(s, IMAGE_PART_TRAIN, s->train_file.pixels + id * pixels, epoch * s->num_train + pos,
               x + (size_t)b * pixels);
    y[b] = s->train_file.labels[id];
  }
}

void image_set_advance(const ImageSet *s, DataLoaderState *state, uint64_t count) {
  uint64_t at = state->position + count;
  state->epoch += at / s->num_train;
  state->position = at % s->num_train;
}
