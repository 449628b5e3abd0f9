/* gan_penalty_dump: WGAN-GP's critic loss of the deblurring GAN
 * (nets/gan.h, gan_wgan_gp_critic_loss) on tensors from a file, for the
 * PyTorch parity test of the gradient penalty (tests/torch_ref/gan_penalty.py).
 *
 *   gan_penalty_dump IN.safetensors OUT.safetensors
 *
 * IN holds real and fake [N, C, H, W], eps [N] and every critic parameter
 * under its checkpoint name (critic.layers.<i>.weight / .bias, PyTorch's
 * shapes), and as metadata "critic" (the model.critic JSON object) and
 * "gp_weight". OUT receives gp, wasserstein (mean D(fake) - mean D(real))
 * and loss (their sum), each [1], and per critic parameter NAME the
 * gradient of the penalty alone (gp_grad.NAME) and of the whole critic
 * loss (loss_grad.NAME). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/safetensors.h"
#include "dump_util.h"
#include "kern/conv2d.h"
#include "nets/gan.h"

static int build(const SafetensorsReader *r, const char *path, int n, int c, int h, int w, Network *net, Error *err) {
  const char *critic = safetensors_metadata_get(r, "critic"), *gp_weight = safetensors_metadata_get(r, "gp_weight");
  if (!critic || !gp_weight) return error_set(err, ERR_FORMAT, "%s: expected metadata 'critic' and 'gp_weight'", path);
  char json[1024];
  snprintf(json, sizeof json, "{\"family\":\"gan\",\"channels\":%d,\"loss\":\"wgan-gp\",\"gp_weight\":%s,\"critic\":%s,"
           "\"generator\":{\"filters\":2,\"blocks\":0,\"downsamples\":0}}", c, gp_weight, critic);
  cJSON *obj = cJSON_Parse(json);
  if (!obj) return error_set(err, ERR_FORMAT, "%s: metadata does not make a JSON model: %s", path, json);
  GanConfig cfg;
  int rc = gan_config_from_json(&cfg, obj, path, err);
  cJSON_Delete(obj);
  if (!rc) rc = gan_create(net, &cfg, h, w, n, err);
  if (!rc) gan_init_weights(net, 1);
  for (int t = 0; !rc && t < net->num_tensors; t++) {
    const NetParam *p = &net->params[t];
    if (p->param_group != GAN_GROUP_CRITIC) continue;
    float *values = NULL;
    rc = dump_read_tensor(r, p->name, p->numel, &values, err);
    if (!rc) memcpy(net->values + p->offset, values, p->numel * sizeof(float));
    free(values);
  }
  return rc;
}

/* The critic's tensors of grads (a copy of net->grads: the writer keeps the pointers). */
static int add_grads(SafetensorsWriter *out, const Network *net, const float *grads, const char *prefix, Error *err) {
  int rc = 0;
  for (int t = 0; !rc && t < net->num_tensors; t++) {
    const NetParam *p = &net->params[t];
    if (p->param_group != GAN_GROUP_CRITIC) continue;
    char name[160];
    int shape[NET_MAX_DIMS];
    for (int d = 0; d < p->ndim; d++) shape[d] = (int)p->shape[d];
    snprintf(name, sizeof name, "%s.%s", prefix, p->name);
    rc = safetensors_writer_add_f32(out, name, p->ndim, shape, grads + p->offset, err);
  }
  return rc;
}

static int run(const char *in_path, const char *out_path, Error *err) {
  SafetensorsReader *r = NULL;
  int rc = safetensors_open(&r, in_path, err);
  if (rc) return rc;
  const SafetensorsTensorInfo *xi = safetensors_find(r, "real");
  Network net = {0};
  float *real = NULL, *fake = NULL, *eps = NULL, *gp_grads = NULL;
  if (!xi || xi->ndim != 4) {
    rc = error_set(err, ERR_FORMAT, "%s: expected a 4-D tensor 'real'", in_path);
  } else {
    int n = (int)xi->shape[0], c = (int)xi->shape[1], h = (int)xi->shape[2], w = (int)xi->shape[3];
    size_t count = (size_t)n * c * h * w;
    rc = build(r, in_path, n, c, h, w, &net, err);
    if (!rc) rc = dump_read_tensor(r, "real", count, &real, err);
    if (!rc) rc = dump_read_tensor(r, "fake", count, &fake, err);
    if (!rc) rc = dump_read_tensor(r, "eps", (size_t)n, &eps, err);
    double gp = 0, wass = 0, loss_gp = 0;
    SafetensorsWriter *out = rc ? NULL : safetensors_writer_new();
    if (!rc && !out) rc = error_set(err, ERR_NOMEM, "out of memory for the writer");
    if (!rc) rc = gan_wgan_gp_critic_loss(&net, real, fake, eps, n, 0.0, &gp, &wass, err);
    if (!rc && !(gp_grads = malloc(net.num_values * sizeof(float)))) rc = error_set(err, ERR_NOMEM, "out of memory");
    if (!rc) memcpy(gp_grads, net.grads, net.num_values * sizeof(float));
    if (!rc) rc = add_grads(out, &net, gp_grads, "gp_grad", err);
    if (!rc) {
      memset(net.grads, 0, net.num_values * sizeof(float));
      rc = gan_wgan_gp_critic_loss(&net, real, fake, eps, n, 1.0, &loss_gp, &wass, err);
    }
    if (!rc) rc = add_grads(out, &net, net.grads, "loss_grad", err);
    float scalars[3] = {(float)gp, (float)wass, (float)(wass + loss_gp)};
    static const char *const NAMES[3] = {"gp", "wasserstein", "loss"};
    for (int k = 0; k < 3 && !rc; k++) rc = safetensors_writer_add_f32(out, NAMES[k], 1, (const int[]){1}, &scalars[k], err);
    if (!rc) rc = safetensors_writer_write(out, out_path, err);
    safetensors_writer_free(out);
  }
  safetensors_close(r);
  network_free(&net);
  free(real), free(fake), free(eps), free(gp_grads);
  conv2d_cache_clear();
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: gan_penalty_dump IN.safetensors OUT.safetensors\n");
    return 2;
  }
  Error err = {0};
  int rc = run(argv[1], argv[2], &err);
  if (rc) {
    fprintf(stderr, "gan_penalty_dump: %s\n", err.msg);
    return 1;
  }
  return 0;
}
