/* The vision network (nets/vision.h): the layer list, its buffers, the
 * softmax cross-entropy loss and the interface's operations. */
#include "nets/vision.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32.h"
#include "base/json_util.h"
#include "kern/op_count.h"
#include "nets/layer.h"
#include "nets/layer_spec.h"
#include "nets/layer_util.h"

#define ORIGIN_MAX 4200

typedef struct Vision {
  VisionConfig cfg;
  int num_layers, max_batch, eval;
  Layer layers[VISION_MAX_LAYERS];
  float *acts[VISION_MAX_LAYERS]; /* each layer's output, [max_batch, out numel] */
  float *delta, *delta_prev;      /* gradients flowing back, [max_batch, widest] */
  float *probs;                   /* softmax of the logits */
  int last_n;
  double last_loss, last_accuracy;
  char names[VISION_MAX_LAYERS * LAYER_MAX_PARAMS][40];
} Vision;

/* ---- config ---- */

static void free_layers(Layer *layers, int n) {
  for (int i = 0; i < n; i++) layer_free(&layers[i]);
}

/* Builds every layer of cfg on its input shape, for max_batch samples, and
 * checks that the last one yields the logits; *built layers to free. */
static int build_layers(const VisionConfig *cfg, int max_batch, Layer *layers, int *built, const char *origin,
                        Error *err) {
  *built = 0;
  cJSON *list = cJSON_Parse(cfg->layers_json);
  if (!cJSON_IsArray(list)) {
    cJSON_Delete(list);
    return error_set(err, ERR_CONFIG, "%s: model.layers: expected an array of layer objects", origin);
  }
  LayerShape shape = {cfg->in_c, cfg->in_h, cfg->in_w};
  int rc = 0;
  const cJSON *spec;
  cJSON_ArrayForEach(spec, list) {
    char where[ORIGIN_MAX];
    snprintf(where, sizeof where, "%s: model.layers[%d]", origin, *built);
    if ((rc = layer_create(&layers[*built], spec, shape, max_batch, where, err))) break;
    shape = layers[(*built)++].out;
  }
  if (!rc && layer_shape_numel(shape) != (size_t)cfg->classes)
    rc = error_set(err, ERR_CONFIG, "%s: model.layers[%d]: the last layer yields %d x %d x %d = %zu values per image, "
                   "expected the %d classes (model.classes)", origin, *built - 1, shape.c, shape.h, shape.w,
                   layer_shape_numel(shape), cfg->classes);
  cJSON_Delete(list);
  return rc;
}

int vision_config_from_json(VisionConfig *cfg, const cJSON *obj, const char *origin, Error *err) {
  static const char *const FIELDS[] = {"family", "input", "classes", "layers"};
  memset(cfg, 0, sizeof *cfg);
  for (const cJSON *f = obj->child; f; f = f->next) {
    int known = 0;
    for (size_t k = 0; k < sizeof FIELDS / sizeof FIELDS[0]; k++) known |= !strcmp(f->string, FIELDS[k]);
    if (!known)
      return error_set(err, ERR_CONFIG, "%s: model.%s: unknown field of a vision network (expected family, input, "
                       "classes, layers)", origin, f->string);
  }
  const cJSON *input = cJSON_GetObjectItemCaseSensitive(obj, "input");
  if (!cJSON_IsArray(input) || cJSON_GetArraySize(input) != 3)
    return error_set(err, ERR_CONFIG, "%s: model.input: expected [channels, height, width], got %s", origin,
                     cJSON_IsArray(input) ? "an array of another length" : input ? json_type_name(input)
                                                                                 : "nothing (the field is required)");
  int *dims[3] = {&cfg->in_c, &cfg->in_h, &cfg->in_w};
  for (int d = 0; d < 3; d++) {
    const cJSON *v = cJSON_GetArrayItem(input, d);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 || v->valuedouble > 16384)
      return error_set(err, ERR_CONFIG, "%s: model.input[%d]: expected an integer in 1..16384", origin, d);
    *dims[d] = (int)v->valuedouble;
  }
  char where[ORIGIN_MAX];
  snprintf(where, sizeof where, "%s: model", origin);
  int rc = layer_spec_int(obj, "classes", 1, 0, 2, 1 << 16, &cfg->classes, where, err);
  if (rc) return rc;
  const cJSON *layers = cJSON_GetObjectItemCaseSensitive(obj, "layers");
  int count = cJSON_GetArraySize(layers);
  if (!cJSON_IsArray(layers) || count < 1 || count > VISION_MAX_LAYERS)
    return error_set(err, ERR_CONFIG, "%s: model.layers: expected an array of 1..%d layer objects (types: %s), got %s",
                     origin, VISION_MAX_LAYERS, layer_kinds(), cJSON_IsArray(layers) ? "an array of another length"
                     : layers ? json_type_name(layers) : "nothing (the field is required)");
  char *text = cJSON_PrintUnformatted(layers);
  if (!text) return error_set(err, ERR_NOMEM, "out of memory");
  size_t len = strlen(text);
  if (len >= sizeof cfg->layers_json) {
    free(text);
    return error_set(err, ERR_CONFIG, "%s: model.layers: %zu bytes of JSON, expected at most %zu", origin, len,
                     sizeof cfg->layers_json - 1);
  }
  memcpy(cfg->layers_json, text, len + 1);
  free(text);
  cfg->num_layers = count;
  Layer probe[VISION_MAX_LAYERS];
  int built;
  rc = build_layers(cfg, 1, probe, &built, origin, err);
  free_layers(probe, built);
  return rc;
}

cJSON *vision_config_to_json(const VisionConfig *cfg) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "family", "vision");
  int input[3] = {cfg->in_c, cfg->in_h, cfg->in_w};
  cJSON_AddItemToObject(o, "input", cJSON_CreateIntArray(input, 3));
  cJSON_AddNumberToObject(o, "classes", cfg->classes);
  cJSON_AddItemToObject(o, "layers", cJSON_Parse(cfg->layers_json));
  return o;
}

void vision_config_fingerprint(const VisionConfig *cfg, char *out, size_t n) {
  cJSON *j = vision_config_to_json(cfg);
  char *text = j ? cJSON_PrintUnformatted(j) : NULL;
  uint32_t crc = text ? crc32_update(0, text, strlen(text)) : 0;
  snprintf(out, n, "crc32:%08x", (unsigned)crc);
  free(text);
  cJSON_Delete(j);
}

void vision_config_summary(const VisionConfig *cfg, char *out, size_t n) {
  snprintf(out, n, "input %dx%dx%d, %d layers, %d classes", cfg->in_c, cfg->in_h, cfg->in_w, cfg->num_layers,
           cfg->classes);
}

/* ---- forward, backward, loss ---- */

static int check_batch(const Vision *v, int chunk, const VisionBatch *b, Error *err) {
  if (chunk != 0) return error_set(err, ERR_ARG, "vision: chunk %d requested, the network is one chunk", chunk);
  if (b->n < 1 || b->n > v->max_batch)
    return error_set(err, ERR_ARG, "vision: a micro-batch of %d images, expected 1..%d", b->n, v->max_batch);
  return 0;
}

/* Mean softmax cross-entropy over the batch, with the largest logit
 * subtracted before exp; probabilities kept for backward. */
static void softmax_cross_entropy(Vision *v, const float *logits, const int *labels, int n) {
  int classes = v->cfg.classes, right = 0;
  double loss = 0;
  for (int s = 0; s < n; s++) {
    const float *z = logits + (size_t)s * classes;
    float *p = v->probs + (size_t)s * classes;
    int best = 0;
    for (int c = 1; c < classes; c++)
      if (z[c] > z[best]) best = c;
    double sum = 0;
    for (int c = 0; c < classes; c++) sum += exp((double)z[c] - z[best]);
    for (int c = 0; c < classes; c++) p[c] = (float)(exp((double)z[c] - z[best]) / sum);
    loss += log(sum) - ((double)z[labels[s]] - z[best]);
    right += best == labels[s];
  }
  v->last_n = n;
  v->last_loss = loss / n;
  v->last_accuracy = (double)right / n;
}

static int vision_forward(Network *net, int chunk, const void *batch, Error *err) {
  Vision *v = net->impl;
  const VisionBatch *b = batch;
  int rc = check_batch(v, chunk, b, err);
  for (int c = 0; c < b->n && !rc; c++)
    if (b->y[c] < 0 || b->y[c] >= v->cfg.classes)
      rc = error_set(err, ERR_ARG, "vision: label %d of image %d, expected 0..%d", b->y[c], c, v->cfg.classes - 1);
  const float *in = b->x;
  for (int i = 0; i < v->num_layers && !rc; i++) {
    Layer *l = &v->layers[i];
    if ((rc = l->ops->forward(l, in, v->acts[i], b->n, !v->eval, err)))
      error_wrap(err, "vision: layers[%d] (%s) forward", i, l->ops->kind);
    in = v->acts[i];
  }
  if (!rc) softmax_cross_entropy(v, v->acts[v->num_layers - 1], b->y, b->n);
  return rc;
}

static int vision_backward(Network *net, int chunk, const void *batch, float loss_scale, Error *err) {
  Vision *v = net->impl;
  const VisionBatch *b = batch;
  int rc = check_batch(v, chunk, b, err);
  if (rc) return rc;
  if (v->last_n != b->n || v->eval)
    return error_set(err, ERR_ARG, "vision: backward without the training forward of this micro-batch");
  int n = b->n, classes = v->cfg.classes;
  float scale = loss_scale / (float)n;
  for (int s = 0; s < n; s++)
    for (int c = 0; c < classes; c++) {
      size_t k = (size_t)s * classes + c;
      v->delta[k] = (v->probs[k] - (c == b->y[s] ? 1.0f : 0.0f)) * scale;
    }
  for (int i = v->num_layers - 1; i >= 0 && !rc; i--) {
    Layer *l = &v->layers[i];
    const float *x = i > 0 ? v->acts[i - 1] : b->x;
    float *dx = i > 0 ? v->delta_prev : NULL;
    if ((rc = l->ops->backward(l, x, v->acts[i], v->delta, dx, n, err)))
      return error_wrap(err, "vision: layers[%d] (%s) backward", i, l->ops->kind);
    float *t = v->delta;
    v->delta = v->delta_prev;
    v->delta_prev = t;
  }
  return rc;
}

static int vision_metrics(const Network *net, NetMetric *metrics, int cap) {
  const Vision *v = net->impl;
  if (cap >= 1) metrics[0] = (NetMetric){"loss", v->last_loss, 3};
  if (cap >= 2) metrics[1] = (NetMetric){"accuracy", v->last_accuracy, 3};
  return 2;
}

static void vision_after_update(Network *net, int param_group) {
  (void)param_group;
  Vision *v = net->impl;
  for (int i = 0; i < v->num_layers; i++)
    if (v->layers[i].ops->after_update) v->layers[i].ops->after_update(&v->layers[i]);
}

static void vision_free(Network *net) {
  Vision *v = net->impl;
  if (!v) return;
  for (int i = 0; i < v->num_layers; i++) free(v->acts[i]);
  free_layers(v->layers, v->num_layers);
  free(v->delta);
  free(v->delta_prev);
  free(v->probs);
  free(net->values);
  free(net->grads);
  free(v);
}

static const NetworkOps VISION_OPS = {.family = "vision",
                                      .forward = vision_forward,
                                      .backward = vision_backward,
                                      .metrics = vision_metrics,
                                      .unit = {"image", "images", "img/s"},
                                      .after_update = vision_after_update,
                                      .free = vision_free};

/* The table over the layers' tensors and the bindings into the buffers. */
static int lay_out_params(Network *net, Vision *v) {
  int tensors = 0;
  size_t values = layer_param_floats(v->layers, v->num_layers, &tensors);
  net->num_tensors = tensors;
  net->num_values = values;
  net->params = calloc(tensors ? (size_t)tensors : 1, sizeof *net->params);
  net->values = calloc(values ? values : 1, sizeof(float));
  net->grads = calloc(values ? values : 1, sizeof(float));
  if (!net->params || !net->values || !net->grads) return ERR_NOMEM;
  size_t offset = 0;
  int k = 0;
  for (int i = 0; i < v->num_layers; i++) {
    Layer *l = &v->layers[i];
    for (int t = 0; t < l->num_params; t++, k++) {
      snprintf(v->names[k], sizeof v->names[k], "layers.%d.%s", i, l->params[t].suffix);
      layer_bind_param(l, t, &net->params[k], v->names[k], net->values, net->grads, offset);
      offset += l->params[t].numel;
    }
  }
  return 0;
}

int vision_create(Network *net, const VisionConfig *cfg, int max_batch, Error *err) {
  memset(net, 0, sizeof *net);
  if (max_batch < 1) return error_set(err, ERR_ARG, "vision: micro-batch size %d, expected >= 1", max_batch);
  Vision *v = calloc(1, sizeof *v);
  if (!v) return error_set(err, ERR_NOMEM, "out of memory for the vision network");
  v->cfg = *cfg;
  v->max_batch = max_batch;
  net->ops = &VISION_OPS;
  net->impl = v;
  net->num_param_groups = 1;
  net->num_chunks = 1;
  int rc = build_layers(cfg, max_batch, v->layers, &v->num_layers, "vision", err);
  if (rc) {
    network_free(net);
    return rc;
  }
  size_t widest = (size_t)cfg->classes;
  for (int i = 0; i < v->num_layers; i++) {
    size_t in = layer_shape_numel(v->layers[i].in), out = layer_shape_numel(v->layers[i].out);
    widest = in > widest ? in : widest;
    widest = out > widest ? out : widest;
  }
  int ok = lay_out_params(net, v) == 0;
  for (int i = 0; i < v->num_layers && ok; i++)
    ok = (v->acts[i] = malloc((size_t)max_batch * layer_shape_numel(v->layers[i].out) * sizeof(float))) != NULL;
  ok = ok && (v->delta = malloc((size_t)max_batch * widest * sizeof(float))) &&
       (v->delta_prev = malloc((size_t)max_batch * widest * sizeof(float))) &&
       (v->probs = malloc((size_t)max_batch * cfg->classes * sizeof(float)));
  if (!ok) {
    network_free(net);
    return error_set(err, ERR_NOMEM, "out of memory for the vision network's buffers");
  }
  /* 2 FLOP per multiply-add, forward and the two backward products; 0 for
   * a purely tropical network, which then shows no MFU */
  net->flops_per_unit = 6.0 * vision_mults_per_sample(net);
  return 0;
}

void vision_init_weights(Network *net, uint64_t seed) {
  Vision *v = net->impl;
  for (int i = 0; i < v->num_layers; i++) v->layers[i].ops->init(&v->layers[i], seed, (uint64_t)i);
}

void vision_set_eval(Network *net, int eval) { ((Vision *)net->impl)->eval = eval; }

const float *vision_probabilities(const Network *net) { return ((const Vision *)net->impl)->probs; }

const Layer *vision_layers(const Network *net, int *count) {
  const Vision *v = net->impl;
  *count = v->num_layers;
  return v->layers;
}

double vision_mults_per_sample(const Network *net) {
  const Vision *v = net->impl;
  double sum = 0;
  for (int i = 0; i < v->num_layers; i++) sum += v->layers[i].mults_per_sample;
  return sum;
}

int vision_count_mults(Network *net, const VisionBatch *b, int train, double *per_image, Error *err) {
  Vision *v = net->impl;
  int eval = v->eval;
  v->eval = !train;
  op_count_begin();
  int rc = net->ops->forward(net, 0, b, err);
  double counted = op_count_end();
  v->eval = eval;
  if (rc) return error_wrap(err, "vision: the counted forward");
  *per_image = counted / b->n;
  return 0;
}

double vision_adds_per_sample(const Network *net) {
  const Vision *v = net->impl;
  double sum = 0;
  for (int i = 0; i < v->num_layers; i++) sum += v->layers[i].adds_per_sample;
  return sum;
}

void vision_describe(const Network *net, char *buf, size_t cap) {
  const Vision *v = net->impl;
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < v->num_layers && at < cap; i++) {
    const Layer *l = &v->layers[i];
    int n = snprintf(buf + at, cap - at, "%s%s %dx%dx%d", i ? " -> " : "", l->ops->kind, l->out.c, l->out.h,
                     l->out.w);
    at += n > 0 ? (size_t)n : 0;
  }
}
