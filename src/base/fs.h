/* Small file-system helpers every module needs: creating a directory with
 * its parents. Kept here so that each module does not grow its own loop. */
#ifndef FIVEFOLD_BASE_FS_H
#define FIVEFOLD_BASE_FS_H

#include "base/error.h"

/* `mkdir -p path` (mode 0777 before umask): every missing component is
 * created, components that exist already are fine. ERR_ARG for an empty or
 * over-long path, ERR_IO naming the component that could not be made. */
int fs_mkdir_p(const char *path, Error *err);

#endif
