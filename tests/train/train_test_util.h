/* Shared helpers for the train tests: a scratch directory removed at exit,
 * file helpers, and shard writing. Header-only so each test stays one
 * executable. */
#ifndef FIVEFOLD_TESTS_TRAIN_TEST_UTIL_H
#define FIVEFOLD_TESTS_TRAIN_TEST_UTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_scratch[512];

static inline void scratch_remove(void) {
  if (!g_scratch[0]) return;
  DIR *d = opendir(g_scratch);
  if (d) {
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      snprintf(path, sizeof path, "%s/%s", g_scratch, e->d_name);
      struct stat st;
      if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) rmdir(path);
      else unlink(path);
    }
    closedir(d);
  }
  rmdir(g_scratch);
  g_scratch[0] = '\0';
}

/* A fresh directory under $TMPDIR (or /tmp), removed at exit (flat: tests
 * put files directly in it, plus at most empty subdirectories). */
static inline const char *scratch_dir(void) {
  if (g_scratch[0]) return g_scratch;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_scratch, sizeof g_scratch, "%s/fivefold-train-test-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(g_scratch)) {
    perror("mkdtemp");
    abort();
  }
  atexit(scratch_remove);
  return g_scratch;
}

/* scratch_dir()/name in a static rotating buffer. */
static inline const char *scratch_path(const char *name) {
  static char bufs[8][1024];
  static int next = 0;
  char *b = bufs[next++ % 8];
  snprintf(b, 1024, "%s/%s", scratch_dir(), name);
  return b;
}

static inline void write_text_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  fputs(text, f);
  fclose(f);
}

static inline long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

#endif
