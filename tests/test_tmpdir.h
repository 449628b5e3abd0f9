/* A private temporary directory for tests that write files: made once per
 * test executable, named paths inside it, removed at the end. Header-only,
 * so that each test stays one executable. */
#ifndef FIVEFOLD_TESTS_TEST_TMPDIR_H
#define FIVEFOLD_TESTS_TEST_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char test_tmp_dir[64];

/* mkdtemp of /tmp/fivefold-<name>.XXXXXX; 0 on success. */
static inline int test_tmpdir_make(const char *name) {
  snprintf(test_tmp_dir, sizeof test_tmp_dir, "/tmp/fivefold-%s.XXXXXX", name);
  return mkdtemp(test_tmp_dir) ? 0 : -1;
}

/* test_tmp_dir/name; the last 8 results stay valid. */
static inline const char *tmp_path(const char *name) {
  static char buf[8][512];
  static int next;
  char *p = buf[next++ % 8];
  snprintf(p, sizeof buf[0], "%s/%s", test_tmp_dir, name);
  return p;
}

/* Removes the directory; rc, or 1 when rc was 0 and the removal failed. */
static inline int test_tmpdir_remove(int rc) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_tmp_dir);
  if (system(cmd)) return rc ? rc : 1;
  return rc;
}

#endif
