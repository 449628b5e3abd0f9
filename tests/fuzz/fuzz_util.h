/* Helpers shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c): handing
 * the fuzz input to readers that take a path, a per-process scratch
 * directory for readers that resolve paths next to their file, and the
 * contract every failing reader call must keep (a code and a message).
 *
 * Any broken promise calls fuzz_fail, which aborts: libFuzzer then records
 * the input as a crash, exactly as for a sanitizer report. */
#ifndef FIVEFOLD_TESTS_FUZZ_UTIL_H
#define FIVEFOLD_TESTS_FUZZ_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline void fuzz_fail(const char *what, const char *detail) __attribute__((noreturn));
static inline void fuzz_fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz: broken promise: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

/* A pattern no reader writes, so a failure that leaves err untouched shows. */
static inline void fuzz_error_reset(Error *err) {
  memset(err, 0x5a, sizeof *err);
  err->code = -12345;
}

/* FIVEFOLD_FUZZ_VERBOSE=1 prints every checked call's outcome: how to see
 * what a seed or a crash input does (`fuzz_x FILE`). */
static inline int fuzz_verbose(void) {
  static int v = -1;
  if (v < 0) v = getenv("FIVEFOLD_FUZZ_VERBOSE") && atoi(getenv("FIVEFOLD_FUZZ_VERBOSE")) > 0;
  return v;
}

/* rc from a reader call that filled err on failure: a known code, err->code
 * equal to it, and a non-empty NUL-terminated message. */
static inline void fuzz_check_result(int rc, const Error *err, const char *call) {
  if (fuzz_verbose()) fprintf(stderr, "fuzz: %s: %s\n", call, rc ? err->msg : "ok");
  if (rc == 0) return;
  if (rc < ERR_ARG || rc > ERR_INTERNAL) fuzz_fail(call, "returned an unknown error code");
  if (err->code != rc) fuzz_fail(call, "returned a code different from err->code");
  if (!memchr(err->msg, '\0', sizeof err->msg)) fuzz_fail(call, "left err->msg without a terminating NUL");
  if (!err->msg[0]) fuzz_fail(call, "failed with an empty message");
  if (rc == ERR_INTERNAL) fuzz_fail(call, err->msg); /* bad input is never a bug of ours */
}

/* ---- the input as a file ---- */

static int fuzz_fd = -1;
static char fuzz_fd_path[4096];

static inline void fuzz_unlink_input_file(void) { unlink(fuzz_fd_path); }

/* Opens the per-process file that fuzz_input_path rewrites: an in-memory
 * file (no disk I/O, nothing to clean up) named through /proc/self/fd, or a
 * temporary file in $TMPDIR where memfds are unavailable. */
static inline void fuzz_input_file_open(void) {
  if (fuzz_fd >= 0) return;
  fuzz_fd = (int)memfd_create("fivefold-fuzz-input", 0);
  if (fuzz_fd >= 0) {
    snprintf(fuzz_fd_path, sizeof fuzz_fd_path, "/proc/self/fd/%d", fuzz_fd);
    if (access(fuzz_fd_path, R_OK) == 0) return;
    close(fuzz_fd); /* no /proc: use a real file */
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(fuzz_fd_path, sizeof fuzz_fd_path, "%s/fivefold-fuzz-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  fuzz_fd = mkstemp(fuzz_fd_path);
  if (fuzz_fd < 0) fuzz_fail("cannot create the input file", strerror(errno));
  atexit(fuzz_unlink_input_file);
}

/* A path whose file holds exactly data[0, size). Valid until the next call. */
static inline const char *fuzz_input_path(const uint8_t *data, size_t size) {
  fuzz_input_file_open();
  if (ftruncate(fuzz_fd, 0) != 0) fuzz_fail("cannot truncate the input file", strerror(errno));
  size_t done = 0;
  while (done < size) {
    ssize_t k = pwrite(fuzz_fd, data + done, size - done, (off_t)done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fuzz_fail("cannot write the input file", strerror(errno));
    done += (size_t)k;
  }
  return fuzz_fd_path;
}

/* data[0, size) as a NUL-terminated string (malloc'd). Embedded NULs stay:
 * the text simply ends at the first one for string APIs. */
static inline char *fuzz_cstring(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) fuzz_fail("out of memory", NULL);
  if (size) memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* ---- a scratch directory, for readers that resolve paths next to their
 * file; removed at exit (the ctest wrapper also points TMPDIR into the build
 * tree and removes that, for runs that end in a crash) ---- */

static char fuzz_dir[4096];

static inline void fuzz_remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char p[8192];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      struct stat st;
      if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) fuzz_remove_tree(p);
      else unlink(p);
    }
    closedir(d);
  }
  rmdir(dir);
}

static inline void fuzz_dir_cleanup(void) {
  if (fuzz_dir[0]) fuzz_remove_tree(fuzz_dir);
}

static inline const char *fuzz_scratch_dir(void) {
  if (fuzz_dir[0]) return fuzz_dir;
  /* Under run_fuzz.sh the process has a private, empty TMPDIR of its own,
   * given as a relative path: a fixed name in it makes every path the
   * readers see, and so every comparison libFuzzer traces, the same from
   * run to run and machine to machine (a random or absolute one made the
   * gate try different inputs on each run). */
  const char *fixed = getenv("FIVEFOLD_FUZZ_FIXED_SCRATCH");
  if (fixed && fixed[0]) {
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s", fixed);
    if (mkdir(fuzz_dir, 0700) != 0) fuzz_fail("cannot create the scratch directory", strerror(errno));
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/fivefold-fuzz-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(fuzz_dir)) fuzz_fail("cannot create a scratch directory", strerror(errno));
  }
  atexit(fuzz_dir_cleanup);
  return fuzz_dir;
}

/* Writes data[0, size) to scratch_dir/name; returns the full path (static,
 * valid until the next call). */
static inline const char *fuzz_write_scratch(const char *name, const void *data, size_t size) {
  static char path[8192];
  snprintf(path, sizeof path, "%s/%s", fuzz_scratch_dir(), name);
  FILE *f = fopen(path, "wb");
  if (!f) fuzz_fail("cannot write a scratch file", strerror(errno));
  if (size && fwrite(data, 1, size, f) != size) fuzz_fail("cannot write a scratch file", strerror(errno));
  if (fclose(f) != 0) fuzz_fail("cannot write a scratch file", strerror(errno));
  return path;
}

#endif
