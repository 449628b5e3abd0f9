/* Small file-system helpers every module needs: creating a directory with
 * its parents, writing a whole file so that no reader sees half of it.
 * Kept here so that each module does not grow its own loop. */
#ifndef FIVEFOLD_BASE_FS_H
#define FIVEFOLD_BASE_FS_H

#include <stddef.h>

#include "base/error.h"

/* `mkdir -p path` (mode 0777 before umask): every missing component is
 * created, components that exist already are fine. ERR_ARG for an empty or
 * over-long path, ERR_IO naming the component that could not be made. */
int fs_mkdir_p(const char *path, Error *err);

/* Writes n bytes to PATH.tmp, fsyncs and renames it to path: a reader sees
 * the old file or the whole new one. ERR_IO naming the file otherwise. */
int fs_write_atomic(const char *path, const void *data, size_t n, Error *err);
/* The same for a text and a final newline (a rendered JSON document). */
int fs_write_text_atomic(const char *path, const char *text, Error *err);

#endif
