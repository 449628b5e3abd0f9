/* mkdir -p. */
#include "base/fs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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
