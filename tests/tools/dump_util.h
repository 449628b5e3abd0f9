/* Shared by the dump tools of the PyTorch parity tests (tests/tools/):
 * reading one float32 tensor of a known element count from the input
 * file. Header-only: each tool is one source file. */
#ifndef FIVEFOLD_TESTS_TOOLS_DUMP_UTIL_H
#define FIVEFOLD_TESTS_TOOLS_DUMP_UTIL_H

#include <stdlib.h>

#include "base/safetensors.h"

/* *out = a malloc'd copy of tensor `name`, which must hold `count` values. */
static inline int dump_read_tensor(const SafetensorsReader *r, const char *name, size_t count, float **out,
                                   Error *err) {
  const SafetensorsTensorInfo *t = safetensors_find(r, name);
  if (!t) return error_set(err, ERR_FORMAT, "%s: tensor '%s' is missing", safetensors_path(r), name);
  if (t->numel != count)
    return error_set(err, ERR_FORMAT, "%s: tensor '%s' has %llu elements, expected %zu for the shape",
                     safetensors_path(r), name, (unsigned long long)t->numel, count);
  *out = malloc((count ? count : 1) * sizeof **out);
  if (!*out) return error_set(err, ERR_NOMEM, "out of memory for '%s'", name);
  return safetensors_read_f32(r, name, t->ndim, t->shape, *out, err);
}

#endif
