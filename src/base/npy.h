/* NumPy .npy files (format versions 1.0, 2.0 and 3.0), read into float32
 * and validated: the magic string, the version, the header dictionary
 * ('descr', 'fortran_order', 'shape', nothing else), the element type and
 * the data size against the file (truncated or trailing bytes are errors).
 * Errors name the file, the field and what was expected.
 *
 * Element types read: little-endian float64 ('<f8'), float32 ('<f4') and
 * unsigned bytes ('|u1', '<u1'), converted to float (bytes keep their
 * values 0..255). C order only: a Fortran-order array is refused, as is a
 * big-endian one.
 *
 * scikit-image (Debian python3-skimage) ships SKIMAGE_LFW_SUBSET: 200 grey
 * 25 x 25 crops from Labeled Faces in the Wild, float64 in 0..1, the first
 * 100 faces and the other 100 not. */
#ifndef FIVEFOLD_BASE_NPY_H
#define FIVEFOLD_BASE_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define SKIMAGE_LFW_SUBSET "/usr/lib/python3/dist-packages/skimage/data/lfw_subset.npy"
#define SKIMAGE_LFW_FACES 100

#define NPY_MAX_DIMS 8

typedef struct NpyArray {
  int ndim;
  int64_t dims[NPY_MAX_DIMS];
  size_t count;  /* elements: the product of dims */
  char descr[8]; /* the element type as the file gives it, e.g. "<f8" */
  float *data;   /* [count], C order */
} NpyArray;

/* Reads path into *out (free with npy_free). ERR_IO when the file cannot be
 * opened or read, ERR_FORMAT when its contents are not such a file. */
int npy_read_f32(const char *path, NpyArray *out, Error *err);
/* The same from bytes in memory; `name` stands for the file in messages. */
int npy_decode_f32(const char *name, const unsigned char *bytes, size_t size, NpyArray *out, Error *err);
void npy_free(NpyArray *a);

#endif
