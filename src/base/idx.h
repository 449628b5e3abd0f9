/* IDX files (the MNIST / Fashion-MNIST format), gzip'd or plain, read
 * through zlib and validated: magic number (two zero bytes, element type
 * 0x08 = unsigned byte, the number of dimensions), dimensions, and the data
 * size against the file (truncated or trailing bytes are errors); an image
 * set pairs an images file ([count, rows, cols]) with a labels file
 * ([count]) and checks that the counts match and every label is in range.
 * Errors name the file, the field and what was expected.
 *
 * Fashion-MNIST ships in Debian's dataset-fashion-mnist package under
 * FASHION_MNIST_DIR as train-{images-idx3,labels-idx1}-ubyte.gz (60000
 * images) and t10k-... (10000), 28 x 28 grey, 10 classes. */
#ifndef FIVEFOLD_BASE_IDX_H
#define FIVEFOLD_BASE_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define FASHION_MNIST_CLASSES 10

#define IDX_MAX_DIMS 4

typedef struct IdxArray {
  int ndim;
  uint32_t dims[IDX_MAX_DIMS];
  size_t size; /* bytes: the product of dims */
  uint8_t *data;
} IdxArray;

typedef struct IdxImageSet {
  size_t count;
  int rows, cols;
  uint8_t *pixels; /* [count, rows, cols], row-major */
  uint8_t *labels; /* [count], each < classes */
} IdxImageSet;

/* Reads an unsigned-byte IDX file with `expect_ndim` dimensions into *out
 * (free with idx_free). ERR_IO when the file cannot be opened or read,
 * ERR_FORMAT when its contents are not such a file. */
int idx_read_u8(const char *path, int expect_ndim, IdxArray *out, Error *err);
void idx_free(IdxArray *a);

/* An images file and its labels file, checked against each other; labels
 * must be below `classes`. Free with idx_image_set_free. */
int idx_read_image_set(const char *images_path, const char *labels_path, int classes, IdxImageSet *out,
                       Error *err);
void idx_image_set_free(IdxImageSet *s);

/* Fashion-MNIST's training (split "train") or test (split "t10k") set from
 * dir (NULL: FASHION_MNIST_DIR), checked to be 28 x 28 with 10 classes. */
int fashion_mnist_read(const char *dir, const char *split, IdxImageSet *out, Error *err);

#endif
