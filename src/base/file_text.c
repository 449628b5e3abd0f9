/* Whole-file reads of small text files, with the size known up front. */
#include "base/file_text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int file_read_text(const char *path, const char *what, size_t max_bytes, char **out, size_t *len, Error *err) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    error_set(err, ERR_IO, "cannot open %s %s: %s", what, path, error_errno_text(e));
    errno = e;
    return ERR_IO;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return error_set(err, ERR_FORMAT, "%s %s: expected a regular file", what, path);
  }
  if ((unsigned long long)st.st_size > max_bytes) {
    fclose(f);
    return error_set(err, ERR_FORMAT, "%s %s: %lld bytes, expected at most %zu", what, path, (long long)st.st_size,
                     max_bytes);
  }
  size_t size = (size_t)st.st_size;
  char *text = malloc(size + 1);
  if (!text) {
    fclose(f);
    return error_set(err, ERR_NOMEM, "out of memory reading %s %s", what, path);
  }
  /* Read one byte past the stat size to notice a file that grew meanwhile. */
  size_t got = fread(text, 1, size, f);
  int bad = ferror(f) || got != size || fgetc(f) != EOF;
  fclose(f);
  if (bad) {
    free(text);
    return error_set(err, ERR_IO, "cannot read %s %s (read error, or the file changed while read)", what, path);
  }
  text[size] = '\0';
  *out = text;
  if (len) *len = size;
  return ERR_OK;
}
