/* The run directory that import and upcycle write for `train --resume`:
 * a new directory (no checkpoints in it yet), named absolutely, since the
 * run config it gets records where it is. */
#ifndef FIVEFOLD_CONVERT_RUN_DIR_H
#define FIVEFOLD_CONVERT_RUN_DIR_H

#include "base/error.h"

/* Creates out_dir when missing and sets *out_abs (malloc'd) to its absolute
 * path; ERR_ARG when out_dir already holds checkpoints (the message says to
 * `command` into a new directory). */
int convert_new_run_dir(const char *out_dir, const char *command, char **out_abs, Error *err);

#endif
