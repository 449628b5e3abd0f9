/* The MLP classifier: config, parameter table, forward, backward, metrics
 * and the synthetic task (see mlp.h). Plain loops in a fixed order: the
 * network is small, and the same order on every rank keeps runs exact. */
#include "nets/mlp.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_util.h"
#include "base/rng.h"

#define MLP_MAX_LAYERS (MLP_MAX_HIDDEN + 1)

typedef struct Mlp {
  MlpConfig cfg;
  int num_layers;
  int fan_in[MLP_MAX_LAYERS], fan_out[MLP_MAX_LAYERS];
  int max_batch, width; /* widest layer */
  float *acts[MLP_MAX_LAYERS]; /* outputs of each layer: tanh for hidden ones, logits for the last */
  float *probs;                /* softmax of the logits */
  float *delta, *delta_prev;   /* [max_batch, width] */
  int last_n;
  double last_loss, last_accuracy;
  int phase; /* the group whose phase runs (begin_phase), -1: all groups' gradients */
  char names[2 * MLP_MAX_LAYERS][32];
} Mlp;

/* ---- config ---- */

static int json_int(const cJSON *obj, const char *key, int lo, int hi, int *out, const char *origin, Error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
    return error_set(err, ERR_CONFIG, "%s: model.%s: expected an integer in %d..%d, got %s", origin, key, lo, hi,
                     cJSON_IsNumber(v) ? "a number out of range" : json_type_name(v));
  *out = (int)v->valuedouble;
  return 0;
}

int mlp_config_from_json(MlpConfig *cfg, const cJSON *obj, const char *origin, Error *err) {
  static const char *const FIELDS[] = {"family", "inputs", "hidden", "classes", "param_groups"};
  memset(cfg, 0, sizeof *cfg);
  for (const cJSON *f = obj->child; f; f = f->next) {
    int known = 0;
    for (size_t k = 0; k < sizeof FIELDS / sizeof FIELDS[0]; k++) known |= !strcmp(f->string, FIELDS[k]);
    if (!known)
      return error_set(err, ERR_CONFIG, "%s: model.%s: unknown field of an mlp (expected family, inputs, hidden, "
                       "classes, param_groups)", origin, f->string);
  }
  int rc = json_int(obj, "inputs", 1, MLP_MAX_WIDTH, &cfg->inputs, origin, err);
  if (!rc) rc = json_int(obj, "classes", 2, MLP_MAX_WIDTH, &cfg->classes, origin, err);
  if (rc) return rc;
  const cJSON *hidden = cJSON_GetObjectItemCaseSensitive(obj, "hidden");
  if (!cJSON_IsArray(hidden) || cJSON_GetArraySize(hidden) > MLP_MAX_HIDDEN)
    return error_set(err, ERR_CONFIG, "%s: model.hidden: expected an array of up to %d layer widths, got %s", origin,
                     MLP_MAX_HIDDEN, cJSON_IsArray(hidden) ? "a longer array" : json_type_name(hidden));
  const cJSON *w;
  cJSON_ArrayForEach(w, hidden) {
    if (!cJSON_IsNumber(w) || w->valuedouble != floor(w->valuedouble) || w->valuedouble < 1 ||
        w->valuedouble > MLP_MAX_WIDTH)
      return error_set(err, ERR_CONFIG, "%s: model.hidden[%d]: expected a width in 1..%d", origin, cfg->num_hidden,
                       MLP_MAX_WIDTH);
    cfg->hidden[cfg->num_hidden++] = (int)w->valuedouble;
  }
  cfg->param_groups = 1;
  if (cJSON_GetObjectItemCaseSensitive(obj, "param_groups"))
    return json_int(obj, "param_groups", 1, cfg->num_hidden + 1, &cfg->param_groups, origin, err);
  return 0;
}

cJSON *mlp_config_to_json(const MlpConfig *cfg) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "family", "mlp");
  cJSON_AddNumberToObject(o, "inputs", cfg->inputs);
  cJSON_AddItemToObject(o, "hidden", cJSON_CreateIntArray(cfg->hidden, cfg->num_hidden));
  cJSON_AddNumberToObject(o, "classes", cfg->classes);
  if (cfg->param_groups > 1) cJSON_AddNumberToObject(o, "param_groups", cfg->param_groups);
  return o;
}

static int layer_sizes(const MlpConfig *cfg, int *fan_in, int *fan_out) {
  int n = cfg->num_hidden + 1, prev = cfg->inputs;
  for (int l = 0; l < n; l++) {
    fan_in[l] = prev;
    fan_out[l] = l < cfg->num_hidden ? cfg->hidden[l] : cfg->classes;
    prev = fan_out[l];
  }
  return n;
}

size_t mlp_num_params(const MlpConfig *cfg) {
  int fi[MLP_MAX_LAYERS], fo[MLP_MAX_LAYERS];
  int n = layer_sizes(cfg, fi, fo);
  size_t total = 0;
  for (int l = 0; l < n; l++) total += (size_t)fo[l] * fi[l] + (size_t)fo[l];
  return total;
}

double mlp_flops_per_sample(const MlpConfig *cfg) {
  int fi[MLP_MAX_LAYERS], fo[MLP_MAX_LAYERS];
  int n = layer_sizes(cfg, fi, fo);
  double macs = 0;
  for (int l = 0; l < n; l++) macs += (double)fi[l] * fo[l];
  return 6.0 * macs; /* forward 2, backward 4 (inputs and weights) */
}

/* ---- the synthetic task ---- */

enum { STREAM_FEATURES = 0x6d6c7000, STREAM_TEACHER, STREAM_WEIGHTS };

void mlp_synthetic_batch(const MlpConfig *cfg, uint64_t seed, uint64_t first, int n, MlpBatch *batch) {
  int in = cfg->inputs, classes = cfg->classes;
  batch->n = n;
  for (int s = 0; s < n; s++) {
    uint64_t sample = first + (uint64_t)s;
    float *x = batch->x + (size_t)s * in;
    for (int i = 0; i < in; i++) x[i] = (float)rng_normal(seed, STREAM_FEATURES, sample * (uint64_t)in + (uint64_t)i);
    int best = 0;
    double best_score = -INFINITY;
    for (int c = 0; c < classes; c++) {
      double score = 0;
      for (int i = 0; i < in; i++)
        score += rng_normal(seed, STREAM_TEACHER, (uint64_t)c * (uint64_t)in + (uint64_t)i) * x[i];
      if (score > best_score) best_score = score, best = c;
    }
    batch->y[s] = best;
  }
}

/* ---- forward, backward ---- */

static const float *layer_weight(const Network *net, int l) { return net->values + net->params[2 * l].offset; }
static const float *layer_bias(const Network *net, int l) { return net->values + net->params[2 * l + 1].offset; }

static int check_batch(const Mlp *m, int chunk, const MlpBatch *b, Error *err) {
  if (chunk != 0) return error_set(err, ERR_ARG, "mlp: chunk %d requested, the network is one chunk", chunk);
  if (b->n < 1 || b->n > m->max_batch)
    return error_set(err, ERR_ARG, "mlp: a micro-batch of %d samples, expected 1..%d", b->n, m->max_batch);
  return 0;
}

static int mlp_forward(Network *net, int chunk, const void *batch_ptr, Error *err) {
  Mlp *m = net->impl;
  const MlpBatch *b = batch_ptr;
  int rc = check_batch(m, chunk, b, err);
  if (rc) return rc;
  int n = b->n;
  const float *in = b->x;
  for (int l = 0; l < m->num_layers; l++) {
    const float *w = layer_weight(net, l), *bias = layer_bias(net, l);
    int fi = m->fan_in[l], fo = m->fan_out[l], hidden = l + 1 < m->num_layers;
    float *out = m->acts[l];
    for (int s = 0; s < n; s++)
      for (int o = 0; o < fo; o++) {
        float z = bias[o];
        for (int i = 0; i < fi; i++) z += w[(size_t)o * fi + i] * in[(size_t)s * fi + i];
        out[(size_t)s * fo + o] = hidden ? tanhf(z) : z;
      }
    in = out;
  }
  int classes = m->cfg.classes;
  double loss = 0;
  int right = 0;
  for (int s = 0; s < n; s++) {
    const float *z = m->acts[m->num_layers - 1] + (size_t)s * classes;
    float *p = m->probs + (size_t)s * classes;
    float zmax = z[0];
    int best = 0;
    for (int c = 1; c < classes; c++)
      if (z[c] > zmax) zmax = z[c], best = c;
    double sum = 0;
    for (int c = 0; c < classes; c++) sum += exp((double)(z[c] - zmax));
    for (int c = 0; c < classes; c++) p[c] = (float)(exp((double)(z[c] - zmax)) / sum);
    loss += log(sum) - (double)(z[b->y[s]] - zmax);
    right += best == b->y[s];
  }
  m->last_n = n;
  m->last_loss = loss / n;
  m->last_accuracy = (double)right / n;
  return 0;
}

static int mlp_backward(Network *net, int chunk, const void *batch_ptr, float loss_scale, Error *err) {
  Mlp *m = net->impl;
  const MlpBatch *b = batch_ptr;
  int rc = check_batch(m, chunk, b, err);
  if (rc) return rc;
  if (m->last_n != b->n) return error_set(err, ERR_ARG, "mlp: backward without the forward of this micro-batch");
  int n = b->n, classes = m->cfg.classes;
  float scale = loss_scale / (float)n;
  float *d = m->delta;
  for (int s = 0; s < n; s++)
    for (int c = 0; c < classes; c++)
      d[(size_t)s * classes + c] = (m->probs[(size_t)s * classes + c] - (c == b->y[s] ? 1.0f : 0.0f)) * scale;
  for (int l = m->num_layers - 1; l >= 0; l--) {
    int fi = m->fan_in[l], fo = m->fan_out[l];
    const float *in = l > 0 ? m->acts[l - 1] : b->x;
    const float *w = layer_weight(net, l);
    float *gw = net->grads + net->params[2 * l].offset, *gb = net->grads + net->params[2 * l + 1].offset;
    /* A phase steps one group: the other groups' gradients are not needed. */
    int wanted = m->phase < 0 || net->params[2 * l].param_group == m->phase;
    for (int o = 0; o < fo && wanted; o++) {
      float sb = 0;
      for (int s = 0; s < n; s++) sb += d[(size_t)s * fo + o];
      gb[o] += sb;
      for (int i = 0; i < fi; i++) {
        float sw = 0;
        for (int s = 0; s < n; s++) sw += d[(size_t)s * fo + o] * in[(size_t)s * fi + i];
        gw[(size_t)o * fi + i] += sw;
      }
    }
    if (l == 0) break;
    float *dp = m->delta_prev;
    for (int s = 0; s < n; s++)
      for (int i = 0; i < fi; i++) {
        float g = 0;
        for (int o = 0; o < fo; o++) g += d[(size_t)s * fo + o] * w[(size_t)o * fi + i];
        float a = in[(size_t)s * fi + i];
        dp[(size_t)s * fi + i] = g * (1.0f - a * a); /* tanh' */
      }
    m->delta_prev = d;
    m->delta = d = dp;
  }
  return 0;
}

static int mlp_metrics(const Network *net, NetMetric *metrics, int cap) {
  const Mlp *m = net->impl;
  if (cap >= 1) metrics[0] = (NetMetric){"loss", m->last_loss, 3};
  if (cap >= 2) metrics[1] = (NetMetric){"accuracy", m->last_accuracy, 3};
  return 2;
}

static void mlp_begin_phase(Network *net, int param_group) {
  Mlp *m = net->impl;
  m->phase = param_group;
}

static void mlp_free(Network *net) {
  Mlp *m = net->impl;
  if (!m) return;
  for (int l = 0; l < m->num_layers; l++) free(m->acts[l]);
  free(m->probs);
  free(m->delta);
  free(m->delta_prev);
  free(net->values);
  free(net->grads);
  free(m);
}

static const NetworkOps MLP_OPS = {.family = "mlp",
                                   .forward = mlp_forward,
                                   .backward = mlp_backward,
                                   .metrics = mlp_metrics,
                                   .unit = {"sample", "samples", "samples/s"},
                                   .begin_phase = mlp_begin_phase,
                                   .free = mlp_free};

int mlp_create(Network *net, const MlpConfig *cfg, int max_batch, Error *err) {
  memset(net, 0, sizeof *net);
  if (max_batch < 1) return error_set(err, ERR_ARG, "mlp: micro-batch size %d, expected >= 1", max_batch);
  Mlp *m = calloc(1, sizeof *m);
  if (!m) return error_set(err, ERR_NOMEM, "out of memory for the mlp");
  m->cfg = *cfg;
  m->max_batch = max_batch;
  m->num_layers = layer_sizes(cfg, m->fan_in, m->fan_out);
  m->width = cfg->inputs;
  for (int l = 0; l < m->num_layers; l++)
    if (m->fan_out[l] > m->width) m->width = m->fan_out[l];
  net->ops = &MLP_OPS;
  net->impl = m;
  net->num_tensors = 2 * m->num_layers;
  net->num_values = mlp_num_params(cfg);
  net->num_param_groups = cfg->param_groups > 1 ? cfg->param_groups : 1;
  net->num_chunks = 1;
  m->phase = -1;
  net->params = calloc((size_t)net->num_tensors, sizeof *net->params);
  net->values = calloc(net->num_values, sizeof(float));
  net->grads = calloc(net->num_values, sizeof(float));
  int ok = net->params && net->values && net->grads;
  for (int l = 0; l < m->num_layers && ok; l++)
    ok = (m->acts[l] = malloc((size_t)max_batch * m->fan_out[l] * sizeof(float))) != NULL;
  size_t wide = (size_t)max_batch * (size_t)m->width;
  ok = ok && (m->probs = malloc((size_t)max_batch * cfg->classes * sizeof(float))) &&
       (m->delta = malloc(wide * sizeof(float))) && (m->delta_prev = malloc(wide * sizeof(float)));
  if (!ok) {
    network_free(net);
    return error_set(err, ERR_NOMEM, "out of memory for the mlp's buffers");
  }
  size_t offset = 0;
  for (int l = 0; l < m->num_layers; l++) {
    for (int k = 0; k < 2; k++) {
      NetParam *p = &net->params[2 * l + k];
      snprintf(m->names[2 * l + k], sizeof m->names[0], "layers.%d.%s", l, k ? "bias" : "weight");
      p->name = m->names[2 * l + k];
      p->ndim = k ? 1 : 2;
      p->shape[0] = m->fan_out[l];
      p->shape[1] = k ? 0 : m->fan_in[l];
      p->numel = k ? (size_t)m->fan_out[l] : (size_t)m->fan_out[l] * m->fan_in[l];
      p->offset = offset;
      p->reduce = NET_REDUCE_DENSE;
      p->no_weight_decay = k;
      p->param_group = l * net->num_param_groups / m->num_layers;
      offset += p->numel;
    }
  }
  net->flops_per_unit = mlp_flops_per_sample(cfg);
  return 0;
}

void mlp_init_weights(Network *net, uint64_t seed) {
  for (int t = 0; t < net->num_tensors; t++) {
    const NetParam *p = &net->params[t];
    float *v = net->values + p->offset;
    if (p->ndim == 1) {
      memset(v, 0, p->numel * sizeof(float));
      continue;
    }
    double std = 1.0 / sqrt((double)p->shape[1]);
    for (size_t i = 0; i < p->numel; i++) v[i] = (float)(std * rng_normal(seed, STREAM_WEIGHTS, p->offset + i));
  }
}
