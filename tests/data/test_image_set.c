/* The Fashion-MNIST image set (data/image_set.h): the parts' sizes, a
 * validation part disjoint from training, each epoch a permutation of the
 * training part, rank shards that tile the one-rank order, a resumable
 * position, reproducible noise only on the parts it is asked for, config
 * errors naming data.<field>, and a malformed or missing file reported by
 * its name. The data set must be installed (scripts/install-deps.sh): its
 * absence fails the test. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "data/image_set.h"

#define PIX 784

static ImageSet *open_set(const char *json) {
  ImageSetConfig cfg;
  image_set_config_defaults(&cfg);
  cJSON *o = cJSON_Parse(json);
  Error err = {0};
  if (image_set_config_from_json(&cfg, o, "cfg.json", &err)) fail_msg("%s", err.msg);
  cJSON_Delete(o);
  ImageSet *s = malloc(sizeof *s);
  if (image_set_open(s, &cfg, &err)) fail_msg("%s", err.msg);
  return s;
}

static void close_set(ImageSet *s) {
  image_set_close(s);
  free(s);
}

static void test_parts_are_disjoint(void **state) {
  (void)state;
  ImageSet *s = open_set("{}");
  assert_int_equal(image_set_count(s, IMAGE_PART_TRAIN), 55000);
  assert_int_equal(image_set_count(s, IMAGE_PART_VAL), 5000);
  assert_int_equal(image_set_count(s, IMAGE_PART_TEST), 10000);
  char *seen = calloc(60000, 1);
  for (size_t p = 0; p < s->num_train; p++) seen[s->train_ids[p]]++;
  for (size_t p = 0; p < s->num_val; p++) {
    if (seen[s->val_ids[p]]) fail_msg("validation image %u is also a training image", s->val_ids[p]);
    seen[s->val_ids[p]]++;
  }
  for (size_t i = 0; i < 60000; i++) assert_int_equal(seen[i], 1);
  free(seen);
  /* normalisation: the training part has mean ~0, std ~1 */
  double sum = 0, sq = 0;
  float x[PIX];
  int label;
  for (size_t k = 0; k < 2000; k++) {
    image_set_read(s, IMAGE_PART_VAL, k, x, &label);
    assert_true(label >= 0 && label < 10);
    for (int i = 0; i < PIX; i++) sum += x[i], sq += (double)x[i] * x[i];
  }
  double mean = sum / (2000.0 * PIX), var = sq / (2000.0 * PIX) - mean * mean;
  assert_true(fabs(mean) < 0.05 && fabs(sqrt(var) - 1) < 0.05);
  close_set(s);
}

/* A clean image is (byte / 255 - mean) / std of its file's bytes, exactly
 * (the loader looks it up in a table of the same expression). */
static void test_clean_pixels_exact(void **state) {
  (void)state;
  const char *configs[] = {"{}", "{\"mean\": 0.5, \"std\": 0.25}", "{\"normalize\": false}"};
  for (int c = 0; c < 3; c++) {
    ImageSet *s = open_set(configs[c]);
    float x[PIX], batch[3 * PIX];
    int label, labels[3];
    for (size_t k = 0; k < 300; k++) {
      image_set_read(s, IMAGE_PART_VAL, k, x, &label);
      const uint8_t *bytes = s->train_file.pixels + (size_t)s->val_ids[k] * PIX;
      for (int i = 0; i < PIX; i++) {
        double u = bytes[i] / 255.0;
        float want = (float)(s->cfg.normalize ? (u - s->cfg.mean) / s->cfg.std : u);
        if (x[i] != want) fail_msg("config %s: image %zu pixel %d: %.9g, expected %.9g", configs[c], k, i, x[i], want);
      }
    }
    DataLoaderState st = {1, 0, 0};
    image_set_train_batch(s, &st, 0, 3, batch, labels);
    for (int b = 0; b < 3; b++) { /* the batch's images are the same floats */
      image_set_read(s, IMAGE_PART_TRAIN, data_loader_window_at(1, 0, (uint64_t)b, s->num_train), x, &label);
      assert_int_equal(label, labels[b]);
      assert_memory_equal(batch + b * PIX, x, sizeof x);
    }
    close_set(s);
  }
}

static void test_order_shards_and_resume(void **state) {
  (void)state;
  ImageSet *s = open_set("{\"max_train_images\": 50, \"max_val_images\": 10}");
  assert_int_equal(s->num_train, 50);
  DataLoaderState st = {.seed = 9, .epoch = 0, .position = 0};
  /* one epoch visits every training image once; the next one in another order */
  static float x[120 * PIX];
  int y[120], y2[120];
  int count[10] = {0};
  image_set_train_batch(s, &st, 0, 120, x, y);
  for (int i = 0; i < 50; i++) count[y[i]]++;
  int labels_in_part[10] = {0};
  for (size_t p = 0; p < 50; p++) labels_in_part[s->train_file.labels[s->train_ids[p]]]++;
  for (int c = 0; c < 10; c++) assert_int_equal(count[c], labels_in_part[c]);
  int same = 0;
  for (int i = 0; i < 50; i++) same += y[i] == y[50 + i];
  assert_true(same < 50);
  /* rank r of 4, micro-batch mb of 2, B = 3: offset (r x 2 + mb) x 3 reads the one-rank order */
  for (int r = 0; r < 4; r++)
    for (int mb = 0; mb < 2; mb++) {
      static float xs[3 * PIX];
      int ys[3];
      image_set_train_batch(s, &st, (uint64_t)(r * 2 + mb) * 3, 3, xs, ys);
      for (int b = 0; b < 3; b++) assert_int_equal(ys[b], y[(r * 2 + mb) * 3 + b]);
      assert_memory_equal(xs, x + (size_t)(r * 2 + mb) * 3 * PIX, sizeof xs);
    }
  /* resuming from a saved state reads what the uninterrupted order reads */
  DataLoaderState saved = st;
  image_set_advance(s, &saved, 72);
  assert_int_equal(saved.epoch, 1);
  assert_int_equal(saved.position, 22);
  image_set_train_batch(s, &saved, 0, 48, x, y2);
  for (int i = 0; i < 48; i++) assert_int_equal(y2[i], y[72 + i]);
  close_set(s);
}

static void test_noise(void **state) {
  (void)state;
  ImageSet *clean = open_set("{\"max_train_images\": 20, \"normalize\": false}");
  ImageSet *noisy = open_set("{\"max_train_images\": 20, \"normalize\": false, \"noise_gaussian\": 0.2, "
                             "\"noise_salt_pepper\": 0.1, \"noise_on\": \"eval\"}");
  float a[PIX], b[PIX], c[PIX];
  int la, lb;
  image_set_read(clean, IMAGE_PART_TEST, 3, a, &la);
  image_set_read(noisy, IMAGE_PART_TEST, 3, b, &lb);
  assert_int_equal(la, lb);
  int changed = 0, extremes = 0;
  for (int i = 0; i < PIX; i++) {
    changed += a[i] != b[i];
    extremes += b[i] == 0.0f || b[i] == 1.0f;
    assert_true(b[i] >= 0 && b[i] <= 1);
  }
  assert_true(changed > PIX / 2 && extremes >= PIX / 20);
  image_set_read(noisy, IMAGE_PART_TEST, 3, c, &lb);
  assert_memory_equal(b, c, sizeof b); /* the same image, the same noise */
  /* noise_on "eval": training images stay clean */
  DataLoaderState st = {.seed = 1};
  float t1[PIX], t2[PIX];
  int y1, y2;
  image_set_train_batch(clean, &st, 0, 1, t1, &y1);
  image_set_train_batch(noisy, &st, 0, 1, t2, &y2);
  assert_memory_equal(t1, t2, sizeof t1);
  close_set(clean);
  close_set(noisy);
}

static void expect_config_error(const char *json, const char *needle) {
  ImageSetConfig cfg;
  image_set_config_defaults(&cfg);
  cJSON *o = cJSON_Parse(json);
  Error err = {0};
  assert_int_equal(image_set_config_from_json(&cfg, o, "cfg.json", &err), ERR_CONFIG);
  cJSON_Delete(o);
  if (!strstr(err.msg, needle)) fail_msg("expected '%s' in: %s", needle, err.msg);
}

static void test_errors_name_the_field_or_file(void **state) {
  (void)state;
  expect_config_error("{\"val_images\": -1}", "cfg.json: data.val_images: expected an integer >= 0");
  expect_config_error("{\"noise_gaussian\": 2}", "cfg.json: data.noise_gaussian: expected a number in 0..1");
  expect_config_error("{\"noise_on\": \"val\"}", "cfg.json: data.noise_on: expected \"test\"");
  expect_config_error("{\"std\": 0}", "cfg.json: data.std: expected a number > 0");
  expect_config_error("{\"train\": [\"a.bin\"]}", "cfg.json: data.train: unknown field");
  /* a directory with a malformed training images file, and one without the files */
  char dir[] = "/tmp/fivefold-image-set.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
  FILE *f = fopen(path, "wb");
  fputs("not an idx file", f);
  fclose(f);
  ImageSetConfig cfg;
  image_set_config_defaults(&cfg);
  snprintf(cfg.dir, sizeof cfg.dir, "%s", dir);
  ImageSet s;
  Error err = {0};
  assert_int_not_equal(image_set_open(&s, &cfg, &err), 0);
  if (!strstr(err.msg, path) || !strstr(err.msg, "magic number")) fail_msg("unexpected: %s", err.msg);
  unlink(path);
  assert_int_equal(image_set_open(&s, &cfg, &err), ERR_IO);
  if (!strstr(err.msg, path)) fail_msg("the missing file is not named: %s", err.msg);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parts_are_disjoint),
      cmocka_unit_test(test_clean_pixels_exact),
      cmocka_unit_test(test_order_shards_and_resume),
      cmocka_unit_test(test_noise),
      cmocka_unit_test(test_errors_name_the_field_or_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
