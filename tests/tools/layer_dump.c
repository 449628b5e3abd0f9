/* layer_dump: runs one layer of nets/ (any kind the registry knows) on
 * tensors from a file, for the PyTorch parity tests
 * (tests/torch_ref/vision_layers.py).
 *
 *   layer_dump IN.safetensors OUT.safetensors
 *
 * IN holds x [batch, c, h, w], dy (the output's shape) and the layer's
 * parameters by suffix ("weight", "bias"), with metadata "spec" (the
 * layer's JSON object) and "batch", "c", "h", "w". OUT receives y and, for
 * the loss sum(y * dy), "dx" and "d<suffix>" per parameter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/safetensors.h"
#include "dump_util.h"
#include "kern/conv2d.h"
#include "nets/layer.h"

static int read_into(const SafetensorsReader *r, const char *name, size_t count, float *out, Error *err) {
  const SafetensorsTensorInfo *t = safetensors_find(r, name);
  if (!t) return error_set(err, ERR_FORMAT, "%s: tensor '%s' is missing", safetensors_path(r), name);
  if (t->numel != count)
    return error_set(err, ERR_FORMAT, "%s: tensor '%s' has %llu elements, the layer expects %zu", safetensors_path(r),
                     name, (unsigned long long)t->numel, count);
  return safetensors_read_f32(r, name, t->ndim, t->shape, out, err);
}

static int run(const char *in_path, const char *out_path, Error *err) {
  SafetensorsReader *r = NULL;
  int rc = safetensors_open(&r, in_path, err);
  if (rc) return rc;
  int n = 0;
  LayerShape in = {0, 0, 0};
  rc = dump_meta_int(r, "batch", &n, err);
  if (!rc) rc = dump_meta_int(r, "c", &in.c, err);
  if (!rc) rc = dump_meta_int(r, "h", &in.h, err);
  if (!rc) rc = dump_meta_int(r, "w", &in.w, err);
  const char *text = safetensors_metadata_get(r, "spec");
  cJSON *spec = text ? cJSON_Parse(text) : NULL;
  if (!rc && !spec) rc = error_set(err, ERR_FORMAT, "%s: metadata 'spec' is missing or not JSON", in_path);
  Layer l;
  memset(&l, 0, sizeof l);
  if (!rc) rc = layer_create(&l, spec, in, n, "spec", err);
  size_t nx = (size_t)n * layer_shape_numel(in), ny = rc ? 0 : (size_t)n * layer_shape_numel(l.out);
  float *x = malloc(nx * sizeof(float)), *dx = malloc(nx * sizeof(float));
  float *y = malloc((ny + 1) * sizeof(float)), *dy = malloc((ny + 1) * sizeof(float));
  if (!rc && (!x || !dx || !y || !dy)) rc = error_set(err, ERR_NOMEM, "out of memory");
  if (!rc) rc = read_into(r, "x", nx, x, err);
  if (!rc) rc = read_into(r, "dy", ny, dy, err);
  for (int t = 0; t < l.num_params && !rc; t++) {
    l.param[t] = malloc(l.params[t].numel * sizeof(float));
    l.grad[t] = calloc(l.params[t].numel, sizeof(float));
    if (!l.param[t] || !l.grad[t]) rc = error_set(err, ERR_NOMEM, "out of memory");
    if (!rc) rc = read_into(r, l.params[t].suffix, l.params[t].numel, l.param[t], err);
  }
  if (!rc) rc = l.ops->forward(&l, x, y, n, 1, err);
  if (!rc) rc = l.ops->backward(&l, x, y, dy, dx, n, err);
  SafetensorsWriter *out = rc ? NULL : safetensors_writer_new();
  if (!rc && !out) rc = error_set(err, ERR_NOMEM, "out of memory for the writer");
  if (!rc) {
    int xs[4] = {n, in.c, in.h, in.w}, ys[4] = {n, l.out.c, l.out.h, l.out.w};
    rc = safetensors_writer_add_f32(out, "y", 4, ys, y, err);
    if (!rc) rc = safetensors_writer_add_f32(out, "dx", 4, xs, dx, err);
    for (int t = 0; t < l.num_params && !rc; t++) {
      char name[64];
      int shape[LAYER_MAX_DIMS];
      for (int d = 0; d < l.params[t].ndim; d++) shape[d] = (int)l.params[t].shape[d];
      snprintf(name, sizeof name, "d%s", l.params[t].suffix);
      rc = safetensors_writer_add_f32(out, name, l.params[t].ndim, shape, l.grad[t], err);
    }
    if (!rc) rc = safetensors_writer_write(out, out_path, err);
  }
  safetensors_writer_free(out);
  for (int t = 0; t < l.num_params; t++) free(l.param[t]), free(l.grad[t]);
  if (l.ops) layer_free(&l);
  cJSON_Delete(spec);
  safetensors_close(r);
  free(x), free(dx), free(y), free(dy);
  conv2d_cache_clear();
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: layer_dump IN.safetensors OUT.safetensors\n");
    return 2;
  }
  Error err = {0};
  int rc = run(argv[1], argv[2], &err);
  if (rc) {
    fprintf(stderr, "layer_dump: %s\n", err.msg);
    return 1;
  }
  return 0;
}
