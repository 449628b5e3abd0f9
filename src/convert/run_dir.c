/* A new run directory for the converters (run_dir.h). */
#include "convert/run_dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "ckpt/checkpoint.h"

int convert_new_run_dir(const char *out_dir, const char *command, char **out_abs, Error *err) {
  *out_abs = NULL;
  char ckroot[CHECKPOINT_PATH_MAX];
  if (snprintf(ckroot, sizeof ckroot, "%s/%s", out_dir, CHECKPOINT_SUBDIR) >= (int)sizeof ckroot)
    return error_set(err, ERR_ARG, "--out %s: path too long", out_dir);
  int *steps = NULL, nsteps = 0;
  int rc = checkpoint_list(ckroot, &steps, &nsteps, err);
  free(steps);
  if (rc) return rc;
  if (nsteps > 0)
    return error_set(err, ERR_ARG, "--out %s already holds %d checkpoint(s) in %s: %s into a new directory (or remove it)",
                     out_dir, nsteps, ckroot, command);
  if ((rc = fs_mkdir_p(out_dir, err))) return rc;
  *out_abs = realpath(out_dir, NULL);
  if (!*out_abs) return error_set(err, ERR_IO, "cannot resolve --out %s: %s", out_dir, error_errno_text(errno));
  return 0;
}
