/* Gathering, splitting and writing an image set (data/image_dir.h). Images
 * are kept as read until the set is written, so that the crop, colour and
 * size options apply the same way to every source. */
#include "data/image_dir.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/idx.h"
#include "base/json_util.h"
#include "base/npy.h"
#include "base/rng.h"
#include "data/image_boxes.h"

ImageDirOptions image_dir_options_default(void) {
  ImageDirOptions o = {64, 1, 1.0, 0.1, 0.1, 1};
  return o;
}

static int add_source(ImageDir *s, const char *name, const char *path, Error *err) {
  if (s->num_sources == IMAGE_DIR_MAX_SOURCES)
    return error_set(err, ERR_ARG, "image set: more than %d sources", IMAGE_DIR_MAX_SOURCES);
  if (!name[0] || strlen(name) >= sizeof s->source_name[0] || strlen(path) >= sizeof s->source_path[0])
    return error_set(err, ERR_ARG, "image set: source name '%s' or path '%s' is empty or too long", name, path);
  for (const char *p = name; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
      return error_set(err, ERR_ARG, "image set: source name '%s', expected lower-case letters, digits, - and _", name);
  for (int i = 0; i < s->num_sources; i++)
    if (!strcmp(s->source_name[i], name)) return error_set(err, ERR_ARG, "image set: source '%s' given twice", name);
  snprintf(s->source_name[s->num_sources], sizeof s->source_name[0], "%s", name);
  snprintf(s->source_path[s->num_sources], sizeof s->source_path[0], "%s", path);
  s->source_count[s->num_sources] = 0;
  return s->num_sources++, 0;
}

/* Appends an empty item of the last source; its image is filled by the caller. */
static ImageDirItem *new_item(ImageDir *s, size_t index, int label, Error *err) {
  if (s->count == s->capacity) {
    size_t cap = s->capacity ? 2 * s->capacity : 256;
    ImageDirItem *items = realloc(s->items, cap * sizeof *items);
    if (!items) return error_set(err, ERR_NOMEM, "image set: out of memory for %zu images", cap), NULL;
    s->items = items, s->capacity = cap;
  }
  ImageDirItem *it = &s->items[s->count++];
  memset(it, 0, sizeof *it);
  it->source = s->num_sources - 1, it->index = index, it->label = label;
  s->source_count[it->source]++;
  return it;
}

int image_dir_add_npy(ImageDir *s, const char *path, const char *name, size_t first, size_t count, int label,
                      Error *err) {
  NpyArray a;
  int rc = npy_read_f32(path, &a, err);
  if (rc) return rc;
  const int rgb = a.ndim == 4;
  if (!(a.ndim == 3 || (a.ndim == 4 && a.dims[3] == 3)) || a.dims[1] < 1 || a.dims[2] < 1 ||
      a.dims[1] > IMAGE_MAX_SIDE || a.dims[2] > IMAGE_MAX_SIDE) {
    npy_free(&a);
    return error_set(err, ERR_FORMAT, "%s: shape of %d dimensions, expected [n, h, w] (grey) or [n, h, w, 3] (RGB)",
                     path, a.ndim);
  }
  const size_t n = (size_t)a.dims[0];
  if (first > n || (count && count > n - first)) {
    npy_free(&a);
    return error_set(err, ERR_ARG, "%s: images %zu..%zu asked for, the file has %zu", path, first, first + count - 1,
                     n);
  }
  if (!count) count = n - first;
  const float scale = a.descr[1] == 'u' ? 1.0f / 255.0f : 1.0f;
  for (size_t i = 0; i < a.count; i++)
    if (!(a.data[i] * scale >= 0.0f && a.data[i] * scale <= 1.0f)) {
      rc =
          error_set(err, ERR_FORMAT, "%s: value %zu is %g, expected 0..1 for '%s' images", path, i, a.data[i], a.descr);
      npy_free(&a);
      return rc;
    }
  if ((rc = add_source(s, name, path, err))) return npy_free(&a), rc;
  const int h = (int)a.dims[1], w = (int)a.dims[2], c = rgb ? 3 : 1;
  const size_t plane = (size_t)h * (size_t)w;
  for (size_t k = first; !rc && k < first + count; k++) {
    ImageDirItem *it = new_item(s, k, label, err);
    if (!it || (rc = image_alloc(&it->image, c, h, w, err))) {
      rc = rc ? rc : ERR_NOMEM;
      if (it) s->count--, s->source_count[it->source]--;
      break;
    }
    const float *src = a.data + k * plane * (size_t)c;
    for (size_t p = 0; p < plane; p++)
      for (int ch = 0; ch < c; ch++) it->image.data[(size_t)ch * plane + p] = src[p * (size_t)c + (size_t)ch] * scale;
  }
  npy_free(&a);
  return rc;
}

int image_dir_add_idx(ImageDir *s, const char *images_path, const char *labels_path, int classes, const char *name,
                      size_t limit, Error *err) {
  IdxImageSet set;
  int rc = idx_read_image_set(images_path, labels_path, classes, &set, err);
  if (rc) return rc;
  if ((rc = add_source(s, name, images_path, err))) return idx_image_set_free(&set), rc;
  const size_t n = limit && limit < set.count ? limit : set.count, plane = (size_t)set.rows * (size_t)set.cols;
  for (size_t k = 0; !rc && k < n; k++) {
    ImageDirItem *it = new_item(s, k, set.labels[k], err);
    if (!it || (rc = image_alloc(&it->image, 1, set.rows, set.cols, err))) {
      rc = rc ? rc : ERR_NOMEM;
      if (it) s->count--, s->source_count[it->source]--;
      break;
    }
    for (size_t p = 0; p < plane; p++) it->image.data[p] = set.pixels[k * plane + p] / 255.0f;
  }
  idx_image_set_free(&set);
  return rc;
}

int image_dir_add_boxes(ImageDir *s, const char *xml_path, const char *name, double margin, int label, Error *err) {
  if (!(margin >= 0.0 && margin <= 2.0))
    return error_set(err, ERR_ARG, "image set: box margin %g, expected 0..2 (a fraction of the box side)", margin);
  ImageBoxList boxes;
  int rc = image_boxes_read(xml_path, &boxes, err);
  if (rc) return rc;
  if ((rc = add_source(s, name, xml_path, err))) return image_boxes_free(&boxes), rc;
  size_t index = 0;
  for (int i = 0; !rc && i < boxes.num_images; i++) {
    Image photo;
    if ((rc = image_read(boxes.images[i].path, &photo, err))) break;
    for (int b = 0; !rc && b < boxes.images[i].num_boxes; b++, index++) {
      const ImageBox *box = &boxes.boxes[boxes.images[i].first_box + b];
      if (box->ignore) continue;
      const int longest = box->width > box->height ? box->width : box->height;
      int side = (int)lround(longest * (1.0 + 2.0 * margin));
      const int fit = photo.height < photo.width ? photo.height : photo.width;
      side = side > fit ? fit : side;
      int top = (int)lround(box->top + 0.5 * box->height - 0.5 * side);
      int left = (int)lround(box->left + 0.5 * box->width - 0.5 * side);
      top = top < 0 ? 0 : top + side > photo.height ? photo.height - side : top;
      left = left < 0 ? 0 : left + side > photo.width ? photo.width - side : left;
      ImageDirItem *it = new_item(s, index, label, err);
      if (!it || (rc = image_alloc(&it->image, photo.channels, side, side, err))) {
        rc = rc ? rc : ERR_NOMEM;
        if (it) s->count--, s->source_count[it->source]--;
        break;
      }
      for (int c = 0; c < photo.channels; c++)
        for (int y = 0; y < side; y++)
          memcpy(it->image.data + ((size_t)c * side + y) * side,
                 photo.data + ((size_t)c * photo.height + top + y) * photo.width + left, sizeof(float) * (size_t)side);
    }
    image_free(&photo);
  }
  image_boxes_free(&boxes);
  return rc;
}

void image_dir_free(ImageDir *s) {
  if (!s) return;
  for (size_t i = 0; i < s->count; i++) image_free(&s->items[i].image);
  free(s->items);
  memset(s, 0, sizeof *s);
}

/* The image as it is stored: cropped, in the set's colours, resized. */
static int prepare(const Image *in, const ImageDirOptions *o, Image *out, Error *err) {
  const int side0 = in->height < in->width ? in->height : in->width;
  int side = (int)lround(o->crop * side0);
  if (side < 1) side = 1;
  const int y0 = (in->height - side) / 2, x0 = (in->width - side) / 2;
  Image crop, coloured;
  int rc = image_alloc(&crop, in->channels, side, side, err);
  if (rc) return rc;
  for (int c = 0; c < in->channels; c++)
    for (int y = 0; y < side; y++)
      memcpy(crop.data + ((size_t)c * side + y) * side, in->data + ((size_t)c * in->height + y0 + y) * in->width + x0,
             sizeof(float) * (size_t)side);
  if (o->channels == 1) {
    rc = image_to_grey(&crop, &coloured, err);
  } else if (crop.channels == 3) {
    coloured = crop, crop.data = NULL;
  } else if (!(rc = image_alloc(&coloured, 3, side, side, err))) {
    for (int c = 0; c < 3; c++) memcpy(coloured.data + (size_t)c * side * side, crop.data, sizeof(float) * side * side);
  }
  image_free(&crop);
  if (rc) return rc;
  rc = image_resize(&coloured, o->size, o->size, out, err);
  image_free(&coloured);
  return rc;
}

static const char *const SPLIT_NAMES[3] = {"train", "val", "test"};

static int check_options(const ImageDirOptions *o, Error *err) {
  if (o->size < 4 || o->size > 4096) return error_set(err, ERR_ARG, "image set: size %d, expected 4..4096", o->size);
  if (o->channels != 1 && o->channels != 3)
    return error_set(err, ERR_ARG, "image set: channels %d, expected 1 (grey) or 3 (RGB)", o->channels);
  if (!(o->crop > 0.0 && o->crop <= 1.0))
    return error_set(err, ERR_ARG, "image set: crop %g, expected a fraction in (0, 1]", o->crop);
  if (!(o->val_fraction >= 0.0 && o->test_fraction >= 0.0 && o->val_fraction + o->test_fraction < 1.0))
    return error_set(err, ERR_ARG, "image set: val %g and test %g fractions, expected >= 0 with a sum below 1",
                     o->val_fraction, o->test_fraction);
  return 0;
}

static cJSON *manifest_header(const ImageDir *s, const ImageDirOptions *o, const ImageDirCounts *counts) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", "fivefold image set");
  cJSON_AddNumberToObject(root, "size", o->size);
  cJSON_AddNumberToObject(root, "channels", o->channels);
  cJSON_AddNumberToObject(root, "crop", o->crop);
  cJSON_AddNumberToObject(root, "seed", (double)o->seed);
  cJSON_AddNumberToObject(root, "val_fraction", o->val_fraction);
  cJSON_AddNumberToObject(root, "test_fraction", o->test_fraction);
  cJSON *c = cJSON_AddObjectToObject(root, "counts");
  cJSON_AddNumberToObject(c, "train", (double)counts->train);
  cJSON_AddNumberToObject(c, "val", (double)counts->val);
  cJSON_AddNumberToObject(c, "test", (double)counts->test);
  cJSON *sources = cJSON_AddArrayToObject(root, "sources");
  for (int i = 0; i < s->num_sources; i++) {
    cJSON *src = cJSON_CreateObject();
    cJSON_AddStringToObject(src, "name", s->source_name[i]);
    cJSON_AddStringToObject(src, "path", s->source_path[i]);
    cJSON_AddNumberToObject(src, "images", (double)s->source_count[i]);
    cJSON_AddItemToArray(sources, src);
  }
  return root;
}

int image_dir_write(const ImageDir *s, const char *dir, const ImageDirOptions *o, ImageDirCounts *counts, Error *err) {
  memset(counts, 0, sizeof *counts);
  int rc = check_options(o, err);
  if (rc) return rc;
  if (!s->count) return error_set(err, ERR_ARG, "image set: no images (give at least one source)");
  char path[4096];
  for (int k = 0; k < 3; k++) {
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, SPLIT_NAMES[k]) >= sizeof path)
      return error_set(err, ERR_ARG, "image set: directory '%s' is too long a path", dir);
    if ((rc = fs_mkdir_p(path, err))) return rc;
  }
  /* split[i]: 0 train, 1 val, 2 test, from a seeded Fisher-Yates shuffle. */
  const size_t n = s->count;
  size_t *perm = malloc(n * sizeof *perm);
  unsigned char *split = malloc(n);
  if (!perm || !split) {
    free(perm), free(split);
    return error_set(err, ERR_NOMEM, "image set: out of memory");
  }
  for (size_t i = 0; i < n; i++) perm[i] = i;
  Rng rng = rng_make(o->seed, rng_stream_id("image_set.split"));
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = (size_t)rng_next_below(&rng, i + 1), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  const size_t n_test = (size_t)llround(o->test_fraction * (double)n),
               n_val = (size_t)llround(o->val_fraction * (double)n);
  for (size_t i = 0; i < n; i++) split[perm[i]] = i < n_test ? 2 : i < n_test + n_val ? 1 : 0;
  counts->test = n_test, counts->val = n_val, counts->train = n - n_test - n_val;
  cJSON *root = manifest_header(s, o, counts);
  cJSON *images = cJSON_AddArrayToObject(root, "images");
  for (size_t i = 0; !rc && i < n; i++) {
    const ImageDirItem *it = &s->items[i];
    char file[128];
    snprintf(file, sizeof file, "%s/%s_%05zu.png", SPLIT_NAMES[split[i]], s->source_name[it->source], it->index);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    Image out;
    if ((rc = prepare(&it->image, o, &out, err))) break;
    rc = image_write(path, &out, err);
    image_free(&out);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "file", file);
    cJSON_AddStringToObject(e, "split", SPLIT_NAMES[split[i]]);
    cJSON_AddStringToObject(e, "source", s->source_name[it->source]);
    cJSON_AddNumberToObject(e, "index", (double)it->index);
    cJSON_AddNumberToObject(e, "label", it->label);
    cJSON_AddItemToArray(images, e);
  }
  free(perm), free(split);
  if (!rc) {
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    rc = json_write_file(path, root, err);
  }
  cJSON_Delete(root);
  return rc;
}
