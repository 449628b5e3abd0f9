/* The deblurring GAN's pairs: sharp images from an image-set directory
 * written by `fivefold images` (data/image_dir.h: PNG files and
 * manifest.json with train/val/test splits; Fashion-MNIST goes through it
 * too, `fivefold images --fashion-mnist`), each blurred on the fly by a
 * motion-blur kernel (kern/motion_blur.h). It lives in train/ because it
 * joins the data (base/) with a kernel (kern/), which data/ may not use.
 *
 *   "data": {"dir": "runs/faces", "kernel_size": 9, "noise_sigma": 0,
 *            "blur_seed": 1, "max_train_images": 0, "max_val_images": 0,
 *            "flip": false, "shift": 0}
 *
 * Order. As the vision image set (data/image_set.h): training position p
 * of epoch e reads training image perm_e(p) of a DataLoaderState {seed,
 * epoch, position}, which checkpoints record; micro-batch mb of rank r
 * reads the positions at offset (r x accum + mb) x B of the step.
 * Blur. The kernel of training image i in epoch e is drawn from
 * hash(blur_seed, e, i) (a new blur every epoch, the same on every rank and
 * in every resumed run); validation image i's from hash(blur_seed, val, i),
 * fixed, so validation always sees the same pairs. The noise of a pair
 * comes from the same seed. Kernel: kernel_size, everything else drawn
 * (motion_blur_params_default).
 * Augmentation (training pairs only). With "flip", half the pairs are
 * mirrored left-right; with "shift" S > 0, the image moves by dx, dy in
 * -S..S pixels, the border replicated as the blur replicates it. Both are
 * drawn from the pair's seed and applied to the sharp image before it is
 * blurred, so the blurred image of a pair is the blur of exactly the sharp
 * image the pair holds, and a resumed run or another rank gets the same
 * pairs. Validation pairs are never augmented. */
#ifndef FIVEFOLD_TRAIN_GAN_DATA_H
#define FIVEFOLD_TRAIN_GAN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "data/data_loader.h"

#define GAN_DATA_PATH_MAX 4096
#define GAN_DATA_MAX_SHIFT 64

struct cJSON;

typedef struct GanDataConfig {
  char dir[GAN_DATA_PATH_MAX];
  int kernel_size;
  double noise_sigma;
  uint64_t blur_seed;
  int max_train_images, max_val_images; /* 0: all of the split */
  int flip;                             /* mirror half the training pairs left-right */
  int shift;                            /* largest shift of a training pair, pixels */
} GanDataConfig;

void gan_data_config_defaults(GanDataConfig *cfg);
/* The "data" object; errors name origin and data.<field>. */
int gan_data_config_from_json(GanDataConfig *cfg, const struct cJSON *obj, const char *origin, Error *err);
struct cJSON *gan_data_config_to_json(const GanDataConfig *cfg);

typedef struct GanData {
  GanDataConfig cfg;
  int channels, size;
  size_t num_train, num_val;
  float *train;                /* [num_train, image] sharp */
  float *val_sharp, *val_blur; /* [num_val, image] */
} GanData;

/* Reads cfg->dir/manifest.json and its train and val PNGs (errors name the
 * file); the validation pairs are blurred once here. */
int gan_data_open(GanData *d, const GanDataConfig *cfg, Error *err);
void gan_data_close(GanData *d);
size_t gan_data_image_floats(const GanData *d);

/* n training pairs from the order at state + offset: sharp [n, image] and
 * blurred [n, image]. */
int gan_data_train_batch(const GanData *d, const DataLoaderState *state, uint64_t offset, int n, float *sharp,
                         float *blurred, Error *err);
void gan_data_advance(const GanData *d, DataLoaderState *state, uint64_t count);

/* What the loader did to one training pair (for the tests): the training
 * image, the blur's seed and the augmentation. */
typedef struct GanPairInfo {
  uint64_t image, blur_seed;
  int flipped, dx, dy;
} GanPairInfo;
void gan_data_pair_info(const GanData *d, const DataLoaderState *state, uint64_t offset, GanPairInfo *info);
/* src [channels, size, size] moved by (dx, dy) with replicated borders and,
 * if flipped, mirrored first: out(y, x) = src'(y - dy, x - dx). */
void gan_data_augment(const GanData *d, const float *src, int flipped, int dx, int dy, float *dst);

#endif
