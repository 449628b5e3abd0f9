/* Shared by the dump tools of the PyTorch parity tests (tests/tools/):
 * reading one float32 tensor of a known element count, or an integer
 * metadata value, from the input file, errors naming the file and the key.
 * Header-only: each tool is one source file. */
#ifndef FIVEFOLD_TESTS_TOOLS_DUMP_UTIL_H
#define FIVEFOLD_TESTS_TOOLS_DUMP_UTIL_H

#include <stdlib.h>

#include "base/safetensors.h"

/* *out = the integer metadata value of `key`. */
static inline int dump_meta_int(const SafetensorsReader *r, const char *key, int *out, Error *err) {
  const char *v = safetensors_metadata_get(r, key);
  char *end;
  if (!v) return error_set(err, ERR_FORMAT, "%s: metadata '%s' is missing", safetensors_path(r), key);
  long x = strtol(v, &end, 10);
  if (*end || end == v)
    return error_set(err, ERR_FORMAT, "%s: metadata '%s' is '%s', expected an integer", safetensors_path(r), key, v);
  *out = (int)x;
  return 0;
}

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
