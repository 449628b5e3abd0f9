/* mkdir -p and atomic whole-file writes. */
#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_mkdir_p(const char *path, Error *err) {
  char buf[4096];
  size_t n = path ? strlen(path) : 0;
  if (n == 0) return error_set(err, ERR_ARG, "cannot create a directory with an empty name");
  if (n >= sizeof buf) return error_set(err, ERR_ARG, "directory name too long (%zu bytes): %.64s...", n, path);
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char saved = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
      int e = errno;
      error_set(err, ERR_IO, "cannot create directory %s: %s", buf, error_errno_text(e));
      errno = e;
      return ERR_IO;
    }
    buf[i] = saved;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return error_set(err, ERR_IO, "%s exists and is not a directory", path);
  return ERR_OK;
}

/* PATH.tmp gets the parts one after another, then fsync and rename. */
static int write_parts_atomic(const char *path, const void *const *parts, const size_t *sizes, int nparts,
                              Error *err) {
  char tmp[4200];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
    return error_set(err, ERR_ARG, "file name too long: %.64s...", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return error_set(err, ERR_IO, "cannot create %s: %s", tmp, error_errno_text(errno));
  int rc = 0;
  for (int i = 0; i < nparts && !rc; i++) {
    const char *p = parts[i];
    size_t done = 0;
    while (done < sizes[i] && !rc) {
      ssize_t k = write(fd, p + done, sizes[i] - done);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) rc = error_set(err, ERR_IO, "cannot write %s: %s", tmp, error_errno_text(errno));
      else done += (size_t)k;
    }
  }
  if (!rc && fsync(fd) != 0) rc = error_set(err, ERR_IO, "cannot fsync %s: %s", tmp, error_errno_text(errno));
  if (close(fd) != 0 && !rc) rc = error_set(err, ERR_IO, "cannot close %s: %s", tmp, error_errno_text(errno));
  if (!rc && rename(tmp, path) != 0) rc = error_set(err, ERR_IO, "cannot rename %s to %s: %s", tmp, path, error_errno_text(errno));
  if (rc) unlink(tmp);
  return rc;
}

int fs_write_atomic(const char *path, const void *data, size_t n, Error *err) {
  const void *parts[1] = {data};
  return write_parts_atomic(path, parts, &n, 1, err);
}

int fs_write_text_atomic(const char *path, const char *text, Error *err) {
  const void *parts[2] = {text, "\n"};
  size_t sizes[2] = {strlen(text), 1};
  return write_parts_atomic(path, parts, sizes, 2, err);
}
