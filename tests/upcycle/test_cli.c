/* `fivefold upcycle` as the command line runs it (cmd_upcycle, compiled into
 * this test): --help lists every option, usage errors exit 2 with a message
 * naming the option, checkpoint problems exit 1, and a successful run says
 * what it wrote, whether the start is exact, and how to continue. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cli/cmd_upcycle.h"
#include "upcycle/upcycle_test_util.h"

/* Runs cmd with stdout and stderr captured into *text (static buffer). */
static int run_captured(int (*cmd)(int, char **), int argc, const char **argv, const char **text) {
  static char buf[1 << 16];
  const char *path = upc_path("captured.txt");
  fflush(stdout);
  fflush(stderr);
  int saved_out = dup(1), saved_err = dup(2);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || saved_out < 0 || saved_err < 0) abort();
  dup2(fd, 1);
  dup2(fd, 2);
  close(fd);
  int rc = cmd(argc, (char **)argv);
  fflush(stdout);
  fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  *text = buf;
  return rc;
}

/* Runs cmd with the given arguments; *text gets its output. */
#define RUN(cmd, text, ...)                                                  \
  ({                                                                         \
    const char *argv_[] = {#cmd, __VA_ARGS__};                               \
    run_captured(cmd, (int)(sizeof argv_ / sizeof argv_[0]), argv_, (text)); \
  })

static void expect_out(int rc, int want, const char *const *textp, const char *needle) {
  const char *text = *textp;
  if (rc != want) fail_msg("exit %d (expected %d): %s", rc, want, text);
  if (needle && !strstr(text, needle)) fail_msg("output lacks '%s':\n%s", needle, text);
}

static void test_help_lists_every_option(void **state) {
  (void)state;
  const char *text = NULL;
  expect_out(RUN(cmd_upcycle, &text, "--help"), 0, &text, "usage: fivefold upcycle");
  static const char *const options[] = {
      "--checkpoint",     "--out",          "--experts",         "--topk",           "--granularity",
      "--router-order",   "--router-score", "--norm-topk-prob",  "--aux-loss-coeff", "--z-loss-coeff",
      "--router-init-std", "--moe-layer-freq", "--seed",         "--dense-control",  "--help"};
  for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
    if (!strstr(text, options[i])) fail_msg("--help does not list %s", options[i]);
}

static void test_usage_errors(void **state) {
  (void)state;
  const char *t = NULL;
  expect_out(RUN(cmd_upcycle, &t, "--experts", "8", "--topk", "2", "--out", "x"), 2, &t, "--checkpoint PATH");
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", "c", "--experts", "8", "--topk", "2"), 2, &t, "--out DIR");
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", "c", "--out", "x", "--topk", "2"), 2, &t, "--experts and --topk");
  expect_out(
      RUN(cmd_upcycle, &t, "--checkpoint", "c", "--out", "x", "--experts", "6", "--topk", "2", "--granularity", "4"), 2,
      &t, "--experts (6) must be a multiple of --granularity (4)");
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", "c", "--out", "x", "--experts", "4", "--topk", "8"), 2, &t,
             "--topk (8) must not exceed --experts (4)");
  expect_out(
      RUN(cmd_upcycle, &t, "--checkpoint", "c", "--out", "x", "--experts", "8", "--topk", "1", "--granularity=2"), 2,
      &t, "--topk (1) must be a multiple of --granularity (2)");
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", "c", "--out", "x", "--experts", "eight", "--topk", "2"), 2, &t,
             "--experts expects an integer");
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", "c", "--out", "x", "--experts", "8", "--topk", "2", "--router-order",
                 "topk"),
             2, &t, "--router-order must be softmax_then_topk or topk_then_softmax");
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", "c", "--out", "x", "--experts", "8", "--topk", "2",
                 "--aux-loss-coeff", "-1"),
             2, &t, "--aux-loss-coeff expects a non-negative number");
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", "c", "--out", "x", "--experts", "8", "--topk", "2", "--topk-k", "2"),
             2, &t, "unknown option '--topk-k'");
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", "c", "--out", "x", "--dense-control", "--experts", "8"), 2, &t,
             "--dense-control keeps the model dense");
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", "c", "--out", "x", "--experts", "8", "--topk"), 2, &t,
             "--topk needs a value");
}

static int setup(void **state) {
  (void)state;
  if (upc_write_shards()) return -1;
  return upc_train_dense(upc_write_dense_config("dense.json", "dense-run", 4));
}

static void test_checkpoint_errors(void **state) {
  (void)state;
  const char *t = NULL;
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", upc_path("missing"), "--out", upc_path("o1"), "--experts", "8",
                 "--topk", "2"),
             1, &t, "--checkpoint");
  /* F = 64 is not divisible by 3: only the checkpoint can tell. */
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", upc_path("dense-run"), "--out", upc_path("o2"), "--experts", "6",
                 "--topk", "3", "--granularity", "3"),
             1, &t, "is not divisible by --granularity 3");
}

/* A successful upcycle prints what it did and how to continue, and writes
 * the run directory; the dense control likewise. (The continuation itself,
 * `fivefold train --resume`, runs in tests/upcycle/workflow_test.sh through
 * the real binary, and through the trainer in tests/train/test_upcycle.c.) */
static void test_upcycle_writes_run_directory(void **state) {
  (void)state;
  const char *t = NULL;
  char out[1024]; /* upc_path's buffers rotate */
  snprintf(out, sizeof out, "%s", upc_path("moe"));
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", upc_path("dense-run"), "--out", out, "--experts", "4", "--topk", "2",
                 "--granularity", "2", "--router-order", "topk_then_softmax", "--seed", "5"),
             0, &t, "continue:  fivefold train --config");
  assert_non_null(strstr(t, "4 experts of ffn 32 (granularity 2, 2 copies of each slice), top-2"));
  assert_non_null(strstr(t, "equals the dense MLP exactly"));
  char path[2048];
  snprintf(path, sizeof path, "%s/run.json", out);
  assert_true(upc_exists(path));
  snprintf(path, sizeof path, "%s/checkpoints/step-00000000/state.json", out);
  assert_true(upc_exists(path));
  /* Unnormalised softmax-then-top-k with a random router says it is approximate. */
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", upc_path("dense-run"), "--out", upc_path("stk"), "--experts", "4",
                 "--topk", "2"),
             0, &t, "only approximately");
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", upc_path("dense-run"), "--out", upc_path("stk0"), "--experts", "4",
                 "--topk", "2", "--router-init-std", "0"),
             0, &t, "exactly (router rows 0: uniform scores)");
  /* The output directory must be new. */
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", upc_path("dense-run"), "--out", out, "--experts", "4", "--topk", "2"),
             1, &t, "already holds 1 checkpoint");
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", upc_path("dense-run"), "--out", upc_path("control"),
                 "--dense-control"),
             0, &t, "unchanged (dense control)");
  /* An MoE checkpoint is not a starting point. */
  expect_out(RUN(cmd_upcycle, &t, "--checkpoint", out, "--out", upc_path("again"), "--experts", "4", "--topk", "2"), 1,
             &t, "already an MoE model");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help_lists_every_option),
      cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_checkpoint_errors),
      cmocka_unit_test(test_upcycle_writes_run_directory),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
