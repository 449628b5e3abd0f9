/* Image files as float planes: PGM (P2 ASCII and P5 binary, 8-bit), PNG
 * (through libpng) and JPEG (through libjpeg, for photos such as dlib's
 * example faces) read into an Image of values 0..1 laid out channel after
 * channel (CHW, the layout the networks of nets/ take), written back as
 * 8-bit grey or RGB; and a resize that is bilinear when enlarging and
 * area-aware (a widened triangle filter, so detail finer than the new
 * pixel grid averages out instead of aliasing) when shrinking.
 *
 * What is read:
 *   PGM   P2 or P5, maxval 1..255 (maxval > 255, 16-bit PGM, is refused as
 *         an unsupported depth); comments (#) in the header; the data must
 *         be complete, and only whitespace may follow it.
 *   PNG   grey, grey+alpha, RGB, RGBA and palette images, 1..16 bits per
 *         sample. Alpha is dropped (images are taken as opaque): grey and
 *         grey+alpha give 1 channel, the others 3. 16-bit samples keep
 *         their full precision (value / 65535).
 *   JPEG  baseline and progressive, grey or colour (1 or 3 channels; CMYK is
 *         refused); a truncated or corrupt stream is an error, not grey.
 * What is written: PGM (P5) for a 1-channel image to a path ending in
 * ".pgm", PNG (8-bit grey or RGB) otherwise; values are clamped to 0..1
 * and rounded to the nearest of 256 levels.
 *
 * Errors name the file and what was wrong: ERR_IO when it cannot be opened,
 * read or written, ERR_FORMAT for a bad magic number, a truncated file, a
 * malformed header or an unsupported depth, ERR_NOMEM. */
#ifndef FIVEFOLD_BASE_IMAGE_IO_H
#define FIVEFOLD_BASE_IMAGE_IO_H

#include <stddef.h>

#include "base/error.h"

/* Largest side, and largest number of pixels, accepted when reading: a
 * bound on what a corrupt header (or a compressed file that claims a huge
 * size) can make us allocate: 2^25 pixels (8192 x 4096) of 3 floats are
 * 400 MB. */
#define IMAGE_MAX_SIDE 32768
#define IMAGE_MAX_PIXELS ((long)1 << 25)

typedef struct Image {
  int channels, height, width; /* channels is 1 (grey) or 3 (RGB) for files */
  float *data;                 /* [channels, height, width], values 0..1 */
} Image;

static inline size_t image_numel(const Image *im) {
  return (size_t)im->channels * (size_t)im->height * (size_t)im->width;
}

/* A zero-filled image (free with image_free). */
int image_alloc(Image *im, int channels, int height, int width, Error *err);
void image_free(Image *im);

/* Reads a PGM, PNG or JPEG file, recognised by its magic number, not its name. */
int image_read(const char *path, Image *out, Error *err);
/* The same from bytes in memory; `name` stands for the file in messages
 * (the fuzz harness and the malformed-input tests use it). */
int image_decode(const char *name, const unsigned char *bytes, size_t size, Image *out, Error *err);

/* Writes PGM (P5) when path ends in ".pgm" (1 channel only), else PNG
 * (1 or 3 channels). */
int image_write(const char *path, const Image *im, Error *err);

/* out = in resized to out_h x out_w (pixel centres aligned, as PyTorch's
 * align_corners=False): per axis, bilinear when enlarging and a triangle
 * filter as wide as the shrink factor when shrinking (the mean of the
 * pixels a new pixel covers, weighted toward its centre). Each axis is
 * resampled separately; borders replicate. */
int image_resize(const Image *in, int out_h, int out_w, Image *out, Error *err);

/* out = the luma of in (1 channel; a copy for a grey image): RGB weighted
 * as ITU-R BT.601 (0.299, 0.587, 0.114), as PIL's "L" conversion does. */
int image_to_grey(const Image *in, Image *out, Error *err);

#endif
