/* The metrics plot (src/base/metrics_plot.h) and its chart drawing: a
 * metrics.jsonl holding every record kind the trainer writes (train with
 * and without extra metrics, eval, test, checkpoint, summary) and one of
 * an unknown kind plots as a PNG of the size asked, with ink in each of
 * the three panels; a truncated file, a line that is not JSON and a
 * record missing a field are refused naming the file and the line; a file
 * without train records and a size below the minimum are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/chart.h"
#include "base/image_io.h"
#include "base/metrics_plot.h"
#include "test_tmpdir.h"

static void spit(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static const char EVERY_KIND[] =
    "{\"type\":\"train\",\"step\":1,\"steps\":40,\"loss\":8.3,\"lr\":3e-05,\"grad_norm\":2.1,\"ms_per_step\":50,"
    "\"tokens_per_s\":4100,\"gflops\":12,\"mfu_pct\":3.1,\"peak_gflops\":400,\"moe_imbalance\":1.2}\n"
    "{\"type\":\"eval\",\"step\":1,\"val_loss\":8.2,\"windows\":4,\"tokens\":512,\"seconds\":0.2}\n"
    "{\"type\":\"train\",\"step\":10,\"steps\":40,\"loss\":6.1,\"accuracy\":0.4,\"lr\":0.0003,\"grad_norm\":1.1,"
    "\"ms_per_step\":48,\"tokens_per_s\":4300}\n"
    "{\"type\":\"checkpoint\",\"step\":20,\"path\":\"runs/x/checkpoints/step-20\",\"bytes\":1000,\"seconds\":0.1}\n"
    "{\"type\":\"train\",\"step\":20,\"steps\":40,\"loss\":5.0,\"lr\":0.00025,\"grad_norm\":0.9,\"ms_per_step\":47,"
    "\"tokens_per_s\":4400}\n"
    "{\"type\":\"eval\",\"step\":20,\"val_loss\":5.3,\"windows\":4,\"tokens\":512,\"seconds\":0.2}\n"
    "{\"type\":\"future_kind\",\"step\":25}\n"
    "\n"
    "{\"type\":\"train\",\"step\":40,\"steps\":40,\"loss\":4.2,\"lr\":3e-05,\"grad_norm\":0.8,\"ms_per_step\":46,"
    "\"tokens_per_s\":4450}\n"
    "{\"type\":\"eval\",\"step\":40,\"val_loss\":4.6,\"val_accuracy\":0.5,\"windows\":4,\"tokens\":512,\"seconds\":0.2}\n"
    "{\"type\":\"test\",\"step\":40,\"test_loss\":4.7,\"test_accuracy\":0.5,\"images\":100,\"noise_gaussian\":0,"
    "\"noise_salt_pepper\":0,\"seconds\":0.1}\n"
    "{\"type\":\"summary\",\"steps\":40,\"first_loss\":8.3,\"final_loss\":4.2,\"first_val_loss\":8.2,"
    "\"final_val_loss\":4.6,\"tokens\":9000,\"tokens_per_s\":4400,\"peak_gflops\":400,\"train_seconds\":2,"
    "\"eval_seconds\":0.6,\"threads\":2,\"stopped_early\":false}\n";

/* Pixels in rows [y0, y1) that are not white. */
static long ink_in_rows(const Image *im, int y0, int y1) {
  long n = 0;
  size_t plane = (size_t)im->height * (size_t)im->width;
  for (int y = y0; y < y1; y++)
    for (int x = 0; x < im->width; x++) {
      size_t at = (size_t)y * (size_t)im->width + (size_t)x;
      if (im->data[at] < 0.9f || im->data[plane + at] < 0.9f || im->data[2 * plane + at] < 0.9f) n++;
    }
  return n;
}

/* Pixels of roughly this colour (a series' own). */
static long pixels_near(const Image *im, int y0, int y1, float r, float g, float b) {
  long n = 0;
  size_t plane = (size_t)im->height * (size_t)im->width;
  for (int y = y0; y < y1; y++)
    for (int x = 0; x < im->width; x++) {
      size_t at = (size_t)y * (size_t)im->width + (size_t)x;
      if (fabsf(im->data[at] - r) < 0.02f && fabsf(im->data[plane + at] - g) < 0.02f &&
          fabsf(im->data[2 * plane + at] - b) < 0.02f)
        n++;
    }
  return n;
}

static void test_every_kind_plots(void **state) {
  (void)state;
  spit(tmp_path("metrics.jsonl"), EVERY_KIND);
  MetricsPlotInfo info;
  Error err = {0};
  const int W = 640, H = 720;
  int rc = metrics_plot(tmp_path("metrics.jsonl"), tmp_path("loss.png"), W, H, &info, &err);
  if (rc) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(rc, 0);
  assert_int_equal(info.train, 4);
  assert_int_equal(info.eval, 3);
  assert_int_equal(info.test, 1);
  assert_int_equal(info.checkpoint, 1);
  assert_int_equal(info.summary, 1);
  assert_int_equal(info.unknown, 1);
  assert_int_equal(info.first_step, 1);
  assert_int_equal(info.last_step, 40);
  assert_string_equal(info.unit, "tokens");
  Image im;
  assert_int_equal(image_read(tmp_path("loss.png"), &im, &err), 0);
  assert_int_equal(im.channels, 3);
  assert_int_equal(im.width, W);
  assert_int_equal(im.height, H);
  /* The panels are 2/5, 3/10 and 3/10 of the height: each has ink, and
   * each its own series' colour (train loss blue, val loss orange, lr
   * purple, throughput teal). */
  int b1 = H * 2 / 5, b2 = b1 + (H - b1) / 2;
  assert_true(ink_in_rows(&im, 0, b1) > 1000);
  assert_true(ink_in_rows(&im, b1, b2) > 1000);
  assert_true(ink_in_rows(&im, b2, H) > 1000);
  assert_true(pixels_near(&im, 0, b1, 0.12f, 0.40f, 0.75f) > 50);
  assert_true(pixels_near(&im, 0, b1, 0.90f, 0.45f, 0.05f) > 50);
  assert_true(pixels_near(&im, 0, b1, 0.15f, 0.60f, 0.20f) > 10);
  assert_true(pixels_near(&im, b1, b2, 0.55f, 0.20f, 0.65f) > 50);
  assert_true(pixels_near(&im, b2, H, 0.10f, 0.55f, 0.55f) > 50);
  assert_int_equal(pixels_near(&im, b1, H, 0.12f, 0.40f, 0.75f), 0);
  image_free(&im);
}

static void expect_refused(const char *text, int code, const char *needle) {
  spit(tmp_path("bad.jsonl"), text);
  Error err = {0};
  assert_int_equal(metrics_plot(tmp_path("bad.jsonl"), tmp_path("bad.png"), 400, 400, NULL, &err), code);
  if (!strstr(err.msg, needle) || !strstr(err.msg, "bad.jsonl")) fail_msg("'%s' lacks '%s'", err.msg, needle);
}

static void test_malformed_refused(void **state) {
  (void)state;
  /* The file cut in the middle of its third line. */
  char cut[sizeof EVERY_KIND];
  const char *third = strchr(strchr(EVERY_KIND, '\n') + 1, '\n') + 1;
  snprintf(cut, sizeof cut, "%.*s", (int)(third - EVERY_KIND) + 30, EVERY_KIND);
  expect_refused(cut, ERR_FORMAT, "line 3 is cut short");
  char torn[sizeof EVERY_KIND + 8];
  snprintf(torn, sizeof torn, "%.*s\n", (int)(third - EVERY_KIND) + 30, EVERY_KIND);
  expect_refused(torn, ERR_FORMAT, "line 3 is not a JSON object");
  expect_refused("{\"type\":\"train\",\"step\":1,\"loss\":2,\"tokens_per_s\":3}\n", ERR_FORMAT,
                 "line 1: a \"train\" record needs a number \"lr\"");
  expect_refused("{\"type\":\"train\",\"step\":1,\"loss\":2,\"lr\":3}\n", ERR_FORMAT, "<unit>_per_s");
  expect_refused("{\"type\":\"train\",\"step\":1,\"loss\":2,\"lr\":1,\"tokens_per_s\":3}\n{\"step\":2}\n", ERR_FORMAT,
                 "line 2: the record has no string \"type\"");
  expect_refused("{\"type\":\"eval\",\"step\":1,\"val_loss\":2}\n", ERR_FORMAT, "no \"train\" records");
  Error err = {0};
  spit(tmp_path("ok.jsonl"), EVERY_KIND);
  assert_int_equal(metrics_plot(tmp_path("ok.jsonl"), tmp_path("ok.png"), 100, 400, NULL, &err), ERR_ARG);
  assert_int_equal(metrics_plot(tmp_path("absent.jsonl"), tmp_path("ok.png"), 400, 400, NULL, &err), ERR_IO);
  assert_non_null(strstr(err.msg, "absent.jsonl"));
}

int main(void) {
  if (test_tmpdir_make("metrics-plot")) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_kind_plots),
      cmocka_unit_test(test_malformed_refused),
  };
  return test_tmpdir_remove(cmocka_run_group_tests(tests, NULL, NULL));
}
