/* Image sets on disk for the image networks (the deblurring GAN's sharp
 * faces, Fashion-MNIST): images gathered from offline sources, each
 * centre-cropped to a square, converted to grey or RGB and resized to one
 * size, split into train/val/test by a seeded permutation, and written as
 * PNG files with a manifest:
 *
 *   DIR/train/<source>_<index>.png, DIR/val/..., DIR/test/...
 *   DIR/manifest.json  {"format": "fivefold image set", "size", "channels",
 *                       "crop", "seed", "val_fraction", "test_fraction",
 *                       "counts": {"train", "val", "test"},
 *                       "sources": [{"name", "path", "images"}],
 *                       "images": [{"file", "split", "source", "index",
 *                                   "label"}]}
 *
 * <index> is the image's position in its source file, so every PNG can be
 * traced back; "label" is the source's class (Fashion-MNIST's 0..9; for the
 * LFW subset 1 = face, 0 = not a face; -1 when there is none). The same
 * sources, options and seed give the same set, byte for byte.
 *
 * Sources: NumPy arrays [n, h, w] (grey) or [n, h, w, 3] (RGB) with values
 * 0..1 (float) or 0..255 (bytes), such as scikit-image's lfw_subset.npy
 * (base/npy.h); IDX image files such as Fashion-MNIST (base/idx.h); and
 * photos with face boxes in dlib's XML (data/image_boxes.h), one crop per
 * box.
 *
 * Augmentation (horizontal flips, shifts of a few pixels) is not baked into
 * the files: it belongs to the loader that reads the set, drawn per epoch
 * from its seed, so that the stored set stays the plain, reproducible data. */
#ifndef FIVEFOLD_DATA_IMAGE_DIR_H
#define FIVEFOLD_DATA_IMAGE_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/image_io.h"

#define IMAGE_DIR_MAX_SOURCES 8

typedef struct ImageDirOptions {
  int size;             /* side of the square images written, 4..4096 */
  int channels;         /* 1 (grey) or 3 (RGB) */
  double crop;          /* centred square of this fraction of the shorter side, (0, 1] */
  double val_fraction;  /* of all images, rounded; [0, 1) */
  double test_fraction; /* likewise; val + test < 1 */
  uint64_t seed;        /* of the split */
} ImageDirOptions;

/* size 64, grey, crop 1, val 0.1, test 0.1, seed 1. */
ImageDirOptions image_dir_options_default(void);

typedef struct ImageDirItem {
  Image image;
  int source; /* index into ImageDir.source_name */
  size_t index;
  int label;
} ImageDirItem;

typedef struct ImageDir {
  ImageDirItem *items;
  size_t count, capacity;
  int num_sources;
  char source_name[IMAGE_DIR_MAX_SOURCES][32];
  char source_path[IMAGE_DIR_MAX_SOURCES][512];
  size_t source_count[IMAGE_DIR_MAX_SOURCES];
} ImageDir;

/* Images first .. first + count - 1 of an .npy array (count 0: to the end),
 * all given `label`, as source `name`. */
int image_dir_add_npy(ImageDir *s, const char *path, const char *name, size_t first, size_t count, int label,
                      Error *err);
/* One square crop per box of a dlib image-metadata XML file
 * (data/image_boxes.h), boxes marked ignore skipped: the square of side
 * max(width, height) (1 + 2 margin) centred on the box, moved and shrunk as
 * needed to lie inside the photo. Items are numbered by box in file order
 * and labelled `label`. */
int image_dir_add_boxes(ImageDir *s, const char *xml_path, const char *name, double margin, int label, Error *err);
/* The first `limit` images (0: all) of an IDX images file and its labels. */
int image_dir_add_idx(ImageDir *s, const char *images_path, const char *labels_path, int classes, const char *name,
                      size_t limit, Error *err);

typedef struct ImageDirCounts {
  size_t train, val, test;
} ImageDirCounts;

/* Writes the set under dir (created if missing; files of the same names
 * are replaced). */
int image_dir_write(const ImageDir *s, const char *dir, const ImageDirOptions *o, ImageDirCounts *counts, Error *err);
void image_dir_free(ImageDir *s);

#endif
