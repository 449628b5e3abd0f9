/* Image files (src/base/image_io.h): PNG and PGM round trips (8-bit values
 * come back exactly), every PNG colour type and depth libpng writes read
 * to the right planes, ASCII PGM with comments; malformed files refused
 * with the file name and what was wrong (bad magic, truncated, unsupported
 * depth, values above maxval, trailing bytes); every prefix and a fixed
 * set of seeded byte mutations of a valid PNG and PGM either decode or fail
 * with ERR_FORMAT (never crash: the ASan pass runs this too); the resize
 * (bilinear up, area-aware down) and grey conversion; JPEG (grey and
 * colour written by libjpeg) read close to what was written, and cut or
 * mutated JPEG streams refused. */
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* jpeglib.h needs FILE and size_t first. */
#include <jpeglib.h>

#include "base/image_io.h"
#include "base/rng.h"
#include "test_tmpdir.h"

static unsigned char *slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *size = (size_t)n;
  return b;
}

static void spit(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, n, f), n);
  fclose(f);
}

/* An image of 8-bit levels (so a round trip is exact). */
static void random_levels(Image *im, int c, int h, int w, uint64_t seed) {
  Error err;
  assert_int_equal(image_alloc(im, c, h, w, &err), 0);
  Rng r = rng_make(seed, 1);
  for (size_t i = 0; i < image_numel(im); i++) im->data[i] = (float)rng_next_below(&r, 256) / 255.0f;
}

static void assert_images_equal(const Image *a, const Image *b, float tol) {
  assert_int_equal(a->channels, b->channels);
  assert_int_equal(a->height, b->height);
  assert_int_equal(a->width, b->width);
  for (size_t i = 0; i < image_numel(a); i++)
    if (fabsf(a->data[i] - b->data[i]) > tol) fail_msg("value %zu: %g vs %g", i, a->data[i], b->data[i]);
}

static void test_round_trip(void **state) {
  (void)state;
  const char *names[] = {"grey.png", "rgb.png", "grey.pgm"};
  const int channels[] = {1, 3, 1};
  for (int t = 0; t < 3; t++) {
    Image im, back;
    Error err;
    random_levels(&im, channels[t], 7, 13, 10 + (uint64_t)t);
    assert_int_equal(image_write(tmp_path(names[t]), &im, &err), 0);
    if (image_read(tmp_path(names[t]), &back, &err)) fail_msg("%s", err.msg);
    assert_images_equal(&im, &back, 0.0f);
    image_free(&im), image_free(&back);
  }
  /* Out-of-range values clamp, and an RGB image cannot be a PGM. */
  Image im, back;
  Error err;
  assert_int_equal(image_alloc(&im, 3, 2, 2, &err), 0);
  im.data[0] = -1.0f, im.data[1] = 2.0f, im.data[2] = NAN;
  assert_int_equal(image_write(tmp_path("rgb.pgm"), &im, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "rgb.pgm"));
  assert_int_equal(image_write(tmp_path("clamp.png"), &im, &err), 0);
  assert_int_equal(image_read(tmp_path("clamp.png"), &back, &err), 0);
  assert_true(back.data[0] == 0.0f && back.data[1] == 1.0f && back.data[2] == 0.0f);
  image_free(&im), image_free(&back);
}

/* A PNG of the given colour type and depth written by libpng from
 * interleaved samples (16-bit ones big-endian). */
static void write_png_raw(const char *path, int w, int h, int color, int depth, const unsigned char *samples,
                          int samples_per_pixel, const png_color *palette, int palette_size) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  assert_non_null(info);
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, color, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (palette) png_set_PLTE(png, info, palette, palette_size);
  png_write_info(png, info);
  const size_t row = (size_t)w * (size_t)samples_per_pixel * (depth == 16 ? 2 : 1);
  for (int y = 0; y < h; y++) png_write_row(png, samples + (size_t)y * row);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  fclose(f);
}

/* write_png_raw to tmp/name, then image_read of it into *im (must succeed). */
static void png_round(const char *name, int w, int h, int color, int depth, const unsigned char *samples,
                      int samples_per_pixel, const png_color *palette, int palette_size, Image *im) {
  Error err;
  write_png_raw(tmp_path(name), w, h, color, depth, samples, samples_per_pixel, palette, palette_size);
  if (image_read(tmp_path(name), im, &err)) fail_msg("%s", err.msg);
}

static void test_png_colour_types(void **state) {
  (void)state;
  Image im;
  /* grey+alpha 8-bit, 2 x 1: alpha dropped. */
  const unsigned char ga[] = {10, 255, 200, 0};
  png_round("ga.png", 2, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8, ga, 2, NULL, 0, &im);
  assert_int_equal(im.channels, 1);
  assert_float_equal(im.data[0], 10 / 255.0f, 1e-7), assert_float_equal(im.data[1], 200 / 255.0f, 1e-7);
  image_free(&im);
  /* RGBA 8-bit, 1 x 2: planes R, G, B. */
  const unsigned char rgba[] = {1, 2, 3, 4, 5, 6, 7, 8};
  png_round("rgba.png", 2, 1, PNG_COLOR_TYPE_RGB_ALPHA, 8, rgba, 4, NULL, 0, &im);
  assert_int_equal(im.channels, 3);
  const float want[] = {1, 5, 2, 6, 3, 7};
  for (int i = 0; i < 6; i++) assert_float_equal(im.data[i], want[i] / 255.0f, 1e-7);
  image_free(&im);
  /* 16-bit grey keeps its precision; 16-bit RGB. */
  const unsigned char g16[] = {0x12, 0x34, 0xff, 0xff};
  png_round("g16.png", 2, 1, PNG_COLOR_TYPE_GRAY, 16, g16, 1, NULL, 0, &im);
  assert_float_equal(im.data[0], 0x1234 / 65535.0f, 1e-7), assert_float_equal(im.data[1], 1.0f, 0);
  image_free(&im);
  const unsigned char rgb16[] = {0, 1, 0x80, 0, 0xff, 0xff};
  png_round("rgb16.png", 1, 1, PNG_COLOR_TYPE_RGB, 16, rgb16, 3, NULL, 0, &im);
  assert_int_equal(im.channels, 3);
  assert_float_equal(im.data[0], 1 / 65535.0f, 1e-9), assert_float_equal(im.data[1], 0x8000 / 65535.0f, 1e-7);
  image_free(&im);
  /* 16-bit RGBA, 1-bit grey and a palette image. */
  const unsigned char rgba16[] = {0xff, 0xff, 0, 0, 0, 0, 0x12, 0x34};
  png_round("rgba16.png", 1, 1, PNG_COLOR_TYPE_RGB_ALPHA, 16, rgba16, 4, NULL, 0, &im);
  assert_true(im.channels == 3 && im.data[0] == 1.0f && im.data[1] == 0.0f);
  image_free(&im);
  const unsigned char g1[] = {0xa0}; /* 1 0 1 0 */
  png_round("g1.png", 4, 1, PNG_COLOR_TYPE_GRAY, 1, g1, 1, NULL, 0, &im);
  assert_true(im.data[0] == 1.0f && im.data[1] == 0.0f && im.data[2] == 1.0f && im.data[3] == 0.0f);
  image_free(&im);
  const png_color pal[2] = {{255, 0, 0}, {0, 0, 51}};
  const unsigned char idx[] = {0x40}; /* 8-bit depth would need 2 bytes; 2-bit indices 1, 0, 0, 0 */
  png_round("pal.png", 1, 1, PNG_COLOR_TYPE_PALETTE, 2, idx, 1, pal, 2, &im);
  assert_true(im.channels == 3 && im.data[0] == 0.0f && im.data[1] == 0.0f);
  assert_float_equal(im.data[2], 0.2f, 1e-7);
  image_free(&im);
}

static void test_pgm_ascii(void **state) {
  (void)state;
  const char text[] = "P2\n# a comment\n3 2 # width height\n10\n0 5 10\n 1 2\t3\n";
  spit(tmp_path("a.pgm"), text, sizeof text - 1);
  Image im;
  Error err;
  if (image_read(tmp_path("a.pgm"), &im, &err)) fail_msg("%s", err.msg);
  assert_int_equal(im.width, 3);
  assert_int_equal(im.height, 2);
  const float want[] = {0, 0.5f, 1, 0.1f, 0.2f, 0.3f};
  for (int i = 0; i < 6; i++) assert_float_equal(im.data[i], want[i], 1e-7);
  image_free(&im);
}

/* `bytes` must be refused with ERR_FORMAT and a message naming the file and
 * holding `what`. */
static void expect_refused(const char *name, const void *bytes, size_t n, const char *what) {
  const char *path = tmp_path(name);
  spit(path, bytes, n);
  Image im;
  Error err = {0};
  int rc = image_read(path, &im, &err);
  if (rc != ERR_FORMAT) fail_msg("%s: rc %d, expected ERR_FORMAT (%s)", name, rc, err.msg);
  if (!strstr(err.msg, path) || !strstr(err.msg, what))
    fail_msg("%s: message '%s' lacks the path or '%s'", name, err.msg, what);
  assert_null(im.data);
}

static void test_malformed(void **state) {
  (void)state;
  expect_refused("magic.png", "GIF89a....", 10, "bad magic");
  expect_refused("empty.png", "", 0, "bad magic");
  expect_refused("ppm.pgm", "P6\n1 1\n255\nabc", 14, "other than PGM");
  expect_refused("short.pgm", "P5\n4 4\n255\n0123456789", 20, "truncated");
  expect_refused("head.pgm", "P5\n4 ", 5, "truncated");
  expect_refused("deep.pgm", "P5\n1 1\n65535\n\x01\x02", 15, "unsupported depth");
  expect_refused("above.pgm", "P2\n2 1\n10\n3 11\n", 15, "above maxval");
  expect_refused("few.pgm", "P2\n2 2\n10\n3 1 2\n", 16, "truncated");
  expect_refused("trail.pgm", "P5\n1 1\n255\nAB", 13, "trailing");
  expect_refused("zero.pgm", "P5\n0 1\n255\n", 11, "expected both >= 1");
  expect_refused("huge.pgm", "P5\n99999999 1\n255\n", 18, "larger than");
  /* A valid PNG cut short anywhere is refused as truncated or malformed. */
  Image im;
  Error err;
  random_levels(&im, 3, 9, 11, 3);
  assert_int_equal(image_write(tmp_path("valid.png"), &im, &err), 0);
  image_free(&im);
  size_t n;
  unsigned char *png = slurp(tmp_path("valid.png"), &n);
  expect_refused("cut.png", png, n - 20, "truncated");
  for (size_t cut = 0; cut < n; cut++) {
    int rc = image_decode("prefix.png", png, cut, &im, &err);
    if (rc != ERR_FORMAT) fail_msg("prefix of %zu bytes: rc %d", cut, rc);
    assert_non_null(strstr(err.msg, "prefix.png"));
  }
  /* Seeded mutations of a PNG and a PGM: decode or ERR_FORMAT, never a crash. */
  random_levels(&im, 1, 6, 5, 4);
  assert_int_equal(image_write(tmp_path("valid.pgm"), &im, &err), 0);
  image_free(&im);
  size_t pn;
  unsigned char *pgm = slurp(tmp_path("valid.pgm"), &pn);
  Rng r = rng_make(99, 2);
  for (int t = 0; t < 3000; t++) {
    unsigned char *src = t % 2 ? pgm : png;
    size_t size = t % 2 ? pn : n;
    unsigned char *m = malloc(size);
    memcpy(m, src, size);
    for (int k = 0, flips = 1 + (int)rng_next_below(&r, 4); k < flips; k++)
      m[rng_next_below(&r, size)] = (unsigned char)rng_next_below(&r, 256);
    int rc = image_decode("mutant", m, size, &im, &err);
    if (rc && rc != ERR_FORMAT) fail_msg("mutation %d: rc %d (%s)", t, rc, err.msg);
    if (!rc) {
      for (size_t i = 0; i < image_numel(&im); i++) assert_true(im.data[i] >= 0.0f && im.data[i] <= 1.0f);
      image_free(&im);
    }
    free(m);
  }
  free(png), free(pgm);
  assert_int_equal(image_read(tmp_path("missing.png"), &im, &err), ERR_IO);
  assert_non_null(strstr(err.msg, "missing.png"));
}

/* A JPEG of an image (1 or 3 channels) at quality 100, in memory. */
static unsigned char *encode_jpeg(const Image *im, unsigned long *size) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  unsigned char *buf = NULL;
  jpeg_mem_dest(&c, &buf, size);
  c.image_width = (JDIMENSION)im->width, c.image_height = (JDIMENSION)im->height;
  c.input_components = im->channels, c.in_color_space = im->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  jpeg_start_compress(&c, TRUE);
  unsigned char row[256 * 3];
  const size_t plane = (size_t)im->width * im->height;
  while (c.next_scanline < c.image_height) {
    for (int x = 0; x < im->width; x++)
      for (int ch = 0; ch < im->channels; ch++)
        row[x * im->channels + ch] =
            (unsigned char)lrintf(255.0f * im->data[ch * plane + c.next_scanline * (size_t)im->width + x]);
    JSAMPROW rows[1] = {row};
    jpeg_write_scanlines(&c, rows, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  return buf;
}

static void test_jpeg(void **state) {
  (void)state;
  Error err;
  for (int channels = 1; channels <= 3; channels += 2) {
    Image im, back;
    assert_int_equal(image_alloc(&im, channels, 12, 20, &err), 0);
    for (int ch = 0; ch < channels; ch++)
      for (int y = 0; y < 12; y++)
        for (int x = 0; x < 20; x++) im.data[(ch * 12 + y) * 20 + x] = 0.2f + 0.02f * x + 0.02f * y + 0.05f * ch;
    unsigned long size = 0;
    unsigned char *jpg = encode_jpeg(&im, &size);
    if (image_decode("smooth.jpg", jpg, size, &back, &err)) fail_msg("%s", err.msg);
    assert_images_equal(&im, &back, 0.03f);
    image_free(&back);
    /* Cut anywhere: refused (a prefix past the header says truncated). */
    assert_int_equal(image_decode("cut.jpg", jpg, size / 2, &back, &err), ERR_FORMAT);
    assert_non_null(strstr(err.msg, "cut.jpg: truncated"));
    for (unsigned long cut = 0; cut < size; cut++) {
      int rc = image_decode("prefix.jpg", jpg, cut, &back, &err);
      if (rc != ERR_FORMAT) fail_msg("JPEG prefix of %lu bytes: rc %d", cut, rc);
    }
    Rng r = rng_make(7, (uint64_t)channels);
    unsigned char *m = malloc(size);
    for (int t = 0; t < 300; t++) {
      memcpy(m, jpg, size);
      for (int k = 0; k < 3; k++) m[rng_next_below(&r, size)] = (unsigned char)rng_next_below(&r, 256);
      int rc = image_decode("mutant.jpg", m, size, &back, &err);
      if (rc && rc != ERR_FORMAT) fail_msg("JPEG mutation %d: rc %d", t, rc);
      if (!rc) image_free(&back);
    }
    free(m), free(jpg);
    image_free(&im);
  }
}

static void test_resize(void **state) {
  (void)state;
  Error err;
  Image im, out;
  /* A constant stays constant, both ways. */
  assert_int_equal(image_alloc(&im, 2, 5, 7, &err), 0);
  for (size_t i = 0; i < image_numel(&im); i++) im.data[i] = 0.25f;
  assert_int_equal(image_resize(&im, 13, 3, &out, &err), 0);
  for (size_t i = 0; i < image_numel(&out); i++) assert_float_equal(out.data[i], 0.25f, 1e-6);
  image_free(&out), image_free(&im);
  /* Doubling a 1 x 2 ramp is PyTorch's bilinear (align_corners=False):
   * 0, 0.25, 0.75, 1. */
  assert_int_equal(image_alloc(&im, 1, 1, 2, &err), 0);
  im.data[1] = 1.0f;
  assert_int_equal(image_resize(&im, 1, 4, &out, &err), 0);
  const float want[] = {0.0f, 0.25f, 0.75f, 1.0f};
  for (int i = 0; i < 4; i++) assert_float_equal(out.data[i], want[i], 1e-6);
  image_free(&out), image_free(&im);
  /* Shrinking a pixel checkerboard by 3: plain bilinear would sample single
   * pixels (0 or 1); the area-aware filter averages them to about 0.5. */
  assert_int_equal(image_alloc(&im, 1, 30, 30, &err), 0);
  for (int y = 0; y < 30; y++)
    for (int x = 0; x < 30; x++) im.data[y * 30 + x] = (float)((x + y) % 2);
  assert_int_equal(image_resize(&im, 10, 10, &out, &err), 0);
  for (int y = 1; y < 9; y++)
    for (int x = 1; x < 9; x++)
      if (fabsf(out.data[y * 10 + x] - 0.5f) > 0.1f) fail_msg("pixel %d,%d is %g", y, x, out.data[y * 10 + x]);
  image_free(&out), image_free(&im);
  assert_int_equal(image_resize(&im, 0, 4, &out, &err), ERR_ARG);
}

static void test_grey(void **state) {
  (void)state;
  Error err;
  Image im, g;
  assert_int_equal(image_alloc(&im, 3, 1, 1, &err), 0);
  im.data[0] = 1.0f, im.data[1] = 0.5f, im.data[2] = 0.0f;
  assert_int_equal(image_to_grey(&im, &g, &err), 0);
  assert_float_equal(g.data[0], 0.299f + 0.5f * 0.587f, 1e-6);
  image_free(&im), image_free(&g);
}

int main(void) {
  if (test_tmpdir_make("image-test")) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip), cmocka_unit_test(test_png_colour_types),
      cmocka_unit_test(test_pgm_ascii),  cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_jpeg),       cmocka_unit_test(test_resize),
      cmocka_unit_test(test_grey),
  };
  return test_tmpdir_remove(cmocka_run_group_tests(tests, NULL, NULL));
}
