/* PGM, PNG and JPEG reading, PGM and PNG writing into float planes, grey conversion and
 * resizing (base/image_io.h). A file is read whole into memory first, so
 * that both decoders see a bounded byte range and can say exactly where a
 * truncated file ends. */
#include "base/image_io.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* jpeglib.h needs FILE and size_t first. */
#include <jerror.h>
#include <jpeglib.h>

#include "base/file_text.h"

/* Largest file read: far above any image this project trains on. */
#define IMAGE_MAX_FILE_BYTES ((size_t)1 << 30)

int image_alloc(Image *im, int channels, int height, int width, Error *err) {
  memset(im, 0, sizeof *im);
  if (channels < 1 || height < 1 || width < 1)
    return error_set(err, ERR_ARG, "image of %d x %d x %d, expected every size >= 1", channels, height, width);
  size_t n = (size_t)channels * (size_t)height * (size_t)width;
  im->data = calloc(n, sizeof(float));
  if (!im->data) return error_set(err, ERR_NOMEM, "out of memory for an image of %zu values", n);
  im->channels = channels, im->height = height, im->width = width;
  return 0;
}

void image_free(Image *im) {
  if (!im) return;
  free(im->data);
  memset(im, 0, sizeof *im);
}

/* ---- PGM ---------------------------------------------------------------- */

typedef struct Cursor {
  const unsigned char *p;
  size_t size, pos;
} Cursor;

static int is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static void skip_space_and_comments(Cursor *c) {
  while (c->pos < c->size) {
    if (is_space(c->p[c->pos])) c->pos++;
    else if (c->p[c->pos] == '#')
      while (c->pos < c->size && c->p[c->pos] != '\n' && c->p[c->pos] != '\r') c->pos++;
    else break;
  }
}

/* A decimal number after optional whitespace and comments, at most max. */
static int read_uint(Cursor *c, const char *name, const char *field, long max, long *out, Error *err) {
  skip_space_and_comments(c);
  if (c->pos >= c->size) return error_set(err, ERR_FORMAT, "%s: truncated: the file ends before the %s", name, field);
  if (c->p[c->pos] < '0' || c->p[c->pos] > '9')
    return error_set(err, ERR_FORMAT, "%s: %s: expected a decimal number, found byte 0x%02x at offset %zu", name, field,
                     c->p[c->pos], c->pos);
  long v = 0;
  while (c->pos < c->size && c->p[c->pos] >= '0' && c->p[c->pos] <= '9') {
    v = v * 10 + (c->p[c->pos++] - '0');
    if (v > max) return error_set(err, ERR_FORMAT, "%s: %s is larger than %ld", name, field, max);
  }
  *out = v;
  return 0;
}

static int decode_pgm(const char *name, const unsigned char *bytes, size_t size, Image *out, Error *err) {
  Cursor c = {bytes, size, 2};
  const int binary = bytes[1] == '5';
  long width, height, maxval;
  int rc;
  if ((rc = read_uint(&c, name, "width", IMAGE_MAX_SIDE, &width, err))) return rc;
  if ((rc = read_uint(&c, name, "height", IMAGE_MAX_SIDE, &height, err))) return rc;
  if ((rc = read_uint(&c, name, "maxval", 65535, &maxval, err))) return rc;
  if (width < 1 || height < 1)
    return error_set(err, ERR_FORMAT, "%s: size %ld x %ld, expected both >= 1", name, width, height);
  if (width * height > IMAGE_MAX_PIXELS)
    return error_set(err, ERR_FORMAT, "%s: %ld x %ld pixels, more than the %ld accepted", name, width, height,
                     IMAGE_MAX_PIXELS);
  if (maxval < 1) return error_set(err, ERR_FORMAT, "%s: maxval 0, expected 1..255", name);
  if (maxval > 255)
    return error_set(err, ERR_FORMAT, "%s: unsupported depth: maxval %ld (16-bit PGM), expected 1..255 (8-bit)", name,
                     maxval);
  size_t count = (size_t)width * (size_t)height;
  if (binary) {
    /* Exactly one whitespace byte separates the header from the samples. */
    if (c.pos >= size || !is_space(bytes[c.pos]))
      return error_set(err, ERR_FORMAT, "%s: truncated: no whitespace after maxval before the pixel data", name);
    c.pos++;
    if (size - c.pos < count)
      return error_set(err, ERR_FORMAT, "%s: truncated: %zu pixel bytes, the %ld x %ld header needs %zu", name,
                       size - c.pos, width, height, count);
  }
  if ((rc = image_alloc(out, 1, (int)height, (int)width, err))) return error_wrap(err, "%s", name);
  for (size_t i = 0; i < count; i++) {
    long v;
    if (binary) v = bytes[c.pos++];
    else if ((rc = read_uint(&c, name, "pixel value", 65535, &v, err))) break;
    if (v > maxval) {
      rc = error_set(err, ERR_FORMAT, "%s: pixel %zu is %ld, above maxval %ld", name, i, v, maxval);
      break;
    }
    out->data[i] = (float)v / (float)maxval;
  }
  if (!rc) {
    skip_space_and_comments(&c);
    if (c.pos < size)
      rc = error_set(err, ERR_FORMAT, "%s: %zu trailing bytes after the pixel data (one image per file expected)", name,
                     size - c.pos);
  }
  if (rc) image_free(out);
  return rc;
}

/* ---- PNG ---------------------------------------------------------------- */

#define PNG_MESSAGE_SIZE 256

/* Everything libpng's callbacks and the error path touch lives here, on the
 * heap, so nothing changed between setjmp and longjmp is a local. */
typedef struct PngReader {
  char message[PNG_MESSAGE_SIZE]; /* first: the error callback writes here */
  const unsigned char *bytes;
  size_t size, pos;
  int truncated;
  png_bytep *rows;
  unsigned char *pixels;
} PngReader;

static void png_read_from_memory(png_structp png, png_bytep dst, png_size_t n) {
  PngReader *r = png_get_io_ptr(png);
  if (n > r->size - r->pos) {
    r->truncated = 1;
    png_error(png, "unexpected end of data");
  }
  memcpy(dst, r->bytes + r->pos, n);
  r->pos += n;
}

/* The error pointer is a PngReader or a PngWriter, both of which start
 * with their message buffer. */
static void png_on_error(png_structp png, png_const_charp msg) {
  char *message = png_get_error_ptr(png);
  if (message) snprintf(message, PNG_MESSAGE_SIZE, "%s", msg);
  png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static int decode_png(const char *name, const unsigned char *bytes, size_t size, Image *out, Error *err) {
  PngReader *r = calloc(1, sizeof *r);
  if (!r) return error_set(err, ERR_NOMEM, "%s: out of memory", name);
  r->bytes = bytes, r->size = size;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, r, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
    free(r);
    return error_set(err, ERR_NOMEM, "%s: out of memory for the PNG decoder", name);
  }
  int rc = 0;
  if (setjmp(png_jmpbuf(png))) {
    if (r->truncated)
      rc = error_set(err, ERR_FORMAT, "%s: truncated: the PNG data ends at byte %zu, inside a chunk", name, r->size);
    else rc = error_set(err, ERR_FORMAT, "%s: malformed PNG: %s", name, r->message);
    image_free(out);
  } else {
    png_set_read_fn(png, r, png_read_from_memory);
    png_set_user_limits(png, IMAGE_MAX_SIDE, IMAGE_MAX_SIDE);
    png_read_info(png, info);
    if ((long)png_get_image_width(png, info) * (long)png_get_image_height(png, info) > IMAGE_MAX_PIXELS)
      png_error(png, "more pixels than the 2^25 accepted");
    const int color = png_get_color_type(png, info);
    const int depth = png_get_bit_depth(png, info);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const int channels = png_get_channels(png, info);
    const int bytes_per_sample = png_get_bit_depth(png, info) == 16 ? 2 : 1;
    const int width = (int)png_get_image_width(png, info), height = (int)png_get_image_height(png, info);
    if (channels != 1 && channels != 3) png_error(png, "unexpected channel count after expansion");
    const size_t row_bytes = png_get_rowbytes(png, info);
    if (row_bytes != (size_t)width * (size_t)channels * (size_t)bytes_per_sample)
      png_error(png, "unexpected row size after expansion");
    r->pixels = malloc(row_bytes * (size_t)height);
    r->rows = malloc(sizeof(png_bytep) * (size_t)height);
    if (!r->pixels || !r->rows) png_error(png, "out of memory for the pixels");
    for (int y = 0; y < height; y++) r->rows[y] = r->pixels + (size_t)y * row_bytes;
    png_read_image(png, r->rows);
    png_read_end(png, NULL);
    Error alloc_err;
    if (image_alloc(out, channels, height, width, &alloc_err)) png_error(png, "out of memory for the image");
    const size_t plane = (size_t)width * (size_t)height;
    for (size_t i = 0; i < plane; i++)
      for (int ch = 0; ch < channels; ch++) {
        const unsigned char *s = r->pixels + (i * (size_t)channels + (size_t)ch) * (size_t)bytes_per_sample;
        out->data[(size_t)ch * plane + i] =
            bytes_per_sample == 2 ? (float)((s[0] << 8) | s[1]) / 65535.0f : (float)s[0] / 255.0f;
      }
  }
  png_destroy_read_struct(&png, &info, NULL);
  free(r->pixels);
  free(r->rows);
  free(r);
  return rc;
}

/* ---- JPEG --------------------------------------------------------------- */

/* libjpeg reports errors through a callback that must not return: it
 * longjmps back to decode_jpeg. Warnings about corrupt or missing data are
 * errors here (libjpeg would otherwise fill a truncated image with grey). */
typedef struct JpegError {
  struct jpeg_error_mgr mgr; /* first: libjpeg's err pointer is this */
  jmp_buf jump;
  int truncated;
  char message[JMSG_LENGTH_MAX];
} JpegError;

static void jpeg_on_error(j_common_ptr cinfo) {
  JpegError *e = (JpegError *)cinfo->err;
  (*cinfo->err->format_message)(cinfo, e->message);
  longjmp(e->jump, 1);
}

static void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return; /* trace messages */
  JpegError *e = (JpegError *)cinfo->err;
  e->truncated = cinfo->err->msg_code == JWRN_JPEG_EOF;
  jpeg_on_error(cinfo);
}

static int decode_jpeg(const char *name, const unsigned char *bytes, size_t size, Image *out, Error *err) {
  struct jpeg_decompress_struct cinfo;
  JpegError *e = calloc(1, sizeof *e);
  unsigned char *volatile row = NULL;
  if (!e) return error_set(err, ERR_NOMEM, "%s: out of memory", name);
  cinfo.err = jpeg_std_error(&e->mgr);
  e->mgr.error_exit = jpeg_on_error;
  e->mgr.emit_message = jpeg_on_message;
  int rc = 0;
  if (setjmp(e->jump)) {
    rc = e->truncated ? error_set(err, ERR_FORMAT, "%s: truncated: the JPEG data ends early (%zu bytes)", name, size)
                      : error_set(err, ERR_FORMAT, "%s: malformed JPEG: %s", name, e->message);
    image_free(out);
  } else {
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, bytes, (unsigned long)size);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.num_components != 1 && cinfo.num_components != 3) {
      snprintf(e->message, sizeof e->message, "unsupported: %d colour components (CMYK?), expected grey or colour",
               cinfo.num_components);
      longjmp(e->jump, 1);
    }
    cinfo.out_color_space = cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    if (cinfo.image_width > IMAGE_MAX_SIDE || cinfo.image_height > IMAGE_MAX_SIDE ||
        (long)cinfo.image_width * (long)cinfo.image_height > IMAGE_MAX_PIXELS) {
      snprintf(e->message, sizeof e->message, "%u x %u pixels, larger than %d on a side or %ld in all",
               cinfo.image_width, cinfo.image_height, IMAGE_MAX_SIDE, IMAGE_MAX_PIXELS);
      longjmp(e->jump, 1);
    }
    jpeg_start_decompress(&cinfo);
    const int c = cinfo.output_components, w = (int)cinfo.output_width, h = (int)cinfo.output_height;
    Error alloc_err;
    row = malloc((size_t)w * (size_t)c);
    if (!row || image_alloc(out, c, h, w, &alloc_err)) {
      snprintf(e->message, sizeof e->message, "out of memory for %d x %d pixels", w, h);
      longjmp(e->jump, 1);
    }
    const size_t plane = (size_t)w * (size_t)h;
    while (cinfo.output_scanline < cinfo.output_height) {
      const size_t y = cinfo.output_scanline;
      JSAMPROW rows[1] = {row};
      jpeg_read_scanlines(&cinfo, rows, 1);
      for (int x = 0; x < w; x++)
        for (int ch = 0; ch < c; ch++)
          out->data[(size_t)ch * plane + y * (size_t)w + (size_t)x] = row[x * c + ch] / 255.0f;
    }
    jpeg_finish_decompress(&cinfo);
  }
  jpeg_destroy_decompress(&cinfo);
  free(row);
  free(e);
  return rc;
}

/* ---- reading ------------------------------------------------------------ */

int image_decode(const char *name, const unsigned char *bytes, size_t size, Image *out, Error *err) {
  memset(out, 0, sizeof *out);
  if (size >= 8 && !png_sig_cmp(bytes, 0, 8)) return decode_png(name, bytes, size, out, err);
  if (size >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff)
    return decode_jpeg(name, bytes, size, out, err);
  if (size >= 2 && bytes[0] == 'P' && (bytes[1] == '2' || bytes[1] == '5') && (size == 2 || is_space(bytes[2])))
    return decode_pgm(name, bytes, size, out, err);
  if (size >= 2 && bytes[0] == 'P' && bytes[1] >= '1' && bytes[1] <= '7')
    return error_set(err, ERR_FORMAT, "%s: bad magic: 'P%c' is a Netpbm format other than PGM, expected P2 or P5", name,
                     bytes[1]);
  char seen[3 * 8 + 1] = "";
  for (size_t i = 0; i < size && i < 8; i++) snprintf(seen + 3 * i, 4, "%02x ", bytes[i]);
  return error_set(
      err, ERR_FORMAT,
      "%s: bad magic: first bytes %s(%zu bytes in all), expected a PNG signature, a JPEG SOI marker or P2/P5 (PGM)",
      name, size ? seen : "(none) ", size);
}

int image_read(const char *path, Image *out, Error *err) {
  memset(out, 0, sizeof *out);
  char *bytes;
  size_t size;
  int rc = file_read_text(path, "image", IMAGE_MAX_FILE_BYTES, &bytes, &size, err);
  if (rc) return rc;
  rc = image_decode(path, (const unsigned char *)bytes, size, out, err);
  free(bytes);
  return rc;
}

/* ---- writing ------------------------------------------------------------ */

static unsigned char quantise(float v) {
  if (!(v > 0.0f)) return 0; /* NaN too */
  if (v >= 1.0f) return 255;
  return (unsigned char)lrintf(v * 255.0f);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

/* Interleaved 8-bit samples, row after row. */
static unsigned char *interleave(const Image *im) {
  const size_t plane = (size_t)im->height * (size_t)im->width;
  unsigned char *px = malloc(plane * (size_t)im->channels);
  if (!px) return NULL;
  for (size_t i = 0; i < plane; i++)
    for (int ch = 0; ch < im->channels; ch++)
      px[i * (size_t)im->channels + (size_t)ch] = quantise(im->data[(size_t)ch * plane + i]);
  return px;
}

typedef struct PngWriter {
  char message[PNG_MESSAGE_SIZE]; /* first: the error callback writes here */
  png_bytep *rows;
} PngWriter;

static int write_png(FILE *f, const char *path, const Image *im, const unsigned char *px, Error *err) {
  PngWriter *w = calloc(1, sizeof *w);
  if (!w) return error_set(err, ERR_NOMEM, "%s: out of memory", path);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, w, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  int rc = 0;
  if (!info) {
    rc = error_set(err, ERR_NOMEM, "%s: out of memory for the PNG encoder", path);
  } else if (setjmp(png_jmpbuf(png))) {
    rc = error_set(err, ERR_IO, "%s: cannot write PNG: %s", path, w->message);
  } else {
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)im->width, (png_uint_32)im->height, 8,
                 im->channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    w->rows = malloc(sizeof(png_bytep) * (size_t)im->height);
    if (!w->rows) png_error(png, "out of memory");
    for (int y = 0; y < im->height; y++)
      w->rows[y] = (png_bytep)px + (size_t)y * (size_t)im->width * (size_t)im->channels;
    png_write_info(png, info);
    png_write_image(png, w->rows);
    png_write_end(png, NULL);
  }
  png_destroy_write_struct(png ? &png : NULL, info ? &info : NULL);
  free(w->rows);
  free(w);
  return rc;
}

int image_write(const char *path, const Image *im, Error *err) {
  const int pgm = ends_with(path, ".pgm") || ends_with(path, ".PGM");
  if (!im->data || im->height < 1 || im->width < 1)
    return error_set(err, ERR_ARG, "%s: nothing to write (an empty image)", path);
  if (pgm && im->channels != 1)
    return error_set(err, ERR_ARG, "%s: a PGM file holds 1 channel, the image has %d (write a .png)", path,
                     im->channels);
  if (im->channels != 1 && im->channels != 3)
    return error_set(err, ERR_ARG, "%s: %d channels, expected 1 (grey) or 3 (RGB)", path, im->channels);
  unsigned char *px = interleave(im);
  if (!px) return error_set(err, ERR_NOMEM, "%s: out of memory", path);
  FILE *f = fopen(path, "wb");
  int rc = 0;
  if (!f) rc = error_set(err, ERR_IO, "%s: cannot create: %s", path, error_errno_text(errno));
  else if (pgm) {
    const size_t n = (size_t)im->height * (size_t)im->width;
    if (fprintf(f, "P5\n%d %d\n255\n", im->width, im->height) < 0 || fwrite(px, 1, n, f) != n)
      rc = error_set(err, ERR_IO, "%s: cannot write: %s", path, error_errno_text(errno));
  } else {
    rc = write_png(f, path, im, px, err);
  }
  if (f && fclose(f) && !rc) rc = error_set(err, ERR_IO, "%s: cannot write: %s", path, error_errno_text(errno));
  free(px);
  return rc;
}

/* ---- conversion and resizing -------------------------------------------- */

int image_to_grey(const Image *in, Image *out, Error *err) {
  int rc = image_alloc(out, 1, in->height, in->width, err);
  if (rc) return rc;
  const size_t plane = (size_t)in->height * (size_t)in->width;
  if (in->channels == 3) {
    for (size_t i = 0; i < plane; i++)
      out->data[i] = 0.299f * in->data[i] + 0.587f * in->data[plane + i] + 0.114f * in->data[2 * plane + i];
  } else if (in->channels == 1) {
    memcpy(out->data, in->data, plane * sizeof(float));
  } else {
    image_free(out);
    return error_set(err, ERR_ARG, "grey conversion of %d channels, expected 1 or 3", in->channels);
  }
  return 0;
}

/* The taps of one axis: for each output index, `count` input indices
 * (clamped to the image: borders replicate) and normalised weights. */
typedef struct AxisTaps {
  int max_taps;
  int *count, *index;
  float *weight;
} AxisTaps;

static void axis_taps_free(AxisTaps *t) {
  free(t->count), free(t->index), free(t->weight);
  memset(t, 0, sizeof *t);
}

static int axis_taps(int n_in, int n_out, AxisTaps *t) {
  const double scale = (double)n_in / n_out, support = scale > 1.0 ? scale : 1.0;
  t->max_taps = (int)ceil(2.0 * support) + 2;
  t->count = calloc((size_t)n_out, sizeof(int));
  t->index = calloc((size_t)n_out * (size_t)t->max_taps, sizeof(int));
  t->weight = calloc((size_t)n_out * (size_t)t->max_taps, sizeof(float));
  if (!t->count || !t->index || !t->weight) {
    axis_taps_free(t);
    return -1;
  }
  for (int o = 0; o < n_out; o++) {
    const double centre = (o + 0.5) * scale - 0.5;
    double total = 0.0;
    int k = 0;
    float *wts = t->weight + (size_t)o * t->max_taps;
    for (int i = (int)floor(centre - support); i <= (int)ceil(centre + support) && k < t->max_taps; i++) {
      const double w = 1.0 - fabs(i - centre) / support;
      if (w <= 0.0) continue;
      t->index[o * t->max_taps + k] = i < 0 ? 0 : i >= n_in ? n_in - 1 : i;
      wts[k++] = (float)w, total += w;
    }
    t->count[o] = k;
    for (int j = 0; j < k; j++) wts[j] = (float)(wts[j] / total);
  }
  return 0;
}

int image_resize(const Image *in, int out_h, int out_w, Image *out, Error *err) {
  memset(out, 0, sizeof *out);
  if (out_h < 1 || out_w < 1 || out_h > IMAGE_MAX_SIDE || out_w > IMAGE_MAX_SIDE)
    return error_set(err, ERR_ARG, "resize to %d x %d, expected sides 1..%d", out_h, out_w, IMAGE_MAX_SIDE);
  AxisTaps th = {0}, tw = {0};
  float *tmp = malloc(sizeof(float) * (size_t)in->channels * (size_t)in->height * (size_t)out_w);
  int rc = 0;
  if (!tmp || axis_taps(in->height, out_h, &th) || axis_taps(in->width, out_w, &tw))
    rc = error_set(err, ERR_NOMEM, "out of memory resizing %d x %d to %d x %d", in->height, in->width, out_h, out_w);
  else rc = image_alloc(out, in->channels, out_h, out_w, err);
  if (!rc) {
    for (int c = 0; c < in->channels; c++) {
      for (int y = 0; y < in->height; y++) {
        const float *src = in->data + ((size_t)c * in->height + y) * in->width;
        float *dst = tmp + ((size_t)c * in->height + y) * out_w;
        for (int x = 0; x < out_w; x++) {
          float s = 0.0f;
          for (int k = 0; k < tw.count[x]; k++)
            s += tw.weight[x * tw.max_taps + k] * src[tw.index[x * tw.max_taps + k]];
          dst[x] = s;
        }
      }
      for (int y = 0; y < out_h; y++) {
        float *dst = out->data + ((size_t)c * out_h + y) * out_w;
        for (int x = 0; x < out_w; x++) dst[x] = 0.0f;
        for (int k = 0; k < th.count[y]; k++) {
          const float w = th.weight[y * th.max_taps + k];
          const float *src = tmp + ((size_t)c * in->height + th.index[y * th.max_taps + k]) * out_w;
          for (int x = 0; x < out_w; x++) dst[x] += w * src[x];
        }
      }
    }
  }
  axis_taps_free(&th), axis_taps_free(&tw);
  free(tmp);
  return rc;
}
