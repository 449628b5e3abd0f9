/* gan_layers_dump: runs one conv_transpose2d or instance_norm layer
 * (src/nets/layer_gan.h) on tensors from a file, for the PyTorch parity
 * test (tests/torch_ref/gan_layers.py).
 *
 *   gan_layers_dump IN.safetensors OUT.safetensors
 *
 * IN holds x [N, C, H, W] and dy (float32), the layer's parameters under
 * "w" and "b" where it has them (PyTorch's shapes), and as metadata "kind"
 * (conv_transpose2d | instance_norm) and "spec" (the layer's JSON config).
 * OUT receives y (a training forward) and, for the loss sum(y * dy), dx
 * and the parameter gradients dw and db. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/safetensors.h"
#include "dump_util.h"
#include "kern/conv2d.h"
#include "nets/layer_gan.h"

static int run(const char *in_path, const char *out_path, Error *err) {
  SafetensorsReader *r = NULL;
  int rc = safetensors_open(&r, in_path, err);
  if (rc) return rc;
  const char *kind = safetensors_metadata_get(r, "kind"), *spec_text = safetensors_metadata_get(r, "spec");
  const SafetensorsTensorInfo *xi = safetensors_find(r, "x");
  cJSON *spec = spec_text ? cJSON_Parse(spec_text) : NULL;
  Layer l;
  memset(&l, 0, sizeof l);
  int created = 0;
  if (!kind || !spec || !xi || xi->ndim != 4) {
    rc = error_set(err, ERR_FORMAT, "%s: expected metadata 'kind' and 'spec' (JSON) and a 4-D tensor 'x'", in_path);
  } else {
    const int n = (int)xi->shape[0];
    LayerShape in = {(int)xi->shape[1], (int)xi->shape[2], (int)xi->shape[3]};
    if (!strcmp(kind, "conv_transpose2d")) rc = layer_create_conv_transpose2d(&l, spec, in, n, in_path, err);
    else if (!strcmp(kind, "instance_norm")) rc = layer_create_instance_norm(&l, spec, in, n, in_path, err);
    else rc = error_set(err, ERR_FORMAT, "%s: kind '%s', expected conv_transpose2d or instance_norm", in_path, kind);
    created = !rc;
  }
  cJSON_Delete(spec);
  static const char *const PARAM_NAMES[2] = {"w", "b"}, *const GRAD_NAMES[2] = {"dw", "db"};
  float *x = NULL, *dy = NULL, *y = NULL, *dx = NULL;
  const int n = xi ? (int)xi->shape[0] : 0;
  const size_t nx = created ? (size_t)n * layer_shape_numel(l.in) : 0,
               ny = created ? (size_t)n * layer_shape_numel(l.out) : 0;
  if (!rc) rc = dump_read_tensor(r, "x", nx, &x, err);
  if (!rc) rc = dump_read_tensor(r, "dy", ny, &dy, err);
  for (int p = 0; !rc && p < l.num_params; p++) {
    rc = dump_read_tensor(r, PARAM_NAMES[p], l.params[p].numel, &l.param[p], err);
    if (!rc && !(l.grad[p] = calloc(l.params[p].numel, sizeof(float)))) rc = error_set(err, ERR_NOMEM, "out of memory");
  }
  if (!rc && (!(y = calloc(ny, sizeof *y)) || !(dx = calloc(nx, sizeof *dx))))
    rc = error_set(err, ERR_NOMEM, "out of memory for the outputs");
  if (!rc) rc = l.ops->forward(&l, x, y, n, 1, err);
  if (!rc) rc = l.ops->backward(&l, x, y, dy, dx, n, err);
  SafetensorsWriter *out = rc ? NULL : safetensors_writer_new();
  if (!rc && !out) rc = error_set(err, ERR_NOMEM, "out of memory for the writer");
  if (!rc) {
    int xs[4] = {n, l.in.c, l.in.h, l.in.w}, ys[4] = {n, l.out.c, l.out.h, l.out.w};
    rc = safetensors_writer_add_f32(out, "y", 4, ys, y, err);
    if (!rc) rc = safetensors_writer_add_f32(out, "dx", 4, xs, dx, err);
    for (int p = 0; !rc && p < l.num_params; p++) {
      int shape[LAYER_MAX_DIMS];
      for (int d = 0; d < l.params[p].ndim; d++) shape[d] = (int)l.params[p].shape[d];
      rc = safetensors_writer_add_f32(out, GRAD_NAMES[p], l.params[p].ndim, shape, l.grad[p], err);
    }
    if (!rc) rc = safetensors_writer_write(out, out_path, err);
  }
  safetensors_writer_free(out);
  safetensors_close(r);
  for (int p = 0; p < l.num_params; p++) free(l.param[p]), free(l.grad[p]);
  if (created) l.ops->free(&l);
  free(x), free(dy), free(y), free(dx);
  conv2d_cache_clear();
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: gan_layers_dump IN.safetensors OUT.safetensors\n");
    return 2;
  }
  Error err = {0};
  int rc = run(argv[1], argv[2], &err);
  if (rc) {
    fprintf(stderr, "gan_layers_dump: %s\n", err.msg);
    return 1;
  }
  return 0;
}
