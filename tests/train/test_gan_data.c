/* The deblurring GAN's pair loader (train/gan_data.h) with augmentation:
 * each training pair's sharp image is its stored image flipped and shifted
 * as the pair's draw says, and its blurred image is exactly the blur of
 * that sharp image (the two are never augmented apart); the same config
 * gives the same pairs, another blur seed other ones; a loader reopened at
 * a saved position (a resumed run) reads the same pairs bit for bit;
 * validation pairs are not augmented; the config fields are checked and
 * round-trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "base/image_io.h"
#include "base/rng.h"
#include "kern/motion_blur.h"
#include "test_tmpdir.h"
#include "train/gan_data.h"

#define SIDE 12
#define NUM_TRAIN 5
#define KERNEL 5

/* An image set of NUM_TRAIN training images and 2 validation images of
 * random 8-bit values, written once. */
static int write_set(void **state) {
  (void)state;
  if (test_tmpdir_make("gan_data")) return -1;
  if (mkdir(tmp_path("train"), 0755) || mkdir(tmp_path("val"), 0755)) return -1;
  FILE *f = fopen(tmp_path("manifest.json"), "w");
  if (!f) return -1;
  fprintf(f, "{\"size\": %d, \"channels\": 1, \"images\": [", SIDE);
  for (int i = 0; i < NUM_TRAIN + 2; i++) {
    Image im = {1, SIDE, SIDE, malloc(SIDE * SIDE * sizeof(float))};
    for (int k = 0; k < SIDE * SIDE; k++) im.data[k] = (float)(rng_u64(7, (uint64_t)i, (uint64_t)k) % 256) / 255.0f;
    char name[64];
    snprintf(name, sizeof name, "%s/%d.png", i < NUM_TRAIN ? "train" : "val", i);
    Error err = {0};
    int rc = image_write(tmp_path(name), &im, &err);
    free(im.data);
    if (rc) return -1;
    fprintf(f, "%s{\"file\": \"%s\", \"split\": \"%s\"}", i ? ", " : "", name, i < NUM_TRAIN ? "train" : "val");
  }
  fprintf(f, "]}\n");
  return fclose(f);
}

static int remove_set(void **state) {
  (void)state;
  return test_tmpdir_remove(0);
}

static GanDataConfig config(int flip, int shift, uint64_t blur_seed) {
  GanDataConfig cfg;
  gan_data_config_defaults(&cfg);
  snprintf(cfg.dir, sizeof cfg.dir, "%s", test_tmp_dir);
  cfg.kernel_size = KERNEL;
  cfg.noise_sigma = 0.02;
  cfg.blur_seed = blur_seed;
  cfg.flip = flip;
  cfg.shift = shift;
  return cfg;
}

static void open_set(GanData *d, const GanDataConfig *cfg) {
  Error err = {0};
  if (gan_data_open(d, cfg, &err)) fail_msg("%s", err.msg);
}

#define PAIRS 40 /* eight epochs of the five images */

static void read_pairs(const GanData *d, const DataLoaderState *st, float *sharp, float *blurred) {
  Error err = {0};
  if (gan_data_train_batch(d, st, 0, PAIRS, sharp, blurred, &err)) fail_msg("%s", err.msg);
}

/* Both images of every pair carry the same augmentation: sharp is the
 * stored image moved as the pair's draw says, blurred is the blur (and
 * noise) of that very sharp image. */
static void test_pairs_augmented_together(void **state) {
  (void)state;
  GanDataConfig cfg = config(1, 2, 3);
  GanData d;
  open_set(&d, &cfg);
  const size_t img = gan_data_image_floats(&d);
  float *sharp = malloc(PAIRS * img * sizeof(float)), *blurred = malloc(PAIRS * img * sizeof(float));
  float *want = malloc(img * sizeof(float)), *want_blur = malloc(img * sizeof(float));
  DataLoaderState st = {.seed = 11, .epoch = 0, .position = 0};
  read_pairs(&d, &st, sharp, blurred);
  int flipped = 0, kept = 0, moved_x = 0, moved_y = 0;
  for (int b = 0; b < PAIRS; b++) {
    GanPairInfo info;
    gan_data_pair_info(&d, &st, (uint64_t)b, &info);
    assert_true(info.image < NUM_TRAIN);
    assert_true(info.dx >= -2 && info.dx <= 2 && info.dy >= -2 && info.dy <= 2);
    flipped += info.flipped, kept += !info.flipped, moved_x += info.dx != 0, moved_y += info.dy != 0;
    gan_data_augment(&d, d.train + info.image * img, info.flipped, info.dx, info.dy, want);
    assert_memory_equal(sharp + b * img, want, img * sizeof(float));
    float kernel[KERNEL * KERNEL];
    MotionBlurParams p = motion_blur_params_default();
    p.kernel_size = KERNEL;
    MotionBlurInfo blur_info;
    Error err = {0};
    if (motion_blur_kernel(&p, info.blur_seed, kernel, &blur_info, &err) ||
        motion_blur_apply(want, 1, SIDE, SIDE, kernel, KERNEL, cfg.noise_sigma, rng_hash64(info.blur_seed),
                          want_blur, &err))
      fail_msg("%s", err.msg);
    assert_memory_equal(blurred + b * img, want_blur, img * sizeof(float));
  }
  /* the draws really vary: flips both ways, shifts along both axes */
  assert_true(flipped > 5 && kept > 5 && moved_x > 5 && moved_y > 5);
  free(sharp), free(blurred), free(want), free(want_blur);
  gan_data_close(&d);
}

/* gan_data_augment's geometry on a known image: out(y, x) = src'(y - dy,
 * x - dx), src' mirrored when flipped, borders replicated. */
static void test_augment_geometry(void **state) {
  (void)state;
  GanDataConfig cfg = config(1, 2, 3);
  GanData d;
  open_set(&d, &cfg);
  float src[SIDE * SIDE], out[SIDE * SIDE];
  for (int k = 0; k < SIDE * SIDE; k++) src[k] = (float)k;
  gan_data_augment(&d, src, 1, 0, 0, out);
  for (int y = 0; y < SIDE; y++)
    for (int x = 0; x < SIDE; x++) assert_true(out[y * SIDE + x] == src[y * SIDE + SIDE - 1 - x]);
  gan_data_augment(&d, src, 0, 2, -1, out);
  for (int y = 0; y < SIDE; y++)
    for (int x = 0; x < SIDE; x++) {
      int sy = y + 1 < SIDE ? y + 1 : SIDE - 1, sx = x - 2 >= 0 ? x - 2 : 0;
      assert_true(out[y * SIDE + x] == src[sy * SIDE + sx]);
    }
  gan_data_close(&d);
}

/* The same config gives the same pairs; another blur seed moves them
 * otherwise; without flip and shift the pairs hold the stored images. */
static void test_reproducible_from_seed(void **state) {
  (void)state;
  GanDataConfig cfg = config(1, 2, 3), other = config(1, 2, 4), plain = config(0, 0, 3);
  GanData a, b, c, p;
  open_set(&a, &cfg), open_set(&b, &cfg), open_set(&c, &other), open_set(&p, &plain);
  const size_t img = gan_data_image_floats(&a), bytes = PAIRS * img * sizeof(float);
  float *sa = malloc(bytes), *ba = malloc(bytes), *sb = malloc(bytes), *bb = malloc(bytes);
  DataLoaderState st = {.seed = 11, .epoch = 2, .position = 3};
  read_pairs(&a, &st, sa, ba);
  read_pairs(&b, &st, sb, bb);
  assert_memory_equal(sa, sb, bytes);
  assert_memory_equal(ba, bb, bytes);
  read_pairs(&c, &st, sb, bb);
  assert_memory_not_equal(sa, sb, bytes);
  read_pairs(&p, &st, sb, bb);
  for (int k = 0; k < PAIRS; k++) {
    GanPairInfo info;
    gan_data_pair_info(&p, &st, (uint64_t)k, &info);
    assert_true(!info.flipped && !info.dx && !info.dy);
    assert_memory_equal(sb + k * img, p.train + info.image * img, img * sizeof(float));
  }
  free(sa), free(ba), free(sb), free(bb);
  gan_data_close(&a), gan_data_close(&b), gan_data_close(&c), gan_data_close(&p);
}

/* A run that stops after some steps and resumes keeps only the loader
 * state {seed, epoch, position}: a fresh loader at that state reads the
 * pairs the uninterrupted one reads, bit for bit, across epoch ends. */
static void test_resume_same_pairs(void **state) {
  (void)state;
  GanDataConfig cfg = config(1, 2, 3);
  GanData run, resumed;
  open_set(&run, &cfg);
  const size_t img = gan_data_image_floats(&run), step = 3;
  float *s1 = malloc(step * img * sizeof(float)), *b1 = malloc(step * img * sizeof(float));
  float *s2 = malloc(step * img * sizeof(float)), *b2 = malloc(step * img * sizeof(float));
  DataLoaderState st = {.seed = 11, .epoch = 0, .position = 0};
  Error err = {0};
  for (int k = 0; k < 7; k++) gan_data_advance(&run, &st, step);
  DataLoaderState saved = st; /* what a checkpoint records */
  open_set(&resumed, &cfg);
  for (int k = 0; k < 6; k++) {
    if (gan_data_train_batch(&run, &st, 0, (int)step, s1, b1, &err) ||
        gan_data_train_batch(&resumed, &saved, 0, (int)step, s2, b2, &err))
      fail_msg("%s", err.msg);
    assert_memory_equal(s1, s2, step * img * sizeof(float));
    assert_memory_equal(b1, b2, step * img * sizeof(float));
    gan_data_advance(&run, &st, step);
    gan_data_advance(&resumed, &saved, step);
  }
  free(s1), free(b1), free(s2), free(b2);
  gan_data_close(&run), gan_data_close(&resumed);
}

/* Validation pairs: the stored images blurred, never flipped or moved. */
static void test_validation_not_augmented(void **state) {
  (void)state;
  GanDataConfig cfg = config(1, 2, 3), plain = config(0, 0, 3);
  GanData a, p;
  open_set(&a, &cfg), open_set(&p, &plain);
  assert_int_equal(a.num_val, 2);
  const size_t bytes = a.num_val * gan_data_image_floats(&a) * sizeof(float);
  assert_memory_equal(a.val_sharp, p.val_sharp, bytes);
  assert_memory_equal(a.val_blur, p.val_blur, bytes);
  gan_data_close(&a), gan_data_close(&p);
}

static void expect_refused(const char *text, const char *message) {
  cJSON *obj = cJSON_Parse(text);
  GanDataConfig cfg;
  gan_data_config_defaults(&cfg);
  Error err = {0};
  assert_int_not_equal(gan_data_config_from_json(&cfg, obj, "cfg.json", &err), 0);
  if (!strstr(err.msg, message)) fail_msg("'%s' lacks '%s'", err.msg, message);
  cJSON_Delete(obj);
}

static void test_config_fields(void **state) {
  (void)state;
  cJSON *obj = cJSON_Parse("{\"dir\": \"faces\", \"flip\": true, \"shift\": 3}");
  GanDataConfig cfg, back;
  gan_data_config_defaults(&cfg);
  Error err = {0};
  if (gan_data_config_from_json(&cfg, obj, "cfg.json", &err)) fail_msg("%s", err.msg);
  assert_int_equal(cfg.flip, 1);
  assert_int_equal(cfg.shift, 3);
  cJSON *json = gan_data_config_to_json(&cfg);
  gan_data_config_defaults(&back);
  if (gan_data_config_from_json(&back, json, "cfg.json", &err)) fail_msg("%s", err.msg);
  assert_int_equal(back.flip, 1);
  assert_int_equal(back.shift, 3);
  cJSON_Delete(json);
  cJSON_Delete(obj);
  expect_refused("{\"dir\": \"faces\", \"flip\": 1}", "cfg.json: data.flip: expected true or false");
  expect_refused("{\"dir\": \"faces\", \"shift\": -1}", "cfg.json: data.shift: expected an integer in 0..64");
  expect_refused("{\"dir\": \"faces\", \"shift\": 65}", "cfg.json: data.shift: expected an integer in 0..64");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pairs_augmented_together), cmocka_unit_test(test_augment_geometry),
      cmocka_unit_test(test_reproducible_from_seed),   cmocka_unit_test(test_resume_same_pairs),
      cmocka_unit_test(test_validation_not_augmented), cmocka_unit_test(test_config_fields),
  };
  return cmocka_run_group_tests(tests, write_set, remove_set);
}
