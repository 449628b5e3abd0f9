/* tropical_layers_dump: runs the tropical layer kinds of nets/
 * (nets/layer_tropical.h) on tensors from a file, for the PyTorch parity
 * test tests/torch_ref/tropical_layers.py.
 *
 *   tropical_layers_dump IN.safetensors OUT.safetensors
 *
 * kind "layer": metadata spec (the layer's JSON), batch, in_c, in_h, in_w;
 *   tensors x, dy, and the layer's parameters by suffix ("weight", "bias").
 *   OUT: y, dx and "d.<suffix>" for the loss sum(y * dy).
 * kind "network": metadata layers (a JSON array of tropical layer specs),
 *   batch, in_c, in_h, in_w, classes, steps, lr, weight_decay; tensors x,
 *   targets (class ids as floats), "layers.<i>.<suffix>" and head.weight
 *   [classes, features]. The network is the layers, then a linear head
 *   with softmax cross-entropy (kern/cross_entropy.h), loss the batch mean;
 *   `steps` AdamW updates (kern/adamw.h, betas 0.9/0.999, eps 1e-8, no
 *   decay on biases), each followed by the layers' after_update hooks.
 *   OUT: logits and "grad.<name>" of the first step, losses [steps], and
 *   "final.<name>" after the last update. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/safetensors.h"
#include "kern/adamw.h"
#include "kern/cross_entropy.h"
#include "kern/tropical.h"
#include "nets/layer_tropical.h"
#include "dump_util.h"

#define MAX_LAYERS 8

static int meta_double(const SafetensorsReader *r, const char *key, double *out, Error *err) {
  const char *v = safetensors_metadata_get(r, key);
  char *end;
  if (!v) return error_set(err, ERR_FORMAT, "%s: metadata '%s' is missing", safetensors_path(r), key);
  *out = strtod(v, &end);
  if (*end || end == v)
    return error_set(err, ERR_FORMAT, "%s: metadata '%s' is '%s', expected a number", safetensors_path(r), key, v);
  return 0;
}

/* A malloc'd copy of tensor `name` (count floats), or NULL with err set. */
static float *read_copy(const SafetensorsReader *r, const char *name, size_t count, Error *err) {
  float *p = NULL;
  if (dump_read_tensor(r, name, count, &p, err)) {
    free(p);
    return NULL;
  }
  return p;
}

static int create_layer(Layer *l, const cJSON *spec, LayerShape in, int max_batch, Error *err) {
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(spec, "type");
  const char *t = cJSON_IsString(type) ? type->valuestring : "";
  if (!strcmp(t, "tropical_conv2d")) return layer_create_tropical_conv2d(l, spec, in, max_batch, "spec", err);
  if (!strcmp(t, "maxplus")) return layer_create_maxplus(l, spec, in, max_batch, "spec", err);
  if (!strcmp(t, "minplus")) return layer_create_minplus(l, spec, in, max_batch, "spec", err);
  if (!strcmp(t, "standardize")) return layer_create_standardize(l, spec, in, max_batch, "spec", err);
  return error_set(err, ERR_CONFIG, "spec.type: '%s', expected a tropical kind", t);
}

/* The output file: tensors are copied in, since the writer keeps only
 * pointers until it writes. */
#define MAX_OUT 64
typedef struct Dump {
  SafetensorsWriter *w;
  float *copies[MAX_OUT];
  int count;
} Dump;

static int add(Dump *d, const char *name, int ndim, const int64_t *shape, const float *data, Error *err) {
  size_t numel = 1;
  for (int i = 0; i < ndim; i++) numel *= (size_t)shape[i];
  if (d->count == MAX_OUT) return error_set(err, ERR_INTERNAL, "more than %d output tensors", MAX_OUT);
  float *copy = malloc(numel * sizeof *copy);
  if (!copy) return error_set(err, ERR_NOMEM, "out of memory for '%s'", name);
  memcpy(copy, data, numel * sizeof *copy);
  d->copies[d->count++] = copy;
  return safetensors_writer_add(d->w, name, ST_F32, ndim, shape, copy, err);
}

typedef struct Net {
  int num_layers, batch, classes;
  Layer layers[MAX_LAYERS];
  float *acts[MAX_LAYERS + 1], *grads[MAX_LAYERS + 1]; /* acts[0] is the input */
  float *head, *dhead, *scratch, *logits;
  int *targets;
  size_t features;
} Net;

static size_t act_count(const Net *n, int i) {
  return (size_t)n->batch * layer_shape_numel(i == 0 ? n->layers[0].in : n->layers[i - 1].out);
}

/* One forward and backward; returns the mean loss in *loss. */
static int net_step(Net *n, double *loss, Error *err) {
  int rc = 0;
  for (int i = 0; i < n->num_layers && !rc; i++)
    rc = n->layers[i].ops->forward(&n->layers[i], n->acts[i], n->acts[i + 1], n->batch, 1, err);
  if (rc) return rc;
  const float *h = n->acts[n->num_layers];
  /* The logits themselves, for the comparison (the loss kernel keeps none). */
  for (int m = 0; m < n->batch; m++)
    for (int v = 0; v < n->classes; v++) {
      double s = 0.0;
      for (size_t c = 0; c < n->features; c++) s += (double)h[m * n->features + c] * n->head[v * n->features + c];
      n->logits[m * n->classes + v] = (float)s;
    }
  double loss_sum = 0.0;
  long count = 0;
  lmhead_xent(h, n->head, n->targets, n->batch, (int)n->features, n->classes, 1.0f / (float)n->batch, &loss_sum,
              &count, NULL, n->grads[n->num_layers], n->dhead, n->scratch, n->batch);
  *loss = loss_sum / (double)count;
  for (int i = n->num_layers - 1; i >= 0 && !rc; i--)
    rc = n->layers[i].ops->backward(&n->layers[i], n->acts[i], n->acts[i + 1], n->grads[i + 1],
                                    i ? n->grads[i] : NULL, n->batch, err);
  return rc;
}

static int run_network(const SafetensorsReader *r, Dump *out, Error *err) {
  Net n = {0};
  LayerShape in;
  int steps = 0, rc;
  double lr = 0, wd = 0;
  if ((rc = dump_meta_int(r, "batch", &n.batch, err)) || (rc = dump_meta_int(r, "in_c", &in.c, err)) ||
      (rc = dump_meta_int(r, "in_h", &in.h, err)) || (rc = dump_meta_int(r, "in_w", &in.w, err)) ||
      (rc = dump_meta_int(r, "classes", &n.classes, err)) || (rc = dump_meta_int(r, "steps", &steps, err)) ||
      (rc = meta_double(r, "lr", &lr, err)) || (rc = meta_double(r, "weight_decay", &wd, err)))
    return rc;
  cJSON *specs = cJSON_Parse(safetensors_metadata_get(r, "layers") ? safetensors_metadata_get(r, "layers") : "");
  if (!cJSON_IsArray(specs) || cJSON_GetArraySize(specs) > MAX_LAYERS || steps < 1) {
    cJSON_Delete(specs);
    return error_set(err, ERR_FORMAT, "metadata 'layers': expected a JSON array of up to %d specs", MAX_LAYERS);
  }
  /* Every parameter tensor with its AdamW moments, in order. */
  float *param[MAX_LAYERS * LAYER_MAX_PARAMS + 1], *grad[MAX_LAYERS * LAYER_MAX_PARAMS + 1];
  float *mom[MAX_LAYERS * LAYER_MAX_PARAMS + 1], *var[MAX_LAYERS * LAYER_MAX_PARAMS + 1];
  char names[MAX_LAYERS * LAYER_MAX_PARAMS + 1][48];
  const LayerParamSpec *pspec[MAX_LAYERS * LAYER_MAX_PARAMS + 1];
  int np = 0;
  LayerShape shape = in;
  const cJSON *spec;
  cJSON_ArrayForEach(spec, specs) {
    Layer *l = &n.layers[n.num_layers];
    if ((rc = create_layer(l, spec, shape, n.batch, err))) break;
    for (int p = 0; p < l->num_params && !rc; p++) {
      snprintf(names[np], sizeof names[np], "layers.%d.%s", n.num_layers, l->params[p].suffix);
      if (!(param[np] = read_copy(r, names[np], l->params[p].numel, err))) rc = ERR_FORMAT;
      grad[np] = calloc(l->params[p].numel, sizeof(float));
      mom[np] = calloc(l->params[p].numel, sizeof(float)), var[np] = calloc(l->params[p].numel, sizeof(float));
      l->param[p] = param[np], l->grad[p] = grad[np], pspec[np] = &l->params[p];
      np++;
    }
    n.num_layers++;
    shape = l->out;
    if (rc) break;
  }
  cJSON_Delete(specs);
  n.features = layer_shape_numel(shape);
  static LayerParamSpec head_spec = {.suffix = "head.weight", .ndim = 2};
  head_spec.shape[0] = n.classes, head_spec.shape[1] = (int64_t)n.features;
  head_spec.numel = (size_t)n.classes * n.features;
  if (!rc) {
    snprintf(names[np], sizeof names[np], "head.weight");
    if (!(n.head = param[np] = read_copy(r, "head.weight", head_spec.numel, err))) rc = ERR_FORMAT;
    n.dhead = grad[np] = calloc(head_spec.numel, sizeof(float));
    mom[np] = calloc(head_spec.numel, sizeof(float)), var[np] = calloc(head_spec.numel, sizeof(float));
    pspec[np++] = &head_spec;
  }
  float *x = rc ? NULL : read_copy(r, "x", (size_t)n.batch * layer_shape_numel(in), err);
  float *targets = x ? read_copy(r, "targets", (size_t)n.batch, err) : NULL;
  if (!rc && (!x || !targets)) rc = ERR_FORMAT;
  n.acts[0] = x;
  for (int i = 1; i <= n.num_layers && !rc; i++)
    n.acts[i] = calloc(act_count(&n, i), sizeof(float)), n.grads[i] = calloc(act_count(&n, i), sizeof(float));
  n.scratch = calloc((size_t)n.batch * n.classes, sizeof(float));
  n.logits = calloc((size_t)n.batch * n.classes, sizeof(float));
  n.targets = calloc((size_t)n.batch, sizeof(int));
  for (int m = 0; !rc && m < n.batch; m++) n.targets[m] = (int)targets[m];
  float *losses = calloc((size_t)steps, sizeof(float));
  AdamWHyper hyper = {.lr = (float)lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
  for (int t = 1; t <= steps && !rc; t++) {
    for (int p = 0; p < np; p++) memset(grad[p], 0, pspec[p]->numel * sizeof(float));
    double loss = 0;
    if ((rc = net_step(&n, &loss, err))) break;
    losses[t - 1] = (float)loss;
    if (t == 1) {
      int64_t ls[2] = {n.batch, n.classes};
      rc = add(out, "logits", 2, ls, n.logits, err);
      for (int p = 0; p < np && !rc; p++) {
        char name[64];
        snprintf(name, sizeof name, "grad.%.47s", names[p]);
        rc = add(out, name, pspec[p]->ndim, pspec[p]->shape, grad[p], err);
      }
    }
    for (int p = 0; p < np; p++) {
      hyper.weight_decay = pspec[p]->no_weight_decay ? 0.0f : (float)wd;
      adamw_update(param[p], grad[p], mom[p], var[p], pspec[p]->numel, t, &hyper, 1.0f);
    }
    for (int i = 0; i < n.num_layers; i++)
      if (n.layers[i].ops->after_update) n.layers[i].ops->after_update(&n.layers[i]);
  }
  int64_t steps64[1] = {steps};
  if (!rc) rc = add(out, "losses", 1, steps64, losses, err);
  for (int p = 0; p < np && !rc; p++) {
    char name[64];
    snprintf(name, sizeof name, "final.%.47s", names[p]);
    rc = add(out, name, pspec[p]->ndim, pspec[p]->shape, param[p], err);
  }
  for (int p = 0; p < np; p++) free(param[p]), free(grad[p]), free(mom[p]), free(var[p]);
  for (int i = 0; i < n.num_layers; i++) n.layers[i].ops->free(&n.layers[i]);
  for (int i = 1; i <= n.num_layers; i++) free(n.acts[i]), free(n.grads[i]);
  free(x), free(targets), free(losses), free(n.scratch), free(n.logits), free(n.targets);
  return rc;
}

static int run_layer(const SafetensorsReader *r, Dump *out, Error *err) {
  LayerShape in;
  int batch = 0, rc;
  if ((rc = dump_meta_int(r, "batch", &batch, err)) || (rc = dump_meta_int(r, "in_c", &in.c, err)) ||
      (rc = dump_meta_int(r, "in_h", &in.h, err)) || (rc = dump_meta_int(r, "in_w", &in.w, err)))
    return rc;
  const char *text = safetensors_metadata_get(r, "spec");
  cJSON *spec = text ? cJSON_Parse(text) : NULL;
  if (!spec) return error_set(err, ERR_FORMAT, "metadata 'spec': expected a layer's JSON object");
  Layer l;
  rc = create_layer(&l, spec, in, batch, err);
  cJSON_Delete(spec);
  if (rc) return rc;
  size_t nx = (size_t)batch * layer_shape_numel(in), ny = (size_t)batch * layer_shape_numel(l.out);
  float *x = read_copy(r, "x", nx, err), *dy = x ? read_copy(r, "dy", ny, err) : NULL;
  float *y = calloc(ny, sizeof *y), *dx = calloc(nx, sizeof *dx);
  if (!x || !dy) rc = ERR_FORMAT;
  for (int p = 0; p < l.num_params && !rc; p++) {
    if (!(l.param[p] = read_copy(r, l.params[p].suffix, l.params[p].numel, err))) rc = ERR_FORMAT;
    l.grad[p] = calloc(l.params[p].numel, sizeof(float));
  }
  if (!rc) rc = l.ops->forward(&l, x, y, batch, 1, err);
  if (!rc) rc = l.ops->backward(&l, x, y, dy, dx, batch, err);
  int64_t ys[4] = {batch, l.out.c, l.out.h, l.out.w}, xs[4] = {batch, in.c, in.h, in.w};
  if (!rc) rc = add(out, "y", 4, ys, y, err);
  if (!rc) rc = add(out, "dx", 4, xs, dx, err);
  for (int p = 0; p < l.num_params && !rc; p++) {
    char name[64];
    snprintf(name, sizeof name, "d.%s", l.params[p].suffix);
    rc = add(out, name, l.params[p].ndim, l.params[p].shape, l.grad[p], err);
  }
  for (int p = 0; p < l.num_params; p++) free(l.param[p]), free(l.grad[p]);
  l.ops->free(&l);
  free(x), free(dy), free(y), free(dx);
  return rc;
}

static int run(const char *in_path, const char *out_path, Error *err) {
  SafetensorsReader *r = NULL;
  int rc = safetensors_open(&r, in_path, err);
  if (rc) return rc;
  Dump out = {.w = safetensors_writer_new()};
  const char *kind = safetensors_metadata_get(r, "kind");
  if (!out.w) rc = error_set(err, ERR_NOMEM, "out of memory for the writer");
  else if (kind && !strcmp(kind, "layer")) rc = run_layer(r, &out, err);
  else if (kind && !strcmp(kind, "network")) rc = run_network(r, &out, err);
  else rc = error_set(err, ERR_FORMAT, "%s: metadata 'kind' is '%s', expected layer or network", in_path,
                      kind ? kind : "(missing)");
  if (!rc) rc = safetensors_writer_write(out.w, out_path, err);
  safetensors_writer_free(out.w);
  for (int i = 0; i < out.count; i++) free(out.copies[i]);
  safetensors_close(r);
  tropical_scratch_release();
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: tropical_layers_dump IN.safetensors OUT.safetensors\n");
    return 2;
  }
  Error err = {0};
  int rc = run(argv[1], argv[2], &err);
  if (rc) {
    fprintf(stderr, "tropical_layers_dump: %s\n", err.msg[0] ? err.msg : "failed");
    return 1;
  }
  return 0;
}
