/* Shared by the export and import tests: a scratch directory under
 * $TMPDIR, removed with everything in it at exit, and paths inside it. */
#ifndef FIVEFOLD_TESTS_EXPORT_TEST_UTIL_H
#define FIVEFOLD_TESTS_EXPORT_TEST_UTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char g_scratch[512];

static int scratch_remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void scratch_remove(void) {
  if (g_scratch[0]) nftw(g_scratch, scratch_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static inline const char *scratch_dir(void) {
  if (g_scratch[0]) return g_scratch;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_scratch, sizeof g_scratch, "%s/fivefold-export-test-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(g_scratch)) abort();
  atexit(scratch_remove);
  return g_scratch;
}

/* scratch_dir()/name in one of eight rotating static buffers. */
static inline const char *scratch_path(const char *name) {
  static char bufs[8][1024];
  static int next = 0;
  char *b = bufs[next++ % 8];
  snprintf(b, 1024, "%s/%s", scratch_dir(), name);
  return b;
}

#endif
