/* Finding model and cluster specs by name, so `--model mixtral-8x22b` and
 * `--cluster dgx-h100` work from any directory. A value that names an
 * existing file is used as is; otherwise "<name>.json" (lower-cased, ".json"
 * optional) is looked up under <dir>/models or <dir>/clusters for dir in:
 * $FIVEFOLD_CONFIGS, ./configs, and configs/ next to or above the running
 * binary (build directories sit inside the source tree). */
#ifndef FIVEFOLD_PLAN_CONFIG_PATHS_H
#define FIVEFOLD_PLAN_CONFIG_PATHS_H

#include <stddef.h>

#include "base/error.h"

/* kind is "models" or "clusters". On failure the message lists where it looked. */
int plan_find_config(const char *kind, const char *name, char *path, size_t size, Error *err);

#endif
