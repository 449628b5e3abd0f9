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
#include "model/config.h"

/* kind is "models" or "clusters". On failure the message lists where it looked. */
int plan_find_config(const char *kind, const char *name, char *path, size_t size, Error *err);

/* The model of `path`: a model config, or a run config (an object with a
 * "model" member that is a model config object or a path to one, relative
 * to the run config), so `--model configs/demo-moe.json` prices the model
 * that `fivefold train --config configs/demo-moe.json` trains.
 * *from_run_config is set to 1 for a run config (may be NULL). */
int plan_load_model(const char *path, ModelConfig *model, int *from_run_config, Error *err);

#endif
