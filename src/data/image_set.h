/* Image data for the vision networks: Fashion-MNIST (base/idx.h) split
 * into training, validation and test parts, turned into normalised float
 * images with optional noise, and read in a seeded, sharded, resumable
 * order with the token loader's guarantees (data/data_loader.h).
 *
 * Parts. The training FILE (60,000 images) is permuted once by split_seed
 * (data_loader_window_at, epoch 0); the last val_images positions of that
 * permutation are the VALIDATION part, the rest the TRAINING part, so no
 * validation image ever enters training. max_train_images / max_val_images
 * keep the first N of each part (small runs, tests). The TEST part is the
 * separate t10k file (max_test_images of it), used only for the final
 * test evaluation.
 *
 * Order. Training position p of epoch e reads training image
 * perm_e(p) (data_loader_window_at(seed, e, p, num_train)); the whole state
 * is a DataLoaderState {seed, epoch, position}, which checkpoints record.
 * A step consumes world x accum x B consecutive positions; micro-batch mb
 * of rank r takes those at offset (r x accum + mb) x B, so the ranks'
 * micro-batches are disjoint and tile the step's global batch, as one
 * rank's micro-batches do. Positions past an epoch's end continue in the
 * next epoch's permutation.
 *
 * Pixels. x = (clip(u + noise, 0, 1) - mean) / std with u = pixel / 255;
 * noise is Gaussian (sigma noise_gaussian) and then salt-and-pepper (a
 * fraction noise_salt_pepper of the pixels set to 0 or 1 with equal odds),
 * drawn from (noise_seed, part, image counter, pixel): a validation or test
 * image always gets the same noise, a training image new noise on every
 * epoch. noise_on says which parts get it (default "test": the robustness
 * experiment trains clean and tests noisy). normalize false leaves x = the
 * clipped u. */
#ifndef FIVEFOLD_DATA_IMAGE_SET_H
#define FIVEFOLD_DATA_IMAGE_SET_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/idx.h"
#include "data/data_loader.h"

#define IMAGE_SET_PATH_MAX 4096

struct cJSON;

typedef enum ImagePart { IMAGE_PART_TRAIN = 0, IMAGE_PART_VAL, IMAGE_PART_TEST } ImagePart;

/* Which parts get the noise. */
typedef enum ImageNoiseOn { IMAGE_NOISE_TEST = 0, IMAGE_NOISE_EVAL, IMAGE_NOISE_TRAIN, IMAGE_NOISE_ALL } ImageNoiseOn;

/* The run config's "data" section of a vision run; field names as in JSON. */
typedef struct ImageSetConfig {
  char dir[IMAGE_SET_PATH_MAX]; /* "dir": the IDX files (default FASHION_MNIST_DIR) */
  int val_images;               /* "val_images": held out of the training file (default 5000) */
  uint64_t split_seed;          /* "split_seed": the train/validation split (default 0) */
  int max_train_images, max_val_images, max_test_images; /* 0: the whole part */
  int normalize;                /* "normalize" (default true) */
  double mean, std;             /* "mean", "std" (default Fashion-MNIST's training set: 0.2860, 0.3530) */
  double noise_gaussian;        /* "noise_gaussian": sigma in [0, 1] units of a pixel (default 0) */
  double noise_salt_pepper;     /* "noise_salt_pepper": fraction of pixels, [0, 1] (default 0) */
  int noise_on;                 /* "noise_on": "test" | "eval" (val and test) | "train" | "all" */
  uint64_t noise_seed;          /* "noise_seed" (default 1) */
  int test_at_end;              /* "test_at_end": evaluate the test part after training (default true) */
} ImageSetConfig;

void image_set_config_defaults(ImageSetConfig *cfg);
/* The "data" object; errors name origin and data.<field>, unknown fields
 * are refused. */
int image_set_config_from_json(ImageSetConfig *cfg, const struct cJSON *obj, const char *origin, Error *err);
struct cJSON *image_set_config_to_json(const ImageSetConfig *cfg);
const char *image_noise_on_name(int noise_on);

typedef struct ImageSet {
  ImageSetConfig cfg;
  IdxImageSet train_file, test_file;
  uint32_t *train_ids, *val_ids; /* indices into train_file */
  size_t num_train, num_val, num_test;
  int channels, rows, cols, classes;
  float clean[256]; /* x of each pixel value without noise: the loader's lookup */
} ImageSet;

/* Reads both files of cfg->dir (errors name the file) and makes the parts;
 * ERR_CONFIG when val_images leaves no training image. */
int image_set_open(ImageSet *s, const ImageSetConfig *cfg, Error *err);
void image_set_close(ImageSet *s);
size_t image_set_count(const ImageSet *s, ImagePart part);
size_t image_set_pixels(const ImageSet *s); /* floats per image */

/* Image k of the validation or test part into x[pixels] and *label. */
void image_set_read(const ImageSet *s, ImagePart part, size_t k, float *x, int *label);
/* n training images from the order at state + offset positions (rank and
 * micro-batch offsets as above), into x [n, pixels] and y [n]. */
void image_set_train_batch(const ImageSet *s, const DataLoaderState *state, uint64_t offset, int n, float *x, int *y);
/* Moves the order on by count positions (one step: its global batch). */
void image_set_advance(const ImageSet *s, DataLoaderState *state, uint64_t count);

#endif
