/* Image sets (src/data/image_dir.h) from tiny .npy files the test writes:
 * the split sizes and the manifest, every PNG at the chosen size, the crop
 * and the grey/RGB conversion, the same seed giving the same set byte for
 * byte and another seed another split, and refused inputs (values outside
 * 0..1, a shape that is not images, bad options) naming what was wrong;
 * face crops from a dlib-style box XML over a photo the test writes (the
 * square around each box with its margin, moved inside the photo, ignored
 * boxes skipped) and malformed box files refused. */
#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file_text.h"
#include "data/image_boxes.h"
#include "data/image_dir.h"
#include "test_tmpdir.h"

/* A float64 .npy of shape [n, h, w] (c == 1) or [n, h, w, c]. */
static const char *write_npy(const char *name, int n, int h, int w, int c, double (*value)(int, int, int, int)) {
  const char *path = tmp_path(name);
  char header[128];
  if (c == 1)
    snprintf(header, sizeof header, "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d, %d), }", n, h, w);
  else
    snprintf(header, sizeof header, "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d, %d, %d), }", n, h, w,
             c);
  size_t hl = strlen(header) + 1;
  while ((10 + hl) % 16) hl++;
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)hl, 0};
  fwrite(pre, 1, 10, f);
  fputs(header, f);
  for (size_t i = strlen(header); i + 1 < hl; i++) fputc(' ', f);
  fputc('\n', f);
  for (int k = 0; k < n; k++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++)
        for (int ch = 0; ch < c; ch++) {
          double v = value(k, y, x, ch);
          fwrite(&v, 8, 1, f);
        }
  fclose(f);
  return path;
}

static double ramp(int k, int y, int x, int c) { return fmod(0.05 * k + 0.03 * y + 0.01 * x + 0.2 * c, 1.0); }
/* The centre 4 x 4 of an 8 x 8 image is white, the rest black. */
static double centre_white(int k, int y, int x, int c) {
  return (void)k, (void)c, (y >= 2 && y < 6 && x >= 2 && x < 6);
}
static double too_bright(int k, int y, int x, int c) { return (void)k, (void)y, (void)x, (void)c, 1.5; }

static cJSON *read_manifest(const char *dir, char **text_out) {
  char path[600];
  snprintf(path, sizeof path, "%s/manifest.json", dir);
  char *text;
  Error err;
  if (file_read_text(path, "manifest", 1 << 20, &text, NULL, &err)) fail_msg("%s", err.msg);
  cJSON *m = cJSON_Parse(text);
  assert_non_null(m);
  if (text_out) *text_out = text;
  else free(text);
  return m;
}

static void test_split_and_manifest(void **state) {
  (void)state;
  const char *npy = write_npy("ramp.npy", 20, 6, 8, 1, ramp);
  ImageDir s = {0};
  Error err;
  if (image_dir_add_npy(&s, npy, "ramp", 0, 0, 3, &err)) fail_msg("%s", err.msg);
  assert_int_equal(s.count, 20);
  ImageDirOptions o = image_dir_options_default();
  o.size = 5, o.val_fraction = 0.2, o.test_fraction = 0.15, o.seed = 9;
  ImageDirCounts counts;
  if (image_dir_write(&s, tmp_path("a"), &o, &counts, &err)) fail_msg("%s", err.msg);
  assert_true(counts.train == 13 && counts.val == 4 && counts.test == 3);
  char *text_a;
  cJSON *m = read_manifest(tmp_path("a"), &text_a);
  const cJSON *images = cJSON_GetObjectItem(m, "images");
  assert_int_equal(cJSON_GetArraySize(images), 20);
  int per_split[3] = {0};
  const cJSON *e;
  cJSON_ArrayForEach(e, images) {
    const char *file = cJSON_GetObjectItem(e, "file")->valuestring,
               *split = cJSON_GetObjectItem(e, "split")->valuestring;
    assert_int_equal(strncmp(file, split, strlen(split)), 0);
    assert_int_equal(cJSON_GetObjectItem(e, "label")->valueint, 3);
    per_split[!strcmp(split, "train") ? 0 : !strcmp(split, "val") ? 1 : 2]++;
    char path[700];
    snprintf(path, sizeof path, "%s/%s", tmp_path("a"), file);
    Image im;
    if (image_read(path, &im, &err)) fail_msg("%s", err.msg);
    assert_true(im.channels == 1 && im.height == 5 && im.width == 5);
    image_free(&im);
  }
  assert_true(per_split[0] == 13 && per_split[1] == 4 && per_split[2] == 3);
  cJSON_Delete(m);
  /* The same seed: the same manifest; another seed: another split. */
  assert_int_equal(image_dir_write(&s, tmp_path("b"), &o, &counts, &err), 0);
  char *text_b;
  cJSON_Delete(read_manifest(tmp_path("b"), &text_b));
  assert_string_equal(text_a, text_b);
  free(text_b);
  o.seed = 10;
  assert_int_equal(image_dir_write(&s, tmp_path("c"), &o, &counts, &err), 0);
  char *text_c;
  cJSON_Delete(read_manifest(tmp_path("c"), &text_c));
  assert_true(strcmp(text_a, text_c) != 0);
  free(text_a), free(text_c);
  image_dir_free(&s);
}

static void test_crop_and_colours(void **state) {
  (void)state;
  ImageDir s = {0};
  Error err;
  assert_int_equal(image_dir_add_npy(&s, write_npy("centre.npy", 1, 8, 8, 1, centre_white), "centre", 0, 0, -1, &err),
                   0);
  assert_int_equal(image_dir_add_npy(&s, write_npy("rgb.npy", 2, 4, 4, 3, ramp), "rgb", 1, 1, -1, &err), 0);
  assert_int_equal(s.count, 2);
  assert_int_equal(s.items[1].index, 1);
  ImageDirOptions o = image_dir_options_default();
  o.size = 4, o.crop = 0.5, o.val_fraction = 0, o.test_fraction = 0, o.channels = 3;
  ImageDirCounts counts;
  assert_int_equal(image_dir_write(&s, tmp_path("crop"), &o, &counts, &err), 0);
  Image im;
  assert_int_equal(image_read(tmp_path("crop/train/centre_00000.png"), &im, &err), 0);
  assert_int_equal(im.channels, 3);                                              /* grey repeated */
  for (size_t i = 0; i < image_numel(&im); i++) assert_true(im.data[i] == 1.0f); /* only the white centre is kept */
  image_free(&im);
  assert_int_equal(image_read(tmp_path("crop/train/rgb_00001.png"), &im, &err), 0);
  assert_int_equal(im.channels, 3);
  image_free(&im);
  image_dir_free(&s);
}

static void test_refused(void **state) {
  (void)state;
  ImageDir s = {0};
  Error err;
  const char *npy = write_npy("bright.npy", 2, 4, 4, 1, too_bright);
  assert_int_equal(image_dir_add_npy(&s, npy, "bright", 0, 0, -1, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "expected 0..1"));
  npy = write_npy("four.npy", 2, 4, 4, 2, ramp); /* 2 channels is not an image */
  assert_int_equal(image_dir_add_npy(&s, npy, "four", 0, 0, -1, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "four.npy"));
  npy = write_npy("ok.npy", 3, 4, 4, 1, ramp);
  assert_int_equal(image_dir_add_npy(&s, npy, "ok", 2, 5, -1, &err), ERR_ARG);
  assert_int_equal(image_dir_add_npy(&s, npy, "Bad Name", 0, 0, -1, &err), ERR_ARG);
  assert_int_equal(image_dir_add_npy(&s, npy, "ok", 0, 0, -1, &err), 0);
  assert_int_equal(image_dir_add_npy(&s, npy, "ok", 0, 0, -1, &err), ERR_ARG); /* twice */
  ImageDirOptions o = image_dir_options_default();
  ImageDirCounts counts;
  o.val_fraction = 0.6, o.test_fraction = 0.5;
  assert_int_equal(image_dir_write(&s, tmp_path("x"), &o, &counts, &err), ERR_ARG);
  assert_non_null(strstr(err.msg, "fractions"));
  o = image_dir_options_default(), o.crop = 0;
  assert_int_equal(image_dir_write(&s, tmp_path("x"), &o, &counts, &err), ERR_ARG);
  image_dir_free(&s);
}

static void spit_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_boxes(void **state) {
  (void)state;
  /* A 40 x 60 photo whose 8-bit values differ between neighbouring pixels. */
  Image photo;
  Error err;
  assert_int_equal(image_alloc(&photo, 1, 40, 60, &err), 0);
  for (int i = 0; i < 40 * 60; i++) photo.data[i] = (float)((i * 7) % 256) / 255.0f;
  assert_int_equal(image_write(tmp_path("photo.png"), &photo, &err), 0);
  spit_text(tmp_path("boxes.xml"),
            "<?xml version='1.0'?>\n<dataset><images>\n"
            "  <image file='photo.png' width='60' height='40'>\n"
            "    <box top='10' left='20' width='8' height='6'/>\n"
            "    <box top='0' left='55' width='10' height='10'/>\n"
            "    <box top='5' left='5' width='4' height='4' ignore='1'/>\n"
            "  </image>\n</images></dataset>\n");
  ImageDir s = {0};
  if (image_dir_add_boxes(&s, tmp_path("boxes.xml"), "faces", 0.25, 1, &err)) fail_msg("%s", err.msg);
  assert_int_equal(s.count, 2);
  /* Box 0: side 8 * 1.5 = 12 centred on (13, 24): top 7, left 18. */
  assert_true(s.items[0].image.height == 12 && s.items[0].image.width == 12 && s.items[0].index == 0);
  assert_float_equal(s.items[0].image.data[0], photo.data[7 * 60 + 18], 1e-6);
  /* Box 1: side 15 centred on (5, 60) moved inside: top 0, left 45. */
  assert_true(s.items[1].image.height == 15 && s.items[1].index == 1 && s.items[1].label == 1);
  assert_float_equal(s.items[1].image.data[14], photo.data[0 * 60 + 45 + 14], 1e-6);
  image_dir_free(&s);
  ImageBoxList l;
  spit_text(tmp_path("nobox.xml"),
            "<images><image file='photo.png'><box top='1' left='2' height='3'/></image></images>");
  assert_int_equal(image_boxes_read(tmp_path("nobox.xml"), &l, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "width"));
  assert_non_null(strstr(err.msg, "photo.png"));
  spit_text(tmp_path("empty.xml"), "<dataset></dataset>");
  assert_int_equal(image_boxes_read(tmp_path("empty.xml"), &l, &err), ERR_FORMAT);
  spit_text(tmp_path("open.xml"), "<images><image file='photo.png'><box top='1' left='2' width='3' height='3'/>");
  assert_int_equal(image_boxes_read(tmp_path("open.xml"), &l, &err), ERR_FORMAT);
  assert_non_null(strstr(err.msg, "</image>"));
  spit_text(tmp_path("gone.xml"), "<images><image file='gone.png'></image></images>");
  assert_int_equal(image_dir_add_boxes(&s, tmp_path("gone.xml"), "gone", 0.25, 1, &err), ERR_IO);
  assert_non_null(strstr(err.msg, "gone.png"));
  image_dir_free(&s);
  image_free(&photo);
}

int main(void) {
  if (test_tmpdir_make("image-set-test")) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_and_manifest),
      cmocka_unit_test(test_crop_and_colours),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_boxes),
  };
  return test_tmpdir_remove(cmocka_run_group_tests(tests, NULL, NULL));
}
