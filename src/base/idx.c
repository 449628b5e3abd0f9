/* IDX reader over zlib's gz* calls (which also read uncompressed files),
 * with every header field and the data size checked against the file. */
#include "base/idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Largest array accepted: a bound on what a corrupt header can make us
 * allocate (Fashion-MNIST's training images are 47 MB). */
#define IDX_MAX_BYTES ((size_t)1 << 32)

/* Reads exactly n bytes or reports how many came; -1 on a zlib error. */
static long gz_read_full(gzFile f, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t chunk = n - got > (1u << 30) ? (1u << 30) : n - got;
    int r = gzread(f, (char *)buf + got, (unsigned)chunk);
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (long)got;
}

static int gz_failure(gzFile f, const char *path, const char *what, Error *err) {
  int code = 0;
  const char *msg = gzerror(f, &code);
  return error_set(err, code == Z_ERRNO ? ERR_IO : ERR_FORMAT, "%s: cannot read %s: %s", path, what,
                   code == Z_ERRNO ? error_errno_text(errno) : msg);
}

int idx_read_u8(const char *path, int expect_ndim, IdxArray *out, Error *err) {
  memset(out, 0, sizeof *out);
  if (expect_ndim < 1 || expect_ndim > IDX_MAX_DIMS)
    return error_set(err, ERR_ARG, "%s: asked for %d dimensions, expected 1..%d", path, expect_ndim, IDX_MAX_DIMS);
  gzFile f = gzopen(path, "rb");
  if (!f) return error_set(err, ERR_IO, "%s: cannot open: %s", path, errno ? error_errno_text(errno) : "out of memory");
  unsigned char head[4 + 4 * IDX_MAX_DIMS];
  int rc = 0;
  long got = gz_read_full(f, head, 4);
  if (got < 0) rc = gz_failure(f, path, "the magic number", err);
  else if (got < 4) rc = error_set(err, ERR_FORMAT, "%s: %ld bytes, too short for the 4-byte magic number", path, got);
  else if (head[0] || head[1])
    rc = error_set(err, ERR_FORMAT,
                   "%s: magic number %02x %02x %02x %02x, expected 00 00 08 %02x (an IDX file of unsigned bytes)",
                   path, head[0], head[1], head[2], head[3], expect_ndim);
  else if (head[2] != 0x08)
    rc = error_set(err, ERR_FORMAT, "%s: magic number element type 0x%02x, expected 0x08 (unsigned byte)", path,
                   head[2]);
  else if (head[3] != expect_ndim)
    rc = error_set(err, ERR_FORMAT, "%s: magic number says %d dimensions, expected %d (%s)", path, head[3],
                   expect_ndim, expect_ndim == 1 ? "a labels file" : "an images file");
  if (!rc) {
    got = gz_read_full(f, head + 4, 4 * (size_t)expect_ndim);
    if (got < 0) rc = gz_failure(f, path, "the dimensions", err);
    else if (got < 4 * expect_ndim)
      rc = error_set(err, ERR_FORMAT, "%s: file ends inside the dimensions (%ld of %d bytes)", path, got,
                     4 * expect_ndim);
  }
  size_t size = 1;
  for (int d = 0; !rc && d < expect_ndim; d++) {
    const unsigned char *b = head + 4 + 4 * d;
    uint32_t v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    out->dims[d] = v;
    if (v == 0) rc = error_set(err, ERR_FORMAT, "%s: dimension %d is 0, expected >= 1", path, d);
    else if (size > IDX_MAX_BYTES / v)
      rc = error_set(err, ERR_FORMAT, "%s: dimensions make more than %zu bytes, expected a smaller array", path,
                     IDX_MAX_BYTES);
    else size *= v;
  }
  if (!rc) {
    out->ndim = expect_ndim, out->size = size;
    out->data = malloc(size);
    if (!out->data) rc = error_set(err, ERR_NOMEM, "%s: out of memory for %zu bytes of data", path, size);
  }
  if (!rc) {
    got = gz_read_full(f, out->data, size);
    if (got < 0) rc = gz_failure(f, path, "the data", err);
    else if ((size_t)got < size)
      rc = error_set(err, ERR_FORMAT, "%s: truncated: %ld data bytes, the dimensions need %zu", path, got, size);
  }
  if (!rc) {
    unsigned char extra;
    got = gz_read_full(f, &extra, 1);
    if (got < 0) rc = gz_failure(f, path, "past the data", err);
    else if (got > 0)
      rc = error_set(err, ERR_FORMAT, "%s: trailing bytes after the %zu data bytes the dimensions describe", path,
                     size);
  }
  gzclose(f);
  if (rc) idx_free(out);
  return rc;
}

void idx_free(IdxArray *a) {
  if (!a) return;
  free(a->data);
  memset(a, 0, sizeof *a);
}

int idx_read_image_set(const char *images_path, const char *labels_path, int classes, IdxImageSet *out,
                       Error *err) {
  memset(out, 0, sizeof *out);
  IdxArray images, labels;
  int rc = idx_read_u8(images_path, 3, &images, err);
  if (rc) return rc;
  if ((rc = idx_read_u8(labels_path, 1, &labels, err))) {
    idx_free(&images);
    return rc;
  }
  if (images.dims[0] != labels.dims[0])
    rc = error_set(err, ERR_FORMAT, "%s: %u labels, expected %u, the image count of %s", labels_path,
                   labels.dims[0], images.dims[0], images_path);
  for (size_t i = 0; !rc && i < labels.size; i++)
    if (labels.data[i] >= classes)
      rc = error_set(err, ERR_FORMAT, "%s: label %zu is %u, expected below %d classes", labels_path, i,
                     labels.data[i], classes);
  if (rc) {
    idx_free(&images), idx_free(&labels);
    return rc;
  }
  out->count = images.dims[0], out->rows = (int)images.dims[1], out->cols = (int)images.dims[2];
  out->pixels = images.data, out->labels = labels.data;
  return 0;
}

void idx_image_set_free(IdxImageSet *s) {
  if (!s) return;
  free(s->pixels);
  free(s->labels);
  memset(s, 0, sizeof *s);
}

int fashion_mnist_read(const char *dir, const char *split, IdxImageSet *out, Error *err) {
  memset(out, 0, sizeof *out);
  if (!dir) dir = FASHION_MNIST_DIR;
  if (!split || (strcmp(split, "train") && strcmp(split, "t10k")))
    return error_set(err, ERR_ARG, "fashion-mnist split '%s', expected 'train' or 't10k'", split ? split : "(null)");
  char images[4096], labels[4096];
  int a = snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, split);
  int b = snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, split);
  if (a < 0 || b < 0 || (size_t)a >= sizeof images || (size_t)b >= sizeof labels)
    return error_set(err, ERR_ARG, "fashion-mnist directory '%s' is too long a path", dir);
  int rc = idx_read_image_set(images, labels, FASHION_MNIST_CLASSES, out, err);
  if (rc) return rc;
  if (out->rows != 28 || out->cols != 28) {
    rc = error_set(err, ERR_FORMAT, "%s: images are %d x %d, expected 28 x 28 (Fashion-MNIST)", images, out->rows,
                   out->cols);
    idx_image_set_free(out);
  }
  return rc;
}
