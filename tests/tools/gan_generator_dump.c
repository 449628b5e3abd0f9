/* gan_generator_dump: the deblurring GAN's generator (nets/gan.h) as a
 * whole, for the PyTorch parity test (tests/torch_ref/gan_generator.py):
 * its output and one content-only step (gan_generator_pass: forward, the
 * content loss, backward) on tensors from a file.
 *
 *   gan_generator_dump IN.safetensors OUT.safetensors
 *
 * IN holds blurred and sharp [N, C, H, W] (float32), the generator's
 * parameters p0, p1, ... in PyTorch's order (module order, each conv's
 * weight then its bias), and as metadata "model" (the network's JSON
 * config). OUT receives "out" (the generator's output, clamped to 0..1 as
 * gan_generate gives it), "content" (the content loss, one value), the
 * gradients g0, g1, ... of content_weight * content, in the order of the
 * p's, and "paths": the convolution passes of the two that ran on the
 * direct few-channel kernels and on Winograd (kern/conv2d.h), and the
 * OpenMP threads (Winograd's backward-weights runs on one only). The generator's tensors of the network's table are taken in table
 * order, which must be PyTorch's; a count or a shape that differs is
 * refused with both named. */
#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/safetensors.h"
#include "dump_util.h"
#include "kern/conv2d.h"
#include "nets/gan.h"

static int run(const char *in_path, const char *out_path, Error *err) {
  SafetensorsReader *r = NULL;
  int rc = safetensors_open(&r, in_path, err);
  if (rc) return rc;
  const char *model = safetensors_metadata_get(r, "model");
  const SafetensorsTensorInfo *bi = safetensors_find(r, "blurred");
  cJSON *cfg_json = model ? cJSON_Parse(model) : NULL;
  Network net;
  memset(&net, 0, sizeof net);
  GanConfig cfg;
  float *blurred = NULL, *sharp = NULL, *out = NULL;
  SafetensorsWriter *w = NULL;
  int n = 0, c = 0, h = 0, wd = 0, created = 0;
  if (!cfg_json || !bi || bi->ndim != 4) {
    rc = error_set(err, ERR_FORMAT, "%s: expected metadata 'model' (JSON) and a 4-D tensor 'blurred'", in_path);
    goto done;
  }
  n = (int)bi->shape[0], c = (int)bi->shape[1], h = (int)bi->shape[2], wd = (int)bi->shape[3];
  if ((rc = gan_config_from_json(&cfg, cfg_json, in_path, err)) || (rc = gan_create(&net, &cfg, h, wd, n, err)))
    goto done;
  created = 1;
  size_t image = (size_t)n * c * h * wd;
  if ((rc = dump_read_tensor(r, "blurred", image, &blurred, err)) ||
      (rc = dump_read_tensor(r, "sharp", image, &sharp, err)))
    goto done;
  /* the generator's tensors, in table order */
  int count = 0;
  for (int t = 0; t < net.num_tensors; t++) {
    const NetParam *p = &net.params[t];
    if (p->param_group != GAN_GROUP_GENERATOR) continue;
    char name[16];
    snprintf(name, sizeof name, "p%d", count++);
    const SafetensorsTensorInfo *ti = safetensors_find(r, name);
    int same = ti && ti->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = (int64_t)ti->shape[d] == p->shape[d];
    if (ti && !same) {
      rc = error_set(err, ERR_FORMAT, "%s: tensor %s does not have the shape of the generator's %s", in_path, name,
                     p->name);
      goto done;
    }
    float *values = NULL;
    if ((rc = dump_read_tensor(r, name, p->numel, &values, err))) {
      error_wrap(err, "%s: the generator's tensor %d is %s", in_path, count - 1, p->name);
      goto done;
    }
    memcpy(net.values + p->offset, values, p->numel * sizeof(float));
    free(values);
  }
  char extra[16];
  snprintf(extra, sizeof extra, "p%d", count);
  if (safetensors_find(r, extra)) {
    rc = error_set(err, ERR_FORMAT, "%s: more tensors (%s) than the generator's %d", in_path, extra, count);
    goto done;
  }
  if (!(out = malloc(image * sizeof *out))) {
    rc = error_set(err, ERR_NOMEM, "out of memory");
    goto done;
  }
  double content = 0;
  memset(net.grads, 0, net.num_values * sizeof(float));
  size_t direct = conv2d_direct_calls(), winograd = conv2d_winograd_calls();
  if ((rc = gan_generate(&net, blurred, n, out, err)) ||
      (rc = gan_generator_pass(&net, blurred, sharp, n, &content, err)))
    goto done;
  /* the passes that ran on the direct kernels and on Winograd */
  float paths[3] = {(float)(conv2d_direct_calls() - direct), (float)(conv2d_winograd_calls() - winograd),
                    (float)omp_get_max_threads()};
  if (!(w = safetensors_writer_new())) {
    rc = error_set(err, ERR_NOMEM, "out of memory for the writer");
    goto done;
  }
  int shape[4] = {n, c, h, wd}, one = 1;
  float content_f = (float)content;
  rc = safetensors_writer_add_f32(w, "out", 4, shape, out, err);
  int three = 3;
  if (!rc) rc = safetensors_writer_add_f32(w, "content", 1, &one, &content_f, err);
  if (!rc) rc = safetensors_writer_add_f32(w, "paths", 1, &three, paths, err);
  for (int t = 0, k = 0; !rc && t < net.num_tensors; t++) {
    const NetParam *p = &net.params[t];
    if (p->param_group != GAN_GROUP_GENERATOR) continue;
    int dims[8];
    for (int d = 0; d < p->ndim; d++) dims[d] = (int)p->shape[d];
    char name[16];
    snprintf(name, sizeof name, "g%d", k++);
    rc = safetensors_writer_add_f32(w, name, p->ndim, dims, net.grads + p->offset, err);
  }
  if (!rc) rc = safetensors_writer_write(w, out_path, err);
done:
  safetensors_writer_free(w);
  safetensors_close(r);
  cJSON_Delete(cfg_json);
  if (created) network_free(&net);
  free(blurred), free(sharp), free(out);
  conv2d_cache_clear();
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: gan_generator_dump IN.safetensors OUT.safetensors\n");
    return 2;
  }
  Error err = {0};
  int rc = run(argv[1], argv[2], &err);
  if (rc) {
    fprintf(stderr, "gan_generator_dump: %s\n", err.msg);
    return 1;
  }
  return 0;
}
